"""Online migration between the classic and the consumer group protocols (KIP-848):
a classic group with members becomes a consumer group when a consumer protocol member
joins, its classic members keep using JoinGroup/SyncGroup/Heartbeat with assignments
computed by the coordinator, and it becomes a classic group again when the last consumer
protocol member leaves; each state survives a restart."""

from __future__ import annotations

import struct
import uuid

import pytest
from kio.schema.errors import ErrorCode

from oncelog.coordinator.group.api import CommitOffset, HeartbeatRequest
from oncelog.coordinator.group.consumer_protocol import encode_assignment, parse_assignment
from oncelog.coordinator.group.state import PREPARING_REBALANCE, STABLE
from tests.support.group_harness import Harness, on_loop, subscription

SESSION_MS = 10_000


@pytest.fixture
def harness(tmp_path):
    h = Harness(tmp_path, consumer_session_timeout_ms=SESSION_MS, consumer_heartbeat_interval_ms=1000)
    h.broker.logs.create_topic("t", 4, {})
    yield h
    h.close()


PROTOCOLS = (("range", subscription("t")),)


def classic_group(h: Harness) -> list[str]:
    """A Stable classic group of two members holding t-0,1 and t-2,3."""
    joins = [h.join_new(protocols=PROTOCOLS) for _ in range(2)]
    h.finish_initial_delay()
    results = [join.result() for join in joins]
    leader = next(r for r in results if r.member_id == r.leader_id)
    ids = [r.member_id for r in results]
    assignments = {ids[0]: encode_assignment([("t", [0, 1])]), ids[1]: encode_assignment([("t", [2, 3])])}
    syncs = [h.sync(r.member_id, r.generation_id, assignments if r is leader else None) for r in results]
    assert all(s.result().error == ErrorCode.none for s in syncs)
    assert h.state() is STABLE
    return ids


def topic_id_of(h: Harness) -> uuid.UUID:
    info = h.broker.logs.topic("t")
    assert info is not None
    return info.topic_id


def consumer_heartbeat(h: Harness, member_id: str, epoch: int, owned=()):
    topic_id = topic_id_of(h)
    return h.coordinator.consumer_group_heartbeat(HeartbeatRequest(
        group_id="g", member_id=member_id, member_epoch=epoch, rebalance_timeout_ms=30_000 if epoch == 0 else -1,
        subscribed_topic_names=("t",) if epoch == 0 else None,
        owned_partitions=() if epoch == 0 else ((topic_id, tuple(owned)),), client_id="new",
        client_host="/127.0.0.1",
    ))


def rejoin_and_sync(h: Harness, member_id: str) -> tuple[int, list[int]]:
    """A classic member told to rebalance: JoinGroup (an eager member owns nothing then),
    SyncGroup; its generation and the partitions it got."""
    joined = h.join(member_id, protocols=PROTOCOLS).result()
    assert joined.error == ErrorCode.none and joined.leader_id == "" and not joined.members
    synced = h.sync(member_id, joined.generation_id).result()
    assert synced.error == ErrorCode.none
    ((topic, partitions),) = parse_assignment(synced.assignment) or (("t", ()),)
    assert topic == "t"
    return joined.generation_id, sorted(partitions)


@on_loop
def test_a_classic_group_with_members_is_upgraded_when_a_consumer_protocol_member_joins(harness):
    first, second = classic_group(harness)
    joined = consumer_heartbeat(harness, "new", 0)
    assert joined.error == ErrorCode.none
    group = harness.coordinator.group("g")
    assert group.group_type == "consumer" and set(group.consumer.members) == {first, second, "new"}
    assert group.consumer.members[first].uses_classic_protocol
    assert joined.member_epoch == 2 and joined.assignment == {}  # its partitions are still the others'
    # The classic members are told to rebalance, join again and get what the assignor left them.
    assert harness.heartbeat(first, 1) == ErrorCode.rebalance_in_progress
    generation, kept_first = rejoin_and_sync(harness, first)
    assert generation == 2 and kept_first and set(kept_first) <= {0, 1}
    assert harness.heartbeat(second, 1) == ErrorCode.rebalance_in_progress
    _, kept_second = rejoin_and_sync(harness, second)
    assert harness.heartbeat(second, 2) == ErrorCode.none
    topic_id = topic_id_of(harness)
    got = consumer_heartbeat(harness, "new", 2)
    assert got.assignment is not None
    assert sorted([*kept_first, *kept_second, *got.assignment[topic_id]]) == [0, 1, 2, 3]
    harness.restart()
    group = harness.coordinator.group("g")
    assert group.group_type == "consumer" and group.consumer.members[first].member_epoch == 2


@on_loop
def test_the_group_is_classic_again_when_the_last_consumer_protocol_member_leaves(harness):
    first, second = classic_group(harness)
    consumer_heartbeat(harness, "new", 0)
    for member_id in (first, second):
        assert harness.heartbeat(member_id, 1) == ErrorCode.rebalance_in_progress
        rejoin_and_sync(harness, member_id)
    left = consumer_heartbeat(harness, "new", -1)
    assert left.error == ErrorCode.none
    group = harness.coordinator.group("g")
    assert group.group_type == "classic" and group.state is PREPARING_REBALANCE
    assert set(group.members) == {first, second}
    joins = [harness.join(member_id, protocols=PROTOCOLS) for member_id in (first, second)]
    results = [join.result() for join in joins]
    assert all(r.error == ErrorCode.none for r in results)
    assert results[0].generation_id == group.generation_id > 2
    harness.restart()
    assert harness.coordinator.group("g").group_type == "classic"


@on_loop
def test_a_new_classic_member_joins_a_consumer_group_and_gets_its_assignment_from_the_coordinator(harness):
    joined = consumer_heartbeat(harness, "modern", 0)
    topic_id = topic_id_of(harness)
    required = harness.join(protocols=PROTOCOLS).result()
    assert required.error == ErrorCode.member_id_required
    classic_id = required.member_id
    first = harness.join(classic_id, protocols=PROTOCOLS).result()
    assert first.error == ErrorCode.none
    assert harness.sync(classic_id, first.generation_id).result().assignment == encode_assignment([])
    # The consumer member revokes half, then the classic member's rejoin gets them.
    revoke = consumer_heartbeat(harness, "modern", joined.member_epoch, owned=(0, 1, 2, 3))
    kept = sorted(revoke.assignment[topic_id])
    consumer_heartbeat(harness, "modern", joined.member_epoch, owned=kept)
    assert harness.heartbeat(classic_id, first.generation_id) == ErrorCode.rebalance_in_progress
    _, got = rejoin_and_sync(harness, classic_id)
    assert sorted([*kept, *got]) == [0, 1, 2, 3]
    # A classic member's offsets are checked against its generation (its member epoch).
    generation = harness.coordinator.group("g").consumer.members[classic_id].member_epoch
    offsets = {("t", 0): CommitOffset(1)}
    assert harness.coordinator.commit_offsets("g", classic_id, None, generation - 1, offsets) == \
        {("t", 0): ErrorCode.illegal_generation}
    assert harness.coordinator.leave_group("g", [(classic_id, None)]) == (ErrorCode.none, [ErrorCode.none])
    assert classic_id not in harness.coordinator.group("g").consumer.members


@on_loop
def test_no_upgrade_when_the_migration_policy_forbids_it(tmp_path):
    h = Harness(tmp_path, consumer_migration_policy="downgrade")
    h.broker.logs.create_topic("t", 4, {})
    try:
        classic_group(h)
        assert consumer_heartbeat(h, "new", 0).error == ErrorCode.group_id_not_found
        assert h.coordinator.group("g").group_type == "classic"
    finally:
        h.close()


def test_assignments_in_the_consumer_protocol_format():
    encoded = encode_assignment([("b", [2, 0]), ("a", [1])], 1)
    assert struct.unpack_from(">h", encoded)[0] == 1
    assert parse_assignment(encoded) == (("a", (1,)), ("b", (0, 2)))

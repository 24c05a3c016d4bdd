"""The consumer group protocol (KIP-848) in the group coordinator, on real storage with
a hand-moved clock: heartbeats, epochs, revocation before reassignment, session and
rebalance timeouts, static members, regex subscriptions, offsets checked against member
epochs, and everything rebuilt from `__consumer_offsets` after a restart."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.errors import ErrorCode

from oncelog.coordinator.group import consumer_records as cr
from oncelog.coordinator.group.api import CommitOffset, HeartbeatRequest
from oncelog.coordinator.group.consumer_group import ConsumerGroupState
from oncelog.coordinator.group.consumer_member import MemberState
from tests.support.group_harness import INITIAL_DELAY_MS, Harness, on_loop

SESSION_MS = 10_000
REBALANCE_MS = 20_000


@pytest.fixture
def harness(tmp_path):
    h = Harness(tmp_path, consumer_session_timeout_ms=SESSION_MS, consumer_heartbeat_interval_ms=1000)
    h.broker.logs.create_topic("t", 4, {})
    yield h
    h.close()


def topic_id(h: Harness, name: str = "t") -> uuid.UUID:
    info = h.broker.logs.topic(name)
    assert info is not None
    return info.topic_id


def heartbeat(h: Harness, member_id: str, epoch: int, *, owned=None, topics=None, regex=None, instance=None,
              assignor=None, group="g", api_version=1):
    joining = epoch == 0
    if joining and topics is None and regex is None:
        topics = ("t",)
    return h.coordinator.consumer_group_heartbeat(HeartbeatRequest(
        group_id=group, member_id=member_id, member_epoch=epoch, instance_id=instance,
        rebalance_timeout_ms=REBALANCE_MS if joining else -1,
        subscribed_topic_names=tuple(topics) if topics is not None else None, subscribed_topic_regex=regex,
        server_assignor=assignor,
        owned_partitions=() if joining else (None if owned is None else tuple(owned.items())),
        client_id="client", client_host="/127.0.0.1", api_version=api_version,
    ))


def partitions(result, h: Harness, name: str = "t") -> set[int]:
    assert result.assignment is not None
    return set(result.assignment.get(topic_id(h, name), ()))


def consumer_group(h: Harness, group_id: str = "g"):
    group = h.coordinator.group(group_id)
    assert group is not None and group.consumer is not None
    return group.consumer


def test_the_first_member_gets_every_partition_at_group_epoch_one(harness):
    result = heartbeat(harness, "a", 0)
    assert result.error == ErrorCode.none
    assert (result.member_id, result.member_epoch, result.heartbeat_interval_ms) == ("a", 1, 1000)
    assert partitions(result, harness) == {0, 1, 2, 3}
    group = consumer_group(harness)
    assert (group.group_epoch, group.assignment_epoch, group.state) == (1, 1, ConsumerGroupState.STABLE)


def test_partitions_move_to_a_new_member_only_after_their_owner_revoked_them(harness):
    t = topic_id(harness)
    a = heartbeat(harness, "a", 0)
    b = heartbeat(harness, "b", 0)
    assert (b.member_epoch, partitions(b, harness)) == (2, set())  # all still owned by a
    group = consumer_group(harness)
    assert group.members["b"].state is MemberState.UNRELEASED_PARTITIONS
    assert group.state is ConsumerGroupState.RECONCILING
    # a learns it must give two partitions up; it stays at epoch 1 until it does.
    a = heartbeat(harness, "a", 1, owned={t: (0, 1, 2, 3)})
    kept = partitions(a, harness)
    assert a.member_epoch == 1 and len(kept) == 2
    assert group.members["a"].state is MemberState.UNREVOKED_PARTITIONS
    assert heartbeat(harness, "b", 2, owned={t: ()}).assignment is None  # nothing released yet
    a = heartbeat(harness, "a", 1, owned={t: tuple(kept)})
    assert a.member_epoch == 2
    b = heartbeat(harness, "b", 2, owned={t: ()})
    assert partitions(b, harness) == {0, 1, 2, 3} - kept
    assert group.state is ConsumerGroupState.STABLE


def test_a_member_whose_session_expires_is_removed_and_its_partitions_reassigned(harness):
    t = topic_id(harness)
    heartbeat(harness, "a", 0)
    b = heartbeat(harness, "b", 0)
    a = heartbeat(harness, "a", 1, owned={t: (0, 1, 2, 3)})
    heartbeat(harness, "a", 1, owned={t: tuple(partitions(a, harness))})
    b = heartbeat(harness, "b", 2, owned={t: ()})
    harness.advance(SESSION_MS - 1000)
    b = heartbeat(harness, "b", 2, owned={t: tuple(partitions(b, harness))})
    harness.advance(1001)  # a said nothing for a whole session
    group = consumer_group(harness)
    assert set(group.members) == {"b"} and group.group_epoch == 3
    b = heartbeat(harness, "b", 2, owned={t: (0, 1)})
    assert (b.member_epoch, partitions(b, harness)) == (3, {0, 1, 2, 3})


def test_a_member_that_does_not_revoke_within_its_rebalance_timeout_is_fenced(harness):
    t = topic_id(harness)
    heartbeat(harness, "a", 0)
    heartbeat(harness, "b", 0)
    heartbeat(harness, "a", 1, owned={t: (0, 1, 2, 3)})
    for _ in range(REBALANCE_MS // 5000):
        harness.advance(5000)
        heartbeat(harness, "a", 1, owned={t: (0, 1, 2, 3)})  # alive, but keeps everything
        heartbeat(harness, "b", 2, owned={t: ()})
    assert "a" not in consumer_group(harness).members
    assert heartbeat(harness, "a", 1, owned={t: (0, 1, 2, 3)}).error == ErrorCode.unknown_member_id


def test_wrong_epochs_are_fenced_but_a_lost_answer_is_forgiven(harness):
    t = topic_id(harness)
    heartbeat(harness, "a", 0)
    assert heartbeat(harness, "a", 5, owned={t: ()}).error == ErrorCode.fenced_member_epoch
    heartbeat(harness, "b", 0)  # group epoch 2; a stays at 1 until it revokes
    kept = tuple(partitions(heartbeat(harness, "a", 1, owned={t: (0, 1, 2, 3)}), harness))
    a = heartbeat(harness, "a", 1, owned={t: kept})
    assert a.member_epoch == 2
    # The answer with epoch 2 was lost: a comes again with 1 and a subset of its partitions.
    again = heartbeat(harness, "a", 1, owned={t: kept})
    assert again.error == ErrorCode.none and again.member_epoch == 2
    assert heartbeat(harness, "a", 1, owned={t: (0, 1, 2, 3)}).error == ErrorCode.fenced_member_epoch


def test_heartbeat_requests_are_validated_as_kafka_does(harness):
    def request(**changes):
        fields = {"group_id": "g", "member_id": "m", "member_epoch": 0, "rebalance_timeout_ms": 1000,
                  "subscribed_topic_names": ("t",), "owned_partitions": ()}
        fields.update(changes)
        return harness.coordinator.consumer_group_heartbeat(HeartbeatRequest(**fields))

    assert request(group_id="").error == ErrorCode.invalid_group_id
    assert request(member_id="").error == ErrorCode.invalid_request  # v1: the client makes the id
    assert request(member_id="", api_version=0).member_id  # v0: the coordinator does
    assert request(rebalance_timeout_ms=-1).error == ErrorCode.invalid_request
    assert request(subscribed_topic_names=None).error == ErrorCode.invalid_request
    assert request(member_epoch=-3).error == ErrorCode.invalid_request
    assert request(instance_id="").error == ErrorCode.invalid_request
    unsupported = request(server_assignor="sticky")
    assert unsupported.error == ErrorCode.unsupported_assignor and "uniform, range" in unsupported.error_message
    assert request(member_id="x", subscribed_topic_names=None, subscribed_topic_regex="(?=t)").error \
        == ErrorCode.invalid_regular_expression
    assert request(member_id="y", member_epoch=3, owned_partitions=None).error == ErrorCode.unknown_member_id


def test_the_group_uses_the_assignor_most_members_ask_for(harness):
    harness.broker.logs.create_topic("u", 4, {})
    result = heartbeat(harness, "m1", 0, topics=("t", "u"), assignor="range")
    assert result.error == ErrorCode.none
    summary = harness.coordinator.consumer_group_describe("g")[2]
    assert summary is not None and summary.assignor_name == "range"


def test_static_member_leaving_for_now_comes_back_with_its_assignment_and_no_rebalance(harness):
    t = topic_id(harness)
    heartbeat(harness, "a", 0, instance="i-a")
    heartbeat(harness, "b", 0, instance="i-b")
    kept_by_a = partitions(heartbeat(harness, "a", 1, owned={t: (0, 1, 2, 3)}, instance="i-a"), harness)
    heartbeat(harness, "a", 1, owned={t: tuple(kept_by_a)}, instance="i-a")
    heartbeat(harness, "b", 2, owned={t: ()}, instance="i-b")
    group = consumer_group(harness)
    epoch = group.group_epoch
    # A second incarnation may not take the instance id while the first one is alive.
    assert heartbeat(harness, "a2", 0, instance="i-a").error == ErrorCode.unreleased_instance_id
    left = heartbeat(harness, "a", -2, instance="i-a")
    assert (left.error, left.member_epoch) == (ErrorCode.none, -2)
    back = heartbeat(harness, "a2", 0, instance="i-a")
    assert back.error == ErrorCode.none and back.member_id == "a2"
    assert partitions(back, harness) == kept_by_a
    assert group.group_epoch == epoch  # no rebalance
    assert set(group.members) == {"a2", "b"} and group.static_members["i-a"] == "a2"
    assert heartbeat(harness, "a", 2, owned={t: ()}, instance="i-a").error == ErrorCode.fenced_instance_id


def test_a_regex_subscription_follows_the_topics_it_matches(harness):
    harness.broker.logs.create_topic("orders-eu", 2, {})
    first = heartbeat(harness, "a", 0, regex="orders-.*")
    assert first.error == ErrorCode.none
    assert partitions(first, harness, "orders-eu") == {0, 1}
    assert consumer_group(harness).resolved_regexes["orders-.*"].topics == {"orders-eu"}
    owned = {topic_id(harness, "orders-eu"): (0, 1)}
    harness.broker.logs.create_topic("orders-us", 1, {})
    harness.advance(5_000)
    assert heartbeat(harness, "a", 1, owned=owned).member_epoch == 1  # refreshed at most every 10 s
    harness.advance(6_000)
    later = heartbeat(harness, "a", 1, owned=owned)
    assert later.member_epoch == 2
    assert partitions(later, harness, "orders-us") == {0}


def test_offsets_of_a_consumer_group_are_checked_against_the_member_epoch(harness):
    t = topic_id(harness)
    heartbeat(harness, "a", 0)
    coordinator = harness.coordinator
    offsets = {("t", 0): CommitOffset(5)}
    assert coordinator.commit_offsets("g", "a", None, 1, offsets) == {("t", 0): ErrorCode.none}
    assert coordinator.commit_offsets("g", "a", None, 0, offsets) == {("t", 0): ErrorCode.stale_member_epoch}
    assert coordinator.commit_offsets("g", "x", None, 1, offsets) == {("t", 0): ErrorCode.unknown_member_id}
    assert coordinator.commit_offsets("g", "a", None, 1, offsets, api_version=8) \
        == {("t", 0): ErrorCode.unsupported_version}
    assert coordinator.commit_offsets("g", "", None, -1, offsets) == {("t", 0): ErrorCode.unknown_member_id}
    txn = coordinator.txn_offset_commit("g", 1000, 0, "a", 0, None, offsets)
    assert txn == {("t", 0): ErrorCode.illegal_generation}  # KIP-447: the producer knows only this one
    assert coordinator.txn_offset_commit("g", 1000, 0, "a", 1, None, offsets) == {("t", 0): ErrorCode.none}
    assert coordinator.fetch_offsets("g", [("t", 0)], False, "a", 0)[0] == ErrorCode.stale_member_epoch
    assert coordinator.fetch_offsets("g", [("t", 0)], False, "zz", 1)[0] == ErrorCode.unknown_member_id
    error, fetched = coordinator.fetch_offsets("g", [("t", 0)], False, None, -1)
    assert (error, fetched[("t", 0)].offset) == (ErrorCode.none, 5)
    heartbeat(harness, "a", -1)
    # Empty now: commits without a member are taken, as for an empty classic group.
    assert coordinator.commit_offsets("g", "", None, -1, offsets) == {("t", 0): ErrorCode.none}
    assert t is not None


@on_loop
def test_consumer_and_classic_groups_are_listed_together_and_described_by_their_own_api(harness):
    heartbeat(harness, "a", 0, group="modern")
    classic = harness.join_new(group_id="old")
    harness.advance(INITIAL_DELAY_MS)
    assert classic.result().error == ErrorCode.none
    listed = {g.group_id: (g.group_type, g.protocol_type, g.state) for g in harness.coordinator.list_groups()}
    assert listed["modern"] == ("consumer", "consumer", "Stable")
    assert listed["old"] == ("classic", "consumer", "CompletingRebalance")
    assert [g.group_id for g in harness.coordinator.list_groups(types=["Consumer"])] == ["modern"]
    assert [g.group_id for g in harness.coordinator.list_groups(states=["stable"], types=["classic"])] == []
    error, message, _ = harness.coordinator.consumer_group_describe("old")
    assert (error, message) == (ErrorCode.group_id_not_found, "Group old is not a consumer group.")
    assert harness.coordinator.describe_group("modern") == (ErrorCode.none, None)  # DescribeGroups: Dead
    error, _, summary = harness.coordinator.consumer_group_describe("modern")
    assert error == ErrorCode.none and summary is not None
    assert (summary.state, summary.group_epoch, summary.assignment_epoch) == ("Stable", 1, 1)
    (member,) = summary.members
    assert member.member_id == "a" and member.subscribed_topic_names == ("t",)
    assert [(t.topic_name, t.partitions) for t in member.assignment] == [("t", (0, 1, 2, 3))]


def test_a_restarted_coordinator_rebuilds_the_group_from_its_records(harness):
    t = topic_id(harness)
    heartbeat(harness, "a", 0, instance="i-a")
    heartbeat(harness, "b", 0)
    a = heartbeat(harness, "a", 1, owned={t: (0, 1, 2, 3)}, instance="i-a")
    kept = partitions(a, harness)
    harness.coordinator.commit_offsets("g", "a", None, 1, {("t", 0): CommitOffset(7)})
    before = consumer_group(harness)
    snapshot = (before.group_epoch, before.assignment_epoch, dict(before.members), dict(before.target_assignment))
    harness.restart()
    after = consumer_group(harness)
    assert (after.group_epoch, after.assignment_epoch, after.members, after.target_assignment) == snapshot
    assert after.members["a"].state is MemberState.UNREVOKED_PARTITIONS
    assert harness.coordinator.fetch_offsets("g", [("t", 0)], False)[1][("t", 0)].offset == 7
    # The members carry on where they were.
    a = heartbeat(harness, "a", 1, owned={t: tuple(kept)}, instance="i-a")
    assert a.member_epoch == 2
    b = heartbeat(harness, "b", 2, owned={t: ()})
    assert partitions(b, harness) == {0, 1, 2, 3} - kept
    # Members that do not come back are removed once their session expires.
    harness.restart()
    harness.advance(SESSION_MS + 1)
    assert consumer_group(harness).members == {}


def test_deleting_a_consumer_group_needs_it_empty_and_survives_a_restart(harness):
    heartbeat(harness, "a", 0)
    harness.coordinator.commit_offsets("g", "a", None, 1, {("t", 1): CommitOffset(3)})
    assert harness.coordinator.delete_groups(["g"]) == {"g": ErrorCode.non_empty_group}
    assert heartbeat(harness, "a", -1).member_epoch == -1
    assert consumer_group(harness).state is ConsumerGroupState.EMPTY
    assert harness.coordinator.delete_groups(["g"]) == {"g": ErrorCode.none}
    harness.restart()
    assert harness.coordinator.group("g") is None


@on_loop
def test_an_empty_group_changes_protocol_and_keeps_its_offsets(harness):
    # A classic group whose members left becomes a consumer group on the first heartbeat...
    joined = harness.stable_group(1)
    member_id = joined[0].member_id
    harness.coordinator.commit_offsets("g", member_id, None, 1, {("t", 2): CommitOffset(11)})
    harness.coordinator.leave_group("g", [(member_id, None)])
    assert heartbeat(harness, "a", 0).error == ErrorCode.none
    assert harness.coordinator.group("g").group_type == "consumer"
    harness.restart()
    assert harness.coordinator.group("g").group_type == "consumer"
    assert harness.coordinator.fetch_offsets("g", [("t", 2)], False)[1][("t", 2)].offset == 11
    # ...and back to classic when a JoinGroup finds it empty.
    heartbeat(harness, "a", -1)
    join = harness.join_new()
    harness.finish_initial_delay()
    assert join.result().error == ErrorCode.none
    assert harness.coordinator.group("g").group_type == "classic"
    harness.restart()
    assert harness.coordinator.group("g").group_type == "classic"
    assert harness.coordinator.fetch_offsets("g", [("t", 2)], False)[1][("t", 2)].offset == 11


@on_loop
def test_a_classic_group_with_members_is_not_a_consumer_group(harness):
    harness.stable_group(1)
    result = heartbeat(harness, "a", 0)
    assert result.error == ErrorCode.group_id_not_found


def test_consumer_group_records_round_trip_in_kafkas_format():
    tid = uuid.UUID(int=99)
    values = [
        (cr.ConsumerGroupKey(3, "g"), cr.GroupEpochValue(4)),
        (cr.ConsumerGroupKey(4, "g"), cr.PartitionMetadataValue((cr.TopicMetadataValue(tid, "t", 3),))),
        (cr.ConsumerGroupKey(5, "g", "m"), cr.MemberMetadataValue(
            "i", None, "c", "/h", ("a", "b"), "x.*", 500, "range",
            cr.ClassicMetadataValue(6000, (("range", b"\x00\x01"),)))),
        (cr.ConsumerGroupKey(6, "g"), cr.TargetAssignmentEpochValue(4)),
        (cr.ConsumerGroupKey(7, "g", "m"), cr.TargetAssignmentMemberValue(((tid, (0, 2)),))),
        (cr.ConsumerGroupKey(8, "g", "m"), cr.CurrentAssignmentValue(4, 3, 1, ((tid, (0,)),), ((tid, (2,)),))),
        (cr.ConsumerGroupKey(16, "g", "x.*"), cr.RegularExpressionValue(("a", "b"), 7, 8)),
    ]
    for key, value in values:
        decoded_key = cr.decode_key(cr.encode_key(key))
        assert decoded_key == key
        assert cr.decode_value(key, cr.encode_value(value)) == value
    # A tagged field from a newer Kafka (MetadataHash, tag 0 of the epoch record) is skipped.
    newer = b"\x00\x00" + (4).to_bytes(4, "big") + b"\x01\x00\x08" + (123).to_bytes(8, "big")
    assert cr.decode_value(cr.ConsumerGroupKey(3, "g"), newer) == cr.GroupEpochValue(4)

"""The group coordinator in cluster mode, on real storage with a hand-moved clock: it
holds only the groups of the `__consumer_offsets` partitions it leads, loads them when
it becomes leader, drops them (answering whatever waits NOT_COORDINATOR) when it stops,
and answers NOT_COORDINATOR for every other group.

The broker is not started, so its `cluster` is a minimal stand-in with the metadata
image's partition count of `__consumer_offsets`, and the local topic is created as the
replica manager creates it; appends go through the standalone leadership (every write
is "replicated" at once) unless a test says otherwise. Failover between real brokers is
in tests/cluster/test_group_failover.py.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pytest
from kio.schema.errors import ErrorCode

from oncelog.broker.broker import Broker, data_dir_config
from oncelog.broker.handlers._groups import once_replicated
from oncelog.config.broker import BrokerConfig
from oncelog.coordinator.group.api import NO_OFFSET, CommitOffset
from oncelog.coordinator.group.coordinator import GroupCoordinator
from oncelog.coordinator.group.state import COMPLETING_REBALANCE, DEAD, PREPARING_REBALANCE, STABLE
from oncelog.kernel.internal_topics import CONSUMER_OFFSETS, partition_for
from oncelog.storage.config import LogConfig
from oncelog.storage.manager import LogManager
from tests.support.group_harness import INITIAL_DELAY_MS, Harness, on_loop

if TYPE_CHECKING:
    pass

PARTITIONS = 3
T0 = ("t", 0)
PRODUCER_ID = 4000


def group_in(partition: int, prefix: str = "g") -> str:
    """A group id of `__consumer_offsets` partition `partition`."""
    return next(f"{prefix}-{n}" for n in range(1000) if partition_for(f"{prefix}-{n}", PARTITIONS) == partition)


OWNED = "g"  # the Harness's own group (its helpers wait on it), of partition 1
ELSEWHERE = group_in(0)


class ClusterHarness(Harness):
    """The Harness without a standalone start-up's leadership of every partition: the
    coordinator loads a partition only when told it leads it, as in cluster mode."""

    def _open(self) -> None:
        config = BrokerConfig(data_dir_config(self.data_dir))
        self.broker = Broker(config)
        self.broker.logs = LogManager(config.log_dirs, LogConfig().with_overrides(config.log_defaults()))
        self.broker.logs.load()
        if self.broker.logs.topic(CONSUMER_OFFSETS) is None:
            self.broker.logs.create_topic(CONSUMER_OFFSETS, PARTITIONS, {"cleanup.policy": "compact"})
        self.coordinator = GroupCoordinator(self.broker, settings=self.settings, scheduler=self.clock)

    def lead(self, group_id: str, epoch: int = 1) -> int:
        partition = partition_for(group_id, PARTITIONS)
        self.coordinator.on_leadership(partition, True, epoch)
        return partition

    def resign(self, group_id: str, epoch: int = 2) -> None:
        self.coordinator.on_leadership(partition_for(group_id, PARTITIONS), False, epoch)


@pytest.fixture
def harness(tmp_path):
    running = ClusterHarness(tmp_path / "data")
    yield running
    running.close()


def commit(harness, group_id: str, offset: int, **kwargs):
    return harness.coordinator.commit_offsets(group_id, "", None, -1, {T0: CommitOffset(offset)}, **kwargs)


def fetched(harness, group_id: str, require_stable: bool = False):
    error, offsets = harness.coordinator.fetch_offsets(group_id, {T0}, require_stable)
    if error != ErrorCode.none:
        return error, {}
    # A partition asked for is left out of the answer when it has no offset (NO_OFFSET).
    fetched_offset = offsets.get(T0, NO_OFFSET)
    return error, {T0: (fetched_offset.offset, fetched_offset.error)}


@on_loop
def test_cluster_mode_loads_a_partition_only_once_it_leads_it(harness):
    harness.lead(OWNED)
    assert commit(harness, OWNED, 7) == {T0: ErrorCode.none}
    harness.restart()  # a new coordinator in cluster mode loads nothing by itself
    assert fetched(harness, OWNED) == (ErrorCode.not_coordinator, {})
    harness.lead(OWNED, epoch=2)
    assert fetched(harness, OWNED) == (ErrorCode.none, {T0: (7, ErrorCode.none)})


@on_loop
def test_every_api_answers_not_coordinator_for_a_group_led_elsewhere(harness):
    harness.lead(OWNED)
    coordinator = harness.coordinator
    offsets = {T0: CommitOffset(1)}
    assert harness.join(group_id=ELSEWHERE).result().error == ErrorCode.not_coordinator
    assert harness.sync("m", 1, group_id=ELSEWHERE).result().error == ErrorCode.not_coordinator
    assert harness.heartbeat("m", 1, group_id=ELSEWHERE) == ErrorCode.not_coordinator
    assert coordinator.leave_group(ELSEWHERE, [("m", None)]) == (ErrorCode.not_coordinator, [])
    assert coordinator.commit_offsets(ELSEWHERE, "", None, -1, offsets) == {T0: ErrorCode.not_coordinator}
    assert coordinator.txn_offset_commit(ELSEWHERE, PRODUCER_ID, 0, "", -1, None, offsets) == {
        T0: ErrorCode.not_coordinator}
    assert coordinator.fetch_offsets(ELSEWHERE, [T0], False) == (ErrorCode.not_coordinator, {})
    assert coordinator.delete_offsets(ELSEWHERE, [T0]) == (ErrorCode.not_coordinator, {})
    assert coordinator.delete_groups([ELSEWHERE]) == {ELSEWHERE: ErrorCode.not_coordinator}
    assert coordinator.describe_group(ELSEWHERE) == (ErrorCode.not_coordinator, None)
    assert coordinator.group(ELSEWHERE) is None  # nothing was created for it
    # The group of the partition led here works, and is the only one listed.
    assert commit(harness, OWNED, 1) == {T0: ErrorCode.none}
    assert [g.group_id for g in coordinator.list_groups()] == [OWNED]
    assert coordinator.describe_group(OWNED)[0] == ErrorCode.none


@on_loop
def test_resignation_answers_waiting_joins_not_coordinator_and_stops_the_timers(harness):
    harness.lead(OWNED)
    first = harness.join_new(group_id=OWNED)
    second = harness.join_new(group_id=OWNED)
    assert harness.state(OWNED) is PREPARING_REBALANCE and not first.done()
    group = harness.group(OWNED)
    harness.resign(OWNED)
    assert first.result().error == second.result().error == ErrorCode.not_coordinator
    assert harness.coordinator.group(OWNED) is None and group.state is DEAD
    harness.advance(10 * INITIAL_DELAY_MS + 60_000)  # no timer of the dropped group may act
    assert group.state is DEAD and harness.coordinator.list_groups() == []
    assert harness.join(group_id=OWNED).result().error == ErrorCode.not_coordinator


@on_loop
def test_resignation_answers_waiting_syncs_not_coordinator(harness):
    harness.lead(OWNED)
    joins = [harness.join_new(group_id=OWNED) for _ in range(2)]
    harness.finish_initial_delay()
    first, second = (join.result() for join in joins)
    assert harness.state(OWNED) is COMPLETING_REBALANCE
    follower = first if first.member_id != first.leader_id else second
    waiting = harness.sync(follower.member_id, follower.generation_id, group_id=OWNED)
    assert not waiting.done()  # waits for the leader's assignment
    harness.resign(OWNED)
    assert waiting.result().error == ErrorCode.not_coordinator


@on_loop
def test_a_new_leader_restores_the_stable_group_from_the_log(harness):
    harness.lead(OWNED)
    (member,) = harness.stable_group(1, group_id=OWNED)
    harness.resign(OWNED)
    assert harness.heartbeat(member.member_id, 1, group_id=OWNED) == ErrorCode.not_coordinator
    harness.lead(OWNED, epoch=3)  # leads it again (another broker would do the same)
    assert harness.state(OWNED) is STABLE
    assert harness.heartbeat(member.member_id, 1, group_id=OWNED) == ErrorCode.none
    assert harness.group(OWNED).members[member.member_id].assignment == b"a-0"


@on_loop
def test_resignation_drops_pending_transactional_offsets_and_the_next_leader_reloads_them(harness):
    partition = harness.lead(OWNED)
    offsets = {T0: CommitOffset(50)}
    assert harness.coordinator.txn_offset_commit(OWNED, PRODUCER_ID, 0, "", -1, None, offsets) == {
        T0: ErrorCode.none}
    harness.resign(OWNED)
    assert harness.coordinator._open_groups_by_producer == {}
    harness.lead(OWNED, epoch=3)
    assert fetched(harness, OWNED, require_stable=True) == (
        ErrorCode.none, {T0: (-1, ErrorCode.unstable_offset_commit)})
    # The COMMIT marker arrives at the new leader (WriteTxnMarkers) and completes them.
    harness.coordinator.complete_transaction(partition, PRODUCER_ID, True)
    assert fetched(harness, OWNED, require_stable=True) == (ErrorCode.none, {T0: (50, ErrorCode.none)})


@on_loop
def test_resignation_leaves_the_groups_of_other_partitions_alone(harness):
    other = group_in(2)
    assert len({partition_for(g, PARTITIONS) for g in (OWNED, ELSEWHERE, other)}) == 3
    harness.lead(OWNED)
    harness.lead(other)
    commit(harness, OWNED, 1)
    commit(harness, other, 2)
    harness.resign(OWNED)
    assert fetched(harness, other) == (ErrorCode.none, {T0: (2, ErrorCode.none)})
    assert [g.group_id for g in harness.coordinator.list_groups()] == [other]


@on_loop
def test_a_commit_refused_below_min_insync_replicas_answers_coordinator_not_available(harness):
    harness.lead(OWNED)
    commit(harness, OWNED, 1)
    harness.broker.leadership.check_min_isr = lambda topic, partition: ErrorCode.not_enough_replicas
    assert commit(harness, OWNED, 2) == {T0: ErrorCode.coordinator_not_available}
    assert fetched(harness, OWNED) == (ErrorCode.none, {T0: (1, ErrorCode.none)})


def test_an_unreplicated_write_is_answered_with_the_coordinator_error(harness):
    async def lost_leadership(topic, partition, end_offset, timeout_s):
        return ErrorCode.not_leader_or_follower

    async def body():
        harness.lead(OWNED)
        results = commit(harness, OWNED, 1) | {("t", 1): ErrorCode.offset_metadata_too_large}
        harness.broker.leadership.wait_for_replication = lost_leadership
        # Only the partitions whose write was accepted get the coordinator's error.
        assert await once_replicated(harness.coordinator, OWNED, results) == {
            T0: ErrorCode.not_coordinator, ("t", 1): ErrorCode.offset_metadata_too_large}

    asyncio.run(body())

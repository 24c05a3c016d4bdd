"""A group coordinator on real storage with a hand-moved clock (`Harness`), for the
group state machine, offsets and cluster-mode coordinator tests."""

from __future__ import annotations

import asyncio
import functools
import struct
from pathlib import Path

from kio.schema.errors import ErrorCode

from oncelog.broker.broker import Broker, data_dir_config
from oncelog.config.broker import BrokerConfig
from oncelog.coordinator.group.api import GroupSettings, GroupTimings, JoinRequest, JoinResult
from oncelog.coordinator.group.coordinator import GroupCoordinator
from oncelog.coordinator.group.scheduler import ManualScheduler
from oncelog.coordinator.group.state import PREPARING_REBALANCE, STABLE, Group, GroupState
from oncelog.names import CONSUMER_OFFSETS
from oncelog.storage.config import LogConfig
from oncelog.storage.manager import LogManager

SESSION_MS = 10_000
REBALANCE_MS = 30_000
INITIAL_DELAY_MS = 3_000


def subscription(*topics: str) -> bytes:
    """A ConsumerProtocolSubscription v0 (topics, null user data)."""
    body = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        body += struct.pack(">h", len(topic)) + topic.encode()
    return body + struct.pack(">i", -1)


RANGE = (("range", subscription("t")),)


def on_loop(test):
    """Run a synchronous test body inside a running event loop (the coordinator's
    JoinGroup/SyncGroup answers are futures of that loop)."""

    @functools.wraps(test)
    def run(*args, **kwargs):
        async def body():
            return test(*args, **kwargs)

        return asyncio.run(body())

    return run


class Harness:
    """A group coordinator on real logs under `data_dir`, with a manual clock."""

    def __init__(self, data_dir: Path, *, group_timings: GroupTimings | None = None, **settings) -> None:
        self.data_dir = data_dir
        self.group_timings = group_timings  # the groups' own configs (KIP-848), None: none
        self.clock = ManualScheduler()
        self.settings = GroupSettings(**{
            "initial_rebalance_delay_ms": INITIAL_DELAY_MS,
            "min_session_timeout_ms": 1000,
            "offsets_topic_partitions": 3,
            "offsets_retention_check_interval_ms": 10**12,
            **settings,
        })
        self._open()

    def _open(self) -> None:
        config = BrokerConfig(data_dir_config(self.data_dir))
        self.broker = Broker(config)
        self.broker.logs = LogManager(config.log_dirs, LogConfig().with_overrides(config.log_defaults()))
        self.broker.logs.load()
        self.coordinator = GroupCoordinator(self.broker, settings=self.settings, scheduler=self.clock,
                                            group_timings=self.group_timings)
        # As a standalone broker does: the topic exists (FindCoordinator created it) and
        # this broker leads, so coordinates, every partition of it.
        partitions = self.settings.offsets_topic_partitions
        if self.broker.logs.topic(CONSUMER_OFFSETS) is None:
            self.broker.logs.create_topic(CONSUMER_OFFSETS, partitions, {"cleanup.policy": "compact"})
        for partition in range(partitions):
            self.coordinator.on_leadership(partition, True, 0)

    def restart(self) -> None:
        """What a broker restart does to the coordinator: state is rebuilt from the log."""
        self.coordinator.close()
        self.broker.logs.close()
        self._open()

    def close(self) -> None:
        self.coordinator.close()
        self.broker.logs.close()

    def group(self, group_id: str = "g") -> Group | None:
        return self.coordinator.group(group_id)

    def state(self, group_id: str = "g") -> GroupState | None:
        group = self.coordinator.group(group_id)
        return None if group is None else group.state

    def advance(self, ms: int) -> None:
        self.clock.advance(ms)

    def finish_initial_delay(self) -> None:
        """Let the initial rebalance delay run out; each member that joined during a delay
        extends it once more (up to the rebalance timeout), as in Kafka."""
        for _ in range(REBALANCE_MS // INITIAL_DELAY_MS + 1):
            if self.state() is not PREPARING_REBALANCE:
                return
            self.advance(INITIAL_DELAY_MS)

    def join(self, member_id: str = "", *, group_id: str = "g", instance: str | None = None, protocols=RANGE,
             session_ms: int = SESSION_MS, rebalance_ms: int = REBALANCE_MS, require_known: bool = True,
             skip_assignment: bool = True, client_id: str = "client") -> asyncio.Future:
        return self.coordinator.join_group(JoinRequest(
            group_id=group_id, member_id=member_id, group_instance_id=instance, client_id=client_id,
            client_host="/127.0.0.1", session_timeout_ms=session_ms, rebalance_timeout_ms=rebalance_ms,
            protocol_type="consumer", protocols=tuple(protocols), require_known_member_id=require_known,
            supports_skip_assignment=skip_assignment,
        ))

    def join_new(self, **kwargs) -> asyncio.Future:
        """Join without a member id the way v4+ clients do: get the id, join with it."""
        first = self.join(**kwargs)
        if kwargs.get("instance") is not None:
            return first  # static members get their id in the same round trip
        result = first.result()
        assert result.error == ErrorCode.member_id_required
        return self.join(result.member_id, **kwargs)

    def sync(self, member_id: str, generation: int, assignments=None, *, group_id: str = "g",
             instance: str | None = None) -> asyncio.Future:
        return self.coordinator.sync_group(group_id, generation, member_id, instance, "consumer", None,
                                           assignments or {})

    def heartbeat(self, member_id: str, generation: int, *, group_id: str = "g", instance: str | None = None):
        return self.coordinator.heartbeat(group_id, generation, member_id, instance)

    def stable_group(self, count: int, *, instances: list[str | None] | None = None, **kwargs) -> list[JoinResult]:
        """`count` members in a Stable group; each gets assignment b"a-<i>"."""
        instances = instances or [None] * count
        joins = [self.join_new(instance=instance, **kwargs) for instance in instances]
        self.finish_initial_delay()
        results = [join.result() for join in joins]
        assert all(r.error == ErrorCode.none for r in results), results
        leader = next(r for r in results if r.member_id == r.leader_id)
        assignments = {r.member_id: f"a-{i}".encode() for i, r in enumerate(results)}
        syncs = [self.sync(r.member_id, r.generation_id, assignments if r is leader else None,
                           instance=instances[i]) for i, r in enumerate(results)]
        assert all(s.result().error == ErrorCode.none for s in syncs)
        assert self.state() is STABLE
        return results

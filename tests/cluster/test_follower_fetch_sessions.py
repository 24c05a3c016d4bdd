"""Followers fetch through incremental fetch sessions (KIP-227): a ReplicaFetcher (the
follower's side, with real follower logs) against a real broker as its leader. It opens
one session, then fetches incrementally; when the leader has lost the session
(FETCH_SESSION_ID_NOT_FOUND) or the epochs disagree (INVALID_FETCH_SESSION_EPOCH) it
goes back to a full fetch, a new session, and replication goes on.

The leader is a standalone broker, which serves a replica's fetch as a consumer's (up to
its high watermark): enough for the session protocol, which is the same for both; the
3-broker replication itself is tests/cluster/test_cluster_metadata.py's and
test_failover.py's."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace

from oncelog import EmbeddedBroker
from oncelog.cluster.fetcher import FetchSessionState, FetchState, ReplicaFetchers
from oncelog.kernel.fetch_sessions import INITIAL_EPOCH, PartitionRequest
from oncelog.protocol.messages import ErrorCode
from oncelog.storage.config import LogConfig
from oncelog.storage.log import PartitionLog
from tests.support.kafka import create_topic, produce_to_partitions

LEADER_ID = 1
PARTITIONS = 3
FOLLOWER_CONFIG = {
    "replica.fetch.wait.max.ms": 200,
    "replica.fetch.max.bytes": 1 << 20,
    "replica.fetch.response.max.bytes": 10 << 20,
    "replica.fetch.backoff.ms": 100,
}


async def until(predicate, what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def test_follower_replicates_through_a_session_and_starts_a_new_one_after_session_errors(tmp_path):
    with EmbeddedBroker(tmp_path / "leader") as leader:
        topic = "followed"
        create_topic(leader.bootstrap_servers, topic, partitions=PARTITIONS)
        asyncio.run(_follow(leader, topic, tmp_path / "follower"))


async def _follow(leader: EmbeddedBroker, topic: str, directory: Path) -> None:
    logs = [PartitionLog.open(directory / f"{topic}-{p}", topic, p, LogConfig(), recover=False, replicated=True)
            for p in range(PARTITIONS)]
    host, port = leader.bootstrap_servers.rsplit(":", 1)
    follower = SimpleNamespace(node_id=2, config=FOLLOWER_CONFIG, partition_appended=lambda *tp: None)
    fetchers = ReplicaFetchers(follower, lambda _node: (host, int(port)))  # type: ignore[arg-type]
    for partition, partition_log in enumerate(logs):
        fetchers.add_partition((topic, partition), LEADER_ID, 0, partition_log)
    fetcher = fetchers.fetcher_of(LEADER_ID)
    assert fetcher is not None
    cache = leader.broker.fetch_sessions
    written = 0

    async def produce_and_replicate(what: str) -> None:
        nonlocal written
        await asyncio.to_thread(produce_to_partitions, leader.bootstrap_servers, topic,
                                [(p, f"{what}-{p}".encode()) for p in range(PARTITIONS)])
        written += 1
        await until(lambda: all(log_.log_end_offset == written and log_.high_watermark == written for log_ in logs),
                    f"the follower to replicate {what}")

    try:
        await produce_and_replicate("first")
        cache = leader.broker.fetch_sessions
        assert cache is not None and cache.created == 1 and len(cache) == 1
        first_session = fetcher.session.session_id
        assert first_session != 0 and cache.get(first_session) is not None
        incremental = cache.incremental_fetches
        await produce_and_replicate("second")
        # The fetch that brought "second" may have been parked at the leader, and counted,
        # before the count above was read: the follower's next fetch is incremental too.
        await until(lambda: cache.incremental_fetches > incremental, "an incremental fetch in the session")
        assert cache.created == 1

        # The leader loses the session (a restart, an eviction): FETCH_SESSION_ID_NOT_FOUND.
        leader.call(lambda: cache.close(first_session))
        # A fetch already in flight may bring the new records before a fetch meets the
        # error: wait for the follower to open its new session.
        await produce_and_replicate("after-not-found")
        await until(lambda: cache.created == 2 and fetcher.session.session_id not in (0, first_session),
                    "the follower to open a second session")
        second_session = fetcher.session.session_id

        # The epochs disagree: INVALID_FETCH_SESSION_EPOCH, then a full fetch closing the old session.
        fetcher.session.epoch += 5
        await produce_and_replicate("after-wrong-epoch")
        await until(lambda: cache.created == 3, "the follower to open a third session")
        assert len(cache) == 1
        assert cache.get(second_session) is None
    finally:
        await fetchers.close()
        for log_ in logs:
            log_.close()


def _state() -> FetchState:
    return FetchState(log=None, leader_epoch=0)  # type: ignore[arg-type]


def test_session_state_names_only_changed_partitions_and_forgets_the_dropped_ones():
    session = FetchSessionState()
    states = {("t", p): _state() for p in range(3)}
    at = {tp: PartitionRequest(fetch_offset=5, partition_max_bytes=100) for tp in states}
    named, forgotten = session.next_request({tp: (at[tp], states[tp]) for tp in states})
    assert (set(named), forgotten) == (set(states), [])  # the first fetch is full
    assert session.answered(ErrorCode.none, 77, INITIAL_EPOCH)
    assert (session.session_id, session.epoch) == (77, 1)

    moved = {**at, ("t", 1): PartitionRequest(fetch_offset=9, partition_max_bytes=100)}
    named, forgotten = session.next_request({tp: (moved[tp], states[tp]) for tp in (("t", 0), ("t", 1))})
    assert (list(named), forgotten) == ([("t", 1)], [("t", 2)])
    assert session.answered(ErrorCode.none, 77, 1)
    assert session.epoch == 2

    # A partition added anew (a new FetchState) makes the next fetch a full one.
    named, _ = session.next_request({("t", 0): (at[("t", 0)], _state())})
    assert session.epoch == INITIAL_EPOCH and list(named) == [("t", 0)]


def test_session_state_after_errors():
    session = FetchSessionState(session_id=77, epoch=4)
    assert not session.answered(ErrorCode.invalid_fetch_session_epoch, 0, 4)
    assert (session.session_id, session.epoch) == (77, INITIAL_EPOCH)  # the full fetch closes 77
    session = FetchSessionState(session_id=77, epoch=4)
    assert not session.answered(ErrorCode.fetch_session_id_not_found, 0, 4)
    assert (session.session_id, session.epoch) == (0, INITIAL_EPOCH)
    session = FetchSessionState(session_id=77, epoch=4)
    assert session.answered(ErrorCode.none, 0, 4)  # the leader closed it
    assert (session.session_id, session.epoch) == (0, INITIAL_EPOCH)

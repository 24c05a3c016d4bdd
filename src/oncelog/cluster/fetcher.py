"""Followers fetching from leaders (Kafka's ReplicaFetcherThread, one per leader).

Each fetch names, for every partition, the follower's log end offset and the epoch of
its last batch (`last_fetched_epoch`, Fetch v12). When the leader's log diverges from
the follower's at that epoch it answers `diverging_epoch` (KIP-595's check, which Kafka
followers use since 2.7) and the follower truncates to where both logs agree before
fetching again; so replicas never diverge after a leader change.

Fetched batches are appended with their offsets and leader epochs as the leader wrote
them (`PartitionLog.append_as_follower`), which also rebuilds producer state and the
aborted-transaction index the way the leader built them. The follower's high watermark
is min(the leader's, its own log end).

Each fetcher keeps an incremental fetch session (KIP-227) with its leader, as Kafka's
FetchSessionHandler does: a full fetch opens it, then each fetch names only the
partitions added or whose position moved, and those left out (`forgotten_topics_data`);
the leader answers only the partitions that changed. FETCH_SESSION_ID_NOT_FOUND starts
over with a new session, any other session error, a lost connection or a partition
added anew closes the old one with the next full fetch.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import struct
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from oncelog import clock
from oncelog.kernel.fetch_sessions import INITIAL_EPOCH, NO_SESSION_ID, PartitionRequest, next_epoch
from oncelog.kernel.peer import PeerConnection
from oncelog.protocol.fetch_response import FetchAnswer, FetchedPartition, read_fetch_response
from oncelog.protocol.messages import ErrorCode, request_class
from oncelog.security.inter_broker import PeerSecurity
from oncelog.storage.errors import UnexpectedAppendOffsetError

if TYPE_CHECKING:
    from oncelog.kernel.node import Node
    from oncelog.storage.log import PartitionLog

log = logging.getLogger("oncelog.cluster.fetcher")

FETCH_VERSION = 12
SESSION_ERRORS = frozenset({ErrorCode.fetch_session_id_not_found, ErrorCode.invalid_fetch_session_epoch})
RETRIABLE = frozenset({
    ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch,
    ErrorCode.unknown_topic_or_partition, ErrorCode.leader_not_available, ErrorCode.unknown_topic_id,
})


@dataclass
class FetchState:
    log: PartitionLog
    leader_epoch: int
    delayed_until: float = 0.0  # loop time before which the partition is left out


@dataclass
class FetchSessionState:
    """This fetcher's side of its fetch session with the leader (Kafka's FetchSessionHandler)."""

    session_id: int = NO_SESSION_ID
    epoch: int = INITIAL_EPOCH  # of the next request; INITIAL_EPOCH: a full fetch
    # What the leader's session holds: each partition's request, and the FetchState it was for.
    sent: dict[tuple[str, int], tuple[PartitionRequest, FetchState]] = field(default_factory=dict)

    def next_request(self, wanted: dict[tuple[str, int], tuple[PartitionRequest, FetchState]]
                     ) -> tuple[dict[tuple[str, int], PartitionRequest], list[tuple[str, int]]]:
        """The partitions the next request names, and those it forgets."""
        if any(tp in self.sent and self.sent[tp][1] is not state for tp, (_, state) in wanted.items()):
            # A partition added anew (a new leader epoch, a new log): the leader's idea of
            # what we were last told of it may be stale, so start a new session.
            self.epoch = INITIAL_EPOCH
        previous, self.sent = self.sent, dict(wanted)
        if self.epoch == INITIAL_EPOCH:
            return {tp: request for tp, (request, _) in wanted.items()}, []
        changed = {tp: request for tp, (request, _) in wanted.items()
                   if tp not in previous or previous[tp][0] != request}
        return changed, [tp for tp in previous if tp not in wanted]

    def answered(self, code: ErrorCode, session_id: int, request_epoch: int) -> bool:
        """Take the leader's answer to a request of `request_epoch`; whether its partitions
        are to be processed."""
        if self.epoch != request_epoch:
            # Reset while the request was out: the next fetch is full whatever the answer;
            # it closes the session the leader may have opened meanwhile.
            if session_id != NO_SESSION_ID:
                self.session_id = session_id
            return code == ErrorCode.none
        if code == ErrorCode.fetch_session_id_not_found:
            self.session_id, self.epoch = NO_SESSION_ID, INITIAL_EPOCH
            return False
        if code != ErrorCode.none:
            self.failed()
            return False
        if session_id == NO_SESSION_ID:  # none opened, or the leader closed ours
            self.session_id, self.epoch = NO_SESSION_ID, INITIAL_EPOCH
        elif self.epoch == INITIAL_EPOCH:
            self.session_id, self.epoch = session_id, next_epoch(INITIAL_EPOCH)
        else:
            self.epoch = next_epoch(self.epoch)
        return True

    def failed(self) -> None:
        """The request or its answer went wrong: the next fetch is full and closes the session."""
        self.epoch = INITIAL_EPOCH


class ReplicaFetchers:
    """The fetchers of this broker, one per leader it follows partitions of."""

    def __init__(self, broker: Node, broker_address, security: PeerSecurity | None = None) -> None:
        self.broker = broker
        self._address_of = broker_address  # node id -> (host, port) or None
        self._security = security  # TLS and SASL to the leaders' inter-broker listener
        self._fetchers: dict[int, ReplicaFetcher] = {}

    def add_partition(self, tp, leader_id: int, leader_epoch: int, partition_log: PartitionLog) -> None:
        fetcher = self._fetchers.get(leader_id)
        if fetcher is None:
            fetcher = self._fetchers[leader_id] = ReplicaFetcher(self.broker, leader_id, self._address_of,
                                                                 self._security)
            fetcher.start()
        fetcher.partitions[tp] = FetchState(partition_log, leader_epoch)
        fetcher.wake()

    def fetcher_of(self, leader_id: int) -> ReplicaFetcher | None:
        return self._fetchers.get(leader_id)

    def remove_partition(self, tp) -> None:
        for fetcher in self._fetchers.values():
            fetcher.partitions.pop(tp, None)

    def leader_moved(self, leader_id: int) -> None:
        """The leader re-registered (maybe at a new address): reconnect."""
        fetcher = self._fetchers.get(leader_id)
        if fetcher is not None:
            fetcher.reconnect()

    async def close(self) -> None:
        fetchers, self._fetchers = list(self._fetchers.values()), {}
        for fetcher in fetchers:
            await fetcher.stop()


class ReplicaFetcher:
    def __init__(self, broker: Node, leader_id: int, address_of, security: PeerSecurity | None = None) -> None:
        self.broker = broker
        self.leader_id = leader_id
        self._security = security
        self.partitions: dict[tuple[str, int], FetchState] = {}
        self._address_of = address_of
        self._peer: PeerConnection | None = None
        self._task: asyncio.Task | None = None
        self._wakeup = asyncio.Event()
        self.session = FetchSessionState()
        config = broker.config
        self._wait_ms = config["replica.fetch.wait.max.ms"]
        self._partition_max_bytes = config["replica.fetch.max.bytes"]
        self._max_bytes = config["replica.fetch.response.max.bytes"]
        self._backoff_s = config["replica.fetch.backoff.ms"] / 1000

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"replica-fetcher-{self.leader_id}")

    def wake(self) -> None:
        self._wakeup.set()

    def reconnect(self) -> None:
        self.session.failed()
        if self._peer is not None:
            self._peer.close()
            self._peer = None

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self.reconnect()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            now = loop.time()
            wanted = {tp: state for tp, state in self.partitions.items() if state.delayed_until <= now}
            if not wanted:
                self._wakeup.clear()
                try:
                    async with asyncio.timeout(self._backoff_s):
                        await self._wakeup.wait()
                except TimeoutError:
                    pass
                continue
            peer = self._connection()
            if peer is None:
                await asyncio.sleep(self._backoff_s)
                continue
            if not await self._fetch_once(peer, wanted):
                await asyncio.sleep(self._backoff_s)

    async def _fetch_once(self, peer: PeerConnection, wanted: dict[tuple[str, int], FetchState]) -> bool:
        """One fetch and its answer taken in; False when either failed. The answer's
        records are views of the response frame, released on return (not kept through the
        next long poll)."""
        request = self._request(wanted)
        try:
            body = await peer.request(request, timeout_s=self._wait_ms / 1000 + 10, raw=True)
            response = read_fetch_response(FETCH_VERSION, body)
        except (ConnectionError, TimeoutError, struct.error, ValueError, IndexError) as error:
            log.debug("fetch from broker %d failed: %s", self.leader_id, error)
            self.session.failed()
            return False
        try:
            self._process(response, request.session_epoch, wanted, asyncio.get_running_loop().time())
        except Exception:
            log.exception("processing a fetch response from broker %d failed", self.leader_id)
            self.session.failed()  # the leader's session thinks we took all of it
            return False
        return True

    def _connection(self) -> PeerConnection | None:
        address = self._address_of(self.leader_id)
        if address is None:
            return None
        if self._peer is None:
            self._peer = PeerConnection(self.leader_id, *address, client_id=f"broker-{self.broker.node_id}-fetcher",
                                        security=self._security)
        else:
            self._peer.retarget(*address)
        return self._peer

    def _request(self, wanted: dict) -> Any:
        request_type: Any = request_class(1, FETCH_VERSION)  # the Fetch request of FETCH_VERSION
        module = sys.modules[request_type.__module__]  # FetchTopic, FetchPartition of this version
        positions = {tp: (self._position(state), state) for tp, state in sorted(wanted.items())}
        session = self.session
        named, forgotten = session.next_request(positions)
        by_topic: dict[str, list] = {}
        for (topic, partition), position in named.items():
            by_topic.setdefault(topic, []).append(module.FetchPartition(
                partition=partition,
                current_leader_epoch=position.current_leader_epoch,
                fetch_offset=position.fetch_offset,
                last_fetched_epoch=position.last_fetched_epoch,
                log_start_offset=position.log_start_offset,
                partition_max_bytes=position.partition_max_bytes,
            ))
        forgotten_by_topic: dict[str, list[int]] = {}
        for topic, partition in forgotten:
            forgotten_by_topic.setdefault(topic, []).append(partition)
        return request_type(
            cluster_id=None,
            replica_id=self.broker.node_id,
            max_wait=datetime.timedelta(milliseconds=self._wait_ms),
            min_bytes=1,
            max_bytes=self._max_bytes,
            isolation_level=0,
            session_id=session.session_id,
            session_epoch=session.epoch,
            topics=tuple(module.FetchTopic(topic=topic, partitions=tuple(parts)) for topic, parts in by_topic.items()),
            forgotten_topics_data=tuple(module.ForgottenTopic(topic=topic, partitions=tuple(parts))
                                        for topic, parts in forgotten_by_topic.items()),
            rack_id="",
        )

    def _position(self, state: FetchState) -> PartitionRequest:
        partition_log = state.log
        return PartitionRequest(
            fetch_offset=partition_log.log_end_offset,
            partition_max_bytes=self._partition_max_bytes,
            current_leader_epoch=state.leader_epoch,
            last_fetched_epoch=partition_log.leader_epoch_cache.latest_epoch,
            log_start_offset=partition_log.log_start_offset,
        )

    def _process(self, response: FetchAnswer, request_epoch: int, wanted: dict[tuple[str, int], FetchState],
                 now: float) -> None:
        code = ErrorCode(response.error)
        if not self.session.answered(code, response.session_id, request_epoch):
            if code in SESSION_ERRORS:
                log.info("fetch from broker %d: %s; the next fetch is a full one", self.leader_id, code.name)
                return  # at once, no backoff: Kafka's fetcher goes on with a full fetch
            log.info("fetch from broker %d: %s", self.leader_id, code.name)
            for waiting in wanted.values():
                waiting.delayed_until = now + self._backoff_s
            return
        for tp, data in response.partitions.items():
            state = self.partitions.get(tp)
            if state is None or state is not wanted.get(tp):
                continue  # removed or re-added while the fetch was out
            self._process_partition(tp, state, data, now)

    def _process_partition(self, tp, state: FetchState, data: FetchedPartition, now: float) -> None:
        partition_log = state.log
        code = ErrorCode(data.error)
        if code in RETRIABLE:
            # The leader moved or has not seen the change yet: wait for metadata.
            state.delayed_until = now + self._backoff_s
            return
        if code == ErrorCode.offset_out_of_range:
            self._handle_out_of_range(tp, partition_log, data)
            return
        if code != ErrorCode.none:
            log.warning("%s-%d: fetch from broker %d: %s", *tp, self.leader_id, code.name)
            state.delayed_until = now + self._backoff_s
            return
        diverging = data.diverging_epoch
        if diverging is not None and diverging[0] >= 0 and diverging[1] >= 0:
            self._truncate_to_divergence(tp, partition_log, *diverging)
            return
        if data.records:
            self._append(tp, partition_log, data.records)
        high_watermark = min(data.high_watermark, partition_log.log_end_offset)
        if partition_log.update_high_watermark(high_watermark):
            self.broker.partition_appended(*tp)
        # The leader's log start (retention, DeleteRecords) moves ours, up to our HW.
        new_start = min(data.log_start_offset, partition_log.high_watermark)
        if new_start > partition_log.log_start_offset:
            partition_log.delete_records_before(new_start)

    def _append(self, tp, partition_log: PartitionLog, records) -> None:
        # As fetched, no copy: a follower's append never writes into the batches.
        try:
            partition_log.append_as_follower(records, now_ms=clock.now_ms())
        except UnexpectedAppendOffsetError as error:
            # Kafka's Partition: an empty log whose start fell inside the leader's first
            # batch (the leader's log start moved into it) starts over at that batch.
            if partition_log.log_end_offset != partition_log.log_start_offset:
                raise
            log.info("%s-%d: empty log restarts at offset %d to take the leader's batch", *tp, error.first_offset)
            partition_log.truncate_fully_and_start_at(error.first_offset)
            partition_log.append_as_follower(records, now_ms=clock.now_ms())

    def _truncate_to_divergence(self, tp, partition_log: PartitionLog, epoch: int, end_offset: int) -> None:
        """KIP-279/595: keep what both logs hold. The leader's epoch at or below our last
        one ended at `end_offset`; if we hold that epoch too, truncate to the smaller of
        both ends, else to the end of our largest epoch not above it."""
        own_epoch, own_end = partition_log.end_offset_for_epoch(epoch)
        if own_epoch == epoch:
            target = min(end_offset, own_end)
        else:
            target = min(own_end, end_offset) if own_epoch >= 0 else end_offset
        target = min(target, partition_log.log_end_offset)
        log.info("%s-%d: diverging from broker %d at epoch %d end %d: truncating %d -> %d", *tp,
                 self.leader_id, epoch, end_offset, partition_log.log_end_offset, target)
        partition_log.truncate_to(target)

    def _handle_out_of_range(self, tp, partition_log: PartitionLog, data: FetchedPartition) -> None:
        """The follower's log end is outside the leader's log: below its start (deleted
        there) or, with no epochs to compare, past its end."""
        if data.log_start_offset >= 0 and partition_log.log_end_offset < data.log_start_offset:
            log.info("%s-%d: behind the leader's log start %d: starting over there", *tp, data.log_start_offset)
            partition_log.truncate_fully_and_start_at(data.log_start_offset)
        elif data.high_watermark >= 0 and partition_log.log_end_offset > data.high_watermark:
            partition_log.truncate_to(data.high_watermark)


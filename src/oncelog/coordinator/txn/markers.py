"""Phase two of a transaction: a COMMIT or ABORT marker on every partition it wrote,
each written by that partition's leader (Kafka's TransactionMarkerChannelManager).

- The coordinator's broker writes the markers of the partitions it leads itself; the
  others go to their leaders in WriteTxnMarkers requests. One request is out per leader
  at a time, and it carries every marker queued for that leader when it left, of every
  transaction (Kafka's channel manager drains its queue per broker the same way): with
  16 producers committing at once, a transaction's markers do not wait behind 15
  requests of the others, so it completes about one round trip after its decision, and
  its producer's next AddPartitionsToTxn is not refused meanwhile (CONCURRENT_TRANSACTIONS).
  A marker whose write is given up before its request left is taken out of the queue;
  one already in a request stays there (the others in it need it), and the request's own
  timeout, not the caller's, bounds it.
- Every marker is written with acks=all: a leader answers once the marker is on the
  ISR, so a marker acknowledged here survives the leader's failure.
- A partition whose leader moved, has none yet, or is under min.insync.replicas is
  retried (with backoff) until it takes the marker or its topic is deleted. A change in
  the cluster metadata (a broker fenced, a partition's new leader or ISR) cuts the
  backoff short, or skips it when it came during the round, so a marker reaches a new
  leader within milliseconds of its election.
- TRANSACTION_COORDINATOR_FENCED or INVALID_PRODUCER_EPOCH from a partition means a
  newer coordinator or producer epoch has been there: this coordinator is a zombie and
  stops, leaving the transaction to the coordinator that fenced it. So does losing the
  `__transaction_state` partition (`still_current` turns false).

`append_marker_here` is also what the WriteTxnMarkers handler does for each partition:
append the marker and complete the group's pending transactional offsets when the
partition is one of `__consumer_offsets`; the handler then waits for the ISR.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from oncelog.kernel.internal_topics import CONSUMER_OFFSETS
from oncelog.kernel.partitions import AppendRefused, append_marker
from oncelog.kernel.peer import PeerPool
from oncelog.kernel.topics import error_code_for
from oncelog.names import TopicPartition
from oncelog.protocol.messages import ErrorCode, request_class
from oncelog.storage.errors import LogError

if TYPE_CHECKING:
    from oncelog.kernel.node import Node

log = logging.getLogger("oncelog.txn.markers")

WRITE_TXN_MARKERS_VERSION = 2  # carries the transaction version (KIP-890 part 2)
FIRST_BACKOFF_S = 0.05
MAX_BACKOFF_S = 1.0
# A newer coordinator (or producer epoch) has written to the partition: stop here.
FENCED = frozenset({ErrorCode.transaction_coordinator_fenced, ErrorCode.invalid_producer_epoch})


@dataclass(frozen=True, slots=True)
class TxnMarker:
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    transaction_version: int = 0

    @property
    def kind(self) -> str:
        return "COMMIT" if self.commit else "ABORT"


@dataclass(slots=True)
class _Queued:
    """A marker for some partitions of one leader, waiting for the next request there."""

    marker: TxnMarker
    partitions: list[TopicPartition]
    answer: asyncio.Future[dict[TopicPartition, ErrorCode]] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future())


def append_marker_here(broker: Node, topic: str, partition: int, marker: TxnMarker) -> tuple[ErrorCode, int]:
    """Append `marker` to a partition this broker leads: (NONE, the end offset to wait
    for) or (the error, -1). Synchronous, so a standalone broker's markers are in the
    log before anything else runs on the loop."""
    try:
        result = append_marker(broker, topic, partition, marker.producer_id, marker.producer_epoch,
                               marker.coordinator_epoch, commit=marker.commit,
                               transaction_version=marker.transaction_version)
    except AppendRefused as refused:
        return refused.code, -1
    except LookupError:
        return ErrorCode.unknown_topic_or_partition, -1
    except LogError as error:
        return error_code_for(error), -1
    if topic == CONSUMER_OFFSETS:
        broker.group_coordinator.complete_transaction(partition, marker.producer_id, marker.commit)
    return ErrorCode.none, result.last_offset + 1


class MarkerChannel:
    def __init__(self, broker: Node, timeout_ms: int) -> None:
        self._broker = broker
        self._timeout_s = timeout_ms / 1000
        self._peers = PeerPool(broker, "txn-markers")
        self._queued: dict[int, list[_Queued]] = defaultdict(list)  # by leader, in the order written
        self._senders: dict[int, asyncio.Task[None]] = {}  # by leader: the one request out there
        self._backing_off: set[asyncio.Future[None]] = set()  # woken by a metadata change
        self._metadata_changes = 0  # so far: a round that saw one come skips its backoff
        broker.directory.add_listener(self._metadata_changed)

    async def write(self, marker: TxnMarker, partitions: Iterable[TopicPartition],
                    still_current: Callable[[], bool]) -> bool:
        """Write `marker` on every partition; True once all took it (or were deleted),
        False when this coordinator must stop (fenced, or no longer the coordinator)."""
        pending = set(partitions)
        backoff = FIRST_BACKOFF_S
        while pending:
            if not still_current():
                return False
            changes_seen = self._metadata_changes
            by_leader: dict[int, list[TopicPartition]] = defaultdict(list)
            for tp in sorted(pending):
                leader = self._leader_of(tp)
                if leader is None:
                    log.warning("%s-%d no longer exists: no %s marker for producer %d", *tp, marker.kind,
                                marker.producer_id)
                    pending.discard(tp)
                elif leader >= 0:
                    by_leader[leader].append(tp)
            # The local markers are appended first, then the other leaders are asked,
            # and the local wait is awaited inline: with nothing to wait for (a
            # standalone broker) phase two runs through without yielding to the loop.
            here = self._append_here(marker, by_leader.pop(self._broker.node_id, []))
            elsewhere = [asyncio.ensure_future(self._send(leader, marker, tps)) for leader, tps in by_leader.items()]
            try:
                outcomes = [await self._replicated_here(here)]
                if elsewhere:
                    outcomes += await asyncio.gather(*elsewhere)
            finally:
                for request in elsewhere:
                    request.cancel()  # done ones ignore it; phase two was cancelled otherwise
            for results in outcomes:
                for tp, code in results.items():
                    if code is ErrorCode.none:
                        pending.discard(tp)
                    elif code in FENCED:
                        log.info("%s marker of producer %d refused by %s-%d (%s): a newer coordinator or epoch "
                                 "is in charge", marker.kind, marker.producer_id, *tp, code.name)
                        return False
                    else:
                        log.debug("%s marker of producer %d to %s-%d: %s; retrying", marker.kind,
                                  marker.producer_id, *tp, code.name)
            if pending and self._metadata_changes == changes_seen:
                await self._back_off(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
        return True

    async def _back_off(self, seconds: float) -> None:
        """Sleep `seconds`, or until the cluster metadata changes."""
        woken = asyncio.get_running_loop().create_future()
        self._backing_off.add(woken)
        try:
            await asyncio.wait([woken], timeout=seconds)
        finally:
            self._backing_off.discard(woken)

    def _metadata_changed(self, _image, delta) -> None:
        if not (delta.changed_partitions or delta.unregistered_brokers or delta.registered_brokers):
            return
        self._metadata_changes += 1
        waiting, self._backing_off = self._backing_off, set()
        for woken in waiting:
            if not woken.done():
                woken.set_result(None)

    def _leader_of(self, tp: TopicPartition) -> int | None:
        """The partition's leader (-1: none right now), or None when it was deleted."""
        return self._broker.leadership.leader_of(*tp)

    def _append_here(self, marker: TxnMarker, partitions: list[TopicPartition]
                     ) -> dict[TopicPartition, tuple[ErrorCode, int]]:
        """The markers of the partitions this broker leads, appended now."""
        return {tp: append_marker_here(self._broker, *tp, marker) for tp in partitions}

    async def _replicated_here(self, appended: dict[TopicPartition, tuple[ErrorCode, int]]
                               ) -> dict[TopicPartition, ErrorCode]:
        codes = {}
        for tp, (code, end_offset) in appended.items():
            if code is ErrorCode.none:
                codes[tp] = await self._broker.leadership.wait_for_replication(*tp, end_offset, self._timeout_s)
            else:
                codes[tp] = code
        return codes

    async def _send(self, leader: int, marker: TxnMarker, partitions: list[TopicPartition]
                    ) -> dict[TopicPartition, ErrorCode]:
        """`marker` on `partitions` of `leader`, in the next request to it."""
        if self._peers.get(leader) is None:
            return dict.fromkeys(partitions, ErrorCode.leader_not_available)
        entry = _Queued(marker, partitions)
        self._queued[leader].append(entry)
        sender = self._senders.get(leader)
        if sender is None or sender.done():
            self._senders[leader] = asyncio.get_running_loop().create_task(self._send_queued(leader))
        try:
            return await asyncio.shield(entry.answer)
        except asyncio.CancelledError:
            queued = self._queued.get(leader, [])
            if entry in queued:  # not sent yet: nobody wants it now
                queued.remove(entry)
            raise

    async def _send_queued(self, leader: int) -> None:
        """Send what is queued for `leader`, one request at a time, until nothing is."""
        queued = self._queued[leader]
        while queued:
            batch = list(queued)
            queued.clear()
            try:
                answers = await self._write_batch(leader, batch)
            except BaseException:  # cancelled (the channel closes): nobody is left waiting for it
                for entry in batch:
                    if not entry.answer.done():
                        entry.answer.set_result(dict.fromkeys(entry.partitions, ErrorCode.request_timed_out))
                raise
            for entry, codes in zip(batch, answers, strict=True):
                if not entry.answer.done():
                    entry.answer.set_result(codes)

    async def _write_batch(self, leader: int, batch: list[_Queued]) -> list[dict[TopicPartition, ErrorCode]]:
        """One WriteTxnMarkers to `leader` with every marker of `batch`, in order: the
        codes of each one's partitions."""
        def everywhere(code: ErrorCode) -> list[dict[TopicPartition, ErrorCode]]:
            return [dict.fromkeys(entry.partitions, code) for entry in batch]

        peer = self._peers.get(leader)
        if peer is None:
            return everywhere(ErrorCode.leader_not_available)
        try:
            response = await peer.request(_request(batch), self._timeout_s)
        except (ConnectionError, TimeoutError) as error:
            log.info("WriteTxnMarkers to broker %d failed: %s", leader, error)
            return everywhere(ErrorCode.request_timed_out)
        answers = []
        results = list(response.markers)  # Kafka answers the markers in the request's order
        for position, entry in enumerate(batch):
            result = results[position] if position < len(results) else None
            codes: dict[TopicPartition, ErrorCode] = {}
            if result is not None and result.producer_id == entry.marker.producer_id:
                for topic in result.topics:
                    for partition in topic.partitions:
                        codes[(topic.name, partition.partition_index)] = ErrorCode(partition.error_code)
            answers.append({tp: codes.get(tp, ErrorCode.unknown_server_error) for tp in entry.partitions})
        return answers

    def close(self) -> None:
        for sender in self._senders.values():
            sender.cancel()
        self._senders.clear()
        self._peers.close()


def _request(batch: list[_Queued]):
    """WriteTxnMarkers (of WRITE_TXN_MARKERS_VERSION) with one marker per queued entry."""
    request_type: Any = request_class(27, WRITE_TXN_MARKERS_VERSION)
    module = sys.modules[request_type.__module__]
    markers = []
    for entry in batch:
        marker = entry.marker
        by_topic: dict[str, list[int]] = defaultdict(list)
        for topic, partition in entry.partitions:
            by_topic[topic].append(partition)
        markers.append(module.WritableTxnMarker(
            producer_id=marker.producer_id,
            producer_epoch=marker.producer_epoch,
            transaction_result=marker.commit,
            topics=tuple(module.WritableTxnMarkerTopic(name=topic, partition_indexes=tuple(indexes))
                         for topic, indexes in by_topic.items()),
            coordinator_epoch=marker.coordinator_epoch,
            transaction_version=marker.transaction_version,
        ))
    return request_type(markers=tuple(markers))

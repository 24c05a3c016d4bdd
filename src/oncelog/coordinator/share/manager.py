"""The share partitions this broker leads and the share sessions of their consumers
(Kafka's SharePartitionManager and ShareSessionCache): what ShareFetch and
ShareAcknowledge do.

- A share partition is loaded the first time a group fetches it here, from its share
  coordinator (persister.py: this broker or the leader of the key's
  `__share_group_state` partition), at this broker's leader epoch of the partition,
  which fences the previous leader's late writes. Never initialized (or reset by an
  admin), it starts where the group's share.auto.offset.reset says (the log start for
  `earliest`, the high watermark for `latest`, the first offset at or after now minus
  the duration for `by_duration:`), and that start is persisted at once.
- Every change (records acquired, acknowledged, released, their locks expired) is
  written in order by the partition's `StateWriter` (writer.py), and a fetch or an
  acknowledgement is answered once its changes are persisted. A write that fails (the
  share coordinator moved, a newer leader, an admin reset) drops the partition from
  memory: the next use reloads what was persisted. A fetch retries such a partition
  while it waits and answers it with no records rather than the share coordinator's
  error, which Kafka's share consumers take as fatal; an acknowledgement reports the
  error (the records come again).
- When this broker stops leading a partition (cluster mode), its share partitions are
  dropped; the new leader loads them from the share coordinator.
- A fetch reads the log from the partition's first AVAILABLE record (or its end), up to
  the high watermark, or the last stable offset for a group with
  share.isolation.level=read_committed; there, records of aborted transactions are
  archived, never delivered, as are transaction markers in both levels. Records go to
  the member up to the request's MaxRecords in all, and the answer carries whole
  batches with the ranges acquired: the client delivers only those.
- A share session (member, epoch) is opened by a fetch with epoch 0, continued with
  the epoch the previous request had plus one, and closed with -1, which releases the
  member's acquired records at once. Its partitions are those fetched with it, less the
  forgotten ones; an incremental fetch reads all of them.
- Acquisition locks run out after share.record.lock.duration.ms: a sweep every
  `SWEEP_MS` hands such records out again (archived at group.share.delivery.count.limit).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from oncelog import clock
from oncelog.coordinator.share.partition import (
    AcknowledgeError,
    Acknowledgement,
    Acquired,
    SharePartition,
    Span,
    SpanKind,
)
from oncelog.coordinator.share.records import StateKey
from oncelog.coordinator.share.settings import ShareSettings
from oncelog.coordinator.share.writer import HeldPartition, StateWriter
from oncelog.names import INTERNAL_TOPICS, SHARE_GROUP_STATE, TopicPartition
from oncelog.protocol import record_batch
from oncelog.protocol.messages import ErrorCode

if TYPE_CHECKING:
    from oncelog.coordinator.share.persister import SharePersister
    from oncelog.coordinator.share.state_topic import ShareStateTopic
    from oncelog.kernel.node import Node
    from oncelog.storage.log import PartitionLog

log = logging.getLogger("oncelog.share")

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
SUMMARY = -1  # the leader epoch of a read that takes nothing over (no fencing): a summary
SWEEP_MS = 100
MAX_READS_PER_PARTITION = 8  # reads past archived-only stretches (aborted, markers) in one fetch


@dataclass(slots=True)
class ShareSession:
    principal: object
    next_epoch: int = 1
    partitions: dict[TopicPartition, uuid.UUID] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SessionOutcome:
    error: ErrorCode
    session: ShareSession | None = None
    message: str | None = None


@dataclass(slots=True)
class PartitionResult:
    """One partition's part of a ShareFetch or ShareAcknowledge answer."""

    error: ErrorCode = ErrorCode.none
    error_message: str | None = None
    acknowledge_error: ErrorCode = ErrorCode.none
    acknowledge_message: str | None = None
    records: bytes | memoryview = b""
    acquired: list[Acquired] = field(default_factory=list)


class SharePartitions:
    def __init__(self, broker: Node, store: ShareStateTopic, persister: SharePersister,
                 settings: Callable[[str], ShareSettings],
                 wait_for_append: Callable[[list[TopicPartition], float], Awaitable[None]]) -> None:
        """`store`: the share coordinator's partitions led here (listing, summaries);
        `persister`: where each share partition's state is read and written;
        `wait_for_append(partitions, timeout_s)`: returns when one of them got data."""
        self._broker = broker
        self._wait_for_append = wait_for_append
        self._store = store
        self._persister = persister
        self._writer = StateWriter(persister, self._write_failed)
        self._settings = settings
        self._held: dict[tuple[str, str, int], HeldPartition] = {}
        self._loading: dict[tuple[str, str, int], asyncio.Future] = {}
        self._sessions: dict[tuple[str, str], ShareSession] = {}
        self._max_sessions = broker.config["group.share.max.share.sessions"]
        self._sweeper: asyncio.Task | None = None
        self._topic_ready = False

    def start(self) -> None:
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep_forever())

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
        await self._writer.close()

    def on_leadership(self, tp: TopicPartition, leader: bool) -> None:
        """This broker stopped (or started) leading a partition: its share partitions are
        the next leader's, loaded from the share coordinator."""
        if not leader:
            topic, partition = tp
            for key in [k for k in self._held if k[1] == topic and k[2] == partition]:
                del self._held[key]

    # ---- sessions --------------------------------------------------------------------------

    def open_session(self, group_id: str, member_id: str, epoch: int, principal: object, *,
                     fetching: bool) -> SessionOutcome:
        """The share session a request with `epoch` continues, opens (0) or closes (-1:
        answered, then `close_session`)."""
        key = (group_id, member_id)
        session = self._sessions.get(key)
        if epoch == INITIAL_EPOCH:
            if not fetching:
                return SessionOutcome(ErrorCode.invalid_share_session_epoch)
            if session is not None:
                self.close_session(group_id, member_id)
            elif len(self._sessions) >= self._max_sessions:
                return SessionOutcome(ErrorCode.share_session_limit_reached,
                                      message="The share session cache is full")
            session = self._sessions[key] = ShareSession(principal)
            return SessionOutcome(ErrorCode.none, session)
        if session is None or session.principal != principal:
            return SessionOutcome(ErrorCode.share_session_not_found,
                                  message=f"Share session for member {member_id} not found")
        if epoch == FINAL_EPOCH:
            return SessionOutcome(ErrorCode.none, session)
        if epoch != session.next_epoch:
            return SessionOutcome(ErrorCode.invalid_share_session_epoch,
                                  message=f"Share session epoch {epoch} is not the expected {session.next_epoch}")
        session.next_epoch += 1
        return SessionOutcome(ErrorCode.none, session)

    def close_session(self, group_id: str, member_id: str, session: ShareSession | None = None) -> None:
        """Forget the member's session (only if it is still `session`, when given) and hand
        the member's acquired records out again."""
        current = self._sessions.get((group_id, member_id))
        if current is None or (session is not None and current is not session):
            return
        del self._sessions[(group_id, member_id)]
        session = current
        for (topic, partition) in session.partitions:
            held = self._held.get((group_id, topic, partition))
            if held is not None and held.partition.release_member(member_id):
                self._writer.changed(held)

    # ---- fetching --------------------------------------------------------------------------

    async def fetch(self, group_id: str, member_id: str, wanted: Sequence[tuple[TopicPartition, uuid.UUID]], *,
                    max_records: int, max_bytes: int, max_wait_ms: int,
                    ) -> tuple[dict[TopicPartition, PartitionResult], int]:
        """Acquire records of `wanted` for the member: the results per partition and the
        group's lock duration. Waits up to `max_wait_ms` for records when none is free."""
        settings = self._settings(group_id)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max_wait_ms / 1000
        while True:
            results: dict[TopicPartition, PartitionResult] = {}
            budget_records, budget_bytes = max_records, max_bytes
            written: list[tuple[TopicPartition, HeldPartition, int]] = []
            for tp, topic_id in wanted:
                held, error = await self._partition(group_id, tp, topic_id, settings)
                if held is None:
                    results[tp] = PartitionResult(_fetch_error(error))
                    continue
                before = held.partition.changes
                result = self._acquire(held, member_id, settings, budget_records, budget_bytes,
                                       first=budget_bytes == max_bytes)  # no records in the answer yet
                results[tp] = result
                if held.partition.changes != before:  # acquired, or archived, expired, moved on
                    written.append((tp, held, self._writer.changed(held)))
                if result.acquired:
                    budget_records -= sum(run.last - run.first + 1 for run in result.acquired)
                    budget_bytes -= len(result.records)
                if budget_records <= 0 or budget_bytes <= 0:
                    break
            for tp, held, version in written:
                code = await self._writer.written(held, version)
                if code is not ErrorCode.none:
                    results[tp] = PartitionResult(_fetch_error(_client_error(code)))
            remaining = deadline - loop.time()
            if remaining <= 0 or any(r.acquired or r.error is not ErrorCode.none for r in results.values()):
                return results, settings.lock_duration_ms
            await self._wait_for_append([tp for tp, _ in wanted], min(remaining, SWEEP_MS / 1000 * 5))

    def _acquire(self, held: HeldPartition, member_id: str, settings: ShareSettings, max_records: int,
                 max_bytes: int, *, first: bool) -> PartitionResult:
        log_ = self._broker.logs.partition(held.topic, held.key.partition)
        if log_ is None:
            return PartitionResult(ErrorCode.unknown_topic_or_partition)
        share = held.partition
        now = clock.now_ms()
        share.expire_locks(now)
        share.move_start(log_.log_start_offset)
        bound = log_.last_stable_offset if settings.read_committed else log_.high_watermark
        pieces: list[bytes | memoryview] = []
        acquired: list[Acquired] = []
        answered_end = -1  # the offset past the last batch the answer carries
        for _ in range(MAX_READS_PER_PARTITION):
            offset = share.next_fetch_offset()
            if offset >= bound or max_records <= 0 or not share.can_acquire():
                break
            records = log_.read(offset, max_bytes, upper_bound=bound, min_one_batch=first and not pieces).records
            if not records:
                break
            headers = record_batch.parse_batches(records, verify_crc=False)
            spans = _spans(log_, headers, settings.read_committed, offset, bound)
            runs = share.acquire(member_id, spans, max_records=max_records, now_ms=now,
                                 lock_ms=settings.lock_duration_ms, from_offset=offset)
            if runs:
                last = runs[-1].last
                # Whole batches up to the one holding the last record acquired, less those
                # an earlier read of this fetch already carries (a read starts with the
                # batch holding its offset).
                begin = next((h.position for h in headers if h.last_offset >= answered_end), len(records))
                end = next((h.position + h.size for h in headers if h.last_offset >= last), len(records))
                answered_end = next((h.next_offset for h in headers if h.last_offset >= last), answered_end)
                pieces.append(memoryview(records)[begin:end])
                acquired.extend(runs)
                max_records -= sum(run.last - run.first + 1 for run in runs)
                max_bytes -= end - begin
                if max_bytes <= 0:
                    break
            elif share.next_fetch_offset() <= offset:
                break  # nothing more to hand out from here (the window is full)
        data = pieces[0] if len(pieces) == 1 else b"".join(pieces)
        return PartitionResult(records=data, acquired=acquired)

    # ---- acknowledging ---------------------------------------------------------------------

    async def acknowledge(self, group_id: str, member_id: str,
                          batches: Mapping[TopicPartition, tuple[uuid.UUID, Sequence[Acknowledgement]]], *,
                          renew_allowed: bool) -> dict[TopicPartition, PartitionResult]:
        """Apply the member's acknowledgements, partition by partition (each all or none),
        answered once their changes are persisted."""
        settings = self._settings(group_id)
        results: dict[TopicPartition, PartitionResult] = {}
        written: list[tuple[TopicPartition, HeldPartition, int]] = []
        for tp, (topic_id, acknowledgements) in batches.items():
            held, error = await self._partition(group_id, tp, topic_id, settings)
            if held is None:
                results[tp] = PartitionResult(error, acknowledge_error=error)
                continue
            try:
                held.partition.acknowledge(member_id, acknowledgements, now_ms=clock.now_ms(),
                                           lock_ms=settings.lock_duration_ms, renew_allowed=renew_allowed)
            except AcknowledgeError as error:
                results[tp] = PartitionResult(acknowledge_error=error.code, acknowledge_message=str(error))
                continue
            results[tp] = PartitionResult()
            written.append((tp, held, self._writer.changed(held)))
        for tp, held, version in written:
            code = await self._writer.written(held, version)
            if code is not ErrorCode.none:
                results[tp] = PartitionResult(acknowledge_error=_client_error(code))
        return results

    # ---- the share partitions --------------------------------------------------------------

    def lock_duration_ms(self, group_id: str) -> int:
        return self._settings(group_id).lock_duration_ms

    def persisted_groups(self) -> set[str]:
        """The groups with a share partition persisted here."""
        return self._store.groups()

    def has_persisted(self, group_id: str) -> bool:
        return self._store.has_group(group_id)

    def persisted_partitions(self, group_id: str) -> list[TopicPartition]:
        """The group's share partitions persisted here, by topic name (topics that still exist)."""
        found = []
        for key in self._store.persisted_keys():
            info = self._broker.logs.topic_by_id(key.topic_id) if key.group_id == group_id else None
            if info is not None:
                found.append((info.name, key.partition))
        return found

    async def group_partitions(self, group_id: str) -> list[TopicPartition]:
        """Every share partition of the group with a state, wherever its share coordinator
        is: those kept here, and (cluster mode) each partition of every topic whose key
        another broker keeps, asked of it, one request per partition (Kafka's group
        coordinator remembers which it initialized; oncelog asks)."""
        found = set(self.persisted_partitions(group_id))
        looked = 0
        for name, info in sorted(self._broker.logs.topics().items()):
            if name in INTERNAL_TOPICS:
                continue
            for partition in range(info.num_partitions):
                looked += 1
                if looked % 512 == 0:
                    await asyncio.sleep(0)  # a broker of many partitions: the other clients get turns
                key = StateKey(group_id, info.topic_id, partition)
                if (name, partition) in found or self._store.owns(key):
                    continue  # kept here: known already
                code, state = await self._persister.read(key, SUMMARY)
                if code is ErrorCode.none and state is not None and state.initialized:
                    found.add((name, partition))
        return sorted(found)

    async def start_and_lag(self, group_id: str, tp: TopicPartition) -> tuple[int, int] | None:
        """(share-partition start offset, lag) of a share partition, None if it was never
        initialized. The lag counts the records from the start offset to the high
        watermark (the LSO under read_committed) not yet acknowledged or archived; -1
        where this broker does not lead the partition (its log here may be behind)."""
        topic, partition = tp
        info = self._broker.logs.topic(topic)
        log_ = self._broker.logs.partition(topic, partition)
        if info is None or log_ is None:
            return None
        held = self._held.get((group_id, topic, partition))
        key = StateKey(group_id, info.topic_id, partition)
        share = held.partition if held is not None and held.key == key else None
        if share is None:
            code, state = await self._persister.read(key, SUMMARY)  # kept here or by another broker
            if code is not ErrorCode.none or state is None or not state.initialized:
                return None
            settings = self._settings(group_id)
            share = SharePartition.restore(state, delivery_limit=settings.delivery_limit,
                                           max_in_flight=settings.max_in_flight)
        code, _epoch = self._broker.leadership.leader_epoch(topic, partition)
        if code is not ErrorCode.none:
            return share.start_offset, -1
        bound = log_.last_stable_offset if self._settings(group_id).read_committed else log_.high_watermark
        return share.start_offset, max(0, bound - share.start_offset - share.done_in_flight())

    async def reset(self, group_id: str, tp: TopicPartition, start_offset: int) -> ErrorCode:
        """AlterShareGroupOffsets (a new start offset) or DeleteShareGroupOffsets
        (UNINITIALIZED) of one share partition of an empty group: what was in flight is
        forgotten, and its leader, fenced by the new state epoch, reloads."""
        topic, partition = tp
        info = self._broker.logs.topic(topic)
        if info is None or not self._broker.leadership.has_partition(topic, partition):
            return ErrorCode.unknown_topic_or_partition
        code = await self._ensure_state_topic()
        if code is not ErrorCode.none:
            return code
        self._held.pop((group_id, topic, partition), None)
        return _client_error(await self._persister.reset(StateKey(group_id, info.topic_id, partition), start_offset))

    def forget_group(self, group_id: str) -> None:
        """Drop what is in memory of a deleted group (its persisted state is reset apart)."""
        for held_key in [k for k in self._held if k[0] == group_id]:
            del self._held[held_key]
        for session_key in [k for k in self._sessions if k[0] == group_id]:
            del self._sessions[session_key]

    async def _ensure_state_topic(self) -> ErrorCode:
        if self._topic_ready:
            return ErrorCode.none
        code, _reason = await self._broker.topics.ensure_internal(SHARE_GROUP_STATE)
        self._topic_ready = code is ErrorCode.none
        return code

    async def _partition(self, group_id: str, tp: TopicPartition, topic_id: uuid.UUID,
                         settings: ShareSettings) -> tuple[HeldPartition | None, ErrorCode]:
        """The held share partition, loaded (once, however many requests ask) if need be."""
        topic, partition = tp
        held_key = (group_id, topic, partition)
        while True:
            found = self._held.get(held_key)
            if found is not None and found.key.topic_id == topic_id:
                return found, ErrorCode.none
            loading = self._loading.get(held_key)
            if loading is None:
                break
            await asyncio.shield(loading)
        future = self._loading[held_key] = asyncio.get_running_loop().create_future()
        try:
            return await self._load(StateKey(group_id, topic_id, partition), topic, settings)
        finally:
            del self._loading[held_key]
            future.set_result(None)

    async def _load(self, key: StateKey, topic: str, settings: ShareSettings) -> tuple[HeldPartition | None, ErrorCode]:
        log_ = self._broker.logs.partition(topic, key.partition)
        code, leader_epoch = self._broker.leadership.leader_epoch(topic, key.partition)
        if log_ is None or code is not ErrorCode.none:
            return None, ErrorCode.unknown_topic_or_partition if code is ErrorCode.none else code
        code = await self._ensure_state_topic()
        if code is not ErrorCode.none:
            return None, code
        code, state = await self._persister.read(key, leader_epoch)
        if code is not ErrorCode.none:
            return None, _client_error(code)
        code, now_epoch = self._broker.leadership.leader_epoch(topic, key.partition)
        if code is not ErrorCode.none or now_epoch != leader_epoch:  # the leadership moved meanwhile
            return None, ErrorCode.not_leader_or_follower
        if state is not None and state.initialized:
            share = SharePartition.restore(state, delivery_limit=settings.delivery_limit,
                                           max_in_flight=settings.max_in_flight)
            held = HeldPartition(key, topic, share, leader_epoch)
            self._held[(key.group_id, topic, key.partition)] = held
            return held, ErrorCode.none
        share = SharePartition(_initial_offset(log_, settings), delivery_limit=settings.delivery_limit,
                               max_in_flight=settings.max_in_flight,
                               state_epoch=0 if state is None else state.state_epoch)
        held = HeldPartition(key, topic, share, leader_epoch)
        self._held[(key.group_id, topic, key.partition)] = held
        code = await self._writer.written(held, self._writer.changed(held))
        return (held, ErrorCode.none) if code is ErrorCode.none else (None, _client_error(code))

    def _write_failed(self, held: HeldPartition, _code: ErrorCode) -> None:
        """A write of `held` failed: forget it, so its next use reloads what is persisted."""
        held_key = (held.key.group_id, held.topic, held.key.partition)
        if self._held.get(held_key) is held:
            del self._held[held_key]

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_MS / 1000)
            try:
                self.sweep(clock.now_ms())
            except Exception:
                log.exception("expiring share acquisition locks failed")

    def sweep(self, now_ms: int) -> None:
        """Hand out again the records whose acquisition locks ran out (a partition whose
        earliest lock is still ahead costs one comparison)."""
        for held in list(self._held.values()):
            if held.partition.expire_locks(now_ms):
                self._writer.changed(held)


# How a failed state read or write is answered, as Kafka's SharePartition answers it: a
# newer leader means the client must find the partition's leader again; the share
# coordinator's own errors are COORDINATOR_NOT_AVAILABLE, which the client retries; an
# admin reset (FENCED_STATE_EPOCH) is answered as it is.
_CLIENT_ERRORS = {
    ErrorCode.fenced_leader_epoch: ErrorCode.not_leader_or_follower,
    ErrorCode.not_coordinator: ErrorCode.coordinator_not_available,
    ErrorCode.coordinator_load_in_progress: ErrorCode.coordinator_not_available,
}


def _client_error(code: ErrorCode) -> ErrorCode:
    return _CLIENT_ERRORS.get(code, code)


# A share coordinator that cannot be reached now, or a state an admin just reset, is the
# broker's to retry: a fetch answers the partition with no records and no error (and
# tries again while it waits), since the share consumers of both Java and librdkafka
# treat any fetch error but the leadership and topic ones as fatal for the application
# ("Unexpected error code ... while fetching"). Acknowledgements still report them.
_RETRIED_BY_THE_BROKER = frozenset({
    ErrorCode.coordinator_not_available, ErrorCode.not_coordinator, ErrorCode.coordinator_load_in_progress,
    ErrorCode.fenced_state_epoch, ErrorCode.request_timed_out, ErrorCode.network_exception,
})


def _fetch_error(code: ErrorCode) -> ErrorCode:
    return ErrorCode.none if code in _RETRIED_BY_THE_BROKER else code


def _spans(log_: PartitionLog, headers: Iterable[record_batch.BatchHeader], read_committed: bool, start: int,
           end: int) -> list[Span]:
    """What each batch read holds: data, a marker, or (read_committed) an aborted
    transaction's records, as a read_committed consumer tells them apart."""
    headers = list(headers)
    aborted: list[tuple[int, int]] = sorted(
        log_.aborted_transactions(start, end), key=lambda entry: entry[1]) if read_committed else []
    open_aborted: set[int] = set()
    next_aborted = 0
    spans: list[Span] = []
    for header in headers:
        while next_aborted < len(aborted) and aborted[next_aborted][1] <= header.last_offset:
            open_aborted.add(aborted[next_aborted][0])
            next_aborted += 1
        if header.is_control:
            open_aborted.discard(header.producer_id)
            kind = SpanKind.CONTROL
        elif header.is_transactional and header.producer_id in open_aborted:
            kind = SpanKind.ABORTED
        else:
            kind = SpanKind.DATA
        spans.append(Span(header.base_offset, header.last_offset, kind))
    return spans


def _initial_offset(log_: PartitionLog, settings: ShareSettings) -> int:
    """Where a new share partition starts: share.auto.offset.reset's offset."""
    if settings.auto_offset_reset == "earliest":
        return log_.log_start_offset
    duration = settings.reset_duration_ms()
    if duration is not None:
        found = log_.offset_for_timestamp(clock.now_ms() - duration)
        return min(found[0], log_.high_watermark) if found is not None else log_.high_watermark
    return log_.high_watermark

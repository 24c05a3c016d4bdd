"""Incremental fetch sessions (KIP-227), the broker's side: the cache of sessions, what
each remembers of its partitions, and which session a Fetch opens, continues or closes.

A fetcher (consumer or follower) that keeps fetching the same partitions opens a session
with a full fetch (session id 0, epoch 0); the broker answers with the session's id.
From then on the fetcher sends epoch 1, 2, ...: only the partitions it added or whose
fetch position changed, and those it no longer wants (`forgotten_topics_data`); the
broker reads every partition of the session and answers only those with records, a
changed high watermark, last stable offset or log start offset, a diverging epoch or an
error. An unknown id is FETCH_SESSION_ID_NOT_FOUND, an epoch other than the next one
INVALID_FETCH_SESSION_EPOCH; a full fetch naming a session closes it, and epoch -1
(FINAL_EPOCH) asks for no session at all (a "sessionless" full fetch, librdkafka's).

The cache holds `max.incremental.fetch.session.cache.slots` sessions. A new one takes a
free slot, else evicts, as Kafka's FetchSessionCache does: first a session unused for
EVICTION_MS; else a follower (privileged) may evict a consumer's session or a session
that had lived EVICTION_MS by its last use, a consumer only the latter, and only one
that is smaller (fewer partitions; privileged sessions rank above all others). When
nothing may go, the fetch is answered without a session.

Session ids are drawn from `secrets` (a CSPRNG), 1 to 2**31 - 1 (the wire's int32 > 0),
never one a live session has. Kafka draws them from a plain Random (ThreadLocalRandom):
an id is not a secret there, and a session is any fetcher's that names it.

Domain code: it never sees request or response objects; the Fetch handler
(handlers/fetch.py) turns them into `PartitionRequest`s and `PartitionAnswer`s.
Deviation: the last stable offset is compared too (Kafka compares the high watermark
only, which almost always moves with it), so a read_committed consumer never misses an
LSO change.
Deviation: a session belongs to the principal that opened it. An incremental fetch
naming another principal's session is FETCH_SESSION_ID_NOT_FOUND, as if there were none
(before the epoch is compared, so the answer does not tell that the id is live), and the
session is left as it was; a full fetch naming it opens or skips its own session without
closing that one. In Kafka any client that names a session id continues or closes it,
and reads the topic names of its partitions in the answer.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from oncelog.names import TopicPartition
from oncelog.pacing import Pace, unpaced
from oncelog.protocol.messages import ErrorCode

NO_SESSION_ID = 0  # Kafka's INVALID_SESSION_ID: no session
INITIAL_EPOCH = 0  # a full fetch that opens a session (and closes the one it names)
FINAL_EPOCH = -1  # a full fetch that opens none (and closes the one it names)
EVICTION_MS = 120_000  # Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS
MAX_SESSION_ID = 2**31 - 1


def next_epoch(epoch: int) -> int:
    """Kafka's FetchMetadata.nextEpoch: 1, 2, ..., 2**31 - 1, then 1 again."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == MAX_SESSION_ID else epoch + 1


@dataclass(frozen=True, slots=True)
class PartitionRequest:
    """What a fetcher asks of one partition; a session keeps the latest one."""

    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    log_start_offset: int = -1  # the fetcher's own (followers), not the partition's


@dataclass(frozen=True, slots=True)
class PartitionAnswer:
    """What one partition's read found, as far as a session compares it."""

    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    record_bytes: int
    diverging: bool = False


@dataclass(slots=True)
class CachedPartition:
    """One partition of a session: the request it stands for and what was last answered."""

    request: PartitionRequest
    high_watermark: int = -1  # -1 after an error, so the partition is answered once it clears
    last_stable_offset: int = -1
    log_start_offset: int = -1

    def must_answer(self, answer: PartitionAnswer) -> bool:
        """Whether an incremental response includes the partition; remembers what it says."""
        changed = (answer.high_watermark, answer.last_stable_offset, answer.log_start_offset) != (
            self.high_watermark, self.last_stable_offset, self.log_start_offset)
        self.high_watermark = answer.high_watermark
        self.last_stable_offset = answer.last_stable_offset
        self.log_start_offset = answer.log_start_offset
        if answer.error_code != ErrorCode.none:
            self.high_watermark = -1
            return True
        return changed or answer.record_bytes > 0 or answer.diverging


@dataclass(slots=True)
class FetchSession:
    id: int
    principal: str  # who opened it: the only one who may continue or close it
    privileged: bool  # opened by a follower
    created_ms: int
    last_used_ms: int
    epoch: int  # the epoch the next incremental fetch must carry
    partitions: dict[TopicPartition, CachedPartition] = field(default_factory=dict)  # in fetch order

    @property
    def size(self) -> int:
        return len(self.partitions)

    def eviction_rank(self) -> tuple[bool, int, int]:
        """Kafka's EvictableKey: the lowest goes first."""
        return self.privileged, self.size, self.id


@dataclass(frozen=True, slots=True)
class FetchOutcome:
    """How a Fetch is answered: a top-level error, the session id, and the partitions to
    include, in order."""

    error: ErrorCode
    session_id: int
    partitions: list[TopicPartition]


class FetchContext:
    """One Fetch's view of its session: `partitions` are the ones to read, in order (the
    caller's mapping, or a copy of the session's; it does not change); `complete` (once
    the read is final) says what the response carries."""

    error = ErrorCode.none

    def __init__(self, partitions: Mapping[TopicPartition, PartitionRequest]) -> None:
        self.partitions = partitions

    async def complete(self, answers: Mapping[TopicPartition, PartitionAnswer], now_ms: int, *,
                       pace: Pace = unpaced) -> FetchOutcome:
        return FetchOutcome(ErrorCode.none, NO_SESSION_ID, list(self.partitions))


class SessionError(FetchContext):
    """The request names a session it cannot continue: nothing is read."""

    def __init__(self, error: ErrorCode) -> None:
        super().__init__({})
        self.error = error

    async def complete(self, answers: Mapping[TopicPartition, PartitionAnswer], now_ms: int, *,
                       pace: Pace = unpaced) -> FetchOutcome:
        return FetchOutcome(self.error, NO_SESSION_ID, [])


class Sessionless(FetchContext):
    """A full fetch answered without a session (session id 0)."""


class NewSession(FetchContext):
    """A full fetch that opens a session when the response is made, if there is room."""

    def __init__(self, cache: FetchSessionCache, partitions: Mapping[TopicPartition, PartitionRequest],
                 principal: str, privileged: bool) -> None:
        super().__init__(partitions)
        self._cache = cache
        self._principal = principal
        self._privileged = privileged

    async def complete(self, answers: Mapping[TopicPartition, PartitionAnswer], now_ms: int, *,
                       pace: Pace = unpaced) -> FetchOutcome:
        included = list(self.partitions)
        session = await self._cache.create(self._principal, self._privileged, self.partitions, answers, now_ms,
                                           pace=pace)
        return FetchOutcome(ErrorCode.none, session.id if session is not None else NO_SESSION_ID, included)


class Incremental(FetchContext):
    """An incremental fetch: every partition of the session is read, the changed ones answered."""

    def __init__(self, session: FetchSession, partitions: Mapping[TopicPartition, PartitionRequest]) -> None:
        super().__init__(partitions)
        self._session = session
        self._expected_epoch = session.epoch

    async def complete(self, answers: Mapping[TopicPartition, PartitionAnswer], now_ms: int, *,
                       pace: Pace = unpaced) -> FetchOutcome:
        session = self._session
        if session.epoch != self._expected_epoch:
            # Another fetch of the session came in while this one waited (a duplicate): Kafka's answer.
            return FetchOutcome(ErrorCode.invalid_fetch_session_epoch, session.id, [])
        included = []
        for tp in self.partitions:
            await pace()
            cached = session.partitions.get(tp)
            answer = answers.get(tp)
            if cached is None or answer is None or not cached.must_answer(answer):
                continue
            included.append(tp)
            if answer.record_bytes:
                # To the back of the session, so the byte limits serve every partition in turn.
                del session.partitions[tp]
                session.partitions[tp] = cached
        return FetchOutcome(ErrorCode.none, session.id, included)


class FetchSessionCache:
    """The broker's fetch sessions, by id. Runs on the broker's loop (no locks).

    `open`, `complete` and `create` pace their passes over a request's partitions (and a
    session's: a session holds as many as its fetcher asked for) with the `pace` given
    (oncelog.pacing). An incremental fetch takes its session's next epoch before its
    first pace, so a duplicate that arrives meanwhile meets INVALID_FETCH_SESSION_EPOCH,
    as it would after the fetch."""

    def __init__(self, max_slots: int, *, eviction_ms: int = EVICTION_MS) -> None:
        self.max_slots = max_slots
        self.eviction_ms = eviction_ms
        self._sessions: dict[int, FetchSession] = {}
        # Counts since start, for /metrics and tests (Kafka's evictions meter among them).
        self.created = 0
        self.evictions = 0
        self.incremental_fetches = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    @property
    def partitions_cached(self) -> int:
        return sum(session.size for session in self._sessions.values())

    async def open(self, session_id: int, epoch: int, wanted: Mapping[TopicPartition, PartitionRequest],
                   forgotten: Iterable[TopicPartition], *, principal: str, privileged: bool, now_ms: int,
                   pace: Pace = unpaced) -> FetchContext:
        """The context of a Fetch with this session id and epoch (Kafka's FetchManager.newContext)
        from `principal`. `wanted`: the request's partitions in order (kept by the context:
        it must not change); `forgotten`: its forgotten_topics_data. Another principal's
        session is not there for this one."""
        session = self._sessions.get(session_id)
        if session is not None and session.principal != principal:
            session = None
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session is not None:
                del self._sessions[session.id]  # a full fetch closes the session it names
            if epoch == FINAL_EPOCH:
                return Sessionless(wanted)
            return NewSession(self, wanted, principal, privileged)
        if session is None:
            return SessionError(ErrorCode.fetch_session_id_not_found)
        if session.epoch != epoch:
            return SessionError(ErrorCode.invalid_fetch_session_epoch)
        session.last_used_ms = now_ms
        session.epoch = next_epoch(session.epoch)
        for tp, request in wanted.items():
            await pace()
            cached = session.partitions.get(tp)
            if cached is None:
                session.partitions[tp] = CachedPartition(request)
            else:
                cached.request = request
        for tp in forgotten:
            await pace()
            session.partitions.pop(tp, None)
        if not session.partitions:
            if self._sessions.get(session.id) is session:
                del self._sessions[session.id]
            return Sessionless(wanted)
        self.incremental_fetches += 1
        partitions = {}
        for tp, cached in dict(session.partitions).items():  # a copy: the session changes at a pace
            await pace()
            partitions[tp] = cached.request
        return Incremental(session, partitions)

    def close(self, session_id: int) -> None:
        """Drop a session, whoever opened it: the broker's own decision (a throttled answer
        that opened it never reached the client), never a client's."""
        self._sessions.pop(session_id, None)

    async def create(self, principal: str, privileged: bool, partitions: Mapping[TopicPartition, PartitionRequest],
                     answers: Mapping[TopicPartition, PartitionAnswer], now_ms: int, *,
                     pace: Pace = unpaced) -> FetchSession | None:
        """A new session of `principal` for these partitions, remembering what the full
        response said of each, if a slot is free or can be freed; else None. The session
        is cached once it holds them all."""
        if not self._make_room(privileged, len(partitions), now_ms):
            return None
        held: dict[TopicPartition, CachedPartition] = {}
        for tp, request in partitions.items():
            await pace()
            cached = held[tp] = CachedPartition(request)
            answer = answers.get(tp)
            if answer is not None:
                cached.must_answer(answer)
        if not self._make_room(privileged, len(partitions), now_ms):
            return None  # others took the room while this one was being filled
        session = FetchSession(self._new_id(), principal, privileged, now_ms, now_ms, next_epoch(INITIAL_EPOCH),
                               held)
        self._sessions[session.id] = session
        self.created += 1
        return session

    def _make_room(self, privileged: bool, size: int, now_ms: int) -> bool:
        """Kafka's tryEvict, when every slot is taken."""
        if len(self._sessions) < self.max_slots:
            return True
        if not self._sessions:
            return False
        least_recent = min(self._sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now_ms - least_recent.last_used_ms > self.eviction_ms:
            self._evict(least_recent)
            return True
        evictable = [session for session in self._sessions.values()
                     if (privileged and not session.privileged) or self._had_lived_long(session)]
        if not evictable:
            return False
        cheapest = min(evictable, key=FetchSession.eviction_rank)
        if (privileged, size, 0) < cheapest.eviction_rank():
            return False
        self._evict(cheapest)
        return True

    def _had_lived_long(self, session: FetchSession) -> bool:
        # As Kafka, judged when the session was last used.
        return session.last_used_ms - session.created_ms > self.eviction_ms

    def _evict(self, session: FetchSession) -> None:
        del self._sessions[session.id]
        self.evictions += 1

    def _new_id(self) -> int:
        """An id no live session has, unpredictable to other fetchers (see the module's docstring)."""
        while True:
            session_id = secrets.randbelow(MAX_SESSION_ID) + 1  # 1 .. 2**31 - 1
            if session_id not in self._sessions:
                return session_id

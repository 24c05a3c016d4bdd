"""FetchSessionCache without sockets: epochs and Kafka's eviction rules, driven through time."""

from __future__ import annotations

from asyncio import run

from oncelog.kernel import fetch_sessions
from oncelog.kernel.fetch_sessions import (
    EVICTION_MS,
    MAX_SESSION_ID,
    NO_SESSION_ID,
    FetchSessionCache,
    PartitionAnswer,
    PartitionRequest,
    next_epoch,
)
from oncelog.protocol.messages import ErrorCode

ALICE, MALLORY = "User:alice", "User:mallory"


def wanted(size: int, topic: str = "t") -> dict[tuple[str, int], PartitionRequest]:
    return {(topic, p): PartitionRequest(fetch_offset=0, partition_max_bytes=1024) for p in range(size)}


def answers(partitions, high_watermark: int = 0, record_bytes: int = 0) -> dict[tuple[str, int], PartitionAnswer]:
    return {tp: PartitionAnswer(ErrorCode.none, high_watermark, high_watermark, 0, record_bytes) for tp in partitions}


def open_session(cache: FetchSessionCache, size: int, now_ms: int, *, privileged: bool = False,
                 principal: str = ALICE) -> int:
    context = run(cache.open(NO_SESSION_ID, 0, wanted(size), (), principal=principal, privileged=privileged,
                             now_ms=now_ms))
    return run(context.complete(answers(wanted(size)), now_ms)).session_id


def incremental(cache: FetchSessionCache, session_id: int, epoch: int, now_ms: int = 1, *,
                principal: str = ALICE, wanted_now: dict | None = None):
    return run(cache.open(session_id, epoch, wanted_now or {}, (), principal=principal, privileged=False,
                          now_ms=now_ms))


def use(cache: FetchSessionCache, session_id: int, now_ms: int) -> None:
    session = cache.get(session_id)
    assert session is not None
    context = run(cache.open(session_id, session.epoch, {}, (), principal=ALICE, privileged=False, now_ms=now_ms))
    assert context.error is ErrorCode.none


def test_epochs_wrap_from_the_largest_int32_to_1():
    assert [next_epoch(e) for e in (0, 1, MAX_SESSION_ID, -1)] == [1, 2, 1, -1]


def test_consumer_cannot_evict_a_young_session_even_with_more_partitions():
    cache = FetchSessionCache(1)
    first = open_session(cache, 2, now_ms=0)
    assert open_session(cache, 50, now_ms=1_000) == NO_SESSION_ID
    assert cache.get(first) is not None


def test_an_idle_session_is_evicted_first():
    cache = FetchSessionCache(2)
    idle = open_session(cache, 10, now_ms=0)
    busy = open_session(cache, 1, now_ms=0)
    use(cache, busy, now_ms=EVICTION_MS)
    newcomer = open_session(cache, 1, now_ms=EVICTION_MS + 1)
    assert newcomer != NO_SESSION_ID
    assert cache.get(idle) is None and cache.get(busy) is not None
    assert cache.evictions == 1


def test_follower_evicts_the_smallest_consumer_session():
    cache = FetchSessionCache(2)
    small = open_session(cache, 1, now_ms=0)
    large = open_session(cache, 5, now_ms=0)
    follower = open_session(cache, 1, now_ms=1_000, privileged=True)
    assert follower != NO_SESSION_ID
    assert cache.get(small) is None and cache.get(large) is not None
    # Followers' young sessions are safe from other followers.
    assert open_session(cache, 100, now_ms=2_000, privileged=True) != NO_SESSION_ID  # evicts `large`
    assert open_session(cache, 100, now_ms=3_000, privileged=True) == NO_SESSION_ID
    assert cache.get(follower) is not None


def test_long_lived_sessions_go_to_a_larger_newcomer_only():
    cache = FetchSessionCache(1)
    old = open_session(cache, 5, now_ms=0)
    use(cache, old, now_ms=EVICTION_MS + 1)  # lived past 120 s by its last use, still busy
    now = EVICTION_MS + 2
    assert open_session(cache, 5, now_ms=now) == NO_SESSION_ID  # equal size: the incumbent stays
    assert open_session(cache, 6, now_ms=now) != NO_SESSION_ID
    assert cache.get(old) is None


def test_incremental_answer_moves_partitions_with_records_to_the_back():
    cache = FetchSessionCache(1)
    session_id = open_session(cache, 3, now_ms=0)
    context = incremental(cache, session_id, 1)
    outcome = run(context.complete({**answers(wanted(3)), ("t", 0): PartitionAnswer(ErrorCode.none, 1, 1, 0, 100)},
                                   1))
    assert outcome.partitions == [("t", 0)]
    session = cache.get(session_id)
    assert session is not None and list(session.partitions) == [("t", 1), ("t", 2), ("t", 0)]


def test_errors_are_answered_every_time_and_the_partition_again_once_they_clear():
    cache = FetchSessionCache(1)
    session_id = open_session(cache, 1, now_ms=0)
    failing = {("t", 0): PartitionAnswer(ErrorCode.not_leader_or_follower, -1, -1, -1, 0)}
    for epoch in (1, 2):
        assert run(incremental(cache, session_id, epoch).complete(failing, 1)).partitions
    cleared = run(incremental(cache, session_id, 3).complete(answers(wanted(1)), 1))
    assert cleared.partitions == [("t", 0)]
    quiet = run(incremental(cache, session_id, 4).complete(answers(wanted(1)), 1))
    assert quiet.partitions == []


def test_a_duplicate_fetch_while_one_waits_is_invalid_fetch_session_epoch():
    cache = FetchSessionCache(1)
    session_id = open_session(cache, 1, now_ms=0)
    waiting = incremental(cache, session_id, 1)
    incremental(cache, session_id, 2, now_ms=2)
    assert run(waiting.complete(answers(wanted(1)), 3)).error is ErrorCode.invalid_fetch_session_epoch


# -- a session is its principal's (a deviation from Kafka) -------------------------------------


def test_another_principals_incremental_fetch_finds_no_session_and_leaves_it_as_it_was():
    cache = FetchSessionCache(2)
    session_id = open_session(cache, 2, now_ms=0)
    session = cache.get(session_id)
    assert session is not None
    before = (session.epoch, session.last_used_ms, dict(session.partitions))
    for epoch in (session.epoch, session.epoch + 3):  # the right epoch or not: the same answer
        outcome = run(incremental(cache, session_id, epoch, now_ms=5, principal=MALLORY,
                                  wanted_now={("secret", 0): wanted(1)[("t", 0)]}).complete({}, 5))
        assert (outcome.error, outcome.session_id, outcome.partitions) == (
            ErrorCode.fetch_session_id_not_found, NO_SESSION_ID, [])
    assert (session.epoch, session.last_used_ms, dict(session.partitions)) == before
    assert incremental(cache, session_id, session.epoch).error is ErrorCode.none  # the owner goes on


def test_a_full_fetch_naming_another_principals_session_does_not_close_it():
    cache = FetchSessionCache(3)
    session_id = open_session(cache, 1, now_ms=0)
    for epoch in (0, -1):
        context = run(cache.open(session_id, epoch, wanted(1, "mine"), (), principal=MALLORY, privileged=False,
                                 now_ms=1))
        assert run(context.complete(answers(wanted(1, "mine")), 1)).session_id != session_id
    assert cache.get(session_id) is not None and incremental(cache, session_id, 1).error is ErrorCode.none
    # The owner's full fetch still closes it.
    run(cache.open(session_id, -1, wanted(1), (), principal=ALICE, privileged=False, now_ms=2))
    assert cache.get(session_id) is None


def test_session_ids_come_from_secrets_in_1_to_2_31_minus_1_and_skip_live_ones(monkeypatch):
    drawn = iter([MAX_SESSION_ID - 1, MAX_SESSION_ID - 1, 0])
    bounds = []

    def randbelow(bound: int) -> int:
        bounds.append(bound)
        return next(drawn)

    monkeypatch.setattr(fetch_sessions.secrets, "randbelow", randbelow)
    cache = FetchSessionCache(2)
    assert open_session(cache, 1, now_ms=0) == MAX_SESSION_ID
    assert open_session(cache, 1, now_ms=0) == 1  # the second draw was the live session's id
    assert bounds == [MAX_SESSION_ID] * 3


def test_an_incremental_fetch_claims_its_epoch_before_it_paces_so_a_duplicate_meanwhile_is_refused():
    cache = FetchSessionCache(1)
    session_id = open_session(cache, 3, now_ms=0)
    duplicates = []

    async def pace() -> None:  # what the loop may run while the fetch gives it away
        if not duplicates:
            duplicates.append(await cache.open(session_id, 1, {}, (), principal=ALICE, privileged=False, now_ms=1))

    async def fetch():
        context = await cache.open(session_id, 1, wanted(3), (), principal=ALICE, privileged=False, now_ms=1,
                                   pace=pace)
        return context, await context.complete(answers(wanted(3), high_watermark=1), 1, pace=pace)

    context, outcome = run(fetch())
    assert duplicates[0].error is ErrorCode.invalid_fetch_session_epoch
    assert (context.error, outcome.error, outcome.partitions) == (ErrorCode.none, ErrorCode.none, list(wanted(3)))
    session = cache.get(session_id)
    assert session is not None and session.epoch == 2

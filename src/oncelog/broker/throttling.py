"""The protocol side of client quotas (oncelog.kernel.quotas): what a request of a client
with a quota is charged, and how its throttled answer looks, as Kafka's KafkaApis does
it. The server asks this only for a client a quota applies to; handlers know nothing of it.

- **Produce**: the request's size in bytes against `producer_byte_rate`. The records are
  appended whatever the quota says; the throttle only delays what comes next.
- **Fetch** (from a consumer; a follower's is exempt): the response's size against
  `consumer_byte_rate`, its `max_bytes` first capped to what the quota lets through in one
  window (Kafka's getMaxValueInQuotaWindow, so that one response can never be too large
  to ever pass). A throttled Fetch is answered with no partitions (its bytes taken back
  off the rate) and, unless it was an incremental fetch, with session id 0, as Kafka's
  getThrottledResponse. Kafka decides before its fetch session takes the answer in; here
  the handler has already completed the session (kernel/fetch_sessions.py), so a session
  the throttled fetch opened is closed again, and an incremental session answers all its
  partitions next time, as after an error.
- **Every request** against `request_percentage`: the time its handler held the event
  loop (not the time it waited: a long-polling Fetch or a replicated write costs only
  its own steps), as Kafka counts request-handler thread time. Exempt, as in Kafka:
  follower fetches, WriteTxnMarkers, SASL handshakes and Produce with acks=0.

A request over any quota gets the largest throttle time in its response's
`throttle_time` (when its version has the field), and the connection is muted for that
long after the response is sent (KIP-219: Kafka since 2.0 sends the response at once and
mutes the channel for every version; clients of the newer versions, Produce v6+, Fetch
v8+, ..., also hold back on their side).
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Awaitable, Coroutine, Generator
from dataclasses import replace
from typing import Any

from oncelog.kernel.fetch_sessions import FetchSessionCache
from oncelog.kernel.quotas import ClientQuota, monotonic_ms
from oncelog.protocol.messages import ErrorCode

PRODUCE_KEY, FETCH_KEY, SASL_HANDSHAKE_KEY, WRITE_TXN_MARKERS_KEY, SASL_AUTHENTICATE_KEY = 0, 1, 17, 27, 36
REQUEST_QUOTA_EXEMPT = frozenset({SASL_HANDSHAKE_KEY, WRITE_TXN_MARKERS_KEY, SASL_AUTHENTICATE_KEY})
MAX_THROTTLE_MS = 2**31 - 1  # throttle_time_ms is an int32


class RequestCharge:
    """One request of a client with a quota: `request` to hand to the handler, `timed` to
    run the handler through, then `settle` once its response is encoded."""

    __slots__ = ("_api_key", "_consumer_fetch", "_fetch_sessions", "_loop_time", "_quota", "_request_bytes", "request")

    def __init__(self, quota: ClientQuota, api_key: int, request: Any, request_bytes: int,
                 fetch_sessions: FetchSessionCache) -> None:
        self._quota = quota
        self._fetch_sessions = fetch_sessions
        self._api_key = api_key
        self._request_bytes = request_bytes
        self._consumer_fetch = api_key == FETCH_KEY and not _from_follower(request)
        self._loop_time: LoopTime | None = None
        if self._consumer_fetch and quota.fetch is not None and hasattr(request, "max_bytes"):
            window_bytes = int(quota.fetch.max_value_in_window())
            if request.max_bytes > window_bytes:
                request = replace(request, max_bytes=max(window_bytes, 1))
        self.request = request

    def timed(self, handling: Awaitable[Any]) -> Awaitable[Any]:
        """The handler's coroutine, timed when the request counts against request_percentage."""
        exempt = self._api_key in REQUEST_QUOTA_EXEMPT or (self._api_key == FETCH_KEY and not self._consumer_fetch)
        if self._quota.request is None or exempt:
            return handling
        assert isinstance(handling, Coroutine)  # a handler is an async function
        self._loop_time = LoopTime(handling)
        return self._loop_time

    def add_request_time(self, seconds: float) -> None:
        """CPU time the request cost off the loop (a heavy request's decoding and encoding
        on the worker thread: broker/heavy_work.py), charged with its loop time."""
        if self._loop_time is not None:
            self._loop_time.seconds += seconds

    def settle(self, response: Any, encoded: list | None) -> tuple[int, Any] | None:
        """Charge the request: None when it stays within its quotas, else the throttle time
        in ms and the response to send instead (None for a Produce with acks=0)."""
        quota, now_ms = self._quota, monotonic_ms()
        throttle_ms = fetched = 0
        if self._api_key == PRODUCE_KEY:
            throttle_ms = quota.record_produce(self._request_bytes, now_ms)
        elif self._consumer_fetch and encoded is not None and quota.fetch is not None:
            fetched = sum(len(buffer) for buffer in encoded) - 4  # the size prefix is not the response's
            throttle_ms = quota.record_fetch(fetched, now_ms)
        if self._loop_time is not None and response is not None:  # acks=0: no request quota (Kafka)
            throttle_ms = max(throttle_ms, quota.record_request_time(self._loop_time.seconds, now_ms))
        if throttle_ms <= 0:
            return None
        throttle_ms = min(throttle_ms, MAX_THROTTLE_MS)
        if response is None:
            return throttle_ms, None
        if self._consumer_fetch:
            quota.unrecord_fetch(fetched, now_ms)
            _forget_answer(self._fetch_sessions, self.request, response)
            response = _without_records(response, self.request)
        if "throttle_time" in getattr(type(response), "__dataclass_fields__", ()):
            response = replace(response, throttle_time=datetime.timedelta(milliseconds=throttle_ms))
        return throttle_ms, response


def _from_follower(request: Any) -> bool:
    """A Fetch from a replica (Kafka's isFromFollower): replica_id, or replica_state from v15."""
    replica_state = getattr(request, "replica_state", None)
    replica_id = replica_state.replica_id if replica_state is not None else getattr(request, "replica_id", -1)
    return replica_id >= 0


def _forget_answer(cache: FetchSessionCache, request: Any, response: Any) -> None:
    """The fetch session no longer counts on the answer the client will not get."""
    session_id = getattr(response, "session_id", 0)
    if not session_id or getattr(response, "error_code", ErrorCode.none) != ErrorCode.none:
        return
    if getattr(request, "session_epoch", -1) <= 0:  # the answer opened this session: it goes with the answer
        cache.close(session_id)
        return
    session = cache.get(session_id)
    if session is not None:
        for cached in session.partitions.values():
            cached.high_watermark = -1  # answered next time, as after an error


def _without_records(response: Any, request: Any) -> Any:
    """A throttled Fetch's answer: no partitions; session id 0 unless the request was an
    incremental fetch of a session (epoch > 0). A top-level error stays as it is."""
    if getattr(response, "error_code", ErrorCode.none) != ErrorCode.none:
        return response
    if hasattr(response, "session_id") and getattr(request, "session_epoch", -1) <= 0:
        return replace(response, responses=(), session_id=0)
    return replace(response, responses=())


class LoopTime:
    """Awaits a coroutine, adding up the time each of its steps holds the event loop: a
    request's share of the broker's thread, without the time it waits for anything."""

    __slots__ = ("_coroutine", "seconds")

    def __init__(self, coroutine: Coroutine[Any, Any, Any]) -> None:
        self.seconds = 0.0
        self._coroutine = coroutine

    def __await__(self) -> Generator[Any, Any, Any]:
        coroutine = self._coroutine
        sent: Any = None
        thrown: BaseException | None = None
        while True:
            started = time.perf_counter()
            try:
                yielded = coroutine.send(sent) if thrown is None else coroutine.throw(thrown)
            except StopIteration as done:
                return done.value
            finally:
                self.seconds += time.perf_counter() - started
            try:
                sent, thrown = (yield yielded), None
            except GeneratorExit:
                coroutine.close()
                raise
            except BaseException as error:  # noqa: BLE001 (handed on to the coroutine, as `await` does)
                sent, thrown = None, error

"""Client quotas, as Kafka's ClientQuotaManager keeps them (KIP-13, KIP-55, KIP-124):
which quota a client is held to, and the rate it is measured at.

**Entities and keys.** A quota entity names a `user`, a `client-id`, or both (or an `ip`
alone); a name of None is that type's default (`<default>`). Keys: `producer_byte_rate`
and `consumer_byte_rate` (bytes per second, integral), `request_percentage` (a share of
one request-handling thread: 100 is a whole thread), and `controller_mutation_rate`,
stored and described but not enforced (oncelog has no controller mutation quota); an
`ip` entity takes `connection_creation_rate`, also stored but not enforced.
`plan_alteration` is AlterClientQuotas' validation and outcome (Kafka's
ClientQuotaControlManager), `describe` DescribeClientQuotas' filter (Kafka's
ClientQuotasImage.describe); `configs_to_json` / `configs_from_json` the stored form.

**Precedence.** For each key separately, a client (user U, client id C) is held to the
first entity that sets it, in Kafka's documented order:

    /config/users/U/clients/C          /config/users/<default>/clients/<default>
    /config/users/U/clients/<default>  /config/users/<default>
    /config/users/U                    /config/clients/C
    /config/users/<default>/clients/C  /config/clients/<default>

The user is the principal's name (`User:alice` -> `alice`, `ANONYMOUS` on PLAINTEXT).
Clients held to the same quota share one rate exactly when Kafka's quota metric tags
are the same: a user-level entity (`/config/users/U`, `/config/users/<default>`) is
shared by all of a user's client ids, a client-level one by all users of a client id,
the others are per (user, client id).

**Rates and throttle time** (`WindowedRate`), as Kafka's Rate over a SampledStat: the
sum of the values recorded in the last `quota.window.num` windows of
`quota.window.size.seconds`, over the time they span, counting missing windows as empty
(so a new client's rate starts low, not at its first request's size). A record that
takes the rate above the bound is throttled for `(rate - bound) / bound * window`, the
delay that would bring the rate back to the bound; a request-percentage throttle is at
most one window, as Kafka's ClientRequestQuotaManager. `ClientQuotas` holds the rates
of every client with a quota; with no quota configured `active` is False, so the server
asks nothing more per request.

Runs on the broker's loop only.
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from oncelog.pacing import Pace, Steps, run_paced, run_steps, sorted_steps
from oncelog.protocol.messages import ErrorCode

USER, CLIENT_ID, IP = "user", "client-id", "ip"
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"
_LONG_MAX, _INT_MAX = 2**63 - 1, 2**31 - 1
# Each key with its largest value when integral (Kafka's LONG, INT), None when a double.
CLIENT_KEYS: Mapping[str, int | None] = {
    PRODUCER_BYTE_RATE: _LONG_MAX, CONSUMER_BYTE_RATE: _LONG_MAX,
    REQUEST_PERCENTAGE: None, CONTROLLER_MUTATION_RATE: None,
}
IP_KEYS: Mapping[str, int | None] = {CONNECTION_CREATION_RATE: _INT_MAX}
ENFORCED_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE)

# DescribeClientQuotas' match types
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2

# An entity: its (type, name) pairs, sorted by type; a name of None is the default.
QuotaEntity = tuple[tuple[str, str | None], ...]
QuotaConfigs = Mapping[QuotaEntity, Mapping[str, float]]

FORMAT_VERSION = 1
INACTIVE_RATE_MS = 3_600_000  # a rate unused this long is forgotten (Kafka's inactive sensor expiry)


def entity_of(pairs: Iterable[tuple[str, str | None]]) -> QuotaEntity:
    return tuple(sorted(dict(pairs).items()))


def _entity_steps(pairs: Iterable[tuple[str, str | None]]) -> Steps[QuotaEntity]:
    """`entity_of` as steps (a request's entity may list a million pairs)."""
    named: dict[str, str | None] = {}
    for kind, name in pairs:
        yield
        named[kind] = name
    return tuple((yield from sorted_steps(named.items())))


def entity_text(entity: Iterable[tuple[str, str | None]]) -> str:
    """As Kafka's ClientQuotaEntity prints itself in error messages."""
    return run_steps(_entity_text_steps(entity))


def _entity_text_steps(entity: Iterable[tuple[str, str | None]]) -> Steps[str]:
    entries = []
    for kind, name in entity:
        yield
        entries.append(f"{kind}={name}")
    return "ClientQuotaEntity(entries={" + ", ".join(entries) + "})"


def user_of(principal: str) -> str:
    """The user entity of a principal: its name (`User:alice` -> `alice`)."""
    _type, separator, name = principal.partition(":")
    return name if separator else principal


# ---- AlterClientQuotas ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Alteration:
    """One entry of AlterClientQuotas: the entity as the request lists it, and its
    operations (a value of None removes the key)."""

    entity: tuple[tuple[str, str | None], ...]
    ops: tuple[tuple[str, float | None], ...]


@dataclass(frozen=True, slots=True)
class AlterationResult:
    error_code: ErrorCode
    error_message: str | None

    @property
    def ok(self) -> bool:
        return self.error_code == ErrorCode.none


OK = AlterationResult(ErrorCode.none, None)


def _invalid(message: str) -> AlterationResult:
    return AlterationResult(ErrorCode.invalid_request, message)


def plan_alteration(current: QuotaConfigs, alterations: Sequence[Alteration],
                    ) -> tuple[dict[QuotaEntity, dict[str, float]], list[AlterationResult]]:
    """The quotas after `alterations`, and each one's result (in order). An entry with an
    error changes nothing; the others apply, as Kafka's controller applies them."""
    return run_steps(_alteration_steps(current, alterations))


async def plan_alteration_paced(current: QuotaConfigs, alterations: Sequence[Alteration], pace: Pace,
                                ) -> tuple[dict[QuotaEntity, dict[str, float]], list[AlterationResult]]:
    """`plan_alteration`, with `pace` between the entries, their pairs and operations."""
    return await run_paced(_alteration_steps(current, alterations), pace)


def _alteration_steps(current: QuotaConfigs, alterations: Sequence[Alteration],
                      ) -> Steps[tuple[dict[QuotaEntity, dict[str, float]], list[AlterationResult]]]:
    changed = {entity: dict(values) for entity, values in current.items()}
    entities: list[QuotaEntity] = []
    counts: dict[QuotaEntity, int] = {}
    for alteration in alterations:
        yield
        named = yield from _entity_steps(alteration.entity)
        entities.append(named)
        counts[named] = counts.get(named, 0) + 1
    results: list[AlterationResult] = []
    for alteration, entity in zip(alterations, entities, strict=True):
        yield
        result = yield from _check_ops(alteration)
        if result.ok and counts[entity] > 1:
            result = _invalid(f"Ignoring duplicate entity {(yield from _entity_text_steps(alteration.entity))}")
        if result.ok:
            result = _check_entity(alteration.entity)
        values = dict(changed.get(entity, {}))
        if result.ok:
            valid_keys = IP_KEYS if IP in dict(alteration.entity) else CLIENT_KEYS
            for key, value in alteration.ops:
                yield
                if value is None:
                    values.pop(key, None)
                    continue
                result = _check_value(valid_keys, key, value)
                if not result.ok:
                    break
                values[key] = float(value)
        results.append(result)
        if not result.ok:
            continue
        if values:
            changed[entity] = values
        else:
            changed.pop(entity, None)  # an entity without quotas is gone, as in Kafka
    return changed, results


def _check_ops(alteration: Alteration) -> Steps[AlterationResult]:
    seen: set[str] = set()
    for key, _value in alteration.ops:
        yield
        if key in seen:
            return _invalid(f"Duplicate quota key {key} not updating quota for this entity "
                            f"{(yield from _entity_text_steps(alteration.entity))}")
        seen.add(key)
    return OK


def _check_entity(pairs: tuple[tuple[str, str | None], ...]) -> AlterationResult:
    if not pairs:
        return _invalid("Invalid empty client quota entity")
    kinds: set[str] = set()
    for kind, name in pairs:
        if kind in kinds:
            return _invalid(f"Invalid client quota entity, duplicate entity entry {kind}")
        if kind not in (USER, CLIENT_ID, IP):
            return _invalid(f"Unhandled client quota entity type: {kind}")
        if name is not None and not name:
            return _invalid(f"Empty {kind} not supported")
        kinds.add(kind)
    if IP in kinds:
        if len(kinds) > 1:
            return _invalid("Invalid quota entity combination, IP entity should not be combined with User or "
                            "ClientId")
        name = dict(pairs)[IP]
        if name is not None and not _is_ip_address(name):
            return _invalid(f"{name} is not a valid IP or resolvable host.")
    return OK


def _is_ip_address(name: str) -> bool:
    # Kafka also takes a host name it can resolve; a broker's loop does no DNS lookups.
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _check_value(valid_keys: Mapping[str, int | None], key: str, value: float) -> AlterationResult:
    if key not in valid_keys:
        return _invalid(f"Invalid configuration key {key}")
    if not math.isfinite(value):
        return _invalid(f"Quota {key} must be a finite number")
    if value <= 0.0:
        return _invalid(f"Quota {key} must be greater than 0")
    largest = valid_keys[key]
    if largest is not None:
        if value > largest:
            kind = "a LONG" if largest == _LONG_MAX else "an INT"
            return _invalid(f"Proposed value for {key} is too large for {kind}.")
        if abs(value % 1.0) > 1e-6:
            return _invalid(f"{key} cannot be a fractional value.")
    return OK


def failed(results: Sequence[AlterationResult], error_code: ErrorCode, message: str) -> list[AlterationResult]:
    """`results` after the store failed: what would have been applied gets the error."""
    return [AlterationResult(error_code, message) if result.ok else result for result in results]


# ---- DescribeClientQuotas ---------------------------------------------------------------------


class QuotaFilterError(Exception):
    """A DescribeClientQuotas filter Kafka refuses: its error code and message."""

    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


def describe(configs: QuotaConfigs, components: Iterable[tuple[str, int, str | None]], strict: bool,
             ) -> list[tuple[QuotaEntity, Mapping[str, float]]]:
    """The entities the filter matches, with their quotas, ordered by entity. Each
    component is (entity type, match type, match). Raises QuotaFilterError."""
    exact: dict[str, str | None] = {}
    specified: set[str] = set()
    for kind, match_type, match in components:
        if not kind:
            raise QuotaFilterError(ErrorCode.invalid_request, "Invalid empty entity type.")
        if kind in exact or kind in specified:
            raise QuotaFilterError(ErrorCode.invalid_request,
                                   f"Entity type {kind} cannot appear more than once in the filter.")
        if kind not in (USER, CLIENT_ID, IP):
            raise QuotaFilterError(ErrorCode.unsupported_version, f"Unsupported entity type {kind}")
        if match_type == MATCH_EXACT:
            if match is None:
                raise QuotaFilterError(ErrorCode.invalid_request,
                                       "Request specified MATCH_TYPE_EXACT, but set match string to null.")
            exact[kind] = match
        elif match_type == MATCH_DEFAULT:
            if match is not None:
                raise QuotaFilterError(ErrorCode.invalid_request,
                                       "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
            exact[kind] = None
        elif match_type == MATCH_SPECIFIED:
            if match is not None:
                raise QuotaFilterError(ErrorCode.invalid_request,
                                       "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
            specified.add(kind)
        else:
            raise QuotaFilterError(ErrorCode.invalid_request, f"Unknown match type {match_type}")
    named = exact.keys() | specified
    if IP in named and (USER in named or CLIENT_ID in named):
        raise QuotaFilterError(ErrorCode.invalid_request, "Invalid entity filter component combination. IP filter "
                                                          "component should not be used with user or clientId filter "
                                                          "component.")
    matched = []
    for entity in sorted(configs, key=_entity_order):
        names = dict(entity)
        if strict and len(names) != len(exact) + len(specified):
            continue
        if all(kind in names and names[kind] == name for kind, name in exact.items()) \
                and all(kind in names for kind in specified):
            matched.append((entity, configs[entity]))
    return matched


def _entity_order(entity: QuotaEntity) -> tuple:
    # Defaults (None) before names, each type in turn.
    return tuple((kind, name is not None, name or "") for kind, name in entity)


# ---- stored form ------------------------------------------------------------------------------


def configs_to_json(configs: QuotaConfigs) -> dict[str, Any]:
    """{"entities": [{"entity": {"user": "alice", "client-id": null}, "quotas": {key: value}}]}"""
    return {"entities": [{"entity": dict(entity), "quotas": dict(sorted(configs[entity].items()))}
                         for entity in sorted(configs, key=_entity_order)]}


def configs_from_json(document: Mapping[str, Any]) -> dict[QuotaEntity, dict[str, float]]:
    """Raises ValueError when `document` is not what configs_to_json writes."""
    configs: dict[QuotaEntity, dict[str, float]] = {}
    entries = document.get("entities", [])
    if not isinstance(entries, list):
        raise ValueError(f"client quotas: 'entities' is not a list: {entries!r}")
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("entity"), dict) \
                or not isinstance(entry.get("quotas"), dict):
            raise ValueError(f"client quotas: bad entry {entry!r}")
        pairs = entry["entity"].items()
        if not pairs or not all(isinstance(kind, str) and (name is None or isinstance(name, str))
                                for kind, name in pairs):
            raise ValueError(f"client quotas: bad entity {entry['entity']!r}")
        quotas = entry["quotas"]
        if not all(isinstance(key, str) and isinstance(value, (int, float)) and not isinstance(value, bool)
                   for key, value in quotas.items()):
            raise ValueError(f"client quotas: bad quotas {quotas!r}")
        configs[entity_of(pairs)] = {key: float(value) for key, value in quotas.items()}
    return configs


# ---- enforcement ------------------------------------------------------------------------------


def monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


class WindowedRate:
    """Kafka's Rate of a WindowedSum: values summed per window of `window_ms`, over the
    last `samples` windows (and the one before, while it overlaps them), divided by the
    time they span. Times are monotonic milliseconds."""

    __slots__ = ("_current", "_samples", "_window_ms", "_windows", "bound", "last_recorded_ms")

    def __init__(self, bound: float, samples: int, window_ms: int) -> None:
        self.bound = bound
        self.last_recorded_ms = 0
        self._samples = samples
        self._window_ms = window_ms
        self._windows: list[list[float]] = []  # each [start_ms, last_event_ms, value]
        self._current = 0

    def record(self, value: float, now_ms: int) -> None:
        """Add `value`, without checking the bound (Kafka's record without quota enforcement)."""
        windows = self._windows
        if not windows:
            windows.append([now_ms, now_ms, 0.0])
        window = windows[self._current]
        if now_ms - window[0] >= self._window_ms:
            # One window more than `samples` is kept: the oldest may still overlap the span.
            self._current = (self._current + 1) % (self._samples + 1)
            if self._current >= len(windows):
                window = [now_ms, now_ms, 0.0]
                windows.append(window)
            else:
                window = windows[self._current]
                window[0] = window[1] = now_ms
                window[2] = 0.0
        window[2] += value
        window[1] = now_ms
        self.last_recorded_ms = now_ms

    def window_size_ms(self, now_ms: int) -> int:
        """The span the rate is measured over: from the oldest window's start, and at least
        `samples - 1` whole windows (missing ones count as empty)."""
        self._purge(now_ms)
        if not self._windows:
            self._windows.append([now_ms, now_ms, 0.0])
        elapsed = now_ms - min(window[0] for window in self._windows)
        full_windows = elapsed // self._window_ms
        if full_windows < self._samples - 1:
            elapsed += (self._samples - 1 - full_windows) * self._window_ms
        return max(int(elapsed), 1)

    def measure(self, now_ms: int) -> float:
        """The rate per second."""
        span_ms = self.window_size_ms(now_ms)
        return sum(window[2] for window in self._windows) * 1000 / span_ms

    def record_and_throttle(self, value: float, now_ms: int, max_throttle_ms: int | None = None) -> int:
        """Record `value`; the throttle time in ms when the rate is now above the bound, else 0."""
        self.record(value, now_ms)
        rate = self.measure(now_ms)
        if rate <= self.bound:
            return 0
        throttle_ms = int((rate - self.bound) / self.bound * self.window_size_ms(now_ms) + 0.5)
        return throttle_ms if max_throttle_ms is None else min(throttle_ms, max_throttle_ms)

    def max_value_in_window(self) -> float:
        """The most that one record can add without being throttled on its own (Kafka's
        getMaxValueInQuotaWindow): a Fetch's max_bytes is capped to it."""
        return self.bound * (self._samples - 1) * self._window_ms / 1000

    def _purge(self, now_ms: int) -> None:
        expire_ms = self._samples * self._window_ms
        for window in self._windows:
            if now_ms - window[1] >= expire_ms:
                window[0] = window[1] = now_ms
                window[2] = 0.0


class ClientQuota:
    """The rates one client is held to; None where no quota of that kind applies."""

    __slots__ = ("_window_ms", "fetch", "produce", "request")

    def __init__(self, produce: WindowedRate | None, fetch: WindowedRate | None, request: WindowedRate | None,
                 window_ms: int) -> None:
        self.produce = produce
        self.fetch = fetch
        self.request = request
        self._window_ms = window_ms

    def record_produce(self, request_bytes: int, now_ms: int) -> int:
        return 0 if self.produce is None else self.produce.record_and_throttle(request_bytes, now_ms)

    def record_fetch(self, response_bytes: int, now_ms: int) -> int:
        return 0 if self.fetch is None else self.fetch.record_and_throttle(response_bytes, now_ms)

    def unrecord_fetch(self, response_bytes: int, now_ms: int) -> None:
        """A throttled Fetch is answered empty: its bytes were not sent (Kafka's unrecordQuotaSensor)."""
        if self.fetch is not None:
            self.fetch.record(-response_bytes, now_ms)

    def record_request_time(self, seconds: float, now_ms: int) -> int:
        """Handler time as a percentage of one thread per second, throttled for at most one
        window (Kafka's ClientRequestQuotaManager)."""
        if self.request is None:
            return 0
        return self.request.record_and_throttle(seconds * 100, now_ms, self._window_ms)


class ClientQuotas:
    """The quotas this broker enforces (`replace`d whenever the stored quotas change) and
    the rates of the clients they apply to."""

    def __init__(self, samples: int, window_seconds: int) -> None:
        if samples < 1 or window_seconds < 1:
            raise ValueError(f"quota.window.num ({samples}) and quota.window.size.seconds ({window_seconds}) "
                             "must be at least 1")
        self.samples = samples
        self.window_ms = window_seconds * 1000
        self.active = False  # any enforced quota configured: the server asks `of` only then
        self._bounds: dict[str, dict[QuotaEntity, float]] = {key: {} for key in ENFORCED_KEYS}
        self._rates: dict[str, dict[tuple[str, str], WindowedRate]] = {key: {} for key in ENFORCED_KEYS}
        self._clients: dict[tuple[str, str | None], ClientQuota | None] = {}
        self._sweep_at = 1024  # forget idle rates when this many clients are known

    def replace(self, configs: QuotaConfigs) -> None:
        """The stored quotas changed: rates are kept (with their new bounds), the clients'
        quotas are found again on their next request."""
        for key in ENFORCED_KEYS:
            self._bounds[key] = {entity: values[key] for entity, values in configs.items()
                                 if key in values and IP not in dict(entity)}
        self.active = any(self._bounds.values())
        self._clients.clear()

    def of(self, principal: str, client_id: str | None) -> ClientQuota | None:
        """The quota of a client (None: no enforced quota applies to it)."""
        try:
            return self._clients[(principal, client_id)]
        except KeyError:
            pass
        if len(self._clients) >= self._sweep_at:
            self._forget_idle(monotonic_ms())
        quota = self._resolve(user_of(principal), client_id or "")
        self._clients[(principal, client_id)] = quota
        return quota

    def _resolve(self, user: str, client: str) -> ClientQuota | None:
        produce, fetch, request = (self._rate(key, user, client) for key in ENFORCED_KEYS)
        if produce is None and fetch is None and request is None:
            return None
        return ClientQuota(produce, fetch, request, self.window_ms)

    def _rate(self, key: str, user: str, client: str) -> WindowedRate | None:
        bounds = self._bounds[key]
        if not bounds:
            return None
        for entity, tags in _precedence(user, client):
            bound = bounds.get(entity)
            if bound is not None:
                rate = self._rates[key].get(tags)
                if rate is None:
                    rate = self._rates[key][tags] = WindowedRate(bound, self.samples, self.window_ms)
                rate.bound = bound
                return rate
        return None

    def _forget_idle(self, now_ms: int) -> None:
        for rates in self._rates.values():
            for tags in [tags for tags, rate in rates.items() if now_ms - rate.last_recorded_ms >= INACTIVE_RATE_MS]:
                del rates[tags]
        self._clients.clear()
        self._sweep_at = max(1024, 2 * sum(len(rates) for rates in self._rates.values()))


def _precedence(user: str, client: str) -> tuple[tuple[QuotaEntity, tuple[str, str]], ...]:
    """The entities that may hold a client's quota, in Kafka's order, each with the tags
    of the rate it is measured by (clients with the same tags share one rate)."""
    the_user, any_user = (USER, user), (USER, None)
    the_client, any_client = (CLIENT_ID, client), (CLIENT_ID, None)
    both, user_only, client_only = (user, client), (user, ""), ("", client)
    return (
        ((the_client, the_user), both),
        ((any_client, the_user), both),
        ((the_user,), user_only),
        ((the_client, any_user), both),
        ((any_client, any_user), both),
        ((any_user,), user_only),
        ((the_client,), client_only),
        ((any_client,), client_only),
    )

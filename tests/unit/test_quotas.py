"""Client quotas without sockets (oncelog.kernel.quotas): Kafka's rate over sampled
windows and its throttle time, the precedence of quota entities and which clients share
a rate, AlterClientQuotas' checks and DescribeClientQuotas' filter."""

from __future__ import annotations

import asyncio
import time

import pytest

from oncelog.broker.throttling import LoopTime
from oncelog.kernel.quotas import (
    CLIENT_ID,
    IP,
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    USER,
    Alteration,
    ClientQuotas,
    QuotaFilterError,
    WindowedRate,
    configs_from_json,
    configs_to_json,
    describe,
    entity_of,
    plan_alteration,
)
from oncelog.protocol.messages import ErrorCode


def test_a_new_clients_rate_counts_the_missing_windows_as_empty():
    rate = WindowedRate(bound=100.0, samples=11, window_ms=1000)
    # 900 bytes at once: over 10 (empty) windows and the current one, 90/s, within the bound.
    assert rate.record_and_throttle(900, now_ms=10_000) == 0
    assert rate.measure(10_000) == pytest.approx(90.0)
    # 300 more: 1200 bytes over 10.5 s is 114.3/s; throttle (O - T) / T * W = 0.143 * 10500 ms.
    assert rate.record_and_throttle(300, now_ms=10_500) == round((1200 / 10.5 - 100) / 100 * 10_500)


def test_windows_older_than_the_span_are_forgotten_and_the_rate_falls_back():
    rate = WindowedRate(bound=100.0, samples=3, window_ms=1000)
    assert rate.record_and_throttle(1000, now_ms=0) > 0  # 1000 over 2 s: 500/s
    assert rate.measure(2_999) == pytest.approx(1000 / 2.999)
    assert rate.measure(3_000) == 0.0  # 3 windows after its last record, the window is reset


def test_a_request_percentage_throttle_is_at_most_one_window():
    quotas = ClientQuotas(samples=11, window_seconds=1)
    quotas.replace({entity_of([(CLIENT_ID, "busy")]): {"request_percentage": 1.0}})
    quota = quotas.of("User:ANONYMOUS", "busy")
    assert quota is not None and quota.produce is None and quota.request is not None
    assert quota.record_request_time(5.0, now_ms=1_000) == 1_000  # 500% of a thread against 1%


def test_fetch_max_bytes_cap_is_what_one_window_lets_through():
    rate = WindowedRate(bound=1000.0, samples=11, window_ms=1000)
    assert rate.max_value_in_window() == 10_000
    assert rate.record_and_throttle(10_000, now_ms=5) == 0  # exactly the cap passes on its own


@pytest.mark.parametrize(("configured", "expected"), [
    ("/config/users/alice/clients/c1", "/config/users/alice/clients/c1"),
    ("/config/users/alice/clients/<default>", "/config/users/alice/clients/<default>"),
    ("/config/users/alice", "/config/users/alice"),
    ("/config/users/<default>/clients/c1", "/config/users/<default>/clients/c1"),
    ("/config/users/<default>/clients/<default>", "/config/users/<default>/clients/<default>"),
    ("/config/users/<default>", "/config/users/<default>"),
    ("/config/clients/c1", "/config/clients/c1"),
    ("/config/clients/<default>", "/config/clients/<default>"),
])
def test_the_most_precise_entity_in_kafkas_order_holds_the_quota(configured, expected):
    """Each level wins over every level after it: with `configured` and all levels below
    it set, alice's c1 gets `expected`'s bound."""
    levels = ["/config/users/alice/clients/c1", "/config/users/alice/clients/<default>", "/config/users/alice",
              "/config/users/<default>/clients/c1", "/config/users/<default>/clients/<default>",
              "/config/users/<default>", "/config/clients/c1", "/config/clients/<default>"]
    present = levels[levels.index(configured):]
    quotas = ClientQuotas(samples=11, window_seconds=1)
    quotas.replace({_entity(path): {"producer_byte_rate": float(1000 + levels.index(path))} for path in present})
    quota = quotas.of("User:alice", "c1")
    assert quota is not None and quota.produce is not None
    assert quota.produce.bound == 1000 + levels.index(expected)
    assert quota.fetch is None and quota.request is None  # each key on its own


def test_clients_share_a_rate_exactly_when_kafkas_quota_metric_tags_are_the_same():
    quotas = ClientQuotas(samples=11, window_seconds=1)
    quotas.replace({_entity("/config/users/alice"): {"producer_byte_rate": 100.0},
                    _entity("/config/clients/<default>"): {"producer_byte_rate": 200.0}})
    alice_a, alice_b = quotas.of("User:alice", "a"), quotas.of("User:alice", "b")
    bob_a, bob_b = quotas.of("User:bob", "a"), quotas.of("User:bob", "b")
    assert alice_a is not None and alice_b is not None and bob_a is not None and bob_b is not None
    assert alice_a.produce is alice_b.produce  # one user quota for all of alice's client ids
    assert bob_a.produce is not bob_b.produce  # the client default: each client id its own
    assert quotas.of("User:bob", "a") is bob_a  # found once, then looked up
    assert quotas.of("User:carol", None) is not None  # no client id: the client default still applies


def test_no_quota_means_inactive_and_a_quota_removed_stops_applying():
    quotas = ClientQuotas(samples=11, window_seconds=1)
    assert not quotas.active
    quotas.replace({_entity("/config/clients/c1"): {"controller_mutation_rate": 5.0}})
    assert not quotas.active  # stored, not enforced
    quotas.replace({_entity("/config/clients/c1"): {"consumer_byte_rate": 5.0}})
    assert quotas.active and quotas.of("User:x", "c1") is not None and quotas.of("User:x", "c2") is None
    quotas.replace({})
    assert not quotas.active


def test_alterations_are_checked_as_kafkas_controller_checks_them():
    alice = ((USER, "alice"),)
    changed, results = plan_alteration({}, [
        Alteration(alice, (("producer_byte_rate", 1024.0), ("request_percentage", 12.5))),
        Alteration((), (("producer_byte_rate", 1.0),)),
        Alteration(((USER, "bob"), (USER, "carol")), (("producer_byte_rate", 1.0),)),
        Alteration((("group", "g"),), (("producer_byte_rate", 1.0),)),
        Alteration(((CLIENT_ID, ""),), (("producer_byte_rate", 1.0),)),
        Alteration(((IP, "10.0.0.1"), (USER, "dave")), (("connection_creation_rate", 1.0),)),
        Alteration(((USER, "erin"),), (("retention.ms", 1.0),)),
        Alteration(((USER, "frank"),), (("producer_byte_rate", -1.0),)),
        Alteration(((USER, "grace"),), (("producer_byte_rate", 1.5),)),
        Alteration(((USER, "heidi"),), (("producer_byte_rate", 1.0), ("producer_byte_rate", 2.0))),
        Alteration(((IP, None),), (("connection_creation_rate", 10.0),)),
    ])
    assert [(result.error_code, result.error_message) for result in results] == [
        (ErrorCode.none, None),
        (ErrorCode.invalid_request, "Invalid empty client quota entity"),
        (ErrorCode.invalid_request, "Invalid client quota entity, duplicate entity entry user"),
        (ErrorCode.invalid_request, "Unhandled client quota entity type: group"),
        (ErrorCode.invalid_request, "Empty client-id not supported"),
        (ErrorCode.invalid_request, ("Invalid quota entity combination, IP entity should not be combined with User "
                                     "or ClientId")),
        (ErrorCode.invalid_request, "Invalid configuration key retention.ms"),
        (ErrorCode.invalid_request, "Quota producer_byte_rate must be greater than 0"),
        (ErrorCode.invalid_request, "producer_byte_rate cannot be a fractional value."),
        (ErrorCode.invalid_request, ("Duplicate quota key producer_byte_rate not updating quota for this entity "
                                     "ClientQuotaEntity(entries={user=heidi})")),
        (ErrorCode.none, None),
    ]
    assert changed == {entity_of(alice): {"producer_byte_rate": 1024.0, "request_percentage": 12.5},
                       entity_of([(IP, None)]): {"connection_creation_rate": 10.0}}
    emptied, [removed, missing] = plan_alteration(changed, [
        Alteration(alice, (("producer_byte_rate", None), ("request_percentage", None))),
        Alteration(((USER, "nobody"),), (("producer_byte_rate", None),)),  # removing what is not there: fine
    ])
    assert removed.ok and missing.ok
    assert emptied == {entity_of([(IP, None)]): {"connection_creation_rate": 10.0}}  # alice has none left: gone


def test_an_entity_named_twice_in_one_request_changes_nothing():
    twice = [Alteration(((CLIENT_ID, "c"),), (("producer_byte_rate", 1.0),)),
             Alteration(((CLIENT_ID, "c"),), (("consumer_byte_rate", 1.0),))]
    changed, results = plan_alteration({}, twice)
    assert changed == {}
    assert {result.error_message for result in results} == {
        "Ignoring duplicate entity ClientQuotaEntity(entries={client-id=c})"}


def test_describe_filters_as_kafkas_client_quotas_image():
    configs = {_entity(path): {"producer_byte_rate": 1.0} for path in (
        "/config/users/alice", "/config/users/<default>", "/config/users/alice/clients/c1",
        "/config/clients/c1", "/config/clients/<default>")}

    def paths(components, strict=True):
        return [_path(entity) for entity, _values in describe(configs, components, strict)]

    assert paths([(USER, MATCH_SPECIFIED, None)]) == ["/config/users/<default>", "/config/users/alice"]
    assert paths([(USER, MATCH_EXACT, "alice")], strict=False) == [
        "/config/users/alice/clients/c1", "/config/users/alice"]
    assert paths([(CLIENT_ID, MATCH_DEFAULT, None)]) == ["/config/clients/<default>"]
    assert paths([(USER, MATCH_EXACT, "alice"), (CLIENT_ID, MATCH_SPECIFIED, None)]) == [
        "/config/users/alice/clients/c1"]
    assert len(paths([], strict=False)) == 5 and paths([]) == []
    for components, code, message in [
        ([("", MATCH_EXACT, "x")], ErrorCode.invalid_request, "Invalid empty entity type."),
        ([(USER, MATCH_EXACT, None)], ErrorCode.invalid_request,
         "Request specified MATCH_TYPE_EXACT, but set match string to null."),
        ([(USER, MATCH_DEFAULT, "x")], ErrorCode.invalid_request,
         "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."),
        ([(USER, MATCH_SPECIFIED, None), (USER, MATCH_DEFAULT, None)], ErrorCode.invalid_request,
         "Entity type user cannot appear more than once in the filter."),
        ([("group", MATCH_SPECIFIED, None)], ErrorCode.unsupported_version, "Unsupported entity type group"),
        ([(USER, 7, None)], ErrorCode.invalid_request, "Unknown match type 7"),
        ([(IP, MATCH_SPECIFIED, None), (USER, MATCH_SPECIFIED, None)], ErrorCode.invalid_request,
         ("Invalid entity filter component combination. IP filter component should not be used with user or "
          "clientId filter component.")),
    ]:
        with pytest.raises(QuotaFilterError) as refused:
            describe(configs, components, True)
        assert (refused.value.error_code, str(refused.value)) == (code, message)


def test_the_stored_form_reads_back_the_same():
    configs = {_entity("/config/users/<default>/clients/c1"): {"request_percentage": 12.5},
               _entity("/config/clients/<default>"): {"producer_byte_rate": 1024.0}}
    assert configs_from_json(configs_to_json(configs)) == configs
    with pytest.raises(ValueError, match="bad entity"):
        configs_from_json({"entities": [{"entity": {"user": 5}, "quotas": {}}]})


def _entity(path: str):
    """`/config/users/alice/clients/<default>` as an entity."""
    parts = path.removeprefix("/config/").split("/")
    kinds = {"users": USER, "clients": CLIENT_ID}
    return entity_of((kinds[kind], None if name == "<default>" else name) for kind, name in zip(parts[::2], parts[1::2],
                                                                                                 strict=True))


def _path(entity) -> str:
    names = dict(entity)
    parts = [f"{kind}/{'<default>' if names[key] is None else names[key]}"
             for kind, key in (("users", USER), ("clients", CLIENT_ID)) if key in names]
    return "/config/" + "/".join(parts)


def test_a_handlers_loop_time_counts_its_own_steps_not_its_waits():
    async def handler() -> str:
        await asyncio.sleep(0.2)  # waiting (a long poll): not charged
        busy_until = time.perf_counter() + 0.05
        while time.perf_counter() < busy_until:  # holding the loop: charged
            pass
        return "answer"

    async def charged() -> tuple[str, float]:
        timed = LoopTime(handler())
        return await timed, timed.seconds

    answer, seconds = asyncio.run(charged())
    assert answer == "answer"
    assert 0.05 <= seconds < 0.15

"""The HTTP listener's sign-in checks (oncelog.web.sign_in: the cache, the per-address
token bucket) and Host check (oncelog.web.server.AllowedHosts), without sockets. The
attacks themselves are in tests/integration/test_attack_http.py."""

from __future__ import annotations

import base64

import pytest

from oncelog.config.broker import BrokerConfig, ConfigError
from oncelog.web.server import AllowedHosts, listener_names
from oncelog.web.sign_in import CACHE_TTL_S, FAILURE_BURST, FAILURE_REFILL_S, Outcome, SignIns


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.fixture
def checks():
    """SignIns over one user, alice (password "right"), counting the checks it makes."""
    made: list[str] = []

    def authenticate(user: str, password: str) -> str | None:
        made.append(password)
        return f"User:{user}" if (user, password) == ("alice", "right") else None

    clock = Clock()
    return SignIns(authenticate, clock=clock), clock, made


def test_a_successful_sign_in_is_remembered_for_a_while_and_then_checked_again(checks):
    sign_ins, clock, made = checks
    for _ in range(30):  # a minute of the page's polling
        assert sign_ins.check(basic("alice", "right"), "10.0.0.1").principal == "User:alice"
        clock.now += 1.9
    assert len(made) == 1
    clock.now += CACHE_TTL_S
    assert sign_ins.check(basic("alice", "right"), "10.0.0.1").outcome is Outcome.SIGNED_IN
    assert len(made) == 2


def test_failures_empty_the_addresss_bucket_which_refills_one_token_per_interval(checks):
    sign_ins, clock, made = checks
    for attempt in range(FAILURE_BURST):
        assert sign_ins.check(basic("alice", f"guess-{attempt}"), "10.0.0.1").outcome is Outcome.WRONG
    limited = sign_ins.check(basic("alice", "right"), "10.0.0.1")
    assert limited.outcome is Outcome.LIMITED and limited.retry_after_s == pytest.approx(FAILURE_REFILL_S)
    assert len(made) == FAILURE_BURST  # the right password was not even checked
    assert sign_ins.check(basic("alice", "right"), "10.0.0.2").outcome is Outcome.SIGNED_IN  # another address
    clock.now += FAILURE_REFILL_S
    assert sign_ins.check(basic("alice", "right"), "10.0.0.1").outcome is Outcome.SIGNED_IN
    # A success gives its token back: the address may still fail once before it is limited again.
    assert sign_ins.check(basic("alice", "wrong"), "10.0.0.1").outcome is Outcome.WRONG
    assert sign_ins.check(basic("alice", "wrong again"), "10.0.0.1").outcome is Outcome.LIMITED


def test_an_ipv6_client_is_limited_by_its_64_and_malformed_credentials_count_as_failures(checks):
    sign_ins, _clock, _made = checks
    for host in range(FAILURE_BURST):
        assert sign_ins.check("Basic !!!", f"2001:db8:1:2::{host + 1:x}").outcome is Outcome.WRONG
    assert sign_ins.check(basic("alice", "right"), "2001:db8:1:2::ffff").outcome is Outcome.LIMITED
    assert sign_ins.check(basic("alice", "right"), "2001:db8:1:3::1").outcome is Outcome.SIGNED_IN
    assert sign_ins.check("", "2001:db8:1:3::1").outcome is Outcome.NO_CREDENTIALS


@pytest.mark.parametrize("header, local, allowed", [
    ("broker-1.example:9308", "10.0.0.5", True),  # an advertised host
    ("BROKER-1.EXAMPLE.", "10.0.0.5", True),
    ("metrics.internal", "10.0.0.5", True),  # http.allowed.hosts
    ("10.0.0.5:9308", "10.0.0.5", True),  # the address the connection came in on
    ("10.0.0.6:9308", "10.0.0.5", False),
    ("localhost:9308", "127.0.0.1", True),
    ("localhost:9308", "10.0.0.5", False),  # localhost is only the machine itself
    ("[::1]:9308", "::1", True),
    ("127.0.0.1:9308", "::ffff:127.0.0.1", True),  # a dual-stack socket's view of IPv4
    ("rebind.attacker.example:9308", "127.0.0.1", False),
    ("broker-1.example:http", "10.0.0.5", False),  # malformed
    ("", "10.0.0.5", False),
])
def test_the_host_header_must_name_the_listener(header, local, allowed):
    hosts = listener_names("0.0.0.0", ["broker-1.example"], "metrics.internal")
    assert hosts.allows(header, local) is allowed


def test_a_star_in_http_allowed_hosts_turns_the_check_off():
    assert listener_names("127.0.0.1", [], "*").allows("anything.example", "127.0.0.1")
    assert AllowedHosts(frozenset()).allows("anything.example", "127.0.0.1") is False


def test_the_http_listeners_ssl_keys_override_the_brokers_and_its_limits_are_checked():
    config = BrokerConfig({"ssl.keystore.location": "/broker.pem", "ssl.enabled.protocols": "TLSv1.2,TLSv1.3",
                           "http.ssl.enabled.protocols": "TLSv1.3", "http.ssl.enabled": "true"})
    settings = config.http_ssl_settings()
    assert settings["ssl.keystore.location"] == "/broker.pem" and settings["ssl.enabled.protocols"] == "TLSv1.3"
    assert "ssl.enabled" not in settings
    for key in ("http.max.connections", "http.worker.threads", "http.request.timeout.ms"):
        with pytest.raises(ConfigError, match=f"{key}: must be at least 1"):
            BrokerConfig({key: "0"})

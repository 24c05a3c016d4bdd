"""Attacks on the listeners before and around login: size prefixes that claim memory,
connections that never authenticate or never speak again, and many connections from one
address. One broker process (its memory is read from /proc) with a listener of each
security protocol, short idle and authentication timeouts, and real TLS.

Each of these gave way before (issue 38): eight sockets claiming 100 MiB took the broker
from 57 to 857 MB, and nothing ever closed them.
"""

from __future__ import annotations

import socket
import ssl
import struct
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from oncelog import EmbeddedBroker
from oncelog.config.broker import BrokerConfig, ConfigError
from oncelog.local.process import BrokerProcess, free_port, wait_until
from oncelog.protocol.client import WireClient
from tests.support.certs import CertificateAuthority, Issued, four_listeners

MIB = 1 << 20
CLAIM_100_MIB = struct.pack(">i", 100 * MIB) + b"\x00\x12"  # a size prefix, then the first bytes of a header
AUTHENTICATION_TIMEOUT_MS = 3000
IDLE_MS = 3000
LISTENERS = ("PLAINTEXT", "SSL", "SASL_SSL", "SASL_PLAINTEXT")


def rss_bytes(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    (line,) = [line for line in status.splitlines() if line.startswith("VmRSS:")]
    return int(line.split()[1]) * 1024


@pytest.fixture(scope="module")
def certificates(tmp_path_factory) -> tuple[CertificateAuthority, Issued]:
    ca = CertificateAuthority.create(tmp_path_factory.mktemp("attack-certs"))
    return ca, ca.issue("broker", "CN=localhost,O=oncelog", server=True)


@pytest.fixture(scope="module")
def exposed(tmp_path_factory, certificates) -> Iterator[tuple[BrokerProcess, dict[str, int]]]:
    ca, server = certificates
    ports = {name: free_port() for name in LISTENERS}
    config = four_listeners(ca, server)
    config.update({
        "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items()),
        "connections.authentication.timeout.ms": str(AUTHENTICATION_TIMEOUT_MS),
        "connections.max.idle.ms": str(IDLE_MS),
    })
    broker = BrokerProcess(tmp_path_factory.mktemp("attack") / "data", config, port=ports["PLAINTEXT"]).start()
    try:
        yield broker, ports
    finally:
        broker.stop()


def client_tls(ca: CertificateAuthority) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca.certificate))
    context.check_hostname = False
    return context


def connect(port: int, tls: ssl.SSLContext | None = None) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    return tls.wrap_socket(sock) if tls is not None else sock  # an anonymous handshake: no client certificate


def closed_within(sock: socket.socket, seconds: float) -> bool:
    """True when the broker closes `sock` (EOF or reset) within `seconds`."""
    sock.settimeout(seconds)
    try:
        while sock.recv(65536):
            pass
        return True
    except (ConnectionError, ssl.SSLError):
        return True
    except TimeoutError:
        return False


def test_eight_claims_of_100_mib_before_sasl_authentication_are_refused_from_their_size_prefix(
        exposed, certificates):
    broker, ports = exposed
    tls = client_tls(certificates[0])
    for name, context in (("SASL_PLAINTEXT", None), ("SASL_SSL", tls)):
        before = rss_bytes(broker.pid)
        with ExitStack() as held:
            sockets = [held.enter_context(connect(ports[name], context)) for _ in range(8)]
            for sock in sockets:
                sock.sendall(CLAIM_100_MIB)
            assert all(closed_within(sock, 5) for sock in sockets), name
        assert rss_bytes(broker.pid) - before < 20 * MIB, name
    log = broker.log_path.read_text()
    assert "request size 104857600 is outside [0, sasl.server.max.receive.size before authentication=524288]" in log


def test_memory_follows_the_bytes_sent_not_the_sizes_claimed_and_idle_claims_are_closed(exposed, certificates):
    """Claims within the limits (100 MiB on PLAINTEXT, 500 KiB before SASL authentication)
    are held until they complete or go idle, at the cost of what was sent."""
    broker, ports = exposed
    tls = client_tls(certificates[0])
    claims = [("PLAINTEXT", None, CLAIM_100_MIB), ("SASL_PLAINTEXT", None, struct.pack(">i", 500 * 1024) + b"\x00\x12"),
              ("SASL_SSL", tls, struct.pack(">i", 500 * 1024) + b"\x00\x12")]
    before = rss_bytes(broker.pid)
    with ExitStack() as held:
        sockets = []
        for name, context, claim in claims:
            for _ in range(8):
                sock = held.enter_context(connect(ports[name], context))
                sock.sendall(claim)
                sockets.append(sock)
        time.sleep(0.5)  # every claim has reached the broker
        assert rss_bytes(broker.pid) - before < 20 * MIB
        began = time.monotonic()
        assert all(closed_within(sock, IDLE_MS / 1000 + 5) for sock in sockets)
        assert time.monotonic() - began < IDLE_MS / 1000 + 5


@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL", "SSL"])
def test_a_connection_that_has_not_authenticated_in_time_is_closed(exposed, certificates, listener):
    """Silent after connecting (SSL: not even a ClientHello), or stalled after the SASL
    handshake: closed at connections.authentication.timeout.ms, not kept for ever."""
    broker, ports = exposed
    tls = client_tls(certificates[0])
    silent = socket.create_connection(("127.0.0.1", ports[listener]), timeout=10)
    stalled = None
    if listener != "SSL":
        stalled = WireClient("127.0.0.1", ports[listener])
        if listener == "SASL_SSL":
            stalled.sock = tls.wrap_socket(stalled.sock)
        stalled.request(ApiVersionsRequest(client_software_name="attacker", client_software_version="1"))
        mechanism = "PLAIN" if listener == "SASL_SSL" else "SCRAM-SHA-512"
        assert stalled.request(SaslHandshakeRequest(mechanism=mechanism)).error_code == ErrorCode.none
    began = time.monotonic()
    with silent:
        assert closed_within(silent, AUTHENTICATION_TIMEOUT_MS / 1000 + 5)
    if stalled is not None:
        with stalled:
            assert closed_within(stalled.sock, AUTHENTICATION_TIMEOUT_MS / 1000 + 5)
    assert time.monotonic() - began < AUTHENTICATION_TIMEOUT_MS / 1000 + 5
    assert "not authenticated within connections.authentication.timeout.ms=3000" in broker.log_path.read_text()


def test_an_idle_connection_is_closed_and_a_busy_one_is_not(exposed):
    _broker, ports = exposed
    request = ApiVersionsRequest(client_software_name="probe", client_software_version="1")
    with WireClient("127.0.0.1", ports["PLAINTEXT"]) as idle, WireClient("127.0.0.1", ports["PLAINTEXT"]) as busy:
        idle.request(request)
        began = time.monotonic()
        while time.monotonic() - began < IDLE_MS / 1000 * 2:
            busy.request(request)
            time.sleep(0.5)
        assert closed_within(idle.sock, 1)
        assert busy.request(request).error_code == ErrorCode.none


def test_clients_that_authenticate_work_through_the_short_timeouts(exposed, certificates):
    """A real client over SASL_SSL: produces and reads back, reconnecting after idling."""
    _broker, ports = exposed
    settings = {"bootstrap.servers": f"127.0.0.1:{ports['SASL_SSL']}", "security.protocol": "SASL_SSL",
                "ssl.ca.location": str(certificates[0].certificate), "sasl.mechanism": "PLAIN",
                "sasl.username": "bob", "sasl.password": "bob-secret"}
    producer = Producer(settings)
    producer.produce("after-timeouts", b"kept")
    assert producer.flush(20) == 0
    consumer = Consumer({**settings, "group.id": "attack-check", "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe(["after-timeouts"])
        deadline = time.monotonic() + 30
        message = None
        while message is None and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error():
                message = None
        assert message is not None and message.value() == b"kept"
    finally:
        consumer.close()


@contextmanager
def per_ip_broker(tmp_path: Path, certificates, **settings: str) -> Iterator[EmbeddedBroker]:
    ca, server = certificates
    config = four_listeners(ca, server)
    config.update(settings)
    with EmbeddedBroker(tmp_path / "data", config) as running:
        yield running


def test_connections_above_max_connections_per_ip_are_closed_at_once_even_before_a_tls_handshake(
        tmp_path, certificates):
    with per_ip_broker(tmp_path, certificates, **{"max.connections.per.ip": "3"}) as running:
        ssl_port = running.broker.endpoints["SSL"][1]
        held = [socket.create_connection(("127.0.0.1", ssl_port), timeout=10) for _ in range(3)]
        wait_until(lambda: running.call(lambda: running.broker.server.connections_from("127.0.0.1")) == 3,
                   message="three connections counted")
        with socket.create_connection(("127.0.0.1", ssl_port), timeout=10) as fourth:
            assert closed_within(fourth, 2)  # refused without its TLS handshake
        held.pop().close()
        wait_until(lambda: running.call(lambda: running.broker.server.connections_from("127.0.0.1")) == 2,
                   message="a slot freed")
        with WireClient.connect(running.bootstrap_servers) as client:  # the freed slot is taken on any listener
            assert client.request(ApiVersionsRequest(client_software_name="x", client_software_version="1")) \
                .error_code == ErrorCode.none
        for sock in held:
            sock.close()


def test_max_connections_per_ip_overrides_give_one_address_its_own_limit(tmp_path, certificates):
    with per_ip_broker(tmp_path, certificates, **{"max.connections.per.ip": "1",
                                                   "max.connections.per.ip.overrides": "127.0.0.1:4"}) as running:
        clients = [WireClient.connect(running.bootstrap_servers) for _ in range(4)]
        try:
            for client in clients:
                assert client.request(ApiVersionsRequest(client_software_name="x", client_software_version="1")) \
                    .error_code == ErrorCode.none
            with socket.create_connection(("127.0.0.1", running.port), timeout=10) as fifth:
                assert closed_within(fifth, 2)
        finally:
            for client in clients:
                client.close()


@pytest.mark.parametrize(("settings", "message"), [
    ({"max.connections.per.ip": "0"}, "can be 0 only if max.connections.per.ip.overrides is set"),
    ({"max.connections.per.ip.overrides": "127.0.0.1"}, "expected host:count"),
    ({"max.connections.per.ip.overrides": "127.0.0.1:-2"}, "expected host:count"),
    ({"connections.authentication.timeout.ms": "0"}, "must be positive"),
])
def test_bad_connection_limits_are_one_clear_error(settings, message):
    with pytest.raises(ConfigError, match=message):
        BrokerConfig(settings)

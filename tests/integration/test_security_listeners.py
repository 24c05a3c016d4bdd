"""TLS and SASL listeners with real clients: one broker with PLAINTEXT, SSL (mTLS, a
PKCS12 keystore, a principal mapping rule), SASL_SSL (PLAIN, SCRAM, PEM keystore) and
SASL_PLAINTEXT (SCRAM-SHA-512, OAUTHBEARER) listeners at once; SCRAM credentials made
and listed with AlterUserScramCredentials and DescribeUserScramCredentials; a
transaction and a read_committed read on every listener; and what a wrong password, an
unknown mechanism, a plaintext client on a TLS port and requests before authentication
get."""

from __future__ import annotations

import logging
import socket
import struct
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from oncelog import EmbeddedBroker
from oncelog.config.broker import ConfigError
from tests.support.certs import PLAIN_JAAS, CertificateAuthority, four_listeners


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    base = tmp_path_factory.mktemp("security")
    ca = CertificateAuthority.create(base / "certs")
    server = ca.issue("broker", "CN=localhost,O=oncelog", server=True)
    alice = ca.issue("alice", "CN=alice,OU=eng,O=oncelog", server=False)
    config = four_listeners(ca, server)
    with EmbeddedBroker(base / "data", config) as running:
        endpoints = running.broker.endpoints
        addresses = {name: f"{host}:{port}" for name, (host, port) in endpoints.items()}
        admin = AdminClient({"bootstrap.servers": addresses["PLAINTEXT"]})
        admin.create_topics([NewTopic("secure", 1, 1)])["secure"].result(10)
        for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):  # one request each, as Kafka
            for future in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
                    "carol", ScramCredentialInfo(mechanism, 8192), b"carol-secret")]).values():
                future.result(10)
        yield {"addresses": addresses, "ca": ca, "alice": alice, "admin": admin, "running": running}


def tls(secure) -> dict:
    return {"ssl.ca.location": str(secure["ca"].certificate)}


def exactly_once_roundtrip(bootstrap: str, settings: dict, name: str) -> None:
    """A committed transaction, then a read_committed consumer reads it back."""
    producer = Producer({"bootstrap.servers": bootstrap, **settings, "transactional.id": f"tx-{name}"})
    producer.init_transactions(10)
    producer.begin_transaction()
    producer.produce("secure", name.encode())
    producer.commit_transaction(10)
    consumer = Consumer({"bootstrap.servers": bootstrap, **settings, "group.id": f"group-{name}",
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    consumer.subscribe(["secure"])
    seen = set()
    deadline = time.monotonic() + 20
    while name.encode() not in seen and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            seen.add(message.value())
    consumer.close()
    assert name.encode() in seen


@pytest.mark.parametrize("case", ["ssl-mtls", "sasl-ssl-plain", "sasl-ssl-scram-256", "sasl-plaintext-scram-512",
                                  "sasl-plaintext-oauthbearer"])
def test_transactions_and_read_committed_work_on_every_secured_listener(secure, case):
    alice = secure["alice"]
    listener, settings = {
        "ssl-mtls": ("SSL", {"security.protocol": "SSL", **tls(secure), "ssl.certificate.location":
                             str(alice.certificate), "ssl.key.location": str(alice.key)}),
        "sasl-ssl-plain": ("SASL_SSL", {"security.protocol": "SASL_SSL", **tls(secure), "sasl.mechanism": "PLAIN",
                                        "sasl.username": "bob", "sasl.password": "bob-secret"}),
        "sasl-ssl-scram-256": ("SASL_SSL", {"security.protocol": "SASL_SSL", **tls(secure),
                                            "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "carol",
                                            "sasl.password": "carol-secret"}),
        "sasl-plaintext-scram-512": ("SASL_PLAINTEXT", {"security.protocol": "SASL_PLAINTEXT",
                                                        "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "carol",
                                                        "sasl.password": "carol-secret"}),
        "sasl-plaintext-oauthbearer": ("SASL_PLAINTEXT", {"security.protocol": "SASL_PLAINTEXT",
                                                          "sasl.mechanism": "OAUTHBEARER",
                                                          "sasl.oauthbearer.config": "principal=dave",
                                                          "enable.sasl.oauthbearer.unsecure.jwt": True}),
    }[case]
    exactly_once_roundtrip(secure["addresses"][listener], settings, case)


def test_metadata_on_each_listener_advertises_that_listeners_addresses(secure):
    for listener, settings in (("PLAINTEXT", {}), ("SASL_PLAINTEXT", {
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "carol",
            "sasl.password": "carol-secret"})):
        metadata = AdminClient({"bootstrap.servers": secure["addresses"][listener], **settings}).list_topics(timeout=10)
        [broker] = metadata.brokers.values()
        assert f"{broker.host}:{broker.port}" == secure["addresses"][listener]


def test_scram_credentials_are_listed_without_secrets_and_removed(secure):
    admin = secure["admin"]
    described = admin.describe_user_scram_credentials(["carol"])["carol"].result(10)
    assert sorted((info.mechanism, info.iterations) for info in described.scram_credential_infos) == [
        (ScramMechanism.SCRAM_SHA_256, 8192), (ScramMechanism.SCRAM_SHA_512, 8192)]
    stored = (secure["running"].broker.config.log_dirs[0] / "scram-credentials.json").read_text()
    assert "carol-secret" not in stored and "carol" in stored
    for future in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "erin", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"erin-secret")]).values():
        future.result(10)
    for future in admin.alter_user_scram_credentials(
            [UserScramCredentialDeletion("erin", ScramMechanism.SCRAM_SHA_256)]).values():
        future.result(10)
    with pytest.raises(KafkaException, match="RESOURCE_NOT_FOUND"):
        admin.describe_user_scram_credentials(["erin"])["erin"].result(10)


def test_a_wrong_password_is_sasl_authentication_failed_and_the_connection_closes(secure, caplog):
    errors = []
    producer = Producer({"bootstrap.servers": secure["addresses"]["SASL_PLAINTEXT"],
                         "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
                         "sasl.username": "carol", "sasl.password": "not-carols", "error_cb": errors.append})
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    assert errors, "no authentication error reached the client"
    assert "invalid credentials with SASL mechanism SCRAM-SHA-512" in errors[0].str()
    assert "not-carols" not in caplog.text  # never logged
    assert "authentication from 127.0.0.1" in caplog.text


def sasl_handshake_frame(mechanism: str, version: int = 1, correlation: int = 7) -> bytes:
    """A SaslHandshake request as bytes (header v1, non-flexible)."""
    client_id = b"raw"
    body = struct.pack(">h", len(mechanism)) + mechanism.encode()
    header = struct.pack(">hhih", 17, version, correlation, len(client_id)) + client_id
    return struct.pack(">i", len(header) + len(body)) + header + body


def read_frame(sock: socket.socket) -> bytes:
    size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
    return sock.recv(size, socket.MSG_WAITALL)


def connect(address: str) -> socket.socket:
    host, port = address.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10)


def test_an_unknown_mechanism_is_unsupported_sasl_mechanism_with_the_listeners_list_then_closed(secure):
    with connect(secure["addresses"]["SASL_PLAINTEXT"]) as sock:
        sock.sendall(sasl_handshake_frame("GSSAPI"))
        frame = read_frame(sock)
        correlation, error_code = struct.unpack_from(">ih", frame)
        assert (correlation, error_code) == (7, 33)  # UNSUPPORTED_SASL_MECHANISM
        assert b"SCRAM-SHA-512" in frame and b"OAUTHBEARER" in frame
        assert sock.recv(1) == b""  # closed


def test_a_request_before_authentication_closes_the_connection_and_others_go_on(secure):
    metadata_v1 = struct.pack(">hhih", 3, 1, 9, 3) + b"raw" + struct.pack(">i", -1)
    with connect(secure["addresses"]["SASL_PLAINTEXT"]) as sock:
        sock.sendall(struct.pack(">i", len(metadata_v1)) + metadata_v1)
        assert sock.recv(1) == b""  # refused by closing, as Kafka
    exactly_once_roundtrip(secure["addresses"]["SASL_PLAINTEXT"], {
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "carol",
        "sasl.password": "carol-secret"}, "after-refusal")


def test_a_plaintext_client_on_a_tls_port_and_an_oversized_token_harm_nothing(secure):
    with connect(secure["addresses"]["SSL"]) as sock:
        sock.sendall(sasl_handshake_frame("PLAIN"))
        answer = sock.recv(4096)
        assert answer == b"" or answer[0] == 0x15  # closed, or a TLS alert record: never a Kafka response
    with connect(secure["addresses"]["SASL_PLAINTEXT"]) as sock:
        sock.sendall(sasl_handshake_frame("SCRAM-SHA-512", version=0))  # v0: bare tokens follow
        read_frame(sock)
        # Above sasl.server.max.receive.size: refused from its size prefix, so the broker may
        # close while the token is still arriving (the kernel then answers with a reset).
        try:
            sock.sendall(struct.pack(">i", 600_000) + b"n" * 600_000)
            assert sock.recv(1) == b""
        except ConnectionResetError:
            pass
    exactly_once_roundtrip(secure["addresses"]["SASL_PLAINTEXT"], {
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "carol",
        "sasl.password": "carol-secret"}, "after-bad-input")


def test_a_client_without_a_certificate_cannot_connect_to_a_required_mtls_listener(secure):
    errors = []
    producer = Producer({"bootstrap.servers": secure["addresses"]["SSL"], "security.protocol": "SSL", **tls(secure),
                         "error_cb": errors.append})
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    assert errors


@pytest.mark.parametrize(("settings", "message"), [
    ({"listeners": "SASL_PLAINTEXT://127.0.0.1:0"}, "GSSAPI cannot be offered"),
    ({"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN"}, "no users are configured"),
    ({"listeners": "SSL://127.0.0.1:0"}, "JKS keystores cannot be read"),
    ({"listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PKCS12", "ssl.keystore.location": "/nonexistent.p12"},
     "cannot read /nonexistent.p12"),
    ({"listeners": "PLAINTEXT://0.0.0.0:0"}, "non-routable address 0.0.0.0"),  # as Kafka: say what to advertise
])
def test_a_listener_that_cannot_work_stops_the_start_with_one_line(tmp_path, settings, message):
    with pytest.raises(ConfigError, match=message), EmbeddedBroker(tmp_path / "b", settings):
        pass


def authenticate_plain(sock: socket.socket, user: str, secret: str) -> int:
    """SaslHandshake v1 and SaslAuthenticate v1 with PLAIN, by hand; the session lifetime."""
    sock.sendall(sasl_handshake_frame("PLAIN"))
    correlation, error_code = struct.unpack_from(">ih", read_frame(sock))
    assert error_code == 0
    token = b"\0" + user.encode() + b"\0" + secret.encode()
    header = struct.pack(">hhih", 36, 1, 8, 3) + b"raw"
    body = struct.pack(">i", len(token)) + token
    sock.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
    frame = read_frame(sock)
    correlation, error_code, message_length = struct.unpack_from(">ihh", frame)
    assert (correlation, error_code, message_length) == (8, 0, -1)
    (token_length,) = struct.unpack_from(">i", frame, 8)
    (lifetime_ms,) = struct.unpack_from(">q", frame, 12 + token_length)
    return lifetime_ms


def test_a_session_past_connections_max_reauth_ms_is_closed_unless_the_client_re_authenticates(tmp_path, caplog):
    """KIP-368: the broker tells the client its session lifetime; a request after it ends
    closes the connection, while a client that re-authenticates in time goes on."""
    config = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN",
              "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
              "connections.max.reauth.ms": "1000"}
    metadata_v1 = struct.pack(">hhih", 3, 1, 9, 3) + b"raw" + struct.pack(">i", 0)
    with EmbeddedBroker(tmp_path / "b", config) as running:
        with connect(running.bootstrap_servers) as sock:
            assert authenticate_plain(sock, "bob", "bob-secret") == 1000
            sock.sendall(struct.pack(">i", len(metadata_v1)) + metadata_v1)
            assert struct.unpack_from(">i", read_frame(sock))[0] == 9  # answered within the session
            time.sleep(1.2)
            sock.sendall(struct.pack(">i", len(metadata_v1)) + metadata_v1)
            assert sock.recv(1) == b""  # expired: closed
        with connect(running.bootstrap_servers) as sock:
            authenticate_plain(sock, "bob", "bob-secret")
            time.sleep(0.7)
            assert authenticate_plain(sock, "bob", "bob-secret") == 1000  # re-authenticated in time
            time.sleep(0.7)  # past the first session's end, within the second's
            sock.sendall(struct.pack(">i", len(metadata_v1)) + metadata_v1)
            assert struct.unpack_from(">i", read_frame(sock))[0] == 9
        # librdkafka re-authenticates by itself (KIP-368): a producer outlives several sessions.
        caplog.set_level(logging.DEBUG, logger="oncelog.security")
        producer = Producer({"bootstrap.servers": running.bootstrap_servers, "security.protocol": "SASL_PLAINTEXT",
                             "sasl.mechanism": "PLAIN", "sasl.username": "bob", "sasl.password": "bob-secret",
                             "linger.ms": 0})
        delivered = []
        deadline = time.monotonic() + 3.5
        while time.monotonic() < deadline:
            producer.produce("reauth", b"x", on_delivery=lambda error, _m: delivered.append(error))
            producer.poll(0.1)
        producer.flush(10)
        assert len(delivered) > 20 and all(error is None for error in delivered)
        assert "User:bob re-authenticated from 127.0.0.1 with PLAIN" in caplog.text


def test_re_authenticating_as_someone_else_fails_and_closes(tmp_path):
    config = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN",
              "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS}
    with EmbeddedBroker(tmp_path / "b", config) as running, connect(running.bootstrap_servers) as sock:
        authenticate_plain(sock, "bob", "bob-secret")
        sock.sendall(sasl_handshake_frame("PLAIN"))
        read_frame(sock)
        token = b"\0admin\0admin-secret"
        header = struct.pack(">hhih", 36, 1, 8, 3) + b"raw"
        sock.sendall(struct.pack(">i", len(header) + 4 + len(token)) + header + struct.pack(">i", len(token)) + token)
        _correlation, error_code = struct.unpack_from(">ih", read_frame(sock))
        assert error_code == 58  # SASL_AUTHENTICATION_FAILED
        assert sock.recv(1) == b""


def test_a_listener_on_every_interface_advertises_the_machines_name_or_what_it_is_told(tmp_path):
    with EmbeddedBroker(tmp_path / "a", {"listeners": "PLAINTEXT://:0"}) as running:
        assert running.broker.endpoints["PLAINTEXT"][0] == socket.getfqdn()
    with EmbeddedBroker(tmp_path / "b", {"listeners": "PLAINTEXT://0.0.0.0:0",
                                         "advertised.listeners": "PLAINTEXT://127.0.0.1:0"}) as running:
        host, port = running.broker.endpoints["PLAINTEXT"]
        assert (host, port) == ("127.0.0.1", running.port)
        AdminClient({"bootstrap.servers": f"{host}:{port}"}).list_topics(timeout=10)


def test_describe_configs_never_sends_a_password(secure):
    from confluent_kafka.admin import ConfigResource, ResourceType

    admin = secure["admin"]
    broker_id = str(secure["running"].broker.node_id)
    described = admin.describe_configs([ConfigResource(ResourceType.BROKER, broker_id)])
    [entries] = [future.result(10) for future in described.values()]
    password = entries["ssl.keystore.password"]
    assert password.is_sensitive and password.value is None
    assert "test-store-secret" not in repr({name: entry.value for name, entry in entries.items()})
    assert entries["ssl.keystore.type"].value == "PKCS12" and not entries["ssl.keystore.type"].is_sensitive

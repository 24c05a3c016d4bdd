"""oncelog's own client (oncelog.client) on SASL listeners: each mechanism authenticates
and a transaction commits; a wrong password or an unoffered mechanism fails at once, naming
the mechanism and the broker's message, instead of being retried; and with
`connections.max.reauth.ms` the client replaces a connection before its session ends
(KIP-368), with requests in flight, without one failing."""

from __future__ import annotations

import logging
import time

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from oncelog import EmbeddedBroker
from oncelog.client.cluster import Cluster
from oncelog.client.config import ClientConfig
from oncelog.client.errors import AuthenticationFailed
from oncelog.client.fetcher import FetchSettings, PartitionFetcher
from oncelog.client.producer import ProducerSettings, TransactionalProducer
from oncelog.client.records import encode_records
from tests.support.certs import PASSWORD, CertificateAuthority

REAUTH_MS = 2000
PLAIN_JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";'
HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    base = tmp_path_factory.mktemp("client-sasl")
    ca = CertificateAuthority.create(base / "certs")
    server = ca.issue("broker", "CN=localhost", server=True)
    config = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(server.pkcs12), "ssl.keystore.password": PASSWORD,
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "connections.max.reauth.ms": str(REAUTH_MS),
        "connection.failed.authentication.delay.ms": "20",
    }
    with EmbeddedBroker(base / "data", config) as running:
        addresses = {name: f"{host}:{port}" for name, (host, port) in running.broker.endpoints.items()}
        admin = AdminClient({"bootstrap.servers": addresses["PLAINTEXT"]})
        for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):  # one per request, as Kafka
            for future in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
                    "carol", ScramCredentialInfo(mechanism, 4096), b"carol-secret")]).values():
                future.result(10)
        yield {"addresses": addresses, "admin": admin, "ca": ca}


def create(broker, topic: str) -> None:
    broker["admin"].create_topics([NewTopic(topic, 1, 1)])[topic].result(10)


def sasl_config(broker, mechanism: str, listener: str = "SASL_PLAINTEXT", **extra: str) -> ClientConfig:
    credentials = ({"sasl.oauthbearer.config": "principal=dave"} if mechanism == "OAUTHBEARER" else
                   {"sasl.username": "alice", "sasl.password": "alice-secret"} if mechanism == "PLAIN" else
                   {"sasl.username": "carol", "sasl.password": "carol-secret"})
    tls = {"ssl.ca.location": str(broker["ca"].certificate)} if listener == "SASL_SSL" else {}
    return ClientConfig.from_settings(broker["addresses"][listener], {
        "security.protocol": listener, "sasl.mechanism": mechanism, **credentials, **tls, **extra})


def records(*values: bytes):
    return encode_records(None, pa.array(values, pa.binary()), pa.array([[] for _ in values], HEADERS),
                          max_batch_bytes=10_000, timestamp_ms=int(time.time() * 1000))


def read_committed(broker, topic: str) -> list[bytes | None]:
    consumer = Consumer({"bootstrap.servers": broker["addresses"]["PLAINTEXT"], "group.id": "check",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    consumer.assign([TopicPartition(topic, 0, 0)])
    found: list[bytes | None] = []
    deadline = time.monotonic() + 20
    while consumer.position([TopicPartition(topic, 0)])[0].offset < end and time.monotonic() < deadline:
        found += [message.value() for message in consumer.consume(100, 0.2) if message.error() is None]
    consumer.close()
    return found


@pytest.mark.parametrize("mechanism, listener", [
    ("PLAIN", "SASL_PLAINTEXT"), ("SCRAM-SHA-256", "SASL_PLAINTEXT"), ("SCRAM-SHA-512", "SASL_PLAINTEXT"),
    ("OAUTHBEARER", "SASL_PLAINTEXT"), ("SCRAM-SHA-512", "SASL_SSL"),
])
def test_each_mechanism_authenticates_and_a_transaction_commits(broker, mechanism, listener):
    topic = f"client-sasl-{mechanism.lower()}-{listener.lower()}"
    create(broker, topic)
    producer = TransactionalProducer(Cluster(sasl_config(broker, mechanism, listener)), f"tx-{topic}",
                                     ProducerSettings(), timeout_s=20)
    producer.init()
    producer.begin()
    producer.write(topic, 0, records(b"one", b"two"))
    producer.commit()
    assert read_committed(broker, topic) == [b"one", b"two"]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_a_wrong_password_fails_at_once_naming_the_mechanism_and_the_brokers_message(broker, mechanism):
    username = "alice" if mechanism == "PLAIN" else "carol"
    cluster = Cluster(sasl_config(broker, mechanism, **{"sasl.username": username, "sasl.password": "not-it"}))
    started = time.monotonic()
    with pytest.raises(AuthenticationFailed) as failure:
        cluster.retrying("Metadata", time.monotonic() + 30, lambda: cluster.refresh_metadata(()))
    assert time.monotonic() - started < 5  # not retried until the deadline
    message = str(failure.value)
    assert message.startswith(f"SASL/{mechanism} authentication with {broker['addresses']['SASL_PLAINTEXT']}: "
                              "SASL_AUTHENTICATION_FAILED (")
    assert ("Invalid username or password" if mechanism == "PLAIN"
            else "invalid credentials with SASL mechanism SCRAM-SHA-512") in message
    assert "not-it" not in message and "\n" not in message
    assert not failure.value.retriable
    producer = TransactionalProducer(cluster, "tx-wrong-password", ProducerSettings(), timeout_s=30)
    with pytest.raises(AuthenticationFailed):
        producer.init()
    assert time.monotonic() - started < 10


def test_a_mechanism_the_listener_does_not_offer_names_the_ones_it_does(broker):
    cluster = Cluster(sasl_config(broker, "PLAIN", "SASL_SSL"))
    with pytest.raises(AuthenticationFailed) as failure:
        cluster.refresh_metadata(())
    assert str(failure.value).endswith("UNSUPPORTED_SASL_MECHANISM (the listener offers SCRAM-SHA-512)")


def test_sasl_on_a_plaintext_listener_says_the_listener_has_no_sasl(broker):
    config = ClientConfig.from_settings(broker["addresses"]["PLAINTEXT"], {
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "alice",
        "sasl.password": "alice-secret"})
    with pytest.raises(AuthenticationFailed) as failure:
        Cluster(config).refresh_metadata(())
    assert str(failure.value).endswith("ILLEGAL_SASL_STATE (the listener offers no SASL mechanism: is "
                                       "kafka.security.protocol right?)")


def test_connections_are_replaced_before_their_session_expires(broker, caplog):
    """Longer than connections.max.reauth.ms: metadata calls, pipelined Fetches and an open
    transaction keep going on fresh connections; the broker never has to close one whose
    session expired."""
    topic = "client-sasl-reauth"
    create(broker, topic)
    cluster = Cluster(sasl_config(broker, "SCRAM-SHA-512"))
    producer = TransactionalProducer(cluster, "tx-reauth", ProducerSettings(), timeout_s=20)
    producer.init()
    producer.begin()
    producer.write(topic, 0, records(b"before"))
    producer.flush()
    fetcher = PartitionFetcher(cluster, topic, 0, FetchSettings(max_wait_ms=50, read_committed=False))
    seen = set()
    with caplog.at_level(logging.INFO, logger="oncelog"):
        fetcher.send(0)
        ends = time.monotonic() + 2.5 * REAUTH_MS / 1000
        while time.monotonic() < ends:
            cluster.refresh_metadata([topic])
            fetcher.send(0)  # one more in flight while the oldest is read
            answer = fetcher.receive()
            fetcher.done(answer)
            assert answer.error == 0
            seen.add(id(cluster.connection(cluster.leader(topic, 0))))
            time.sleep(0.05)
        fetcher.receive()
        producer.write(topic, 0, records(b"after"))
        producer.commit()
    assert len(seen) >= 2, "the connection was never replaced"
    assert read_committed(broker, topic) == [b"before", b"after"]
    assert not [r for r in caplog.records if "expired" in r.getMessage()], "the broker closed an expired session"

"""Brokers authenticate to each other: a 3-broker cluster whose inter-broker listener is
SASL_SSL (PLAIN over TLS, host names checked), with an authorizer that grants the
PLAINTEXT listener's User:ANONYMOUS nothing. Replication, the ISR and transaction markers
work only if every broker reaches the others as its own super user, `User:broker`."""

from __future__ import annotations

import shutil
import time

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.broker.listener_setup import inter_broker_security
from oncelog.config.broker import BrokerConfig, ConfigError
from oncelog.local.cluster import ClusterProcess
from oncelog.local.process import free_port
from tests.support.certs import CertificateAuthority

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" '
        'password="broker-secret" user_broker="broker-secret" user_admin="admin-secret";')


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    base = tmp_path_factory.mktemp("inter-broker")
    ca = CertificateAuthority.create(base / "certs")
    server = ca.issue("broker", "CN=localhost,O=oncelog", server=True)
    settings = {
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.internal.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.internal.plain.sasl.jaas.config": JAAS,
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(server.combined),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca.certificate),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:broker;User:admin",
        "allow.everyone.if.no.acl.found": "false",
        "transaction.state.log.replication.factor": "3", "transaction.state.log.min.isr": "2",
        "offsets.topic.replication.factor": "3",
    }
    running = ClusterProcess(base, 3, settings)
    for node in running.nodes.values():
        node.config["listeners"] += f",INTERNAL://127.0.0.1:{free_port()}"
    with running:
        yield running, ca
    for node in running.nodes.values():
        shutil.rmtree(node.data_dir / "__cluster_metadata-etcd", ignore_errors=True)


def internal(cluster: ClusterProcess, ca) -> dict:
    addresses = ",".join(node.config["listeners"].split("INTERNAL://", 1)[1] for node in cluster.nodes.values())
    return {"bootstrap.servers": addresses, "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
            "sasl.username": "admin", "sasl.password": "admin-secret", "ssl.ca.location": str(ca.certificate)}


def test_replication_and_transactions_run_between_brokers_that_authenticate_to_each_other(cluster):
    running, ca = cluster
    settings = internal(running, ca)
    admin = AdminClient(settings)
    admin.create_topics([NewTopic("replicated", 1, 3, config={"min.insync.replicas": "3"})])["replicated"].result(30)
    producer = Producer({**settings, "transactional.id": "inter-broker", "acks": "all"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(20):
        producer.produce("replicated", str(i).encode())
    producer.commit_transaction(30)  # acks=all with min ISR 3: every follower fetched as User:broker
    metadata = admin.list_topics("replicated", timeout=10)
    assert sorted(metadata.topics["replicated"].partitions[0].isrs) == [1, 2, 3]
    consumer = Consumer({**settings, "group.id": "inter-broker-check", "isolation.level": "read_committed",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["replicated"])
    values = []
    deadline = time.monotonic() + 30
    while len(values) < 20 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            values.append(message.value())
    consumer.close()
    assert sorted(int(v) for v in values) == list(range(20))


def test_the_anonymous_plaintext_principal_is_refused_what_brokers_need(cluster):
    """The PLAINTEXT listener is no back door: User:ANONYMOUS may not even create a topic."""
    running, _ca = cluster
    admin = AdminClient({"bootstrap.servers": running.bootstrap_servers})
    with pytest.raises(Exception, match=r"TOPIC_AUTHORIZATION_FAILED|Authorization failed"):
        admin.create_topics([NewTopic("anonymous", 1, 1)])["anonymous"].result(30)


@pytest.mark.parametrize(("settings", "message"), [
    ({"sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512"}, "SCRAM-SHA-512 is not enabled"),
    ({"listener.name.internal.plain.sasl.jaas.config":
      'org.apache.kafka.common.security.plain.PlainLoginModule required user_broker="x";'},
     "no username and password options"),
])
def test_inter_broker_credentials_that_cannot_work_are_a_one_line_error_at_start(settings, message):
    config = BrokerConfig({
        "listeners": "PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL", "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.internal.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.internal.plain.sasl.jaas.config": JAAS, **settings,
    })
    with pytest.raises(ConfigError, match=message):
        inter_broker_security(config)

"""The pytest plugin (oncelog.testing.pytest_plugin) as another project meets it: pytester
writes a test file into an empty directory, with no conftest, and runs pytest on it in a
fresh interpreter, so the fixtures come from the `pytest11` entry point alone."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

ROUNDTRIP = """
import sys

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def test_no_fixture_no_broker():
    assert "oncelog.broker.embedded" not in sys.modules


def test_produce_and_consume(kafka_bootstrap, kafka_client_config):
    assert kafka_client_config == {"bootstrap.servers": kafka_bootstrap}
    admin = AdminClient(kafka_client_config)  # kept: a client destroyed fails what it has in flight
    admin.create_topics([NewTopic("orders", 1, 1)])["orders"].result(10)
    producer = Producer(kafka_client_config)
    producer.produce("orders", b"hello", key=b"alice")
    assert producer.flush(10) == 0
    consumer = Consumer({**kafka_client_config, "group.id": "readers", "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition("orders", 0, OFFSET_BEGINNING)])
    message = consumer.poll(10)
    consumer.close()
    assert (message.key(), message.value()) == (b"alice", b"hello")


def test_one_broker_for_the_session(kafka_broker, kafka_bootstrap):
    assert kafka_broker.bootstrap_servers == kafka_bootstrap
    assert "orders" in AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=10).topics


def test_a_broker_of_its_own(kafka_broker_factory, kafka_bootstrap):
    broker = kafka_broker_factory({"num.partitions": "4"})
    assert broker.bootstrap_servers != kafka_bootstrap
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    producer.produce("auto-created", b"x")
    assert producer.flush(10) == 0
    topics = AdminClient({"bootstrap.servers": broker.bootstrap_servers}).list_topics(timeout=10).topics
    assert len(topics["auto-created"].partitions) == 4
    assert "orders" not in topics
    broker.stop()
    again = kafka_broker_factory({"num.partitions": "4"}, data_dir=broker.data_dir)  # on the same logs
    assert "auto-created" in AdminClient({"bootstrap.servers": again.bootstrap_servers}).list_topics(timeout=10).topics
"""


def test_the_fixtures_produce_and_consume_with_no_conftest(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_roundtrip=ROUNDTRIP)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=4)


TWO_PHASE_COMMIT = """
import datetime

from confluent_kafka import Producer
from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v6.request import InitProducerIdRequest
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from oncelog.protocol.client import WireClient


def init_2pc(bootstrap):
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "task-0"})
    producer.init_transactions(10)  # the transaction coordinator is there (FindCoordinator made it)
    with WireClient.connect(bootstrap) as client:
        return client.request(InitProducerIdRequest(
            transactional_id="task-1", transaction_timeout=datetime.timedelta(seconds=60),
            producer_id=-1, producer_epoch=-1, enable2_pc=True, keep_prepared_txn=False,
        )).error_code


def test_the_session_broker_has_the_options(kafka_bootstrap):
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    resource = ConfigResource(ResourceType.BROKER, "1")
    configs = admin.describe_configs([resource])[resource].result(10)
    assert configs["num.partitions"].value == "3"  # the command line wins over the ini line
    assert configs["transaction.two.phase.commit.enable"].value == "true"
    assert init_2pc(kafka_bootstrap) == ErrorCode.none


def test_a_factory_broker_has_only_its_own(kafka_broker_factory):
    assert init_2pc(kafka_broker_factory().bootstrap_servers) == ErrorCode.transactional_id_authorization_failed
"""


def test_ini_and_command_line_options_configure_the_session_broker(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nkafka_broker_config =\n    transaction.two.phase.commit.enable=true\n"
                     "    num.partitions=2\n")
    pytester.makepyfile(test_two_phase_commit=TWO_PHASE_COMMIT)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--kafka-broker-config", "num.partitions=3")
    result.assert_outcomes(passed=2)


SASL = """
import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient

from oncelog.testing import sasl_plain_client_config


def test_the_first_user_signs_in(kafka_client_config):
    assert kafka_client_config["sasl.username"] == "alice"
    producer = Producer(kafka_client_config)
    producer.produce("signed-in", b"hello")
    assert producer.flush(10) == 0


def test_another_user_signs_in(kafka_bootstrap):
    client = sasl_plain_client_config(kafka_bootstrap, "bob", 'b"ob:se\\\\cret')
    assert "signed-in" in AdminClient(client).list_topics(timeout=10).topics


def test_a_wrong_password_is_refused(kafka_bootstrap):
    client = sasl_plain_client_config(kafka_bootstrap, "alice", "guess")
    with pytest.raises(KafkaException):
        AdminClient(client).list_topics(timeout=1)


def test_a_factory_broker_with_users(kafka_broker_factory):
    broker = kafka_broker_factory(sasl_users={"carol": "carol-secret"})
    client = sasl_plain_client_config(broker.bootstrap_servers, "carol", "carol-secret")
    assert AdminClient(client).list_topics(timeout=10).brokers
"""


def test_sasl_users_give_a_sasl_plaintext_listener_and_client_settings(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nkafka_broker_sasl_users =\n    alice:alice-secret\n")
    pytester.makepyfile(test_sasl=SASL)
    # A password with a quote, a colon and a backslash: quoted for the JAAS config.
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--kafka-broker-sasl-user", 'bob:b"ob:se\\cret')
    result.assert_outcomes(passed=4)


def test_fixtures_are_listed_and_a_malformed_option_stops_the_run(pytester: pytest.Pytester) -> None:
    listed = pytester.runpytest_subprocess("--fixtures")
    for fixture in ("kafka_broker [session scope]", "kafka_bootstrap [session scope]", "kafka_client_config",
                    "kafka_broker_factory"):
        assert any(line.startswith(fixture) for line in listed.outlines), fixture
    refused = pytester.runpytest_subprocess("--kafka-broker-config", "num.partitions")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(["*kafka_broker_config: every entry must be KEY=VALUE*"])


def test_this_projects_shared_broker_is_the_plugins_with_two_phase_commit(shared_broker, kafka_broker) -> None:
    """pyproject.toml's kafka_broker_config: the Spark sink's batch mode needs KIP-939."""
    assert shared_broker is kafka_broker
    assert shared_broker.config["transaction.two.phase.commit.enable"] is True

"""AlterConfigs and IncrementalAlterConfigs for topics, through real admin clients
(confluent-kafka's incremental_alter_configs, kafka-python's legacy alter_configs) and the
wire: each operation, validate_only, Kafka's error codes, the change acting on the live
log, and the overrides surviving a restart."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)
from kio.schema.alter_configs.v2 import request as legacy_v2
from kio.schema.describe_configs.v4 import request as describe_v4
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8

from oncelog import EmbeddedBroker
from oncelog.protocol.client import WireClient
from tests.support.configs import wire_alter

SET, DELETE, APPEND, SUBTRACT = (AlterConfigOpType.SET, AlterConfigOpType.DELETE, AlterConfigOpType.APPEND,
                                 AlterConfigOpType.SUBTRACT)


def admin_for(broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap_servers})


def create(broker, name: str, **configs: str) -> None:
    admin = admin_for(broker)  # kept until the answer: a collected client fails its futures
    admin.create_topics([NewTopic(name, 1, 1, config=configs)])[name].result(10)


def alter(broker, topic: str, *changes: tuple[str, str | None, AlterConfigOpType], validate_only=False) -> None:
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=operation) for name, value, operation in changes])
    admin = admin_for(broker)
    admin.incremental_alter_configs([resource], validate_only=validate_only)[resource].result(10)


def described(broker, topic: str) -> dict[str, tuple[str, int]]:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    admin = admin_for(broker)
    configs = admin.describe_configs([resource])[resource].result(10)
    return {name: (entry.value, entry.source) for name, entry in configs.items()}


def overrides(broker, topic: str) -> dict[str, str]:
    return {name: value for name, (value, source) in described(broker, topic).items()
            if source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}


def refused(broker, topic: str, *changes) -> KafkaException:
    with pytest.raises(KafkaException) as caught:
        alter(broker, topic, *changes)
    return caught.value


def test_set_delete_append_and_subtract_change_a_topics_overrides(shared_broker):
    create(shared_broker, "alter-ops", **{"retention.ms": "1000"})
    alter(shared_broker, "alter-ops", ("retention.ms", "86400000", SET), ("cleanup.policy", "compact", APPEND))
    assert overrides(shared_broker, "alter-ops") == {"retention.ms": "86400000", "cleanup.policy": "delete,compact"}
    alter(shared_broker, "alter-ops", ("cleanup.policy", "compact", APPEND))  # already there: unchanged
    assert overrides(shared_broker, "alter-ops")["cleanup.policy"] == "delete,compact"
    alter(shared_broker, "alter-ops", ("retention.ms", None, DELETE), ("cleanup.policy", "delete", SUBTRACT))
    assert overrides(shared_broker, "alter-ops") == {"cleanup.policy": "compact"}
    assert described(shared_broker, "alter-ops")["retention.ms"] == ("604800000", ConfigSource.DEFAULT_CONFIG.value)
    alter(shared_broker, "alter-ops", ("segment.ms", None, DELETE))  # deleting what is not set: fine
    assert overrides(shared_broker, "alter-ops") == {"cleanup.policy": "compact"}


def test_validate_only_checks_and_changes_nothing(shared_broker):
    create(shared_broker, "alter-validate")
    alter(shared_broker, "alter-validate", ("retention.ms", "5000", SET), validate_only=True)
    assert overrides(shared_broker, "alter-validate") == {}
    with pytest.raises(KafkaException, match=r"retention\.ms"):
        alter(shared_broker, "alter-validate", ("retention.ms", "soon", SET), validate_only=True)


def test_bad_changes_get_kafkas_codes_with_the_key_named_and_change_nothing(shared_broker):
    create(shared_broker, "alter-bad", **{"retention.ms": "1000"})
    cases = [
        (("retention.ms", "abc", SET), "INVALID_CONFIG", "retention.ms"),
        (("retention.mss", "1", SET), "INVALID_CONFIG", "retention.mss"),
        (("retention.ms", "1", APPEND), "INVALID_CONFIG",
         "Can't APPEND to key retention.ms because its type is not LIST."),
        (("cleanup.policy", "archive", APPEND), "INVALID_CONFIG", "archive"),
    ]
    for change, code, text in cases:
        error = refused(shared_broker, "alter-bad", ("segment.bytes", "1048576", SET), change).args[0]
        assert (error.name(), text in error.str()) == (code, True), change
    assert overrides(shared_broker, "alter-bad") == {"retention.ms": "1000"}


def test_missing_topics_illegal_names_and_other_resources_are_refused(shared_broker):
    assert refused(shared_broker, "alter-missing", ("retention.ms", "1", SET)).args[0].name() == \
        "UNKNOWN_TOPIC_OR_PART"
    assert refused(shared_broker, "bad name!", ("retention.ms", "1", SET)).args[0].name() == "TOPIC_EXCEPTION"
    [(_, code, message)] = wire_alter(shared_broker, [("99", [("log.retention.ms", 0, "1")])], resource_type=4)
    assert (code, message) == (ErrorCode.invalid_request,
                               "Unexpected broker id, expected 1 or empty string, but received 99")


def test_a_key_or_a_resource_named_twice_and_a_null_value_are_invalid_requests(shared_broker):
    create(shared_broker, "alter-twice")
    create(shared_broker, "alter-once")
    results = wire_alter(shared_broker, [
        ("alter-twice", [("retention.ms", 0, "1000")]),
        ("alter-once", [("retention.ms", 0, "1000"), ("retention.ms", 1, None)]),
        ("alter-twice", [("retention.ms", 0, "2000")]),
    ])
    assert [(name, code) for name, code, _ in results] == [
        ("alter-twice", ErrorCode.invalid_request), ("alter-once", ErrorCode.invalid_request),
        ("alter-twice", ErrorCode.invalid_request)]
    assert "duplicate config keys" in results[1][2]
    [(_, code, message)] = wire_alter(shared_broker, [("alter-once", [("retention.ms", 0, None)])])
    assert (code, message) == (ErrorCode.invalid_request, "Null value not supported for : retention.ms")
    assert overrides(shared_broker, "alter-twice") == overrides(shared_broker, "alter-once") == {}


def test_legacy_alter_configs_replaces_the_whole_override_set(shared_broker):
    create(shared_broker, "alter-legacy", **{"retention.ms": "1000", "cleanup.policy": "compact"})
    request = legacy_v2.AlterConfigsRequest(resources=(legacy_v2.AlterConfigsResource(
        resource_type=i8(2), resource_name="alter-legacy",
        configs=(legacy_v2.AlterableConfig(name="segment.bytes", value="1048576"),)),), validate_only=False)
    with WireClient.connect(shared_broker.bootstrap_servers) as client:
        [result] = client.request(request).responses
    assert (result.resource_name, result.error_code) == ("alter-legacy", ErrorCode.none)
    assert overrides(shared_broker, "alter-legacy") == {"segment.bytes": "1048576"}


def test_kafka_pythons_legacy_alter_configs_keeps_the_keys_it_does_not_name(shared_broker):
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource as PyConfigResource
    from kafka.admin import ConfigResourceType

    create(shared_broker, "alter-kafka-python", **{"retention.ms": "1000"})
    admin = KafkaAdminClient(bootstrap_servers=shared_broker.bootstrap_servers)
    try:
        # AlterConfigs, not the incremental API: kafka-python describes first and sends every override
        result = admin.alter_configs([PyConfigResource(ConfigResourceType.TOPIC, "alter-kafka-python",
                                                       configs={"segment.bytes": "1048576"})], incremental=False)
    finally:
        admin.close()
    assert result == {"topic": {"alter-kafka-python": "OK"}}
    assert overrides(shared_broker, "alter-kafka-python") == {"retention.ms": "1000", "segment.bytes": "1048576"}


def test_a_retention_change_acts_on_the_live_log_and_survives_a_restart(tmp_path):
    settings = {"log.retention.check.interval.ms": "100"}
    with EmbeddedBroker(tmp_path / "broker", settings) as broker:
        create(broker, "alter-live", **{"segment.bytes": "1024"})
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0})
        for i in range(20):
            producer.produce("alter-live", b"x" * 200, key=str(i).encode())
            producer.flush(10)  # one batch per record: segments of a few batches
        assert _log_start(broker) == 0
        alter(broker, "alter-live", ("retention.ms", "1", SET))
        deadline = time.monotonic() + 10
        while _log_start(broker) == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _log_start(broker) > 0  # closed segments deleted by the next retention pass
    with EmbeddedBroker(tmp_path / "broker", settings) as broker:
        assert overrides(broker, "alter-live") == {"segment.bytes": "1024", "retention.ms": "1"}


def _log_start(broker, topic: str = "alter-live") -> int:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "alter-live-probe"})
    try:
        low, _high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        consumer.close()
    return low


def test_an_empty_cleanup_policy_keeps_every_segment_as_kafka_4_2_does(tmp_path):
    """Kafka 4.2: cleanup.policy may be an empty list, infinite retention (neither delete
    nor compact), whether given at creation or left by SUBTRACT of the last policy."""
    with EmbeddedBroker(tmp_path / "broker", {"log.retention.check.interval.ms": "100"}) as broker:
        create(broker, "keep-all", **{"cleanup.policy": "", "segment.bytes": "1024", "retention.ms": "1"})
        assert overrides(broker, "keep-all")["cleanup.policy"] == ""
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0})
        for i in range(20):
            producer.produce("keep-all", b"x" * 200, key=str(i).encode())
            producer.flush(10)  # one batch per record: segments of a few batches
        time.sleep(1)  # ten retention passes, each of which would delete closed segments past retention.ms=1
        assert _log_start(broker, "keep-all") == 0
        create(broker, "policy-subtracted", **{"cleanup.policy": "compact"})
        alter(broker, "policy-subtracted", ("cleanup.policy", "compact", SUBTRACT))
        assert overrides(broker, "policy-subtracted") == {"cleanup.policy": ""}


# -- dynamic broker configs (a broker of their own: they change every topic's defaults) ------


def describe_wire(broker, resource_type: int, name: str) -> dict[str, tuple]:
    request = describe_v4.DescribeConfigsRequest(resources=(describe_v4.DescribeConfigsResource(
        resource_type=i8(resource_type), resource_name=name, configuration_keys=None),),
        include_synonyms=True, include_documentation=False)
    with WireClient.connect(broker.bootstrap_servers) as client:
        [result] = client.request(request).results
    assert result.error_code == ErrorCode.none, result.error_message
    return {c.name: (c.value, c.config_source, c.read_only, [(s.name, s.value, s.source) for s in c.synonyms])
            for c in result.configs}


DYNAMIC_BROKER, DYNAMIC_DEFAULT, STATIC, DEFAULT = 2, 3, 4, 5


def test_dynamic_broker_configs_give_topics_their_defaults_by_precedence_and_survive_a_restart(tmp_path):
    settings = {"log.retention.ms": "3600000"}
    with EmbeddedBroker(tmp_path / "broker", settings) as broker:
        create(broker, "plain")
        create(broker, "own", **{"retention.ms": "1000"})
        # the cluster-wide default, then this broker's own value over it
        assert wire_alter(broker, [("", [("log.retention.ms", 0, "7200000"), ("log.cleanup.policy", 2, "compact")])],
                          resource_type=4) == [("", ErrorCode.none, None)]
        topic = describe_wire(broker, 2, "plain")
        assert topic["retention.ms"][:2] == ("7200000", DYNAMIC_DEFAULT)
        assert topic["cleanup.policy"][:2] == ("delete,compact", DYNAMIC_DEFAULT)
        resource = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
            ConfigEntry("log.retention.ms", "10800000", incremental_operation=SET)])
        admin = admin_for(broker)
        admin.incremental_alter_configs([resource])[resource].result(10)
        topic = describe_wire(broker, 2, "plain")
        assert topic["retention.ms"] == ("10800000", DYNAMIC_BROKER, False, [
            ("log.retention.ms", "10800000", DYNAMIC_BROKER), ("log.retention.ms", "7200000", DYNAMIC_DEFAULT),
            ("log.retention.ms", "3600000", STATIC), ("log.retention.hours", "168", DEFAULT)])
        assert describe_wire(broker, 2, "own")["retention.ms"][:2] == ("1000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
        own_broker = describe_wire(broker, 4, "1")
        assert own_broker["log.retention.ms"][:3] == ("10800000", DYNAMIC_BROKER, False)
        assert own_broker["log.dirs"][2] is True  # read-only: static only
        assert describe_wire(broker, 4, "") == {
            "log.cleanup.policy": ("delete,compact", DYNAMIC_DEFAULT, False,
                                   [("log.cleanup.policy", "delete,compact", DYNAMIC_DEFAULT)]),
            "log.retention.ms": ("7200000", DYNAMIC_DEFAULT, False, [("log.retention.ms", "7200000", DYNAMIC_DEFAULT)]),
        }
    with EmbeddedBroker(tmp_path / "broker", settings) as broker:
        assert describe_wire(broker, 2, "plain")["retention.ms"][:2] == ("10800000", DYNAMIC_BROKER)
        # deleting this broker's value uncovers the cluster default
        assert wire_alter(broker, [("1", [("log.retention.ms", 1, None)])], resource_type=4) == \
            [("1", ErrorCode.none, None)]
        assert describe_wire(broker, 2, "plain")["retention.ms"][:2] == ("7200000", DYNAMIC_DEFAULT)


def test_static_only_broker_keys_and_bad_values_are_refused_as_kafka_does(tmp_path):
    with EmbeddedBroker(tmp_path / "broker") as broker:
        [(_, code, message)] = wire_alter(broker, [("1", [("log.dirs", 0, "/elsewhere"),
                                                          ("log.retention.ms", 0, "1")])], resource_type=4)
        assert (code, message) == (ErrorCode.invalid_request, "Cannot update these configs dynamically: Set(log.dirs)")
        [(_, code, message)] = wire_alter(broker, [("", [("log.segment.bytes", 0, "big")])], resource_type=4)
        assert code == ErrorCode.invalid_request
        assert message.startswith("Invalid config value for resource ConfigResource(type=BROKER, name=''): ")
        assert "log.segment.bytes" in message
        assert describe_wire(broker, 4, "") == {}
        assert describe_wire(broker, 4, "1")["log.retention.ms"][:2] == (None, DEFAULT)


def test_kafkas_reconfigurable_keys_oncelog_does_not_use_are_stored_and_described(tmp_path):
    """librdkafka 0081 sets sasl.kerberos.min.time.before.relogin and expects NO_ERROR, as
    Kafka gives for its reconfigurable keys; oncelog keeps them, says they have no effect,
    and refuses what Kafka refuses of them."""
    with EmbeddedBroker(tmp_path / "broker") as broker:
        node = str(broker.broker.node_id)
        [(_, code, message)] = wire_alter(broker, [(node, [("sasl.kerberos.min.time.before.relogin", 0, "60000")]),
                                                   ], resource_type=4)
        assert (code, message) == (ErrorCode.none, None)
        [(_, code, message)] = wire_alter(broker, [("", [("num.io.threads", 0, "16")])], resource_type=4)
        assert (code, message) == (ErrorCode.none, None)
        refusals = [
            ("", "sasl.kerberos.min.time.before.relogin", "60000",
             ("Cannot update these configs at default cluster level, broker id must be specified: "
              "Set(sasl.kerberos.min.time.before.relogin)")),
            (node, "num.io.threads", "many",
             (f"Invalid config value for resource ConfigResource(type=BROKER, name='{node}'): "
              "Invalid value many for configuration num.io.threads: Not a number of type INT")),
            (node, "ssl.keystore.location", "/elsewhere.jks",
             ("These security configs can be dynamically updated only per-listener using the listener prefix: "
              "Set(ssl.keystore.location)")),
        ]
        for name, key, value, expected in refusals:
            [(_, code, message)] = wire_alter(broker, [(name, [(key, 0, value)])], resource_type=4)
            assert (code, message) == (ErrorCode.invalid_request, expected)
    with EmbeddedBroker(tmp_path / "broker") as broker:  # stored: a restart keeps them
        described = describe_wire(broker, 4, str(broker.broker.node_id))
        assert described["sasl.kerberos.min.time.before.relogin"][:3] == ("60000", DYNAMIC_BROKER, False)
        assert described["num.io.threads"][:3] == ("16", DYNAMIC_DEFAULT, False)
        assert describe_wire(broker, 4, "") == {"num.io.threads": ("16", DYNAMIC_DEFAULT, False,
                                                                   [("num.io.threads", "16", DYNAMIC_DEFAULT)])}


def test_append_to_the_cluster_default_starts_from_its_own_value_not_this_brokers(tmp_path):
    # As Kafka's controller: the result must not depend on which broker answered.
    with EmbeddedBroker(tmp_path / "broker") as broker:
        assert wire_alter(broker, [("1", [("log.cleanup.policy", 0, "compact")])], resource_type=4) == \
            [("1", ErrorCode.none, None)]
        assert wire_alter(broker, [("", [("log.cleanup.policy", 2, "compact")])], resource_type=4) == \
            [("", ErrorCode.none, None)]
        assert describe_wire(broker, 4, "")["log.cleanup.policy"][:2] == ("delete,compact", DYNAMIC_DEFAULT)
        assert describe_wire(broker, 4, "1")["log.cleanup.policy"][:2] == ("compact", DYNAMIC_BROKER)
        # validate_only checks against what the broker would run with, and changes nothing
        [(_, code, message)] = wire_alter(broker, [("1", [("log.segment.bytes", 0, "7")])], resource_type=4,
                                          validate_only=True)
        assert code == ErrorCode.invalid_request and "log.segment.bytes" in message
        assert describe_wire(broker, 4, "1")["log.segment.bytes"][1] == DEFAULT


def test_broker_level_dynamic_keys_act_where_they_are_read_and_survive_a_restart(tmp_path):
    with EmbeddedBroker(tmp_path / "broker") as broker:
        # num.partitions: the next topic created without a count gets the cluster default's
        assert wire_alter(broker, [("", [("num.partitions", 0, "5")])], resource_type=4) == \
            [("", ErrorCode.none, None)]
        assert describe_wire(broker, 4, "1")["num.partitions"][:3] == ("5", DYNAMIC_DEFAULT, False)
        admin = admin_for(broker)
        admin.create_topics([NewTopic("by-default", -1, 1)])["by-default"].result(10)
        assert len(admin.list_topics("by-default", timeout=10).topics["by-default"].partitions) == 5
        # max.connections: the next connection is refused, one already open keeps working
        with WireClient.connect(broker.bootstrap_servers) as open_before:
            assert wire_alter(broker, [("1", [("max.connections", 0, "1")])], resource_type=4) == \
                [("1", ErrorCode.none, None)]
            with pytest.raises(ConnectionError), WireClient.connect(broker.bootstrap_servers, timeout=5) as refused:
                refused.request(describe_v4.DescribeConfigsRequest(resources=(), include_synonyms=False,
                                                                   include_documentation=False))
            [(_, code, _message)] = wire_alter(broker, [("1", [("max.connections", 1, None)])], resource_type=4,
                                               client=open_before)
            assert code == ErrorCode.none
        # a bad value names the key and changes nothing
        [(_, code, message)] = wire_alter(broker, [("", [("num.partitions", 0, "0")])], resource_type=4)
        assert code == ErrorCode.invalid_request and "num.partitions" in message
    with EmbeddedBroker(tmp_path / "broker") as broker:
        admin = admin_for(broker)
        admin.create_topics([NewTopic("after-restart", -1, 1)])["after-restart"].result(10)
        assert len(admin.list_topics("after-restart", timeout=10).topics["after-restart"].partitions) == 5
        assert describe_wire(broker, 4, "1")["max.connections"][1] == DEFAULT

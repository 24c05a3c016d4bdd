"""DescribeCluster through the admin client, and DescribeConfigs' values, sources and
synonyms as Kafka's ConfigHelper builds them (broker keys as synonyms of topic keys;
server.properties / --override values as STATIC_BROKER_CONFIG)."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic, ResourceType
from kio.schema.describe_configs.v4 import request as describe_v4
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8

from oncelog import EmbeddedBroker
from oncelog.config.broker import BrokerConfig
from oncelog.protocol.client import WireClient

TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5
OVERRIDES = {"log.retention.ms": "3600000", "message.max.bytes": "2000000", "node.id": "7"}


@pytest.fixture(scope="module")
def configured_broker(tmp_path_factory):
    with EmbeddedBroker(tmp_path_factory.mktemp("configs"), OVERRIDES) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        futures = admin.create_topics([
            NewTopic("plain", 1, 1),
            NewTopic("tuned", 1, 1, config={"segment.bytes": "1048576", "retention.ms": "60000"}),
        ])
        for future in futures.values():
            future.result(10)
        yield broker


def describe(bootstrap: str, resource_type: int, name: str, keys=None) -> object:
    request = describe_v4.DescribeConfigsRequest(
        resources=(describe_v4.DescribeConfigsResource(resource_type=i8(resource_type), resource_name=name,
                                                        configuration_keys=keys),),
        include_synonyms=True, include_documentation=False,
    )
    with WireClient.connect(bootstrap) as client:
        return client.request(request).results[0]


def entries(result) -> dict[str, tuple]:
    return {
        c.name: (c.value, c.config_source, [(s.name, s.value, s.source) for s in c.synonyms])
        for c in result.configs
    }


# -- DescribeCluster --------------------------------------------------------------------------


def test_describe_cluster_names_this_broker_as_the_only_node_and_controller(configured_broker):
    admin = AdminClient({"bootstrap.servers": configured_broker.bootstrap_servers})
    cluster = admin.describe_cluster(request_timeout=10).result(10)
    host, _, port = configured_broker.bootstrap_servers.rpartition(":")
    assert [(n.id, n.host, n.port) for n in cluster.nodes] == [(7, host, int(port))]
    assert cluster.controller.id == 7
    assert cluster.cluster_id == admin.list_topics(timeout=10).cluster_id
    assert cluster.cluster_id and len(cluster.cluster_id) == 22


# -- DescribeConfigs: topics ------------------------------------------------------------------


def test_topic_keys_list_their_broker_keys_as_synonyms(configured_broker):
    result = describe(configured_broker.bootstrap_servers, 2, "plain")
    assert result.error_code == ErrorCode.none
    configs = entries(result)
    # set keys first, then the defaults of the same keys (log.retention.ms has none)
    assert configs["retention.ms"] == ("3600000", STATIC_BROKER_CONFIG, [
        ("log.retention.ms", "3600000", STATIC_BROKER_CONFIG), ("log.retention.hours", "168", DEFAULT_CONFIG),
    ])
    assert configs["max.message.bytes"] == ("2000000", STATIC_BROKER_CONFIG, [
        ("message.max.bytes", "2000000", STATIC_BROKER_CONFIG), ("message.max.bytes", "1048588", DEFAULT_CONFIG),
    ])
    assert configs["segment.bytes"] == (
        "1073741824", DEFAULT_CONFIG, [("log.segment.bytes", "1073741824", DEFAULT_CONFIG)])
    assert configs["cleanup.policy"] == ("delete", DEFAULT_CONFIG, [("log.cleanup.policy", "delete", DEFAULT_CONFIG)])
    assert configs["delete.retention.ms"] == ("86400000", DEFAULT_CONFIG, [
        ("log.cleaner.delete.retention.ms", "86400000", DEFAULT_CONFIG),
    ])
    # Kafka's quirk: a default that only a coarser key supplies (log.roll.hours) lists
    # no synonym, since the list starts at log.roll.ms, which has no default.
    assert configs["segment.ms"] == ("604800000", DEFAULT_CONFIG, [])


def test_a_topic_override_comes_first_then_the_broker_keys(configured_broker):
    configs = entries(describe(configured_broker.bootstrap_servers, 2, "tuned"))
    assert configs["segment.bytes"] == ("1048576", TOPIC_CONFIG, [
        ("segment.bytes", "1048576", TOPIC_CONFIG), ("log.segment.bytes", "1073741824", DEFAULT_CONFIG),
    ])
    assert configs["retention.ms"] == ("60000", TOPIC_CONFIG, [
        ("retention.ms", "60000", TOPIC_CONFIG), ("log.retention.ms", "3600000", STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", DEFAULT_CONFIG),
    ])


def test_admin_client_sees_static_broker_config_as_the_source(configured_broker):
    admin = AdminClient({"bootstrap.servers": configured_broker.bootstrap_servers})
    resource = ConfigResource(ResourceType.TOPIC, "plain")
    configs = admin.describe_configs([resource])[resource].result(10)
    assert configs["retention.ms"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert list(configs["retention.ms"].synonyms) == ["log.retention.ms", "log.retention.hours"]
    assert configs["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value


def test_describing_an_illegal_or_missing_topic_fails_with_kafkas_codes(configured_broker):
    assert describe(configured_broker.bootstrap_servers, 2, "bad name").error_code == ErrorCode.invalid_topic_exception
    missing = describe(configured_broker.bootstrap_servers, 2, "missing")
    assert (missing.error_code, missing.configs) == (ErrorCode.unknown_topic_or_partition, ())


def test_empty_configuration_keys_means_every_key(configured_broker):
    every = describe(configured_broker.bootstrap_servers, 2, "plain", keys=())
    some = describe(configured_broker.bootstrap_servers, 2, "plain", keys=("retention.ms",))
    assert len(every.configs) > 10
    assert [c.name for c in some.configs] == ["retention.ms"]


# -- DescribeConfigs: the broker --------------------------------------------------------------


def test_broker_keys_set_by_override_are_static_and_the_rest_default(configured_broker):
    configs = entries(describe(configured_broker.bootstrap_servers, 4, "7"))
    assert configs["log.retention.ms"] == ("3600000", STATIC_BROKER_CONFIG, [
        ("log.retention.ms", "3600000", STATIC_BROKER_CONFIG), ("log.retention.hours", "168", DEFAULT_CONFIG),
    ])
    assert configs["message.max.bytes"] == ("2000000", STATIC_BROKER_CONFIG, [
        ("message.max.bytes", "2000000", STATIC_BROKER_CONFIG), ("message.max.bytes", "1048588", DEFAULT_CONFIG),
    ])
    # the synonyms start at the key described: log.retention.ms (set) is dropped here
    assert configs["log.retention.hours"] == ("168", DEFAULT_CONFIG, [("log.retention.hours", "168", DEFAULT_CONFIG)])
    assert configs["fetch.max.bytes"] == ("57671680", DEFAULT_CONFIG, [("fetch.max.bytes", "57671680", DEFAULT_CONFIG)])
    # keys Kafka has no default for are null until set
    assert configs["log.roll.ms"] == (None, DEFAULT_CONFIG, [])


def test_the_cluster_default_resource_lists_only_dynamic_defaults_none_here(configured_broker):
    result = describe(configured_broker.bootstrap_servers, 4, "")
    assert (result.error_code, result.configs) == (ErrorCode.none, ())
    assert describe(configured_broker.bootstrap_servers, 4, "8").error_code == ErrorCode.invalid_request


def test_server_properties_and_overrides_are_both_static_broker_config(tmp_path):
    properties = tmp_path / "server.properties"
    properties.write_text("log.retention.hours=24\nlog.segment.bytes=2097152\n")
    config = BrokerConfig.load(properties, {"log.segment.bytes": "4194304", "log.dirs": str(tmp_path / "data"),
                                            "listeners": "PLAINTEXT://127.0.0.1:0"})
    with EmbeddedBroker(tmp_path / "data", dict(config.explicit)) as broker:
        configs = entries(describe(broker.bootstrap_servers, 4, "1"))
        assert configs["log.retention.hours"][:2] == ("24", STATIC_BROKER_CONFIG)
        assert configs["log.segment.bytes"][:2] == ("4194304", STATIC_BROKER_CONFIG)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        admin.create_topics([NewTopic("t", 1, 1)])["t"].result(10)
        topic = entries(describe(broker.bootstrap_servers, 2, "t"))
    assert topic["segment.bytes"] == ("4194304", STATIC_BROKER_CONFIG, [
        ("log.segment.bytes", "4194304", STATIC_BROKER_CONFIG), ("log.segment.bytes", "1073741824", DEFAULT_CONFIG),
    ])
    # retention from log.retention.hours: the value follows it, the synonyms start at
    # log.retention.ms (unset), so none are listed and the source is DEFAULT_CONFIG (Kafka)
    assert topic["retention.ms"] == ("86400000", DEFAULT_CONFIG, [])

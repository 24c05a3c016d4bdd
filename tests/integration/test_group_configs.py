"""Group configs (KIP-848: consumer.session.timeout.ms, consumer.heartbeat.interval.ms)
through real clients: confluent-kafka's AdminClient on GROUP resources, the wire for
Kafka's codes and messages, `oncelog configs --entity-type groups`, a librdkafka
`group.protocol=consumer` member heartbeating at its group's interval, and the configs
surviving a restart. The session timeout's effect is in tests/unit/test_group_configs.py."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)
from kio.schema.describe_configs.v4 import request as describe_v4
from kio.schema.errors import ErrorCode
from kio.schema.list_config_resources.v1 import request as list_v1
from kio.static.primitive import i8

from oncelog import EmbeddedBroker
from oncelog.protocol.client import WireClient
from tests.support.cli import Cli
from tests.support.configs import wire_alter

GROUP = 32
SESSION, HEARTBEAT = "consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"
DYNAMIC_GROUP, STATIC, DEFAULT = 8, 4, 5
TYPE_INT = 3
TYPE_STRING = 2
SET, DELETE = AlterConfigOpType.SET, AlterConfigOpType.DELETE
CONSUMER_GROUP_HEARTBEAT = "68"  # the API key, as the request stats name an API the snapshot is not told of


def alter(admin: AdminClient, group: str, *changes: tuple[str, str | None, AlterConfigOpType],
          validate_only: bool = False) -> None:
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=operation) for name, value, operation in changes])
    admin.incremental_alter_configs([resource], validate_only=validate_only)[resource].result(10)


def described(broker, group: str) -> dict[str, tuple]:
    """key -> (value, source, config type, synonyms), from DescribeConfigs v4 with synonyms."""
    request = describe_v4.DescribeConfigsRequest(resources=(describe_v4.DescribeConfigsResource(
        resource_type=i8(GROUP), resource_name=group, configuration_keys=None),),
        include_synonyms=True, include_documentation=False)
    with WireClient.connect(broker.bootstrap_servers) as client:
        [result] = client.request(request).results
    assert result.error_code == ErrorCode.none, result.error_message
    return {c.name: (c.value, c.config_source, c.config_type, [(s.name, s.value, s.source) for s in c.synonyms])
            for c in result.configs}


def groups_with_configs(broker) -> list[str]:
    with WireClient.connect(broker.bootstrap_servers) as client:
        response = client.request(list_v1.ListConfigResourcesRequest(resource_types=(i8(GROUP),)))
    return [resource.resource_name for resource in response.config_resources]


def test_a_group_config_is_set_described_and_deleted_with_kafkas_sources(shared_broker):
    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap_servers})
    alter(admin, "gc-round-trip", (SESSION, "50000", SET))  # no such group yet: fine, as in Kafka
    found = described(shared_broker, "gc-round-trip")
    assert {key: found[key] for key in (SESSION, HEARTBEAT)} == {
        SESSION: ("50000", DYNAMIC_GROUP, TYPE_INT, [(SESSION, "50000", DYNAMIC_GROUP),
                                                     ("group.consumer.session.timeout.ms", "45000", DEFAULT)]),
        HEARTBEAT: ("5000", DEFAULT, TYPE_INT, [("group.consumer.heartbeat.interval.ms", "5000", DEFAULT)]),
    }
    # Share group keys (KIP-932): ints after their broker keys, strings with their own defaults.
    assert found["share.record.lock.duration.ms"][:2] == ("30000", DEFAULT)
    assert found["share.auto.offset.reset"] == ("latest", DEFAULT, TYPE_STRING, [])
    assert found["share.isolation.level"] == ("read_uncommitted", DEFAULT, TYPE_STRING, [])
    alter(admin, "gc-round-trip", ("share.isolation.level", "read_committed", SET))
    assert described(shared_broker, "gc-round-trip")["share.isolation.level"] == (
        "read_committed", DYNAMIC_GROUP, TYPE_STRING, [("share.isolation.level", "read_committed", DYNAMIC_GROUP)])
    alter(admin, "gc-round-trip", ("share.isolation.level", None, DELETE))
    resource = ConfigResource(ResourceType.GROUP, "gc-round-trip")
    entries = admin.describe_configs([resource])[resource].result(10)
    assert (entries[SESSION].value, entries[SESSION].source) == ("50000", ConfigSource.GROUP_CONFIG.value)
    assert "gc-round-trip" in groups_with_configs(shared_broker)
    alter(admin, "gc-round-trip", (SESSION, None, DELETE))
    assert described(shared_broker, "gc-round-trip")[SESSION][:2] == ("45000", DEFAULT)
    assert "gc-round-trip" not in groups_with_configs(shared_broker)


def test_bad_group_configs_get_kafkas_answers_and_validate_only_changes_nothing(shared_broker):
    def answer(*changes: tuple[str, int, str | None], group: str = "gc-bad", validate_only: bool = False):
        [(_, code, message)] = wire_alter(shared_broker, [(group, list(changes))], resource_type=GROUP,
                                          validate_only=validate_only)
        return code, message

    invalid = ErrorCode.invalid_config
    assert answer(("consumer.assignors", 0, "range")) == (invalid, "Unknown group config name: consumer.assignors")
    assert answer((SESSION, 0, "soon")) == (
        invalid, "Invalid value soon for configuration consumer.session.timeout.ms: Not a number of type INT")
    assert answer((SESSION, 0, "1000")) == (  # below group.consumer.min.session.timeout.ms (45000)
        invalid, "consumer.session.timeout.ms must be greater than or equal to group.consumer.min.session.timeout.ms")
    assert answer((HEARTBEAT, 0, "20000")) == (
        invalid,
        "consumer.heartbeat.interval.ms must be less than or equal to group.consumer.max.heartbeat.interval.ms")
    assert answer((SESSION, 2, "50000")) == (
        invalid, "Can't APPEND to key consumer.session.timeout.ms because its type is not LIST.")
    assert answer((SESSION, 0, "50000"), group="") == (
        ErrorCode.invalid_request, "Default group resources are not allowed.")
    assert answer((SESSION, 0, "50000"), validate_only=True) == (ErrorCode.none, None)
    assert answer((SESSION, 0, "1"), validate_only=True)[0] == invalid
    assert {source for _value, source, _type, _synonyms in described(shared_broker, "gc-bad").values()} == {DEFAULT}
    with pytest.raises(KafkaException, match="Unknown group config name"):  # and through librdkafka
        alter(AdminClient({"bootstrap.servers": shared_broker.bootstrap_servers}), "gc-bad", ("nope", "1", SET))
    request = describe_v4.DescribeConfigsRequest(resources=(describe_v4.DescribeConfigsResource(
        resource_type=i8(GROUP), resource_name="", configuration_keys=None),), include_synonyms=False,
        include_documentation=False)
    with WireClient.connect(shared_broker.bootstrap_servers) as client:
        [result] = client.request(request).results
    assert (result.error_code, result.error_message) == (ErrorCode.invalid_request, "Group name must not be empty")


def test_oncelog_configs_alters_and_describes_groups_like_kafka_configs(shared_broker):
    cli = Cli(shared_broker.bootstrap_servers)
    done = cli.ok("configs", "--alter", "--entity-type", "groups", "--entity-name", "gc-cli",
                  "--add-config", "consumer.session.timeout.ms=50000")
    assert done == "Completed updating config for group gc-cli.\n"
    own_lines = [
        "Dynamic configs for group gc-cli are:",
        ("  consumer.session.timeout.ms=50000 sensitive=false synonyms={DYNAMIC_GROUP_CONFIG:"
         "consumer.session.timeout.ms=50000, DEFAULT_CONFIG:group.consumer.session.timeout.ms=45000}"),
    ]
    assert cli.ok("configs", "--describe", "--group", "gc-cli").splitlines() == own_lines
    every_group = cli.ok("configs", "--describe", "--entity-type", "groups").splitlines()  # other tests' too
    at = every_group.index(own_lines[0])
    assert every_group[at:at + 2] == own_lines
    cli.ok("configs", "--alter", "--group", "gc-cli", "--delete-config", "consumer.session.timeout.ms")
    assert described(shared_broker, "gc-cli")[SESSION][:2] == ("45000", DEFAULT)


def test_a_consumer_heartbeats_at_its_groups_interval_and_the_config_survives_a_restart(tmp_path):
    settings = {"group.consumer.min.heartbeat.interval.ms": "100", "group.initial.rebalance.delay.ms": "0"}
    with EmbeddedBroker(tmp_path / "broker", settings) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        admin.create_topics([NewTopic("gc-live", 1, 1)])["gc-live"].result(10)
        alter(admin, "gc-live", (HEARTBEAT, "200", SET))  # the broker's: 5000
        consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "gc-live",
                             "group.protocol": "consumer"})
        try:
            consumer.subscribe(["gc-live"])
            deadline = time.monotonic() + 15
            while not consumer.assignment() and time.monotonic() < deadline:
                consumer.poll(0.1)
            assert consumer.assignment()
            before = _heartbeats(broker)
            watched_until = time.monotonic() + 1.2
            while time.monotonic() < watched_until:
                consumer.poll(0.1)
            assert _heartbeats(broker) - before >= 4  # every 200 ms, not every 5 s
        finally:
            consumer.close()
    with EmbeddedBroker(tmp_path / "broker", settings) as broker:
        assert described(broker, "gc-live")[HEARTBEAT][:2] == ("200", DYNAMIC_GROUP)


def _heartbeats(broker) -> int:
    """ConsumerGroupHeartbeat requests the broker has served."""
    assert broker.broker is not None
    stats = broker.call(broker.broker.server.request_stats.snapshot, {})  # read on the broker's loop
    return next((api.count for api in stats if api.api == CONSUMER_GROUP_HEARTBEAT), 0)

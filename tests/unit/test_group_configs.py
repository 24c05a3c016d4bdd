"""Group configs (KIP-848): the checks Kafka's GroupConfigManager makes, their JSON form
and metadata key, and the coordinator running a consumer group with its own session
timeout and heartbeat interval (on real storage, with a hand-moved clock)."""

from __future__ import annotations

import pytest

from oncelog.cluster.image import KeyKind, Keys, MetadataImage
from oncelog.cluster.kv import Event, EventType, KeyValue
from oncelog.config.changes import ConfigChangeError
from oncelog.config.groups import (
    BROKER_KEYS,
    HEARTBEAT_INTERVAL,
    SESSION_TIMEOUT,
    GroupConfigs,
    StoredGroupTimings,
    check,
    duration_ms,
    normalized,
)
from oncelog.coordinator.group.api import HeartbeatRequest
from oncelog.protocol.messages import ErrorCode
from tests.support.group_harness import Harness

# Bounds wide enough that a heartbeat interval can reach the session timeout.
BROKER = {"group.consumer.session.timeout.ms": 45_000, "group.consumer.min.session.timeout.ms": 1_000,
          "group.consumer.max.session.timeout.ms": 60_000, "group.consumer.heartbeat.interval.ms": 5_000,
          "group.consumer.min.heartbeat.interval.ms": 100, "group.consumer.max.heartbeat.interval.ms": 50_000,
          "group.share.session.timeout.ms": 45_000, "group.share.min.session.timeout.ms": 45_000,
          "group.share.max.session.timeout.ms": 60_000, "group.share.heartbeat.interval.ms": 5_000,
          "group.share.min.heartbeat.interval.ms": 5_000, "group.share.max.heartbeat.interval.ms": 15_000,
          "group.share.record.lock.duration.ms": 30_000, "group.share.min.record.lock.duration.ms": 15_000,
          "group.share.max.record.lock.duration.ms": 60_000}


def refusal(overrides: dict[str, str]) -> tuple[ErrorCode, str]:
    with pytest.raises(ConfigChangeError) as caught:
        check(overrides, BROKER)
    return caught.value.code, str(caught.value)


def test_group_configs_are_checked_with_kafkas_codes_and_messages():
    assert set(BROKER) == set(BROKER_KEYS)
    check({SESSION_TIMEOUT: "2000", HEARTBEAT_INTERVAL: "500"}, BROKER)
    invalid = ErrorCode.invalid_config
    assert refusal({"consumer.assignors": "range"}) == (invalid, "Unknown group config name: consumer.assignors")
    assert refusal({SESSION_TIMEOUT: "soon"}) == (
        invalid, "Invalid value soon for configuration consumer.session.timeout.ms: Not a number of type INT")
    assert refusal({SESSION_TIMEOUT: "4294967296"})[1].endswith("Not a number of type INT")
    assert refusal({HEARTBEAT_INTERVAL: "0"}) == (
        invalid, "Invalid value 0 for configuration consumer.heartbeat.interval.ms: Value must be at least 1")
    assert refusal({SESSION_TIMEOUT: "999"}) == (
        invalid, "consumer.session.timeout.ms must be greater than or equal to group.consumer.min.session.timeout.ms")
    assert refusal({HEARTBEAT_INTERVAL: "50001"}) == (
        invalid,
        "consumer.heartbeat.interval.ms must be less than or equal to group.consumer.max.heartbeat.interval.ms")
    # Against the broker's session timeout when the group sets only its interval, as Kafka.
    assert refusal({HEARTBEAT_INTERVAL: "45000"}) == (
        invalid, "consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms")
    assert refusal({SESSION_TIMEOUT: "3000", HEARTBEAT_INTERVAL: "3000"})[1] == \
        "consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms"
    assert normalized({SESSION_TIMEOUT: " +50000", "other": "x"}) == {SESSION_TIMEOUT: "50000", "other": "x"}


def test_share_group_configs_are_checked_as_kafkas_group_config():
    check({"share.auto.offset.reset": "earliest", "share.isolation.level": "read_committed",
           "share.record.lock.duration.ms": "20000", "share.session.timeout.ms": "50000"}, BROKER)
    check({"share.auto.offset.reset": "by_duration:P1DT2H30M"}, BROKER)
    invalid = ErrorCode.invalid_config
    assert refusal({"share.isolation.level": "serializable"}) == (
        invalid, ("Invalid value serializable for configuration share.isolation.level: String must be one of: "
                  "read_committed, read_uncommitted"))
    assert refusal({"share.auto.offset.reset": "by_duration:an hour"}) == (
        invalid, ("Invalid value by_duration:an hour for configuration share.auto.offset.reset: Unable to parse "
                  "duration string after by_duration."))
    assert refusal({"share.record.lock.duration.ms": "1000"}) == (
        invalid, ("share.record.lock.duration.ms must be greater than or equal to "
                  "group.share.min.record.lock.duration.ms"))
    assert duration_ms("PT1H30M") == 5_400_000 and duration_ms("P2D") == 172_800_000
    assert duration_ms("PT0.5S") == 500 and duration_ms("PT") is None and duration_ms("1h") is None


def test_group_configs_round_trip_as_json_and_as_a_metadata_key():
    configs = GroupConfigs().with_overrides("g", {SESSION_TIMEOUT: "50000"}).with_overrides("empty", {})
    assert configs.to_json() == {"groups": {"g": {SESSION_TIMEOUT: "50000"}}}
    assert GroupConfigs.from_json(configs.to_json()) == configs
    with pytest.raises(ValueError):
        GroupConfigs.from_json({"groups": {"g": {SESSION_TIMEOUT: 50000}}})
    timings = StoredGroupTimings(lambda: configs)
    assert (timings.session_timeout_ms("g"), timings.heartbeat_interval_ms("g"), timings.session_timeout_ms("h")) \
        == (50000, None, None)

    from oncelog.cluster.image import encode_group_configs

    keys = Keys("c1")
    assert keys.parse(keys.group_configs) == (KeyKind.GROUP_CONFIGS,)
    put = Event(EventType.PUT, KeyValue(keys.group_configs, encode_group_configs(configs.to_json()), 5, 5, 1))
    image, delta = MetadataImage.empty().apply(5, [put])
    assert delta.group_configs_changed and not delta.broker_configs_changed
    assert GroupConfigs.from_json(image.group_configs) == configs
    assert image.fenced_view(1).group_configs == image.group_configs
    deleted = Event(EventType.DELETE, KeyValue(keys.group_configs, b"", 6, 6, 0))
    image, delta = image.apply(6, [deleted])
    assert delta.group_configs_changed and image.group_configs == {}


class Timings:
    def __init__(self, **per_group: tuple[int, int]) -> None:
        self.per_group = per_group

    def session_timeout_ms(self, group_id: str) -> int | None:
        return self.per_group[group_id][0] if group_id in self.per_group else None

    def heartbeat_interval_ms(self, group_id: str) -> int | None:
        return self.per_group[group_id][1] if group_id in self.per_group else None


def test_a_consumer_group_runs_with_its_own_session_timeout_and_heartbeat_interval(tmp_path):
    timings = Timings(own=(3_000, 400))
    harness = Harness(tmp_path, group_timings=timings, consumer_session_timeout_ms=10_000,
                      consumer_heartbeat_interval_ms=1_000)
    try:
        harness.broker.logs.create_topic("t", 2, {})

        def join(group: str, member: str):
            return harness.coordinator.consumer_group_heartbeat(HeartbeatRequest(
                group_id=group, member_id=member, member_epoch=0, instance_id=None, rebalance_timeout_ms=20_000,
                subscribed_topic_names=("t",), subscribed_topic_regex=None, server_assignor=None,
                owned_partitions=(), client_id="client", client_host="/127.0.0.1", api_version=1))

        assert join("own", "a").heartbeat_interval_ms == 400
        assert join("plain", "b").heartbeat_interval_ms == 1_000
        harness.advance(3_001)  # the group's own session timeout: its silent member is gone
        assert set(_members(harness, "own")) == set() and set(_members(harness, "plain")) == {"b"}
        harness.advance(7_000)  # the broker's, for the group without configs
        assert set(_members(harness, "plain")) == set()
        # A change applies at the member's next heartbeat.
        timings.per_group["own"] = (5_000, 700)
        assert join("own", "c").heartbeat_interval_ms == 700
        harness.advance(4_000)
        assert set(_members(harness, "own")) == {"c"}
    finally:
        harness.close()


def _members(harness: Harness, group_id: str) -> dict:
    group = harness.coordinator.group(group_id)
    assert group is not None and group.consumer is not None
    return dict(group.consumer.members)

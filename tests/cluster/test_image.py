"""The metadata image: key layout, record codecs, building from a range, applying watch
events and the deltas published to listeners."""

import json
import uuid

import pytest

from oncelog.cluster.image import (
    BrokerRegistration,
    KeyKind,
    Keys,
    MetadataDelta,
    MetadataFormatError,
    MetadataImage,
    PartitionRecord,
    TopicRecord,
    encode_broker_configs,
    encode_controller,
)
from oncelog.cluster.kv import Event, EventType, KeyValue

KEYS = Keys("c1")
TOPIC_ID = uuid.UUID("6d2f7a40-3c1e-4c4b-9a55-0f1e2d3c4b5a")


def kv(key, value, create_revision=10, mod_revision=None):
    return KeyValue(
        key, value, create_revision, mod_revision if mod_revision is not None else create_revision
    )


def put(key, value, create_revision=10, mod_revision=None):
    return Event(EventType.PUT, kv(key, value, create_revision, mod_revision))


def delete(key, revision=99):
    return Event(EventType.DELETE, KeyValue(key, b"", 0, revision))


def broker_kv(node_id, create_revision=10, host="127.0.0.1"):
    registration = BrokerRegistration(
        node_id, host, 9000 + node_id, host, 9100 + node_id, f"inc-{node_id}", 0
    )
    return kv(KEYS.broker(node_id), registration.encode(), create_revision)


def topic_kv(name="orders", partitions=2, topic_id=TOPIC_ID, configs=None, revision=11):
    return kv(
        KEYS.topic(name), TopicRecord(name, topic_id, partitions, configs or {}).encode(), revision
    )


def partition_kv(
    topic="orders", p=0, replicas=(1, 2, 3), isr=(1, 2, 3), leader=1, leader_epoch=0, revision=11
):
    record = PartitionRecord(topic, p, replicas, isr, leader, leader_epoch, 0)
    return kv(KEYS.partition(topic, p), record.encode(), revision)


def base_image():
    return MetadataImage.from_kvs(
        20,
        [
            broker_kv(1),
            broker_kv(2),
            broker_kv(3),
            kv(KEYS.controller, encode_controller(2)),
            topic_kv(),
            partition_kv(p=0),
            partition_kv(p=1, leader=2),
        ],
    )


# --- keys ---------------------------------------------------------------------------------


def test_keys_follow_the_design_layout_under_the_cluster_prefix():
    assert KEYS.prefix == "/oncelog/c1/"
    assert KEYS.controller == "/oncelog/c1/controller"
    assert KEYS.broker(3) == "/oncelog/c1/brokers/3"
    assert KEYS.brokers_prefix == "/oncelog/c1/brokers/"
    assert KEYS.topic("orders") == "/oncelog/c1/topics/orders"
    assert KEYS.partition("orders", 7) == "/oncelog/c1/partitions/orders/7"
    assert KEYS.partitions_prefix("orders") == "/oncelog/c1/partitions/orders/"
    assert KEYS.producer_id_block == "/oncelog/c1/producer-ids/next-block"
    assert KEYS.features == "/oncelog/c1/features"


def test_parse_is_the_inverse_of_the_key_builders():
    assert KEYS.parse(KEYS.controller) == (KeyKind.CONTROLLER,)
    assert KEYS.parse(KEYS.broker(3)) == (KeyKind.BROKER, 3)
    assert KEYS.parse(KEYS.topic("a.b-c_d")) == (KeyKind.TOPIC, "a.b-c_d")
    assert KEYS.parse(KEYS.partition("a.b", 12)) == (KeyKind.PARTITION, "a.b", 12)
    assert KEYS.parse(KEYS.producer_id_block) == (KeyKind.PRODUCER_ID_BLOCK,)
    assert KEYS.parse(KEYS.features) == (KeyKind.FEATURES,)


@pytest.mark.parametrize(
    "key",
    [
        "/oncelog/other/brokers/1",  # another cluster
        "/oncelog/c1/brokers/x",
        "/oncelog/c1/brokers/01",  # not canonical: would be a second key for broker 1
        "/oncelog/c1/partitions/orders",
        "/oncelog/c1/partitions/orders/0/extra",
        "/oncelog/c1/something-new",
    ],
)
def test_keys_of_no_known_kind_parse_as_unknown(key):
    assert KEYS.parse(key) == (KeyKind.UNKNOWN, key)


def test_partitions_prefix_of_a_topic_does_not_cover_a_longer_topic_name():
    assert not KEYS.partition("a.b", 0).startswith(KEYS.partitions_prefix("a"))


# --- codecs -------------------------------------------------------------------------------


def test_broker_registration_round_trips_and_its_epoch_is_the_create_revision():
    endpoints = {"PLAINTEXT": ("h", 9092), "SASL_SSL": ("h.example.com", 9094)}
    registration = BrokerRegistration(4, "h", 9092, "ib", 9093, "u-1", epoch=0, endpoints=endpoints)
    stored = json.loads(registration.encode())
    assert stored == {
        "v": 1,
        "host": "h",
        "port": 9092,
        "inter_broker": {"host": "ib", "port": 9093},
        "incarnation": "u-1",
        "endpoints": {"PLAINTEXT": {"host": "h", "port": 9092}, "SASL_SSL": {"host": "h.example.com", "port": 9094}},
    }
    decoded = BrokerRegistration.decode(KeyValue(KEYS.broker(4), registration.encode(), 57, 60))
    assert decoded == BrokerRegistration(4, "h", 9092, "ib", 9093, "u-1", epoch=57)
    assert decoded.endpoint("SASL_SSL") == ("h.example.com", 9094) and decoded.endpoint("SSL") is None


def test_a_registration_from_before_named_listeners_serves_every_listener():
    legacy = json.dumps({"v": 1, "host": "h", "port": 9092, "inter_broker": {"host": "ib", "port": 9093},
                         "incarnation": "u-1"}).encode()
    decoded = BrokerRegistration.decode(KeyValue(KEYS.broker(4), legacy, 57, 60))
    assert decoded.endpoint("PLAINTEXT") == ("h", 9092) and decoded.endpoint("ANY") == ("h", 9092)


def test_topic_record_round_trips_with_its_id_and_configs():
    record = TopicRecord("orders", TOPIC_ID, 6, {"cleanup.policy": "compact"})
    assert json.loads(record.encode()) == {
        "v": 1,
        "topic_id": str(TOPIC_ID),
        "partitions": 6,
        "configs": {"cleanup.policy": "compact"},
    }
    assert TopicRecord.decode(kv(KEYS.topic("orders"), record.encode())) == record


def test_partition_record_round_trips_and_takes_mod_revision_from_etcd():
    record = PartitionRecord("orders", 3, (1, 2, 3), (1, 3), 3, 7, 12)
    assert json.loads(record.encode()) == {
        "v": 1,
        "replicas": [1, 2, 3],
        "isr": [1, 3],
        "leader": 3,
        "leader_epoch": 7,
        "partition_epoch": 12,
    }
    decoded = PartitionRecord.decode(KeyValue(KEYS.partition("orders", 3), record.encode(), 5, 44))
    assert decoded == PartitionRecord("orders", 3, (1, 2, 3), (1, 3), 3, 7, 12, mod_revision=44)


def test_a_value_with_an_unknown_format_version_is_refused_clearly():
    value = json.dumps({"v": 2, "topic_id": str(TOPIC_ID), "partitions": 1, "configs": {}}).encode()
    with pytest.raises(
        MetadataFormatError, match=r"topic record at '/oncelog/c1/topics/t' has format version 2"
    ):
        TopicRecord.decode(kv(KEYS.topic("t"), value))


def test_a_value_without_a_format_version_is_refused():
    with pytest.raises(MetadataFormatError, match="format version None"):
        BrokerRegistration.decode(kv(KEYS.broker(1), b'{"host": "h"}'))


@pytest.mark.parametrize(
    "value",
    [
        b"not json",
        b"[1]",
        b'{"v":1,"replicas":[1],"isr":[1],"leader":1,"leader_epoch":0}',  # no partition_epoch
        b'{"v":1,"replicas":["1"],"isr":[1],"leader":1,"leader_epoch":0,"partition_epoch":0}',
        b'{"v":1,"replicas":[1],"isr":[1],"leader":true,"leader_epoch":0,"partition_epoch":0}',
    ],
)
def test_a_malformed_partition_value_is_refused(value):
    with pytest.raises(MetadataFormatError):
        PartitionRecord.decode(kv(KEYS.partition("t", 0), value))


def test_a_malformed_value_stops_the_image_rather_than_being_skipped():
    with pytest.raises(MetadataFormatError):
        base_image().apply(30, [put(KEYS.partition("orders", 0), b'{"v":9}')])


# --- image ------------------------------------------------------------------------------


def test_image_from_a_range_holds_brokers_topics_partitions_and_controller():
    image = base_image()
    assert image.revision == 20
    assert image.live_broker_ids() == {1, 2, 3}
    assert image.brokers[2].epoch == 10 and image.brokers[2].port == 9002
    assert image.controller_id == 2
    assert image.topics["orders"].topic_id == TOPIC_ID
    assert image.partition("orders", 1).leader == 2
    assert image.partition("orders", 5) is None
    assert [p.partition for p in image.partitions_of("orders")] == [0, 1]
    assert image.partitions_of("missing") == []
    assert image.topic_by_id(TOPIC_ID).name == "orders"
    assert image.topic_by_id(uuid.uuid4()) is None


def test_empty_image_has_no_controller_and_no_brokers():
    image = MetadataImage.empty()
    assert image.revision == 0 and image.controller_id == -1
    assert image.live_broker_ids() == set() and not image.topics and not image.partitions


def test_image_is_immutable_and_apply_leaves_the_old_image_untouched():
    image = base_image()
    with pytest.raises(TypeError):
        image.brokers[9] = image.brokers[1]
    new, _ = image.apply(30, [delete(KEYS.broker(1))])
    assert 1 in image.brokers and 1 not in new.brokers
    assert new.revision == 30


def test_producer_id_block_features_and_unknown_keys_are_not_image_state():
    image = base_image()
    new, delta = image.apply(
        30,
        [
            put(KEYS.producer_id_block, b'{"v":1,"next_block_start":1000}'),
            put(KEYS.features, b'{"v":1,"transaction.version":2}'),
            put("/oncelog/c1/future-kind/x", b"anything, even not json"),
        ],
    )
    assert delta.is_empty
    assert (new.brokers, new.topics, new.partitions, new.controller_id) == (
        image.brokers,
        image.topics,
        image.partitions,
        image.controller_id,
    )


def test_topic_delete_removes_its_partitions_from_the_image():
    image = base_image()
    new, delta = image.apply(
        30, [delete(KEYS.topic("orders"))]
    )  # the partition keys' deletes come later
    assert "orders" not in new.topics
    assert new.partitions_of("orders") == [] and not new.partitions
    assert delta.deleted_topics == {"orders": image.topics["orders"]}
    assert delta.changed_partitions == {
        ("orders", 0): (image.partition("orders", 0), None),
        ("orders", 1): (image.partition("orders", 1), None),
    }
    assert new.topic_by_id(TOPIC_ID) is None


def test_late_writes_to_partitions_of_a_deleted_topic_stay_out_of_the_image():
    new, _ = base_image().apply(30, [delete(KEYS.topic("orders"))])
    newer, delta = new.apply(31, [Event(EventType.PUT, partition_kv(p=0, leader=3, revision=31))])
    assert not newer.partitions and delta.is_empty


def test_topic_creation_with_its_partitions_in_one_batch_is_one_delta():
    image = MetadataImage.from_kvs(5, [broker_kv(1)])
    new_id = uuid.uuid4()
    events = [
        put(KEYS.topic("t"), TopicRecord("t", new_id, 2, {}).encode(), 6),
        Event(EventType.PUT, partition_kv("t", 0, (1,), (1,), 1, revision=6)),
        Event(EventType.PUT, partition_kv("t", 1, (1,), (1,), 1, revision=6)),
    ]
    new, delta = image.apply(6, events)
    assert delta.created_topics == {"t": new.topics["t"]}
    assert set(delta.changed_partitions) == {("t", 0), ("t", 1)}
    assert all(before is None for before, _ in delta.changed_partitions.values())
    assert new.partition("t", 1).mod_revision == 6


def test_recreated_topic_is_both_deleted_and_created_in_the_delta():
    image = base_image()
    new_id = uuid.uuid4()
    new, delta = image.apply(
        30,
        [
            delete(KEYS.topic("orders"), 29),
            put(KEYS.topic("orders"), TopicRecord("orders", new_id, 2, {}).encode(), 30),
        ],
    )
    assert delta.deleted_topics["orders"].topic_id == TOPIC_ID
    assert delta.created_topics["orders"].topic_id == new_id
    assert new.topic_by_id(new_id).name == "orders" and new.topic_by_id(TOPIC_ID) is None


def test_topic_config_or_partition_count_change_is_a_changed_topic():
    image = base_image()
    _, delta = image.apply(
        30, [Event(EventType.PUT, topic_kv(partitions=3, configs={"min.insync.replicas": "2"}))]
    )
    before, after = delta.changed_topics["orders"]
    assert (
        before.partitions == 2
        and after.partitions == 3
        and after.configs["min.insync.replicas"] == "2"
    )
    assert not delta.created_topics and not delta.deleted_topics


def test_partition_change_carries_old_and_new_records():
    image = base_image()
    _, delta = image.apply(
        30, [Event(EventType.PUT, partition_kv(p=0, isr=(1, 2), leader=1, revision=30))]
    )
    before, after = delta.changed_partitions[("orders", 0)]
    assert before.isr == (1, 2, 3) and after.isr == (1, 2) and after.mod_revision == 30
    assert list(delta.changed_partitions) == [("orders", 0)]


def test_new_broker_is_registered_and_a_lost_lease_is_unregistered():
    image = base_image()
    new, delta = image.apply(30, [Event(EventType.PUT, broker_kv(4, 30)), delete(KEYS.broker(3))])
    assert set(delta.registered_brokers) == {4} and delta.registered_brokers[4].epoch == 30
    assert delta.unregistered_brokers == {3}
    assert new.live_broker_ids() == {1, 2, 4}


def test_broker_registering_again_has_a_new_epoch_and_is_in_registered_brokers():
    image = base_image()
    # Lease expired and the broker registered again within one batch: never absent in an image.
    new, delta = image.apply(
        30, [delete(KEYS.broker(2), 29), Event(EventType.PUT, broker_kv(2, 30))]
    )
    assert delta.registered_brokers == {2: new.brokers[2]} and new.brokers[2].epoch == 30
    assert delta.unregistered_brokers == set()


def test_controller_change_and_loss_are_flagged():
    image = base_image()
    new, delta = image.apply(30, [delete(KEYS.controller)])
    assert new.controller_id == -1 and delta.controller_changed
    newer, delta = new.apply(31, [put(KEYS.controller, encode_controller(3), 31)])
    assert newer.controller_id == 3 and delta.controller_changed
    _, delta = newer.apply(32, [put(KEYS.producer_id_block, b"{}", 32)])
    assert not delta.controller_changed


def test_dynamic_broker_configs_are_image_state_and_a_change_is_flagged():
    assert KEYS.parse(KEYS.broker_configs) == (KeyKind.BROKER_CONFIGS,)
    assert KEYS.broker_configs == "/oncelog/c1/configs/brokers"
    document = {"default": {"log.retention.ms": "60000"}, "brokers": {"2": {"log.segment.bytes": "1048576"}}}
    image, delta = base_image().apply(30, [put(KEYS.broker_configs, encode_broker_configs(document), 30)])
    assert dict(image.broker_configs) == document and delta.broker_configs_changed
    assert image.fenced_view(2).broker_configs == image.broker_configs
    same, delta = image.apply(31, [put(KEYS.broker_configs, encode_broker_configs(document), 31)])
    assert not delta.broker_configs_changed and delta.is_empty
    gone, delta = same.apply(32, [delete(KEYS.broker_configs)])
    assert gone.broker_configs == {} and delta.broker_configs_changed
    assert MetadataDelta.diff(base_image(), image).broker_configs_changed


def test_diff_after_a_re_range_equals_the_changes_the_lost_events_made():
    # The watch was compacted: a fresh range replaces the events in between.
    old = base_image()
    events = [
        delete(KEYS.broker(3), 25),
        Event(EventType.PUT, partition_kv(p=0, isr=(1, 2), revision=26)),
        put(KEYS.controller, encode_controller(1), 27),
    ]
    applied, applied_delta = old.apply(27, events)
    re_ranged = MetadataImage.from_kvs(
        27,
        [
            broker_kv(1),
            broker_kv(2),
            kv(KEYS.controller, encode_controller(1), 27),
            topic_kv(),
            partition_kv(p=0, isr=(1, 2), revision=26),
            partition_kv(p=1, leader=2),
        ],
    )
    assert re_ranged == applied
    assert MetadataDelta.diff(old, re_ranged) == applied_delta


def test_apply_refuses_a_revision_older_than_the_image():
    with pytest.raises(ValueError, match="older"):
        base_image().apply(19, [])


def test_the_fenced_view_of_a_broker_names_it_leader_of_nothing_and_keeps_the_rest():
    image = base_image()
    fenced = image.fenced_view(2)  # node 2 leads orders-1 and is the controller
    assert fenced.revision == image.revision
    assert fenced.live_broker_ids() == {1, 3}
    assert fenced.controller_id == -1
    led = fenced.partition("orders", 1)
    assert led.leader == -1
    # The epochs stay: clients ignore metadata older than what they saw (KIP-320).
    assert (led.leader_epoch, led.isr, led.mod_revision) == (0, (1, 2, 3), 11)
    assert fenced.partition("orders", 0) == image.partition("orders", 0)  # led by node 1: as last seen
    delta = MetadataDelta.diff(image, fenced)
    assert delta.unregistered_brokers == {2} and delta.controller_changed
    assert set(delta.changed_partitions) == {("orders", 1)}
    assert image.fenced_view(1).controller_id == 2  # another broker's controller role stays

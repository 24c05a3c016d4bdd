"""OffsetForLeaderEpoch against a standalone broker (leader of everything at epoch 0):
the end offset of an epoch from the leader epoch cache, the current-leader-epoch check,
unknown partitions, ApiVersions advertising it, and librdkafka (which uses it once it is
advertised) still producing and consuming."""

from __future__ import annotations

import datetime
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.offset_for_leader_epoch.v2 import request as epoch_v2
from kio.schema.offset_for_leader_epoch.v3 import request as epoch_v3
from kio.schema.offset_for_leader_epoch.v4 import request as epoch_v4
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.types import TopicName
from kio.static.primitive import Records, i16, i32, i32Timedelta

from oncelog.protocol import record_batch
from oncelog.protocol.client import WireClient
from tests.support.kafka import create_topic

VERSIONS = {2: epoch_v2, 3: epoch_v3, 4: epoch_v4}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def produce(client: WireClient, topic: str, count: int) -> None:
    for i in range(count):
        batch = record_batch.build_batch([record_batch.Record(None, str(i).encode())],
                                         timestamp_ms=int(time.time() * 1000))
        response = client.request(ProduceRequest(
            transactional_id=None, acks=i16(-1), timeout=i32Timedelta.parse(datetime.timedelta(seconds=5)),
            topic_data=(TopicProduceData(
                name=TopicName(topic), partition_data=(PartitionProduceData(index=i32(0), records=Records(batch)),)),),
        ))
        assert response.responses[0].partition_responses[0].error_code == ErrorCode.none


def end_offset(client: WireClient, topic: str, leader_epoch: int, *, current_leader_epoch: int = -1,
               partition: int = 0, version: int = 4):
    schema = VERSIONS[version]
    fields = {"replica_id": -1} if version >= 3 else {}
    response = client.request(schema.OffsetForLeaderEpochRequest(**fields, topics=(schema.OffsetForLeaderTopic(
        topic=topic, partitions=(schema.OffsetForLeaderPartition(
            partition=partition, current_leader_epoch=current_leader_epoch, leader_epoch=leader_epoch),)),)))
    (answer,) = response.topics[0].partitions
    assert answer.partition == partition
    return answer.error_code, answer.leader_epoch, answer.end_offset


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_the_latest_epoch_ends_at_the_log_end_offset(broker, version):
    topic = unique("epochs")
    create_topic(broker.bootstrap_servers, topic)
    with WireClient.connect(broker.bootstrap_servers) as client:
        produce(client, topic, 3)
        assert end_offset(client, topic, 0, version=version) == (ErrorCode.none, 0, 3)
        produce(client, topic, 2)
        assert end_offset(client, topic, 0, current_leader_epoch=0, version=version) == (ErrorCode.none, 0, 5)


def test_an_epoch_above_every_known_one_answers_undefined_epoch_and_offset(broker):
    topic = unique("epochs")
    create_topic(broker.bootstrap_servers, topic)
    with WireClient.connect(broker.bootstrap_servers) as client:
        produce(client, topic, 2)
        assert end_offset(client, topic, 7) == (ErrorCode.none, -1, -1)
        assert end_offset(client, topic, -1) == (ErrorCode.none, -1, -1)


def test_an_empty_log_has_no_epoch_yet(broker):
    topic = unique("epochs")
    create_topic(broker.bootstrap_servers, topic)
    with WireClient.connect(broker.bootstrap_servers) as client:
        assert end_offset(client, topic, 0) == (ErrorCode.none, -1, -1)


def test_a_current_leader_epoch_newer_than_the_leaders_is_unknown_leader_epoch(broker):
    topic = unique("epochs")
    create_topic(broker.bootstrap_servers, topic)
    with WireClient.connect(broker.bootstrap_servers) as client:
        produce(client, topic, 1)
        assert end_offset(client, topic, 0, current_leader_epoch=1) == (ErrorCode.unknown_leader_epoch, -1, -1)
        assert end_offset(client, topic, 0, current_leader_epoch=1, version=2) == (
            ErrorCode.unknown_leader_epoch, -1, -1
        )


def test_an_unknown_topic_or_partition_is_unknown_topic_or_partition(broker):
    topic = unique("epochs")
    create_topic(broker.bootstrap_servers, topic)
    with WireClient.connect(broker.bootstrap_servers) as client:
        assert end_offset(client, unique("missing"), 0) == (ErrorCode.unknown_topic_or_partition, -1, -1)
        assert end_offset(client, topic, 0, partition=5) == (ErrorCode.unknown_topic_or_partition, -1, -1)


def test_api_versions_advertises_offset_for_leader_epoch_v2_to_v4(broker):
    with WireClient.connect(broker.bootstrap_servers) as client:
        response = client.request(ApiVersionsRequest(client_software_name="test", client_software_version="1"))
    (entry,) = [api for api in response.api_keys if api.api_key == 23]
    assert (entry.min_version, entry.max_version) == (2, 4)


def test_confluent_kafka_still_produces_and_consumes_with_the_api_advertised(broker):
    """librdkafka validates its fetch position with OffsetForLeaderEpoch (KIP-320) once
    the broker advertises it; a roundtrip must still read everything once."""
    topic = unique("roundtrip")
    create_topic(broker.bootstrap_servers, topic)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "enable.idempotence": True})
    for i in range(100):
        producer.produce(topic, str(i).encode(), partition=0)
    assert producer.flush(10) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": unique("group"),
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    values: list[int] = []
    deadline = time.monotonic() + 30
    while len(values) < 100 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            values.append(int(message.value()))
    consumer.close()
    assert values == list(range(100))

"""DeleteRecords against a real broker: the log start offset moves up, consumers and
ListOffsets see the records below it as gone, it survives a restart, and the refusals
carry Kafka's error codes (kafka-python's own admin test found the API missing)."""

from __future__ import annotations

import datetime
import uuid

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kio.schema.delete_records.v2 import request as delete_v2
from kio.schema.errors import ErrorCode
from kio.schema.list_offsets.v5 import request as list_offsets_v5
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i32Timedelta, i64

from oncelog import EmbeddedBroker
from oncelog.protocol.client import WireClient


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(bootstrap: str, name: str, partitions: int = 1, configs: dict | None = None) -> None:
    with KafkaAdminClient(bootstrap_servers=bootstrap) as admin:
        admin.create_topics([NewTopic(name, partitions, 1, topic_configs=configs or {})])


def produce(bootstrap: str, topic: str, count: int, partition: int = 0, key: bytes | None = None) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    try:
        for i in range(count):
            producer.send(topic, key=key, value=f"v{i}".encode(), partition=partition)
        producer.flush(10)
    finally:
        producer.close()


def consumed_offsets(bootstrap: str, partition: TopicPartition) -> list[int]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False,
                             consumer_timeout_ms=2000)
    try:
        consumer.assign([partition])
        consumer.seek_to_beginning(partition)
        return [record.offset for record in consumer]
    finally:
        consumer.close()


def delete_records(bootstrap: str, topic: str, offsets: dict[int, int]) -> list[tuple[int, int, int]]:
    request = delete_v2.DeleteRecordsRequest(
        topics=(delete_v2.DeleteRecordsTopic(name=TopicName(topic), partitions=tuple(
            delete_v2.DeleteRecordsPartition(partition_index=i32(p), offset=i64(o)) for p, o in offsets.items())),),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=5)),
    )
    with WireClient.connect(bootstrap) as client:
        (answer,) = client.request(request).topics
    return [(p.partition_index, p.error_code, p.low_watermark) for p in answer.partitions]


def test_delete_records_moves_the_log_start_and_consumers_begin_there(shared_broker):
    bootstrap = shared_broker.bootstrap_servers
    topic = unique("delete-records")
    create_topic(bootstrap, topic, partitions=2)
    produce(bootstrap, topic, 100, partition=0)
    produce(bootstrap, topic, 100, partition=1)
    p0, p1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    with KafkaAdminClient(bootstrap_servers=bootstrap) as admin:
        result = admin.delete_records({p0: 40, p1: -1}, timeout_ms=1000)
    assert result[p0] == {"low_watermark": 40, "error_code": 0, "partition_index": 0}
    assert result[p1] == {"low_watermark": 100, "error_code": 0, "partition_index": 1}  # -1: the high watermark
    assert consumed_offsets(bootstrap, p0) == list(range(40, 100))
    assert consumed_offsets(bootstrap, p1) == []
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        assert consumer.beginning_offsets([p0, p1]) == {p0: 40, p1: 100}
    finally:
        consumer.close()


def test_delete_records_refusals_carry_kafkas_codes(shared_broker):
    bootstrap = shared_broker.bootstrap_servers
    topic = unique("delete-refusals")
    create_topic(bootstrap, topic, partitions=1)
    produce(bootstrap, topic, 10)
    assert delete_records(bootstrap, topic, {0: 11}) == [(0, ErrorCode.offset_out_of_range, -1)]  # past the HW
    assert delete_records(bootstrap, topic, {0: -2}) == [(0, ErrorCode.offset_out_of_range, -1)]
    assert delete_records(bootstrap, topic, {0: 6}) == [(0, ErrorCode.none, 6)]
    assert delete_records(bootstrap, topic, {0: 3}) == [(0, ErrorCode.none, 6)]  # never moves back
    assert delete_records(bootstrap, topic, {7: 0}) == [(7, ErrorCode.unknown_topic_or_partition, -1)]
    assert delete_records(bootstrap, unique("missing"), {0: 0}) == [(0, ErrorCode.unknown_topic_or_partition, -1)]

    compacted = unique("delete-compacted")
    create_topic(bootstrap, compacted, configs={"cleanup.policy": "compact"})
    produce(bootstrap, compacted, 3, key=b"k")
    assert delete_records(bootstrap, compacted, {0: 1}) == [(0, ErrorCode.policy_violation, -1)]

    produce(bootstrap, topic, 1)  # a group commit below creates __consumer_offsets
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=unique("g"), auto_offset_reset="earliest",
                             consumer_timeout_ms=3000)
    try:
        list(consumer)
        consumer.commit()
    finally:
        consumer.close()
    with KafkaAdminClient(bootstrap_servers=bootstrap) as admin:
        offsets_partitions = len(admin.describe_topics(["__consumer_offsets"])[0]["partitions"])
    answers = delete_records(bootstrap, "__consumer_offsets", dict.fromkeys(range(offsets_partitions), 0))
    assert {code for _p, code, _low in answers} == {ErrorCode.invalid_topic_exception}


def test_deleted_records_stay_deleted_after_a_restart(tmp_path):
    topic = unique("delete-restart")
    with EmbeddedBroker(tmp_path / "broker") as broker:
        create_topic(broker.bootstrap_servers, topic)
        produce(broker.bootstrap_servers, topic, 20)
        assert delete_records(broker.bootstrap_servers, topic, {0: 15}) == [(0, ErrorCode.none, 15)]
    with EmbeddedBroker(tmp_path / "broker") as broker:
        assert consumed_offsets(broker.bootstrap_servers, TopicPartition(topic, 0)) == list(range(15, 20))


def test_deleting_records_past_an_open_transactions_start_moves_the_last_stable_offset_with_it(shared_broker):
    from confluent_kafka import Producer

    bootstrap = shared_broker.bootstrap_servers
    topic = unique("delete-open-txn")
    create_topic(bootstrap, topic)
    transactional = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("open")})
    transactional.init_transactions(10)
    transactional.begin_transaction()
    for i in range(3):
        transactional.produce(topic, f"t{i}".encode(), partition=0)  # offsets 0-2, left open
    transactional.flush(10)
    produce(bootstrap, topic, 5)  # offsets 3-7, behind the open transaction

    def last_stable_offset() -> int:
        """ListOffsets latest with isolation level read_committed, on the wire."""
        request = list_offsets_v5.ListOffsetsRequest(
            replica_id=BrokerId(-1), isolation_level=i8(1),
            topics=(list_offsets_v5.ListOffsetsTopic(name=topic, partitions=(
                list_offsets_v5.ListOffsetsPartition(partition_index=i32(0), current_leader_epoch=i32(-1),
                                                     timestamp=i64(-1)),
            )),),
        )
        with WireClient.connect(bootstrap) as client:
            (answer,) = client.request(request).topics
        (partition,) = answer.partitions
        assert partition.error_code == ErrorCode.none
        return partition.offset

    assert last_stable_offset() == 0
    assert delete_records(bootstrap, topic, {0: 2}) == [(0, ErrorCode.none, 2)]
    assert last_stable_offset() == 2  # Kafka: max(first unstable offset, log start offset)
    transactional.abort_transaction(10)
    assert last_stable_offset() == 9  # the abort marker is offset 8

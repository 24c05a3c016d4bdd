"""The pipeline tests' input and check: transactions written (committed or aborted)
to the source topic, and the sink topic read back with read_committed."""

from __future__ import annotations

import uuid

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition


def produce_in_transactions(bootstrap: str, topic: str, transactions: list[tuple[list[bytes], bool]]) -> None:
    """Each (values, commit): one transaction, committed or aborted after its records are in the log."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"test-input-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(30)
    for values, commit in transactions:
        producer.begin_transaction()
        for number, value in enumerate(values):
            producer.produce(topic, value, key=str(number).encode())
        producer.flush(30)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)


def read_committed(bootstrap: str, topic: str, partitions: int = 2) -> list[bytes]:
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:8]}",
        "isolation.level": "read_committed", "enable.partition.eof": True, "enable.auto.commit": False,
    })
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    values: list[bytes] = []
    at_end: set[int] = set()
    for _ in range(200):
        for message in consumer.consume(500, 0.1):
            error, partition, value = message.error(), message.partition(), message.value()
            assert partition is not None  # records and partition EOFs name their partition
            if error is None:
                assert value is not None  # the tests write no tombstones
                values.append(value)
                at_end.discard(partition)
            elif error.code() == KafkaError._PARTITION_EOF:
                at_end.add(partition)
        if len(at_end) == partitions:
            break
    consumer.close()
    assert len(at_end) == partitions, f"did not reach the end of {topic}"
    return values

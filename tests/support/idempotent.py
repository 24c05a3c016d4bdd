"""An idempotent producer at the wire: InitProducerId, hand-built batches with their
sequence numbers, Produce v9 (acks=all), for the restart and producer-state tests."""

import datetime
import time

from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.produce.v9 import request as produce_v9

from oncelog.protocol import record_batch as rb
from oncelog.protocol.client import WireClient


def produce(bootstrap, batch, partition=0, topic="idem"):
    request = produce_v9.ProduceRequest(
        transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=5),
        topic_data=(produce_v9.TopicProduceData(
            name=topic, partition_data=(produce_v9.PartitionProduceData(index=partition, records=batch),)),),
    )
    with WireClient.connect(bootstrap) as client:
        return client.request(request).responses[0].partition_responses[0]


def init_producer_id(bootstrap):
    with WireClient.connect(bootstrap) as client:
        response = client.request(InitProducerIdRequest(
            transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60),
            producer_id=-1, producer_epoch=-1,
        ))
    assert response.error_code == ErrorCode.none
    return response.producer_id, response.producer_epoch


def idempotent_batch(producer_id, epoch, sequence, count=3, timestamp=None):
    # Current time by default: state of producers whose last timestamp is older than
    # producer.id.expiration.ms is left out when it is loaded after a restart, as in Kafka.
    timestamp = time.time_ns() // 1_000_000 if timestamp is None else timestamp
    records = [rb.Record(f"k{sequence + i}".encode(), f"v{sequence + i}".encode()) for i in range(count)]
    return rb.build_batch(records, timestamp_ms=timestamp, producer_id=producer_id,
                          producer_epoch=epoch, base_sequence=sequence)

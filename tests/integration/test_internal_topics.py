"""The internal topics (`__consumer_offsets`, `__transaction_state`) belong to the
coordinators: clients cannot produce to them (Kafka's INVALID_TOPIC_EXCEPTION unless the
client id is `__admin_client`), delete them or add partitions to them."""

from __future__ import annotations

import datetime
import functools

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions
from kio.schema.errors import ErrorCode
from kio.schema.produce.v9 import request as produce_v9
from kio.schema.types import TopicName
from kio.static.primitive import Records, i16, i32, i32Timedelta

from oncelog import EmbeddedBroker
from oncelog.protocol import client as wire_client
from oncelog.protocol import record_batch as rb
from oncelog.protocol.client import WireClient

INTERNAL = ["__consumer_offsets", "__transaction_state"]


@pytest.fixture(scope="module")
def coordinated_broker(tmp_path_factory):
    """A broker whose internal topics exist: one transaction and one group commit ran."""
    with EmbeddedBroker(tmp_path_factory.mktemp("internal"), {"offsets.topic.num.partitions": "3",
                                                                "transaction.state.log.num.partitions": "3"}) as broker:
        bootstrap = broker.bootstrap_servers
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "creates-txn-state"})
        producer.init_transactions(10)
        producer.begin_transaction()
        producer.produce("data", b"x")
        producer.commit_transaction(10)
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "creates-offsets"})
        consumer.commit(offsets=[TopicPartition("data", 0, 1)], asynchronous=False)
        consumer.close()
        topics = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
        assert set(INTERNAL) <= set(topics)
        yield broker


def produce(client: WireClient, topic: str) -> object:
    request = produce_v9.ProduceRequest(
        transactional_id=None, acks=i16(-1), timeout=i32Timedelta.parse(datetime.timedelta(seconds=5)),
        topic_data=(produce_v9.TopicProduceData(name=TopicName(topic), partition_data=(
            produce_v9.PartitionProduceData(
                index=i32(0), records=Records(rb.build_batch([rb.Record(b"k", b"v")], timestamp_ms=1))),
        )),),
    )
    return client.request(request).responses[0].partition_responses[0]


@pytest.mark.parametrize("topic", INTERNAL)
def test_produce_to_an_internal_topic_is_invalid_topic_exception(coordinated_broker, topic):
    with WireClient.connect(coordinated_broker.bootstrap_servers) as client:
        answer = produce(client, topic)
    assert (answer.error_code, answer.error_message, answer.base_offset) == (
        ErrorCode.invalid_topic_exception, None, -1)


def test_the_admin_client_id_may_produce_to_an_internal_topic_as_in_kafka(coordinated_broker, monkeypatch):
    monkeypatch.setattr(wire_client, "encode_request",
                        functools.partial(wire_client.encode_request, client_id="__admin_client"))
    with WireClient.connect(coordinated_broker.bootstrap_servers) as client:
        answer = produce(client, "__consumer_offsets")
    assert answer.error_code == ErrorCode.none


def test_a_producer_writing_to_an_internal_topic_gets_a_delivery_error(coordinated_broker):
    producer = Producer({"bootstrap.servers": coordinated_broker.bootstrap_servers, "message.timeout.ms": 5000})
    errors = []
    producer.produce("__transaction_state", b"rogue", partition=0, on_delivery=lambda error, _m: errors.append(error))
    producer.flush(10)
    assert [e.code() for e in errors] == [KafkaError.TOPIC_EXCEPTION]


@pytest.mark.parametrize("topic", INTERNAL)
def test_deleting_an_internal_topic_is_refused_and_it_stays(coordinated_broker, topic):
    admin = AdminClient({"bootstrap.servers": coordinated_broker.bootstrap_servers})
    with pytest.raises(KafkaException) as refused:
        admin.delete_topics([topic], operation_timeout=10)[topic].result(10)
    assert refused.value.args[0].code() == KafkaError.TOPIC_EXCEPTION
    assert topic in admin.list_topics(timeout=10).topics


@pytest.mark.parametrize("topic", INTERNAL)
def test_adding_partitions_to_an_internal_topic_is_refused(coordinated_broker, topic):
    admin = AdminClient({"bootstrap.servers": coordinated_broker.bootstrap_servers})
    with pytest.raises(KafkaException) as refused:
        admin.create_partitions([NewPartitions(topic, 5)])[topic].result(10)
    assert refused.value.args[0].code() == KafkaError.TOPIC_EXCEPTION
    assert len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 3

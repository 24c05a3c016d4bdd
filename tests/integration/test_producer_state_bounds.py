"""Producer state stays bounded on a real broker: a producer expired by
producer.id.expiration.ms stays expired across restarts, and
producer.id.max.entries.per.partition caps the entries of a partition without ever
evicting an ongoing transaction. Either way the forgotten producer is unknown again, so
its next batch is accepted at any sequence (KIP-360)."""

import pytest
from confluent_kafka import Producer
from kio.schema.describe_producers.v0 import request as describe_v0
from kio.schema.errors import ErrorCode

from oncelog.broker.embedded import EmbeddedBroker
from oncelog.local.process import BrokerProcess, wait_until
from oncelog.protocol.client import WireClient
from tests.support.idempotent import idempotent_batch, init_producer_id, produce
from tests.support.kafka import create_topic


def active_producers(bootstrap, topic="idem", partition=0):
    with WireClient.connect(bootstrap) as client:
        response = client.request(describe_v0.DescribeProducersRequest(
            topics=(describe_v0.TopicRequest(name=topic, partition_indexes=(partition,)),),
        ))
    (partition_response,) = response.topics[0].partitions
    assert partition_response.error_code == ErrorCode.none
    return {p.producer_id: p for p in partition_response.active_producers}


@pytest.mark.parametrize("how", ["clean_restart", "kill_9", "kill_9_after_roll"])
def test_producer_expired_before_a_restart_stays_expired_after_it(tmp_path, how):
    config = {
        "log.flush.interval.messages": "1",
        "producer.id.expiration.ms": "1500",
        "producer.id.expiration.check.interval.ms": "100",
    }
    if how == "kill_9_after_roll":
        config["log.segment.bytes"] = "200"  # a roll per batch: snapshots taken while it was alive
    with BrokerProcess(tmp_path / "data", config) as broker:
        bootstrap = broker.bootstrap_servers
        create_topic(bootstrap, "idem")
        producer_id, epoch = init_producer_id(bootstrap)
        for sequence in range(0, 9, 3):
            assert produce(bootstrap, idempotent_batch(producer_id, epoch, sequence)).error_code == ErrorCode.none
        assert producer_id in active_producers(bootstrap)
        wait_until(lambda: producer_id not in active_producers(bootstrap), timeout=15,
                   message="the idle producer to expire")

        # After the restart the expiry timer runs only hourly: whatever state the broker
        # has for the producer is what loading the snapshots and the log gave it.
        broker.config["producer.id.expiration.check.interval.ms"] = "3600000"
        if how == "clean_restart":
            broker.restart()
        else:
            broker.kill()
            broker.start()

        assert producer_id not in active_producers(bootstrap)
        # A retry of its last batch is not recognised any more: an unknown producer is
        # accepted (KIP-360), so it is appended again at the log end.
        retry = produce(bootstrap, idempotent_batch(producer_id, epoch, 6))
        assert (retry.error_code, retry.base_offset) == (ErrorCode.none, 9)
        assert active_producers(bootstrap)[producer_id].last_sequence == 8


def test_producer_entries_per_partition_are_capped(tmp_path):
    with BrokerProcess(tmp_path / "data", {"producer.id.max.entries.per.partition": "3"}) as broker:
        bootstrap = broker.bootstrap_servers
        create_topic(bootstrap, "idem")
        producer_ids = [init_producer_id(bootstrap)[0] for _ in range(10)]
        for offset, producer_id in enumerate(producer_ids):
            result = produce(bootstrap, idempotent_batch(producer_id, 0, 0, count=1))
            assert (result.error_code, result.base_offset) == (ErrorCode.none, offset)
            assert len(active_producers(bootstrap)) <= 3
        assert sorted(active_producers(bootstrap)) == sorted(producer_ids[-3:])

        kept = produce(bootstrap, idempotent_batch(producer_ids[-1], 0, 0, count=1))
        assert (kept.error_code, kept.base_offset) == (ErrorCode.none, 9)  # still deduplicated
        evicted = produce(bootstrap, idempotent_batch(producer_ids[0], 0, 0, count=1))
        assert (evicted.error_code, evicted.base_offset) == (ErrorCode.none, 10)  # unknown: appended

        # The cap holds across a restart too.
        broker.restart()
        assert len(active_producers(bootstrap)) == 3


def test_an_ongoing_transaction_is_never_evicted_by_the_cap(tmp_path):
    with EmbeddedBroker(tmp_path / "data", {"producer.id.max.entries.per.partition": "2"}) as broker:
        bootstrap = broker.bootstrap_servers
        create_topic(bootstrap, "idem")
        transactional = Producer({"bootstrap.servers": bootstrap, "transactional.id": "capped-txn", "linger.ms": 0})
        transactional.init_transactions(10)
        transactional.begin_transaction()
        transactional.produce("idem", b"in the transaction", partition=0)
        transactional.flush(10)
        (txn_producer_id,) = active_producers(bootstrap)

        for producer_id in range(1_000_000, 1_000_020):  # unknown ids: accepted (KIP-360)
            assert produce(bootstrap, idempotent_batch(producer_id, 0, 0, count=1)).error_code == ErrorCode.none
        producers = active_producers(bootstrap)
        assert len(producers) == 2
        assert producers[txn_producer_id].current_txn_start_offset == 0

        transactional.commit_transaction(10)
        for producer_id in (2_000_000, 2_000_001):
            assert produce(bootstrap, idempotent_batch(producer_id, 0, 0, count=1)).error_code == ErrorCode.none
        # Once its transaction is over, the transactional producer can be evicted like any other.
        assert sorted(active_producers(bootstrap)) == [2_000_000, 2_000_001]

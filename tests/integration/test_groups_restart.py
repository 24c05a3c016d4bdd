"""Group membership and committed offsets survive a clean broker restart and a kill -9:
a running consumer keeps its member id, generation and partitions (no rebalance) and
resumes where it was; an empty group keeps its offsets."""

from __future__ import annotations

import pytest
from confluent_kafka import ConsumerGroupState, TopicPartition
from confluent_kafka.admin import AdminClient

from oncelog.local.process import BrokerProcess, wait_until
from tests.support.groups import ConsumerThread, consumer_config, describe
from tests.support.kafka import create_topic, produce_to_partitions

PARTITIONS = 3


def produce(bootstrap: str, topic: str, start: int, count: int) -> None:
    produce_to_partitions(bootstrap, topic, [(i % PARTITIONS, str(i).encode()) for i in range(start, start + count)])


def group_offsets(admin: AdminClient, group: str, topic: str) -> list[int]:
    from confluent_kafka import ConsumerGroupTopicPartitions

    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(PARTITIONS)])
    result = admin.list_consumer_group_offsets([request])[group].result(10)
    return [tp.offset for tp in sorted(result.topic_partitions, key=lambda tp: tp.partition)]


@pytest.mark.parametrize("how", ["clean_restart", "kill_9"])
def test_group_membership_and_offsets_survive_broker_restart(tmp_path, how):
    with BrokerProcess(tmp_path / "data", {"group.initial.rebalance.delay.ms": "100"}) as broker:
        bootstrap = broker.bootstrap_servers
        create_topic(bootstrap, "events", PARTITIONS)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        produce(bootstrap, "events", 0, 30)

        # A group whose only consumer finished and left: Empty, with offsets.
        finished = ConsumerThread(consumer_config(bootstrap, "finished", "range", None), "events")
        wait_until(lambda: len(finished.received) == 30, timeout=20, message="finished group consumed")
        finished.close()

        config = consumer_config(bootstrap, "live", "range", None)
        config["session.timeout.ms"] = 20_000  # outlives the broker's downtime
        live = ConsumerThread(config, "events")
        wait_until(lambda: len(live.received) == 30, timeout=20, message="live group consumed")
        before = describe(admin, "live")
        assert before.state == ConsumerGroupState.STABLE

        if how == "kill_9":
            broker.kill()
            broker.start()
        else:
            broker.restart()

        admin = AdminClient({"bootstrap.servers": bootstrap})
        assert group_offsets(admin, "finished", "events") == [10] * PARTITIONS
        assert describe(admin, "finished").state == ConsumerGroupState.EMPTY
        after = describe(admin, "live")
        assert after.state == ConsumerGroupState.STABLE
        assert [m.member_id for m in after.members] == [m.member_id for m in before.members]
        # The consumer carries on in the same generation: new records, nothing re-read, no rebalance.
        produce(bootstrap, "events", 30, 15)
        wait_until(lambda: len(live.received) == 45, timeout=30, message="records produced after the restart")
        live.close()
        assert sorted(live.received) == sorted((p, o) for p in range(PARTITIONS) for o in range(15))
        assert live.assignments == [list(range(PARTITIONS))]
        assert group_offsets(admin, "live", "events") == [15] * PARTITIONS

"""Helpers for tests against a ClusterProcess: create a topic and wait until it is fully
replicated, read a partition back, ask one node for leaders and ISRs, wait for a
condition with its duration measured."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Message, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import TopicName

from oncelog.local.cluster import ClusterProcess
from oncelog.protocol.client import WireClient


def create(cluster: ClusterProcess, name: str, partitions: int, replication_factor: int = 3, **configs) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(name, partitions, replication_factor, config=configs)])[name].result(timeout=30)
    cluster.wait_for_topic(name)
    for partition in range(partitions):
        cluster.wait_for_isr(name, partition, replication_factor)


def read_partition(cluster: ClusterProcess, topic: str, partition: int, expected: int) -> list[int]:
    """The partition's values (integers) from the start: `expected` of them, and whatever
    comes in the half second after (a duplicate would)."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "unused",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, partition, 0)])
    values: list[int] = []
    deadline = time.monotonic() + 60
    while len(values) < expected and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            values.append(_number(message))
    time.sleep(0.5)  # anything beyond `expected` would be a duplicate
    while (message := consumer.poll(0.2)) is not None:
        if not message.error():
            values.append(_number(message))
    consumer.close()
    return values


def _number(message: Message) -> int:
    value = message.value()
    assert value is not None  # the tests write numbers, no tombstones
    return int(value)


def metadata(cluster: ClusterProcess, node: int, topic: str) -> dict[int, tuple[int, set[int]]]:
    """{partition: (leader, ISR)} of the topic, as `node` answers it."""
    with WireClient.connect(cluster.nodes[node].bootstrap_servers, timeout=3) as client:
        response = client.request(MetadataRequest(topics=(MetadataRequestTopic(name=TopicName(topic), topic_id=None),),
                                                  allow_auto_topic_creation=False,
                                                  include_topic_authorized_operations=False))
    return {p.partition_index: (p.leader_id, set(p.isr_nodes)) for p in response.topics[0].partitions}


def wait_until(predicate, timeout: float, what: str, since: float | None = None) -> float:
    """Seconds from `since` (default: now) until `predicate()` holds, which must happen
    within `timeout` of `since` (errors count as not yet)."""
    since = time.monotonic() if since is None else since
    while time.monotonic() - since < timeout:
        try:
            if predicate():
                return time.monotonic() - since
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout}s: {what}")

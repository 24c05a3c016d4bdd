"""DescribeTopicPartitions (KIP-966) pages through topics and partitions with a cursor as
Kafka's broker does; kafka-python's own admin tests found it missing, and its request
(a null cursor, KIP-893's nullable struct) was refused as malformed."""

from __future__ import annotations

import uuid

from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from kio.schema.describe_topic_partitions.v0 import request as dtp_v0
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32

from oncelog.protocol.client import WireClient


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def page(client: WireClient, names, limit: int, cursor=None):
    request = dtp_v0.DescribeTopicPartitionsRequest(
        topics=tuple(dtp_v0.TopicRequest(name=name) for name in names), response_partition_limit=i32(limit),
        cursor=None if cursor is None else dtp_v0.Cursor(topic_name=cursor[0], partition_index=cursor[1]),
    )
    answer = client.request(request)
    described = [(t.name, t.error_code, [p.partition_index for p in t.partitions]) for t in answer.topics]
    next_cursor = None if answer.next_cursor is None else (answer.next_cursor.topic_name,
                                                          answer.next_cursor.partition_index)
    return described, next_cursor


def test_kafka_python_describes_a_topics_partitions_with_a_null_cursor(shared_broker):
    bootstrap = shared_broker.bootstrap_servers
    topic = unique("dtp")
    with KafkaAdminClient(bootstrap_servers=bootstrap) as admin:
        admin.create_topics([NewTopic(topic, 3, 1)])
        result = admin.describe_topic_partitions([topic])
        first = admin.describe_topic_partitions([topic], response_partition_limit=2)
        rest = admin.describe_topic_partitions([topic], cursor=first["next_cursor"])
    (described,) = result["topics"]
    assert result["next_cursor"] is None
    assert described["name"] == topic and described["error_code"] == 0
    node = shared_broker.broker.node_id
    assert [(p["partition_index"], p["leader_id"], p["replica_nodes"], p["isr_nodes"])
            for p in described["partitions"]] == [(i, node, [node], [node]) for i in range(3)]
    assert first["next_cursor"] == {"topic_name": topic, "partition_index": 2}
    assert [p["partition_index"] for p in rest["topics"][0]["partitions"]] == [2]


def test_the_cursor_walks_topics_in_name_order_across_page_limits(shared_broker):
    bootstrap = shared_broker.bootstrap_servers
    base = unique("dtp-walk")
    a, b, missing = f"{base}-a", f"{base}-b", f"{base}-c"
    with KafkaAdminClient(bootstrap_servers=bootstrap) as admin:
        admin.create_topics([NewTopic(a, 2, 1), NewTopic(b, 3, 1)])
    with WireClient.connect(bootstrap) as client:
        assert page(client, [missing, b, a], 2) == ([(a, ErrorCode.none, [0, 1])], (b, 0))
        assert page(client, [missing, b, a], 2, cursor=(b, 0)) == ([(b, ErrorCode.none, [0, 1])], (b, 2))
        assert page(client, [missing, b, a], 2, cursor=(b, 2)) == (
            [(b, ErrorCode.none, [2]), (missing, ErrorCode.unknown_topic_or_partition, [])], None)
        # a cursor must name one of the topics asked for, and a valid partition
        assert page(client, [a], 10, cursor=(b, 0)) == ([(a, ErrorCode.invalid_request, [])], None)
        assert page(client, [a], 10, cursor=(a, -1)) == ([(a, ErrorCode.invalid_request, [])], None)

"""The replica-placement admin APIs on a single node answer as Kafka's broker and
controller do for a one-broker cluster: DescribeLogDirs lists the log dir and what it
holds, AlterReplicaLogDirs to the current dir is a no-op, ElectLeaders needs no election,
and the only reassignment there is (to this broker) is accepted with nothing to do.
kafka-python's own admin tests found these APIs missing."""

from __future__ import annotations

import datetime
import uuid

import pytest
from kafka import KafkaAdminClient, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import NoError
from kafka.structs import TopicPartitionReplica
from kio.schema.alter_partition_reassignments.v1 import request as reassign_v1
from kio.schema.alter_replica_log_dirs.v2 import request as alter_dirs_v2
from kio.schema.elect_leaders.v2 import request as elect_v2
from kio.schema.errors import ErrorCode

from oncelog.protocol.client import WireClient

PREFERRED = 0


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def topic(shared_broker):
    name = unique("replica-admin")
    with KafkaAdminClient(bootstrap_servers=shared_broker.bootstrap_servers) as admin:
        admin.create_topics([NewTopic(name, 2, 1)])
    return name


def node_id(broker) -> int:
    return broker.broker.node_id


def test_describe_log_dirs_lists_the_log_dir_with_each_partitions_size(shared_broker, topic):
    bootstrap = shared_broker.bootstrap_servers
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    producer.send(topic, b"x" * 1000, partition=1)
    producer.flush(10)
    producer.close()
    with KafkaAdminClient(bootstrap_servers=bootstrap) as admin:
        (result,) = admin.describe_log_dirs()
        narrowed = admin.describe_log_dirs(topic_partitions={topic: [1]})
    assert result["broker"] == node_id(shared_broker)
    (log_dir,) = result["log_dirs"]
    assert log_dir["error_code"] == 0
    assert log_dir["log_dir"] == str(shared_broker.broker.logs.log_dirs[0].absolute())
    mine = {p["partition_index"]: p for t in log_dir["topics"] if t["name"] == topic for p in t["partitions"]}
    assert sorted(mine) == [0, 1]
    assert mine[0]["partition_size"] == 0 and mine[1]["partition_size"] > 1000
    assert all(p["offset_lag"] == 0 and not p["is_future_key"] for p in mine.values())
    (only,) = narrowed[0]["log_dirs"]
    assert [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in only["topics"]] == [(topic, [1])]


def test_alter_replica_log_dirs_to_the_current_dir_is_a_no_op(shared_broker, topic):
    bootstrap = shared_broker.bootstrap_servers
    with KafkaAdminClient(bootstrap_servers=bootstrap) as admin:
        log_dir = admin.describe_log_dirs()[0]["log_dirs"][0]["log_dir"]
        replica = TopicPartitionReplica(topic, 0, node_id(shared_broker))
        assert admin.alter_replica_log_dirs({replica: log_dir}) == {replica: NoError}
    request = alter_dirs_v2.AlterReplicaLogDirsRequest(dirs=(
        alter_dirs_v2.AlterReplicaLogDir(path="/no/such/dir", topics=(
            alter_dirs_v2.AlterReplicaLogDirTopic(name=topic, partitions=(0,)),)),
        alter_dirs_v2.AlterReplicaLogDir(path=log_dir, topics=(
            alter_dirs_v2.AlterReplicaLogDirTopic(name=unique("missing"), partitions=(0,)),)),
    ))
    with WireClient.connect(bootstrap) as client:
        results = client.request(request).results
    assert [(r.topic_name, [p.error_code for p in r.partitions]) for r in results] == [
        (topic, [ErrorCode.log_dir_not_found]),
        (request.dirs[1].topics[0].name, [ErrorCode.replica_not_available]),
    ]


def test_elect_leaders_is_never_needed_on_a_single_node(shared_broker, topic):
    bootstrap = shared_broker.bootstrap_servers
    with KafkaAdminClient(bootstrap_servers=bootstrap) as admin:
        response = admin.elect_leaders(PREFERRED, {topic: [0, 1]})
    (result,) = response.replica_election_results
    assert result[0] == topic
    assert sorted((p[0], p[1]) for p in result[1]) == [(0, ErrorCode.election_not_needed),
                                                      (1, ErrorCode.election_not_needed)]
    missing = unique("missing")
    request = elect_v2.ElectLeadersRequest(
        election_type=PREFERRED, timeout=datetime.timedelta(seconds=5),
        topic_partitions=(elect_v2.TopicPartitions(topic=topic, partitions=(5,)),
                          elect_v2.TopicPartitions(topic=missing, partitions=(0,))),
    )
    with WireClient.connect(bootstrap) as client:
        answer = client.request(request)
        everything = client.request(elect_v2.ElectLeadersRequest(
            election_type=PREFERRED, timeout=datetime.timedelta(seconds=5), topic_partitions=None))
    assert [(r.topic, [(p.partition_id, p.error_code) for p in r.partition_result])
            for r in answer.replica_election_results] == [
        (topic, [(5, ErrorCode.unknown_topic_or_partition)]),
        (missing, [(0, ErrorCode.unknown_topic_or_partition)]),
    ]
    # Every partition: those that already have their leader are left out, as Kafka does.
    listed = {r.topic: r.partition_result for r in everything.replica_election_results}
    assert listed[topic] == ()


def test_the_only_reassignment_is_to_this_broker_and_none_is_ever_in_progress(shared_broker, topic):
    bootstrap = shared_broker.bootstrap_servers
    node = node_id(shared_broker)
    p0 = TopicPartition(topic, 0)
    with KafkaAdminClient(bootstrap_servers=bootstrap) as admin:
        assert admin.alter_partition_reassignments({p0: [node]}) == {p0: None}
        assert admin.list_partition_reassignments() == {}
        assert admin.list_partition_reassignments([p0]) == {}
    partitions = (
        reassign_v1.ReassignablePartition(partition_index=0, replicas=(node + 1,)),
        reassign_v1.ReassignablePartition(partition_index=0, replicas=()),
        reassign_v1.ReassignablePartition(partition_index=1, replicas=(node, node)),
        reassign_v1.ReassignablePartition(partition_index=1, replicas=None),
        reassign_v1.ReassignablePartition(partition_index=9, replicas=(node,)),
    )
    request = reassign_v1.AlterPartitionReassignmentsRequest(
        timeout=datetime.timedelta(seconds=5), allow_replication_factor_change=False,
        topics=(reassign_v1.ReassignableTopic(name=topic, partitions=partitions),),
    )
    with WireClient.connect(bootstrap) as client:
        answer = client.request(request)
    assert answer.error_code == ErrorCode.none and answer.allow_replication_factor_change is False
    assert [p.error_code for p in answer.responses[0].partitions] == [
        ErrorCode.invalid_replica_assignment, ErrorCode.invalid_replica_assignment,
        ErrorCode.invalid_replica_assignment, ErrorCode.no_reassignment_in_progress,
        ErrorCode.unknown_topic_or_partition,
    ]

"""OffsetCommit on the wire, where the answer depends on the request version: a commit
with a generation for a group that does not exist (ILLEGAL_GENERATION below v9,
GROUP_ID_NOT_FOUND from v9, as Kafka 4's coordinator answers), and v2-v4's
retention_time, which decides when those offsets expire."""

from __future__ import annotations

import datetime
import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.offset_commit.v2 import request as commit_v2
from kio.schema.offset_commit.v8 import request as commit_v8
from kio.schema.offset_commit.v9 import request as commit_v9
from kio.schema.offset_fetch.v5 import request as fetch_v5
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32, i64, i64Timedelta

from oncelog import EmbeddedBroker
from oncelog.local.process import wait_until
from oncelog.protocol.client import WireClient

TOPIC = "commits"
RETENTION_CHECK_MS = 100


@pytest.fixture(scope="module")
def commit_broker(tmp_path_factory):
    config = {"offsets.retention.check.interval.ms": str(RETENTION_CHECK_MS)}
    with EmbeddedBroker(tmp_path_factory.mktemp("offset-commit"), config) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(10)
        yield broker


@pytest.fixture
def client(commit_broker):
    with WireClient.connect(commit_broker.bootstrap_servers) as connected:
        (found,) = connected.request(FindCoordinatorRequest(key_type=0, coordinator_keys=("any",))).coordinators
        assert found.error_code == ErrorCode.none
        yield connected


def commit_error(client, schema, group: str, generation: int, member_id: str = "", **fields) -> ErrorCode:
    response = client.request(schema.OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=generation, member_id=member_id, **fields,
        topics=(schema.OffsetCommitRequestTopic(name=TOPIC, partitions=(
            schema.OffsetCommitRequestPartition(partition_index=0, committed_offset=1, committed_metadata=""),
        )),),
    ))
    return response.topics[0].partitions[0].error_code


def committed(client, group: str) -> dict[int, int]:
    response = client.request(fetch_v5.OffsetFetchRequest(group_id=GroupId(group), topics=(
        fetch_v5.OffsetFetchRequestTopic(name=TopicName(TOPIC), partition_indexes=(i32(0), i32(1))),
    )))
    assert response.error_code == ErrorCode.none
    return {p.partition_index: p.committed_offset for p in response.topics[0].partitions}


def test_commit_with_a_generation_to_an_unknown_group_depends_on_the_version(client):
    assert commit_error(client, commit_v8, "gone-v8", 4, "m", group_instance_id=None) == ErrorCode.illegal_generation
    assert commit_error(client, commit_v9, "gone-v9", 4, "m", group_instance_id=None) == ErrorCode.group_id_not_found
    assert commit_error(client, commit_v2, "gone-v2", 4, "m",
                        retention_time=datetime.timedelta(milliseconds=-1)) == ErrorCode.illegal_generation
    # Generation -1: a simple consumer's commit creates the group, at every version.
    assert commit_error(client, commit_v9, "simple-v9", -1, group_instance_id=None) == ErrorCode.none
    assert committed(client, "simple-v9") == {0: 1, 1: -1}


def test_retention_time_of_offset_commit_v2_decides_when_offsets_expire(client):
    group = "short-lived"

    def commit_v2_partition(partition: int, offset: int, retention_ms: int) -> ErrorCode:
        response = client.request(commit_v2.OffsetCommitRequest(
            group_id=group, generation_id_or_member_epoch=i32(-1), member_id="",
            retention_time=i64Timedelta.parse(datetime.timedelta(milliseconds=retention_ms)),
            topics=(commit_v2.OffsetCommitRequestTopic(name=TopicName(TOPIC), partitions=(
                commit_v2.OffsetCommitRequestPartition(partition_index=i32(partition), committed_offset=i64(offset),
                                                       committed_metadata=""),
            )),),
        ))
        return response.topics[0].partitions[0].error_code

    assert commit_v2_partition(1, 11, -1) == ErrorCode.none  # -1: offsets.retention.minutes (7 days)
    committed_at = time.monotonic()
    assert commit_v2_partition(0, 10, 500) == ErrorCode.none
    assert committed(client, group) == {0: 10, 1: 11}
    wait_until(lambda: committed(client, group)[0] == -1, timeout=10, interval=0.05,
               message="the offset committed with a 500 ms retention expired")
    assert time.monotonic() - committed_at >= 0.45
    assert committed(client, group) == {0: -1, 1: 11}

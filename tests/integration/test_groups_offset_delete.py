"""OffsetDelete through a real admin client (kafka-python's KafkaAdminClient.delete_group_offsets;
confluent-kafka's Python AdminClient has no call for it) and on the wire: a consumer group
with members keeps the offsets of topics it subscribes to (GROUP_SUBSCRIBED_TO_TOPIC) and
loses the others; an empty group loses any; an unknown group is GROUP_ID_NOT_FOUND and a
non-consumer group with members NON_EMPTY_GROUP."""

from __future__ import annotations

import datetime

import kafka.errors
import pytest
from confluent_kafka import Consumer, ConsumerGroupState, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient
from kafka import TopicPartition as KafkaTopicPartition
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.join_group.v5 import request as join_v5
from kio.schema.offset_commit.v8 import request as commit_v8
from kio.schema.offset_delete.v0 import request as delete_v0
from kio.schema.sync_group.v3 import request as sync_v3

from oncelog import EmbeddedBroker
from oncelog.local.process import wait_until
from oncelog.protocol.client import WireClient

SUBSCRIBED, OTHER = "od-subscribed", "od-other"
UNSET = -1001  # librdkafka's OFFSET_INVALID: no committed offset


@pytest.fixture(scope="module")
def offsets_broker(tmp_path_factory):
    with EmbeddedBroker(tmp_path_factory.mktemp("offset-delete"), {"group.initial.rebalance.delay.ms": "0"}) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        for future in admin.create_topics([NewTopic(SUBSCRIBED, 2, 1), NewTopic(OTHER, 1, 1)]).values():
            future.result(10)
        yield broker


def test_admin_client_deletes_offsets_of_topics_the_group_does_not_subscribe_to(offsets_broker):
    bootstrap, group = offsets_broker.bootstrap_servers, "od-consumers"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "session.timeout.ms": 6000, "heartbeat.interval.ms": 300})
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    watcher = AdminClient({"bootstrap.servers": bootstrap})
    try:
        consumer.subscribe([SUBSCRIBED])
        wait_until(lambda: consumer.poll(0.1) is None and consumer.assignment(), timeout=15, message="assignment")
        consumer.commit(offsets=[TopicPartition(SUBSCRIBED, 0, 5), TopicPartition(OTHER, 0, 8)], asynchronous=False)

        results = admin.delete_group_offsets(group, [
            KafkaTopicPartition(SUBSCRIBED, 0), KafkaTopicPartition(OTHER, 0), KafkaTopicPartition(OTHER, 5),
        ])
        assert results == {
            KafkaTopicPartition(SUBSCRIBED, 0): kafka.errors.GroupSubscribedToTopicError,
            KafkaTopicPartition(OTHER, 0): kafka.errors.NoError,
            KafkaTopicPartition(OTHER, 5): kafka.errors.UnknownTopicOrPartitionError,
        }
        committed = consumer.committed([TopicPartition(SUBSCRIBED, 0), TopicPartition(OTHER, 0)], timeout=10)
        assert [tp.offset for tp in committed] == [5, UNSET]

        consumer.close()  # LeaveGroup: the group is Empty, every offset may go
        wait_until(lambda: watcher.describe_consumer_groups([group])[group].result(10).state
                   == ConsumerGroupState.EMPTY, timeout=10, message="group empty")
        assert admin.delete_group_offsets(group, [KafkaTopicPartition(SUBSCRIBED, 0)]) == {
            KafkaTopicPartition(SUBSCRIBED, 0): kafka.errors.NoError,
        }
        checker = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
        assert checker.committed([TopicPartition(SUBSCRIBED, 0)], timeout=10)[0].offset == UNSET
        checker.close()

        with pytest.raises(kafka.errors.GroupIdNotFoundError):
            admin.delete_group_offsets("od-nobody", [KafkaTopicPartition(OTHER, 0)])
    finally:
        admin.close()


def test_non_consumer_group_with_members_refuses_offset_delete_on_the_wire(offsets_broker):
    group = "od-connect"
    with WireClient.connect(offsets_broker.bootstrap_servers) as client:
        (found,) = client.request(FindCoordinatorRequest(key_type=0, coordinator_keys=(group,))).coordinators
        assert found.error_code == ErrorCode.none

        def join(member_id):
            return client.request(join_v5.JoinGroupRequest(
                group_id=group, session_timeout=datetime.timedelta(seconds=30),
                rebalance_timeout=datetime.timedelta(seconds=30), member_id=member_id, group_instance_id=None,
                protocol_type="connect", protocols=(join_v5.JoinGroupRequestProtocol(name="sessioned", metadata=b""),),
            ))

        joined = join(join("").member_id)
        assert joined.error_code == ErrorCode.none
        assert client.request(sync_v3.SyncGroupRequest(
            group_id=group, generation_id=joined.generation_id, member_id=joined.member_id, group_instance_id=None,
            assignments=(sync_v3.SyncGroupRequestAssignment(member_id=joined.member_id, assignment=b""),),
        )).error_code == ErrorCode.none
        committed = client.request(commit_v8.OffsetCommitRequest(
            group_id=group, generation_id_or_member_epoch=joined.generation_id, member_id=joined.member_id,
            group_instance_id=None, topics=(commit_v8.OffsetCommitRequestTopic(name=OTHER, partitions=(
                commit_v8.OffsetCommitRequestPartition(partition_index=0, committed_offset=4, committed_metadata=""),
            )),),
        ))
        assert committed.topics[0].partitions[0].error_code == ErrorCode.none

        response = client.request(delete_v0.OffsetDeleteRequest(group_id=group, topics=(
            delete_v0.OffsetDeleteRequestTopic(name=OTHER, partitions=(
                delete_v0.OffsetDeleteRequestPartition(partition_index=0),
            )),
        )))
        assert (response.error_code, response.topics) == (ErrorCode.non_empty_group, ())

"""Share groups (KIP-932) on the wire, request by request, where the Java client's tests
(test_share_groups_java.py) cannot steer: share session epochs and their errors,
acknowledgements of records a member does not hold, group ids shared with classic and
consumer groups, the share group offset APIs and DeleteGroups, ListGroups' share type,
the share.version feature, and the ACLs Kafka checks."""

from __future__ import annotations

import datetime
import time
import uuid

import pytest
from confluent_kafka import Producer, TopicCollection
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.alter_share_group_offsets.v0 import request as alter_offsets
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.consumer_group_heartbeat.v1.request import ConsumerGroupHeartbeatRequest
from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
from kio.schema.delete_share_group_offsets.v0 import request as delete_offsets
from kio.schema.describe_share_group_offsets.v1 import request as describe_offsets
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
from kio.schema.join_group.v9.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.list_groups.v5.request import ListGroupsRequest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from kio.schema.share_acknowledge.v2 import request as share_ack
from kio.schema.share_fetch.v2 import request as share_fetch
from kio.schema.share_group_describe.v1.request import ShareGroupDescribeRequest
from kio.schema.share_group_heartbeat.v1.request import ShareGroupHeartbeatRequest
from kio.schema.types import GroupId, TopicName
from kio.schema.write_share_group_state.v0 import request as write_state
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from oncelog import EmbeddedBroker
from oncelog.protocol.client import WireClient
from oncelog.security.acl import AclOperation, ResourceType
from tests.support.secured import password, secured_broker

ACCEPT, RELEASE, REJECT = 1, 2, 3
SHARE_APIS = {76, 77, 78, 79, 90, 91, 92}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    config = {"share.coordinator.state.topic.num.partitions": "3", "offsets.topic.num.partitions": "3",
              "group.share.min.record.lock.duration.ms": "500"}
    with EmbeddedBroker(tmp_path_factory.mktemp("share-wire"), config) as running:
        yield running


def topic_with(bootstrap: str, name: str, count: int) -> uuid.UUID:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(count):
        producer.produce(name, f"{name}-{i}".encode())
    assert producer.flush(30) == 0
    return topic_id_of(admin, name)


def topic_id_of(admin: AdminClient, name: str) -> uuid.UUID:
    found = admin.describe_topics(TopicCollection([name]))[name].result(30).topic_id
    mask = (1 << 64) - 1
    return uuid.UUID(int=((found.get_most_significant_bits() & mask) << 64)
                     | (found.get_least_significant_bits() & mask))


def find_coordinator(client: WireClient, group: str) -> None:
    """As a client does first: it makes `__consumer_offsets` exist on a new broker."""
    assert client.request(FindCoordinatorRequest(key=group, key_type=i8(0))).error_code == ErrorCode.none


def heartbeat(client: WireClient, group: str, member: str, epoch: int, topics=("t",)):
    return client.request(ShareGroupHeartbeatRequest(group_id=GroupId(group), member_id=member,
                                                     member_epoch=i32(epoch), subscribed_topic_names=topics))


def fetch(client: WireClient, group: str, member: str, epoch: int, topic_id: uuid.UUID, *, acks=(),
          max_records: int = 100, partitions=(0,)):
    return client.request(share_fetch.ShareFetchRequest(
        group_id=GroupId(group), member_id=member, share_session_epoch=i32(epoch),
        max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=200)), min_bytes=i32(1),
        max_records=i32(max_records), batch_size=i32(max_records),
        topics=(share_fetch.FetchTopic(topic_id=topic_id, partitions=tuple(
            share_fetch.FetchPartition(partition_index=i32(p), acknowledgement_batches=tuple(
                share_fetch.AcknowledgementBatch(first_offset=i64(first), last_offset=i64(last),
                                                 acknowledge_types=(i8(kind),)) for first, last, kind in acks))
            for p in partitions)),),
        forgotten_topics_data=()))


def acknowledge(client: WireClient, group: str, member: str, epoch: int, topic_id: uuid.UUID, acks):
    return client.request(share_ack.ShareAcknowledgeRequest(
        group_id=GroupId(group), member_id=member, share_session_epoch=i32(epoch), topics=(
            share_ack.AcknowledgeTopic(topic_id=topic_id, partitions=(share_ack.AcknowledgePartition(
                partition_index=i32(0), acknowledgement_batches=tuple(
                    share_ack.AcknowledgementBatch(first_offset=i64(first), last_offset=i64(last),
                                                   acknowledge_types=(i8(kind),)) for first, last, kind in acks)),)),)))


def acquired(response) -> list[tuple[int, int, int]]:
    return [(r.first_offset, r.last_offset, r.delivery_count)
            for topic in response.responses for partition in topic.partitions for r in partition.acquired_records]


def partition_of(response):
    [topic] = response.responses
    [partition] = topic.partitions
    return partition


def set_earliest(bootstrap: str, group: str, **configs: str) -> None:
    """The group starts at the log start (share.auto.offset.reset), with `configs` besides."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource("group", group, incremental_configs=[
        ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
        for key, value in {"share.auto.offset.reset": "earliest", **configs}.items()])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def test_share_sessions_follow_kafkas_epochs_and_acknowledgements_need_the_records(broker):
    topic_id = topic_with(broker.bootstrap_servers, "wire-sessions", 10)
    set_earliest(broker.bootstrap_servers, "wire-sessions")
    with WireClient.connect(broker.bootstrap_servers) as client:
        find_coordinator(client, "wire-sessions")
        joined = heartbeat(client, "wire-sessions", "m1", 0, ("wire-sessions",))
        assert joined.error_code == ErrorCode.none and joined.member_epoch == 1
        assert [tp.topic_id for tp in joined.assignment.topic_partitions] == [topic_id]
        assert fetch(client, "wire-sessions", "m1", 0, topic_id, acks=[(0, 0, ACCEPT)]).error_code == \
            ErrorCode.invalid_request
        assert fetch(client, "wire-sessions", "m1", 3, topic_id).error_code == ErrorCode.share_session_not_found
        first = fetch(client, "wire-sessions", "m1", 0, topic_id, max_records=4)
        assert first.error_code == ErrorCode.none and acquired(first) == [(0, 3, 1)]
        assert first.acquisition_lock_timeout == datetime.timedelta(milliseconds=30_000)
        assert fetch(client, "wire-sessions", "m1", 5, topic_id).error_code == ErrorCode.invalid_share_session_epoch
        # Accept 0-1, release 2-3, and acknowledge 7, which nobody holds: that partition's
        # acknowledgements fail as a whole, and the fetch still acquires.
        second = fetch(client, "wire-sessions", "m1", 1, topic_id, acks=[(0, 1, ACCEPT), (7, 7, ACCEPT)],
                       max_records=2)
        assert partition_of(second).acknowledge_error_code == ErrorCode.invalid_record_state
        assert acquired(second) == [(4, 5, 1)]
        third = fetch(client, "wire-sessions", "m1", 2, topic_id, acks=[(0, 1, ACCEPT), (2, 3, RELEASE)],
                      max_records=2)
        assert partition_of(third).acknowledge_error_code == ErrorCode.none
        assert acquired(third) == [(2, 3, 2)]
        assert acknowledge(client, "wire-sessions", "m1", 0, topic_id, []).error_code == \
            ErrorCode.invalid_share_session_epoch
        acked = acknowledge(client, "wire-sessions", "m1", 3, topic_id, [(2, 5, REJECT)])
        assert acked.error_code == ErrorCode.none and partition_of(acked).error_code == ErrorCode.none
        # Closing the session hands out again what the member still held (nothing now).
        assert acknowledge(client, "wire-sessions", "m1", -1, topic_id, []).error_code == ErrorCode.none
        assert fetch(client, "wire-sessions", "m1", 4, topic_id).error_code == ErrorCode.share_session_not_found
        again = fetch(client, "wire-sessions", "m1", 0, topic_id)
        assert acquired(again) == [(6, 9, 1)]  # 0-1 accepted, 2-5 rejected
        unknown = fetch(client, "wire-sessions", "m1", 1, uuid.uuid4())
        assert partition_of(unknown).error_code == ErrorCode.unknown_topic_id


def test_a_closed_share_session_releases_the_records_it_held(broker):
    topic_id = topic_with(broker.bootstrap_servers, "wire-close", 3)
    set_earliest(broker.bootstrap_servers, "wire-close")
    with WireClient.connect(broker.bootstrap_servers) as client:
        assert acquired(fetch(client, "wire-close", "a", 0, topic_id)) == [(0, 2, 1)]
        assert acquired(fetch(client, "wire-close", "b", 0, topic_id)) == []
        assert acknowledge(client, "wire-close", "a", -1, topic_id, [(0, 0, ACCEPT)]).error_code == ErrorCode.none
        assert acquired(fetch(client, "wire-close", "b", 1, topic_id)) == [(1, 2, 2)]


def test_records_whose_lock_ran_out_go_to_another_member_and_a_closed_connection_releases_at_once(broker):
    topic_id = topic_with(broker.bootstrap_servers, "wire-locks", 4)
    set_earliest(broker.bootstrap_servers, "wire-locks", **{"share.record.lock.duration.ms": "800"})
    with WireClient.connect(broker.bootstrap_servers) as idle, WireClient.connect(broker.bootstrap_servers) as other:
        held = fetch(idle, "wire-locks", "idle", 0, topic_id, max_records=2)
        assert acquired(held) == [(0, 1, 1)] and held.acquisition_lock_timeout == datetime.timedelta(milliseconds=800)
        assert acquired(fetch(other, "wire-locks", "other", 0, topic_id, max_records=2)) == [(2, 3, 1)]
        assert acknowledge(other, "wire-locks", "other", 1, topic_id, [(2, 3, ACCEPT)]).error_code == ErrorCode.none
        # The idle member's connection stays open: its records come back once the lock runs out.
        time.sleep(1.0)
        assert acquired(fetch(other, "wire-locks", "other", 2, topic_id)) == [(0, 1, 2)]
        late = acknowledge(idle, "wire-locks", "idle", 1, topic_id, [(0, 1, ACCEPT)])
        assert partition_of(late).error_code == ErrorCode.invalid_record_state  # no longer its records
    topic_id = topic_with(broker.bootstrap_servers, "wire-locks-2", 2)
    set_earliest(broker.bootstrap_servers, "wire-locks-2")
    with WireClient.connect(broker.bootstrap_servers) as other:
        with WireClient.connect(broker.bootstrap_servers) as dying:
            assert acquired(fetch(dying, "wire-locks-2", "dying", 0, topic_id)) == [(0, 1, 1)]
        # Its connection closed, its lock (30 s) far from over: the records are another's at once.
        found, epoch, deadline = [], 0, time.monotonic() + 5
        while not found and time.monotonic() < deadline:
            found = acquired(fetch(other, "wire-locks-2", "other", epoch, topic_id))
            epoch += 1
        assert found == [(0, 1, 2)]


def test_a_busy_partition_does_not_starve_the_others_of_a_share_session(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic("wire-turns", 2, 1)])["wire-turns"].result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    for _ in range(50):
        producer.produce("wire-turns", b"busy", partition=0)
    producer.produce("wire-turns", b"quiet", partition=1)
    assert producer.flush(30) == 0
    topic_id = topic_id_of(admin, "wire-turns")
    set_earliest(broker.bootstrap_servers, "wire-turns")
    with WireClient.connect(broker.bootstrap_servers) as client:
        partitions_served = set()
        for epoch in range(3):
            response = fetch(client, "wire-turns", "m1", epoch, topic_id, max_records=5, partitions=(0, 1))
            partitions_served.update(p.partition_index for t in response.responses for p in t.partitions
                                     if p.acquired_records)
        assert partitions_served == {0, 1}


def test_a_revoked_read_acl_stops_an_open_share_session(tmp_path):
    with secured_broker(tmp_path) as secured:
        secured.create_topic("acl-revoked", 1)
        secured.allow("alice", ResourceType.GROUP, "acl-revoked", AclOperation.READ)
        secured.allow("alice", ResourceType.TOPIC, "acl-revoked", AclOperation.READ)
        producer = Producer(secured.client("admin"))
        for _ in range(4):
            producer.produce("acl-revoked", b"x")
        assert producer.flush(30) == 0
        admin = secured.admin()
        topic_id = topic_id_of(admin, "acl-revoked")
        from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

        resource = ConfigResource("group", "acl-revoked", incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
        for future in admin.incremental_alter_configs([resource]).values():
            future.result(30)
        with WireClient.connect(secured.bootstrap_servers) as client:
            assert client.request(SaslHandshakeRequest(mechanism="PLAIN")).error_code == ErrorCode.none
            assert client.request(SaslAuthenticateRequest(
                auth_bytes=f"\0alice\0{password('alice')}".encode())).error_code == ErrorCode.none
            assert acquired(fetch(client, "acl-revoked", "m1", 0, topic_id, max_records=1)) == [(0, 0, 1)]
            secured.allow("alice", ResourceType.TOPIC, "acl-revoked", AclOperation.READ, deny=True)
            # An incremental fetch names no partition: the session's are checked again.
            response = client.request(share_fetch.ShareFetchRequest(
                group_id=GroupId("acl-revoked"), member_id="m1", share_session_epoch=i32(1),
                max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=100)), min_bytes=i32(1),
                max_records=i32(10), batch_size=i32(10), topics=(), forgotten_topics_data=()))
            assert partition_of(response).error_code == ErrorCode.topic_authorization_failed
            assert acquired(response) == []


def test_a_share_state_no_leader_could_write_is_refused(broker):
    topic_id = topic_with(broker.bootstrap_servers, "wire-state", 1)
    with WireClient.connect(broker.bootstrap_servers) as client:
        find_coordinator(client, "wire-state")
        fetch(client, "wire-state", "m1", 0, topic_id)  # the share coordinator's topic exists now

        def write(start: int, *state_batches: tuple[int, int]):
            response = client.request(write_state.WriteShareGroupStateRequest(group_id="wire-state", topics=(
                write_state.WriteStateData(topic_id=topic_id, partitions=(write_state.PartitionData(
                    partition=i32(0), state_epoch=i32(0), leader_epoch=i32(0), start_offset=i64(start),
                    state_batches=tuple(write_state.StateBatch(
                        first_offset=i64(first), last_offset=i64(last), delivery_state=i8(0), delivery_count=i16(1))
                        for first, last in state_batches)),)),)))
            return response.results[0].partitions[0].error_code

        assert write(0, (0, 2**62)) == ErrorCode.invalid_request  # would cost its next leader 2**62 steps
        assert write(5, (0, 1)) == ErrorCode.invalid_request  # before the start
        assert write(0, (0, 3), (2, 4)) == ErrorCode.invalid_request  # overlapping
        assert write(0, (0, 3), (4, 4)) == ErrorCode.none


def test_a_share_group_id_is_not_a_classic_or_consumer_groups(broker):
    topic_with(broker.bootstrap_servers, "wire-ids", 1)
    with WireClient.connect(broker.bootstrap_servers) as client:
        assert heartbeat(client, "wire-ids-share", "m1", 0, ("wire-ids",)).error_code == ErrorCode.none
        joined = client.request(JoinGroupRequest(
            group_id=GroupId("wire-ids-share"), session_timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
            rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)), member_id="",
            group_instance_id=None, protocol_type="consumer",
            protocols=(JoinGroupRequestProtocol(name="range", metadata=b""),), reason=None))
        assert joined.error_code == ErrorCode.inconsistent_group_protocol
        consumer = client.request(ConsumerGroupHeartbeatRequest(
            group_id=GroupId("wire-ids-share"), member_id="c1", member_epoch=i32(0),
            rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)), subscribed_topic_names=("wire-ids",),
            topic_partitions=()))
        assert consumer.error_code == ErrorCode.group_id_not_found
        assert client.request(ConsumerGroupHeartbeatRequest(
            group_id=GroupId("wire-ids-consumer"), member_id="c1", member_epoch=i32(0),
            rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)), subscribed_topic_names=("wire-ids",),
            topic_partitions=())).error_code == ErrorCode.none
        refused = heartbeat(client, "wire-ids-consumer", "m1", 0, ("wire-ids",))
        assert (refused.error_code, refused.error_message) == (
            ErrorCode.group_id_not_found, "Group wire-ids-consumer is not a share group.")


def test_share_group_offsets_are_described_altered_and_deleted_and_the_group_listed(broker):
    topic_id = topic_with(broker.bootstrap_servers, "wire-offsets", 6)
    set_earliest(broker.bootstrap_servers, "wire-offsets")
    with WireClient.connect(broker.bootstrap_servers) as client:
        assert heartbeat(client, "wire-offsets", "m1", 0, ("wire-offsets",)).error_code == ErrorCode.none
        assert acquired(fetch(client, "wire-offsets", "m1", 0, topic_id, max_records=4)) == [(0, 3, 1)]
        assert acknowledge(client, "wire-offsets", "m1", 1, topic_id, [(0, 1, ACCEPT)]).error_code == ErrorCode.none

        def described():
            wanted = describe_offsets.DescribeShareGroupOffsetsRequestGroup(group_id=GroupId("wire-offsets"),
                                                                            topics=None)
            response = client.request(describe_offsets.DescribeShareGroupOffsetsRequest(groups=(wanted,)))
            [group] = response.groups
            return group.error_code, [(t.topic_name, p.partition_index, p.start_offset, p.lag)
                                      for t in group.topics for p in t.partitions]

        assert described() == (ErrorCode.none, [("wire-offsets", 0, 2, 4)])
        listed = client.request(ListGroupsRequest(states_filter=(), types_filter=("share",)))
        assert ("wire-offsets", "share", "Stable", "share") in [
            (g.group_id, g.protocol_type, g.group_state, g.group_type) for g in listed.groups]
        [group] = client.request(ShareGroupDescribeRequest(group_ids=(GroupId("wire-offsets"),),
                                                           include_authorized_operations=True)).groups
        assert (group.group_state, [m.member_id for m in group.members]) == ("Stable", ["m1"])

        def alter(offset: int):
            return client.request(alter_offsets.AlterShareGroupOffsetsRequest(
                group_id=GroupId("wire-offsets"), topics=(alter_offsets.AlterShareGroupOffsetsRequestTopic(
                    topic_name=TopicName("wire-offsets"), partitions=(
                        alter_offsets.AlterShareGroupOffsetsRequestPartition(partition_index=i32(0),
                                                                             start_offset=i64(offset)),)),)))

        assert alter(0).error_code == ErrorCode.non_empty_group
        assert delete_offsets_of(client, "wire-offsets").error_code == ErrorCode.non_empty_group
        assert client.request(DeleteGroupsRequest(groups_names=(GroupId("wire-offsets"),))).results[0].error_code \
            == ErrorCode.non_empty_group
        assert heartbeat(client, "wire-offsets", "m1", -1, None).error_code == ErrorCode.none
        assert acknowledge(client, "wire-offsets", "m1", -1, topic_id, []).error_code == ErrorCode.none
        altered = alter(1)
        assert altered.error_code == ErrorCode.none and altered.responses[0].partitions[0].error_code == ErrorCode.none
        assert described() == (ErrorCode.none, [("wire-offsets", 0, 1, 5)])
        assert acquired(fetch(client, "wire-offsets", "m2", 0, topic_id, max_records=1)) == [(1, 1, 1)]
        assert acknowledge(client, "wire-offsets", "m2", -1, topic_id, []).error_code == ErrorCode.none
        deleted = delete_offsets_of(client, "wire-offsets")
        assert deleted.error_code == ErrorCode.none and deleted.responses[0].error_code == ErrorCode.none
        assert described() == (ErrorCode.none, [])
        assert acquired(fetch(client, "wire-offsets", "m3", 0, topic_id, max_records=1)) == [(0, 0, 1)]
        assert acknowledge(client, "wire-offsets", "m3", -1, topic_id, []).error_code == ErrorCode.none
        assert client.request(DeleteGroupsRequest(groups_names=(GroupId("wire-offsets"),))).results[0].error_code \
            == ErrorCode.none
        listed = client.request(ListGroupsRequest(states_filter=(), types_filter=("share",)))
        assert "wire-offsets" not in [g.group_id for g in listed.groups]


def delete_offsets_of(client: WireClient, group: str):
    return client.request(delete_offsets.DeleteShareGroupOffsetsRequest(
        group_id=GroupId(group), topics=(delete_offsets.DeleteShareGroupOffsetsRequestTopic(
            topic_name=TopicName(group)),)))


def test_share_version_is_finalized_and_gates_the_share_apis(broker, tmp_path):
    with WireClient.connect(broker.bootstrap_servers) as client:
        versions = client.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    assert {api.api_key for api in versions.api_keys} >= SHARE_APIS
    assert ("share.version", 1, 1) in [(f.name, f.min_version_level, f.max_version_level)
                                       for f in versions.finalized_features]
    with EmbeddedBroker(tmp_path / "off", {"share.version": "0"}) as off, WireClient.connect(off.bootstrap_servers) \
            as client:
        versions = client.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    assert not SHARE_APIS & {api.api_key for api in versions.api_keys}
    assert "share.version" not in [f.name for f in versions.finalized_features]


def test_share_groups_are_authorized_as_kafka_authorizes_them(tmp_path):
    with secured_broker(tmp_path) as secured:
        secured.create_topic("acl-share", 1)
        secured.create_topic("acl-hidden", 1)
        secured.allow("alice", ResourceType.GROUP, "acl-share", AclOperation.READ)
        secured.allow("alice", ResourceType.TOPIC, "acl-share", AclOperation.READ, AclOperation.DESCRIBE)
        hidden_id = topic_id_of(secured.admin(), "acl-hidden")
        with WireClient.connect(secured.bootstrap_servers) as client:
            assert client.request(SaslHandshakeRequest(mechanism="PLAIN")).error_code == ErrorCode.none
            assert client.request(SaslAuthenticateRequest(
                auth_bytes=f"\0alice\0{password('alice')}".encode())).error_code == ErrorCode.none
            find_coordinator(client, "acl-share")
            assert heartbeat(client, "other", "m1", 0, ("acl-share",)).error_code == \
                ErrorCode.group_authorization_failed
            refused = heartbeat(client, "acl-share", "m1", 0, ("acl-hidden",))
            assert refused.error_code == ErrorCode.topic_authorization_failed
            assert heartbeat(client, "acl-share", "m1", 0, ("acl-share",)).error_code == ErrorCode.none
            assert fetch(client, "other", "m1", 0, hidden_id).error_code == ErrorCode.group_authorization_failed
            response = fetch(client, "acl-share", "m1", 0, hidden_id)
            assert partition_of(response).error_code == ErrorCode.topic_authorization_failed
            [group] = client.request(ShareGroupDescribeRequest(group_ids=(GroupId("acl-share"),),
                                                               include_authorized_operations=False)).groups
            assert group.error_code == ErrorCode.none  # READ implies DESCRIBE, as in Kafka
            [group] = client.request(ShareGroupDescribeRequest(group_ids=(GroupId("other"),),
                                                               include_authorized_operations=False)).groups
            assert group.error_code == ErrorCode.group_authorization_failed

"""TxnOffsetCommit on the wire: pending transactional offsets are invisible to OffsetFetch
(UNSTABLE_OFFSET_COMMIT with require_stable) until the COMMIT marker, dropped by ABORT,
checked against the group generation (KIP-447), and reloaded after a restart."""

from __future__ import annotations

import datetime

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.join_group.v5 import request as join_v5
from kio.schema.offset_commit.v8 import request as commit_v8
from kio.schema.offset_fetch.v8 import request as fetch_v8
from kio.schema.sync_group.v3 import request as sync_v3
from kio.schema.txn_offset_commit.v3 import request as txn_v3

from oncelog import EmbeddedBroker
from oncelog.broker.partitions import append_marker
from oncelog.coordinator.internal_topics import CONSUMER_OFFSETS
from oncelog.protocol.client import WireClient

GROUP, TOPIC = "txn-group", "in"


@pytest.fixture
def data_dir(tmp_path):
    return tmp_path / "broker"


def start(data_dir) -> EmbeddedBroker:
    """A broker on `data_dir`, started by `with`."""
    return EmbeddedBroker(data_dir, {"group.initial.rebalance.delay.ms": "0"})


def txn_commit(client, offsets, *, producer_id, epoch=0, member_id="", generation=-1):
    response = client.request(txn_v3.TxnOffsetCommitRequest(
        transactional_id=f"tx-{producer_id}", group_id=GROUP, producer_id=producer_id, producer_epoch=epoch,
        generation_id=generation, member_id=member_id, group_instance_id=None,
        topics=(txn_v3.TxnOffsetCommitRequestTopic(name=TOPIC, partitions=tuple(
            txn_v3.TxnOffsetCommitRequestPartition(partition_index=p, committed_offset=o, committed_metadata="")
            for p, o in offsets.items()
        )),),
    ))
    return {p.partition_index: p.error_code for p in response.topics[0].partitions}


def fetch(client, *, require_stable=False):
    response = client.request(fetch_v8.OffsetFetchRequest(
        groups=(fetch_v8.OffsetFetchRequestGroup(group_id=GROUP, topics=(
            fetch_v8.OffsetFetchRequestTopics(name=TOPIC, partition_indexes=(0, 1)),
        )),),
        require_stable=require_stable,
    ))
    (group,) = response.groups
    assert group.error_code == ErrorCode.none
    return {p.partition_index: (p.committed_offset, p.error_code) for p in group.topics[0].partitions}


def end_transaction(broker: EmbeddedBroker, producer_id: int, *, commit: bool) -> None:
    """The transaction coordinator's last step for the group's partition: write the
    marker, then tell the group coordinator (on the broker's loop)."""

    def write_marker_and_complete():
        groups = broker.broker.coordinators[0]
        partition = groups.partition_for_group(GROUP)
        append_marker(broker.broker, CONSUMER_OFFSETS, partition, producer_id, 0, 0, commit=commit)
        groups.complete_transaction(partition, producer_id, commit)

    broker.call(write_marker_and_complete)


def setup_topic(broker: EmbeddedBroker) -> WireClient:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(10)
    client = WireClient.connect(broker.bootstrap_servers)
    (coordinator,) = client.request(FindCoordinatorRequest(key_type=0, coordinator_keys=(GROUP,))).coordinators
    assert coordinator.error_code == ErrorCode.none
    return client


def test_pending_offsets_become_visible_only_with_the_commit_marker(data_dir):
    with start(data_dir) as broker, setup_topic(broker) as client:
        assert txn_commit(client, {0: 10, 1: 20}, producer_id=100) == {0: ErrorCode.none, 1: ErrorCode.none}
        assert fetch(client) == {0: (-1, ErrorCode.none), 1: (-1, ErrorCode.none)}
        assert fetch(client, require_stable=True) == {
            0: (-1, ErrorCode.unstable_offset_commit), 1: (-1, ErrorCode.unstable_offset_commit),
        }
        end_transaction(broker, 100, commit=True)
        assert fetch(client, require_stable=True) == {0: (10, ErrorCode.none), 1: (20, ErrorCode.none)}


def test_aborted_offsets_are_dropped(data_dir):
    with start(data_dir) as broker, setup_topic(broker) as client:
        txn_commit(client, {0: 10}, producer_id=100)
        end_transaction(broker, 100, commit=True)
        txn_commit(client, {0: 99}, producer_id=101)
        end_transaction(broker, 101, commit=False)
        assert fetch(client, require_stable=True) == {0: (10, ErrorCode.none), 1: (-1, ErrorCode.none)}


def test_zombie_of_an_older_generation_gets_illegal_generation(data_dir):
    with start(data_dir) as broker, setup_topic(broker) as client:
        first = client.request(join_v5.JoinGroupRequest(
            group_id=GROUP, session_timeout=datetime.timedelta(seconds=30),
            rebalance_timeout=datetime.timedelta(seconds=30), member_id="", group_instance_id=None,
            protocol_type="consumer", protocols=(join_v5.JoinGroupRequestProtocol(name="range", metadata=b""),),
        ))
        assert first.error_code == ErrorCode.member_id_required
        joined = client.request(join_v5.JoinGroupRequest(
            group_id=GROUP, session_timeout=datetime.timedelta(seconds=30),
            rebalance_timeout=datetime.timedelta(seconds=30), member_id=first.member_id, group_instance_id=None,
            protocol_type="consumer", protocols=(join_v5.JoinGroupRequestProtocol(name="range", metadata=b""),),
        ))
        assert (joined.error_code, joined.generation_id) == (ErrorCode.none, 1)
        synced = client.request(sync_v3.SyncGroupRequest(
            group_id=GROUP, generation_id=1, member_id=joined.member_id, group_instance_id=None,
            assignments=(sync_v3.SyncGroupRequestAssignment(member_id=joined.member_id, assignment=b""),),
        ))
        assert synced.error_code == ErrorCode.none
        member = joined.member_id
        assert txn_commit(client, {0: 5}, producer_id=200, member_id=member, generation=0) == {
            0: ErrorCode.illegal_generation,
        }
        assert txn_commit(client, {0: 5}, producer_id=200, member_id="zombie", generation=1) == {
            0: ErrorCode.unknown_member_id,
        }
        assert txn_commit(client, {0: 5}, producer_id=200, member_id=member, generation=1) == {0: ErrorCode.none}
        # A plain commit without generation is refused while the group has members.
        response = client.request(commit_v8.OffsetCommitRequest(
            group_id=GROUP, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
            topics=(commit_v8.OffsetCommitRequestTopic(name=TOPIC, partitions=(
                commit_v8.OffsetCommitRequestPartition(partition_index=0, committed_offset=1, committed_metadata=""),
            )),),
        ))
        assert response.topics[0].partitions[0].error_code == ErrorCode.unknown_member_id


def test_unknown_partition_is_refused_per_partition(data_dir):
    with start(data_dir) as broker, setup_topic(broker) as client:
        assert txn_commit(client, {0: 1, 7: 1}, producer_id=300) == {
            0: ErrorCode.none, 7: ErrorCode.unknown_topic_or_partition,
        }


def test_pending_and_committed_offsets_are_reloaded_after_a_restart(data_dir):
    with start(data_dir) as broker, setup_topic(broker) as client:
        txn_commit(client, {0: 10}, producer_id=100)
        end_transaction(broker, 100, commit=True)
        txn_commit(client, {1: 20}, producer_id=101)  # still open when the broker stops
    with start(data_dir) as broker, WireClient.connect(broker.bootstrap_servers) as client:
        assert fetch(client) == {0: (10, ErrorCode.none), 1: (-1, ErrorCode.none)}
        assert fetch(client, require_stable=True)[1] == (-1, ErrorCode.unstable_offset_commit)
        end_transaction(broker, 101, commit=True)
        assert fetch(client, require_stable=True) == {0: (10, ErrorCode.none), 1: (20, ErrorCode.none)}

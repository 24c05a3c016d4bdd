"""TxnOffsetCommit on the wire, inside real transactions (InitProducerId, AddOffsetsToTxn,
EndTxn): pending transactional offsets are invisible to OffsetFetch (UNSTABLE_OFFSET_COMMIT
with require_stable) until the COMMIT marker, dropped by ABORT, refused outside the
producer's open transaction (KIP-890 part 1), checked against the group generation and
static membership (KIP-447), and reloaded after a restart."""

from __future__ import annotations

import datetime
import threading

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.add_offsets_to_txn.v3.request import AddOffsetsToTxnRequest
from kio.schema.end_txn.v3.request import EndTxnRequest
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.join_group.v5 import request as join_v5
from kio.schema.offset_commit.v8 import request as commit_v8
from kio.schema.offset_fetch.v8 import request as fetch_v8
from kio.schema.sync_group.v3 import request as sync_v3
from kio.schema.txn_offset_commit.v3 import request as txn_v3
from kio.schema.types import GroupId, ProducerId, TopicName, TransactionalId
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from oncelog import EmbeddedBroker
from oncelog.local.process import wait_until
from oncelog.protocol.client import WireClient
from tests.support.coordinators import find_coordinators

GROUP, TOPIC = "txn-group", "in"
GROUP_KEY, TRANSACTION_KEY = 0, 1


@pytest.fixture
def data_dir(tmp_path):
    return tmp_path / "broker"


def start(data_dir) -> EmbeddedBroker:
    """A broker on `data_dir`, started by `with`."""
    return EmbeddedBroker(data_dir, {"group.initial.rebalance.delay.ms": "0"})


class TxnProducer:
    """The transactional producer's side of sendOffsetsToTransaction, request by request."""

    def __init__(self, client: WireClient, transactional_id: str) -> None:
        self.client = client
        self.transactional_id = transactional_id
        self.producer_id = self.epoch = -1

    def init(self) -> TxnProducer:
        (found,) = self.client.request(FindCoordinatorRequest(
            key_type=i8(TRANSACTION_KEY), coordinator_keys=(self.transactional_id,))).coordinators
        assert found.error_code == ErrorCode.none
        request = InitProducerIdRequest(
            transactional_id=TransactionalId(self.transactional_id),
            transaction_timeout=i32Timedelta.parse(datetime.timedelta(seconds=60)),
            producer_id=ProducerId(-1), producer_epoch=i16(-1),
        )
        # A new instance fences an open transaction: retried until its abort is complete.
        response = self.client.request(request)
        for _ in range(50):
            if response.error_code != ErrorCode.concurrent_transactions:
                break
            response = self.client.request(request)
        assert response.error_code == ErrorCode.none
        self.producer_id, self.epoch = response.producer_id, response.producer_epoch
        return self

    def add_offsets(self, group: str = GROUP) -> None:
        response = self.client.request(AddOffsetsToTxnRequest(
            transactional_id=TransactionalId(self.transactional_id), producer_id=ProducerId(self.producer_id),
            producer_epoch=i16(self.epoch), group_id=GroupId(group),
        ))
        assert response.error_code == ErrorCode.none

    def commit_offsets(self, offsets: dict[int, int], *, member_id="", generation=-1, instance=None,
                       epoch: int | None = None, group: str = GROUP) -> dict[int, ErrorCode]:
        response = self.client.request(txn_v3.TxnOffsetCommitRequest(
            transactional_id=TransactionalId(self.transactional_id), group_id=GroupId(group),
            producer_id=ProducerId(self.producer_id), producer_epoch=i16(self.epoch if epoch is None else epoch),
            generation_id=generation, member_id=member_id, group_instance_id=instance,
            topics=(txn_v3.TxnOffsetCommitRequestTopic(name=TopicName(TOPIC), partitions=tuple(
                txn_v3.TxnOffsetCommitRequestPartition(partition_index=i32(p), committed_offset=i64(o),
                                                       committed_metadata="")
                for p, o in offsets.items()
            )),),
        ))
        return {p.partition_index: p.error_code for p in response.topics[0].partitions}

    def send_offsets(self, offsets: dict[int, int], **member) -> dict[int, ErrorCode]:
        """AddOffsetsToTxn then TxnOffsetCommit, as sendOffsetsToTransaction does."""
        self.add_offsets(member.get("group", GROUP))
        return self.commit_offsets(offsets, **member)

    def end(self, *, commit: bool) -> None:
        response = self.client.request(EndTxnRequest(
            transactional_id=TransactionalId(self.transactional_id), producer_id=ProducerId(self.producer_id),
            producer_epoch=i16(self.epoch), committed=commit,
        ))
        assert response.error_code == ErrorCode.none
        # The markers follow the EndTxn response; then no offset of the group is pending.
        wait_until(lambda: not any(error == ErrorCode.unstable_offset_commit
                                   for _, error in fetch(self.client, require_stable=True).values()),
                   timeout=10, message="transaction markers written")


def fetch(client, *, require_stable=False, group=GROUP):
    response = client.request(fetch_v8.OffsetFetchRequest(
        groups=(fetch_v8.OffsetFetchRequestGroup(group_id=group, topics=(
            fetch_v8.OffsetFetchRequestTopics(name=TOPIC, partition_indexes=(0, 1)),
        )),),
        require_stable=require_stable,
    ))
    (group,) = response.groups
    assert group.error_code == ErrorCode.none
    return {p.partition_index: (p.committed_offset, p.error_code) for p in group.topics[0].partitions}


def setup_topic(broker: EmbeddedBroker) -> WireClient:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(10)
    client = WireClient.connect(broker.bootstrap_servers)
    request = FindCoordinatorRequest(key_type=i8(GROUP_KEY), coordinator_keys=(GROUP,))
    (coordinator,) = client.request(request).coordinators
    assert coordinator.error_code == ErrorCode.none
    find_coordinators(broker)  # and the transaction coordinator's topic, as producers' FindCoordinator does
    return client


def join_and_sync(client, *, instance: str | None = None) -> tuple[str, int]:
    """One consumer joins GROUP and gets its assignment: (member id, generation)."""
    def join(member_id):
        return client.request(join_v5.JoinGroupRequest(
            group_id=GROUP, session_timeout=datetime.timedelta(seconds=30),
            rebalance_timeout=datetime.timedelta(seconds=30), member_id=member_id, group_instance_id=instance,
            protocol_type="consumer", protocols=(join_v5.JoinGroupRequestProtocol(name="range", metadata=b""),),
        ))

    joined = join("")
    if joined.error_code == ErrorCode.member_id_required:  # KIP-394, dynamic members only
        joined = join(joined.member_id)
    assert joined.error_code == ErrorCode.none
    synced = client.request(sync_v3.SyncGroupRequest(
        group_id=GroupId(GROUP), generation_id=joined.generation_id, member_id=joined.member_id,
        group_instance_id=instance,
        assignments=(sync_v3.SyncGroupRequestAssignment(member_id=joined.member_id, assignment=b""),)
        if joined.leader == joined.member_id else (),
    ))
    assert synced.error_code == ErrorCode.none
    return joined.member_id, joined.generation_id


def test_pending_offsets_become_visible_only_with_the_commit_marker(data_dir):
    with start(data_dir) as broker, setup_topic(broker) as client:
        producer = TxnProducer(client, "tx-a").init()
        assert producer.send_offsets({0: 10, 1: 20}) == {0: ErrorCode.none, 1: ErrorCode.none}
        assert fetch(client) == {0: (-1, ErrorCode.none), 1: (-1, ErrorCode.none)}
        assert fetch(client, require_stable=True) == {
            0: (-1, ErrorCode.unstable_offset_commit), 1: (-1, ErrorCode.unstable_offset_commit),
        }
        producer.end(commit=True)
        assert fetch(client, require_stable=True) == {0: (10, ErrorCode.none), 1: (20, ErrorCode.none)}


def test_aborted_offsets_are_dropped(data_dir):
    with start(data_dir) as broker, setup_topic(broker) as client:
        producer = TxnProducer(client, "tx-a").init()
        producer.send_offsets({0: 10})
        producer.end(commit=True)
        producer.send_offsets({0: 99})
        producer.end(commit=False)
        assert fetch(client, require_stable=True) == {0: (10, ErrorCode.none), 1: (-1, ErrorCode.none)}


def test_commit_without_add_offsets_to_txn_is_refused(data_dir):
    # KIP-890 part 1: the transaction is open but never added the group's partition.
    with start(data_dir) as broker, setup_topic(broker) as client:
        producer = TxnProducer(client, "tx-a").init()
        assert producer.commit_offsets({0: 10}) == {0: ErrorCode.invalid_txn_state}
        assert fetch(client, require_stable=True) == {0: (-1, ErrorCode.none), 1: (-1, ErrorCode.none)}


def test_late_commit_after_the_transaction_ended_is_refused(data_dir):
    # A TxnOffsetCommit retried after EndTxn would otherwise stay pending forever (no
    # marker is coming for it) and block require_stable readers.
    with start(data_dir) as broker, setup_topic(broker) as client:
        producer = TxnProducer(client, "tx-a").init()
        producer.send_offsets({0: 10})
        producer.end(commit=True)
        assert producer.commit_offsets({0: 11, 1: 11}) == {
            0: ErrorCode.invalid_txn_state, 1: ErrorCode.invalid_txn_state,
        }
        assert fetch(client, require_stable=True) == {0: (10, ErrorCode.none), 1: (-1, ErrorCode.none)}


def test_zombie_producer_of_an_older_epoch_is_refused(data_dir):
    with start(data_dir) as broker, setup_topic(broker) as client:
        zombie = TxnProducer(client, "tx-a").init()
        zombie.add_offsets()
        successor = TxnProducer(client, "tx-a").init()  # fences the zombie, aborts its transaction
        assert successor.epoch > zombie.epoch
        assert zombie.commit_offsets({0: 10}) == {0: ErrorCode.invalid_producer_epoch}
        assert successor.send_offsets({0: 20}) == {0: ErrorCode.none}
        successor.end(commit=True)
        assert fetch(client) == {0: (20, ErrorCode.none), 1: (-1, ErrorCode.none)}


def test_unknown_transactional_id_is_refused(data_dir):
    with start(data_dir) as broker, setup_topic(broker) as client:
        stranger = TxnProducer(client, "never-initialized")
        stranger.producer_id, stranger.epoch = 4242, 0
        assert stranger.commit_offsets({0: 1}) == {0: ErrorCode.invalid_producer_id_mapping}


def test_zombie_of_an_older_generation_gets_illegal_generation(data_dir):
    with start(data_dir) as broker, setup_topic(broker) as client:
        member, generation = join_and_sync(client)
        assert generation == 1
        producer = TxnProducer(client, "tx-a").init()
        producer.add_offsets()
        assert producer.commit_offsets({0: 5}, member_id=member, generation=0) == {0: ErrorCode.illegal_generation}
        assert producer.commit_offsets({0: 5}, member_id="zombie", generation=1) == {0: ErrorCode.unknown_member_id}
        # A member id with generation -1: the group has members, so -1 is a wrong generation.
        assert producer.commit_offsets({0: 5}, member_id=member) == {0: ErrorCode.illegal_generation}
        assert producer.commit_offsets({0: 5}, member_id=member, generation=1) == {0: ErrorCode.none}
        # A plain commit without generation is refused while the group has members.
        response = client.request(commit_v8.OffsetCommitRequest(
            group_id=GROUP, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
            topics=(commit_v8.OffsetCommitRequestTopic(name=TOPIC, partitions=(
                commit_v8.OffsetCommitRequestPartition(partition_index=0, committed_offset=1, committed_metadata=""),
            )),),
        ))
        assert response.topics[0].partitions[0].error_code == ErrorCode.unknown_member_id


def test_replaced_static_member_gets_fenced_instance_id(data_dir):
    with start(data_dir) as broker, setup_topic(broker) as client:
        zombie, generation = join_and_sync(client, instance="worker-1")
        replacement, same_generation = join_and_sync(client, instance="worker-1")  # restarted, same instance id
        assert replacement != zombie and same_generation == generation
        producer = TxnProducer(client, "tx-a").init()
        producer.add_offsets()
        assert producer.commit_offsets({0: 5}, member_id=zombie, generation=generation, instance="worker-1") == {
            0: ErrorCode.fenced_instance_id,
        }
        assert producer.commit_offsets({0: 6}, member_id=replacement, generation=generation,
                                       instance="worker-1") == {0: ErrorCode.none}
        producer.end(commit=True)
        assert fetch(client)[0] == (6, ErrorCode.none)


def test_unknown_group_with_a_generation_gets_illegal_generation(data_dir):
    with start(data_dir) as broker, setup_topic(broker) as client:
        producer = TxnProducer(client, "tx-a").init()
        producer.add_offsets()
        assert producer.commit_offsets({0: 5}, member_id="gone", generation=3) == {0: ErrorCode.illegal_generation}
        # No generation: a simple group, created and committed to.
        assert producer.commit_offsets({0: 5}, member_id="anyone") == {0: ErrorCode.none}
        producer.end(commit=True)
        assert fetch(client)[0] == (5, ErrorCode.none)


def test_unknown_partition_is_refused_per_partition(data_dir):
    with start(data_dir) as broker, setup_topic(broker) as client:
        producer = TxnProducer(client, "tx-a").init()
        assert producer.send_offsets({0: 1, 7: 1}) == {0: ErrorCode.none, 7: ErrorCode.unknown_topic_or_partition}


def test_pending_and_committed_offsets_are_reloaded_after_a_restart(data_dir):
    with start(data_dir) as broker, setup_topic(broker) as client:
        first = TxnProducer(client, "tx-a").init()
        first.send_offsets({0: 10})
        first.end(commit=True)
        second = TxnProducer(client, "tx-b").init()
        second.send_offsets({1: 20})  # still open when the broker stops
        ongoing = (second.producer_id, second.epoch)
    with start(data_dir) as broker, WireClient.connect(broker.bootstrap_servers) as client:
        assert fetch(client) == {0: (10, ErrorCode.none), 1: (-1, ErrorCode.none)}
        assert fetch(client, require_stable=True)[1] == (-1, ErrorCode.unstable_offset_commit)
        second = TxnProducer(client, "tx-b")
        second.producer_id, second.epoch = ongoing
        second.end(commit=True)
        assert fetch(client, require_stable=True) == {0: (10, ErrorCode.none), 1: (20, ErrorCode.none)}


def test_confluent_read_committed_consumer_sees_transactional_offsets_only_once_committed(data_dir):
    # A read_committed consumer's committed() sends OffsetFetch with require_stable and
    # retries UNSTABLE_OFFSET_COMMIT: it waits while a transaction holds the group's offsets.
    with start(data_dir) as broker, setup_topic(broker) as client:
        bootstrap = broker.bootstrap_servers
        reader = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "isolation.level": "read_committed",
                           "enable.auto.commit": False})
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "ctp"})
        partition0 = [TopicPartition(TOPIC, 0)]

        def committed(timeout: float) -> int:
            return reader.committed(partition0, timeout=timeout)[0].offset

        try:
            reader.commit(offsets=[TopicPartition(TOPIC, 0, 3)], asynchronous=False)
            producer.init_transactions(10)

            producer.begin_transaction()
            producer.send_offsets_to_transaction([TopicPartition(TOPIC, 0, 7)], reader.consumer_group_metadata(), 10)
            assert fetch(client, require_stable=True)[0] == (-1, ErrorCode.unstable_offset_commit)
            assert fetch(client)[0] == (3, ErrorCode.none)  # without require_stable: the last committed
            with pytest.raises(KafkaException) as waited:
                committed(timeout=1)
            assert waited.value.args[0].code() == KafkaError._TIMED_OUT
            producer.abort_transaction(10)
            assert committed(timeout=10) == 3

            producer.begin_transaction()
            producer.send_offsets_to_transaction([TopicPartition(TOPIC, 0, 9)], reader.consumer_group_metadata(), 10)
            answer: list[int] = []
            waiting = threading.Thread(target=lambda: answer.append(committed(timeout=15)))
            waiting.start()
            waiting.join(1)
            assert waiting.is_alive() and not answer  # still waiting for the transaction to end
            producer.commit_transaction(10)
            waiting.join(15)
            assert answer == [9]
            assert fetch(client, require_stable=True)[0] == (9, ErrorCode.none)
        finally:
            reader.close()
            producer.flush(5)

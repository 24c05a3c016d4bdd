"""What the data and transaction APIs check with an authorizer on, as Kafka's KafkaApis
checks it: each API allowed and refused, with Kafka's error codes, through confluent-kafka
and kafka-python where a client exposes the API and at the wire (oncelog's WireClient,
authenticated with SASL/PLAIN) for what clients never send on their own (a replica's
Fetch, WriteTxnMarkers, AddPartitionsToTxn v4, hand-picked mixes of refused and allowed
resources in one request).

One broker for the module: every test uses its own topics, groups, transactional ids and,
where an ACL of one test could answer another's question (KIP-679's "WRITE on any
topic"), its own user.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from kafka import TopicPartition as KafkaPythonTopicPartition
from kafka.admin import AbortTransactionSpec, KafkaAdminClient
from kafka.errors import (
    ClusterAuthorizationFailedError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)
from kio.schema.add_offsets_to_txn.v3.request import AddOffsetsToTxnRequest
from kio.schema.add_partitions_to_txn.v3 import request as add_v3
from kio.schema.add_partitions_to_txn.v4 import request as add_v4
from kio.schema.create_acls.v3 import request as create_acls_v3
from kio.schema.describe_producers.v0 import request as describe_producers_v0
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.end_txn.v3.request import EndTxnRequest
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import request as fetch_v12
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest as FindCoordinatorV3
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest as FindCoordinatorV4
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.init_producer_id.v6.request import InitProducerIdRequest as InitProducerIdV6
from kio.schema.list_offsets.v7 import request as list_offsets_v7
from kio.schema.list_transactions.v0.request import ListTransactionsRequest
from kio.schema.offset_for_leader_epoch.v4 import request as epoch_v4
from kio.schema.produce.v9 import request as produce_v9
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from kio.schema.txn_offset_commit.v3 import request as txn_commit_v3
from kio.schema.write_txn_markers.v1 import request as markers_v1

from oncelog.protocol.client import WireClient, encode_request
from oncelog.protocol.record_batch import Record, build_batch
from oncelog.security.acl import CLUSTER_NAME, AclOperation, AclPermissionType, PatternType, ResourceType
from tests.support.coordinators import find_coordinators
from tests.support.secured import USERS, SecuredBroker, password, secured_broker

# Users of their own for the tests whose answers depend on all of a user's ACLs.
EXTRA_USERS = ("dave", "erin", "frank", "grace", "heidi", "ivan", "judy", "mallory")
GROUP, TOPIC, TRANSACTIONAL_ID = ResourceType.GROUP, ResourceType.TOPIC, ResourceType.TRANSACTIONAL_ID
READ, WRITE, DESCRIBE = AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE
ALLOW = int(AclPermissionType.ALLOW)


@pytest.fixture(scope="module")
def secured(tmp_path_factory) -> Iterator[SecuredBroker]:
    users = " ".join(f'user_{user}="{password(user)}"' for user in (*USERS, *EXTRA_USERS))
    config = {
        "listener.name.sasl_plaintext.plain.sasl.jaas.config":
            f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};",
        "transaction.two.phase.commit.enable": "true",
    }
    with secured_broker(tmp_path_factory.mktemp("authorization-data"), config) as broker:
        find_coordinators(broker.running)
        yield broker


@contextmanager
def wire(secured: SecuredBroker, user: str) -> Iterator[WireClient]:
    """A WireClient authenticated as `user` (SASL/PLAIN)."""
    with WireClient.connect(secured.bootstrap_servers) as client:
        assert client.request(SaslHandshakeRequest(mechanism="PLAIN")).error_code == ErrorCode.none
        answer = client.request(SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{password(user)}".encode()))
        assert answer.error_code == ErrorCode.none, answer.error_message
        yield client


@contextmanager
def kafka_python_admin(secured: SecuredBroker, user: str) -> Iterator[KafkaAdminClient]:
    admin = KafkaAdminClient(bootstrap_servers=secured.bootstrap_servers, security_protocol="SASL_PLAINTEXT",
                             sasl_mechanism="PLAIN", sasl_plain_username=user, sasl_plain_password=password(user),
                             request_timeout_ms=10000)
    try:
        yield admin
    finally:
        admin.close()


def allow_at_the_wire(secured, user, resource_type, name, operation):
    """An ACL made with a CreateAcls request of admin's: for what `SecuredBroker.allow`
    (confluent-kafka's enums) cannot name: the CLUSTER resource (BROKER there) and
    TWO_PHASE_COMMIT (KIP-939)."""
    with wire(secured, "admin") as client:
        response = client.request(create_acls_v3.CreateAclsRequest(creations=(create_acls_v3.AclCreation(
            resource_type=int(resource_type), resource_name=name, resource_pattern_type=int(PatternType.LITERAL),
            principal=f"User:{user}", host="*", operation=int(operation), permission_type=ALLOW),)))
    assert [result.error_code for result in response.results] == [ErrorCode.none]


def allow_on_cluster(secured: SecuredBroker, user: str, operation: AclOperation) -> None:
    allow_at_the_wire(secured, user, ResourceType.CLUSTER, CLUSTER_NAME, operation)


def batch(*, transactional: bool = False, producer_id: int = -1) -> bytes:
    return build_batch([Record(key=None, value=b"v")], timestamp_ms=int(time.time() * 1000),
                       producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
                       base_sequence=0 if producer_id >= 0 else -1, transactional=transactional)


def produce_request(records, *, transactional_id=None, acks=-1):
    """A Produce v9 request: one partition (0) per topic of `records` ({topic: batch})."""
    return produce_v9.ProduceRequest(
        transactional_id=transactional_id, acks=acks, timeout=datetime.timedelta(seconds=5),
        topic_data=tuple(produce_v9.TopicProduceData(name=topic, partition_data=(
            produce_v9.PartitionProduceData(index=0, records=data),)) for topic, data in records.items()),
    )


def produce(client, records, **options):
    """{topic: error code} of a Produce request (`produce_request`)."""
    response = client.request(produce_request(records, **options))
    return {topic.name: partition.error_code for topic in response.responses for partition in topic.partition_responses}


def fetch(client, topics, *, replica_id=-1):
    """{topic: error code} of a Fetch v12 of partition 0 of each of `topics`, from offset 0."""
    response = client.request(fetch_v12.FetchRequest(
        replica_id=replica_id, max_wait=datetime.timedelta(0), min_bytes=1, topics=tuple(
            fetch_v12.FetchTopic(topic=topic, partitions=(fetch_v12.FetchPartition(
                partition=0, fetch_offset=0, partition_max_bytes=1 << 20),)) for topic in topics),
        forgotten_topics_data=()))
    assert response.error_code == ErrorCode.none
    return {topic.topic: partition.error_code for topic in response.responses for partition in topic.partitions}


def init_producer_id(client, transactional_id):
    """(error code, producer id, epoch) of an InitProducerId v4."""
    response = client.request(InitProducerIdRequest(
        transactional_id=transactional_id, transaction_timeout=datetime.timedelta(seconds=60),
        producer_id=-1, producer_epoch=-1))
    return response.error_code, response.producer_id, response.producer_epoch


def add_partitions(client, transactional_id, producer, topics):
    """{topic: error code} of an AddPartitionsToTxn v3 of partition 0 of each of `topics`;
    `producer`: (producer id, epoch)."""
    response = client.request(add_v3.AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=transactional_id, v3_and_below_producer_id=producer[0],
        v3_and_below_producer_epoch=producer[1],
        v3_and_below_topics=tuple(add_v3.AddPartitionsToTxnTopic(name=topic, partitions=(0,)) for topic in topics)))
    return {topic.name: partition.partition_error_code for topic in response.results_by_topic_v3_and_below
            for partition in topic.results_by_partition}


def deliver(settings: dict, topic: str) -> KafkaError | None:
    """Produce one record with confluent-kafka; the delivery report's error."""
    reports: list[KafkaError | None] = []
    producer = Producer({**settings, "message.timeout.ms": 5000})
    producer.produce(topic, b"v", on_delivery=lambda error, _message: reports.append(error))
    producer.flush(10)
    assert len(reports) == 1
    return reports[0]


def first_poll_outcome(consumer: Consumer, timeout: float = 10.0) -> bytes | KafkaError:
    """The first record's value, or the first error, a consumer gets."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is None:
            continue
        error = message.error()
        if error is not None:
            return error
        value = message.value()
        assert value is not None
        return value
    raise AssertionError("the consumer got neither a record nor an error")


# -- Produce --

def test_produce_needs_write_on_each_topic(secured):
    for name in ("produce-open", "produce-closed"):
        secured.create_topic(name)
    secured.allow("alice", TOPIC, "produce-open", WRITE)
    assert deliver(secured.client("alice"), "produce-open") is None
    refused = deliver(secured.client("alice"), "produce-closed")
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with wire(secured, "alice") as client:
        # One request, each topic answered for itself.
        assert produce(client, {"produce-open": batch(), "produce-closed": batch()}) == {
            "produce-open": ErrorCode.none, "produce-closed": ErrorCode.topic_authorization_failed}
        # Authorization comes before existence: an unknown topic one may not write is not revealed.
        assert produce(client, {"produce-nowhere": batch()}) == {
            "produce-nowhere": ErrorCode.topic_authorization_failed}
    with wire(secured, "admin") as client:
        assert produce(client, {"produce-nowhere": batch()}) == {
            "produce-nowhere": ErrorCode.unknown_topic_or_partition}


def test_transactional_produce_needs_write_on_the_transactional_id(secured):
    for name in ("txn-produce", "txn-produce-closed"):
        secured.create_topic(name)
    secured.allow("bob", TOPIC, "txn-produce", WRITE)
    transactional = batch(transactional=True, producer_id=4242)
    with wire(secured, "bob") as client:
        # The transactional id is checked first, for the whole request.
        assert produce(client, {"txn-produce": transactional, "txn-produce-closed": transactional},
                       transactional_id="txn-produce-bob") == {
            "txn-produce": ErrorCode.transactional_id_authorization_failed,
            "txn-produce-closed": ErrorCode.transactional_id_authorization_failed}
        # Transactional batches with no transactional id at all are refused the same way.
        assert produce(client, {"txn-produce": transactional}) == {
            "txn-produce": ErrorCode.transactional_id_authorization_failed}
        # A plain batch needs no transactional id authorization.
        assert produce(client, {"txn-produce": batch()}) == {"txn-produce": ErrorCode.none}
    secured.allow("bob", TRANSACTIONAL_ID, "txn-produce-bob", WRITE)
    with wire(secured, "bob") as client:
        # Past authorization: the producer has no transaction there, which the log says.
        answer = produce(client, {"txn-produce": transactional, "txn-produce-closed": transactional},
                         transactional_id="txn-produce-bob")
    assert answer["txn-produce-closed"] == ErrorCode.topic_authorization_failed
    assert answer["txn-produce"] not in (ErrorCode.none, ErrorCode.topic_authorization_failed,
                                         ErrorCode.transactional_id_authorization_failed)


def test_acks_0_produce_refused_closes_the_connection(secured):
    secured.create_topic("acks0-open")
    secured.allow("alice", TOPIC, "acks0-open", WRITE)
    with wire(secured, "alice") as client:
        client.send_raw(encode_request(produce_request({"acks0-open": batch()}, acks=0), 100))
        assert not client.is_closed(timeout=0.3)
        client.send_raw(encode_request(produce_request({"acks0-closed": batch()}, acks=0), 101))
        assert client.is_closed()


# -- Fetch and ListOffsets --

def test_consumer_fetch_needs_read_and_list_offsets_describe(secured):
    secured.create_topic("fetch-data")
    assert deliver(secured.client("admin"), "fetch-data") is None
    secured.allow("alice", TOPIC, "fetch-data", READ)
    secured.allow("bob", TOPIC, "fetch-data", DESCRIBE)  # may list offsets, may not read
    for user in ("alice", "bob", "carol"):
        secured.allow(user, GROUP, "fetch-", DESCRIBE, pattern_type=PatternType.PREFIXED)

    def first_outcome(user: str) -> bytes | KafkaError:
        consumer = Consumer(secured.client(user, **{"group.id": f"fetch-{user}", "enable.auto.commit": False}))
        try:
            consumer.assign([TopicPartition("fetch-data", 0, 0)])
            return first_poll_outcome(consumer)
        finally:
            consumer.close()

    assert first_outcome("alice") == b"v"
    refused = first_outcome("bob")
    assert isinstance(refused, KafkaError) and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    def latest(user: str) -> int:
        wanted = TopicPartition("fetch-data", 0)
        admin = AdminClient(secured.client(user))  # kept until the answer: its futures die with it
        return admin.list_offsets({wanted: OffsetSpec.latest()})[wanted].result(10).offset

    assert latest("alice") == latest("bob") == 1  # READ implies DESCRIBE
    with wire(secured, "carol") as client:
        response = client.request(list_offsets_v7.ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(
            list_offsets_v7.ListOffsetsTopic(name="fetch-data", partitions=(
                list_offsets_v7.ListOffsetsPartition(partition_index=0, timestamp=-1),)),)))
    [partition] = response.topics[0].partitions
    assert (partition.error_code, partition.offset) == (ErrorCode.topic_authorization_failed, -1)
    with wire(secured, "alice") as client:
        assert fetch(client, ["fetch-data", "fetch-nowhere"]) == {
            "fetch-data": ErrorCode.none, "fetch-nowhere": ErrorCode.topic_authorization_failed}


def test_fetch_from_a_replica_needs_cluster_action(secured):
    secured.create_topic("replica-fetch")
    secured.allow("alice", TOPIC, "replica-fetch", READ)
    allow_on_cluster(secured, "grace", AclOperation.CLUSTER_ACTION)
    with wire(secured, "alice") as client:
        assert fetch(client, ["replica-fetch"]) == {"replica-fetch": ErrorCode.none}
        # Topic READ does not make a replica: every partition is refused, as Kafka answers.
        assert fetch(client, ["replica-fetch"], replica_id=1) == {
            "replica-fetch": ErrorCode.topic_authorization_failed}
    with wire(secured, "grace") as client:
        # CLUSTER_ACTION needs no topic ACL.
        assert fetch(client, ["replica-fetch"], replica_id=1) == {"replica-fetch": ErrorCode.none}


def test_offset_for_leader_epoch_needs_cluster_action_or_describe(secured):
    secured.create_topic("epochs")
    secured.allow("alice", TOPIC, "epochs", DESCRIBE)
    allow_on_cluster(secured, "grace", AclOperation.CLUSTER_ACTION)

    def epoch_answer(user, replica_id):
        with wire(secured, user) as client:
            response = client.request(epoch_v4.OffsetForLeaderEpochRequest(replica_id=replica_id, topics=(
                epoch_v4.OffsetForLeaderTopic(topic="epochs", partitions=(
                    epoch_v4.OffsetForLeaderPartition(partition=0, leader_epoch=0),)),)))
        return response.topics[0].partitions[0].error_code

    assert epoch_answer("alice", -1) == ErrorCode.none  # a KIP-320 consumer
    assert epoch_answer("bob", -1) == ErrorCode.topic_authorization_failed
    assert epoch_answer("grace", 1) == ErrorCode.none  # a follower
    assert epoch_answer("alice", 1) == ErrorCode.none  # as Kafka: without CLUSTER_ACTION, DESCRIBE decides


# -- InitProducerId --

def test_transactional_init_producer_id_needs_write_on_the_transactional_id(secured):
    secured.allow("alice", TRANSACTIONAL_ID, "init-alice", WRITE)
    secured.allow("bob", TRANSACTIONAL_ID, "init-bob", DESCRIBE)  # finds its coordinator, may not write
    Producer(secured.client("alice", **{"transactional.id": "init-alice"})).init_transactions(10)
    with pytest.raises(KafkaException) as refusal:
        Producer(secured.client("bob", **{"transactional.id": "init-bob"})).init_transactions(10)
    assert refusal.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    with wire(secured, "bob") as client:
        assert init_producer_id(client, "init-bob") == (ErrorCode.transactional_id_authorization_failed, -1, -1)


def test_idempotent_init_producer_id_needs_idempotent_write_or_write_on_some_topic(secured):
    secured.create_topic("erin-idempotent")
    secured.allow("erin", TOPIC, "erin-", WRITE, pattern_type=PatternType.PREFIXED)  # KIP-679
    allow_on_cluster(secured, "frank", AclOperation.IDEMPOTENT_WRITE)
    secured.allow("dave", TOPIC, "erin-idempotent", READ)  # READ on a topic is not enough
    with wire(secured, "dave") as client:
        assert init_producer_id(client, None) == (ErrorCode.cluster_authorization_failed, -1, -1)
    for user in ("erin", "frank", "admin"):
        with wire(secured, user) as client:
            assert init_producer_id(client, None)[0] == ErrorCode.none, user
    assert deliver(secured.client("erin", **{"enable.idempotence": True}), "erin-idempotent") is None


def test_two_phase_commit_init_producer_id_needs_two_phase_commit_on_the_transactional_id(secured):
    secured.allow("heidi", TRANSACTIONAL_ID, "two-phase-heidi", WRITE)

    def init_2pc():
        with wire(secured, "heidi") as client:
            return client.request(InitProducerIdV6(
                transactional_id="two-phase-heidi", transaction_timeout=datetime.timedelta(seconds=60),
                producer_id=-1, producer_epoch=-1, enable2_pc=True, keep_prepared_txn=False)).error_code

    assert init_2pc() == ErrorCode.transactional_id_authorization_failed
    allow_at_the_wire(secured, "heidi", TRANSACTIONAL_ID, "two-phase-heidi", AclOperation.TWO_PHASE_COMMIT)
    assert init_2pc() == ErrorCode.none


# -- AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn, WriteTxnMarkers --

def test_add_partitions_to_txn_needs_write_on_the_transactional_id_and_each_topic(secured):
    for name in ("add-open", "add-closed"):
        secured.create_topic(name)
    secured.allow("ivan", TRANSACTIONAL_ID, "add-ivan", WRITE)
    secured.allow("ivan", TOPIC, "add-open", WRITE)
    with wire(secured, "ivan") as client:
        code, *producer = init_producer_id(client, "add-ivan")
        assert code == ErrorCode.none
        pid_epoch = (producer[0], producer[1])
        assert add_partitions(client, "add-ivan", pid_epoch, ["add-open", "add-closed"]) == {
            "add-open": ErrorCode.operation_not_attempted, "add-closed": ErrorCode.topic_authorization_failed}
        assert add_partitions(client, "add-ivan", pid_epoch, ["add-open", "add-nowhere"]) == {
            "add-open": ErrorCode.operation_not_attempted, "add-nowhere": ErrorCode.topic_authorization_failed}
        assert add_partitions(client, "add-other", pid_epoch, ["add-open"]) == {
            "add-open": ErrorCode.transactional_id_authorization_failed}
        assert add_partitions(client, "add-ivan", pid_epoch, ["add-open"]) == {"add-open": ErrorCode.none}
        # v4+ is the brokers' form: CLUSTER_ACTION, else a top-level refusal and no results.
        response = client.request(add_v4.AddPartitionsToTxnRequest(transactions=(add_v4.AddPartitionsToTxnTransaction(
            transactional_id="add-ivan", producer_id=pid_epoch[0], producer_epoch=pid_epoch[1], verify_only=True,
            topics=(add_v4.AddPartitionsToTxnTopic(name="add-open", partitions=(0,)),)),)))
        assert (response.error_code, response.results_by_transaction) == (ErrorCode.cluster_authorization_failed, ())
    with wire(secured, "admin") as client:
        response = client.request(add_v4.AddPartitionsToTxnRequest(transactions=(add_v4.AddPartitionsToTxnTransaction(
            transactional_id="add-ivan", producer_id=pid_epoch[0], producer_epoch=pid_epoch[1], verify_only=True,
            topics=(add_v4.AddPartitionsToTxnTopic(name="add-open", partitions=(0,)),)),)))
        assert response.error_code == ErrorCode.none
        assert response.results_by_transaction[0].topic_results[0].results_by_partition[0].partition_error_code \
            == ErrorCode.none
        # Internal topics are never added this way, not even by a super user (as Kafka).
        assert add_partitions(client, "add-ivan", pid_epoch, ["add-open", "__consumer_offsets"]) == {
            "add-open": ErrorCode.operation_not_attempted, "__consumer_offsets": ErrorCode.topic_authorization_failed}


def test_offsets_in_a_transaction_check_transactional_id_then_group_then_topics(secured):
    for name in ("offsets-readable", "offsets-hidden"):
        secured.create_topic(name)
    secured.allow("judy", TRANSACTIONAL_ID, "offsets-judy", WRITE)
    secured.allow("judy", GROUP, "offsets-group", READ)
    secured.allow("judy", TOPIC, "offsets-readable", READ)
    with wire(secured, "judy") as client:
        code, producer_id, epoch = init_producer_id(client, "offsets-judy")
        assert code == ErrorCode.none

        def add_offsets(transactional_id, group):
            return client.request(AddOffsetsToTxnRequest(transactional_id=transactional_id, producer_id=producer_id,
                                                         producer_epoch=epoch, group_id=group)).error_code

        def commit(transactional_id, group):
            response = client.request(txn_commit_v3.TxnOffsetCommitRequest(
                transactional_id=transactional_id, group_id=group, producer_id=producer_id, producer_epoch=epoch,
                topics=tuple(txn_commit_v3.TxnOffsetCommitRequestTopic(name=topic, partitions=(
                    txn_commit_v3.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=0,
                                                                  committed_metadata=""),))
                             for topic in ("offsets-readable", "offsets-hidden"))))
            return {topic.name: topic.partitions[0].error_code for topic in response.topics}

        def end(transactional_id):
            return client.request(EndTxnRequest(transactional_id=transactional_id, producer_id=producer_id,
                                                producer_epoch=epoch, committed=True)).error_code

        # The transactional id first, then the group.
        assert add_offsets("offsets-other", "offsets-elsewhere") == ErrorCode.transactional_id_authorization_failed
        assert add_offsets("offsets-judy", "offsets-elsewhere") == ErrorCode.group_authorization_failed
        assert add_offsets("offsets-judy", "offsets-group") == ErrorCode.none
        assert commit("offsets-other", "offsets-elsewhere") == dict.fromkeys(
            ("offsets-readable", "offsets-hidden"), ErrorCode.transactional_id_authorization_failed)
        assert commit("offsets-judy", "offsets-elsewhere") == dict.fromkeys(
            ("offsets-readable", "offsets-hidden"), ErrorCode.group_authorization_failed)
        # Then each topic: the readable one is committed all the same.
        assert commit("offsets-judy", "offsets-group") == {
            "offsets-readable": ErrorCode.none, "offsets-hidden": ErrorCode.topic_authorization_failed}
        assert end("offsets-other") == ErrorCode.transactional_id_authorization_failed
        assert end("offsets-judy") == ErrorCode.none


def test_write_txn_markers_needs_alter_or_cluster_action_on_the_cluster(secured):
    secured.create_topic("markers")
    secured.allow("alice", TOPIC, "markers", AclOperation.ALL)
    allow_on_cluster(secured, "mallory", AclOperation.ALTER)  # what kafka-transactions.sh abort needs
    allow_on_cluster(secured, "grace", AclOperation.CLUSTER_ACTION)  # a coordinator broker's

    def abort_marker(user):
        with wire(secured, user) as client:
            response = client.request(markers_v1.WriteTxnMarkersRequest(markers=(markers_v1.WritableTxnMarker(
                producer_id=777, producer_epoch=0, transaction_result=False, coordinator_epoch=-1,
                topics=(markers_v1.WritableTxnMarkerTopic(name="markers", partition_indexes=(0,)),)),)))
        return response.markers[0].topics[0].partitions[0].error_code

    assert abort_marker("alice") == ErrorCode.cluster_authorization_failed
    assert abort_marker("mallory") == ErrorCode.none
    assert abort_marker("grace") == ErrorCode.none
    # kafka-python's abort_transaction (kafka-transactions.sh abort) finds the leader in
    # Metadata first, which needs DESCRIBE on the topic.
    secured.allow("mallory", TOPIC, "markers", DESCRIBE)
    spec = AbortTransactionSpec(topic_partition=KafkaPythonTopicPartition("markers", 0), producer_id=778,
                                producer_epoch=0, coordinator_epoch=-1)
    with kafka_python_admin(secured, "alice") as admin, pytest.raises(ClusterAuthorizationFailedError):
        admin.abort_transaction(spec)
    with kafka_python_admin(secured, "mallory") as admin:
        admin.abort_transaction(spec)


# -- FindCoordinator --

def test_find_coordinator_needs_describe_on_each_key(secured):
    secured.allow("alice", GROUP, "find-group", DESCRIBE)
    secured.allow("alice", TRANSACTIONAL_ID, "find-tx", DESCRIBE)
    with wire(secured, "alice") as client:
        refused = client.request(FindCoordinatorV3(key="find-hidden", key_type=0))
        assert (refused.error_code, refused.error_message, refused.node_id) == (
            ErrorCode.group_authorization_failed, "Group authorization failed.", -1)
        assert client.request(FindCoordinatorV3(key="find-group", key_type=0)).error_code == ErrorCode.none
        assert client.request(FindCoordinatorV3(key="find-hidden", key_type=1)).error_code \
            == ErrorCode.transactional_id_authorization_failed
        groups = client.request(FindCoordinatorV4(key_type=0, coordinator_keys=("find-group", "find-hidden")))
        assert {c.key: (c.error_code, c.node_id >= 0) for c in groups.coordinators} == {
            "find-group": (ErrorCode.none, True), "find-hidden": (ErrorCode.group_authorization_failed, False)}
        ids = client.request(FindCoordinatorV4(key_type=1, coordinator_keys=("find-tx", "find-hidden")))
        assert {c.key: c.error_code for c in ids.coordinators} == {
            "find-tx": ErrorCode.none, "find-hidden": ErrorCode.transactional_id_authorization_failed}


# -- DescribeTransactions, ListTransactions, DescribeProducers --

def test_describe_and_list_transactions_show_only_what_the_principal_may_describe(secured):
    for name in ("described-shown", "described-hidden"):
        secured.create_topic(name)
    secured.allow("carol", TRANSACTIONAL_ID, "described-carol", DESCRIBE)
    secured.allow("carol", TOPIC, "described-shown", DESCRIBE)
    with wire(secured, "admin") as client:  # a transaction over both topics, and one carol may not see
        for transactional_id in ("described-carol", "described-admin"):
            code, producer_id, epoch = init_producer_id(client, transactional_id)
            assert code == ErrorCode.none
            assert set(add_partitions(client, transactional_id, (producer_id, epoch),
                                      ["described-shown", "described-hidden"]).values()) == {ErrorCode.none}
    with wire(secured, "carol") as client:
        response = client.request(DescribeTransactionsRequest(transactional_ids=("described-carol",
                                                                                 "described-admin")))
        states = {state.transactional_id: state for state in response.transaction_states}
        assert states["described-admin"].error_code == ErrorCode.transactional_id_authorization_failed
        assert states["described-carol"].error_code == ErrorCode.none
        # Only the partitions of topics carol may describe.
        assert [topic.topic for topic in states["described-carol"].topics] == ["described-shown"]
        listed = client.request(ListTransactionsRequest(state_filters=(), producer_id_filters=()))
        assert {state.transactional_id for state in listed.transaction_states} == {"described-carol"}
    with kafka_python_admin(secured, "carol") as admin:
        description = admin.describe_transactions(["described-carol"])["described-carol"]
        assert {tp.topic for tp in description.topic_partitions} == {"described-shown"}
        assert [listing.transactional_id for listings in admin.list_transactions().values()
                for listing in listings] == ["described-carol"]
        with pytest.raises(TransactionalIdAuthorizationFailedError):
            admin.describe_transactions(["described-admin"])
    with kafka_python_admin(secured, "admin") as admin:
        listed_by_admin = admin.list_transactions()
    assert {"described-carol", "described-admin"} <= {
        listing.transactional_id for listings in listed_by_admin.values() for listing in listings}


def test_describe_producers_needs_read_on_the_topic(secured):
    secured.create_topic("producers-read")
    secured.allow("alice", TOPIC, "producers-read", READ)
    assert deliver(secured.client("admin", **{"enable.idempotence": True}), "producers-read") is None
    secured.allow("bob", TOPIC, "producers-read", DESCRIBE)  # finds the leader in Metadata, may not READ
    wanted = KafkaPythonTopicPartition("producers-read", 0)
    with kafka_python_admin(secured, "alice") as admin:
        assert len(admin.describe_producers([wanted])[wanted].active_producers) == 1
    with kafka_python_admin(secured, "bob") as admin, pytest.raises(TopicAuthorizationFailedError):
        admin.describe_producers([wanted])
    with wire(secured, "bob") as client:
        response = client.request(describe_producers_v0.DescribeProducersRequest(topics=tuple(
            describe_producers_v0.TopicRequest(name=name, partition_indexes=(0,))
            for name in ("producers-read", "producers-nowhere", "not a topic!"))))
    assert {topic.name: topic.partitions[0].error_code for topic in response.topics} == {
        "producers-read": ErrorCode.topic_authorization_failed,
        "producers-nowhere": ErrorCode.topic_authorization_failed,
        "not a topic!": ErrorCode.invalid_topic_exception}

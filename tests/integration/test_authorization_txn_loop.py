"""The exactly-once consume-transform-produce loop with an authorizer on, as confluent-kafka
runs it: a read_committed consumer in a group and a transactional producer that sends the
consumer's offsets with its transaction. `alice` runs it with exactly the ACLs Kafka's
documentation lists for it: READ on the input topic, WRITE on the output topic, READ on
the group, WRITE and DESCRIBE on the transactional id (no IdempotentWrite on the cluster:
since Kafka 3.0 a transactional id's WRITE is enough). Without any one of them the client
sees the *_AUTHORIZATION_FAILED error that names what is missing.

TransactionalId DESCRIBE is implied by WRITE (Kafka's authorizer: an ALLOW of READ, WRITE,
DELETE or ALTER allows DESCRIBE), so the loop runs without it; only a DENY of DESCRIBE
stops it, at FindCoordinator.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka import OFFSET_INVALID, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from oncelog.security.acl import AclOperation, ResourceType
from tests.support.secured import SecuredBroker, secured_broker

INPUT_VALUES = [b"a", b"b", b"c"]


@dataclass(frozen=True)
class Names:
    """A case's own resources, so that one broker serves every case."""

    case: str

    @property
    def input(self) -> str:
        return f"loop-in-{self.case}"

    @property
    def output(self) -> str:
        return f"loop-out-{self.case}"

    @property
    def group(self) -> str:
        return f"loop-group-{self.case}"

    @property
    def transactional_id(self) -> str:
        return f"loop-tx-{self.case}"


# Kafka's documented ACLs for the loop: (resource type, name of the case's resource, operation).
DOCUMENTED = {
    "input-read": (ResourceType.TOPIC, "input", AclOperation.READ),
    "output-write": (ResourceType.TOPIC, "output", AclOperation.WRITE),
    "group-read": (ResourceType.GROUP, "group", AclOperation.READ),
    "transactional-id-write": (ResourceType.TRANSACTIONAL_ID, "transactional_id", AclOperation.WRITE),
    "transactional-id-describe": (ResourceType.TRANSACTIONAL_ID, "transactional_id", AclOperation.DESCRIBE),
}


@pytest.fixture(scope="module")
def secured(tmp_path_factory) -> Iterator[SecuredBroker]:
    with secured_broker(tmp_path_factory.mktemp("authorization-loop"),
                        {"group.initial.rebalance.delay.ms": "0"}) as broker:
        yield broker


def prepare(secured: SecuredBroker, names: Names, without: str | None) -> None:
    """The case's topics, the input records, and alice's documented ACLs but `without`."""
    secured.create_topic(names.input)
    secured.create_topic(names.output)
    producer = Producer(secured.client("admin"))
    for value in INPUT_VALUES:
        producer.produce(names.input, value)
    assert producer.flush(10) == 0
    for acl, (resource_type, attribute, operation) in DOCUMENTED.items():
        if acl != without:
            secured.allow("alice", resource_type, getattr(names, attribute), operation)


AUTHORIZATION_ERRORS = frozenset({KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED,
                                  KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                  KafkaError.CLUSTER_AUTHORIZATION_FAILED})


def run_loop(secured: SecuredBroker, names: Names, timeout: float = 15.0) -> set[int]:
    """One pass of the loop as alice: consume every input record, produce each upper-cased
    in a transaction that also commits the consumer's offsets. Returns the error codes the
    client reported (empty when the transaction committed), stopping at the first
    authorization error."""
    errors: set[int] = set()
    consumer = Consumer(secured.client("alice", **{
        "group.id": names.group, "isolation.level": "read_committed", "enable.auto.commit": False,
        "auto.offset.reset": "earliest"}))
    producer = Producer(secured.client("alice", **{"transactional.id": names.transactional_id,
                                                   "transaction.timeout.ms": 10000}))
    try:
        try:
            producer.init_transactions(timeout)
        except KafkaException as exception:
            return {exception.args[0].code()}
        consumer.subscribe([names.input])
        values = consume_input(consumer, errors, timeout)
        if values is not None:
            transform_in_a_transaction(producer, consumer, names, values, errors, timeout)
        return errors
    finally:
        consumer.close()


def consume_input(consumer: Consumer, errors: set[int], timeout: float) -> list[bytes] | None:
    """Every input record's value, or None at the first authorization error (in `errors`)."""
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(values) < len(INPUT_VALUES):
        assert time.monotonic() < deadline, f"consumed {len(values)} records, errors {errors}"
        message = consumer.poll(0.2)
        if message is None:
            continue
        error = message.error()
        if error is not None:
            errors.add(error.code())
            if error.code() in AUTHORIZATION_ERRORS:
                return None
            continue
        value = message.value()
        assert value is not None
        values.append(value)
    return values


def transform_in_a_transaction(producer: Producer, consumer: Consumer, names: Names, values: list[bytes],
                               errors: set[int], timeout: float) -> None:
    """The transaction: the transformed records and the consumer's offsets, committed, or
    aborted on an error that requires it (its code in `errors`), as the loop does."""

    def delivered(error: KafkaError | None, _message: object) -> None:
        if error is not None:
            errors.add(error.code())

    producer.begin_transaction()
    for value in values:
        producer.produce(names.output, value.upper(), on_delivery=delivered)
    try:
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata(), timeout)
        producer.commit_transaction(timeout)
    except KafkaException as exception:
        error = exception.args[0]
        errors.add(error.code())
        if error.txn_requires_abort():  # so the offsets sent stay uncommitted
            producer.abort_transaction(timeout)


def output_of(secured: SecuredBroker, names: Names) -> tuple[list[bytes], int]:
    """What a read_committed reader sees in the output (waiting for as many records as
    the input has, when the output has any), and the group's committed offset."""
    reader = Consumer(secured.client("admin", **{"group.id": f"{names.group}-check", "enable.auto.commit": False,
                                                 "isolation.level": "read_committed"}))
    values: list[bytes] = []
    try:
        _low, high = reader.get_watermark_offsets(TopicPartition(names.output, 0), timeout=10)
        reader.assign([TopicPartition(names.output, 0, 0)])
        deadline = time.monotonic() + 10
        while high > 0 and len(values) < len(INPUT_VALUES) and time.monotonic() < deadline:
            message = reader.poll(0.2)
            if message is not None and message.error() is None:
                value = message.value()
                assert value is not None
                values.append(value)
    finally:
        reader.close()
    offsets = Consumer(secured.client("admin", **{"group.id": names.group, "enable.auto.commit": False}))
    try:
        [committed] = offsets.committed([TopicPartition(names.input, 0)], timeout=10)
    finally:
        offsets.close()
    return values, committed.offset


def test_the_loop_runs_with_exactly_the_documented_acls(secured):
    names = Names("complete")
    prepare(secured, names, without=None)
    assert run_loop(secured, names) == set()
    assert output_of(secured, names) == ([value.upper() for value in INPUT_VALUES], len(INPUT_VALUES))


@pytest.mark.parametrize(("without", "expected"), [
    ("input-read", KafkaError.TOPIC_AUTHORIZATION_FAILED),
    ("output-write", KafkaError.TOPIC_AUTHORIZATION_FAILED),
    ("group-read", KafkaError.GROUP_AUTHORIZATION_FAILED),
    ("transactional-id-write", KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
])
def test_the_loop_without_a_documented_acl_fails_with_the_error_naming_it(secured, without, expected):
    names = Names(f"without-{without}")
    prepare(secured, names, without=without)
    assert expected in run_loop(secured, names)
    assert output_of(secured, names) == ([], OFFSET_INVALID)  # nothing committed, no output


def test_the_loop_runs_without_transactional_id_describe_which_write_implies(secured):
    names = Names("without-transactional-id-describe")
    prepare(secured, names, without="transactional-id-describe")
    assert run_loop(secured, names) == set()


def test_the_loop_stops_at_find_coordinator_when_transactional_id_describe_is_denied(secured):
    names = Names("denied-transactional-id-describe")
    prepare(secured, names, without=None)
    secured.allow("alice", ResourceType.TRANSACTIONAL_ID, names.transactional_id, AclOperation.DESCRIBE, deny=True)
    assert run_loop(secured, names) == {KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}

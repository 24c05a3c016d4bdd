"""The partition leader's side of KIP-890 in cluster mode (coordinator/txn/verification.py):
one request in flight per coordinator broker with the transactions that arrive meanwhile
batched into the next, Kafka's rules for two waits of one transactional id, and the
guards that stop an append whose transaction ended while it was being verified."""

from __future__ import annotations

import asyncio
import sys
from types import SimpleNamespace

import pytest

from oncelog.coordinator.txn.verification import TransactionVerifier
from oncelog.kernel.internal_topics import TRANSACTION_STATE, partition_for
from oncelog.protocol.messages import ErrorCode, response_class
from oncelog.storage.producer_state import ProducerStateEntry

TOPIC = "orders"
THIS_BROKER, COORDINATOR = 1, 2
PID, EPOCH = 7, 3


class FakePeer:
    """Answers AddPartitionsToTxn v5 from `answer(transaction)` once `release` is set."""

    def __init__(self, answer=lambda transaction: ErrorCode.none) -> None:
        self.requests: list = []
        self.release = asyncio.Event()
        self.release.set()
        self.answer = answer
        self.fail = False

    async def request(self, entity, timeout_s):
        self.requests.append(entity)
        await self.release.wait()
        if self.fail:
            raise ConnectionError("gone")
        module = sys.modules[response_class(24, 5).__module__]
        return module.AddPartitionsToTxnResponse(
            throttle_time=0, error_code=ErrorCode.none, results_by_transaction=tuple(
                module.AddPartitionsToTxnResult(transactional_id=t.transactional_id, topic_results=tuple(
                    module.AddPartitionsToTxnTopicResult(name=topic.name, results_by_partition=tuple(
                        module.AddPartitionsToTxnPartitionResult(partition_index=p,
                                                                 partition_error_code=self.answer(t))
                        for p in topic.partitions))
                    for topic in t.topics))
                for t in entity.transactions))

    def retarget(self, host: str, port: int) -> None:
        pass

    def close(self) -> None:
        pass


def fake_broker(leader_of_state: int = COORDINATOR):
    producers: dict[int, ProducerStateEntry] = {}
    partition_log = SimpleNamespace(producer_state=SimpleNamespace(producers=producers))
    image = SimpleNamespace(
        topics={TRANSACTION_STATE: SimpleNamespace(partitions=3)},
        partition=lambda topic, partition: SimpleNamespace(leader=leader_of_state),
    )
    directory = SimpleNamespace(image=image, inter_broker_address=lambda node_id: ("127.0.0.1", 1),
                              add_listener=lambda listener: None)
    # The cluster's Leadership, answering from the image as the replica manager does.
    leadership = SimpleNamespace(
        partition_count=lambda topic: image.topics[topic].partitions if topic in image.topics else None,
        leader_of=lambda topic, partition: image.partition(topic, partition).leader,
    )
    broker = SimpleNamespace(node_id=THIS_BROKER, directory=directory, leadership=leadership,
                             logs=SimpleNamespace(partition=lambda topic, partition: partition_log))
    return broker, producers


def verifier_with(peer, leader_of_state=COORDINATOR):
    broker, producers = fake_broker(leader_of_state)
    verifier = TransactionVerifier(broker, 5000)
    verifier._peers._peers[COORDINATOR] = peer  # the pool's connection to the coordinator
    return verifier, producers


def run(coroutine):
    return asyncio.run(coroutine)


def test_one_request_in_flight_per_coordinator_and_the_waits_meanwhile_go_in_the_next_one():
    async def scenario():
        peer = FakePeer()
        peer.release.clear()
        verifier, _ = verifier_with(peer)
        first = asyncio.create_task(verifier.verify("a", PID, EPOCH, {(TOPIC, 0)}, verify_only=True))
        await asyncio.sleep(0)
        later = [asyncio.create_task(verifier.verify(tid, PID + i, EPOCH, {(TOPIC, i)}, verify_only=True))
                 for i, tid in enumerate(("b", "c"), start=1)]
        await asyncio.sleep(0)
        assert len(peer.requests) == 1, "the second request waits for the first"
        peer.release.set()
        answers = await asyncio.gather(first, *later)
        assert [sorted(t.transactional_id for t in r.transactions) for r in peer.requests] == [["a"], ["b", "c"]]
        assert answers == [{(TOPIC, 0): ErrorCode.none}, {(TOPIC, 1): ErrorCode.none}, {(TOPIC, 2): ErrorCode.none}]

    run(scenario())


def test_waits_of_one_producer_epoch_and_operation_share_one_entry():
    async def scenario():
        peer = FakePeer()
        peer.release.clear()
        verifier, _ = verifier_with(peer)
        blocker = asyncio.create_task(verifier.verify("other", 99, 0, {(TOPIC, 0)}, verify_only=True))
        await asyncio.sleep(0)
        waits = [asyncio.create_task(verifier.verify("a", PID, EPOCH, {(TOPIC, p)}, verify_only=False))
                 for p in (1, 2)]
        await asyncio.sleep(0)
        peer.release.set()
        assert await asyncio.gather(*waits) == [{(TOPIC, 1): ErrorCode.none}, {(TOPIC, 2): ErrorCode.none}]
        await blocker
        (merged,) = peer.requests[1].transactions
        assert (merged.verify_only, merged.topics[0].partitions) == (False, (1, 2))

    run(scenario())


@pytest.mark.parametrize("first_epoch, second_epoch, first_answer, second_answer", [
    (EPOCH, EPOCH + 1, ErrorCode.invalid_producer_epoch, ErrorCode.none),  # the newer epoch fences the queued one
    (EPOCH + 1, EPOCH, ErrorCode.none, ErrorCode.invalid_producer_epoch),  # an older one is refused at once
])
def test_two_waits_of_one_transactional_id_at_different_epochs(first_epoch, second_epoch, first_answer,
                                                               second_answer):
    async def scenario():
        peer = FakePeer()
        peer.release.clear()
        verifier, _ = verifier_with(peer)
        blocker = asyncio.create_task(verifier.verify("other", 99, 0, {(TOPIC, 0)}, verify_only=True))
        await asyncio.sleep(0)
        first = asyncio.create_task(verifier.verify("a", PID, first_epoch, {(TOPIC, 1)}, verify_only=True))
        await asyncio.sleep(0)
        second = asyncio.create_task(verifier.verify("a", PID, second_epoch, {(TOPIC, 1)}, verify_only=True))
        await asyncio.sleep(0)
        peer.release.set()
        assert await first == {(TOPIC, 1): first_answer}
        assert await second == {(TOPIC, 1): second_answer}
        await blocker

    run(scenario())


def test_of_two_waits_at_one_epoch_with_different_operations_the_earlier_gets_network_exception():
    async def scenario():
        peer = FakePeer()
        peer.release.clear()
        verifier, _ = verifier_with(peer)
        blocker = asyncio.create_task(verifier.verify("other", 99, 0, {(TOPIC, 0)}, verify_only=True))
        await asyncio.sleep(0)
        first = asyncio.create_task(verifier.verify("a", PID, EPOCH, {(TOPIC, 1)}, verify_only=True))
        await asyncio.sleep(0)
        second = asyncio.create_task(verifier.verify("a", PID, EPOCH, {(TOPIC, 1)}, verify_only=False))
        await asyncio.sleep(0)
        peer.release.set()
        assert await first == {(TOPIC, 1): ErrorCode.network_exception}
        assert await second == {(TOPIC, 1): ErrorCode.none}
        await blocker

    run(scenario())


def test_the_coordinators_answers_and_a_broken_connection_reach_the_waiters():
    async def scenario():
        peer = FakePeer(answer=lambda t: ErrorCode.transaction_abortable)
        verifier, _ = verifier_with(peer)
        assert await verifier.verify("a", PID, EPOCH, {(TOPIC, 0)}, verify_only=True) == {
            (TOPIC, 0): ErrorCode.transaction_abortable}
        peer.fail = True
        assert await verifier.verify("a", PID, EPOCH, {(TOPIC, 0)}, verify_only=True) == {
            (TOPIC, 0): ErrorCode.network_exception}

    run(scenario())


@pytest.mark.parametrize("leader", [-1, THIS_BROKER], ids=["no leader", "this broker, loading"])
def test_no_coordinator_to_ask_is_coordinator_not_available(leader):
    async def scenario():
        peer = FakePeer()
        verifier, _ = verifier_with(peer, leader_of_state=leader)
        assert await verifier.verify("a", PID, EPOCH, {(TOPIC, 0)}, verify_only=True) == {
            (TOPIC, 0): ErrorCode.coordinator_not_available}
        assert peer.requests == []

    run(scenario())


def test_the_request_goes_to_the_leader_of_the_ids_transaction_state_partition():
    broker, _ = fake_broker()
    asked = []
    broker.directory.image.partition = lambda topic, partition: asked.append((topic, partition)) or \
        SimpleNamespace(leader=COORDINATOR)
    assert TransactionVerifier(broker, 5000)._coordinator_of("some-id") == COORDINATOR
    assert asked == [(TRANSACTION_STATE, partition_for("some-id", 3))]


def test_a_transaction_open_on_the_partition_at_the_batchs_epoch_needs_no_verification():
    verifier, producers = verifier_with(FakePeer())
    assert verifier.needs_verification(TOPIC, 0, PID, EPOCH)
    producers[PID] = ProducerStateEntry(PID, producer_epoch=EPOCH, current_txn_first_offset=10)
    assert not verifier.needs_verification(TOPIC, 0, PID, EPOCH)
    assert verifier.holds(TOPIC, 0, PID, EPOCH, None, leader_epoch=5)
    # The next transaction (transaction version 2: the next epoch) before the marker landed.
    assert verifier.needs_verification(TOPIC, 0, PID, EPOCH + 1)


def test_a_guard_holds_until_the_producers_marker_or_batch_lands_or_the_leader_epoch_changes():
    verifier, _ = verifier_with(FakePeer())
    guard = verifier.guard(TOPIC, 0, PID, leader_epoch=5)
    assert verifier.guard(TOPIC, 0, PID, leader_epoch=5) is guard, "a second wait shares it"
    assert verifier.holds(TOPIC, 0, PID, EPOCH, guard, leader_epoch=5)
    assert not verifier.holds(TOPIC, 0, PID, EPOCH, guard, leader_epoch=6)
    verifier.release(TOPIC, 0, PID)  # the ABORT marker of a timed-out transaction
    assert not verifier.holds(TOPIC, 0, PID, EPOCH, guard, leader_epoch=5)
    renewed = verifier.guard(TOPIC, 0, PID, leader_epoch=5)
    assert renewed is not guard and not verifier.holds(TOPIC, 0, PID, EPOCH, guard, leader_epoch=5), \
        "a stale verification stays stale (ABA)"
    verifier.drop(TOPIC, 0, PID, renewed)
    assert not verifier.holds(TOPIC, 0, PID, EPOCH, renewed, leader_epoch=5)

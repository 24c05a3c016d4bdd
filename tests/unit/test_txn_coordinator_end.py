"""The transaction coordinator's EndTxn and InitProducerId refusals, on a coordinator
without a log: a stale epoch is PRODUCER_FENCED, as an ErrorCode, and nothing is written."""

from dataclasses import replace

import pytest

from oncelog.coordinator.txn.coordinator import TransactionCoordinator
from oncelog.coordinator.txn.metadata import TransactionMetadata, TxnEntry
from oncelog.coordinator.txn.state import TransactionState
from oncelog.kernel.node import ProducerIdsUnavailable
from oncelog.kernel.peer import NoPeers
from oncelog.protocol.messages import ErrorCode

S = TransactionState


class _Leadership:
    def partition_count(self, _topic):
        return 1


class _Node:
    """What the coordinator asks of its node when it is built and answers a request."""

    node_id = 0
    directory = NoPeers()
    group_coordinator = None

    def __init__(self) -> None:
        self.leadership = _Leadership()
        self.config = {
            "transaction.state.log.num.partitions": 1, "transaction.max.timeout.ms": 900_000,
            "transactional.id.expiration.ms": 604_800_000, "transaction.two.phase.commit.enable": False,
            "transaction.version": 2, "request.timeout.ms": 30_000,
        }


@pytest.fixture
def coordinator():
    coordinator = TransactionCoordinator(_Node())
    coordinator.log.take(0, 1)  # this broker coordinates every id (one partition)

    def no_write(*_args, **_kwargs):
        raise AssertionError("a refused request writes nothing")

    coordinator._append = no_write
    yield coordinator
    coordinator.close()


def with_transaction(coordinator, state, epoch=5):
    record = TransactionMetadata(transactional_id="tx", producer_id=7, producer_epoch=epoch, state=state,
                                 partitions=frozenset({("orders", 0)}), txn_start_timestamp=50)
    coordinator._entries["tx"] = TxnEntry(record)
    return record


@pytest.mark.parametrize("transaction_version", [0, 2])
@pytest.mark.parametrize("commit", [True, False])
def test_an_end_txn_with_a_stale_epoch_is_producer_fenced_as_an_error_code(coordinator, transaction_version, commit):
    before = with_transaction(coordinator, S.ONGOING, epoch=5)
    result = coordinator.end_transaction_result("tx", 7, 4, commit=commit, now=100,
                                                transaction_version=transaction_version)
    assert isinstance(result.error, ErrorCode) and result.error is ErrorCode.producer_fenced
    assert (result.producer_id, result.producer_epoch) == (-1, -1)
    assert coordinator.describe("tx") is before, "the transaction is untouched"


def test_an_init_producer_id_naming_a_stale_epoch_is_producer_fenced_as_an_error_code(coordinator):
    before = with_transaction(coordinator, S.COMPLETE_COMMIT, epoch=5)
    result = coordinator.init_producer_id("tx", 60_000, 7, 2, now=100)
    assert isinstance(result.error, ErrorCode) and result.error is ErrorCode.producer_fenced
    assert coordinator.describe("tx") is before


def test_a_timed_out_fence_on_an_exhausted_epoch_without_a_producer_id_is_retried_not_stuck(coordinator):
    """TV2: the abort of a fenced, exhausted epoch needs a new producer id; while the
    producer-id source has none, the fence is let go, so the next timeout sweep tries again
    (with the epoch it bumped), and the id never answers CONCURRENT_TRANSACTIONS for good."""

    class NoIds:
        def next_producer_id(self) -> int:
            raise ProducerIdsUnavailable("the next producer id block is being reserved")

    coordinator.broker.producer_ids = NoIds()
    with_transaction(coordinator, S.ONGOING, epoch=32_765)  # exhausted: MAX_EPOCH - 2 is the last a client gets
    coordinator._entries["tx"].current = replace(coordinator.describe("tx"), client_transaction_version=2)
    coordinator.abort_timed_out(now=10**12)
    entry = coordinator._entries["tx"]
    assert not entry.in_transition and entry.has_failed_epoch_fence
    fenced_epoch = entry.current.producer_epoch
    coordinator.abort_timed_out(now=10**12 + 1)  # tried again, with the same bumped epoch
    assert not entry.in_transition and entry.current.producer_epoch == fenced_epoch

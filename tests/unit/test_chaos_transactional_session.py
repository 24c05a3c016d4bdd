"""The chaos harness's TransactionalSession.end (oncelog.chaos.sessions): how long it keeps
calling commit/abort_transaction before it gives the producer up."""

from typing import TYPE_CHECKING, cast

from confluent_kafka import KafkaError, KafkaException

from oncelog.chaos.history import History
from oncelog.chaos.sessions import RunState, TransactionalSession
from oncelog.chaos.settings import MAX_END_ATTEMPTS, MAX_END_TIMEOUTS

if TYPE_CHECKING:
    from oncelog.chaos.sessions import _TransactionalProducer


class ScriptedProducer:
    """Stands in for a _TransactionalProducer: commit_transaction raises the scripted
    errors in turn, then succeeds."""

    def __init__(self, errors: list[KafkaError]) -> None:
        self.errors = list(errors)
        self.commit_calls = 0
        self.closed = False
        self.producer = self  # what close_quietly purges
        self.next_txn_seq = 5

    def commit_transaction(self, timeout: float) -> None:
        self.commit_calls += 1
        if self.errors:
            raise KafkaException(self.errors.pop(0))

    def purge(self) -> None:
        pass

    def close(self, timeout: float) -> None:
        self.closed = True


def session_with(producer: ScriptedProducer) -> tuple[TransactionalSession, RunState]:
    run = RunState(History(), "", seed=1)
    session = TransactionalSession(run, "txn", "w")
    session.producer = cast("_TransactionalProducer", producer)  # a stand-in
    return session, run


def timed_out() -> KafkaError:
    return KafkaError(KafkaError._TIMED_OUT, "Timed out waiting for operation to finish, retry call to resume",
                      retriable=True)


def test_commit_that_keeps_timing_out_discards_the_producer_after_max_end_timeouts():
    # An EndTxn whose coordinator was killed in flight: librdkafka never finishes it, and
    # every call waits its full timeout again. The session must not wait MAX_END_ATTEMPTS
    # times (80 s of a stalled worker in the soak run).
    producer = ScriptedProducer([timed_out()] * MAX_END_ATTEMPTS)
    session, run = session_with(producer)

    assert session.end(commit=True) == "failed"

    assert producer.commit_calls == MAX_END_TIMEOUTS < MAX_END_ATTEMPTS
    assert producer.closed and session.producer is None
    assert session.next_txn_seq == 5  # the next producer continues the numbering
    assert run.events["w.end_timeouts"] == 1


def test_commit_that_times_out_once_then_succeeds_keeps_the_producer():
    producer = ScriptedProducer([timed_out()] * (MAX_END_TIMEOUTS - 1))
    session, run = session_with(producer)

    assert session.end(commit=True) == "commit"

    assert session.producer is producer and not producer.closed
    assert run.events["w.end_timeouts"] == 0


def test_other_retriable_errors_still_get_max_end_attempts():
    not_available = KafkaError(KafkaError.COORDINATOR_NOT_AVAILABLE, retriable=True)
    producer = ScriptedProducer([not_available] * (MAX_END_ATTEMPTS - 1))
    session, _run = session_with(producer)

    assert session.end(commit=True) == "commit"
    assert producer.commit_calls == MAX_END_ATTEMPTS

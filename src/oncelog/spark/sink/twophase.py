"""The KIP-939 calls the sink's batch mode makes on the wire: hand a client's open
transaction over (InitProducerId v6 with enable2Pc and keepPreparedTxn), end it later
from another process (EndTxn), and find transactions (ListTransactions v2). Standard
clients have no API for these; they go through oncelog.client, sharing its connections.

- Every transactional call goes to the id's transaction coordinator (FindCoordinator),
  so it works on a multi-broker cluster; ListTransactions asks every broker, since each
  lists only the ids it coordinates.
- Retriable answers (CONCURRENT_TRANSACTIONS while markers are written,
  COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR, a broker that went away) are retried
  with a fresh coordinator lookup until `timeout_s` runs out (then ClusterUnreachable):
  a broker restart in the middle of a commit is waited out, not failed.
- A cluster that does not offer InitProducerId v6, or refuses 2PC
  (TRANSACTIONAL_ID_AUTHORIZATION_FAILED: `transaction.two.phase.commit.enable` is off),
  raises `TwoPhaseCommitUnavailable` with one line saying what to do.
"""

from __future__ import annotations

import datetime
import re
import time
from dataclasses import dataclass
from typing import Self

from kio.schema.errors import ErrorCode

from oncelog.client.cluster import TRANSACTION_COORDINATOR, Cluster, shared_cluster
from oncelog.client.config import ClientConfig
from oncelog.client.errors import BrokerError, NoAnswer, UnsupportedVersion
from oncelog.protocol.messages import RequestBuilder
from oncelog.spark.errors import ClusterUnreachable, TwoPhaseCommitUnavailable, TwoPhaseError

INIT_PRODUCER_ID_KEY = 22
END_TXN_KEY = 26
LIST_TRANSACTIONS_KEY = 66
TWO_PHASE_VERSION = 6

NO_TWO_PHASE_COMMIT = (
    "mode=batch needs an oncelog broker with transaction.two.phase.commit.enable=true "
    "(KIP-939 InitProducerId v6); use mode=partition against other Kafka clusters"
)


@dataclass(frozen=True)
class KeptTransaction:
    """InitProducerId v6 keepPrepared's answer: the id's new producer id and epoch (the
    caller now owns it) and the transaction that was left open, (-1, -1) when none."""

    producer_id: int
    producer_epoch: int
    ongoing_producer_id: int
    ongoing_producer_epoch: int

    @property
    def has_ongoing(self) -> bool:
        return self.ongoing_producer_id >= 0


@dataclass(frozen=True)
class DescribedTransaction:
    transactional_id: str
    state: str  # Kafka's names: Empty, Ongoing, PrepareCommit, CompleteCommit, ...; "" if unknown
    producer_id: int


class TwoPhaseClient:
    """KIP-939 calls against one cluster (`kafka.bootstrap.servers`, or a ClientConfig).
    The connections are the process's (`shared_cluster`); `close()` leaves them open."""

    def __init__(self, cluster: str | ClientConfig, timeout_s: float = 60.0) -> None:
        config = cluster if isinstance(cluster, ClientConfig) else ClientConfig.from_settings(cluster)
        self.cluster: Cluster = shared_cluster(config)
        self.timeout_s = timeout_s

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        """Nothing to release: the connections stay with the process for the next caller."""

    def _retrying(self, what: str, call):
        try:
            return self.cluster.retrying(what, time.monotonic() + self.timeout_s, call)
        except NoAnswer as error:
            raise ClusterUnreachable(str(error)) from None
        except BrokerError as error:
            raise TwoPhaseError(str(error)) from None

    # -- discovery --------------------------------------------------------------------------

    def check_two_phase_commit(self) -> None:
        """Raise TwoPhaseCommitUnavailable unless InitProducerId v6 is offered."""
        connection = self._retrying("ApiVersions", self.cluster.any_connection)
        try:
            connection.version(INIT_PRODUCER_ID_KEY, TWO_PHASE_VERSION, TWO_PHASE_VERSION)
        except UnsupportedVersion:
            raise TwoPhaseCommitUnavailable(NO_TWO_PHASE_COMMIT) from None

    def _coordinator_request(self, coordinator_key: str, api_key: int, version: int, class_name: str,
                             **fields):
        """A request to the coordinator of transactional id `coordinator_key`."""
        connection = self.cluster.coordinator(coordinator_key, TRANSACTION_COORDINATOR)
        connection.version(api_key, version, version)  # UnsupportedVersion when it does not speak it
        request = RequestBuilder(api_key, version).make(class_name, **fields)
        response = connection.request(request)
        if response.error_code in (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available):
            self.cluster.forget_coordinator(coordinator_key, TRANSACTION_COORDINATOR)
        return response

    # -- KIP-939 ----------------------------------------------------------------------------

    def keep_prepared(self, transactional_id: str) -> KeptTransaction:
        """InitProducerId v6 (enable2Pc, keepPreparedTxn): take ownership of the id under a new
        epoch (fencing whoever wrote its open transaction), keeping that transaction open
        and without a timeout."""

        def call():
            try:
                response = self._coordinator_request(
                    transactional_id, INIT_PRODUCER_ID_KEY, TWO_PHASE_VERSION, "InitProducerIdRequest",
                    transactional_id=transactional_id, transaction_timeout=datetime.timedelta(minutes=15),
                    producer_id=-1, producer_epoch=-1, enable2_pc=True, keep_prepared_txn=True,
                )
            except UnsupportedVersion:
                raise TwoPhaseCommitUnavailable(NO_TWO_PHASE_COMMIT) from None
            if response.error_code == ErrorCode.transactional_id_authorization_failed:
                raise TwoPhaseCommitUnavailable(NO_TWO_PHASE_COMMIT)
            _check(response.error_code, f"InitProducerId(keepPreparedTxn) of {transactional_id!r}")
            return KeptTransaction(
                int(response.producer_id), int(response.producer_epoch),
                int(response.ongoing_txn_producer_id), int(response.ongoing_txn_producer_epoch),
            )

        return self._retrying(f"InitProducerId(keepPreparedTxn) of {transactional_id!r}", call)

    def end(self, transactional_id: str, producer_id: int, producer_epoch: int, *, commit: bool) -> None:
        """EndTxn v3 as the id's current owner (the epoch keep_prepared returned)."""
        what = f"EndTxn({'commit' if commit else 'abort'}) of {transactional_id!r}"

        def call():
            response = self._coordinator_request(
                transactional_id, END_TXN_KEY, 3, "EndTxnRequest", transactional_id=transactional_id,
                producer_id=producer_id, producer_epoch=producer_epoch, committed=commit,
            )
            _check(response.error_code, what)

        self._retrying(what, call)

    def describe(self, transactional_id: str) -> DescribedTransaction:
        """The coordinator's state and producer id for one id; state "" when it does not know
        the id. Asked with ListTransactions v2 (the id as an escaped pattern) at the id's
        coordinator: DescribeTransactions answers carry start times kio cannot decode
        (-1) for ids without a transaction."""
        what = f"ListTransactions for {transactional_id!r}"

        def call():
            response = self._coordinator_request(
                transactional_id, LIST_TRANSACTIONS_KEY, 2, "ListTransactionsRequest", state_filters=(),
                producer_id_filters=(), duration_filter=-1, transactional_id_pattern=re.escape(transactional_id),
            )
            _check(response.error_code, what)
            for state in response.transaction_states:
                if state.transactional_id == transactional_id:
                    return DescribedTransaction(transactional_id, state.transaction_state, int(state.producer_id))
            return DescribedTransaction(transactional_id, "", -1)

        return self._retrying(what, call)

    def wait_complete(self, transactional_id: str) -> str:
        """Wait until the id's transaction is no longer Prepare*: its markers are in every
        partition. Returns the final state name."""

        def call():
            described = self.describe(transactional_id)
            if described.state in ("PrepareCommit", "PrepareAbort", "PrepareEpochFence"):
                raise BrokerError(ErrorCode.concurrent_transactions, f"markers of {transactional_id!r}")
            return described.state

        return self._retrying(f"waiting for the markers of {transactional_id!r}", call)

    def list_ongoing(self, pattern: str) -> list[str]:
        """Ids whose whole name matches `pattern` (ListTransactions v2) with an Ongoing
        transaction, from every broker of the cluster."""

        def call():
            self.cluster.refresh_metadata(())
            found: set[str] = set()
            for node_id in sorted(self.cluster.brokers):
                connection = self.cluster.connection(node_id)
                request = RequestBuilder(LIST_TRANSACTIONS_KEY, 2).make(
                    "ListTransactionsRequest", state_filters=("Ongoing",), producer_id_filters=(),
                    duration_filter=-1, transactional_id_pattern=pattern,
                )
                response = connection.request(request)
                _check(response.error_code, f"ListTransactions on broker {node_id}")
                found.update(state.transactional_id for state in response.transaction_states)
            return sorted(found)

        return self._retrying("ListTransactions", call)


def _check(code: int, what: str) -> None:
    if code != ErrorCode.none:
        raise BrokerError(ErrorCode(code), what)

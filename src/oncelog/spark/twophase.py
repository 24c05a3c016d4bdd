"""The KIP-939 calls the sink's batch mode makes on the wire: hand a client's open
transaction over (InitProducerId v6 with enable2Pc and keepPreparedTxn), end it later
from another process (EndTxn), and find transactions (ListTransactions v2). Standard clients have no API for these, so they go through
`oncelog.protocol.client.WireClient`.

- Every transactional call goes to the id's transaction coordinator, found with
  FindCoordinator (key type 1), so it works on a multi-broker cluster; ListTransactions
  asks every broker, since each lists only the ids it coordinates.
- Retriable answers (CONCURRENT_TRANSACTIONS while markers are written,
  COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR, a broker that went away) are retried
  with a fresh coordinator lookup until `timeout_s` runs out: a broker restart in the
  middle of a commit is waited out, not failed.
- A cluster that does not offer InitProducerId v6, or refuses 2PC
  (TRANSACTIONAL_ID_AUTHORIZATION_FAILED: `transaction.two.phase.commit.enable` is off),
  raises `TwoPhaseCommitUnavailable` with one line saying what to do.
- Plaintext listeners only: this client speaks no TLS or SASL (the oncelog broker offers
  neither yet).
"""

from __future__ import annotations

import datetime
import re
import time
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from oncelog.protocol.client import WireClient
from oncelog.spark.errors import ClusterUnreachable, TwoPhaseCommitUnavailable, TwoPhaseError

INIT_PRODUCER_ID_KEY = 22
TWO_PHASE_VERSION = 6
TRANSACTION_COORDINATOR = 1  # FindCoordinator key type

_RETRIABLE = {
    ErrorCode.concurrent_transactions,
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.not_coordinator,
    ErrorCode.coordinator_not_available,
    ErrorCode.request_timed_out,
    ErrorCode.network_exception,
}

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
    """KIP-939 calls against one cluster. Not picklable: create it where it is used."""

    def __init__(self, bootstrap_servers: str, timeout_s: float = 60.0) -> None:
        self.bootstrap = [server.strip() for server in bootstrap_servers.split(",") if server.strip()]
        self.bootstrap_servers = bootstrap_servers
        self.timeout_s = timeout_s
        self._connections: dict[str, WireClient] = {}
        self._coordinators: dict[str, str] = {}

    # -- connections ------------------------------------------------------------------------

    def _connect(self, address: str) -> WireClient:
        client = self._connections.get(address)
        if client is None:
            client = WireClient.connect(address, timeout=min(10.0, self.timeout_s))
            self._connections[address] = client
        return client

    def _drop(self, address: str) -> None:
        client = self._connections.pop(address, None)
        if client is not None:
            client.close()
        for transactional_id, coordinator in list(self._coordinators.items()):
            if coordinator == address:
                del self._coordinators[transactional_id]

    def _request_any(self, entity):
        """Send to the first bootstrap server that answers."""
        last_error: Exception | None = None
        for address in self.bootstrap:
            try:
                return self._connect(address).request(entity)
            except OSError as error:
                self._drop(address)
                last_error = error
        raise ConnectionError(f"no answer from kafka.bootstrap.servers={self.bootstrap_servers}: {last_error}")

    def _retrying(self, what: str, call):
        """Run `call()` until it returns a value, retrying connection errors and
        retriable codes (call returns an ErrorCode to ask for a retry) until the deadline."""
        deadline = time.monotonic() + self.timeout_s
        delay = 0.02
        while True:
            try:
                outcome = call()
            except OSError as error:  # ConnectionError, timeouts, refused: the broker went away
                outcome = error
            if not isinstance(outcome, (ErrorCode, OSError)):
                return outcome
            if isinstance(outcome, ErrorCode) and outcome not in _RETRIABLE:
                raise TwoPhaseError(f"{what} failed with {outcome.name}")
            if time.monotonic() >= deadline:
                detail = outcome.name if isinstance(outcome, ErrorCode) else str(outcome)
                raise ClusterUnreachable(
                    f"{what} did not succeed within {self.timeout_s:.0f}s on "
                    f"kafka.bootstrap.servers={self.bootstrap_servers}: {detail}"
                )
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    def close(self) -> None:
        for address in list(self._connections):
            self._drop(address)

    def __enter__(self) -> TwoPhaseClient:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # -- discovery --------------------------------------------------------------------------

    def check_two_phase_commit(self) -> None:
        """Raise TwoPhaseCommitUnavailable unless InitProducerId v6 is offered."""
        from kio.schema.api_versions.v3.request import ApiVersionsRequest

        def call():
            response = self._request_any(
                ApiVersionsRequest(client_software_name="oncelog-spark-sink", client_software_version="1")
            )
            if response.error_code != ErrorCode.none:
                return response.error_code
            return response

        response = self._retrying("ApiVersions", call)
        for api in response.api_keys:
            if api.api_key == INIT_PRODUCER_ID_KEY:
                if api.max_version >= TWO_PHASE_VERSION:
                    return
                break
        raise TwoPhaseCommitUnavailable(NO_TWO_PHASE_COMMIT)

    def _coordinator(self, transactional_id: str) -> str:
        known = self._coordinators.get(transactional_id)
        if known is not None:
            return known
        from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest

        response = self._request_any(FindCoordinatorRequest(key=transactional_id, key_type=TRANSACTION_COORDINATOR))
        if response.error_code != ErrorCode.none:
            raise _Retry(response.error_code)
        address = f"{response.host}:{response.port}"
        self._coordinators[transactional_id] = address
        return address

    def _to_coordinator(self, transactional_id: str, entity):
        """The id's coordinator's response when its error code is NONE, else the ErrorCode
        (which `_retrying` retries when retriable). A coordinator that says it no longer is
        one is forgotten, so the retry looks it up again."""
        try:
            address = self._coordinator(transactional_id)
        except _Retry as retry:
            return retry.error
        try:
            response = self._connect(address).request(entity)
        except OSError:
            self._drop(address)
            raise
        if response.error_code in (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available):
            self._coordinators.pop(transactional_id, None)
        if response.error_code != ErrorCode.none:
            return ErrorCode(response.error_code)
        return response

    def _brokers(self) -> list[str]:
        from kio.schema.metadata.v8.request import MetadataRequest

        response = self._request_any(MetadataRequest(
            topics=(), allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        ))
        return [f"{broker.host}:{broker.port}" for broker in response.brokers]

    # -- KIP-939 ----------------------------------------------------------------------------

    def keep_prepared(self, transactional_id: str) -> KeptTransaction:
        """InitProducerId v6 (enable2Pc, keepPreparedTxn): take ownership of the id under a new
        epoch (fencing whoever wrote its open transaction), keeping that transaction open
        and without a timeout."""
        from kio.schema.init_producer_id.v6.request import InitProducerIdRequest

        request = InitProducerIdRequest(
            transactional_id=transactional_id, transaction_timeout=datetime.timedelta(minutes=15),
            producer_id=-1, producer_epoch=-1, enable2_pc=True, keep_prepared_txn=True,
        )

        def call():
            response = self._to_coordinator(transactional_id, request)
            if response == ErrorCode.transactional_id_authorization_failed:
                raise TwoPhaseCommitUnavailable(NO_TWO_PHASE_COMMIT)
            if isinstance(response, ErrorCode):
                return response
            return KeptTransaction(
                response.producer_id, response.producer_epoch,
                response.ongoing_txn_producer_id, response.ongoing_txn_producer_epoch,
            )

        return self._retrying(f"InitProducerId(keepPreparedTxn) of {transactional_id!r}", call)

    def end(self, transactional_id: str, producer_id: int, producer_epoch: int, *, commit: bool) -> None:
        """EndTxn v3 as the id's current owner (the epoch keep_prepared returned)."""
        from kio.schema.end_txn.v3.request import EndTxnRequest

        request = EndTxnRequest(
            transactional_id=transactional_id, producer_id=producer_id, producer_epoch=producer_epoch,
            committed=commit,
        )

        def call():
            response = self._to_coordinator(transactional_id, request)
            return response if isinstance(response, ErrorCode) else True

        self._retrying(f"EndTxn({'commit' if commit else 'abort'}) of {transactional_id!r}", call)

    def describe(self, transactional_id: str) -> DescribedTransaction:
        """The coordinator's state and producer id for one id; state "" when it does not know
        the id. Asked with ListTransactions v2 (the id as an escaped pattern) at the id's
        coordinator: DescribeTransactions answers carry start times kio cannot decode
        (-1) for ids without a transaction."""
        from kio.schema.list_transactions.v2.request import ListTransactionsRequest

        request = ListTransactionsRequest(
            state_filters=(), producer_id_filters=(), duration_filter=-1,
            transactional_id_pattern=re.escape(transactional_id),
        )

        def call():
            response = self._to_coordinator(transactional_id, request)
            if isinstance(response, ErrorCode):
                return response
            for state in response.transaction_states:
                if state.transactional_id == transactional_id:
                    return DescribedTransaction(transactional_id, state.transaction_state, state.producer_id)
            return DescribedTransaction(transactional_id, "", -1)

        return self._retrying(f"ListTransactions for {transactional_id!r}", call)

    def wait_complete(self, transactional_id: str) -> str:
        """Wait until the id's transaction is no longer Ongoing/Prepare*: its markers are in
        every partition. Returns the final state name."""

        def call():
            described = self.describe(transactional_id)
            if described.state in ("PrepareCommit", "PrepareAbort", "PrepareEpochFence"):
                return ErrorCode.concurrent_transactions
            return described.state

        return self._retrying(f"waiting for the markers of {transactional_id!r}", call)

    def list_ongoing(self, pattern: str) -> list[str]:
        """Ids whose whole name matches `pattern` (ListTransactions v2) with an Ongoing
        transaction, from every broker of the cluster."""
        from kio.schema.list_transactions.v2.request import ListTransactionsRequest

        request = ListTransactionsRequest(
            state_filters=("Ongoing",), producer_id_filters=(), duration_filter=-1,
            transactional_id_pattern=pattern,
        )

        def call():
            found: set[str] = set()
            for address in self._brokers():
                try:
                    response = self._connect(address).request(request)
                except OSError:
                    self._drop(address)
                    raise
                if response.error_code != ErrorCode.none:
                    return response.error_code
                found.update(state.transactional_id for state in response.transaction_states)
            return sorted(found)

        return self._retrying("ListTransactions", call)


class _Retry(Exception):
    def __init__(self, error: ErrorCode) -> None:
        super().__init__(error.name)
        self.error = error

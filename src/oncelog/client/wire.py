"""The Kafka protocol spoken directly, for the commands standard clients serve badly or
not at all (`oncelog transactions`, `oncelog producers`, `oncelog configs`, and the
consumer's coordinator check):
`Cluster` holds connections to one cluster's brokers by node id, made from the same
connection options as every other command (`--bootstrap-server`, `--command-config`,
`-X`, `$ONCELOG_BOOTSTRAP`).

The connections are oncelog's client's (oncelog.client.connection): PLAINTEXT, SSL,
SASL_PLAINTEXT and SASL_SSL, with the client properties every command takes
(oncelog.client.config): `security.protocol`, `ssl.ca.location`,
`ssl.certificate.location`, `ssl.key.location`, `ssl.key.password`,
`ssl.endpoint.identification.algorithm`, `enable.ssl.certificate.verification`,
`sasl.mechanism` (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER), `sasl.username`,
`sasl.password`, `sasl.oauthbearer.config`, or Java's `sasl.jaas.config`. Also
`bootstrap.servers`, `client.id`, `socket.connection.setup.timeout.ms` and
`request.timeout.ms` (how long to wait for each answer; Kafka's admin client default,
30000). Every property is first checked as librdkafka checks it (a misspelt key is an
error); the others have no further effect here. A client certificate or CA that only
librdkafka can read (`ssl.keystore.location`, the inline `*.pem` ones) is refused rather
than left out of the handshake.

A refused login, a failed TLS handshake and a broker that does not answer are each one
line (a CommandError); an authorization failure is the broker's error code, reported by
the command that asked.
"""

# No `from __future__ import annotations`: kio reads the field types of the response
# classes below at run time.
import dataclasses
import ssl
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Self

from kio.schema.describe_producers.v0.request import DescribeProducersRequest
from kio.schema.describe_producers.v0.request import TopicRequest as DescribeProducersTopic
from kio.schema.describe_transactions.v0 import response as describe_transactions_v0
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
from kio.schema.list_transactions.v1.request import ListTransactionsRequest
from kio.schema.list_transactions.v1.response import TransactionState as ListedTransaction
from kio.schema.metadata.v4.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import ProducerId, TopicName, TransactionalId
from kio.serial import entity_reader
from kio.static.primitive import i8, i16, i32, i64
from kio.static.protocol import Entity

from oncelog.client.config import ClientConfig, ConfigError
from oncelog.client.connection import Connection
from oncelog.client.errors import AuthenticationFailed, ConnectionLost, UnsupportedVersion
from oncelog.errors import CommandError
from oncelog.names import TopicPartition
from oncelog.protocol import framing

GROUP_COORDINATOR, TRANSACTION_COORDINATOR = 0, 1  # FindCoordinator key_type
DEFAULT_REQUEST_TIMEOUT_MS = 30_000  # Kafka's request.timeout.ms for admin clients
COORDINATOR_RETRY_S = 0.25
# While __transaction_state is being created or loaded (5 s); a group consumer waits as
# long as a command waits for its cluster (clients.CONNECT_TIMEOUT_S).
TRANSACTION_COORDINATOR_WAIT_S = 5.0
SECURITY_CHECK_TIMEOUT_S = 5.0  # check_security's wait for each answer
RETRIABLE_COORDINATOR_ERRORS = frozenset({
    ErrorCode.coordinator_not_available,
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.not_coordinator,
})

# Certificates and keys librdkafka reads and oncelog's client does not (it takes PEM files):
# refused, so that a connection never leaves out a certificate the user gave.
LIBRDKAFKA_ONLY_TLS_SETTINGS = ("ssl.keystore.location", "ssl.certificate.pem", "ssl.key.pem", "ssl.ca.pem",
                                "ssl.crl.location")


@dataclass(frozen=True, slots=True)
class WireSettings:
    bootstrap: str
    request_timeout_s: float
    properties: Mapping[str, str]  # every client property given, for ClientConfig.from_settings




# -- talking to the cluster -----------------------------------------------------------------


# DescribeTransactions v0 with transaction_start_time read as plain int64 milliseconds:
# kio 0.6.5 reads it as a datetime and refuses -1, which Kafka (and oncelog) send for an
# id with no transaction in progress. Same wire layout as kio's classes.
_DT = describe_transactions_v0


@dataclass(frozen=True, slots=True, kw_only=True)
class TransactionStateV0:
    __type__: ClassVar = _DT.TransactionState.__type__
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(65)
    __header_schema__: ClassVar = _DT.ResponseHeader
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    transactional_id: str = field(metadata={"kafka_type": "string"})
    transaction_state: str = field(metadata={"kafka_type": "string"})
    transaction_timeout: _DT.i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    transaction_start_time: i64 = field(metadata={"kafka_type": "int64"})
    producer_id: i64 = field(metadata={"kafka_type": "int64"})
    producer_epoch: i16 = field(metadata={"kafka_type": "int16"})
    topics: tuple[_DT.TopicData, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeTransactionsResponseV0:
    __type__: ClassVar = _DT.DescribeTransactionsResponse.__type__
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(65)
    __header_schema__: ClassVar = _DT.ResponseHeader
    throttle_time: _DT.i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    transaction_states: tuple[TransactionStateV0, ...]


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...]


class Cluster:
    """Connections to the brokers of one cluster, opened on first use, by node id.
    `properties`: the client properties (security settings, client.id) of every
    connection; PLAINTEXT when there are none."""

    def __init__(self, bootstrap: str, *, request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_MS / 1000,
                 properties: Mapping[str, str] | None = None) -> None:
        try:
            config = ClientConfig.from_settings(bootstrap, properties or {})
        except ConfigError as error:
            raise CommandError(f"invalid client configuration: {error}") from None
        # request.timeout.ms bounds every answer, as Kafka's admin client does.
        self.config = dataclasses.replace(config, request_timeout_s=request_timeout_s)
        self.request_timeout_s = request_timeout_s
        self._bootstrap_servers = bootstrap
        self._bootstrap: Connection | None = None
        self._clients: dict[int, Connection] = {}
        self.brokers: dict[int, tuple[str, int]] = {}

    def close(self) -> None:
        for connection in (self._bootstrap, *self._clients.values()):
            if connection is not None:
                connection.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def request(self, entity, node_id: int | None = None, response_class: type[Entity] | None = None):
        """The response to `entity` from broker `node_id` (None: a bootstrap server),
        decoded with `response_class` when given (the same wire layout as kio's)."""
        api = _api_name(entity)
        connection = self._bootstrap_connection(api) if node_id is None else self._client(node_id, api)
        try:
            if response_class is None:
                return connection.request(entity)
            frame = connection.receive(connection.send(entity, raw=True)).toreadonly()  # kio reads read-only
            position = framing.skip_tagged_fields(frame, 0) if response_class.__flexible__ else 0
            response, _ = entity_reader(response_class)(frame, position)
            return response
        except ConnectionLost as error:
            if isinstance(error.__context__, TimeoutError):
                raise self._no_answer(connection.address, api) from None
            raise CommandError(f"{api} to {connection.address} failed: {error}") from None

    def connect(self) -> None:
        """Connect to a bootstrap server now rather than on the first request: TLS, ApiVersions
        and SASL, each failure its one-line CommandError."""
        self._bootstrap_connection("ApiVersions")

    def _bootstrap_connection(self, api: str) -> Connection:
        """A connection to the first bootstrap server that takes one (TCP), as before any
        request; a server that refuses the connection is passed over for the next."""
        if self._bootstrap is not None and not self._bootstrap.closed:
            return self._bootstrap
        unreachable = []
        for address in self.config.bootstrap_servers:
            try:
                self._bootstrap = self._connect(address, -1, api)
                return self._bootstrap
            except _Unreachable as error:
                unreachable.append(f"{address}: {error}")
        raise CommandError(f"cannot connect to {self._bootstrap_servers}: {'; '.join(unreachable)}")

    def _client(self, node_id: int, api: str) -> Connection:
        connection = self._clients.get(node_id)
        if connection is None or connection.closed:
            if node_id not in self.brokers:
                self.metadata(())
            if node_id not in self.brokers:
                raise CommandError(f"broker {node_id} is not in the cluster's metadata")
            host, port = self.brokers[node_id]
            try:
                connection = self._clients[node_id] = self._connect(f"{host}:{port}", node_id, api)
            except _Unreachable as error:
                raise CommandError(f"cannot connect to broker {node_id} at {host}:{port}: {error}") from None
        return connection

    def _connect(self, address: str, node_id: int, api: str) -> Connection:
        """A connection, TLS and SASL done (the `api` request waits for it). _Unreachable
        when the TCP connection itself fails, SecurityFailure when TLS or the login does;
        any other failure is a CommandError."""
        try:
            return Connection(address, self.config, node_id)
        except AuthenticationFailed as error:
            raise SecurityFailure(f"authentication failed: {error}") from None
        except UnsupportedVersion as error:
            raise CommandError(str(error)) from None
        except ConnectionLost as error:
            # Connection says which step failed only in its message: connecting, the TLS
            # handshake (its own one line), or an answer (ApiVersions, SASL) after that.
            message = str(error)
            prefix = f"cannot connect to {address}: "
            if message.startswith(prefix):
                reason = getattr(error.__context__, "strerror", None) or message.removeprefix(prefix)
                raise _Unreachable(reason) from None
            if message.startswith("TLS handshake"):
                raise SecurityFailure(message) from None
            if isinstance(error.__context__, ssl.SSLError):  # TLS 1.3: a refused client certificate comes later
                raise SecurityFailure(f"TLS handshake with {address} failed: {error.__context__}") from None
            closed = message.endswith("closed the connection") or isinstance(
                error.__context__, (ConnectionResetError, BrokenPipeError))
            if self.config.uses_tls and closed:
                # As a broker refuses a client certificate (or its absence) under TLS 1.3.
                certificate = self.config.ssl_certificate_location
                question = (f"does it trust the client certificate {certificate}?" if certificate else
                            "does the listener require a client certificate (ssl.certificate.location, "
                            "ssl.key.location)?")
                raise SecurityFailure(f"TLS with {address} failed: the broker closed the connection after the "
                                      f"handshake; {question}") from None
            if isinstance(error.__context__, TimeoutError):
                raise self._no_answer(address, api) from None
            raise CommandError(f"{api} to {address} failed: {message}") from None

    def _no_answer(self, address: str, api: str) -> CommandError:
        return CommandError(f"no answer from {address} within {self.request_timeout_s:g}s to {api} "
                            "(request.timeout.ms)")

    def metadata(self, topics: Iterable[str] | None) -> dict[str, list[PartitionInfo]]:
        """Partitions by topic (all topics when `topics` is None); also learns the brokers.
        An unknown topic is a CommandError."""
        request = MetadataRequest(
            topics=None if topics is None else tuple(MetadataRequestTopic(name=TopicName(t)) for t in topics),
            allow_auto_topic_creation=False,  # v1-v3 would create a misspelt topic
        )
        response = self.request(request)
        self.brokers = {b.node_id: (b.host, b.port) for b in response.brokers}
        found = {}
        for topic in response.topics:
            if topic.error_code != ErrorCode.none:
                raise CommandError(f"topic {topic.name!r}: {describe_error(topic.error_code)}")
            found[topic.name] = sorted(
                (PartitionInfo(topic.name, p.partition_index, p.leader_id, tuple(p.replica_nodes))
                 for p in topic.partitions),
                key=lambda info: info.partition,
            )
        return found

    def partition(self, topic: str, partition: int) -> PartitionInfo:
        for info in self.metadata([topic])[topic]:
            if info.partition == partition:
                return info
        raise CommandError(f"partition {topic}-{partition} does not exist")

    def transaction_coordinator(self, transactional_id: str) -> int:
        return self.coordinator(transactional_id, TRANSACTION_COORDINATOR, TRANSACTION_COORDINATOR_WAIT_S)

    def coordinator(self, key: str, key_type: int, wait_s: float) -> int:
        """The node id of the coordinator of a group (key_type 0) or transactional id (1),
        asking again for `wait_s` while the broker answers with a retriable error (the
        internal topic being created, loaded or moved). Otherwise a CommandError that
        carries the broker's own explanation (FindCoordinator's error message)."""
        deadline = time.monotonic() + wait_s
        while True:
            response = self.request(FindCoordinatorRequest(key=key, key_type=i8(key_type)))
            if response.error_code == ErrorCode.none:
                self.brokers[response.node_id] = (response.host, response.port)
                return response.node_id
            if response.error_code not in RETRIABLE_COORDINATOR_ERRORS or time.monotonic() >= deadline:
                break
            time.sleep(COORDINATOR_RETRY_S)
        what = f"group {key!r}" if key_type == GROUP_COORDINATOR else f"transactional id {key!r}"
        kind = "group" if key_type == GROUP_COORDINATOR else "transaction"
        explanation = describe_error(response.error_code)
        if response.error_message and response.error_message.upper() != explanation:
            explanation = f"{explanation}: {response.error_message}"
        raise CommandError(f"no {kind} coordinator for {what}: {explanation}")

    def describe_producers(self, partitions: Iterable[PartitionInfo]) -> dict[TopicPartition, tuple]:
        """Active producers by partition, asking each partition's leader."""
        by_leader: dict[int, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
        for info in partitions:
            by_leader[info.leader][info.topic].append(info.partition)
        found = {}
        for leader, topics in by_leader.items():
            response = self.request(
                DescribeProducersRequest(topics=tuple(
                    DescribeProducersTopic(name=TopicName(topic), partition_indexes=tuple(map(i32, indexes)))
                    for topic, indexes in topics.items()
                )),
                leader,
            )
            for topic in response.topics:
                for partition in topic.partitions:
                    if partition.error_code != ErrorCode.none:
                        raise CommandError(
                            f"cannot describe the producers of {topic.name}-{partition.partition_index}: "
                            f"{partition.error_message or describe_error(partition.error_code)}"
                        )
                    found[(topic.name, partition.partition_index)] = partition.active_producers
        return found

    def list_transactions(self, producer_ids: Iterable[int] = ()) -> list[tuple[int, ListedTransaction]]:
        """(coordinator node id, listing) from every broker, as Kafka's admin client does."""
        if not self.brokers:
            self.metadata(())
        listings = []
        for node_id in sorted(self.brokers):
            request = ListTransactionsRequest(producer_id_filters=tuple(map(ProducerId, producer_ids)))
            response = self.request(request, node_id)
            if response.error_code != ErrorCode.none:
                raise CommandError(
                    f"ListTransactions on broker {node_id} failed: {describe_error(response.error_code)}"
                )
            listings += [(node_id, state) for state in response.transaction_states]
        return listings

    def describe_transaction(self, transactional_id: str):
        """(coordinator node id, the DescribeTransactions entry); its error_code says
        TRANSACTIONAL_ID_NOT_FOUND for an id the coordinator does not know."""
        coordinator = self.transaction_coordinator(transactional_id)
        request = DescribeTransactionsRequest(transactional_ids=(TransactionalId(transactional_id),))
        response = self.request(request, coordinator, DescribeTransactionsResponseV0)
        (state,) = response.transaction_states
        return coordinator, state


ERROR_TEXT = {
    ErrorCode.unknown_topic_or_partition: "no such topic or partition",
    ErrorCode.transactional_id_not_found: "not found",
}


class _Unreachable(Exception):
    """The TCP connection to a broker failed; the message is the reason."""


class SecurityFailure(CommandError):
    """The TLS handshake or the SASL login with a broker failed."""


def check_security(bootstrap: str, properties: Mapping[str, str]) -> None:
    """For the commands on librdkafka, which reports a refused login or a failed TLS
    handshake only in its log, and then as an unreachable broker: connect to a bootstrap
    server as `properties` say, with oncelog's client, and raise the SecurityFailure if
    there is one. Nothing when the client cannot tell (settings only librdkafka takes, a
    broker it cannot reach either): librdkafka's own error stands."""
    if properties.get("security.protocol", "PLAINTEXT").upper() == "PLAINTEXT":
        return
    if any(key in properties for key in LIBRDKAFKA_ONLY_TLS_SETTINGS):
        return
    try:
        with Cluster(bootstrap, request_timeout_s=SECURITY_CHECK_TIMEOUT_S, properties=properties) as cluster:
            cluster.connect()
    except SecurityFailure:
        raise
    except CommandError:
        pass


def describe_error(code: ErrorCode) -> str:
    """Kafka's error name, after a few words where the name alone is cryptic."""
    name = code.name.upper()
    return f"{ERROR_TEXT[code]} ({name})" if code in ERROR_TEXT else name


def _api_name(entity) -> str:
    """`DescribeProducers` for a DescribeProducersRequest: Kafka's name of the API."""
    return type(entity).__name__.removesuffix("Request")

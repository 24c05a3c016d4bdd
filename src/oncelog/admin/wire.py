"""The Kafka protocol spoken directly, for the commands standard clients serve badly or
not at all (`oncelog transactions`, `oncelog producers`, `oncelog configs`, and the
consumer's coordinator check):
`Cluster` holds connections to one cluster's brokers by node id, made from the same
connection options as every other command (`--bootstrap-server`, `--command-config`,
`-X`, `$ONCELOG_BOOTSTRAP`).

Of the client properties, these commands use `bootstrap.servers`, `client.id` and
`request.timeout.ms` (how long to wait for each answer; Kafka's admin client default,
30000). The others are checked as librdkafka checks them (a misspelt key is an error)
and have no further effect; `security.protocol` must be PLAINTEXT, the only listener
oncelog has.
"""

# No `from __future__ import annotations`: kio reads the field types of the response
# classes below at run time.
import argparse
import struct
import time
from collections import defaultdict
from collections.abc import Iterable
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

from oncelog.errors import CommandError
from oncelog.names import TopicPartition
from oncelog.protocol import framing
from oncelog.protocol.client import WireClient, encode_request

GROUP_COORDINATOR, TRANSACTION_COORDINATOR = 0, 1  # FindCoordinator key_type
DEFAULT_REQUEST_TIMEOUT_MS = 30_000  # Kafka's request.timeout.ms for admin clients
COORDINATOR_RETRY_S = 0.25
# While __transaction_state is being created or loaded (5 s); a group consumer waits as
# long as a command waits for its cluster (clients.CONNECT_TIMEOUT_S).
TRANSACTION_COORDINATOR_WAIT_S = 5.0
RETRIABLE_COORDINATOR_ERRORS = frozenset({
    ErrorCode.coordinator_not_available,
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.not_coordinator,
})




@dataclass(frozen=True, slots=True)
class WireSettings:
    bootstrap: str
    client_id: str
    request_timeout_s: float


def wire_settings(args: argparse.Namespace) -> WireSettings:
    """The connection options of a wire-protocol command, resolved as for every command."""
    from confluent_kafka.admin import AdminClient

    from oncelog.admin.clients import client_config, make_client

    config = client_config(args)
    protocol = str(config.get("security.protocol", "PLAINTEXT"))
    if protocol.upper() != "PLAINTEXT":
        raise CommandError(f"security.protocol={protocol}: only PLAINTEXT is supported")
    try:
        timeout_ms = int(config.get("request.timeout.ms", DEFAULT_REQUEST_TIMEOUT_MS))
    except ValueError:
        timeout_ms = 0
    if timeout_ms <= 0:
        raise CommandError(f"request.timeout.ms must be a positive number of milliseconds, "
                           f"got {config['request.timeout.ms']!r}")
    make_client(AdminClient, config)  # librdkafka's check of every property; no connection is made
    return WireSettings(str(config["bootstrap.servers"]), str(config["client.id"]), timeout_ms / 1000)


# -- talking to the cluster -----------------------------------------------------------------


class _WireClient(WireClient):
    def __init__(self, host: str, port: int, timeout: float = 10.0) -> None:
        super().__init__(host, port, timeout)
        self.address = f"{host}:{port}"
        self.timeout_s = timeout

    @classmethod
    def connect(cls, bootstrap: str, timeout: float = 10.0) -> "_WireClient":
        host, _, port = bootstrap.rpartition(":")
        return cls(host, int(port), timeout)

    def request_as(self, entity, response_class: type[Entity]):
        """As `request`, decoding the response with `response_class` (same wire layout)."""
        self._correlation += 1
        self.send_raw(encode_request(entity, self._correlation))
        frame = self.read_frame()
        (correlation,) = struct.unpack_from(">i", frame, 0)
        if correlation != self._correlation:
            raise ConnectionError(f"response correlation id {correlation}, expected {self._correlation}")
        position = framing.skip_tagged_fields(frame, 4) if response_class.__flexible__ else 4
        response, _ = entity_reader(response_class)(frame, position)
        return response


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
    """Connections to the brokers of one cluster, opened on first use, by node id."""

    def __init__(self, bootstrap: str, *, request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_MS / 1000) -> None:
        self.request_timeout_s = request_timeout_s
        connected: _WireClient | None = None
        errors = []
        for address in (a.strip() for a in bootstrap.split(",") if a.strip()):
            try:
                connected = _WireClient.connect(address, request_timeout_s)
                break
            except (OSError, ValueError) as error:
                errors.append(f"{address}: {getattr(error, 'strerror', None) or error}")
        if connected is None:
            raise CommandError(f"cannot connect to {bootstrap}: {'; '.join(errors) or 'no address given'}")
        self._bootstrap = connected
        self._clients: dict[int, _WireClient] = {}
        self.brokers: dict[int, tuple[str, int]] = {}

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "Cluster":
        """The cluster the command's connection options name."""
        settings = wire_settings(args)
        return cls(settings.bootstrap, request_timeout_s=settings.request_timeout_s)

    def close(self) -> None:
        for client in (self._bootstrap, *self._clients.values()):
            client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def request(self, entity, node_id: int | None = None, response_class: type[Entity] | None = None):
        client = self._bootstrap if node_id is None else self._client(node_id)
        try:
            if response_class is not None:
                return client.request_as(entity, response_class)
            return client.request(entity)
        except TimeoutError:
            raise CommandError(
                f"no answer from {client.address} within {client.timeout_s:g}s to {_api_name(entity)} "
                "(request.timeout.ms)"
            ) from None
        except (OSError, ConnectionError) as error:
            raise CommandError(f"{_api_name(entity)} to {client.address} failed: {error}") from None

    def _client(self, node_id: int) -> _WireClient:
        if node_id not in self._clients:
            if node_id not in self.brokers:
                self.metadata(())
            if node_id not in self.brokers:
                raise CommandError(f"broker {node_id} is not in the cluster's metadata")
            host, port = self.brokers[node_id]
            try:
                self._clients[node_id] = _WireClient(host, port, self.request_timeout_s)
            except OSError as error:
                raise CommandError(
                    f"cannot connect to broker {node_id} at {host}:{port}: {error.strerror or error}"
                ) from None
        return self._clients[node_id]

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


def describe_error(code: ErrorCode) -> str:
    """Kafka's error name, after a few words where the name alone is cryptic."""
    name = code.name.upper()
    return f"{ERROR_TEXT[code]} ({name})" if code in ERROR_TEXT else name


def _api_name(entity) -> str:
    """`DescribeProducers` for a DescribeProducersRequest: Kafka's name of the API."""
    return type(entity).__name__.removesuffix("Request")

"""One cluster as the client sees it: its brokers, the leader of each partition, the
coordinator of each group and transactional id, and a connection to each broker.

What `Cluster` owns:
- connections, one per broker, opened when first needed and dropped when they fail;
- the metadata it learned (brokers, partition counts and leaders), refreshed when a
  caller says an answer was stale (`forget_leader`, `forget_coordinator`);
- the coordinators FindCoordinator named.

`retrying()` is the loop every call runs in: connection failures and retriable error
codes are retried with a short, growing pause until the call's deadline, then a
`NoAnswer` names what was tried and the last error.

`shared_cluster()` keeps one `Cluster` per configuration in the process: a Spark Python
worker runs many tasks in turn, and each reuses the connections and metadata the
previous one left, instead of paying connection set-up and metadata round trips again.
Connections the broker closed while idle fail on first use and are reopened by the retry.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TypeVar

from kio.schema.errors import ErrorCode

from oncelog.client.config import ClientConfig
from oncelog.client.connection import Connection
from oncelog.client.errors import (
    STALE_COORDINATOR,
    BrokerError,
    ClientError,
    ConnectionLost,
    NoAnswer,
    raise_for,
)
from oncelog.protocol.messages import RequestBuilder

T = TypeVar("T")

METADATA_KEY = 3
FIND_COORDINATOR_KEY = 10
GROUP_COORDINATOR = 0
TRANSACTION_COORDINATOR = 1

FIRST_PAUSE_S = 0.005
LONGEST_PAUSE_S = 0.5


class UnknownTopic(ClientError):
    """Metadata says the topic (or partition) does not exist."""

    def __init__(self, topic: str, partition: int | None = None) -> None:
        where = topic if partition is None else f"{topic}-{partition}"
        super().__init__(f"{where} does not exist")
        self.topic = topic
        self.partition = partition


class Cluster:
    def __init__(self, config: ClientConfig) -> None:
        self.config = config
        self._connections: dict[int, Connection] = {}
        self._bootstrap: Connection | None = None
        self.brokers: dict[int, str] = {}
        self._partitions: dict[str, dict[int, int]] = {}  # topic -> partition -> leader id
        self._coordinators: dict[tuple[int, str], int] = {}

    # -- connections --------------------------------------------------------------------

    def connection(self, node_id: int) -> Connection:
        """An open connection to broker `node_id` (its address from the metadata)."""
        connection = self._connections.get(node_id)
        if connection is not None and not connection.closed:
            return connection
        address = self.brokers.get(node_id)
        if address is None:
            self.refresh_metadata(())
            address = self.brokers.get(node_id)
            if address is None:
                raise ConnectionLost(f"broker {node_id} is not in the cluster's metadata")
        connection = Connection(address, self.config, node_id)
        self._connections[node_id] = connection
        return connection

    def any_connection(self) -> Connection:
        """An open connection to some broker: one already open, else a known broker, else
        the bootstrap servers in turn."""
        for connection in self._connections.values():
            if not connection.closed:
                return connection
        if self._bootstrap is not None and not self._bootstrap.closed:
            return self._bootstrap
        failures = []
        for node_id in list(self.brokers):
            try:
                return self.connection(node_id)
            except ConnectionLost as error:
                failures.append(str(error))
        for address in self.config.bootstrap_servers:
            try:
                self._bootstrap = Connection(address, self.config)
                return self._bootstrap
            except ConnectionLost as error:
                failures.append(str(error))
        raise ConnectionLost("; ".join(failures) or f"no broker of {self.config.description} answered")

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        if self._bootstrap is not None:
            self._bootstrap.close()
        self._connections.clear()
        self._bootstrap = None

    # -- metadata -----------------------------------------------------------------------

    def refresh_metadata(self, topics: Iterable[str] | None, *, auto_create: bool = False) -> dict[str, int]:
        """Ask for the brokers and the given topics (None: all topics); returns each asked
        topic's error code. `auto_create`: as a producer asks, so that a broker with
        auto.create.topics.enable creates a missing topic. Raises ConnectionLost when no
        broker answers."""
        connection = self.any_connection()
        version = connection.version(METADATA_KEY, 1, 12)
        build = RequestBuilder(METADATA_KEY, version)
        wanted = None if topics is None else sorted(set(topics))
        request = build.make(
            "MetadataRequest",
            topics=None if wanted is None else tuple(build.make("MetadataRequestTopic", name=name, topic_id=None)
                                                    for name in wanted),
            allow_auto_topic_creation=auto_create,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
        response = connection.request(request)
        self.brokers = {int(broker.node_id): f"{broker.host}:{broker.port}" for broker in response.brokers}
        for node_id in [node for node in self._connections if node not in self.brokers]:
            self._connections.pop(node_id).close()
        errors = {}
        for topic in response.topics:
            errors[topic.name] = int(topic.error_code)
            if topic.error_code == ErrorCode.none:
                self._partitions[topic.name] = {int(p.partition_index): int(p.leader_id) for p in topic.partitions}
            else:
                self._partitions.pop(topic.name, None)
        return errors

    def partition_count(self, topic: str, *, auto_create: bool = False) -> int:
        """How many partitions `topic` has (asks once, then from memory); UnknownTopic if none."""
        return len(self._topic(topic, auto_create=auto_create))

    def leader(self, topic: str, partition: int) -> int:
        """The node id of the partition's leader; asks the cluster when not known."""
        leader = self._topic(topic).get(partition, -1)
        if leader < 0:
            partitions = self._topic(topic, refresh=True)
            if partition not in partitions:
                raise UnknownTopic(topic, partition)
            leader = partitions[partition]
            if leader < 0:
                raise BrokerError(ErrorCode.leader_not_available, f"{topic}-{partition}")
        return leader

    def _topic(self, topic: str, *, refresh: bool = False, auto_create: bool = False) -> dict[int, int]:
        """partition -> leader id of `topic`, from memory unless `refresh` or unknown."""
        partitions = None if refresh else self._partitions.get(topic)
        if partitions is None:
            errors = self.refresh_metadata([topic], auto_create=auto_create)
            partitions = self._partitions.get(topic)
            if partitions is None:
                code = errors.get(topic, ErrorCode.unknown_topic_or_partition)
                if code in (ErrorCode.unknown_topic_or_partition, ErrorCode.invalid_topic_exception):
                    raise UnknownTopic(topic)
                raise_for(code, f"Metadata for {topic}")
                raise UnknownTopic(topic)  # an error code of NONE without partitions
        return partitions

    def forget_leader(self, topic: str) -> None:
        """The leader this client used for a partition of `topic` is stale."""
        self._partitions.pop(topic, None)

    # -- coordinators -------------------------------------------------------------------

    def coordinator(self, key: str, key_type: int) -> Connection:
        """A connection to the coordinator of group (key_type 0) or transactional id (1) `key`."""
        node_id = self._coordinators.get((key_type, key))
        if node_id is None:
            connection = self.any_connection()
            version = connection.version(FIND_COORDINATOR_KEY, 1, 3)
            request = RequestBuilder(FIND_COORDINATOR_KEY, version).make(
                "FindCoordinatorRequest", key=key, key_type=key_type)
            response = connection.request(request)
            raise_for(response.error_code, f"FindCoordinator for {key!r}", getattr(response, "error_message", None))
            node_id = int(response.node_id)
            self.brokers.setdefault(node_id, f"{response.host}:{response.port}")
            self._coordinators[(key_type, key)] = node_id
        try:
            return self.connection(node_id)
        except ConnectionLost:
            self.forget_coordinator(key, key_type)
            raise

    def forget_coordinator(self, key: str, key_type: int) -> None:
        self._coordinators.pop((key_type, key), None)

    def check_coordinator_answer(self, code: int, key: str, key_type: int, what: str,
                                 message: str | None = None) -> None:
        """Raise for an error code from a coordinator, forgetting the coordinator first when
        the answer says it moved."""
        if code in STALE_COORDINATOR:
            self.forget_coordinator(key, key_type)
        raise_for(code, what, message)

    # -- retries -----------------------------------------------------------------------

    def retrying(self, what: str, deadline: float, call: Callable[[], T]) -> T:
        """`call()` until it returns, retrying ConnectionLost and retriable BrokerErrors
        with a growing pause, until `deadline` (time.monotonic()); then NoAnswer."""
        pause = FIRST_PAUSE_S
        while True:
            try:
                return call()
            except ConnectionLost as error:
                last: Exception = error
            except BrokerError as error:
                if not error.retriable:
                    raise
                last = error
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise NoAnswer(f"{what} did not succeed in time on {self.config.description}: {last}")
            time.sleep(min(pause, remaining))
            pause = min(pause * 2, LONGEST_PAUSE_S)


_SHARED: dict[ClientConfig, Cluster] = {}


def shared_cluster(config: ClientConfig) -> Cluster:
    """This process's `Cluster` for `config` (created on first use)."""
    cluster = _SHARED.get(config)
    if cluster is None:
        cluster = _SHARED[config] = Cluster(config)
    return cluster

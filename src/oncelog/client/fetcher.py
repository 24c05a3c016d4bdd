"""Fetching one partition from its leader, and asking for its offsets.

`PartitionFetcher` sends Fetch requests (v4-v12, no fetch session: each is a full fetch
of this one partition) and returns what the leader answered: an error code, the
partition's high watermark, last stable offset and log start offset, the aborted
transactions a read_committed reader must skip, and the raw record batches. One Fetch may
be in flight while the previous answer is decoded (`send`, then `receive`), so the leader
reads the next batches while this process turns the last ones into columns.

Errors are answers here; what they mean for a reader (data loss, a stale leader) is the
caller's to decide. A connection that fails raises ConnectionLost.
"""

from __future__ import annotations

import datetime
import struct
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from oncelog.client.cluster import Cluster
from oncelog.client.config import ConfigError, positive_setting
from oncelog.client.connection import Connection
from oncelog.client.errors import ConnectionLost, raise_for
from oncelog.protocol.fetch_response import FetchedPartition, read_fetch_response
from oncelog.protocol.messages import RequestBuilder

FETCH_KEY = 1
LIST_OFFSETS_KEY = 2
READ_UNCOMMITTED = 0
READ_COMMITTED = 1
EARLIEST = -2
LATEST = -1


@dataclass(frozen=True)
class FetchSettings:
    """librdkafka's names: fetch.max.bytes, max.partition.fetch.bytes, fetch.wait.max.ms,
    check.crcs (false by default, as in librdkafka: the broker checked each batch's CRC
    when it was produced, and TCP guards the way here)."""

    max_bytes: int = 52_428_800
    # Kafka's default. Measured (bench 8s): 4 MB answers, which outgrow the sockets'
    # buffers so that the broker's send waits on the reader, were read 1.5x slower.
    partition_max_bytes: int = 1 << 20
    max_wait_ms: int = 500
    read_committed: bool = True
    check_crcs: bool = False

    @classmethod
    def from_settings(cls, settings: dict[str, str], *, read_committed: bool) -> FetchSettings:
        check = str(settings.get("check.crcs", "false")).lower()
        if check not in ("true", "false"):
            raise ConfigError(f"check.crcs={settings['check.crcs']}: use true or false")
        return cls(
            max_bytes=positive_setting(settings, "fetch.max.bytes", cls.max_bytes),
            partition_max_bytes=positive_setting(settings, "max.partition.fetch.bytes", cls.partition_max_bytes),
            max_wait_ms=positive_setting(settings, "fetch.wait.max.ms", cls.max_wait_ms),
            read_committed=read_committed,
            check_crcs=check == "true",
        )


class PartitionFetcher:
    """Fetches of one topic-partition from its leader; `send` then `receive`, in order."""

    def __init__(self, cluster: Cluster, topic: str, partition: int, settings: FetchSettings) -> None:
        self.cluster = cluster
        self.topic = topic
        self.partition = partition
        self.settings = settings
        self._sent_to: list[tuple[Connection, int, int]] = []
        self._answered_by: Connection | None = None

    def send(self, offset: int) -> None:
        """Ask the leader for records from `offset` (raises ConnectionLost, UnknownTopic)."""
        connection = self.cluster.connection(self.cluster.leader(self.topic, self.partition))
        version = connection.version(FETCH_KEY, 4, 12)
        build = RequestBuilder(FETCH_KEY, version)
        partition = build.make(
            "FetchPartition", partition=self.partition, current_leader_epoch=-1, fetch_offset=offset,
            last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=self.settings.partition_max_bytes,
        )
        request = build.make(
            "FetchRequest", cluster_id=None, replica_id=-1,
            max_wait=datetime.timedelta(milliseconds=self.settings.max_wait_ms), min_bytes=1,
            max_bytes=self.settings.max_bytes,
            isolation_level=READ_COMMITTED if self.settings.read_committed else READ_UNCOMMITTED,
            session_id=0, session_epoch=-1,
            topics=(build.make("FetchTopic", topic=self.topic, partitions=(partition,)),),
            forgotten_topics_data=(), rack_id="",
        )
        self._sent_to.append((connection, connection.send(request, raw=True), version))

    def receive(self) -> FetchedPartition:
        """The answer to the oldest Fetch sent. Its records are a view of the response
        frame: call `done(answer)` once nothing refers to them any more."""
        connection, correlation, version = self._sent_to.pop(0)
        body = connection.receive(correlation, extra_wait_s=self.settings.max_wait_ms / 1000)
        self._answered_by = connection
        try:
            answer = read_fetch_response(version, body)
        except (struct.error, ValueError, IndexError) as failure:
            connection.close()
            raise ConnectionLost(f"malformed Fetch response from {connection.address}: {failure}") from None
        raise_for(answer.error, f"Fetch of {self.topic}-{self.partition}")
        found = answer.partitions.get((self.topic, self.partition))
        if found is None:
            return FetchedPartition(ErrorCode.unknown_topic_or_partition, -1, -1, -1, (), b"")
        return found

    def done(self, answer: FetchedPartition) -> None:
        """Nothing refers to `answer`'s records any more: their buffer may hold the next answer."""
        if self._answered_by is not None and isinstance(answer.records, memoryview):
            self._answered_by.recycle(answer.records)

    def discard_in_flight(self) -> None:
        """Forget Fetches still in flight (their connections are closed: the answers would
        arrive out of turn)."""
        for connection, _correlation, _version in self._sent_to:
            connection.close()
        self._sent_to.clear()

    @property
    def in_flight(self) -> int:
        return len(self._sent_to)


def list_offset(cluster: Cluster, topic: str, partition: int, timestamp: int, *, read_committed: bool) -> int:
    """ListOffsets at the partition's leader: EARLIEST (log start), LATEST (high watermark, or
    the last stable offset when `read_committed`). Raises BrokerError, ConnectionLost."""
    connection = cluster.connection(cluster.leader(topic, partition))
    version = connection.version(LIST_OFFSETS_KEY, 1, 7)
    build = RequestBuilder(LIST_OFFSETS_KEY, version)
    request = build.make(
        "ListOffsetsRequest", replica_id=-1, isolation_level=READ_COMMITTED if read_committed else READ_UNCOMMITTED,
        topics=(build.make("ListOffsetsTopic", name=topic, partitions=(
            build.make("ListOffsetsPartition", partition_index=partition, current_leader_epoch=-1,
                       timestamp=timestamp, max_num_offsets=1),)),),
    )
    response = connection.request(request)
    for answer in response.topics:
        for data in answer.partitions:
            if answer.name == topic and data.partition_index == partition:
                if data.error_code != ErrorCode.none:
                    cluster.forget_leader(topic)
                raise_for(data.error_code, f"ListOffsets of {topic}-{partition}")
                return int(data.offset)
    raise_for(ErrorCode.unknown_topic_or_partition, f"ListOffsets of {topic}-{partition}")
    raise AssertionError("unreachable")

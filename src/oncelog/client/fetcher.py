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
from oncelog.protocol.framing import read_unsigned_varint, skip_tagged_fields
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


@dataclass(frozen=True)
class FetchedPartition:
    error: ErrorCode
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted: tuple[tuple[int, int], ...]  # (producer id, first offset)
    records: bytes | memoryview  # a view of the response frame


# -- the Fetch response, read by hand ----------------------------------------------------------
#
# kio would copy every partition's records into a new bytes object; here they stay a view
# of the frame. Layout (FetchResponse.json), v4-v11 classic, v12 flexible (compact lengths,
# tagged fields after each struct and in the header):
#
#   throttle_time_ms int32, [v7+] error_code int16, session_id int32,
#   responses: [ topic string,
#                partitions: [ partition_index int32, error_code int16, high_watermark int64,
#                              last_stable_offset int64, [v5+] log_start_offset int64,
#                              aborted_transactions: nullable [ producer_id int64, first_offset int64 ],
#                              [v11+] preferred_read_replica int32, records nullable bytes ] ]

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_PARTITION_HEAD = struct.Struct(">ihqq")
_INT64 = struct.Struct(">q")
_ABORTED = struct.Struct(">qq")


def decode_fetch_response(version: int, body: memoryview) -> tuple[int, dict[tuple[str, int], FetchedPartition]]:
    """(top-level error code, {(topic, partition): answer}) of a Fetch response `body` (the
    frame after its correlation id)."""
    flexible = version >= 12
    position = _skip_tags(body, 0) if flexible else 0
    position += 4  # throttle_time_ms
    error = 0
    if version >= 7:
        (error,) = _INT16.unpack_from(body, position)
        position += 6  # error_code, session_id
    answers: dict[tuple[str, int], FetchedPartition] = {}
    topics, position = _length(body, position, flexible)
    for _ in range(max(topics, 0)):
        topic, position = _string(body, position, flexible)
        partitions, position = _length(body, position, flexible)
        for _ in range(max(partitions, 0)):
            index, code, high, stable = _PARTITION_HEAD.unpack_from(body, position)
            position += _PARTITION_HEAD.size
            log_start = -1
            if version >= 5:
                (log_start,) = _INT64.unpack_from(body, position)
                position += 8
            aborted = []
            count, position = _length(body, position, flexible)
            for _ in range(max(count, 0)):
                aborted.append(_ABORTED.unpack_from(body, position))
                position += _ABORTED.size
                if flexible:
                    position = _skip_tags(body, position)
            if version >= 11:
                position += 4  # preferred_read_replica
            size, position = _length(body, position, flexible)
            records = body[position:position + size] if size > 0 else b""
            if size > 0 and position + size > len(body):
                raise ValueError(f"records of {topic}-{index} run past the end of the response")
            position += max(size, 0)
            if flexible:
                position = _skip_tags(body, position)
            answers[(topic, index)] = FetchedPartition(ErrorCode(code), high, stable, log_start,
                                                       tuple((p, f) for p, f in aborted), records)
        if flexible:
            position = _skip_tags(body, position)
    return error, answers


def _length(body: memoryview, position: int, flexible: bool) -> tuple[int, int]:
    """An array's or bytes' length (-1: null)."""
    if flexible:
        value, position = read_unsigned_varint(body, position)
        return value - 1, position
    return _INT32.unpack_from(body, position)[0], position + 4


def _string(body: memoryview, position: int, flexible: bool) -> tuple[str, int]:
    if flexible:
        length, position = read_unsigned_varint(body, position)
        length -= 1
    else:
        (length,) = _INT16.unpack_from(body, position)
        position += 2
    return str(body[position:position + max(length, 0)], "utf-8"), position + max(length, 0)


def _skip_tags(body: memoryview, position: int) -> int:
    return skip_tagged_fields(body, position)


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
            error, answers = decode_fetch_response(version, body)
        except (struct.error, ValueError, IndexError) as failure:
            connection.close()
            raise ConnectionLost(f"malformed Fetch response from {connection.address}: {failure}") from None
        raise_for(error, f"Fetch of {self.topic}-{self.partition}")
        found = answers.get((self.topic, self.partition))
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

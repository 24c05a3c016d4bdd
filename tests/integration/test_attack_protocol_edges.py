"""Attacks at the protocol's edges (issue 38, item 5): what a client may send that real
clients never do, and what the broker's answers give away.

- A null where Kafka's schema forbids one (a null array, string or bytes) is a request
  Kafka cannot parse: the connection closes, one INFO line, and no handler sees it (a
  dozen handlers used to raise TypeError on a null array, one ERROR traceback per
  request: a log flood any user could cause). Nulls the schema allows stay accepted.
- ConsumerGroupHeartbeat v0, which the broker advertises, works (the handler read a
  field only v1 has, so every v0 request failed).

The broker under attack runs in its own process (BrokerProcess), so its log is the
file a flood would fill.
"""

from __future__ import annotations

import datetime
import re
import socket
import struct
import time
import uuid

import pytest
from kio.schema.consumer_group_heartbeat.v0.request import ConsumerGroupHeartbeatRequest as HeartbeatV0
from kio.schema.consumer_group_heartbeat.v0.request import TopicPartitions as OwnedPartitionsV0
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32, i32Timedelta

from oncelog.broker.handlers import handler_table
from oncelog.local.process import BrokerProcess
from oncelog.protocol.client import WireClient
from oncelog.protocol.messages import is_flexible, request_class
from tests.support.kafka import create_topic
from tests.support.null_fields import NullTarget, body_with_null, null_field_targets

HANDLERS = handler_table()
EXCHANGE_TIMEOUT = 10.0  # two shared cores
ERROR_LINE = re.compile(r" (ERROR|CRITICAL) |Traceback \(most recent call last\)")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


class LoggedBroker:
    """A broker process and the part of its log written since the last look."""

    def __init__(self, broker: BrokerProcess) -> None:
        self.broker = broker
        self._seen = 0

    @property
    def bootstrap_servers(self) -> str:
        return self.broker.bootstrap_servers

    def new_log(self) -> str:
        text = self.broker.log_path.read_text(errors="replace")
        fresh, self._seen = text[self._seen:], len(text)
        return fresh

    def assert_no_error_logged(self) -> str:
        fresh = self.new_log()
        errors = [line for line in fresh.splitlines() if ERROR_LINE.search(line)]
        assert not errors, f"the broker logged {len(errors)} error lines, the first: {errors[:3]}"
        return fresh

    def assert_serves_others(self) -> None:
        with WireClient.connect(self.bootstrap_servers, timeout=EXCHANGE_TIMEOUT) as client:
            metadata = client.request(MetadataRequest(
                topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False))
            assert [b.port for b in metadata.brokers] == [self.broker.port]


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("protocol-edges") / "data") as broker:
        logged = LoggedBroker(broker)
        logged.new_log()
        yield logged


def raw_frame(api_key: int, version: int, body: bytes, correlation_id: int = 7) -> bytes:
    header = struct.pack(">hhi", api_key, version, correlation_id) + struct.pack(">h", 6) + b"hostil"
    if is_flexible(api_key, version):
        header += b"\x00"  # no tagged fields
    return struct.pack(">i", len(header) + len(body)) + header + body


def send_and_read(port: int, frame: bytes) -> tuple[bytes, bool]:
    """Send `frame` on a fresh connection; what came back before the broker closed it
    (True), or before a whole response arrived or the timeout passed (False)."""
    received = bytearray()
    with socket.create_connection(("127.0.0.1", port), timeout=EXCHANGE_TIMEOUT) as sock:
        sock.sendall(frame)
        deadline = time.monotonic() + EXCHANGE_TIMEOUT
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                return bytes(received), True
            except TimeoutError:
                break
            if not chunk:
                return bytes(received), True
            received += chunk
            if len(received) >= 4 and len(received) >= 4 + struct.unpack_from(">i", received)[0]:
                return bytes(received), False  # a whole response: the broker parsed the request
    return bytes(received), False


def null_targets(api_key: int, *, nullable: bool) -> list[tuple[int, NullTarget]]:
    handler = HANDLERS[api_key]
    return [(version, target)
            for version in range(handler.min_version, handler.max_version + 1)
            for target in null_field_targets(request_class(api_key, version))
            if target.nullable == nullable]


KEYS = sorted(HANDLERS)
KEYS_WITH_NON_NULLABLE = [key for key in KEYS if null_targets(key, nullable=False)]


# -- nulls the schema forbids -----------------------------------------------------------------


@pytest.mark.parametrize("api_key", KEYS_WITH_NON_NULLABLE, ids=[HANDLERS[k].name for k in KEYS_WITH_NON_NULLABLE])
def test_a_null_the_schema_forbids_closes_the_connection_with_one_info_line_and_no_error(target, api_key):
    """Every version the broker offers, each non-nullable array, string and bytes field
    (at any depth) sent as null: the connection closes unanswered, as Kafka closes it
    when its generated reader throws "non-nullable field X was serialized as null"."""
    target.new_log()
    answered = []
    cases = null_targets(api_key, nullable=False)
    for version, null_field in cases:
        received, closed = send_and_read(target.broker.port, raw_frame(api_key, version, body_with_null(
            request_class(api_key, version), null_field.path)))
        if received or not closed:
            answered.append(f"v{version} {null_field}: {len(received)} bytes back, closed={closed}")
    assert not answered, f"{len(answered)} of {len(cases)} null fields were not refused: {answered[:5]}"
    target.assert_serves_others()
    log = target.assert_no_error_logged()
    closing = [line for line in log.splitlines() if "closing connection" in line]
    assert len(closing) == len(cases) and all(" INFO " in line for line in closing), closing[:3]


def test_null_arrays_the_schema_allows_are_still_answered(target):
    """Metadata's topics from v1 (null: every topic), and every other nullable array of
    a request the broker handles: answered, and nothing logged as an error."""
    target.new_log()
    topic = unique("edges-all-topics")
    create_topic(target.bootstrap_servers, topic)
    for version in range(1, HANDLERS[3].max_version + 1):
        received, _closed = send_and_read(target.broker.port, raw_frame(3, version, body_with_null(
            request_class(3, version), ("topics",))))
        assert received and topic.encode() in received, f"Metadata v{version} with null topics"
    unanswered = []
    for api_key in KEYS:
        for version, null_field in null_targets(api_key, nullable=True):
            if null_field.kind != "array":
                continue
            received, _closed = send_and_read(target.broker.port, raw_frame(api_key, version, body_with_null(
                request_class(api_key, version), null_field.path)))
            if not received:
                unanswered.append(f"{HANDLERS[api_key].name} v{version} {null_field}")
    assert not unanswered
    target.assert_no_error_logged()


# -- ConsumerGroupHeartbeat v0 ----------------------------------------------------------------


def heartbeat_v0(client: WireClient, group: str, member_id: str, epoch: int, **fields):
    return client.request(HeartbeatV0(group_id=GroupId(group), member_id=member_id, member_epoch=i32(epoch),
                                      **fields))


def test_consumer_group_heartbeat_v0_joins_gets_an_assignment_and_leaves(target):
    target.new_log()
    topic, group = unique("edges-v0"), unique("edges-v0-group")
    create_topic(target.bootstrap_servers, topic, partitions=3)
    with WireClient.connect(target.bootstrap_servers, timeout=EXCHANGE_TIMEOUT) as client:
        metadata = client.request(MetadataRequest(
            topics=(MetadataRequestTopic(topic_id=None, name=TopicName(topic)),), allow_auto_topic_creation=False,
            include_topic_authorized_operations=False))
        (topic_id,) = [t.topic_id for t in metadata.topics]
        assert client.request(FindCoordinatorRequest(key=group, key_type=0)).error_code == ErrorCode.none
        joined = heartbeat_v0(client, group, "", 0, subscribed_topic_names=(TopicName(topic),), topic_partitions=(),
                              rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)))
        assert joined.error_code == ErrorCode.none, joined.error_message
        assert joined.member_id  # v0: the coordinator names the member
        assert joined.member_epoch >= 1
        member_id, epoch, assignment = joined.member_id, joined.member_epoch, joined.assignment
        deadline = time.monotonic() + 20
        while not (assignment is not None and assignment.topic_partitions):
            assert time.monotonic() < deadline, "no assignment within 20 s"
            time.sleep(joined.heartbeat_interval.total_seconds() / 4)
            answer = heartbeat_v0(client, group, member_id, epoch, topic_partitions=None)
            assert answer.error_code == ErrorCode.none, answer.error_message
            epoch, assignment = answer.member_epoch, answer.assignment or assignment
        assert [(tp.topic_id, sorted(tp.partitions)) for tp in assignment.topic_partitions] == [(topic_id, [0, 1, 2])]
        owned = tuple(OwnedPartitionsV0(topic_id=tp.topic_id, partitions=tp.partitions)
                      for tp in assignment.topic_partitions)
        owning = heartbeat_v0(client, group, member_id, epoch, topic_partitions=owned)
        assert (owning.error_code, owning.member_epoch) == (ErrorCode.none, epoch)
        left = heartbeat_v0(client, group, member_id, -1, topic_partitions=None)
        assert (left.error_code, left.member_id, left.member_epoch) == (ErrorCode.none, member_id, -1)
    target.assert_no_error_logged()

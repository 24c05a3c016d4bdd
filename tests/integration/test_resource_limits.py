"""The broker's resource limits under clients that push them: max.connections,
queued.max.request.bytes (many connections sending large frames slowly) and the
per-connection pipelining bound (a client that writes many requests and reads nothing).
Memory is measured as the broker process's RSS (/proc/<pid>/status) or, in process, as
the request bytes the broker accounts for."""

from __future__ import annotations

import datetime
import socket
import struct
import threading
import time
from pathlib import Path

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v4 import request as fetch_v4
from kio.schema.fetch.v4 import response as fetch_v4_response
from kio.schema.produce.v9 import request as produce_v9
from kio.schema.produce.v9 import response as produce_v9_response
from kio.schema.types import BrokerId, TopicName
from kio.serial import entity_reader
from kio.static.primitive import Records, i8, i16, i32, i32Timedelta, i64

from oncelog import EmbeddedBroker
from oncelog.local.process import BrokerProcess, wait_until
from oncelog.protocol import framing
from oncelog.protocol import record_batch as rb
from oncelog.protocol.client import WireClient, encode_request
from tests.support.kafka import create_topic

MIB = 1 << 20
TIMEOUT = 30.0
TOPIC = "limits"


def rss_bytes(broker: BrokerProcess) -> int:
    status = Path(f"/proc/{broker.pid}/status").read_text()
    (line,) = [line for line in status.splitlines() if line.startswith("VmRSS:")]
    return int(line.split()[1]) * 1024


def produce_frame(correlation_id: int, value_size: int, partition: int = 0) -> bytes:
    batch = rb.build_batch([rb.Record(None, b"x" * value_size)], timestamp_ms=int(time.time() * 1000))
    request = produce_v9.ProduceRequest(
        transactional_id=None, acks=i16(-1), timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
        topic_data=(produce_v9.TopicProduceData(
            name=TopicName(TOPIC),
            partition_data=(produce_v9.PartitionProduceData(index=i32(partition), records=Records(batch)),)),),
    )
    return encode_request(request, correlation_id)


def fetch_frame(correlation_id: int, max_bytes: int) -> bytes:
    request = fetch_v4.FetchRequest(
        replica_id=BrokerId(-1), max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=0)), min_bytes=i32(1),
        max_bytes=i32(max_bytes),
        isolation_level=i8(0), topics=(fetch_v4.FetchTopic(topic=TopicName(TOPIC), partitions=(
            fetch_v4.FetchPartition(partition=i32(0), fetch_offset=i64(0), partition_max_bytes=i32(max_bytes)),)),),
    )
    return encode_request(request, correlation_id)


def read_frame(sock: socket.socket) -> bytes:
    """One response frame, without its size prefix."""
    def exactly(size: int) -> bytes:
        data = bytearray()
        while len(data) < size:
            chunk = sock.recv(min(size - len(data), 1 << 20))
            if not chunk:
                raise ConnectionError("closed by the broker")
            data += chunk
        return bytes(data)

    return exactly(struct.unpack(">i", exactly(4))[0])


def produce_answer(frame: bytes):
    position = framing.skip_tagged_fields(frame, 4)
    response, _ = entity_reader(produce_v9_response.ProduceResponse)(frame, position)
    answer = response.responses[0].partition_responses[0]
    return answer.error_code, answer.base_offset


def answers_api_versions(bootstrap: str) -> bool:
    try:
        with WireClient.connect(bootstrap, timeout=5) as client:
            response = client.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
            return response.error_code == ErrorCode.none
    except (ConnectionError, OSError):
        return False


# -- max.connections ------------------------------------------------------------------------


def test_connections_above_max_connections_are_closed_and_a_freed_slot_is_reused(tmp_path):
    with EmbeddedBroker(tmp_path / "b", {"max.connections": "3"}) as broker:
        held = [WireClient.connect(broker.bootstrap_servers) for _ in range(3)]
        try:
            for client in held:
                assert client.request(ApiVersionsRequest(
                    client_software_name="t", client_software_version="1")).error_code == ErrorCode.none
            for _ in range(3):  # every connection past the limit is closed at once, unanswered
                with WireClient.connect(broker.bootstrap_servers) as refused:
                    try:
                        refused.send_raw(encode_request(
                            ApiVersionsRequest(client_software_name="t", client_software_version="1"), 1))
                    except OSError:
                        pass  # already closed by the broker
                    assert refused.is_closed()
            for client in held:  # the ones inside the limit are unaffected
                assert client.request(ApiVersionsRequest(
                    client_software_name="t", client_software_version="1")).error_code == ErrorCode.none
            held.pop().close()
            wait_until(lambda: answers_api_versions(broker.bootstrap_servers), 10,
                       message="a new connection to take the freed slot")
        finally:
            for client in held:
                client.close()


# -- queued.max.request.bytes ---------------------------------------------------------------


class SlowSender(threading.Thread):
    """Announces a large Produce frame, sends its first half in small pieces, waits for
    `go`, then sends the rest and reads the answer."""

    def __init__(self, port: int, frame: bytes, go: threading.Event) -> None:
        super().__init__(daemon=True)
        self.port, self.frame, self.go = port, frame, go
        self.answer: tuple | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=120) as sock:
                half = len(self.frame) // 2
                for start in range(0, half, 64 * 1024):
                    sock.sendall(self.frame[start:min(start + 64 * 1024, half)])
                    time.sleep(0.002)
                self.go.wait(120)
                sock.sendall(self.frame[half:])
                self.answer = produce_answer(read_frame(sock))
        except BaseException as error:  # noqa: BLE001 - reported by the test
            self.error = error


def slow_large_frames(port: int, senders: int, value_size: int, settle: float, measure):
    """Start `senders` slow senders, let them run `settle` seconds, call `measure()`
    while they are stuck half way, then let them finish. Returns (measurement, answers)."""
    go = threading.Event()
    threads = [SlowSender(port, produce_frame(n, value_size), go) for n in range(senders)]
    for thread in threads:
        thread.start()
    time.sleep(settle)
    try:
        measured = measure()
    finally:
        go.set()
        for thread in threads:
            thread.join(120)
    assert all(not t.is_alive() and t.error is None for t in threads), [t.error for t in threads]
    return measured, [t.answer for t in threads]


@pytest.mark.parametrize("bound, expect_bounded", [(str(8 * MIB), True), ("-1", False)],
                         ids=["queued.max.request.bytes=8MiB", "unbounded_default"])
def test_many_slow_large_frames_hold_no_more_than_queued_max_request_bytes(tmp_path, bound, expect_bounded):
    """32 connections each announce a 2 MiB Produce and send half of it. Kafka's default
    (-1) allocates every announced frame at once (64 MiB here); with an 8 MiB bound only
    the frames that fit are allocated, the other connections are not read until those
    are handled, and every request is still answered."""
    config = {"socket.request.max.bytes": str(4 * MIB), "message.max.bytes": str(4 * MIB),
              "queued.max.request.bytes": bound}
    with BrokerProcess(tmp_path / "data", config) as broker:
        create_topic(broker.bootstrap_servers, TOPIC)
        before = rss_bytes(broker)
        growth, answers = slow_large_frames(broker.port, 32, 2 * MIB, settle=3.0,
                                            measure=lambda: rss_bytes(broker) - before)
        assert sorted(offset for _, offset in answers) == list(range(32))
        assert {code for code, _ in answers} == {ErrorCode.none}
    if expect_bounded:
        assert growth < 24 * MIB, f"RSS grew {growth / MIB:.1f} MiB with an 8 MiB bound"
    else:
        assert growth > 48 * MIB, f"RSS grew only {growth / MIB:.1f} MiB: the test no longer measures buffering"


def test_accounted_request_bytes_stay_within_the_bound_and_all_return_when_connections_end(tmp_path):
    config = {"socket.request.max.bytes": str(MIB), "message.max.bytes": str(MIB),
              "queued.max.request.bytes": str(MIB)}
    with EmbeddedBroker(tmp_path / "b", config) as broker:
        create_topic(broker.bootstrap_servers, TOPIC)
        pool = broker.broker.server.request_memory

        def snapshot():
            return broker.call(lambda: (pool.used, pool.waiting))

        frame_size = len(produce_frame(0, 256 * 1024)) - 4  # what one request reserves
        (used, waiting), answers = slow_large_frames(broker.port, 16, 256 * 1024, settle=2.0, measure=snapshot)
        # Admitted while below the bound: past it by less than one frame, the rest waiting.
        assert MIB <= used < MIB + frame_size and waiting >= 16 - 5, (used, waiting)
        assert sorted(offset for _, offset in answers) == list(range(16))
        peak, refusals = broker.call(lambda: (pool.peak, pool.refusals))
        assert peak < MIB + frame_size and refusals > 0
        # Nothing stays accounted once the requests are handled and the clients gone.
        wait_until(lambda: broker.call(lambda: pool.used) == 0, 10, message="every reservation released")


def test_request_bytes_return_to_the_pool_when_a_client_leaves_mid_frame(tmp_path):
    config = {"socket.request.max.bytes": str(MIB), "queued.max.request.bytes": str(MIB)}
    with EmbeddedBroker(tmp_path / "b", config) as broker:
        pool = broker.broker.server.request_memory
        for _ in range(5):
            with socket.create_connection(("127.0.0.1", broker.port)) as sock:
                sock.sendall(struct.pack(">i", MIB) + b"\x00" * 1000)  # announced, never finished
                wait_until(lambda: broker.call(lambda: pool.used) == MIB, 10, message="the frame reserved")
        wait_until(lambda: broker.call(lambda: pool.used) == 0, 10, message="the reservation released")
        assert answers_api_versions(broker.bootstrap_servers)


# -- pipelining ------------------------------------------------------------------------------


class PipeliningWriter(threading.Thread):
    """Writes request frames back to back without reading anything."""

    def __init__(self, sock: socket.socket, frames: list[bytes]) -> None:
        super().__init__(daemon=True)
        self.sock, self.frames = sock, frames
        self.written = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for frame in self.frames:
                self.sock.sendall(frame)
                self.written += 1
        except BaseException as error:  # noqa: BLE001 - reported by the test
            self.error = error


def test_a_client_that_pipelines_without_reading_is_pushed_back_and_answered_in_order(tmp_path):
    """200 requests, 100 MiB of Produce frames interleaved with Fetches whose answers are
    1 MiB each, written without reading. The broker handles one request at a time, stops
    when its answers back up, reads ahead a bounded amount, and TCP pushes back on the
    writer; once the client reads, every answer comes, in request order."""
    config = {"message.max.bytes": str(2 * MIB), "socket.request.max.bytes": str(4 * MIB)}
    with BrokerProcess(tmp_path / "data", config) as broker:
        create_topic(broker.bootstrap_servers, TOPIC)
        with socket.create_connection(("127.0.0.1", broker.port), timeout=TIMEOUT) as sock:
            # 1 MiB of data for every Fetch to return, and a warm-up round.
            sock.sendall(produce_frame(0, MIB))
            assert produce_answer(read_frame(sock)) == (ErrorCode.none, 0)
            sock.sendall(fetch_frame(1, 2 * MIB))
            read_frame(sock)
            before = rss_bytes(broker)

            # Produce to a partition that does not exist: a 1 MiB request, answered at once
            # with an error, so the broker's memory is all in buffering, none in the log.
            frames = []
            for n in range(100):
                frames += [fetch_frame(2 + 2 * n, 2 * MIB), produce_frame(3 + 2 * n, MIB, partition=99)]
            writer = PipeliningWriter(sock, frames)
            writer.start()
            last, still_since = -1, time.monotonic()
            while time.monotonic() - still_since < 2.0 and writer.is_alive():
                time.sleep(0.1)
                if writer.written != last:
                    last, still_since = writer.written, time.monotonic()
            growth = rss_bytes(broker) - before
            stalled_at = writer.written

            correlation_ids = []
            for _ in range(len(frames)):
                frame = read_frame(sock)
                correlation_ids.append(struct.unpack_from(">i", frame)[0])
                if correlation_ids[-1] % 2 == 0:  # a Fetch: the whole 1 MiB batch each time
                    response, _ = entity_reader(fetch_v4_response.FetchResponse)(frame, 4)
                    partition = response.responses[0].partitions[0]
                    assert partition.error_code == ErrorCode.none and len(partition.records) > MIB
                else:
                    assert produce_answer(frame)[0] == ErrorCode.unknown_topic_or_partition
            writer.join(TIMEOUT)
    assert writer.error is None and writer.written == len(frames)
    assert correlation_ids == list(range(2, 2 + len(frames))), "answers out of request order"
    assert stalled_at < len(frames) // 2, f"the writer was never pushed back ({stalled_at} requests written)"
    assert growth < 40 * MIB, f"broker RSS grew {growth / MIB:.1f} MiB while the client did not read"

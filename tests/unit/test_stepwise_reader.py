"""The stepwise reader (large requests, decoded off the event loop) builds exactly the
entity kio's native reader builds, for every request schema the broker handles, and
refuses what cannot be a request without reserving memory for it."""

from __future__ import annotations

import struct
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.metadata.v1.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import TopicName
from kio.serial import entity_reader
from kio.static.primitive import Records

from oncelog.broker.handlers import handler_table
from oncelog.protocol.framing import MalformedRequestError
from oncelog.protocol.messages import encode_response, request_class
from oncelog.protocol.stepwise_reader import read_entity

st.register_type_strategy(Records, st.binary(max_size=64).map(Records))

REQUESTS = sorted({request_class(key, version) for key, handler in handler_table().items()
                   for version in range(handler.min_version, handler.max_version + 1)},
                  key=lambda cls: (cls.__module__, cls.__qualname__))


def _name(cls) -> str:
    return cls.__module__.removeprefix("kio.schema.")


@pytest.mark.parametrize("cls", REQUESTS, ids=_name)
def test_every_request_reads_as_kio_reads_it(cls):
    reader = entity_reader(cls)

    @settings(max_examples=8, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.from_type(cls))
    def same_entity(entity):
        try:
            body = encode_response(entity)
        except (ValueError, TypeError, OverflowError, UnicodeEncodeError, AttributeError, struct.error):
            return  # a generated value no writer can write (an int out of range)
        view = memoryview(body).toreadonly()
        expected, size = reader(view, 0)
        assert read_entity(cls, view, 0) == (expected, size)

    same_entity()


def test_a_declared_length_past_the_body_is_malformed_and_reserves_nothing():
    body = struct.pack(">i", 2**31 - 1)  # a Metadata v1 request of two billion topics, in four bytes
    with pytest.raises(MalformedRequestError, match="declares 2147483647 elements"):
        read_entity(MetadataRequest, memoryview(body), 0)
    with pytest.raises(MalformedRequestError):
        read_entity(MetadataRequest, memoryview(struct.pack(">i", 1) + b"\x00\x09ab"), 0)  # a short name


def test_a_thread_reading_many_topics_lets_other_threads_run_while_kios_reader_does_not():
    """What the event loop sees while a worker thread decodes a large request: another
    thread keeps running during the stepwise read; during kio's native read it cannot."""
    request = MetadataRequest(topics=tuple(MetadataRequestTopic(name=TopicName(f"t{i:07d}"))
                                           for i in range(300_000)))
    body = memoryview(encode_response(request)).toreadonly()

    def ticks_during(read) -> int:
        ticks: list[float] = []
        done = threading.Event()

        def tick() -> None:
            while not done.is_set():
                ticks.append(time.perf_counter())
                time.sleep(0.001)

        ticker = threading.Thread(target=tick)
        ticker.start()
        time.sleep(0.01)
        began = time.perf_counter()
        try:
            decoded, _ = read(body)
        finally:
            ended = time.perf_counter()
            done.set()
            ticker.join()
        assert len(decoded.topics) == 300_000
        return sum(began < each < ended for each in ticks)

    # Stepwise: about every switch interval (5 ms) of a read of about half a second; kio's
    # native reader only now and then (measured: 0 to 12 times, on a loaded machine).
    stepwise = ticks_during(lambda data: read_entity(MetadataRequest, data, 0))
    native = ticks_during(lambda data: entity_reader(MetadataRequest)(data, 0))
    assert stepwise >= max(20, 4 * native), (stepwise, native)

"""A response written as buffers (the server's writev path) is byte for byte the frame
`response_frame` builds, and Fetch records are passed by reference, not copied."""

import pytest

from oncelog.protocol import framing
from oncelog.protocol.messages import (
    NO_THROTTLE,
    ErrorCode,
    ResponseBuilder,
    encode_response,
    encode_response_frame,
)


def fetch_response(version, records_sizes):
    make = ResponseBuilder(1, version).make
    partitions = tuple(
        make("PartitionData", partition_index=index, error_code=ErrorCode.none, high_watermark=10,
             last_stable_offset=10, log_start_offset=0, aborted_transactions=None, preferred_read_replica=-1,
             records=bytes([index % 251]) * size)
        for index, size in enumerate(records_sizes)
    )
    return make("FetchResponse", throttle_time=NO_THROTTLE, error_code=ErrorCode.none, session_id=0,
                responses=(make("FetchableTopicResponse", topic="t", partitions=partitions),))


@pytest.mark.parametrize("version", [4, 11, 12])
@pytest.mark.parametrize("records_sizes", [[], [0], [100], [200_000], [70_000, 5, 300_000, 0]])
def test_response_buffers_join_to_the_whole_frame(version, records_sizes):
    response = fetch_response(version, records_sizes)
    flexible = version >= 12
    buffers = encode_response_frame(42, response, flexible_header=flexible)
    expected = framing.response_frame(42, encode_response(response), flexible_header=flexible)
    assert b"".join(buffers) == expected


def test_large_fetch_records_are_written_from_the_object_the_handler_gave():
    response = fetch_response(11, [200_000, 10])
    large = response.responses[0].partitions[0].records
    buffers = encode_response_frame(7, response, flexible_header=False)
    assert any(buffer is large for buffer in buffers)


def test_a_small_response_is_one_buffer():
    response = fetch_response(12, [10])
    assert len(encode_response_frame(7, response, flexible_header=True)) == 1

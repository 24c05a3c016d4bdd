"""The hand-written Produce request decoder agrees with kio's, version by version, and
leaves the records as a view of the request frame (no copy on the produce hot path)."""

import datetime
import io
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.serial import entity_reader, entity_writer

from oncelog.protocol.messages import PRODUCE_VERSIONS, decode_produce_request, decode_request


def _classes(version):
    request = load_request_schema(0, version)
    module = __import__(request.__module__, fromlist=["TopicProduceData"])
    return request, module.TopicProduceData, module.PartitionProduceData


def _encode(entity) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


def _request(version, transactional_id, acks, timeout_ms, topics):
    request, topic_class, partition_class = _classes(version)
    return request(
        transactional_id=transactional_id,
        acks=acks,
        timeout=datetime.timedelta(milliseconds=timeout_ms),
        topic_data=tuple(
            topic_class(name=name, partition_data=tuple(
                partition_class(index=index, records=records) for index, records in partitions
            ))
            for name, partitions in topics
        ),
    )


def _as_plain(entity):
    """Fields as plain values, records as bytes, for comparing the two decoders."""
    return (
        entity.transactional_id, entity.acks, entity.timeout,
        [(t.name, [(p.index, None if p.records is None else bytes(p.records)) for p in t.partition_data])
         for t in entity.topic_data],
    )


names = st.text(st.characters(blacklist_categories=["Cs"]), min_size=1, max_size=20)
records = st.one_of(st.none(), st.binary(max_size=300))
topics = st.lists(
    st.tuples(names, st.lists(st.tuples(st.integers(0, 2**31 - 1), records), max_size=4)), max_size=4
)


@settings(max_examples=60, deadline=None)
@given(
    version=st.sampled_from(list(PRODUCE_VERSIONS)),
    transactional_id=st.one_of(st.none(), names),
    acks=st.sampled_from([-1, 0, 1, 7]),
    timeout_ms=st.integers(0, 2**31 - 1),
    topics=topics,
)
def test_every_produce_version_decodes_like_kio(version, transactional_id, acks, timeout_ms, topics):
    entity = _request(version, transactional_id, acks, timeout_ms, topics)
    body = _encode(entity)
    ours = decode_produce_request(version, bytearray(body), 0)
    theirs, _ = entity_reader(type(entity))(body, 0)
    assert type(ours) is type(theirs)
    assert _as_plain(ours) == _as_plain(theirs)


@pytest.mark.parametrize("version", [3, 8, 9, 11])
def test_records_of_a_bytearray_frame_are_a_writable_view_of_it(version):
    batch = b"\x00" * 61 + b"payload"
    body = bytearray(b"junk" + _encode(_request(version, None, 1, 1000, [("t", [(0, batch)])])))
    request = decode_request(0, version, body, 4)
    records = request.topic_data[0].partition_data[0].records
    assert isinstance(records, memoryview) and not records.readonly
    records[0] = 0x7F  # the log stamps offsets like this: the frame itself changes
    assert body.find(b"\x7f" + b"\x00" * 60 + b"payload") > 0


def test_records_of_a_bytes_frame_are_read_only_so_the_log_copies_them():
    body = _encode(_request(9, None, 1, 1000, [("t", [(0, b"x" * 70)])]))
    records = decode_request(0, 9, body, 0).topic_data[0].partition_data[0].records
    assert records.readonly


@pytest.mark.parametrize("version", [3, 9])
def test_a_truncated_produce_request_is_refused(version):
    body = _encode(_request(version, "txn", 1, 1000, [("topic", [(0, b"r" * 100)])]))
    for cut in (1, 5, 20, len(body) - 50):
        with pytest.raises((struct.error, ValueError)):  # MalformedProduceRequest is a ValueError
            decode_produce_request(version, bytearray(body[:cut]), 0)

"""Kafka's __consumer_offsets key and value formats, byte for byte."""

import struct

import pytest

from oncelog.coordinator.group import records
from oncelog.coordinator.group.consumer_protocol import subscribed_topics
from oncelog.coordinator.group.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    RecordFormatError,
)


def kafka_string(text: str | None) -> bytes:
    if text is None:
        return struct.pack(">h", -1)
    return struct.pack(">h", len(text.encode())) + text.encode()


def test_offset_commit_key_is_version_1_group_topic_partition():
    encoded = records.encode_offset_commit_key(OffsetCommitKey("grp", "orders", 7))
    assert encoded == struct.pack(">h", 1) + kafka_string("grp") + kafka_string("orders") + struct.pack(">i", 7)
    assert records.decode_key(encoded) == OffsetCommitKey("grp", "orders", 7)


def test_legacy_offset_commit_key_version_0_decodes_the_same():
    encoded = struct.pack(">h", 0) + kafka_string("grp") + kafka_string("t") + struct.pack(">i", 0)
    assert records.decode_key(encoded) == OffsetCommitKey("grp", "t", 0)


def test_group_metadata_key_is_version_2_group():
    encoded = records.encode_group_metadata_key(GroupMetadataKey("grp"))
    assert encoded == struct.pack(">h", 2) + kafka_string("grp")
    assert records.decode_key(encoded) == GroupMetadataKey("grp")


def test_keys_of_newer_group_types_are_skipped():
    assert records.decode_key(struct.pack(">h", 3) + kafka_string("consumer-group")) is None


def test_offset_commit_value_v3_layout():
    value = OffsetCommitValue(offset=42, leader_epoch=5, metadata="meta", commit_timestamp_ms=1_700_000_000_123)
    encoded = records.encode_offset_commit_value(value)
    assert encoded == (
        struct.pack(">hqi", 3, 42, 5) + kafka_string("meta") + struct.pack(">q", 1_700_000_000_123)
    )
    assert records.decode_offset_commit_value(encoded) == value


def test_offset_commit_value_v1_carries_an_expire_timestamp():
    encoded = struct.pack(">hq", 1, 9) + kafka_string("") + struct.pack(">qq", 100, 200)
    assert records.decode_offset_commit_value(encoded) == OffsetCommitValue(9, -1, "", 100, 200)


def test_offset_commit_value_with_an_expiry_is_written_as_v1():
    # An explicit retention (OffsetCommit v2-v4): only v1 can hold the expire timestamp.
    value = OffsetCommitValue(offset=9, leader_epoch=-1, metadata="m", commit_timestamp_ms=100,
                              expire_timestamp_ms=200)
    encoded = records.encode_offset_commit_value(value)
    assert encoded == struct.pack(">hq", 1, 9) + kafka_string("m") + struct.pack(">qq", 100, 200)
    assert records.decode_offset_commit_value(encoded) == value


def test_group_metadata_value_v3_layout_and_round_trip():
    member = MemberMetadataValue("m-1", "instance", "client", "/127.0.0.1", 30_000, 10_000, b"sub", b"assign")
    value = GroupMetadataValue("consumer", 4, "range", "m-1", 1_700_000_000_000, (member,))
    encoded = records.encode_group_metadata_value(value)
    expected = (
        struct.pack(">h", 3) + kafka_string("consumer") + struct.pack(">i", 4) + kafka_string("range")
        + kafka_string("m-1") + struct.pack(">q", 1_700_000_000_000) + struct.pack(">i", 1)
        + kafka_string("m-1") + kafka_string("instance") + kafka_string("client") + kafka_string("/127.0.0.1")
        + struct.pack(">ii", 30_000, 10_000) + struct.pack(">i", 3) + b"sub" + struct.pack(">i", 6) + b"assign"
    )
    assert encoded == expected
    assert records.decode_group_metadata_value(encoded) == value


def test_empty_group_metadata_value_has_null_protocol_and_leader():
    value = GroupMetadataValue("consumer", 2, None, None, 5, ())
    assert records.decode_group_metadata_value(records.encode_group_metadata_value(value)) == value


def test_group_metadata_value_v0_uses_session_timeout_for_both_timeouts():
    encoded = (
        struct.pack(">h", 0) + kafka_string("consumer") + struct.pack(">i", 1) + kafka_string("range")
        + kafka_string("m") + struct.pack(">i", 1) + kafka_string("m") + kafka_string("c") + kafka_string("h")
        + struct.pack(">i", 6000) + struct.pack(">i", 0) + struct.pack(">i", 0)
    )
    (member,) = records.decode_group_metadata_value(encoded).members
    assert (member.session_timeout_ms, member.rebalance_timeout_ms, member.group_instance_id) == (6000, 6000, None)


@pytest.mark.parametrize("data", [b"", b"\x00", struct.pack(">h", 3) + b"\x00\x00\x00"])
def test_truncated_values_raise_record_format_error(data):
    with pytest.raises(RecordFormatError):
        records.decode_offset_commit_value(data)


def test_unknown_value_version_raises():
    with pytest.raises(RecordFormatError, match="version 9"):
        records.decode_group_metadata_value(struct.pack(">h", 9))


def test_subscription_topics_are_read_from_any_version():
    v0 = struct.pack(">hi", 0, 2) + kafka_string("a") + kafka_string("b") + struct.pack(">i", -1)
    v1 = struct.pack(">hi", 1, 1) + kafka_string("c") + struct.pack(">i", -1) + struct.pack(">i", 0)
    assert subscribed_topics(v0) == frozenset({"a", "b"})
    assert subscribed_topics(v1) == frozenset({"c"})
    assert subscribed_topics(b"\x00") is None

"""The hand-written Fetch response reader (oncelog.protocol.fetch_response, used by the
client's fetcher and by a follower's replica fetcher) against responses kio writes from
Kafka's schemas, for every version the client sends (v4-v12)."""

from __future__ import annotations

import datetime

import pytest

from oncelog.protocol.fetch_response import read_fetch_response
from oncelog.protocol.framing import response_frame
from oncelog.protocol.messages import ErrorCode, ResponseBuilder, encode_response, is_flexible

RECORDS = b"\x00" * 40 + b"batch bytes"


@pytest.mark.parametrize("version", range(4, 13))
def test_a_fetch_response_written_by_kio_reads_back_field_for_field(version):
    build = ResponseBuilder(1, version)
    partition = build.make(
        "PartitionData", partition_index=3, error_code=ErrorCode.none, high_watermark=120, last_stable_offset=110,
        log_start_offset=7, aborted_transactions=(build.make("AbortedTransaction", producer_id=9, first_offset=101),),
        preferred_read_replica=-1, records=RECORDS,
        diverging_epoch=build.make("EpochEndOffset", epoch=5, end_offset=97) if build.has("EpochEndOffset") else None,
        current_leader=build.make("LeaderIdAndEpoch", leader_id=-1, leader_epoch=-1)
        if build.has("LeaderIdAndEpoch") else None,
        snapshot_id=build.make("SnapshotId", end_offset=-1, epoch=-1) if build.has("SnapshotId") else None,
    )
    empty = build.make("PartitionData", partition_index=4, error_code=ErrorCode.offset_out_of_range,
                       high_watermark=-1, last_stable_offset=-1, log_start_offset=-1,
                       aborted_transactions=None, preferred_read_replica=-1, records=None,
                       diverging_epoch=build.make("EpochEndOffset", epoch=-1, end_offset=-1) if version >= 12 else None,
                       current_leader=partition.current_leader if version >= 12 else None,
                       snapshot_id=partition.snapshot_id if version >= 12 else None)
    response = build.make(
        "FetchResponse", throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, session_id=4321,
        responses=(build.make("FetchableTopicResponse", topic="orders", partitions=(partition, empty)),),
    )
    frame = response_frame(77, encode_response(response), flexible_header=is_flexible(1, version))
    answer = read_fetch_response(version, memoryview(frame)[8:])  # after size and correlation id
    answers = answer.partitions
    assert answer.error == 0
    assert answer.session_id == (4321 if version >= 7 else 0)
    got = answers[("orders", 3)]
    assert (got.error, got.high_watermark, got.last_stable_offset) == (0, 120, 110)
    assert got.log_start_offset == (7 if version >= 5 else -1)
    assert got.aborted == ((9, 101),)
    assert bytes(got.records) == RECORDS
    assert answers[("orders", 4)].error == 1 and bytes(answers[("orders", 4)].records) == b""
    # v12's tagged diverging epoch: given for 3; kio leaves out 4's default (-1, -1).
    assert got.diverging_epoch == ((5, 97) if version >= 12 else None)
    assert answers[("orders", 4)].diverging_epoch is None

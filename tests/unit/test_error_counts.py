"""Counting a response's error codes for Kafka's ErrorsPerSec (oncelog.protocol.error_counts)."""

from __future__ import annotations

import datetime

import kio.schema.end_txn.v4.response as end_txn
import kio.schema.find_coordinator.v4.response as find_coordinator
from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId
from kio.static.primitive import i32

from oncelog.protocol.error_counts import count_errors, error_name

NO_THROTTLE = datetime.timedelta(0)


def coordinator(key: str, error: ErrorCode) -> find_coordinator.Coordinator:
    return find_coordinator.Coordinator(key=key, node_id=BrokerId(1), host="h", port=i32(9092), error_code=error,
                                        error_message=None)


def test_every_nested_error_code_counts_once_none_included():
    response = find_coordinator.FindCoordinatorResponse(throttle_time=NO_THROTTLE, coordinators=(
        coordinator("a", ErrorCode.none), coordinator("b", ErrorCode.coordinator_not_available),
        coordinator("c", ErrorCode.coordinator_not_available)))
    counts: dict[int, int] = {}
    count_errors(response, counts)
    assert counts == {ErrorCode.none: 1, ErrorCode.coordinator_not_available: 2}
    count_errors(end_txn.EndTxnResponse(throttle_time=NO_THROTTLE, error_code=ErrorCode.producer_fenced), counts)
    assert counts[ErrorCode.producer_fenced] == 1


def test_a_response_without_error_codes_counts_nothing():
    counts: dict[int, int] = {}
    count_errors(find_coordinator.FindCoordinatorResponse(throttle_time=NO_THROTTLE, coordinators=()), counts)
    assert counts == {}


def test_error_names_are_kafkas():
    assert [error_name(code) for code in (0, 6, 47, 12345)] == [
        "NONE", "NOT_LEADER_OR_FOLLOWER", "INVALID_PRODUCER_EPOCH", "12345"]

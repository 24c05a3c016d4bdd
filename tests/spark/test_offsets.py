"""Offset bookkeeping on the driver: the canonical JSON form and maxOffsetsPerTrigger."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from oncelog.spark.source.offsets import from_json, limit_offsets, to_json


def test_json_form_has_string_partitions_in_sorted_key_order():
    offsets = {("orders", 10): 3, ("orders", 2): 7, ("audit", 0): 1}

    nested = to_json(offsets)

    assert json.dumps(nested) == json.dumps(nested, sort_keys=True)
    assert nested == {"audit": {"0": 1}, "orders": {"10": 3, "2": 7}}
    assert from_json(json.loads(json.dumps(nested))) == offsets


def test_limit_shares_the_budget_in_proportion_to_lag():
    start = {("t", 0): 0, ("t", 1): 100}
    end = {("t", 0): 300, ("t", 1): 200}

    assert limit_offsets(start, end, 40) == {("t", 0): 30, ("t", 1): 110}


def test_limit_returns_end_when_the_lag_fits():
    start = {("t", 0): 5}
    end = {("t", 0): 9}

    assert limit_offsets(start, end, 100) == end


def test_partition_absent_from_start_is_counted_from_offset_zero():
    assert limit_offsets({("t", 0): 10}, {("t", 0): 10, ("t", 1): 50}, 20) == {
        ("t", 0): 10,
        ("t", 1): 20,
    }


lags = st.dictionaries(
    st.tuples(st.sampled_from("abc"), st.integers(0, 5)),
    st.tuples(st.integers(0, 1000), st.integers(0, 1000)),
    min_size=1,
)


@given(lags, st.integers(1, 3000))
def test_limit_never_exceeds_budget_never_passes_end_and_always_progresses(ranges, budget):
    start = {tp: low for tp, (low, _) in ranges.items()}
    end = {tp: low + extra for tp, (low, extra) in ranges.items()}
    total_lag = sum(end[tp] - start[tp] for tp in end)

    limited = limit_offsets(start, end, budget)

    assert set(limited) == set(end)
    assert all(start[tp] <= limited[tp] <= end[tp] for tp in end)
    assert sum(limited[tp] - start[tp] for tp in end) == min(budget, total_lag)

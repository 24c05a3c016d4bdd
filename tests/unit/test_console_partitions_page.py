"""The console's partitions table, paged by the broker (oncelog.web.model.PartitionsQuery):
which rows a page holds, in which order, and what a query string may ask."""

from __future__ import annotations

import pytest

from oncelog.web.model import ConsoleView, PartitionsQuery, PartitionView, QueryError, charted


def partition(topic: str, number: int, *, lag: int = 0, size: int = 0, age: int | None = None) -> PartitionView:
    return PartitionView(topic, number, 0, 100, 100, 100 - lag, size, 0, int(age is not None), age, late=False)


PARTITIONS = tuple(partition(topic, number, lag=number % 3, size=100 - number)
                   for topic in ("__consumer_offsets", "orders", "payments") for number in range(5))


def test_a_page_holds_limit_rows_of_the_partitions_shown_and_counts_them_all():
    rows, matching, page = PartitionsQuery(page=1, limit=3).select(PARTITIONS)
    assert [(p.topic, p.partition) for p in rows] == [("orders", 3), ("orders", 4), ("payments", 0)]
    assert (matching, page) == (10, 1)  # the internal topic is left out unless asked for
    _rows, matching, _page = PartitionsQuery(internal=True).select(PARTITIONS)
    assert matching == 15


def test_a_page_past_the_end_is_the_last_page():
    rows, matching, page = PartitionsQuery(page=99, limit=4).select(PARTITIONS)
    assert page == 2 and matching == 10 and [(p.topic, p.partition) for p in rows] == [("payments", 3), ("payments", 4)]
    assert PartitionsQuery(page=5, words=("nothing",)).select(PARTITIONS) == ([], 0, 0)


def test_sorting_is_over_every_partition_and_ties_keep_topic_and_partition_order():
    rows, _matching, _page = PartitionsQuery(sort="lso_lag", descending=True, limit=4).select(PARTITIONS)
    assert [(p.topic, p.partition, p.lso_lag) for p in rows] == [
        ("orders", 2, 2), ("payments", 2, 2), ("orders", 1, 1), ("orders", 4, 1)]
    youngest, _matching, _page = PartitionsQuery(sort="oldest_transaction_age_ms", descending=True).select(
        (partition("a", 0), partition("a", 1, age=50), partition("a", 2, age=10)))
    assert [p.partition for p in youngest] == [1, 2, 0]  # no open transaction sorts below every age


def test_the_filter_counts_each_word_once():
    assert PartitionsQuery.parse("partitions_filter=" + "+".join(["orders"] * 30)).words == ("orders",)


def test_the_filter_keeps_rows_holding_every_word():
    rows, matching, _page = PartitionsQuery.parse("partitions_filter=ORDERS-3 broker").select(PARTITIONS)
    assert matching == 1 and (rows[0].topic, rows[0].partition) == ("orders", 3)  # "this broker" is its placement


def test_the_query_string_is_parsed_with_defaults_and_bounded():
    assert PartitionsQuery.parse("") == PartitionsQuery()
    parsed = PartitionsQuery.parse("partitions_page=2&partitions_limit=500&partitions_sort=size_bytes"
                                   "&partitions_order=desc&internal=1")
    assert parsed == PartitionsQuery(2, 500, "size_bytes", True, (), True)
    for bad in ("partitions_limit=0", "partitions_limit=501", "partitions_page=-1", "partitions_page=1e3",
                "partitions_page=99999999999", "partitions_sort=topic.__class__", "partitions_order=up",
                "internal=true", "internal=1&internal=0", "partitions_filter=" + "w" * 257,
                "&".join(f"partitions_page={index}" for index in range(9)), "partitions_page=%C2%B2",
                "partitions_limit=%D9%A3", "sort=lso_lag", "partitions_filter=" + "+".join(map(str, range(17)))):
        with pytest.raises(QueryError):
            PartitionsQuery.parse(bad)


def test_the_json_carries_the_page_and_only_the_series_it_draws():
    series = {f"orders-{n}": [0, n * 10, None] for n in range(5)} | {"__consumer_offsets-0": [999]}
    view = ConsoleView(1, "cluster-id", "standalone", 0, (), PARTITIONS, ())
    answer = view.as_json(lso_history={"times_ms": [1, 2, 3], "series": series}, pipelines=[], pipelines_error=None,
                          query=PartitionsQuery(limit=2))
    assert [(p["topic"], p["partition"]) for p in answer["partitions"]] == [("orders", 0), ("orders", 1)]
    assert answer["partitions_page"] == {"page": 0, "limit": 2, "matching": 10, "sort": "partition", "order": "asc"}
    assert answer["max_lso_lag"] == 2  # over every partition, the internal ones too
    assert answer["lso_history"]["charted"] == ["orders-4", "orders-3", "orders-2", "orders-1"]  # internal: not asked
    assert set(answer["lso_history"]["series"]) == {"orders-0", "orders-1", "orders-2", "orders-3", "orders-4"}
    assert charted(series, lambda _topic: True, count=1) == ["__consumer_offsets-0"]

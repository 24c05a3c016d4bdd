"""oncelog.names' rule for the Spark sink's marker groups: the sink's partition-mode task
id, `<prefix>-<query id>-<task>`, is recognised as a marker group of that query only while
no consumer joins the group and it holds the one offset the sink commits (partition 0 of
its marker topic); anything else is a consumer group."""

from __future__ import annotations

from oncelog.names import sink_marker_query, sink_task_id

QUERY_ID = "3f1c2a9e-5b7d-4e21-9c0a-6d8e2f4b1a73"
MARKER = {("enriched-orders", 0)}  # what the sink commits: the next micro-batch's id, on partition 0


def test_a_sink_task_id_is_a_marker_group_of_its_query_whatever_the_prefix():
    for prefix in ("oncelog-sink", "oncelog-pipeline-orders-enriched", "team-a"):
        for task in (0, 1, 199):
            assert sink_marker_query(sink_task_id(prefix, QUERY_ID, task), "", MARKER) == QUERY_ID


def test_a_group_a_consumer_joined_is_a_consumer_group_even_with_a_marker_groups_name():
    assert sink_marker_query(sink_task_id("oncelog-sink", QUERY_ID, 0), "consumer", MARKER) is None


def test_groups_of_other_names_are_consumer_groups():
    for group in ("readers", f"oncelog-sink-{QUERY_ID}", f"{QUERY_ID}-0", f"oncelog-sink-{QUERY_ID}-gate-1a2b3c4d",
                  f"oncelog-sink-{QUERY_ID.upper()}-0", "oncelog-sink-not-a-uuid-0", f"oncelog-sink-{QUERY_ID}-0x"):
        assert sink_marker_query(group, "", MARKER) is None, group


def test_an_offsets_only_group_of_a_marker_groups_name_that_commits_other_offsets_is_a_consumer_group():
    """A consumer that assigns itself partitions and commits (Flink's, Beam's, per-instance
    ids like `orders-<uuid>-1`) keeps its lag on /metrics and its place in the console."""
    group = f"orders-{QUERY_ID}-1"
    assert sink_marker_query(group, "", {("orders", 0), ("orders", 1)}) is None
    assert sink_marker_query(group, "", {("orders", 3)}) is None
    assert sink_marker_query(group, "", set()) is None

"""oncelog.names' rule for the Spark sink's marker groups: the sink's partition-mode task
id, `<prefix>-<query id>-<task>`, is recognised as a marker group of that query only while
no consumer joins the group; anything else named otherwise is a consumer group."""

from __future__ import annotations

from oncelog.names import sink_marker_query, sink_task_id

QUERY_ID = "3f1c2a9e-5b7d-4e21-9c0a-6d8e2f4b1a73"


def test_a_sink_task_id_is_a_marker_group_of_its_query_whatever_the_prefix():
    for prefix in ("oncelog-sink", "oncelog-pipeline-orders-enriched", "team-a"):
        for task in (0, 1, 199):
            assert sink_marker_query(sink_task_id(prefix, QUERY_ID, task), "") == QUERY_ID


def test_a_group_a_consumer_joined_is_a_consumer_group_even_with_a_marker_groups_name():
    assert sink_marker_query(sink_task_id("oncelog-sink", QUERY_ID, 0), "consumer") is None


def test_groups_of_other_names_are_consumer_groups():
    for group in ("readers", f"oncelog-sink-{QUERY_ID}", f"{QUERY_ID}-0", f"oncelog-sink-{QUERY_ID}-gate-1a2b3c4d",
                  f"oncelog-sink-{QUERY_ID.upper()}-0", "oncelog-sink-not-a-uuid-0", f"oncelog-sink-{QUERY_ID}-0x"):
        assert sink_marker_query(group, "") is None, group

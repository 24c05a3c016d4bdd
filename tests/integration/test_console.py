"""The web console on `http.listener`, opened in a real browser (Debian's Chromium,
headless, driven by Playwright) against a real broker with real clients: what it shows
of open and hanging transactions, LSO lag, producers, consumer groups, the Spark sink's
marker groups and the pipelines' reports, how it is drawn (no sign-in form without an
authorizer, numbers under headers aligned as they are), that it follows the broker live,
and that it is read-only. The brokers-and-ISR view of a cluster is in
tests/cluster/test_cluster_metadata.py."""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from oncelog import EmbeddedBroker
from oncelog.client.cluster import Cluster
from oncelog.client.config import ClientConfig
from oncelog.client.producer import ProducerSettings, TransactionalProducer
from oncelog.names import sink_task_id
from oncelog.spark.pipeline.metrics import PipelineMetrics
from oncelog.spark.pipeline.report import ensure_report_topic
from oncelog.web.history import LagHistory
from oncelog.web.pipelines import REPORT_TOPIC
from tests.support.browser import chromium, until

# Chosen by a client, so it must reach the page as text, never as markup.
HANGING_ID = '<img src=x onerror="document.body.dataset.injected=1">hanging'
QUERY_ID = "3f1c2a9e-5b7d-4e21-9c0a-6d8e2f4b1a73"  # Spark's query ids are UUIDs
MARKER_PREFIX = "oncelog-pipeline-enriched"  # what `oncelog pipeline run --sink enriched` gives the sink
PIPELINE_CLOCK_AHEAD_MS = 300_000  # the runner's host clock runs 5 minutes ahead of the broker's


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    """A broker with: 3 plain records and an open transaction of 2 on orders-0, a
    transaction on orders-1 past its 1 s timeout (the coordinator's abort timer is held
    off, so it hangs), group `readers` committed at 1 on orders-0, and two pipelines'
    reports (one into a topic, whose runner's clock runs ahead and which serves its metrics,
    one into an Iceberg table). The first pipeline's sink wrote 50 records to `enriched`
    and keeps its marker groups for tasks 0 and 1 at micro-batch 3, as the sink's
    partition mode does (TxnOffsetCommit under the task's transactional id)."""
    config = {"http.listener": "127.0.0.1:0",
              "transaction.abort.timed.out.transaction.cleanup.interval.ms": "3600000"}
    metrics = PipelineMetrics("127.0.0.1", 0)  # the runner's --metrics-port 0
    metrics_url = metrics.start()
    with EmbeddedBroker(tmp_path_factory.mktemp("console"), config) as running:
        bootstrap = running.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for created in admin.create_topics([NewTopic("orders", 2, 1), NewTopic("enriched", 1, 1),
                                            NewTopic("traffic", 1, 1)]).values():
            created.result(10)
        ensure_report_topic({"bootstrap.servers": bootstrap}, REPORT_TOPIC)  # as the runner makes it
        plain = Producer({"bootstrap.servers": bootstrap})
        for _ in range(3):
            plain.produce("orders", b"plain", partition=0)
        for _ in range(50):
            plain.produce("enriched", b"enriched", partition=0)
        ahead = {**pipeline_report(), "metrics_url": metrics_url,
                 "timestamp_ms": pipeline_report()["timestamp_ms"] + PIPELINE_CLOCK_AHEAD_MS}
        plain.produce(REPORT_TOPIC, key=QUERY_ID.encode(), value=json.dumps(ahead).encode())
        lake = {**pipeline_report(), "id": "query-2", "name": "orders-to-lake", "sink_topics": [],
                "sink_table": "shop.orders", "sink_mode": "iceberg", "metrics_url": "javascript:alert(1)"}
        plain.produce(REPORT_TOPIC, key=b"query-2", value=json.dumps(lake).encode())
        plain.flush(10)
        cluster = Cluster(ClientConfig.from_settings(bootstrap))
        for task in (0, 1):
            marker = sink_task_id(MARKER_PREFIX, QUERY_ID, task)
            producer = TransactionalProducer(cluster, marker, ProducerSettings(), timeout_s=10)
            producer.init()
            producer.begin()
            producer.send_offsets(marker, {("enriched", 0): 3})
            producer.commit()
        open_txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": "console-open"})
        open_txn.init_transactions(10)
        open_txn.begin_transaction()
        for _ in range(2):
            open_txn.produce("orders", b"open", partition=0)
        open_txn.flush(10)
        hanging = Producer({"bootstrap.servers": bootstrap, "transactional.id": HANGING_ID,
                            "transaction.timeout.ms": 1000})
        hanging.init_transactions(10)
        hanging.begin_transaction()
        hanging.produce("orders", b"hanging", partition=1)
        hanging.flush(10)
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "readers"})
        consumer.commit(offsets=[TopicPartition("orders", 0, 1)], asynchronous=False)
        consumer.close()
        time.sleep(1.2)  # the hanging transaction outlives its timeout
        host, port = running.broker.http.address
        try:
            with chromium() as browser:
                yield {"url": f"http://{host}:{port}", "browser": browser, "open_txn": open_txn,
                       "metrics_url": metrics_url, "bootstrap": bootstrap}
        finally:
            cluster.close()
            metrics.stop()


def pipeline_report() -> dict:
    """A report as `oncelog pipeline run` produces it (oncelog.spark.pipeline.report)."""
    now = int(time.time() * 1000)
    return {"version": 1, "id": QUERY_ID, "run_id": "run-1", "name": "enrich-orders", "state": "running",
            "source_topic": "orders", "sink_topics": ["enriched"], "sink_mode": "batch", "batch": 41,
            "batches": 42, "records": 42000, "input_rows_per_second": 1000.0, "processed_rows_per_second": 2100.5,
            "batch_ms": 480, "phases_ms": {"addBatch": 400}, "commit_ms": 35.2, "records_written": 42000,
            "started_ms": now - 60_000, "timestamp_ms": now}


@pytest.fixture(scope="module")
def drawn(scene):
    """One page, loaded once, for the tests that only look at what it draws."""
    page, errors = open_console(scene)
    yield page
    assert errors == []
    page.close()


def open_console(scene):
    page = scene["browser"].new_page(viewport={"width": 1280, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(scene["url"] + "/")
    page.wait_for_selector("body[data-loaded]", state="attached", timeout=15_000)
    return page, errors


def row_text(page, selector: str) -> str:
    return page.locator(selector).inner_text()


def test_the_console_shows_open_and_hanging_transactions_lso_lag_producers_groups_and_pipelines(scene):
    page, errors = open_console(scene)
    try:
        assert errors == []
        # Transactions: both open, the one past its timeout flagged, its id shown as text.
        open_row = row_text(page, '#transactions tr[data-txn="console-open"]')
        assert "Ongoing" in open_row and "orders-0" in open_row and "hanging" not in open_row
        hanging_row = page.locator("#transactions tr.hanging")
        assert hanging_row.count() == 1
        assert HANGING_ID in hanging_row.inner_text() and "orders-1" in hanging_row.inner_text()
        assert page.evaluate("document.body.dataset.injected") is None
        assert page.locator('[data-card="hanging transactions"] .value').inner_text() == "1"
        # Partitions: orders-0 has HW 5, LSO 3 (two records wait for the open transaction),
        # one producer with an open transaction; internal topics hidden by default.
        cells = page.locator('#partitions tr[data-partition="orders-0"] td').all_inner_texts()
        assert cells[3:6] == ["5", "3", "2"]
        assert cells[7:9] == ["1", "1"]
        assert page.locator('#partitions tr[data-partition="orders-0"] svg.spark polyline').count() == 1
        assert page.locator('#partitions tr[data-partition^="__"]').count() == 0
        page.check("#show-internal")  # the broker then answers the internal topics' partitions too
        page.wait_for_selector('#partitions tr[data-partition="__transaction_state-0"]', state="attached",
                               timeout=10_000)
        # The chart draws the lagging partitions.
        page.wait_for_selector("#lso-chart canvas", timeout=10_000)
        assert "orders-0" in (page.locator("#lso-chart .u-legend").text_content() or "")
        # The group: lag 4 to the high watermark, 2 to the LSO, the rest waits for transactions.
        group = page.locator('#groups tr[data-group="readers"] td').all_inner_texts()
        assert group[3:6] == ["orders-0", "1", "4"] and group[6].startswith("2")
        assert "waits for transactions" in group[6]
        # The pipeline's report.
        card = row_text(page, f'[data-pipeline="{QUERY_ID}"]')
        assert "enrich-orders" in card and "running" in card and "2,101 records/s" in card and "batch" in card
        assert "42,000" in card and "35 ms" in card
        lake_card = row_text(page, '[data-pipeline="query-2"]')
        assert "orders → iceberg:shop.orders" in lake_card and "iceberg" in lake_card
        assert page.locator("#cluster").is_hidden()  # standalone: no brokers-and-ISR view
    finally:
        page.close()


def test_topics_show_their_traffic_and_every_table_sorts_and_filters(scene):
    producer = Producer({"bootstrap.servers": scene["bootstrap"], "linger.ms": 0})
    page, errors = open_console(scene)
    try:
        deadline = time.monotonic() + 15
        rate = "0"
        while rate == "0" and time.monotonic() < deadline:  # produce until a 2 s sample has seen traffic
            for _ in range(20):
                producer.produce("traffic", b"x" * 100)
            producer.flush(10)
            page.wait_for_timeout(300)
            row = page.locator('#topics tr[data-topic="traffic"] td')
            rate = row.nth(4).inner_text() if row.count() else "0"
        assert int(rate.replace(",", "")) > 0
        assert page.locator('#topics tr[data-topic="traffic"] td').nth(1).inner_text() == "1"
        page.click("#topics th:nth-child(4)")  # size, ascending
        page.click("#topics th:nth-child(4)")  # descending: the biggest first
        page.wait_for_function("document.querySelector('#topics th:nth-child(4)').dataset.sorted === 'descending'")
        sizes = [int(size) for size in page.eval_on_selector_all(
            "#topics tbody tr td:nth-child(4)", "cells => cells.map((cell) => cell.dataset.sort)")]
        assert sizes == sorted(sizes, reverse=True) and len(sizes) >= 2
        page.fill("#partitions-filter", "orders")
        until(page, "[...document.querySelectorAll('#partitions tbody tr')]"  # asked of the broker
                    ".every((row) => row.dataset.partition.startsWith('orders-'))")
        assert page.locator("#partitions tbody tr").count() == 2
        order = "rows => rows.map((row) => row.dataset.txn)"
        page.click("#transactions th:nth-child(5)")  # age, ascending
        ages = [int(age) for age in page.eval_on_selector_all(
            "#transactions tbody tr td:nth-child(5)", "cells => cells.map((cell) => cell.dataset.sort)")]
        assert ages == sorted(ages) and len(ages) == 2
        youngest_first = page.eval_on_selector_all("#transactions tbody tr", order)
        page.click("#transactions th:nth-child(5)")  # descending
        assert page.eval_on_selector_all("#transactions tbody tr", order) == youngest_first[::-1]
        page.fill("#transactions-filter", "orders-1")  # the hanging one's partition
        assert page.locator("#transactions tbody tr").count() == 1
        page.fill("#groups-filter", "no-such-group")
        assert page.locator("#groups tbody tr.empty").count() == 1
        assert errors == []
    finally:
        page.close()


def test_the_broker_configs_are_listed_with_their_sources_and_filter_by_key(scene):
    with urllib.request.urlopen(scene["url"] + "/api/broker/configs", timeout=10) as answer:
        configs = {c["name"]: c for c in json.load(answer)["configs"]}
    assert configs["transaction.abort.timed.out.transaction.cleanup.interval.ms"]["source"] == "STATIC_BROKER_CONFIG"
    assert configs["log.retention.hours"]["source"] == "DEFAULT_CONFIG"
    assert configs["ssl.key.password"]["value"] is None and configs["ssl.key.password"]["sensitive"] is True
    page, errors = open_console(scene)
    try:
        page.click("#broker-configs summary")
        page.wait_for_selector("#broker-configs[data-loaded]", state="attached", timeout=10_000)
        page.fill("#broker-configs-filter", "cleanup.interval")
        rows = page.locator("#broker-configs-table tbody tr")
        assert sorted(row.get_attribute("data-config") or "" for row in rows.all()) == [
            "transaction.abort.timed.out.transaction.cleanup.interval.ms",
            "transaction.remove.expired.transaction.cleanup.interval.ms"]
        assert errors == []
    finally:
        page.close()


def test_the_console_follows_the_broker_live_when_a_transaction_commits(scene):
    page, errors = open_console(scene)
    try:
        assert page.locator('#transactions tr[data-txn="console-open"]').count() == 1
        loads = int(page.evaluate("document.body.dataset.loaded"))
        scene["open_txn"].commit_transaction(10)
        page.wait_for_function(
            "() => !document.querySelector('#transactions tr[data-txn=\"console-open\"]')", timeout=10_000)
        assert int(page.evaluate("document.body.dataset.loaded")) > loads  # redrawn from a new answer
        page.wait_for_function(
            "() => document.querySelectorAll('#partitions tr[data-partition=\"orders-0\"] td')[5].innerText === '0'",
            timeout=10_000)
        assert "waits for transactions" not in row_text(page, '#groups tr[data-group="readers"]')
        assert errors == []
    finally:
        page.close()


def test_the_console_is_read_only_and_serves_only_its_own_files(scene):
    url = scene["url"]
    with urllib.request.urlopen(url + "/api/console?internal=1&partitions_limit=500", timeout=10) as response:
        assert response.headers["Content-Type"] == "application/json"
        data = json.load(response)
    assert data["mode"] == "standalone" and data["actions"] == {"sign_in": False}  # no authorizer: no actions
    assert {p["topic"] for p in data["partitions"]} >= {"orders", "__transaction_state"}
    for method in ("POST", "DELETE", "PUT"):
        request = urllib.request.Request(url + "/api/console", data=b"{}", method=method)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 405
    abort = urllib.request.Request(url + "/api/transactions/abort", data=b'{"transactional_id": "console-open"}',
                                   method="POST", headers={"X-Oncelog-Console": "1"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(abort, timeout=10)
    assert refused.value.code == 401  # nobody can sign in without an authorizer
    for path in ("/static/../http.py", "/static/%2e%2e/http.py", "/static/nothing.js", "/admin"):
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(url + path, timeout=10)
        assert missing.value.code == 404, path
    with urllib.request.urlopen(url + "/static/vendor/uPlot.iife.min.js", timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/javascript")
    with urllib.request.urlopen(url + "/metrics", timeout=10) as response:
        assert b"kafka_network_request_requests_total" in response.read()


def test_without_an_authorizer_the_page_draws_no_sign_in_form_and_no_sign_out_button(drawn):
    # What is drawn (Playwright's :visible: a box on the page), not the attributes.
    assert drawn.locator("header button:visible, header input:visible").count() == 0
    assert drawn.locator("#sign-in").is_hidden() and drawn.locator("#signed-in").is_hidden()
    assert drawn.evaluate("getComputedStyle(document.getElementById('sign-in')).display") == "none"


def test_numeric_columns_are_right_aligned_under_right_aligned_headers(drawn):
    columns = drawn.evaluate("""(ids) => ids.flatMap((id) => {
        const table = document.getElementById(id);
        const headers = [...table.querySelectorAll("thead th")];
        const row = table.querySelector("tbody tr:not(.empty)");
        return [...row.cells].map((cell, i) => ({
            table: id, header: headers[i].textContent, numeric: cell.classList.contains("num"),
            header_align: getComputedStyle(headers[i]).textAlign, cell_align: getComputedStyle(cell).textAlign}));
    })""", ["transactions", "partitions", "groups"])
    misaligned = [column for column in columns if column["header_align"] != column["cell_align"]]
    assert misaligned == []
    numeric = {(column["table"], column["header"]) for column in columns if column["numeric"]}
    assert {("partitions", "high watermark"), ("groups", "lag (HW)"), ("transactions", "age")} <= numeric
    assert all(column["cell_align"] == "right" for column in columns if column["numeric"])


def test_a_pipeline_whose_clock_runs_ahead_of_the_broker_is_reported_seconds_ago_not_in_the_future(drawn):
    # Its own timestamp is 5 minutes past the broker's clock; the broker appended it seconds ago.
    ages = drawn.evaluate("Object.fromEntries(latest.pipelines.map((p) => [p.id, p.age_ms]))")  # /api/console's
    assert 0 <= ages[QUERY_ID] < 60_000
    card = drawn.locator(f'[data-pipeline="{QUERY_ID}"]')
    last_report = card.locator("dt:text-is('last report') + dd").inner_text()
    assert re.fullmatch(r"\d+(\.\d)? (ms|s) ago", last_report), last_report
    assert "no report for" not in card.inner_text()  # not stale either


def test_a_pipeline_card_links_to_the_metrics_its_runner_serves(drawn, scene):
    link = drawn.locator(f'[data-pipeline="{QUERY_ID}"] a.pipeline-metrics')
    assert link.get_attribute("href") == scene["metrics_url"]
    with urllib.request.urlopen(link.get_attribute("href"), timeout=10) as response:
        assert b"process_cpu_seconds_total" in response.read()  # the runner's own /metrics
    # A report's URL is anyone's to write: only http(s) becomes a link.
    lake = drawn.locator('[data-pipeline="query-2"]')
    assert lake.locator("a").count() == 0
    assert lake.locator("dt:text-is('metrics') + dd").inner_text() == "\u2013"


def test_the_sink_marker_groups_are_shown_under_their_pipeline_and_left_out_of_group_lag_on_metrics(drawn, scene):
    markers = [sink_task_id(MARKER_PREFIX, QUERY_ID, task) for task in (0, 1)]
    card = drawn.locator(f'[data-pipeline="{QUERY_ID}"]')
    assert card.locator("dt:text-is('sink marker groups') + dd").inner_text() == "2 (tasks 0, 1)"
    # Not consumers: out of the groups table and its count, unless internal things are asked for.
    assert [row.split("\t")[0] for row in drawn.locator("#groups tr[data-group]").all_inner_texts()] == ["readers"]
    assert drawn.locator('[data-card="consumer groups"] .value').inner_text() == "1"
    drawn.check("#show-internal")
    try:
        drawn.wait_for_selector(f'#groups tr[data-group="{markers[0]}"]', state="attached", timeout=10_000)
        row = drawn.locator(f'#groups tr[data-group="{markers[0]}"] td').all_inner_texts()
        assert "sink marker of enrich-orders" in row[0]
        assert row[3:7] == ["enriched-0", "3", "\u2013", "\u2013"]  # its offset is a micro-batch: no lag
        assert drawn.locator(f'#groups tr[data-group="{markers[1]}"]').count() == 1
    finally:
        drawn.uncheck("#show-internal")
    with urllib.request.urlopen(scene["url"] + "/metrics", timeout=10) as response:
        families = {family.name: family.samples for family in text_string_to_metric_families(response.read().decode())}
    for name in ("kafka_consumergroup_current_offset", "kafka_consumergroup_lag", "oncelog_consumergroup_lag_stable"):
        groups = {sample.labels["consumergroup"] for sample in families[name]}
        assert "readers" in groups and not groups & set(markers), name
    # Still groups of this coordinator: counted as offsets-only ones.
    offsets_only = [sample.value for sample in families["oncelog_groups"]
                    if sample.labels == {"state": "Empty", "protocol_type": ""}]
    assert offsets_only == [3.0]  # readers and the two markers


def test_lag_history_keeps_every_series_aligned_with_the_sample_times():
    history = LagHistory(kept=3)
    history.record(1, {"a-0": 0})
    history.record(2, {"a-0": 2, "b-0": 5})  # b-0 appears: a gap before it
    history.record(3, {"b-0": 4})  # a-0 is gone: a gap
    history.record(4, {"b-0": 0})  # the window moves on
    assert history.as_json() == {"times_ms": [2, 3, 4], "series": {"a-0": [2, None, None], "b-0": [5, 4, 0]}}
    history.record(5, {"b-0": 0})
    assert "a-0" not in history.as_json()["series"]  # nothing left of it in the window

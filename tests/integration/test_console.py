"""The web console on `http.listener`, opened in a real browser (Debian's Chromium,
headless, driven by Playwright) against a real broker with real clients: what it shows
of open and hanging transactions, LSO lag, producers, consumer groups and the pipelines'
reports, that it follows the broker live, and that it is read-only. The brokers-and-ISR
view of a cluster is in tests/cluster/test_cluster_metadata.py."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog import EmbeddedBroker
from oncelog.web.history import LagHistory
from oncelog.web.pipelines import REPORT_TOPIC
from tests.support.browser import chromium

# Chosen by a client, so it must reach the page as text, never as markup.
HANGING_ID = '<img src=x onerror="document.body.dataset.injected=1">hanging'


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    """A broker with: 3 plain records and an open transaction of 2 on orders-0, a
    transaction on orders-1 past its 1 s timeout (the coordinator's abort timer is held
    off, so it hangs), group `readers` committed at 1 on orders-0, and two pipelines'
    reports (one into a topic, one into an Iceberg table)."""
    config = {"http.listener": "127.0.0.1:0",
              "transaction.abort.timed.out.transaction.cleanup.interval.ms": "3600000"}
    with EmbeddedBroker(tmp_path_factory.mktemp("console"), config) as running:
        bootstrap = running.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("orders", 2, 1)])["orders"].result(10)
        plain = Producer({"bootstrap.servers": bootstrap})
        for _ in range(3):
            plain.produce("orders", b"plain", partition=0)
        plain.produce(REPORT_TOPIC, key=b"query-1", value=json.dumps(pipeline_report()).encode())
        lake = {**pipeline_report(), "id": "query-2", "name": "orders-to-lake", "sink_topics": [],
                "sink_table": "shop.orders", "sink_mode": "iceberg"}
        plain.produce(REPORT_TOPIC, key=b"query-2", value=json.dumps(lake).encode())
        plain.flush(10)
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
        with chromium() as browser:
            yield {"url": f"http://{host}:{port}", "browser": browser, "open_txn": open_txn}


def pipeline_report() -> dict:
    """A report as `oncelog pipeline run` produces it (oncelog.spark.pipeline_report)."""
    now = int(time.time() * 1000)
    return {"version": 1, "id": "query-1", "run_id": "run-1", "name": "enrich-orders", "state": "running",
            "source_topic": "orders", "sink_topics": ["enriched"], "sink_mode": "batch", "batch": 41,
            "batches": 42, "records": 42000, "input_rows_per_second": 1000.0, "processed_rows_per_second": 2100.5,
            "batch_ms": 480, "phases_ms": {"addBatch": 400}, "commit_ms": 35.2, "records_written": 42000,
            "started_ms": now - 60_000, "timestamp_ms": now}


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
        page.check("#show-internal")
        assert page.locator('#partitions tr[data-partition="__transaction_state-0"]').count() == 1
        # The chart draws the lagging partitions.
        page.wait_for_selector("#lso-chart canvas", timeout=10_000)
        assert "orders-0" in (page.locator("#lso-chart .u-legend").text_content() or "")
        # The group: lag 4 to the high watermark, 2 to the LSO, the rest waits for transactions.
        group = page.locator('#groups tr[data-group="readers"] td').all_inner_texts()
        assert group[3:6] == ["orders-0", "1", "4"] and group[6].startswith("2")
        assert "waits for transactions" in group[6]
        # The pipeline's report.
        card = row_text(page, '[data-pipeline="query-1"]')
        assert "enrich-orders" in card and "running" in card and "2,101 records/s" in card and "batch" in card
        assert "42,000" in card and "35 ms" in card
        lake_card = row_text(page, '[data-pipeline="query-2"]')
        assert "orders → iceberg:shop.orders" in lake_card and "iceberg" in lake_card
        assert page.locator("#cluster").is_hidden()  # standalone: no brokers-and-ISR view
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
    with urllib.request.urlopen(url + "/api/console", timeout=10) as response:
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


def test_lag_history_keeps_every_series_aligned_with_the_sample_times():
    history = LagHistory(kept=3)
    history.record(1, {"a-0": 0})
    history.record(2, {"a-0": 2, "b-0": 5})  # b-0 appears: a gap before it
    history.record(3, {"b-0": 4})  # a-0 is gone: a gap
    history.record(4, {"b-0": 0})  # the window moves on
    assert history.as_json() == {"times_ms": [2, 3, 4], "series": {"a-0": [2, None, None], "b-0": [5, 4, 0]}}
    history.record(5, {"b-0": 0})
    assert "a-0" not in history.as_json()["series"]  # nothing left of it in the window

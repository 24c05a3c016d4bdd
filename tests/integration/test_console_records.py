"""The console's message browser, `GET /api/topics/{topic}/records`: each record with its
fate (committed, aborted, open, none) and the markers, on a real broker written by
confluent-kafka, as read_uncommitted and read_committed consumers see the partition."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog import EmbeddedBroker
from oncelog.storage import browse
from tests.support.browser import chromium
from tests.support.secured import secured_broker


@pytest.fixture(scope="module")
def browsed(tmp_path_factory):
    """ledger-0 holds, in order: 2 plain records (gzip), a committed transaction of 2, an
    aborted one of 2, 1 plain record, and an open transaction of 2 (left open)."""
    with EmbeddedBroker(tmp_path_factory.mktemp("records"), {"http.listener": "127.0.0.1:0"}) as running:
        bootstrap = running.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("ledger", 1, 1)])["ledger"].result(10)
        plain = Producer({"bootstrap.servers": bootstrap, "compression.type": "gzip"})
        for i in range(2):
            plain.produce("ledger", value=f"plain-{i}".encode(), key=b"k", headers=[("h", b"\xff\x00")])
        plain.flush(10)
        for fate in ("commit", "abort"):
            txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"records-{fate}"})
            txn.init_transactions(10)
            txn.begin_transaction()
            for i in range(2):
                txn.produce("ledger", value=f"{fate}-{i}".encode())
            txn.flush(10)
            if fate == "commit":
                txn.commit_transaction(10)
            else:
                txn.abort_transaction(10)
        plain.produce("ledger", value=b"\xff\xfebinary")
        plain.flush(10)
        open_txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": "records-open"})
        open_txn.init_transactions(10)
        open_txn.begin_transaction()
        for i in range(2):
            open_txn.produce("ledger", value=f"open-{i}".encode())
        open_txn.flush(10)
        host, port = running.broker.http.address
        yield {"url": f"http://{host}:{port}", "bootstrap": bootstrap, "open": open_txn}


def get(scene, path: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(scene["url"] + path, timeout=10) as answer:
            return answer.status, json.load(answer)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def text(field) -> str | None:
    return None if field is None else field.get("text")


def test_each_record_shows_its_fate_and_each_marker_is_a_record_of_its_own(browsed):
    status, page = get(browsed, "/api/topics/ledger/records?partition=0&offset=0&limit=100")
    assert status == 200
    rows = [(r["offset"], text(r["value"]), r["status"], r.get("marker")) for r in page["records"]]
    assert rows == [
        (0, "plain-0", "none", None), (1, "plain-1", "none", None),
        (2, "commit-0", "committed", None), (3, "commit-1", "committed", None), (4, None, "committed", "commit"),
        (5, "abort-0", "aborted", None), (6, "abort-1", "aborted", None), (7, None, "aborted", "abort"),
        (8, None, "none", None),
        (9, "open-0", "open", None), (10, "open-1", "open", None),
    ]
    by_offset = {r["offset"]: r for r in page["records"]}
    assert [by_offset[o]["marker_offset"] for o in (2, 3, 5, 6, 9, 0)] == [4, 4, 7, 7, None, None]
    assert by_offset[4]["control"] is True and "control" not in by_offset[2]
    assert by_offset[2]["producer_id"] == by_offset[4]["producer_id"] >= 0
    assert by_offset[0]["producer_id"] != by_offset[2]["producer_id"]
    assert by_offset[0]["key"] == {"base64": base64.b64encode(b"k").decode(), "text": "k"}
    assert by_offset[0]["headers"] == [{"key": "h", "value": {"base64": base64.b64encode(b"\xff\x00").decode()}}]
    assert by_offset[8]["value"] == {"base64": base64.b64encode(b"\xff\xfebinary").decode()}  # no text: not UTF-8
    assert (page["high_watermark"], page["last_stable_offset"], page["next_offset"]) == (11, 9, 11)


def test_read_committed_shows_what_such_a_consumer_reads_below_the_last_stable_offset(browsed):
    status, page = get(browsed, "/api/topics/ledger/records?isolation=read_committed")
    assert status == 200
    shown = [(r["offset"], r["status"]) for r in page["records"] if not r.get("control")]
    assert shown == [(0, "none"), (1, "none"), (2, "committed"), (3, "committed"), (8, "none")]
    consumer = Consumer({"bootstrap.servers": browsed["bootstrap"], "group.id": "records-check",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition("ledger", 0, 0)])
    read = []
    while len(read) < 5:
        message = consumer.poll(10)
        assert message is not None and message.error() is None
        read.append(message.offset())
    consumer.close()
    assert read == [offset for offset, _status in shown]  # the browser agrees with the consumer


def test_a_page_starts_where_asked_and_the_last_page_ends_at_the_high_watermark(browsed):
    _, page = get(browsed, "/api/topics/ledger/records?offset=3&limit=3")
    assert [(r["offset"], r["status"]) for r in page["records"]] == [(3, "committed"), (4, "committed"),
                                                                     (5, "aborted")]
    assert page["next_offset"] == 6
    _, last = get(browsed, "/api/topics/ledger/records?offset=-1&limit=2")
    assert [r["offset"] for r in last["records"]] == [9, 10]
    _, by_time = get(browsed, "/api/topics/ledger/records?timestamp=0&limit=1")
    assert [r["offset"] for r in by_time["records"]] == [0]


def test_a_search_by_key_or_by_a_substring_of_the_value_returns_only_what_it_finds(browsed):
    _, by_key = get(browsed, "/api/topics/ledger/records?key=k")
    assert [r["offset"] for r in by_key["records"]] == [0, 1]
    _, by_value = get(browsed, "/api/topics/ledger/records?contains=abort-")
    assert [(r["offset"], r["status"], r["marker_offset"]) for r in by_value["records"]] == [
        (5, "aborted", 7), (6, "aborted", 7)]
    assert by_value["next_offset"] == 11  # the whole partition was searched
    _, committed = get(browsed, "/api/topics/ledger/records?contains=abort-&isolation=read_committed")
    assert committed["records"] == []
    _, both = get(browsed, "/api/topics/ledger/records?key=k&contains=-1")
    assert [r["offset"] for r in both["records"]] == [1]
    _, paged = get(browsed, "/api/topics/ledger/records?contains=-&limit=3")
    assert ([r["offset"] for r in paged["records"]], paged["next_offset"]) == ([0, 1, 2], 3)


def test_past_what_a_page_reads_the_fate_comes_from_the_index_the_producer_state_and_a_marker_scan(
        browsed, monkeypatch):
    monkeypatch.setattr(browse, "MAX_READ_BYTES", 1)  # each read: the one batch asked for
    found = {}
    for offset in (2, 5, 9):
        _, page = get(browsed, f"/api/topics/ledger/records?offset={offset}&limit=1")
        [record] = page["records"]
        found[offset] = (record["status"], record["marker_offset"])
    assert found == {2: ("committed", 4), 5: ("aborted", 7), 9: ("open", None)}


def test_the_page_draws_each_records_fate_and_what_a_read_committed_consumer_sees(browsed):
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(browsed["url"] + "/")
        page.wait_for_selector("body[data-loaded]", state="attached", timeout=15_000)

        def shown(isolation: str, format_: str = "text") -> list[tuple[str, str, str]]:
            drawn = page.get_attribute("#records", "data-shown") or "0"
            page.fill("#records-topic", "ledger")
            page.select_option("#records-isolation", isolation)
            page.select_option("#records-format", format_)
            page.click("#records-form button[type=submit]")
            page.wait_for_selector(f"#records[data-shown='{int(drawn) + 1}']", state="attached", timeout=10_000)
            return [(row.get_attribute("data-offset") or "", row.get_attribute("data-status") or "",
                     row.locator("td").nth(5).inner_text())
                    for row in page.locator("#records tbody tr").all()]

        uncommitted = shown("read_uncommitted")
        assert [(offset, status) for offset, status, _text in uncommitted] == [
            ("0", "none"), ("1", "none"), ("2", "committed"), ("3", "committed"), ("4", "committed"),
            ("5", "aborted"), ("6", "aborted"), ("7", "aborted"), ("8", "none"), ("9", "open"), ("10", "open")]
        assert [text for _offset, _status, text in uncommitted][3:6] == ["committed", "commit marker", "aborted"]
        assert [offset for offset, _status, _text in shown("read_committed")] == ["0", "1", "2", "3", "4", "7", "8"]
        assert page.locator("#records tbody tr[data-offset='8'] td").nth(3).inner_text() == "ff fe 62 69 6e 61 72 79"
        shown("read_uncommitted", "hex")
        assert page.locator("#records tbody tr[data-offset='0'] td").nth(3).inner_text() == "70 6c 61 69 6e 2d 30"
        page.close()
    assert errors == []


def test_a_decided_transaction_turns_from_open_to_committed_with_its_marker(browsed):
    browsed["open"].commit_transaction(10)
    _, page = get(browsed, "/api/topics/ledger/records?offset=9")
    assert [(r["offset"], r["status"], r["marker_offset"]) for r in page["records"]] == [
        (9, "committed", 11), (10, "committed", 11), (11, "committed", 11)]


@pytest.mark.parametrize(("query", "status", "error"), [
    ("?limit=0", 400, "limit must be between 1 and 1000"),
    ("?limit=many", 400, "limit must be a number"),
    ("?offset=1&timestamp=1", 400, "offset and timestamp exclude each other"),
    ("?isolation=serializable", 400, "isolation is read_uncommitted or read_committed"),
    ("?color=red", 400, "unknown parameter 'color'"),
    ("?limit=1&limit=2", 400, "limit is given twice"),
    ("?partition=7", 404, "this broker has no replica of ledger-7"),
])
def test_a_bad_query_is_a_clear_error(browsed, query, status, error):
    assert get(browsed, "/api/topics/ledger/records" + query) == (status, {"error": error})


def test_without_an_authorizer_records_are_shown_only_where_kafka_lets_anyone_read_them(tmp_path):
    """SASL listeners and no authorizer: a Kafka client must log in to read, so the console,
    where nobody signs in without an authorizer, shows no records."""
    config = {"http.listener": "127.0.0.1:0", "authorizer.class.name": ""}
    with secured_broker(tmp_path / "sasl-only", config) as broker:
        host, port = broker.running.broker.http.address
        status, answer = get({"url": f"http://{host}:{port}"}, "/api/topics/anything/records")
    assert status == 403 and answer["error"].startswith("without an authorizer the console shows records only")

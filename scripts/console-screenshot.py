#!/usr/bin/env python
"""Take the screenshots of docs/console.md: the web console of real brokers, in Debian's
Chromium through Playwright.

- docs/console.png, the whole page: a broker with `http.listener`, orders, `oncelog
  pipeline run` (Spark local[2], batch mode) until it has reported a few micro-batches,
  an open transaction, a hanging one (its coordinator's abort timer held off) and a
  consumer group behind both.
- docs/console-records.png, docs/console-reset.png, docs/console-configs.png and
  docs/console-security.png: a broker with an authorizer (tests/support/secured.py), signed
  in as its super user: one partition's records with committed, aborted and open
  transactions and their markers; a group's offset reset, planned; a topic's configs;
  the ACLs.

    .venv/bin/python scripts/console-screenshot.py [--output-dir docs]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from oncelog import EmbeddedBroker  # noqa: E402
from oncelog.security.acl import AclOperation, ResourceType  # noqa: E402
from tests.support.browser import chromium  # noqa: E402
from tests.support.secured import password, secured_broker  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output-dir", default=str(REPO / "docs"))
    args = parser.parse_args()
    output = Path(args.output_dir)
    work = Path(tempfile.mkdtemp(prefix="oncelog-console-"))
    overview(work, output / "console.png")
    views(work, output)
    return 0


def overview(work: Path, output: Path) -> None:
    config = {"http.listener": "127.0.0.1:0", "transaction.two.phase.commit.enable": "true",
              "transaction.abort.timed.out.transaction.cleanup.interval.ms": "3600000"}
    with EmbeddedBroker(work / "broker", config) as running:
        bootstrap = running.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for future in admin.create_topics([NewTopic("orders", 2, 1), NewTopic("enriched-orders", 2, 1)]).values():
            future.result(10)
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        for i in range(20_000):
            producer.produce("orders", f'{{"order": {i}, "amount": {i % 97}}}'.encode(), key=str(i).encode())
        producer.flush(30)
        pipeline = subprocess.Popen(
            [sys.executable, "-m", "oncelog", "pipeline", "run", "--bootstrap-server", bootstrap,
             "--source", "orders", "--sink", "enriched-orders",
             "--sql", "SELECT key, upper(value) AS value FROM source",
             "--checkpoint", str(work / "checkpoint"), "--mode", "batch", "--master", "local[2]",
             "--max-offsets-per-trigger", "500", "--trigger", "processing-time=2s", "--progress", "none",
             "--name", "upper-orders"],
            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "enriched-reader",
                                 "isolation.level": "read_committed", "enable.auto.commit": False})
            consumer.commit(offsets=[TopicPartition("enriched-orders", 0, 100)], asynchronous=False)
            consumer.close()
            open_txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": "billing-1",
                                 "transaction.timeout.ms": 900_000})  # open, not hanging
            open_txn.init_transactions(10)
            open_txn.begin_transaction()
            for _ in range(40):
                open_txn.produce("enriched-orders", b"pending", partition=0)
            open_txn.flush(10)
            hanging = Producer({"bootstrap.servers": bootstrap, "transactional.id": "legacy-exporter",
                                "transaction.timeout.ms": 5000})
            hanging.init_transactions(10)
            hanging.begin_transaction()
            hanging.produce("orders", b"stuck", partition=1)
            hanging.flush(10)
            time.sleep(60)  # Spark starts, the pipeline reports micro-batches, the charts fill
            host, port = running.broker.http.address
            with chromium() as browser:
                page = browser.new_page(viewport={"width": 1280, "height": 1000})
                page.goto(f"http://{host}:{port}/")
                page.wait_for_selector("[data-pipeline]", timeout=60_000)
                time.sleep(3)
                page.screenshot(path=str(output), full_page=True)
            print(f"wrote {output}")
        finally:
            pipeline.terminate()
            pipeline.wait(60)


def views(work: Path, output: Path) -> None:
    """The views an operator opens, signed in on a broker with an authorizer."""
    config = {"http.listener": "127.0.0.1:0"}
    with secured_broker(work / "secured", config) as broker:
        broker.create_topic("payments", configs={"retention.ms": "604800000", "min.insync.replicas": "1"})
        admin = broker.client("admin")
        plain = Producer(admin)
        for i in range(2):
            plain.produce("payments", f'{{"payment": {i}, "note": "written outside a transaction"}}'.encode(),
                          key=f"p{i}".encode(), headers={"source": b"import"})
        plain.flush(10)
        for outcome, values in (("commit", [b'{"payment": 10, "amount": 25.0}', b'{"payment": 11, "amount": 7.5}']),
                                ("abort", [b'{"payment": 12, "amount": 99.0}']),
                                ("open", [b'{"payment": 13, "amount": 12.0}', b"\xff\xfe\x00\x01"])):
            producer = Producer({**admin, "transactional.id": f"payments-{outcome}"})
            producer.init_transactions(10)
            producer.begin_transaction()
            for index, value in enumerate(values):
                producer.produce("payments", value, key=f"{outcome}-{index}".encode())
            producer.flush(10)
            if outcome == "commit":
                producer.commit_transaction(10)
            elif outcome == "abort":
                producer.abort_transaction(10)
        consumer = Consumer({**admin, "group.id": "payment-audit", "enable.auto.commit": False})
        consumer.commit(offsets=[TopicPartition("payments", 0, 2)], asynchronous=False)
        consumer.close()
        broker.allow("alice", ResourceType.TOPIC, "payments", AclOperation.READ, AclOperation.DESCRIBE)
        broker.allow("alice", ResourceType.GROUP, "payment-audit", AclOperation.READ)
        broker.allow("bob", ResourceType.TOPIC, "payments", AclOperation.WRITE)
        host, port = broker.running.broker.http.address
        with chromium() as browser:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(f"http://{host}:{port}/")
            page.fill("#sign-in-user", "admin")
            page.fill("#sign-in-password", password("admin"))
            page.click("#sign-in button[type=submit]")
            page.wait_for_selector('#topics tr[data-topic="payments"]', timeout=15_000)
            page.fill("#records-topic", "payments")
            page.select_option("#records-isolation", "read_uncommitted")
            page.select_option("#records-format", "json")
            page.click("#records-form button[type=submit]")
            page.wait_for_selector("#records[data-shown]", state="attached", timeout=15_000)
            shoot(page, "section[aria-labelledby=records-title]", output / "console-records.png")
            page.click("#reset summary")
            page.fill("#reset-group", "payment-audit")
            page.fill("#reset-topic", "payments")
            page.select_option("#reset-to", "earliest")
            page.click("#reset-form button[type=submit]")
            page.wait_for_selector("#reset-plan[data-shown]", state="attached", timeout=15_000)
            shoot(page, "section[aria-labelledby=groups-title]", output / "console-reset.png")
            page.click('#topics tr[data-topic="payments"]')
            page.wait_for_selector("#topic-configs[data-shown]", state="attached", timeout=15_000)
            shoot(page, "section[aria-labelledby=topics-title]", output / "console-configs.png")
            page.click("#security summary")
            page.wait_for_selector("#security[data-loaded]", state="attached", timeout=15_000)
            shoot(page, "section[aria-labelledby=security-title]", output / "console-security.png")


def shoot(page, selector: str, output: Path) -> None:
    page.wait_for_timeout(500)
    page.locator(selector).screenshot(path=str(output))
    print(f"wrote {output}")


if __name__ == "__main__":
    sys.exit(main())

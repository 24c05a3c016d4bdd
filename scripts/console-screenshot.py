#!/usr/bin/env python
"""Take docs/console.png: the web console of a real broker with a real pipeline.

Starts a broker with `http.listener`, writes orders, runs `oncelog pipeline run` (Spark
local[2], batch mode) until it has reported a few micro-batches, then leaves an open
transaction, a hanging one (its coordinator's abort timer held off) and a consumer group
behind both, and photographs the console in Debian's Chromium through Playwright.

    .venv/bin/python scripts/console-screenshot.py [--output docs/console.png]
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
from tests.support.browser import chromium  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default=str(REPO / "docs" / "console.png"))
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="oncelog-console-"))
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
            open_txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": "billing-1"})
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
                page.screenshot(path=args.output, full_page=True)
            print(f"wrote {args.output}")
        finally:
            pipeline.terminate()
            pipeline.wait(60)
    return 0


if __name__ == "__main__":
    sys.exit(main())

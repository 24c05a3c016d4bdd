"""Where one transactional commit's time goes (scenario 6; issue 22 item 2).

    python bench/commit_breakdown.py [--transactions 400] [--records 100] [--size 1024]

One broker process (the tree's, or `--src` another tree's) and one confluent-kafka
transactional producer committing transactions of `--records` records, with librdkafka's
`eos,protocol` debug log timestamped as it arrives. Each commit is cut into:

- **flush**: from `commit_transaction()` until the last ProduceResponse of the
  transaction arrived;
- **to EndTxn**: from there until librdkafka sent EndTxn;
- **EndTxn round trip**: until its answer arrived (the broker appends PrepareCommit to
  `__transaction_state` and answers; markers and CompleteCommit follow on their own);
- **return**: until `commit_transaction()` returned.

and librdkafka's own round-trip times of Produce, AddPartitionsToTxn (the next
transaction's start) and EndTxn, with how many CONCURRENT_TRANSACTIONS answers came
(a transaction started while the previous one's markers were still being written).
The broker's side comes from its own /metrics histograms (means): EndTxn,
AddPartitionsToTxn and Produce handling, and the markers from the decision to every
marker written. Prints p50 / p99 per part in milliseconds.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

TOPIC = "bench-commit-breakdown"
SENT = re.compile(r"Sent (\w+)Request \(")
RECEIVED = re.compile(r"Received (\w+)Response \(.*rtt ([\d.]+)ms")
# librdkafka logs the error's text, not its name, for a retried AddPartitionsToTxn.
CONCURRENT = ("CONCURRENT_TRANSACTIONS", "concurrent operation on the same transaction")


class Timeline:
    """librdkafka's debug lines, each with the time it arrived. librdkafka writes them to
    stderr from its own threads as things happen; stderr is a pipe read by a thread here
    (a Python logger would only see them on the next poll, after the commit)."""

    def __init__(self) -> None:
        self.events: list[tuple[float, str, str]] = []  # (perf_counter, kind, api)
        self.round_trips: dict[str, list[float]] = {}  # api -> librdkafka's own rtt of each answer, seconds
        read_end, write_end = os.pipe()
        self._saved_stderr = os.dup(2)
        os.dup2(write_end, 2)
        os.close(write_end)
        self._reader = threading.Thread(target=self._read, args=(read_end,), daemon=True)
        self._reader.start()

    def _read(self, read_end: int) -> None:
        with os.fdopen(read_end, "r", errors="replace") as lines:
            for line in lines:
                now = time.perf_counter()
                if (match := SENT.search(line)) is not None:
                    self.events.append((now, "sent", match.group(1)))
                elif (match := RECEIVED.search(line)) is not None:
                    self.events.append((now, "received", match.group(1)))
                    self.round_trips.setdefault(match.group(1), []).append(float(match.group(2)) / 1000)
                if any(text in line for text in CONCURRENT):
                    self.events.append((now, "concurrent", ""))
                if not line.startswith("%7|"):
                    os.write(self._saved_stderr, line.encode())  # anything but debug lines: shown

    def close(self) -> None:
        os.dup2(self._saved_stderr, 2)  # the pipe's last writer gone: the reader ends
        self._reader.join(5)
        os.close(self._saved_stderr)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else float("nan")


def scrape(url: str) -> dict[str, float]:
    """`name{labels}` -> value of the broker's Prometheus text."""
    values = {}
    with urllib.request.urlopen(url, timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.rpartition(" ")
                values[key] = float(value)
    return values


def histogram_mean_ms(before: dict[str, float], after: dict[str, float], name: str, label: str = "") -> float:
    def delta(suffix: str) -> float:
        key = f"{name}_{suffix}{label}"
        return after.get(key, 0.0) - before.get(key, 0.0)

    count = delta("count")
    return delta("sum") / count * 1000 if count else float("nan")


def run(args: argparse.Namespace) -> None:
    if args.src:
        sys.path.insert(0, args.src)
        os.environ["PYTHONPATH"] = args.src + os.pathsep + os.environ.get("PYTHONPATH", "")
    from confluent_kafka import Producer

    sys.setswitchinterval(0.0001)  # the reader thread stamps lines at once, not after the next 5 ms slice
    from confluent_kafka.admin import AdminClient, NewTopic

    from oncelog.local.process import BrokerProcess, free_port

    metrics_port = free_port("127.0.0.1")
    with tempfile.TemporaryDirectory() as data:
        broker = BrokerProcess(Path(data) / "broker", {"http.listener": f"127.0.0.1:{metrics_port}"})
        broker.start()
        try:
            bootstrap = broker.bootstrap_servers
            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
            timeline = Timeline()
            try:
                commits, before, after = measure(Producer, bootstrap, timeline, metrics_port, args)
            finally:
                timeline.close()
        finally:
            broker.stop()
    report(commits, timeline, before, after)


def measure(producer_class, bootstrap: str, timeline: Timeline, metrics_port: int, args: argparse.Namespace
            ) -> tuple[list[tuple[float, float, float]], dict[str, float], dict[str, float]]:
    """(began, asked, returned) of each measured transaction, and /metrics before and after."""
    producer = producer_class({"bootstrap.servers": bootstrap, "transactional.id": "commit-breakdown",
                               "linger.ms": 5, "debug": "eos,protocol"})
    producer.init_transactions(30)
    value = b"x" * args.size

    def transaction() -> tuple[float, float, float]:
        producer.begin_transaction()
        began = time.perf_counter()
        for _ in range(args.records):
            producer.produce(TOPIC, value)
        producer.poll(0)
        asked = time.perf_counter()
        producer.commit_transaction(30)
        return began, asked, time.perf_counter()

    for _ in range(20):  # warm-up: connections, coordinator, producer id
        transaction()
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    time.sleep(0.2)  # the warm-up's last debug lines are read before the slate is cleaned
    before = scrape(url)
    timeline.events.clear()
    timeline.round_trips.clear()
    commits = [transaction() for _ in range(args.transactions)]
    after = scrape(url)
    producer.flush(10)
    return commits, before, after


def report(commits: list[tuple[float, float, float]], timeline: Timeline,
           before: dict[str, float], after: dict[str, float]) -> None:
    events = timeline.events
    parts: dict[str, list[float]] = {name: [] for name in (
        "commit_transaction()", "flush", "  of which: to Produce sent", "  of which: Produce round trip",
        "to EndTxn", "EndTxn round trip", "return", "AddPartitionsToTxn answered, from begin")}
    for began, asked, returned in commits:
        window = [event for event in events if began <= event[0] <= returned]

        def first(kind: str, api: str, since: float, window=window) -> float | None:
            return next((t for t, k, a in window if k == kind and a == api and t >= since), None)

        end_sent = first("sent", "EndTxn", asked)
        end_answered = first("received", "EndTxn", asked)
        if end_sent is None or end_answered is None:
            continue
        produce_sent = [t for t, kind, api in window if kind == "sent" and api == "Produce" and t <= end_sent]
        produced = [t for t, kind, api in window if kind == "received" and api == "Produce" and t <= end_sent]
        flushed = max(produced[-1], asked) if produced else asked
        parts["commit_transaction()"].append(returned - asked)
        parts["flush"].append(flushed - asked)
        if produce_sent and produced:
            parts["  of which: to Produce sent"].append(max(produce_sent[-1] - asked, 0.0))
            parts["  of which: Produce round trip"].append(produced[-1] - produce_sent[-1])
        parts["to EndTxn"].append(end_sent - flushed)
        parts["EndTxn round trip"].append(end_answered - end_sent)
        parts["return"].append(returned - end_answered)
        added = first("received", "AddPartitionsToTxn", began)
        if added is not None:
            parts["AddPartitionsToTxn answered, from begin"].append(added - began)
    measured = len(parts["commit_transaction()"])
    print(f"{measured} of {len(commits)} commits measured (the others' EndTxn lines were read after the commit "
          "returned); ms, p50 / p99 (client side):")
    for name, values in parts.items():
        if values:
            print(f"  {name:42s} {percentile(values, 0.5) * 1000:7.3f} / {percentile(values, 0.99) * 1000:7.3f}"
                  f"   (mean {statistics.fmean(values) * 1000:.3f}, n={len(values)})")
    print("round trips as librdkafka measured them (rtt), ms p50 / p99, and answers per transaction:")
    for api in ("Produce", "AddPartitionsToTxn", "EndTxn"):
        values = timeline.round_trips.get(api, [])
        if values:
            print(f"  {api:42s} {percentile(values, 0.5) * 1000:7.3f} / {percentile(values, 0.99) * 1000:7.3f}"
                  f"   ({len(values) / len(commits):.2f} per transaction)")
    concurrent = sum(1 for _, kind, _ in events if kind == "concurrent")
    print(f"  CONCURRENT_TRANSACTIONS answers: {concurrent}")
    handle = "oncelog_network_request_handle_seconds"
    print("broker side, means in ms (its /metrics):")
    for api in ("EndTxn", "AddPartitionsToTxn", "Produce"):
        label = '{request="' + api + '"}'
        print(f"  {api + ' handling':42s} {histogram_mean_ms(before, after, handle, label):7.3f}")
    print(f"  {'markers, decision to all written':42s} "
          f"{histogram_mean_ms(before, after, 'oncelog_transaction_markers_seconds'):7.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--transactions", type=int, default=400, choices=range(1, 1_000_001), metavar="N")
    parser.add_argument("--records", type=int, default=100, help="records per transaction (scenario 6: 100)")
    parser.add_argument("--size", type=int, default=1024, help="bytes per record value")
    parser.add_argument("--src", help="run this tree's oncelog (a src directory) instead of this one's")
    run(parser.parse_args())


if __name__ == "__main__":
    main()

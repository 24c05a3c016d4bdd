"""How one broker scales in partitions: topics of 10 partitions, by the thousand.

    python -m bench.partition_scale [--partitions 1000,10000] [--per-topic 10] [--profile DIR]
                                    [--override KEY=VALUE ...]

For each count N it starts a fresh `oncelog broker start` on an empty log dir and times,
from a client's side (wall clock, confluent-kafka):

- create: CreateTopics requests of 1,000 topics of 10 partitions (replication 1; Kafka
  refuses more than 10,000 partitions in one request), one after the other, until every
  topic's future is done;
- create floor: the same number of directories, each with one empty file, made by this
  script on the same file system just before and just after: what the disk alone asks
  (on this machine's virtual disk a file creation costs 0.05-1 ms, varying by the
  minute); `create_cpu_s` is the broker's CPU time meanwhile (every thread), of which
  `create_sys_s` in the kernel (the file system's work: this machine's file creations
  cost kernel CPU, not waits);
- first write: one record to each of the N partitions, in Produce requests of 1,000
  partitions (acks=-1, raw wire, one request at a time): each partition's first append;
- next write: the same round again;
- librdkafka write: a third round from confluent-kafka (acks=all, linger.ms=5), until
  flush() returns; librdkafka sends a Produce request per partition, five in flight, so
  this round measures its pipeline more than the broker (not run above 10,000
  partitions, where librdkafka's own CPU makes a round take minutes);
- restart: SIGKILL, then a new broker process on the same log dir until it prints
  "listening on" (interpreter start and log recovery), and until a wire write round has
  been acknowledged (the partitions usable again).

The targets from issue 42 at 10,000 partitions: creation under 5 s, a round of writes
under 1 s, restart after kill -9 under 5 s. `--profile DIR` records the broker with
py-spy (a flame graph per phase is not kept apart: one SVG per broker process).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode
from kio.schema.produce.v9 import request as produce
from kio.schema.types import TopicName
from kio.static.primitive import Records, i16, i32, i32Timedelta

from oncelog.local.process import BrokerProcess, child_pids
from oncelog.protocol import record_batch
from oncelog.protocol.client import WireClient

CREATE_TIMEOUT_S = 600
MAX_PARTITIONS_PER_REQUEST = 10_000  # CreateTopics
PARTITIONS_PER_PRODUCE = 1000
# Above this, librdkafka's producer spends minutes of its own CPU on one round (its
# threads walk every partition on each wake-up): the round is left out (nan).
LIBRDKAFKA_MAX_PARTITIONS = 10_000  # the wire round's requests (more is a heavy request: off the loop)


def _topics(partitions: int, per_topic: int) -> list[str]:
    return [f"scale-{index:06d}" for index in range(partitions // per_topic)]


def _create(bootstrap: str, topics: list[str], per_topic: int) -> float:
    """CreateTopics requests of at most 10,000 partitions (Kafka's bound per request),
    one after the other."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    per_request = max(1, MAX_PARTITIONS_PER_REQUEST // per_topic)
    started = time.perf_counter()
    for start in range(0, len(topics), per_request):
        futures = admin.create_topics([NewTopic(name, per_topic, 1) for name in topics[start:start + per_request]],
                                      request_timeout=CREATE_TIMEOUT_S, operation_timeout=CREATE_TIMEOUT_S)
        for future in futures.values():
            future.result(timeout=CREATE_TIMEOUT_S)
    return time.perf_counter() - started


def _producer(bootstrap: str, topics: list[str]) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "batch.num.messages": 100_000, "queue.buffering.max.messages": 1_000_000,
                         "message.timeout.ms": CREATE_TIMEOUT_S * 1000})
    # Learn every partition's leader before the clock starts (librdkafka asks for the
    # metadata of the topics it is given; list_topics asks for all of them).
    metadata = producer.list_topics(timeout=CREATE_TIMEOUT_S)
    missing = [name for name in topics if name not in metadata.topics]
    if missing:
        raise SystemExit(f"{len(missing)} topics missing from Metadata, e.g. {missing[0]}")
    return producer


def _write_round(producer: Producer, topics: list[str], per_topic: int) -> float:
    failures: list[str] = []

    def delivered(error, message) -> None:
        if error is not None:
            failures.append(f"{message.topic()}[{message.partition()}]: {error}")

    started = time.perf_counter()
    for name in topics:
        for partition in range(per_topic):
            producer.produce(name, b"x" * 100, partition=partition, on_delivery=delivered)
        producer.poll(0)
    remaining = producer.flush(CREATE_TIMEOUT_S)
    elapsed = time.perf_counter() - started
    if remaining or failures:
        raise SystemExit(f"write round: {remaining} unacknowledged, {len(failures)} failed, e.g. "
                         f"{failures[:1]}")
    return elapsed


def _wire_round(bootstrap: str, topics: list[str], per_topic: int) -> float:
    """One record to each partition in Produce v9 requests (acks=-1) of
    PARTITIONS_PER_PRODUCE partitions each, one request at a time on one connection:
    what the broker spends, without librdkafka, which sends a request per partition."""
    batch = Records(record_batch.build_batch([record_batch.Record(None, b"x" * 100)],
                                             timestamp_ms=int(time.time() * 1000)))
    per_request = max(1, PARTITIONS_PER_PRODUCE // per_topic)
    requests = [produce.ProduceRequest(
        transactional_id=None, acks=i16(-1), timeout=i32Timedelta.parse(datetime.timedelta(seconds=60)),
        topic_data=tuple(produce.TopicProduceData(name=TopicName(name), partition_data=tuple(
            produce.PartitionProduceData(index=i32(partition), records=batch) for partition in range(per_topic)))
            for name in topics[start:start + per_request]))
        for start in range(0, len(topics), per_request)]
    client = WireClient.connect(bootstrap, timeout=CREATE_TIMEOUT_S)
    try:
        started = time.perf_counter()
        for request in requests:
            answer = client.request(request)
            for topic in answer.responses:
                for partition in topic.partition_responses:
                    if partition.error_code != ErrorCode.none:
                        raise SystemExit(f"wire round: {topic.name}[{partition.index}]: {partition.error_code!r}")
        return time.perf_counter() - started
    finally:
        client.close()


def _cpu_s(pid: int, *, system: bool = True, user: bool = True) -> float:
    """The process's CPU time so far (every thread; user, system or both), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) * user + int(fields[12]) * system) / os.sysconf("SC_CLK_TCK")


def _file_system_floor(root: Path, count: int) -> float:
    """What the disk alone asks for creating `count` partitions: a directory with one
    empty file in each, one after the other, on the log dir's file system, then an
    fsync of their parent (the least a new partition costs: its directory and its first
    segment)."""
    floor = root / "floor"
    floor.mkdir()
    started = time.perf_counter()
    for index in range(count):
        directory = floor / f"p-{index}"
        directory.mkdir()
        os.close(os.open(directory / "00000000000000000000.log", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644))
    descriptor = os.open(floor, os.O_RDONLY | os.O_DIRECTORY)
    os.fsync(descriptor)
    os.close(descriptor)
    elapsed = time.perf_counter() - started
    shutil.rmtree(floor)
    return elapsed


def _profiled(broker: BrokerProcess, profile_dir: Path | None, name: str) -> subprocess.Popen | None:
    if profile_dir is None:
        return None
    profile_dir.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([*_py_spy(profile_dir, name), "--pid", str(broker.pid)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _py_spy(profile_dir: Path, name: str) -> list[str]:
    """py-spy's command line recording collapsed stacks (`raw`, for flamegraph.pl or a
    grep) into DIR/NAME.txt."""
    py_spy = Path(sys.executable).with_name("py-spy")
    return [str(py_spy), "record", "--rate", "200", "--format", "raw", "--nonblocking",
            "--output", str(profile_dir / f"{name}.txt")]


def _stop_profile(recorder: subprocess.Popen | None) -> None:
    if recorder is not None:
        recorder.send_signal(signal.SIGINT)
        recorder.wait(timeout=60)


def measure(partitions: int, per_topic: int, work_dir: Path, profile_dir: Path | None,
            overrides: dict[str, str]) -> dict[str, float]:
    root = Path(tempfile.mkdtemp(prefix=f"partitions-{partitions}-", dir=work_dir))
    data_dir = root / "data"
    figures: dict[str, float] = {"partitions": partitions}
    try:
        topics = _topics(partitions, per_topic)
        broker = BrokerProcess(data_dir, {"num.partitions": "1", "auto.create.topics.enable": "false", **overrides})
        broker.start()
        recorder = _profiled(broker, profile_dir, f"{partitions}-first")
        figures["floor_before_s"] = _file_system_floor(root, len(topics) * per_topic)
        cpu, system = _cpu_s(broker.pid), _cpu_s(broker.pid, user=False)
        figures["create_s"] = _create(broker.bootstrap_servers, topics, per_topic)
        figures["create_cpu_s"] = _cpu_s(broker.pid) - cpu
        figures["create_sys_s"] = _cpu_s(broker.pid, user=False) - system
        figures["floor_after_s"] = _file_system_floor(root, len(topics) * per_topic)
        figures["first_write_s"] = _wire_round(broker.bootstrap_servers, topics, per_topic)
        cpu = _cpu_s(broker.pid)
        figures["next_write_s"] = _wire_round(broker.bootstrap_servers, topics, per_topic)
        figures["next_write_cpu_s"] = _cpu_s(broker.pid) - cpu
        figures["librdkafka_write_s"] = math.nan
        if partitions <= LIBRDKAFKA_MAX_PARTITIONS:
            producer = _producer(broker.bootstrap_servers, topics)
            figures["librdkafka_write_s"] = _write_round(producer, topics, per_topic)
            del producer
        _stop_profile(recorder)
        broker.kill()
        # The restart is profiled from its first instruction: py-spy starts it.
        wrap = None if profile_dir is None else (
            lambda command: [*_py_spy(profile_dir, f"{partitions}-restart"), "--", *command])
        restarted = BrokerProcess(data_dir, broker.config, port=broker.port, wrap=wrap)
        started = time.perf_counter()
        restarted.start(timeout=CREATE_TIMEOUT_S)
        figures["restart_listening_s"] = time.perf_counter() - started
        _wire_round(restarted.bootstrap_servers, topics, per_topic)
        figures["restart_usable_s"] = time.perf_counter() - started
        figures["log_dir_entries"] = sum(1 for _ in data_dir.iterdir())
        if profile_dir is None:
            restarted.stop(timeout=CREATE_TIMEOUT_S)
        else:  # stop the broker under py-spy, which then writes its profile and exits
            for pid in child_pids(restarted.pid):
                os.kill(pid, signal.SIGTERM)
            assert restarted.process is not None
            restarted.process.wait(timeout=120)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", default="1000,10000",
                        help="comma-separated partition counts (default 1000,10000)")
    parser.add_argument("--per-topic", type=int, default=10, help="partitions per topic (default 10)")
    parser.add_argument("--work-dir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--profile", type=Path, default=None, help="record the broker with py-spy into DIR")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker key for both broker processes (repeatable)")
    parser.add_argument("--json", action="store_true", help="one JSON object per count instead of a table")
    args = parser.parse_args()
    counts = [int(value) for value in args.partitions.split(",")]
    columns = ("partitions", "create_s", "create_cpu_s", "create_sys_s", "floor_before_s", "floor_after_s",
               "first_write_s", "next_write_s", "next_write_cpu_s", "librdkafka_write_s", "restart_listening_s",
               "restart_usable_s")
    if not args.json:
        print(" ".join(columns), flush=True)
    for count in counts:
        figures = measure(count, args.per_topic, args.work_dir, args.profile,
                          dict(item.split("=", 1) for item in args.override))
        if args.json:
            print(json.dumps(figures), flush=True)
        else:
            print(" ".join(f"{figures[name]:>{len(name)}.2f}" if name != "partitions" else f"{count:>{len(name)}}"
                           for name in columns), flush=True)


if __name__ == "__main__":
    main()

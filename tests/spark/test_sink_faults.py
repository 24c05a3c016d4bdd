"""Both sink modes under faults, with the pipeline in its own process (sink_pipeline.py:
local[2,4], so failed tasks are retried; two queries, one per mode, in one Spark driver):

- tasks reading source partition 0 fail on their first attempt, after some of their rows
  reached the sink, every micro-batch;
- the driver (JVM, Python workers and all) is killed with SIGKILL, at points the sink
  pauses at (after the batch-mode decision is saved, after the tasks' transactions
  committed, at the end of commit(): between the sink's commit and Spark's commit log)
  and at random moments, then restarted from its checkpoints until it finishes;
- the broker is restarted while the pipeline runs.

The output of each mode, read with read_committed, must be upper(value) of the committed
input exactly once, and nothing of the aborted input. For batch mode a reader polls the
output all along: whenever it has caught up with a partition, what it has seen of that
partition must be whole micro-batches (the `batch` header says which).
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition

from oncelog.local.process import BrokerProcess
from tests.support.kafka import create_topics
from tests.support.spark import SINK_PIPELINE
from tests.support.spark.driver_runs import run_driver
from tests.support.spark.topics import BATCH_HEADER, read_all, transformed, values, write_source

PIPELINE = SINK_PIPELINE
RUN_TIMEOUT_S = 420  # generous: the machine is shared, and a loaded one runs batches slowly


class BatchVisibilityWatcher:
    """A read_committed reader that, each time it reaches the end of a partition, records
    how many records of each micro-batch it has seen there."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.snapshots: list[tuple[int, dict[str, int]]] = []
        self.seen: dict[int, Counter] = defaultdict(Counter)
        self._stop = threading.Event()
        self._consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": "visibility-watcher", "enable.auto.commit": False,
            "isolation.level": "read_committed", "enable.partition.eof": True,
        })
        self._consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            message = self._consumer.poll(0.1)
            if message is None:
                continue
            partition = message.partition()
            assert partition is not None  # records and partition EOFs name their partition
            error = message.error()
            if error:
                if error.code() == KafkaError._PARTITION_EOF:
                    self.snapshots.append((partition, dict(self.seen[partition])))
                continue
            header = dict(message.headers() or ())[BATCH_HEADER]
            assert isinstance(header, bytes)  # a consumed header value is bytes
            self.seen[partition][header.decode()] += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._consumer.close()


def run_pipeline(config: dict, work: Path, run: int, *, pause_at: str | None, kill_after_progress_s: float | None,
                 broker: BrokerProcess | None = None, restart_broker_after_progress_s: float | None = None) -> str:
    """One run of the pipeline process (driver_runs.run_driver), the broker restarted once
    `restart_broker_after_progress_s` after its first micro-batch started, if given."""
    restarted: list[bool] = []

    def restart_broker(progress_at: float | None) -> None:
        if (broker is not None and restart_broker_after_progress_s is not None and not restarted
                and progress_at is not None and time.monotonic() - progress_at > restart_broker_after_progress_s):
            broker.restart()  # while micro-batches run
            restarted.append(True)

    return run_driver(PIPELINE, config, work, run, checkpoints=[Path(q["checkpoint"]) for q in config["queries"]],
                      pause_at=pause_at, kill_after_progress_s=kill_after_progress_s, timeout_s=RUN_TIMEOUT_S,
                      failure_line=lambda line: line.startswith("query ") and " failed: " in line,
                      while_running=restart_broker)


@pytest.fixture
def cluster(tmp_path):
    config = {"transaction.two.phase.commit.enable": "true", "num.partitions": "2"}
    with BrokerProcess(tmp_path / "broker", config) as broker:
        yield broker


def run_with_faults(cluster: BrokerProcess, tmp_path: Path, faults: list[dict], seed: int,
                    source_transactions: int = 7) -> None:
    rng = random.Random(seed)
    bootstrap = cluster.bootstrap_servers
    source, out_partition, out_batch = "orders", "orders-upper-partition", "orders-upper-batch"
    create_topics(bootstrap, (source, 2), (out_partition, 2), (out_batch, 2))
    committed = write_source(bootstrap, source, 2, transactions=source_transactions, per_transaction=12)
    common = {"bootstrap": bootstrap, "source": source, "max_offsets": 14, "fail_partitions": [0]}
    config = {"master": "local[2,4]", "queries": [
        {**common, "output": out_partition, "mode": "partition", "checkpoint": str(tmp_path / "cp-partition"),
         "query_name": "partition_mode"},
        {**common, "output": out_batch, "mode": "batch", "checkpoint": str(tmp_path / "cp-batch"),
         "query_name": "batch_mode"},
    ]}
    watcher = BatchVisibilityWatcher(bootstrap, out_batch, 2)
    outcomes = []
    try:
        for run, fault in enumerate(faults):
            kill_after = fault.get("kill_after_progress_s")
            if kill_after == "random":
                kill_after = rng.uniform(0.0, 4.0)
            outcomes.append(run_pipeline(config, tmp_path, run, pause_at=fault.get("pause_at"),
                                         kill_after_progress_s=kill_after, broker=cluster,
                                         restart_broker_after_progress_s=fault.get("restart_broker_after_progress_s")))
        for run in range(len(faults), len(faults) + 4):  # until it finishes
            outcomes.append(run_pipeline(config, tmp_path, run, pause_at=None, kill_after_progress_s=None))
            if outcomes[-1] == "finished":
                break
        print("pipeline runs:", outcomes)
        assert outcomes[-1] == "finished", outcomes
        kills = [outcome for outcome in outcomes if outcome.startswith("killed")]
        assert len(kills) >= len(faults) // 2, outcomes
    finally:
        time.sleep(1.0)  # let the watcher catch up with the end
        watcher.stop()

    expected = transformed(committed)
    for output in (out_partition, out_batch):
        got = values(read_all(bootstrap, output))
        assert got == expected, (output, outcomes, got - expected, expected - got)

    # Batch mode: every time the reader had caught up with a partition, it had seen whole
    # micro-batches of it.
    final: dict[int, Counter] = defaultdict(Counter)
    for record in read_all(bootstrap, out_batch):
        final[record.partition][dict(record.headers)[BATCH_HEADER].decode()] += 1
    assert watcher.snapshots, "the reader never caught up"
    partial = [(partition, batch, count, final[partition][batch])
               for partition, seen in watcher.snapshots for batch, count in seen.items()
               if count != final[partition][batch]]
    assert not partial, f"micro-batches seen partly (partition, batch, seen, total): {partial[:10]}"
    assert len({batch for counts in final.values() for batch in counts}) > 2  # several micro-batches


DEFAULT_FAULTS = [
    {"pause_at": "batch:after-decision"},
    {"pause_at": "commit:return:partition,partition:after-task-commit"},
    {"kill_after_progress_s": 6.0, "restart_broker_after_progress_s": 1.0},
]


@pytest.mark.slow  # about 2 minutes (five driver starts): `make sink-faults`
@pytest.mark.timeout(900)
def test_both_modes_stay_exactly_once_through_task_retries_driver_kills_and_a_broker_restart(cluster, tmp_path):
    run_with_faults(cluster, tmp_path, DEFAULT_FAULTS, seed=1)


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_both_modes_stay_exactly_once_through_many_driver_kills(cluster, tmp_path):
    points = ["batch:after-decision", "batch:after-commit", "commit:return:batch", "commit:return:partition",
              "partition:after-task-commit", "batch:after-handover"]
    faults = []
    for number in range(12):
        if number % 2 == 0:
            faults.append({"pause_at": points[(number // 2) % len(points)]})
        else:
            faults.append({"kill_after_progress_s": "random"})
    faults[5].update(kill_after_progress_s=6.0, restart_broker_after_progress_s=1.0)
    run_with_faults(cluster, tmp_path, faults, seed=int(time.time()), source_transactions=30)

"""Stopping `oncelog pipeline run` the way services are stopped: SIGTERM or SIGINT to the
whole process group (systemd's default, `timeout`, a terminal's Ctrl-C), at start-up,
inside a micro-batch and between micro-batches: each signal at start-up in the default
run, one of each inside and between, and the other way round in `make sink-faults`. Each
stop is exit status 0, one summary line and nothing else on stderr, the console's report
says "stopped" once the query ran, and the runs that follow, on the same checkpoint, write
every record exactly once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from tests.support.spark.topics import read_all

ONCELOG = Path(sys.executable).with_name("oncelog")

# Each row takes 40 ms in a Python UDF on an executor and marks that a micro-batch runs.
SLOW_TRANSFORM = """
    import time
    from pathlib import Path

    from pyspark.sql import functions as F

    RUNNING = Path({running!r})

    @F.udf("binary")
    def slowly(value):
        RUNNING.touch()
        time.sleep(0.04)
        return value

    def transform(source):
        return source.select(slowly("value").alias("value"))
"""


@pytest.fixture
def pipeline(shared_broker, tmp_path):
    from confluent_kafka.admin import AdminClient, NewTopic

    names = {role: f"{role}-{uuid.uuid4().hex[:8]}" for role in ("in", "out", "reports")}
    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap_servers})
    for future in admin.create_topics([NewTopic(names["in"], 2, 1), NewTopic(names["out"], 2, 1)]).values():
        future.result(30)
    return Pipeline(shared_broker.bootstrap_servers, names["in"], names["out"], names["reports"], tmp_path)


class Pipeline:
    def __init__(self, bootstrap: str, source: str, sink: str, reports: str, directory: Path) -> None:
        self.bootstrap, self.source, self.sink, self.reports = bootstrap, source, sink, reports
        self.running = directory / "running"
        transform = directory / "slow_transform.py"
        transform.write_text(textwrap.dedent(SLOW_TRANSFORM.format(running=str(self.running))))
        self.arguments = [
            "--source", self.source, "--sink", self.sink, "--transform", f"{transform}:transform",
            "--checkpoint", str(directory / "checkpoint"), "--master", "local[2]",
            "--bootstrap-server", bootstrap, "--trigger", "processing-time=500ms", "--report-topic", reports,
        ]
        self.produced = 0

    def produce(self, count: int) -> None:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap})
        for number in range(self.produced, self.produced + count):
            producer.produce(self.source, f"order-{number}".encode(), partition=number % 2)
        assert producer.flush(30) == 0
        self.produced += count

    def start(self, *options: str) -> subprocess.Popen:
        self.running.unlink(missing_ok=True)
        return subprocess.Popen([str(ONCELOG), "pipeline", "run", *self.arguments, *options], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL, start_new_session=True)

    def committed(self) -> list[bytes]:
        return [output.value for output in read_all(self.bootstrap, self.sink)]

    def last_report_state(self) -> str:
        """The state in the latest report on the report topic (one partition, one query)."""
        from confluent_kafka import OFFSET_END, Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"r-{uuid.uuid4().hex[:6]}"})
        _low, high = consumer.get_watermark_offsets(TopicPartition(self.reports, 0), timeout=10)
        assert high > 0, "the pipeline never reported"
        consumer.assign([TopicPartition(self.reports, 0, high - 1 if high > 0 else OFFSET_END)])
        message = consumer.poll(10)
        consumer.close()
        assert message is not None and message.error() is None
        value = message.value()
        assert value is not None
        return json.loads(value)["state"]


def stop_when(command: subprocess.Popen, ready, signum: int, timeout_s: float = 120) -> tuple[str, str]:
    """Send `signum` to the command's whole process group once `ready()` holds."""
    try:
        deadline = time.monotonic() + timeout_s
        while not ready():
            assert command.poll() is None, command.communicate()
            assert time.monotonic() < deadline, "the moment to stop never came"
            time.sleep(0.02)
        os.killpg(command.pid, signum)
        out, err = command.communicate(timeout=120)
    finally:
        if command.poll() is None:
            os.killpg(command.pid, signal.SIGKILL)
            command.wait()
    assert command.returncode == 0, (out, err)
    return out, err


def jvm_started(command: subprocess.Popen):
    """True once the runner has a child process (Spark's launcher, then its JVM)."""
    def ready() -> bool:
        children = Path(f"/proc/{command.pid}/task/{command.pid}/children")
        return children.exists() and children.read_text().strip() != ""
    return ready


def after(seconds: float):
    started = time.monotonic()
    return lambda: time.monotonic() - started >= seconds


def stop_inside_a_micro_batch(pipeline: Pipeline, signum: int) -> None:
    """The micro-batch is abandoned; the next run does it again."""
    out, err = stop_when(pipeline.start(), pipeline.running.exists, signum)
    assert out.splitlines()[-1].startswith("pipeline stopped before the first micro-batch"), out
    assert err == ""
    assert pipeline.last_report_state() == "stopped"


def stop_between_micro_batches(pipeline: Pipeline, signum: int, *options: str) -> str:
    """After the run's first micro-batch (the 100 records not yet written): its summary
    counts it. Returns stderr."""
    command = pipeline.start(*options)
    assert command.stdout is not None
    first = command.stdout.readline()
    assert first.startswith("batch "), first
    out, err = stop_when(command, lambda: True, signum)
    assert out.splitlines()[-1].startswith("pipeline stopped after 1 micro-batch, 100 records from "), out
    assert pipeline.last_report_state() == "stopped"
    return err


def assert_written_once(pipeline: Pipeline) -> None:
    values = pipeline.committed()
    assert len(values) == pipeline.produced
    assert sorted(values) == sorted(f"order-{number}".encode() for number in range(pipeline.produced))


def test_sigterm_and_sigint_to_the_process_group_stop_the_pipeline_at_any_moment_and_the_next_run_goes_on_exactly_once(
    pipeline,
):
    pipeline.produce(100)

    # At start-up: SIGINT while the runner still imports, SIGTERM while Spark's JVM starts.
    out, err = stop_when(pipeline.start(), after(0.3), signal.SIGINT)
    assert (out.splitlines(), err) == (
        [f"pipeline stopped before the first micro-batch ({pipeline.source} to {pipeline.sink})"], "")
    command = pipeline.start()
    out, err = stop_when(command, jvm_started(command), signal.SIGTERM)
    assert (out.splitlines()[-1:], err) == (
        [f"pipeline stopped before the first micro-batch ({pipeline.source} to {pipeline.sink})"], "")

    stop_inside_a_micro_batch(pipeline, signal.SIGTERM)

    # --verbose: what goes to Spark's log otherwise (the JVM's own output, log4j's lines)
    # is on stderr too.
    err = stop_between_micro_batches(pipeline, signal.SIGINT, "--verbose")
    assert "WARNING: Using incubator modules" in err and " WARN " in err, err

    assert_written_once(pipeline)


@pytest.mark.slow
def test_the_other_signal_inside_and_between_micro_batches_stops_the_pipeline_as_well(pipeline):
    """The default run's test sends SIGTERM inside a micro-batch and SIGINT between two:
    here the other way round (`make sink-faults`)."""
    pipeline.produce(100)
    stop_inside_a_micro_batch(pipeline, signal.SIGINT)
    assert stop_between_micro_batches(pipeline, signal.SIGTERM) == ""
    pipeline.produce(100)
    assert stop_between_micro_batches(pipeline, signal.SIGTERM) == ""
    assert_written_once(pipeline)

"""Several attempts of one task, replayed outside Spark against the real broker.

Speculative execution does not run in Spark's local mode (the scheduler starts its
speculation checks only for cluster masters), so a speculative copy cannot be provoked
in these tests. Its effect on the sink is what these tests replay with the writer's
`write_as`: two attempts of the same partition and batch run at the same time, the
first one's side effects stay behind, and only one attempt's message reaches the
driver's commit."""

from __future__ import annotations

import json
import threading
import uuid

import pyarrow as pa
import pytest
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from oncelog.spark.sink.options import SinkWriteError, parse_sink_options
from oncelog.spark.sink.task import TaskIdentity
from oncelog.spark.sink.writers import OncelogStreamWriter
from tests.support import kafka as support_kafka
from tests.support.kafka import create_topics
from tests.support.spark.topics import read_all, values, watermarks

SCHEMA = StructType([StructField("value", BinaryType())])


def arrow_batches(prefix: str, batches: int, per_batch: int):
    return [pa.record_batch([pa.array([f"{prefix}{b}-{i}".encode() for i in range(per_batch)], pa.binary())],
                            names=["value"]) for b in range(batches)]


def paused_after_first(batches, reached: threading.Event, resume: threading.Event):
    """Yields the first batch, then waits (the attempt is mid-transaction) until resumed."""
    yield batches[0]
    reached.set()
    resume.wait(30)
    yield from batches[1:]


def make_writer(bootstrap: str, output: str, mode: str, checkpoint) -> OncelogStreamWriter:
    options = {"kafka.bootstrap.servers": bootstrap, "topic": output, "mode": mode,
               "checkpointLocation": str(checkpoint), "clusterTimeoutMs": "20000"}
    return OncelogStreamWriter(parse_sink_options(options, streaming=True), SCHEMA)


@pytest.fixture
def setup(shared_broker, topic, tmp_path):
    bootstrap = shared_broker.bootstrap_servers
    output = f"{topic}-out"
    create_topics(bootstrap, (output, 2))
    query_id = str(uuid.uuid4())
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    (checkpoint / "metadata").write_text(json.dumps({"id": query_id}) + "\n")
    return bootstrap, output, query_id, checkpoint


def test_partition_mode_a_concurrent_second_attempt_fences_the_first_and_a_rerun_writes_nothing(setup):
    bootstrap, output, query_id, checkpoint = setup
    writer = make_writer(bootstrap, output, "partition", checkpoint)
    rows = arrow_batches("p", 3, 20)
    reached, resume = threading.Event(), threading.Event()
    first_outcome: list = []

    def first_attempt():
        try:
            writer.write_as(TaskIdentity(query_id, 4, 0, 0), paused_after_first(rows, reached, resume))
            first_outcome.append("committed")
        except SinkWriteError as error:
            first_outcome.append(str(error))

    thread = threading.Thread(target=first_attempt)
    thread.start()
    assert reached.wait(30)
    second = writer.write_as(TaskIdentity(query_id, 4, 0, 1), rows)  # the speculative copy
    assert (second.records, second.skipped) == (60, False)
    resume.set()
    thread.join(60)
    assert first_outcome and "fenced" in first_outcome[0]

    rerun = make_writer(bootstrap, output, "partition", checkpoint)  # batch 4 again, after a restart
    again = rerun.write_as(TaskIdentity(query_id, 4, 0, 0), rows)
    assert again.skipped and again.records == 0
    writer.commit([second], 4)
    writer.commit([second], 4)  # idempotent
    assert sorted(values(read_all(bootstrap, output))) == sorted(f"p{b}-{i}" for b in range(3) for i in range(20))


def test_partition_mode_the_next_batch_of_the_same_partition_is_written(setup):
    bootstrap, output, query_id, checkpoint = setup
    writer = make_writer(bootstrap, output, "partition", checkpoint)
    assert writer.write_as(TaskIdentity(query_id, 0, 1, 0), arrow_batches("a", 1, 5)).records == 5
    assert writer.write_as(TaskIdentity(query_id, 1, 1, 0), arrow_batches("b", 1, 5)).records == 5
    assert writer.write_as(TaskIdentity(query_id, 1, 1, 0), arrow_batches("b", 1, 5)).skipped
    assert len(read_all(bootstrap, output)) == 10


def test_batch_mode_only_the_attempt_that_reached_commit_is_visible(setup):
    bootstrap, output, query_id, checkpoint = setup
    writer = make_writer(bootstrap, output, "batch", checkpoint)
    writer.prepare_on_driver()
    rows = arrow_batches("b", 2, 10)
    reached, resume = threading.Event(), threading.Event()
    results: list = []
    thread = threading.Thread(target=lambda: results.append(
        writer.write_as(TaskIdentity(query_id, 7, 0, 0), paused_after_first(rows, reached, resume))))
    thread.start()
    assert reached.wait(30)
    winner = writer.write_as(TaskIdentity(query_id, 7, 0, 1), rows)
    resume.set()
    thread.join(60)
    loser = results[0]
    assert loser.transactional_id != winner.transactional_id  # attempts never fence each other
    assert read_all(bootstrap, output) == []  # both prepared, nothing visible

    committer = make_writer(bootstrap, output, "batch", checkpoint)  # commit runs on a fresh writer
    committer.commit([winner], 7)
    committer.commit([winner], 7)  # Spark calls it again after a restart: nothing changes
    committer.abort([winner], 7)  # nor does a late abort
    assert sorted(values(read_all(bootstrap, output))) == sorted(f"b{b}-{i}" for b in range(2) for i in range(10))
    assert all(stable == high for stable, high in watermarks(bootstrap, output).values())


def test_batch_mode_a_speculative_copy_that_hands_over_after_the_commit_is_aborted_by_the_next(setup):
    bootstrap, output, query_id, checkpoint = setup
    writer = make_writer(bootstrap, output, "batch", checkpoint)
    writer.prepare_on_driver()
    winner = writer.write_as(TaskIdentity(query_id, 0, 0, 0), arrow_batches("w", 1, 5))
    writer.commit([winner], 0)
    late = writer.write_as(TaskIdentity(query_id, 0, 0, 1), arrow_batches("w", 1, 5))  # too late
    assert late.transactional_id
    next_batch = make_writer(bootstrap, output, "batch", checkpoint)
    next_batch.prepare_on_driver()
    result = next_batch.write_as(TaskIdentity(query_id, 1, 0, 0), arrow_batches("n", 1, 5))
    next_batch.commit([result], 1)
    expected = [f"w0-{i}" for i in range(5)] + [f"n0-{i}" for i in range(5)]
    assert sorted(values(read_all(bootstrap, output))) == sorted(expected)
    assert all(stable == high for stable, high in watermarks(bootstrap, output).values())


def test_batch_mode_a_rerun_after_the_decision_writes_nothing_more(setup):
    """Spark re-runs a batch whose commit was interrupted after the decision was saved:
    the re-run's tasks write again (under new ids), commit finishes the recorded decision
    and aborts the re-run's transactions."""
    bootstrap, output, query_id, checkpoint = setup
    first_run = make_writer(bootstrap, output, "batch", checkpoint)
    first_run.prepare_on_driver()
    decided = first_run.write_as(TaskIdentity(query_id, 3, 0, 0), arrow_batches("d", 1, 5))
    from oncelog.spark.sink.batch_commit import BatchCommitter
    from oncelog.spark.sink.twophase import TwoPhaseClient

    with TwoPhaseClient(bootstrap) as client:
        BatchCommitter(first_run.options, query_id, client)._decide([decided], 3)  # then the driver died
    second_run = make_writer(bootstrap, output, "batch", checkpoint)
    second_run.prepare_on_driver()
    rerun = second_run.write_as(TaskIdentity(query_id, 3, 0, 0), arrow_batches("d", 1, 5))
    assert rerun.transactional_id != decided.transactional_id
    second_run.commit([rerun], 3)
    assert sorted(values(read_all(bootstrap, output))) == sorted(f"d0-{i}" for i in range(5))
    assert all(stable == high for stable, high in watermarks(bootstrap, output).values())


def test_abandoning_a_batch_mode_query_aborts_what_it_left_prepared(setup):
    from oncelog.spark.sink import abandon_query

    bootstrap, output, query_id, checkpoint = setup
    writer = make_writer(bootstrap, output, "batch", checkpoint)
    writer.prepare_on_driver()  # the gate
    prepared = writer.write_as(TaskIdentity(query_id, 0, 0, 0), arrow_batches("x", 1, 5))
    assert any(stable < high for stable, high in watermarks(bootstrap, output).values())
    aborted = abandon_query(bootstrap, query_id)
    assert prepared.transactional_id in aborted
    assert any(gate.startswith(f"oncelog-sink-{query_id}-gate-") for gate in aborted)
    assert all(stable == high for stable, high in watermarks(bootstrap, output).values())
    assert read_all(bootstrap, output) == []


def test_batch_mode_gate_covers_every_topic_of_option_topics_before_the_first_micro_batch_writes(
        shared_broker, topic, tmp_path):
    from oncelog.spark.sink import abandon_query

    bootstrap = shared_broker.bootstrap_servers
    first, second = f"{topic}-a", f"{topic}-b"
    create_topics(bootstrap, (first, 2), (second, 3))
    query_id = str(uuid.uuid4())
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    (checkpoint / "metadata").write_text(json.dumps({"id": query_id}) + "\n")
    options = {"kafka.bootstrap.servers": bootstrap, "topic": first, "topics": f"{first},{second}", "mode": "batch",
               "checkpointLocation": str(checkpoint), "clusterTimeoutMs": "20000"}
    writer = OncelogStreamWriter(parse_sink_options(options, streaming=True), SCHEMA)

    writer.prepare_on_driver()  # micro-batch 0: nothing written to either topic yet

    for name in (first, second):  # the gate's record holds every partition's LSO
        assert all(stable < end for stable, end in watermarks(bootstrap, name).values()), name
    abandon_query(bootstrap, query_id)
    for name in (first, second):
        assert all(stable == end for stable, end in watermarks(bootstrap, name).values()), name


def test_batch_mode_gate_opens_on_a_compacted_topic(shared_broker, topic, tmp_path):
    """A compacted topic refuses records without a key (INVALID_RECORD): the gate's record has one."""
    from oncelog.spark.sink import abandon_query

    bootstrap = shared_broker.bootstrap_servers
    support_kafka.create_topics(bootstrap, (topic, 2), config={"cleanup.policy": "compact"})
    query_id = str(uuid.uuid4())
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    (checkpoint / "metadata").write_text(json.dumps({"id": query_id}) + "\n")
    options = {"kafka.bootstrap.servers": bootstrap, "topic": topic, "topics": topic, "mode": "batch",
               "checkpointLocation": str(checkpoint), "clusterTimeoutMs": "20000"}
    writer = OncelogStreamWriter(parse_sink_options(options, streaming=True), SCHEMA)

    writer.prepare_on_driver()

    assert all(stable < end for stable, end in watermarks(bootstrap, topic).values())
    abandon_query(bootstrap, query_id)
    assert all(stable == end for stable, end in watermarks(bootstrap, topic).values())


def test_a_row_naming_a_topic_outside_option_topics_fails_its_task_and_leaves_nothing_visible(setup):
    bootstrap, output, query_id, checkpoint = setup
    options = {"kafka.bootstrap.servers": bootstrap, "topic": output, "topics": output, "mode": "partition",
               "checkpointLocation": str(checkpoint), "clusterTimeoutMs": "20000"}
    schema = StructType([StructField("value", BinaryType()), StructField("topic", StringType())])
    writer = OncelogStreamWriter(parse_sink_options(options, streaming=True), schema)
    rows = pa.record_batch([pa.array([b"a", b"b"], pa.binary()), pa.array([output, "somewhere-else"])],
                           names=["value", "topic"])

    with pytest.raises(SinkWriteError, match=f"a row names the topic 'somewhere-else', which is not one of "
                                             f"option topics={output}"):
        writer.write_as(TaskIdentity(query_id, 0, 0, 0), [rows])
    assert read_all(bootstrap, output) == []

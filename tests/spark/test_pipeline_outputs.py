"""The runner's outputs beyond one topic in append mode, on the tests' Spark session and
a real broker: a transform returning `{topic: DataFrame}` (the seeds' branches) written
by one query in batch mode; a `topic` column routing rows among --sink's topics; update
output mode (through foreachBatch) writing each changed count once per micro-batch, and
writing nothing twice when a micro-batch is re-run after its commit log entry was lost
(a driver killed between the sink's commit and Spark's)."""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path

import pytest

from oncelog.spark.pipeline import PipelineError, PipelineSpec, Trigger, run_pipeline
from tests.support.kafka import create_topics
from tests.support.pipeline import produce_in_transactions
from tests.support.spark.topics import read_all, watermarks

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def names(*prefixes: str) -> list[str]:
    suffix = uuid.uuid4().hex[:6]
    return [f"{prefix}-{suffix}" for prefix in prefixes]


def spec(bootstrap: str, source: str, sinks: tuple[str, ...], checkpoint: Path, **fields) -> PipelineSpec:
    return PipelineSpec(source_topic=source, sink_topics=sinks, checkpoint=str(checkpoint),
                        bootstrap_servers=bootstrap, trigger=Trigger.parse("available-now"), progress="none",
                        **fields)


@pytest.mark.parametrize("function", ["branch", "branch_by_column"])
def test_the_branch_example_writes_each_branch_to_its_topic_exactly_once_in_batch_mode(
        spark, shared_broker, tmp_path, function):
    bootstrap = shared_broker.bootstrap_servers
    (source,) = names("input-events")
    suffix = uuid.uuid4().hex[:6]
    # The example's (and the seeds') topic names, made unique: the broker is shared by every test.
    high, normal = f"high-priority-events-{suffix}", f"normal-priority-events-{suffix}"
    create_topics(bootstrap, (source, 2), (high, 2), (normal, 3))
    committed = ([f"HIGH-{i}".encode() for i in range(40)] + [f"NORMAL-{i}".encode() for i in range(50)]
                 + [f"LOW-{i}".encode() for i in range(10)])
    produce_in_transactions(bootstrap, source, [(committed[:50], True), ([b"HIGH-aborted"] * 10, False),
                                                (committed[50:], True)])

    example = tmp_path / f"branch_{suffix}.py"  # the example, writing to this run's topics
    example.write_text((EXAMPLES / "branch.py").read_text().replace(
        'HIGH, NORMAL = "high-priority-events", "normal-priority-events"', f'HIGH, NORMAL = "{high}", "{normal}"'))
    assert high in example.read_text()

    result = run_pipeline(spec(bootstrap, source, (high, normal), tmp_path / "checkpoint", mode="batch",
                               transforms=(f"{example}:{function}",), max_offsets_per_trigger=40), spark)

    # Each committed record counted once, although `branch` reads the source once per output.
    assert result.records == len(committed)

    assert Counter(o.value for o in read_all(bootstrap, high)) == Counter(v for v in committed if b"HIGH" in v)
    assert Counter(o.value for o in read_all(bootstrap, normal)) == Counter(v for v in committed if b"NORMAL" in v)
    for topic in (high, normal):  # nothing left open: no gate, no prepared transaction
        assert all(stable == end for stable, end in watermarks(bootstrap, topic).values())


def test_a_topic_column_routes_rows_among_the_sink_topics_and_the_source_topic_means_the_first(
        spark, shared_broker, tmp_path):
    bootstrap = shared_broker.bootstrap_servers
    source, first, second = names("orders", "orders-eu", "orders-us")
    create_topics(bootstrap, (source, 2), (first, 2), (second, 2))
    values = [f"eu-{i}".encode() for i in range(10)] + [f"us-{i}".encode() for i in range(10)]
    produce_in_transactions(bootstrap, source, [(values, True)])
    sql = (f"SELECT value, CASE WHEN value LIKE 'us-%' THEN '{second}' ELSE topic END AS topic FROM source")

    run_pipeline(spec(bootstrap, source, (first, second), tmp_path / "checkpoint", sql=sql), spark)

    assert sorted(o.value for o in read_all(bootstrap, first)) == sorted(values[:10])
    assert sorted(o.value for o in read_all(bootstrap, second)) == sorted(values[10:])


@pytest.mark.parametrize("mode", ["partition", "batch"])
def test_update_output_mode_writes_each_changed_count_once_and_a_re_run_micro_batch_writes_nothing_twice(
        spark, shared_broker, tmp_path, mode):
    bootstrap = shared_broker.bootstrap_servers
    source, counts = names("clicks", "click-counts")
    create_topics(bootstrap, (source, 2), (counts, 2))
    # Keys "0".."29", each in both committed transactions; the aborted one counts for nothing.
    produce_in_transactions(bootstrap, source, [([b"c"] * 30, True), ([b"x"] * 20, False), ([b"c"] * 30, True)])
    checkpoint = tmp_path / "checkpoint"
    pipeline = spec(bootstrap, source, (counts,), checkpoint, output_mode="update", mode=mode,
                    max_offsets_per_trigger=25,
                    sql="SELECT key, CAST(count(*) AS STRING) AS value FROM source GROUP BY key")

    first = run_pipeline(pipeline, spark)
    assert first.batch_count >= 2
    written = read_all(bootstrap, counts)
    # A driver killed after the sink committed micro-batch N and before Spark's commit log
    # recorded it: Spark runs N again from the same offsets and state.
    last = max(batch.batch_id for batch in first.batches)
    (checkpoint / "commits" / str(last)).unlink()
    second = run_pipeline(pipeline, spark)

    assert [batch.batch_id for batch in second.batches] == [last]
    def in_log_order(outputs):
        return sorted(outputs, key=lambda o: (o.partition, o.offset))

    assert in_log_order(read_all(bootstrap, counts)) == in_log_order(written)  # the re-run wrote nothing
    pairs = Counter((o.key, int(o.value)) for o in written)
    assert max(pairs.values()) == 1, "a (key, count) update written twice"
    latest = {}
    for output in sorted(written, key=lambda o: (o.partition, o.offset)):
        assert int(output.value) > latest.get(output.key, 0)  # counts only grow, per key, in order
        latest[output.key] = int(output.value)
    assert latest == {str(number).encode(): 2 for number in range(30)}
    assert all(stable == end for stable, end in watermarks(bootstrap, counts).values())  # nothing left open


def test_a_row_naming_a_topic_the_sink_does_not_list_fails_the_pipeline_and_writes_nothing(
        spark, shared_broker, tmp_path):
    bootstrap = shared_broker.bootstrap_servers
    source, sink, other = names("in", "out", "elsewhere")
    create_topics(bootstrap, (source, 2), (sink, 2), (other, 2))
    produce_in_transactions(bootstrap, source, [([b"a", b"b"], True)])

    with pytest.raises(PipelineError) as raised:
        run_pipeline(spec(bootstrap, source, (sink,), tmp_path / "checkpoint",
                          sql=f"SELECT value, '{other}' AS topic FROM source"), spark)

    assert f"a row names the topic '{other}', which is not one of option topics={sink}" in str(raised.value)
    assert read_all(bootstrap, sink) == [] and read_all(bootstrap, other) == []


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"sql": "SELECT value FROM source"}, "--sink names 2 topics, but the transform's result has no topic column"),
        ({"sql": "SELECT value, 7 AS topic FROM source"}, "the transform's topic column is int"),
    ],
    ids=["several-sinks-no-topic-column", "topic-column-not-a-string"],
)
def test_outputs_that_cannot_be_routed_are_one_line_before_the_query_starts(
        spark, shared_broker, tmp_path, fields, message):
    bootstrap = shared_broker.bootstrap_servers
    source, first, second = names("in", "a", "b")
    create_topics(bootstrap, (source, 1), (first, 1), (second, 1))
    with pytest.raises(PipelineError) as raised:
        run_pipeline(spec(bootstrap, source, (first, second), tmp_path / "checkpoint", **fields), spark)
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_a_foreach_batch_write_given_another_micro_batch_id_fails_instead_of_skipping_rows(
        spark, shared_broker, tmp_path):
    from pyspark.errors import StreamingQueryException

    bootstrap = shared_broker.bootstrap_servers
    source, sink = names("in", "out")
    create_topics(bootstrap, (source, 1), (sink, 1))
    produce_in_transactions(bootstrap, source, [([b"a", b"b"], True)])
    checkpoint = str(tmp_path / "checkpoint")

    def write(batch, batch_id):  # the id of a later micro-batch: its marker would make a re-run skip
        (batch.write.format("oncelog").mode("append").option("kafka.bootstrap.servers", bootstrap)
         .option("topic", sink).option("checkpointLocation", checkpoint)
         .option("microBatchId", str(batch_id + 100)).save())

    stream = (spark.readStream.format("oncelog").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", source).option("startingOffsets", "earliest").load())
    query = (stream.select("value").writeStream.foreachBatch(write).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    with pytest.raises(StreamingQueryException) as raised:
        query.awaitTermination(120)
    assert "option microBatchId=100" in str(raised.value)
    assert "is not the micro-batch this write runs in (streaming.sql.batchId is 0, not 100)" in str(raised.value)
    assert read_all(bootstrap, sink) == []

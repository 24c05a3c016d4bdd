"""The oncelog sink in Structured Streaming on the shared SparkSession (local[2]): a source
topic with committed and aborted transactions, upper(value), writeStream into the sink in
both modes; the output read with read_committed is the transform of the committed input,
exactly once, also when the query runs again from its checkpoint."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.support.kafka import create_topics
from tests.support.spark.sink_pipeline import start_query
from tests.support.spark.topics import read_all, transformed, values, watermarks, write_source


@pytest.mark.parametrize("mode", ["partition", "batch"])
def test_stream_writes_the_transform_of_committed_input_exactly_once_across_runs(
        spark, shared_broker, topic, tmp_path, mode):
    bootstrap = shared_broker.bootstrap_servers
    source, output = f"{topic}-in", f"{topic}-out"
    create_topics(bootstrap, (source, 2), (output, 2))
    committed = write_source(bootstrap, source, 2, transactions=6, per_transaction=10)
    checkpoint = str(tmp_path / "checkpoint")

    def run():
        query = start_query(spark, bootstrap=bootstrap, source=source, output=output, mode=mode,
                            checkpoint=checkpoint, max_offsets=25)
        query.awaitTermination(180)
        assert query.exception() is None
        return query

    query = run()
    assert query.lastProgress is not None
    outputs = read_all(bootstrap, output)
    assert values(outputs) == transformed(committed)
    assert not any(v.startswith(("R2-", "R5-")) for v in values(outputs))  # aborted input
    batches = Counter(dict(output.headers)["batch"] for output in outputs)
    assert len(batches) > 1  # several micro-batches (maxOffsetsPerTrigger)

    run()  # from the checkpoint, nothing new: nothing written again
    more = write_source(bootstrap, source, 2, transactions=3, per_transaction=8, prefix="s")
    run()  # only the new input
    assert values(read_all(bootstrap, output)) == transformed(committed + more)
    # No transaction (task, gate or leftover) stays open: the output is fully readable.
    assert all(stable == high for stable, high in watermarks(bootstrap, output).values())


def test_batch_write_puts_each_row_where_its_topic_partition_key_and_headers_say(spark, shared_broker, topic):
    bootstrap = shared_broker.bootstrap_servers
    default, other = f"{topic}-a", f"{topic}-b"
    create_topics(bootstrap, (default, 2), (other, 1))
    rows = [("k1", "v1", default, 1, [("h", b"1"), ("h", b"2")]),
            (None, "v2", other, None, None),
            ("k3", "v3", None, 0, [])]
    frame = spark.createDataFrame(
        rows, "key string, value string, topic string, partition int, headers array<struct<key:string,value:binary>>")
    (frame.write.format("oncelog").option("kafka.bootstrap.servers", bootstrap).option("topic", default)
     .mode("append").save())
    written = {(o.topic, o.partition, o.key, o.value, o.headers)
               for o in read_all(bootstrap, default) + read_all(bootstrap, other)}
    assert written == {
        (default, 1, b"k1", b"v1", (("h", b"1"), ("h", b"2"))),
        (other, 0, None, b"v2", ()),
        (default, 0, b"k3", b"v3", ()),
    }

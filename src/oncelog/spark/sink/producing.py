"""What a task of either of the sink's modes does to write (executor side; the modes are
oncelog.spark.sink.partition_mode and batch_mode): the producer it writes with
(`new_producer`, `abort_quietly`; `df.write`'s writer uses them too), its rows timed as they
come and as they are written (`timed_rows`, `write_rows`), and a client error worded for the
task (`describe_error`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from oncelog.client.cluster import shared_cluster
from oncelog.client.errors import ClientError, ConnectionLost, Fenced, NoAnswer
from oncelog.client.producer import TransactionalProducer
from oncelog.spark import trace
from oncelog.spark.sink.options import SinkOptions
from oncelog.spark.sink.rows import RowWriter


def new_producer(options: SinkOptions, transactional_id: str) -> TransactionalProducer:
    return TransactionalProducer(shared_cluster(options.client), transactional_id, options.producer_settings,
                                 timeout_s=options.cluster_timeout_s)


def timed_rows(batches: Iterable, waiting: trace.Stopwatch) -> Iterator:
    """The task's non-empty Arrow batches; `waiting` times how long each took to come
    (the read, the transform and Spark's conversions upstream of this writer)."""
    upstream = iter(batches)
    while True:
        waiting.start()
        batch = next(upstream, None)
        waiting.stop()
        if batch is None:
            return
        if batch.num_rows:
            yield batch


def write_rows(writer: RowWriter, first, rows, where: dict) -> None:
    writing = trace.Stopwatch("sink.rows", **where)
    writing.start()
    writer.write(first)
    writing.stop()
    for batch in rows:
        writing.start()
        writer.write(batch)
        writing.stop()
    writing.record(records=writer.count)


def abort_quietly(producer: TransactionalProducer) -> None:
    try:
        producer.abort()
    except ClientError:  # fenced or unreachable: the next InitProducerId of the id aborts it
        pass


def describe_error(error: ClientError, options: SinkOptions, where: str) -> str:
    if isinstance(error, Fenced):
        return f"{where} was fenced by a newer attempt of the same task (a retry or speculative copy)"
    if isinstance(error, (NoAnswer, ConnectionLost)):
        return (
            f"{where}: kafka.bootstrap.servers={options.bootstrap_servers} did not answer within "
            f"clusterTimeoutMs={options.cluster_timeout_ms}: {error}"
        )
    return f"{where}: {error}"

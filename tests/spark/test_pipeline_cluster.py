"""The pipeline runner against a replicated cluster: the same job as on the embedded
broker, now reading from and writing to 3 brokers (replication factor 3,
min.insync.replicas 2) while the leader of an output partition is killed with -9 and
restarted mid-run. Each committed input record must be in the output exactly once."""

from __future__ import annotations

import shutil
import threading
import time
import uuid
from collections import Counter

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.local.cluster import ClusterProcess
from oncelog.spark.pipeline import PipelineSpec, Trigger, run_pipeline
from tests.support.pipeline import produce_in_transactions, read_committed

SETTINGS = {"transaction.state.log.num.partitions": "3", "offsets.topic.num.partitions": "3"}


@pytest.fixture
def cluster(tmp_path):
    with ClusterProcess(tmp_path / "cluster", 3, SETTINGS) as running:
        yield running
    for node in running.nodes.values():
        shutil.rmtree(node.data_dir / "__cluster_metadata-etcd", ignore_errors=True)


def test_pipeline_on_a_three_broker_cluster_writes_each_record_once_through_a_leader_kill(spark, cluster, tmp_path):
    bootstrap = cluster.bootstrap_servers
    source, sink = f"cl-in-{uuid.uuid4().hex[:6]}", f"cl-out-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, 2, 3, config={"min.insync.replicas": "2"})
                                       for t in (source, sink)]).values():
        future.result(30)
    for topic in (source, sink):
        cluster.wait_for_topic(topic)
    committed = [f"order-{i}".encode() for i in range(600)]
    produce_in_transactions(bootstrap, source, [(committed[:300], True), ([b"aborted"] * 50, False),
                                                (committed[300:], True)])
    spec = PipelineSpec(
        source_topic=source, sink_topics=(sink,), checkpoint=str(tmp_path / "checkpoint"), bootstrap_servers=bootstrap,
        # Many small micro-batches: the run must outlast the first committed output by
        # well over the kill and restart, however quick a micro-batch is.
        trigger=Trigger.parse("available-now"), max_offsets_per_trigger=10, progress="none",
        sql="SELECT key, concat(value, CAST('-done' AS BINARY)) AS value FROM source",
    )
    killed: list[float] = []  # when

    def kill_a_leader_once_output_is_committed() -> None:
        # The pipeline runs on this test's thread (Spark keeps the session per thread).
        # Spark's commit log names the first micro-batch once its output is committed:
        # a file to look for, quick enough to poll that the kill comes long before the
        # last of the 60 micro-batches (a read_committed consumer per poll was not).
        commits = tmp_path / "checkpoint" / "commits"
        cluster.wait_for(lambda: commits.is_dir() and any(p.name.isdigit() for p in commits.iterdir()), 120,
                         "the first committed micro-batch")
        victim = cluster.leader_of(sink, 0)
        cluster.kill(victim)
        killed.append(time.monotonic())
        time.sleep(3)
        cluster.start_node(victim)

    killer = threading.Thread(target=kill_a_leader_once_output_is_committed, daemon=True)
    killer.start()
    result = run_pipeline(spec, spark)
    finished = time.monotonic()
    killer.join(120)

    assert killed and killed[0] < finished, "no broker was killed while the pipeline ran"
    assert result.records == 600
    assert Counter(read_committed(bootstrap, sink)) == Counter(v + b"-done" for v in committed)

"""Both sink modes with Spark's speculative execution on, for real: a standalone cluster
of two workers on distinct loopback hosts (local mode never speculates, and Spark never
starts a copy on the host of the original attempt). The first task attempt to have all
its rows in its open transaction stalls there (the sink's pause point, set through
spark.executorEnv); Spark starts a speculative copy on the other worker, the copy wins,
and the stalled attempt is killed with its rows left behind in the log.

The output, read with read_committed, must be upper(value) of the committed input exactly
once; the copies must have won (records written by attempt 1 are visible), and the losers'
rows must be in the log but aborted (read_uncommitted sees attempt-0 rows that
read_committed does not).

`make sink-faults` runs it (marked slow: a standalone cluster per mode, a minute in all);
the default run replays the same attempts against the sink without Spark
(test_sink_attempts.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections import Counter

import pytest

from oncelog.local.spark_cluster import StandaloneSpark
from oncelog.spark.pause import PAUSE_AT_ENV, PAUSE_FILE_ENV
from tests.support.kafka import create_topics
from tests.support.spark import SINK_PIPELINE, SPECULATION_CONF
from tests.support.spark.topics import read_all, transformed, values, write_source

PIPELINE = SINK_PIPELINE
STALL_AT = {"partition": "partition:before-task-commit", "batch": "batch:before-handover"}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    with StandaloneSpark(workers=2, work_dir=tmp_path_factory.mktemp("standalone-spark")) as cluster:
        yield cluster


def attempts(outputs) -> Counter:
    """Records per writing attempt number (batch mode's gate records have none)."""
    tags = (dict(output.headers).get("attempt") for output in outputs)
    return Counter(tag.decode() for tag in tags if tag is not None)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("mode", ["partition", "batch"])
def test_a_speculative_copy_wins_and_the_output_stays_exactly_once(standalone, shared_broker, tmp_path, mode):
    bootstrap = shared_broker.bootstrap_servers
    source, output = f"spec-in-{uuid.uuid4().hex[:6]}", f"spec-out-{mode}-{uuid.uuid4().hex[:6]}"
    create_topics(bootstrap, (source, 2), (output, 2))
    committed = write_source(bootstrap, source, 2, transactions=6, per_transaction=10, prefix=mode)
    config = {
        "master": standalone.master_url,
        "conf": {
            **SPECULATION_CONF,
            f"spark.executorEnv.{PAUSE_AT_ENV}": STALL_AT[mode],
            f"spark.executorEnv.{PAUSE_FILE_ENV}": str(tmp_path / "stalled"),
        },
        "queries": [{
            "bootstrap": bootstrap, "source": source, "output": output, "mode": mode,
            "checkpoint": str(tmp_path / "checkpoint"), "max_offsets": 20,
            "query_name": f"speculation_{mode}",
        }],
    }
    completed = subprocess.run([sys.executable, str(PIPELINE), json.dumps(config)], check=False,
                               capture_output=True, stdin=subprocess.DEVNULL, timeout=540)
    assert completed.returncode == 0, completed.stderr.decode(errors="replace")[-4000:]
    assert (tmp_path / "stalled").read_text() == STALL_AT[mode], "no task attempt stalled"

    visible = read_all(bootstrap, output)
    assert values(visible) == transformed(committed)
    winners = attempts(visible)
    assert any(attempt != "0" for attempt in winners), f"no speculative copy won: {winners}"
    everything = read_all(bootstrap, output, isolation="read_uncommitted")
    left_behind = attempts(everything)["0"] - winners["0"]
    assert left_behind > 0, f"the stalled first attempts wrote nothing that was then aborted: {attempts(everything)}"

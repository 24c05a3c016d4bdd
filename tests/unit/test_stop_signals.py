"""oncelog.stop_signals and the runner's summary line, without Spark: a first SIGTERM or
SIGINT only sets the event, nested uses share it, the outermost puts the previous
handlers back, a library's handler can be taken back, and a second signal ends the
process by the signal's default action."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

from oncelog.spark.pipeline import summary_line
from oncelog.spark.pipeline.progress import RunResult
from oncelog.spark.pipeline.spec import PipelineSpec
from oncelog.stop_signals import handle_again, stop_on_signals


def test_a_signal_sets_the_event_that_nested_uses_share_and_the_outermost_restores_the_handlers():
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    with stop_on_signals() as outer:
        with stop_on_signals() as inner:
            assert inner is outer
        assert signal.getsignal(signal.SIGINT) not in (before[signal.SIGINT], signal.default_int_handler)
        os.kill(os.getpid(), signal.SIGTERM)
        assert outer.wait(5)
    assert {signum: signal.getsignal(signum) for signum in before} == before


def test_a_handler_a_library_set_is_taken_back():
    with stop_on_signals() as stop:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as PySpark's SparkContext does
        handle_again()
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.wait(5)


def test_a_second_signal_ends_the_process_by_its_default_action():
    program = textwrap.dedent("""
        import os, signal, sys, time
        from oncelog.stop_signals import stop_on_signals
        with stop_on_signals() as stop:
            os.kill(os.getpid(), signal.SIGTERM)
            assert stop.wait(5)
            print("stopping", flush=True)
            os.kill(os.getpid(), signal.SIGTERM)  # a stop that hangs, and the user insists
            time.sleep(10)
            print("still here", flush=True)
    """)
    completed = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=30,
                               check=False)
    assert completed.returncode == -signal.SIGTERM, completed
    assert completed.stdout == "stopping\n"
    assert completed.stderr == ""


def test_the_summary_line_says_how_the_run_ended():
    spec = PipelineSpec(source_topic="orders", sink_topics=("enriched",), checkpoint="/tmp/c", sql="SELECT 1")
    assert summary_line(spec, RunResult(stopped_by_signal=True)) == (
        "pipeline stopped before the first micro-batch (orders to enriched)")
    assert summary_line(spec, RunResult(batch_count=1, records=100, stopped_by_signal=True)) == (
        "pipeline stopped after 1 micro-batch, 100 records from orders to enriched")
    assert summary_line(spec, RunResult(batch_count=3, records=1200)) == (
        "pipeline finished: 3 micro-batches, 1,200 records from orders to enriched")
    assert summary_line(spec, RunResult()) == "pipeline finished: 0 micro-batches, 0 records from orders to enriched"

"""The benchmark harness still runs: scenario 1 once, on a few records, writes a JSON
result with a positive throughput (so bench/ cannot rot unnoticed). Not a benchmark:
no figure is compared with anything."""

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_bench_quick_run_of_scenario_1_writes_a_positive_throughput(tmp_path):
    output = tmp_path / "latest.json"
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "run.py"), "--quick", "--scenarios", "1", "--runs", "1",
         "--messages", "2000", "--no-peers", "--no-limits", "--work-dir", str(tmp_path),
         "--output", str(output)],
        capture_output=True, text=True, timeout=180, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(output.read_text())
    scenario = result["scenarios"]["1"]
    assert scenario["status"] == "ok", scenario
    throughput = scenario["peers"]["oncelog"]["metrics"]["msg_per_s"]
    assert throughput["n"] == 1 and throughput["median"] > 0
    assert "msg/s" in done.stdout


def test_bench_quick_run_of_scenario_2r_reports_the_3_broker_cluster_over_the_single_broker(tmp_path):
    """Scenario 2r starts a 3-broker cluster (topic RF 3, min.insync.replicas=2) next to
    a standalone broker, even with --no-peers, and reports cluster / single."""
    output = tmp_path / "latest.json"
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "run.py"), "--quick", "--scenarios", "2r", "--runs", "1",
         "--messages", "2000", "--no-peers", "--no-limits", "--work-dir", str(tmp_path),
         "--output", str(output)],
        capture_output=True, text=True, timeout=180, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    scenario = json.loads(output.read_text())["scenarios"]["2r"]
    assert scenario["status"] == "ok", scenario
    cluster = scenario["peers"]["oncelog-3"]
    assert not cluster["errors"], cluster["errors"]
    assert cluster["metrics"]["msg_per_s"]["median"] > 0
    # CPU read from /proc for the three brokers and their etcd members (2 MB may take
    # less than a clock tick, so only their presence is checked).
    assert {"broker_cpu_ms_per_mb", "quorum_cpu_ms_per_mb"} <= cluster["metrics"].keys()
    assert scenario["comparisons"]["msg_per_s_oncelog-3_over_oncelog"] > 0
    assert "oncelog-3 over oncelog" in done.stdout

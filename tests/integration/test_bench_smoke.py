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

"""`oncelog demo`, the job `make demo` runs: orders written in committed and aborted
transactions, the exactly-once Spark pipeline through a failed task attempt and a driver
killed with SIGKILL and restarted, and every committed order enriched exactly once."""

import re
import subprocess
import sys
from pathlib import Path

ONCELOG = Path(sys.executable).with_name("oncelog")


def report_value(output: str, label: str) -> str:
    match = re.search(rf"^{re.escape(label)} +(.*)$", output, re.M)
    assert match, f"no {label!r} line in:\n{output}"
    return match.group(1)


def test_demo_enriches_every_committed_order_exactly_once_through_task_failure_and_driver_kill(tmp_path):
    completed = subprocess.run(
        [str(ONCELOG), "demo", "--messages", "3000", "--data-dir", str(tmp_path / "data")],
        stdin=subprocess.DEVNULL, capture_output=True, timeout=300,
    )
    output = completed.stdout.decode()
    assert completed.returncode == 0, output + completed.stderr.decode()[-3000:]
    assert report_value(output, "input committed").startswith("2,400 orders")
    assert report_value(output, "input aborted").startswith("600 orders")
    assert report_value(output, "output records").startswith("2,400 ")
    for label in ("duplicates", "missing", "aborted records leaked", "wrong enrichment"):
        assert report_value(output, label) == "0", output
    assert re.match(r"[1-9]\d* injected", report_value(output, "task failures")), output
    assert report_value(output, "driver kills").startswith("1 (SIGKILL")
    assert report_value(output, "driver restarts").startswith("1 ")
    assert re.search(r"^commit latency +p50 [\d,]+ ms, p99 [\d,]+ ms", output, re.M), output
    assert report_value(output, "result") == "OK"
    assert any((tmp_path / "data").iterdir()), "the broker's log was written to --data-dir"

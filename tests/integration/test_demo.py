"""`oncelog demo`, the job `make demo` runs: an embedded broker, an idempotent producer,
every acknowledged record read back exactly once."""

import re
import subprocess
import sys
from pathlib import Path

ONCELOG = Path(sys.executable).with_name("oncelog")


def test_demo_reads_back_every_acknowledged_record_exactly_once(tmp_path):
    completed = subprocess.run(
        [str(ONCELOG), "demo", "--messages", "5000", "--data-dir", str(tmp_path / "data")],
        stdin=subprocess.DEVNULL, capture_output=True, timeout=120,
    )
    output = completed.stdout.decode()
    assert completed.returncode == 0, output + completed.stderr.decode()
    assert re.search(r"^produced +5000 of 5000 acknowledged", output, re.M), output
    assert re.search(r"^consumed +5000 ", output, re.M), output
    assert re.search(r"^missing +0$", output, re.M), output
    assert re.search(r"^duplicates +0$", output, re.M), output
    assert re.search(r"^result +OK$", output, re.M), output
    assert any((tmp_path / "data").iterdir()), "the log was written to --data-dir"

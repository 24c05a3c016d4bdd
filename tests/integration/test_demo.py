"""`oncelog demo`, the job `make demo` runs: orders written in committed and aborted
transactions, the exactly-once Spark pipeline through a failed task attempt and a driver
killed with SIGKILL and restarted, and every committed order enriched exactly once."""

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

ONCELOG = Path(sys.executable).with_name("oncelog")
REPO = Path(__file__).resolve().parents[2]


def report_value(output: str, label: str) -> str:
    match = re.search(rf"^{re.escape(label)} +(.*)$", output, re.MULTILINE)
    assert match, f"no {label!r} line in:\n{output}"
    return match.group(1)


def test_demo_enriches_every_committed_order_exactly_once_through_task_failure_and_driver_kill(tmp_path):
    completed = subprocess.run(
        [str(ONCELOG), "demo", "--messages", "3000", "--data-dir", str(tmp_path / "data")],
        stdin=subprocess.DEVNULL, check=False, capture_output=True, timeout=300,
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
    assert re.search(r"^commit latency +p50 [\d,]+ ms, p99 [\d,]+ ms", output, re.MULTILINE), output
    assert report_value(output, "result") == "OK"
    assert any((tmp_path / "data").iterdir()), "the broker's log was written to --data-dir"


def test_demo_runs_from_a_wheel_installed_in_a_fresh_virtualenv_outside_the_repository(tmp_path):
    """`pip install oncelog` and `oncelog demo` in another directory: everything the demo
    needs (its transform included) ships in the package. The wheel is built from a copy of
    the sources; the fresh virtualenv gets only that wheel, and reaches the dependencies
    (pyspark, confluent-kafka, ...) through a .pth line naming this environment's
    site-packages, so the test stays offline and fast. A path line does not run that
    directory's own .pth files, so an editable oncelog installed there stays out of sight
    (its metadata does not: hence --ignore-installed)."""
    source = tmp_path / "source"
    shutil.copytree(REPO / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--disable-pip-version-check",
                    "--wheel-dir", str(wheels), str(source)], check=True, timeout=300)
    (wheel,) = wheels.glob("oncelog-*.whl")

    environment = tmp_path / "venv"
    venv.create(environment, with_pip=False)
    python = environment / "bin" / "python"
    site_packages = Path(subprocess.check_output(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True).strip())
    here = dict.fromkeys(sysconfig.get_paths()[key] for key in ("purelib", "platlib"))
    (site_packages / "oncelog-test-dependencies.pth").write_text("".join(f"{path}\n" for path in here))
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
                    "--ignore-installed", "--quiet", "--disable-pip-version-check", str(wheel)],
                   check=True, timeout=300)

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    clean = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "ONCELOG_BOOTSTRAP")}
    installed = subprocess.check_output([str(python), "-c", "import oncelog; print(oncelog.__file__)"],
                                        cwd=elsewhere, env=clean, text=True).strip()
    assert installed.startswith(str(site_packages)), installed
    completed = subprocess.run(
        [str(environment / "bin" / "oncelog"), "demo", "--messages", "2000", "--kills", "0"],
        cwd=elsewhere, env=clean, stdin=subprocess.DEVNULL, check=False, capture_output=True, timeout=300,
    )
    output = completed.stdout.decode()
    assert completed.returncode == 0, output + completed.stderr.decode()[-3000:]
    assert report_value(output, "output records").startswith("1,600 ")
    assert report_value(output, "result") == "OK"

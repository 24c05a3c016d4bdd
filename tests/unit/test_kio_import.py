"""The processes oncelog starts often import kio without Hypothesis (oncelog.kio_import):
every test environment has Hypothesis, and kio's registration of strategies with it
costs 0.3 s of each start. Run in a fresh interpreter, where nothing is imported yet."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

REPORT = (
    "import sys\n"
    "import kio.static._phantom as phantom\n"
    "print('hypothesis' in sys.modules, phantom.hypothesis is None)\n"
    "import hypothesis.strategies\n"  # still importable, and working
    "print(hypothesis.strategies.integers(0, 3).example() in range(4))\n"
)
COMMAND = (
    "import runpy, sys\n"
    "sys.argv = ['oncelog', 'topics', 'create']\n"  # a usage error: exits once the command is parsed
    "try:\n"
    "    runpy.run_module('oncelog', run_name='__main__')\n"
    "except SystemExit:\n"
    "    pass\n"
)
SPARK_WORKER = "import oncelog.spark.source.data_source\n"


@pytest.mark.parametrize("start, environment", [
    (COMMAND, {}),
    (SPARK_WORKER, {"SPARK_PYTHON_RUNTIME": "PYTHON_WORKER"}),
], ids=["command", "spark-worker"])
def test_kio_is_imported_without_hypothesis_which_stays_importable(start, environment):
    completed = subprocess.run([sys.executable, "-c", start + REPORT], capture_output=True, text=True, check=True,
                               env={**os.environ, **environment})
    assert completed.stdout.split() == ["False", "True", "True"], completed.stderr


def test_outside_a_spark_worker_importing_oncelog_spark_leaves_kio_as_it_is():
    completed = subprocess.run([sys.executable, "-c", SPARK_WORKER + REPORT], capture_output=True, text=True,
                               check=True, env={k: v for k, v in os.environ.items() if k != "SPARK_PYTHON_RUNTIME"})
    assert completed.stdout.split() == ["True", "False", "True"], completed.stderr


def test_in_a_process_that_already_imported_hypothesis_nothing_changes():
    """Not a second copy of Hypothesis, and kio gets its strategies as usual."""
    script = (
        "import sys, hypothesis\n"
        "from oncelog.kio_import import import_kio_without_hypothesis\n"
        "import_kio_without_hypothesis()\n"
        "import kio.static._phantom as phantom\n"
        "print(sys.modules['hypothesis'] is hypothesis, phantom.hypothesis is not None)\n"
    )
    completed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert completed.stdout.split() == ["True", "True"], completed.stderr

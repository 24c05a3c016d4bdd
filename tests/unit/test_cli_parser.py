"""The `oncelog` parser loads only the module of the command it runs: a `topics` call
does not pay for Spark's pipeline or the other admin commands' imports (about a second
of every command's start before). Run in a fresh interpreter, where nothing is imported
yet."""

from __future__ import annotations

import json
import subprocess
import sys

from oncelog.cli import COMMAND_MODULES


def modules_loaded_by(argv: list[str]) -> set[str]:
    script = (
        "import json, sys\n"
        "from oncelog.cli import build_parser\n"
        f"build_parser({argv!r})\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    completed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    return set(json.loads(completed.stdout))


def test_a_command_loads_its_own_module_and_no_other_commands():
    loaded = modules_loaded_by(["topics", "list"])
    assert "oncelog.admin.topics" in loaded
    others = set(COMMAND_MODULES.values()) - {"oncelog.admin.topics"}
    assert not others & loaded, sorted(others & loaded)
    assert not any(name.startswith(("pyspark", "oncelog.spark")) for name in loaded)


def test_help_and_an_unknown_command_load_every_command_so_all_are_listed():
    for argv in (["--help"], ["no-such-command"], []):
        assert set(COMMAND_MODULES.values()) <= modules_loaded_by(argv), argv


def test_a_command_imports_kio_without_hypothesis_which_stays_importable():
    """kio registers Hypothesis strategies when Hypothesis is installed (it is in every
    test environment), 0.3 s of every command's and every broker's start."""
    script = (
        "import sys\n"
        "from oncelog import cli\n"
        "cli._import_kio_without_hypothesis()\n"
        "import oncelog.admin.topics\n"
        "import kio.static._phantom as phantom\n"
        "print('hypothesis' in sys.modules, phantom.hypothesis is None)\n"
        "import hypothesis.strategies\n"
        "print(hypothesis.strategies.integers().example() is not None)\n"
    )
    completed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert completed.stdout.split() == ["False", "True", "True"]

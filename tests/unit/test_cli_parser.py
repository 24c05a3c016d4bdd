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

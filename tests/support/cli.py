"""The `oncelog` command run as a real subprocess, as a user types it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ONCELOG = Path(sys.executable).with_name("oncelog")
COMMAND_TIMEOUT_S = 60


def run_oncelog(*args: str, stdin: bytes | None = None, env: dict[str, str] | None = None,
                timeout: float = COMMAND_TIMEOUT_S) -> subprocess.CompletedProcess[bytes]:
    environment = {k: v for k, v in os.environ.items() if k != "ONCELOG_BOOTSTRAP"}
    environment.update(env or {})
    return subprocess.run(
        [str(ONCELOG), *args],
        input=stdin,
        stdin=subprocess.DEVNULL if stdin is None else None,
        capture_output=True,
        check=False,
        timeout=timeout,
        env=environment,
    )


class Cli:
    """`oncelog ...` against one broker: `--bootstrap-server` is added to every command."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap

    def __call__(self, *args: str, stdin: bytes | None = None,
                 timeout: float = COMMAND_TIMEOUT_S) -> subprocess.CompletedProcess[bytes]:
        return run_oncelog(*args, "--bootstrap-server", self.bootstrap, stdin=stdin,
                           timeout=timeout)

    def ok(self, *args: str, stdin: bytes | None = None) -> str:
        completed = self(*args, stdin=stdin)
        assert completed.returncode == 0, (
            f"oncelog {' '.join(args)} exited {completed.returncode}: "
            f"{completed.stderr.decode(errors='replace')}"
        )
        return completed.stdout.decode()

    def fails(self, *args: str, stdin: bytes | None = None) -> str:
        """Runs a command that must fail the user-facing way; returns its one error line."""
        completed = self(*args, stdin=stdin)
        assert completed.returncode == 1, (completed.returncode, completed.stderr)
        stderr = completed.stderr.decode()
        assert stderr.count("\n") == 1 and stderr.startswith("oncelog: error: "), stderr
        assert "Traceback" not in stderr
        return stderr.strip()

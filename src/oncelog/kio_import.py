"""Import kio without Hypothesis, in processes that start often.

kio's protocol types register Hypothesis strategies for themselves when Hypothesis can be
imported. Hypothesis is a test dependency, so every development and CI environment has
it, and importing it with those registrations adds 0.1-0.3 s of CPU (on the machines
measured) to the start of every process that uses kio: each `oncelog` command, each
broker process, each Spark Python worker of a pipeline. None of them uses the strategies.
`import_kio_without_hypothesis()` imports kio with Hypothesis out of sight; Hypothesis
itself stays importable afterwards (a pipeline's transform may use it), only kio's
registration is skipped. In a process that already imported either (a test run), it
changes nothing. It changes `sys.modules` for a moment, so it is called where a process
starts, before other threads import anything.
"""

from __future__ import annotations

import importlib
import sys


def import_kio_without_hypothesis() -> None:
    if "kio.static._phantom" in sys.modules or "hypothesis" in sys.modules:
        return
    sys.modules["hypothesis"] = None  # type: ignore[assignment]  # its import raises ImportError
    try:
        importlib.import_module("kio.static._phantom")
    finally:
        sys.modules.pop("hypothesis", None)

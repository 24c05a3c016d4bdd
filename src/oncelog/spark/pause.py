"""Pause points for the sink's kill and speculation tests.

With ONCELOG_SINK_PAUSE_AT=<point>[,<point>...] and ONCELOG_SINK_PAUSE_FILE=<path>, the
first process to reach a listed point creates the file (naming the point) and sleeps
until it is killed (by the test, or by Spark when a speculative copy has won). Unset,
a pause point costs one getenv.
"""

from __future__ import annotations

import os
import time

PAUSE_AT_ENV = "ONCELOG_SINK_PAUSE_AT"
PAUSE_FILE_ENV = "ONCELOG_SINK_PAUSE_FILE"


def pause_point(name: str) -> None:
    points = os.environ.get(PAUSE_AT_ENV)
    if not points or name not in points.split(","):
        return
    try:
        descriptor = os.open(os.environ[PAUSE_FILE_ENV], os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    os.write(descriptor, name.encode())
    os.close(descriptor)
    while True:  # until the test kills the process group
        time.sleep(1)

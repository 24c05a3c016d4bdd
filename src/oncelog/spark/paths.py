"""Locations the connectors read and write with plain file calls (a query's checkpoint)."""

from __future__ import annotations

import re
from pathlib import Path

_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def local_path(location: str) -> Path | None:
    """`location` as an absolute local path (`file://` and `file:` are local), or None
    when it names another filesystem (hdfs://, s3a://, ...)."""
    value = location.strip()
    if value.startswith("file://"):
        value = value[len("file://"):]
    elif value.startswith("file:"):
        value = value[len("file:"):]
    elif _URI.match(value):
        return None
    return Path(value).absolute()

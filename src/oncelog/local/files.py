"""Files of the local harnesses: properties files, and files that hold secrets (SASL
passwords, private keys)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def write_private(path: Path, data: bytes) -> None:
    """Replace `path` with `data`, readable by its owner only from the first byte: a
    temporary file created anew with mode 0600 (a leftover one is removed first, since
    opening it would keep its mode), then renamed into place."""
    temporary = path.with_name(path.name + ".tmp")
    temporary.unlink(missing_ok=True)
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)
    temporary.replace(path)


def properties_text(properties: Mapping[str, str]) -> str:
    """`key=value` lines, as Kafka's tools read a properties file. A key or value that
    would spill onto a line of its own is refused."""
    for key, value in properties.items():
        if any(c in f"{key}{value}" for c in "\r\n"):
            raise ValueError(f"a properties entry cannot span lines: {key!r}")
    return "".join(f"{key}={value}\n" for key, value in properties.items())

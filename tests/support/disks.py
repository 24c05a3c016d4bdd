"""A tmpfs per node for the full-disk tests, as the soak's nemesis mounts them
(`oncelog.chaos.nemesis.NodeDisks`); the test is skipped where none can be mounted."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from oncelog.chaos.nemesis import NodeDisks


@contextmanager
def node_disks(directory: Path, nodes: Iterable[int], size: str) -> Iterator[NodeDisks]:
    """Mounted for the `with` block (root only, and where mounting is allowed), then unmounted."""
    reason = NodeDisks.unavailable()
    if reason is not None:
        pytest.skip(reason)
    disks = NodeDisks(directory, nodes, size=size)
    try:
        disks.mount()
    except OSError as error:
        pytest.skip(str(error))
    try:
        yield disks
    finally:
        disks.unmount()

"""The commands' standard output as a pipe whose reader may go away (`oncelog topics
describe | head -1`): how to tell that it has, and how a command then ends.

Python ignores SIGPIPE, so a write to a pipe nobody reads raises BrokenPipeError where
a C tool would be killed by the signal. `oncelog.cli.main` catches it once for every
command and ends as such a tool does, with exit status 141 (128 + SIGPIPE) and nothing on
stderr, using the recipe of Python's documentation (signal module, "Note on SIGPIPE").
Deviation: Kafka's tools are Java, whose System.out swallows the error: kafka-topics.sh
goes on and exits 0, kafka-console-consumer.sh prints "Unable to write to standard out,
closing consumer." and exits 1.
"""

from __future__ import annotations

import os
import select
import signal
import stat
import sys
from typing import IO, Any

# What a shell reports for a process SIGPIPE ended (`yes | head -1` under `set -o pipefail`).
EXIT_OUTPUT_CLOSED = 128 + signal.SIGPIPE


def reader_gone(stream: IO[str] | IO[bytes] | None) -> bool:
    """Whether `stream` is a pipe or socket whose reading end is closed, found without
    writing to it (poll reports POLLERR on such a pipe, POLLHUP on such a socket). False
    for a file, a terminal, or a stream without a descriptor (a test's buffer)."""
    if stream is None:
        return False
    try:
        fd = stream.fileno()
        mode = os.fstat(fd).st_mode
    except (OSError, ValueError):  # io.UnsupportedOperation is both
        return False
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def end_on_closed_output(error: BrokenPipeError) -> int:
    """The end of a command whose stdout or stderr lost its reader: both pointed at
    /dev/null when they did (the interpreter's last flush of what they still buffer then
    finds nothing to complain about), and EXIT_OUTPUT_CLOSED. A BrokenPipeError that
    neither explains (a connection to a broker, say) is no closed output: raised again."""
    closed = [stream for stream in (sys.stdout, sys.stderr) if reader_gone(stream)]
    if not closed and sys.platform == "linux":  # elsewhere poll() on a pipe may not tell
        raise error
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        for stream in closed or [sys.stdout]:
            os.dup2(devnull, stream.fileno())
    finally:
        os.close(devnull)
    return EXIT_OUTPUT_CLOSED


MISSING = "-"  # a value a table has none of, as Kafka's tools print it


def print_table(columns: tuple[str, ...], rows: list[tuple[Any, ...]], *, gap: str = " ") -> None:
    """Columns padded to their widest value and `gap` apart, as Kafka's tools print them
    (kafka-consumer-groups.sh and kafka-share-groups.sh one space, kafka-transactions.sh two)."""
    texts = [tuple(MISSING if value is None else str(value) for value in row) for row in rows]
    widths = [max([len(column)] + [len(row[i]) for row in texts]) for i, column in enumerate(columns)]
    print(gap.join(column.ljust(width) for column, width in zip(columns, widths, strict=True)).rstrip())
    for row in texts:
        print(gap.join(value.ljust(width) for value, width in zip(row, widths, strict=False)).rstrip())

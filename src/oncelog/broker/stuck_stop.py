"""Where a broker that does not stop is waiting: `watch_shutdown` logs the stack of every
thread and every asyncio task when the process is still running some seconds after
SIGTERM, so a hang in shutdown names its own cause in the broker's log."""

from __future__ import annotations

import asyncio
import io
import logging
import sys
import threading
import traceback

log = logging.getLogger(__name__)

REPORT_AFTER_S = 15.0


def watch_shutdown(loop: asyncio.AbstractEventLoop, after_s: float = REPORT_AFTER_S) -> None:
    """Start a daemon timer; it dies with the process, so a clean exit reports nothing."""
    timer = threading.Timer(after_s, _report, args=(loop, after_s))
    timer.name = "oncelog-stuck-stop"
    timer.daemon = True
    timer.start()


def _report(loop: asyncio.AbstractEventLoop, after_s: float) -> None:
    frames = sys._current_frames()
    threads = []
    for thread in threading.enumerate():
        frame = frames.get(thread.ident) if thread.ident is not None else None
        if frame is not None and thread is not threading.current_thread():
            threads.append(f"thread {thread.name}:\n{''.join(traceback.format_stack(frame))}")
    log.warning("still running %.0fs after SIGTERM; the threads:\n%s", after_s, "\n".join(threads))
    try:
        loop.call_soon_threadsafe(_report_tasks, loop)
    except RuntimeError:
        pass  # the loop is closed: only the threads hold the process


def _report_tasks(loop: asyncio.AbstractEventLoop) -> None:
    stacks = []
    for task in asyncio.all_tasks(loop):
        out = io.StringIO()
        task.print_stack(file=out)
        stacks.append(out.getvalue())
    log.warning("still running after SIGTERM; the event loop's %d task(s):\n%s", len(stacks), "\n".join(stacks))

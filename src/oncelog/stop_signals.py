"""A stop asked for with SIGTERM or SIGINT, for a command that ends cleanly on either
(the pipeline runner): while `stop_on_signals()` is entered, the first of them only sets
its event, which the command reads when it can act on it; a second one ends the process
at once, by the signal's default action, for a stop that hangs.

The CLI enters it before the command's modules are imported (a second of imports for the
pipeline runner, pyspark's among them), so that a signal sent at any moment from then on
is a stop, never the default death or a KeyboardInterrupt traceback from an import; the
runner enters it again and gets the same event. `handle_again()` takes the signals back
from a library that set handlers of its own (PySpark's SparkContext sets one for SIGINT).
Only the main thread may set signal handlers: elsewhere the event is never set by a signal.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

_entered: list[threading.Event] = []  # the outermost entered use's event, on the main thread


@contextmanager
def stop_on_signals() -> Iterator[threading.Event]:
    """SIGTERM and SIGINT set the yielded event until the outermost of nested uses ends,
    which puts the previous handlers back."""
    if _entered:
        yield _entered[0]
        return
    if threading.current_thread() is not threading.main_thread():
        yield threading.Event()
        return
    event = threading.Event()
    previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    _entered.append(event)
    handle_again()
    try:
        yield event
    finally:
        _entered.clear()
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def handle_again() -> None:
    """Make SIGTERM and SIGINT set the entered use's event again (nothing when none is
    entered, or off the main thread)."""
    if not _entered or threading.current_thread() is not threading.main_thread():
        return
    for signum in STOP_SIGNALS:
        signal.signal(signum, _on_signal)


def _on_signal(signum: int, _frame: FrameType | None) -> None:
    event = _entered[0]
    if event.is_set():  # the second: end now, as the signal would have without a handler
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    event.set()

"""A stop asked for with SIGTERM or SIGINT, for a command that ends cleanly on either
(the pipeline runner): while `stop_on_signals()` is entered, both signals only set its
event, which the command reads when it can act on it.

The CLI enters it before the command's modules are imported (a second of imports for the
pipeline runner, pyspark's among them), so that a signal sent at any moment from then on
is a stop, never the default death or a KeyboardInterrupt traceback from an import; the
runner enters it again and gets the same event. Only the main thread may set signal
handlers: elsewhere the event is never set by a signal.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

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
    previous = {signum: signal.signal(signum, lambda _signum, _frame: event.set()) for signum in STOP_SIGNALS}
    _entered.append(event)
    try:
        yield event
    finally:
        _entered.clear()
        for signum, handler in previous.items():
            signal.signal(signum, handler)

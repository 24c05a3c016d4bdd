"""An in-process broker for tests, notebooks and the pipeline demo.

    with EmbeddedBroker(tmp_path) as broker:
        Producer({"bootstrap.servers": broker.bootstrap_servers})

The broker runs on its own event loop in a background thread, on a free loopback port
unless `listeners` says otherwise. The loop owns all broker state; the calling thread
only starts and stops it.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Self

from oncelog.broker.broker import Broker, data_dir_config
from oncelog.config.broker import BrokerConfig


class EmbeddedBroker:
    def __init__(self, data_dir: str | Path, config: Mapping[str, str] | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.config = BrokerConfig(data_dir_config(self.data_dir, **dict(config or {})))
        self.broker: Broker | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def bootstrap_servers(self) -> str:
        """The advertised address, as clients see it in Metadata."""
        assert self.broker is not None, "broker not started"
        return f"{self.broker.host}:{self.broker.port}"

    @property
    def port(self) -> int:
        """The port the broker listens on (not the advertised one, if that differs)."""
        assert self.broker is not None, "broker not started"
        return self.broker.bound_port

    def start(self) -> Self:
        started = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = _new_event_loop()
            asyncio.set_event_loop(loop)
            self._loop = loop
            try:
                self.broker = broker = Broker(self.config)
                loop.run_until_complete(broker.start())
            except BaseException as error:  # noqa: BLE001 (reported to the starting thread)
                failure.append(error)
                started.set()
                loop.close()
                return
            started.set()
            loop.run_forever()
            loop.run_until_complete(broker.stop())
            loop.close()

        self._thread = threading.Thread(target=run, name="oncelog-broker", daemon=True)
        self._thread.start()
        started.wait()
        if failure:
            raise failure[0]
        return self

    def stop(self) -> None:
        if self._thread is None or self._loop is None:
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._thread = None

    def call(self, function, *args):
        """Run `function(*args)` on the broker's loop and return its result, awaited when
        it is a coroutine (for tests)."""
        assert self._loop is not None

        async def invoke():
            result = function(*args)
            return await result if inspect.isawaitable(result) else result

        return asyncio.run_coroutine_threadsafe(invoke(), self._loop).result()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()


def _new_event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop

        return uvloop.new_event_loop()
    except ImportError:
        return asyncio.new_event_loop()

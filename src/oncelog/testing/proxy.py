"""A Kafka-aware TCP proxy that injects faults between clients and a broker.

    with FaultProxy(upstream=("127.0.0.1", broker_port), policy=FaultPolicy(drop_response=0.05)) as proxy:
        # start the broker with advertised.listeners=PLAINTEXT://127.0.0.1:<proxy.port>
        # so clients that learn the broker's address from Metadata keep using the proxy

The proxy reads Kafka frames in both directions, so it knows which response answers
which request (by correlation id) and can act on one API only. For each response of a
targeted API it may:

- drop it and close the client connection (the request was processed: the client
  must retry without knowing whether the write happened);
- drop it and keep the connection (the client times the request out);
- hold it back for `delay_ms` first.

All decisions come from one seeded random generator, and every fault is counted in
`proxy.stats`, so a test can assert that faults really happened.
"""

from __future__ import annotations

import asyncio
import random
import struct
import threading
from collections import Counter
from dataclasses import dataclass, field

PRODUCE = 0


@dataclass
class FaultPolicy:
    api_keys: frozenset[int] = frozenset({PRODUCE})
    drop_response_and_close: float = 0.0  # probability per targeted response
    drop_response: float = 0.0  # dropped, connection kept open
    delay_response: float = 0.0
    delay_ms: int = 0
    seed: int = 1
    enabled: bool = True
    _random: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)

    def decide(self) -> str:
        if not self.enabled:
            return "forward"
        roll = self._random.random()
        if roll < self.drop_response_and_close:
            return "drop_and_close"
        roll -= self.drop_response_and_close
        if roll < self.drop_response:
            return "drop"
        roll -= self.drop_response
        if roll < self.delay_response:
            return "delay"
        return "forward"


class FaultProxy:
    def __init__(self, upstream: tuple[str, int], policy: FaultPolicy | None = None, port: int = 0) -> None:
        self.upstream = upstream
        self.policy = policy or FaultPolicy()
        self.port = port
        self.stats: Counter[str] = Counter()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task] = set()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> FaultProxy:
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)  # gather() below looks the thread's loop up
            self._loop = loop

            async def serve() -> None:
                self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
                self.port = self._server.sockets[0].getsockname()[1]
                ready.set()

            loop.run_until_complete(serve())
            loop.run_forever()
            self._server.close()
            for task in list(self._tasks):
                task.cancel()
            loop.run_until_complete(asyncio.gather(*self._tasks, return_exceptions=True))
            loop.close()

        self._thread = threading.Thread(target=run, name="fault-proxy", daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._thread = None

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._tasks.add(task)
        self.stats["connections"] += 1
        try:
            broker_reader, broker_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            client_writer.close()
            self._tasks.discard(task)
            return
        pending: dict[int, int] = {}  # correlation id -> api key

        async def client_to_broker() -> None:
            while True:
                size_bytes = await client_reader.readexactly(4)
                (size,) = struct.unpack(">i", size_bytes)
                frame = await client_reader.readexactly(size)
                if size >= 8:
                    api_key, _version, correlation_id = struct.unpack_from(">hhi", frame)
                    pending[correlation_id] = api_key
                broker_writer.write(size_bytes + frame)
                await broker_writer.drain()

        async def broker_to_client() -> None:
            while True:
                size_bytes = await broker_reader.readexactly(4)
                (size,) = struct.unpack(">i", size_bytes)
                frame = await broker_reader.readexactly(size)
                (correlation_id,) = struct.unpack_from(">i", frame)
                api_key = pending.pop(correlation_id, None)
                if api_key in self.policy.api_keys:
                    action = self.policy.decide()
                    self.stats[action] += 1
                    if action == "drop_and_close":
                        return
                    if action == "drop":
                        continue
                    if action == "delay":
                        await asyncio.sleep(self.policy.delay_ms / 1000)
                client_writer.write(size_bytes + frame)
                await client_writer.drain()

        directions = [asyncio.create_task(client_to_broker()), asyncio.create_task(broker_to_client())]
        try:
            await asyncio.wait(directions, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            pass  # the proxy is stopping
        finally:
            for direction in directions:
                direction.cancel()
            await asyncio.gather(*directions, return_exceptions=True)
            client_writer.close()
            broker_writer.close()
            self._tasks.discard(task)

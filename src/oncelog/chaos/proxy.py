"""A Kafka-aware TCP proxy that injects faults between clients and a broker.

    with FaultProxy(upstream=("127.0.0.1", broker_port), policy=FaultPolicy(drop_response=0.05)) as proxy:
        # start the broker with advertised.listeners=PLAINTEXT://127.0.0.1:<proxy.port>
        # so clients that learn the broker's address from Metadata keep using the proxy

The proxy reads Kafka frames in both directions, so it knows which response answers
which request (by correlation id) and can act on some APIs only (`api_keys`). Each
targeted request first meets the request faults; if it reaches the broker, its response
meets the response faults. Each fault is a probability in `FaultPolicy`:

Request direction: the broker never sees the request.
- `drop_request_and_close`: not forwarded, and the client's connection is closed (the
  client retries on a new connection, not knowing whether the request was processed);
- `drop_request`: not forwarded, the connection kept (the client times the request out;
  later requests are still answered, which no TCP connection does: for timeout tests).

Duplicates in time: the broker sees one request twice (only APIs in
`duplicate_api_keys`). TCP never duplicates bytes within a connection; what Kafka sees
is the same request arriving again on another connection:
- `duplicate_request`: forwarded and answered as usual; once the answer has come and
  carries no error code, the same request bytes are sent again on a new connection
  `replay_delay_ms` later: a copy of a request the broker accepted, as a client's retry
  after a lost answer is. A request the broker refused is not copied (its retry may
  rightly succeed: that is not a duplicate), nor one that gets no answer (Produce acks=0).
- `late_request`: held back while the client's connection is closed at once; the client
  retries on a new connection, and the held original reaches the broker
  `replay_delay_ms` later, on a connection of its own, after the retry: a request still
  in flight when its connection died, arriving late (the case of Kafka's KIP-890).
The broker's answers to these copies reach no client; they are kept in `proxy.replays`.

Response direction: the broker processed the request.
- `drop_response_and_close`: the response is dropped and the connection closed (the
  client must retry without knowing whether the write happened);
- `drop_response`: dropped, connection kept (the client times the request out);
- `truncate_response`: a prefix of the response frame (at least one byte, never all) is
  sent, then the connection is closed: the client sees a frame cut part way;
- `delay_response`: held back `delay_ms` first (later responses wait behind it).

All decisions come from one seeded random generator (a policy without request faults
draws nothing for requests), and every fault is counted in `proxy.stats` when it takes
effect: `drop_request_and_close`, `drop_request`, `duplicate_request` (a copy sent),
`late_request` (an original held back), `drop_and_close`, `drop`, `truncate_response`,
`delay`; `forward` counts targeted responses passed on untouched. For the copies,
`replay_answered` and `replay_failed` (no connection or no answer) say what became of
them, `duplicate_skipped` counts requests not copied because the broker refused them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import struct
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Self

PRODUCE = 0
REPLAY_ANSWER_TIMEOUT_S = 10.0
_SIZE = struct.Struct(">i")
_REQUEST_HEADER = struct.Struct(">hhi")  # api key, api version, correlation id


@dataclass
class FaultPolicy:
    api_keys: frozenset[int] = frozenset({PRODUCE})
    # Request direction (probability per targeted request).
    drop_request_and_close: float = 0.0
    drop_request: float = 0.0  # connection kept open
    duplicate_request: float = 0.0  # only for duplicate_api_keys
    late_request: float = 0.0  # only for duplicate_api_keys
    duplicate_api_keys: frozenset[int] = frozenset({PRODUCE})
    replay_delay_ms: int = 100
    # Response direction (probability per targeted response).
    drop_response_and_close: float = 0.0
    drop_response: float = 0.0  # dropped, connection kept open
    truncate_response: float = 0.0
    delay_response: float = 0.0
    delay_ms: int = 0
    seed: int = 1
    enabled: bool = True
    _random: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)

    def decide_request(self, api_key: int) -> str:
        duplicable = api_key in self.duplicate_api_keys
        chances = (
            ("drop_request_and_close", self.drop_request_and_close),
            ("drop_request", self.drop_request),
            ("duplicate_request", self.duplicate_request if duplicable else 0.0),
            ("late_request", self.late_request if duplicable else 0.0),
        )
        return self._choose(chances)

    def decide_response(self) -> str:
        chances = (
            ("drop_and_close", self.drop_response_and_close),
            ("drop", self.drop_response),
            ("delay", self.delay_response),
            ("truncate_response", self.truncate_response),
        )
        return self._choose(chances)

    def cut_point(self, length: int) -> int:
        """Where to cut a frame of `length` bytes: at least one byte sent, never all."""
        return self._random.randint(1, length - 1)

    def _choose(self, chances: tuple[tuple[str, float], ...]) -> str:
        if not self.enabled or not any(chance for _, chance in chances):
            return "forward"
        roll = self._random.random()
        for action, chance in chances:
            if roll < chance:
                return action
            roll -= chance
        return "forward"


@dataclass(frozen=True, slots=True)
class Replay:
    """A request the broker received a second time, and its answer to that copy."""

    kind: str  # "duplicate_request" or "late_request"
    api_key: int
    api_version: int
    request: bytes  # the whole frame, size prefix included
    response: bytes  # likewise

    @property
    def correlation_id(self) -> int:
        return _REQUEST_HEADER.unpack_from(self.request, 4)[2]


@dataclass(slots=True)
class _Pending:
    api_key: int
    api_version: int
    copy: bytes | None  # the request frame, when it is to be duplicated after its answer


class FaultProxy:
    def __init__(self, upstream: tuple[str, int], policy: FaultPolicy | None = None, port: int = 0, *,
                 opaque: bool = False) -> None:
        """`opaque`: the traffic is TLS, so no frame can be read: bytes are passed on as
        they come and the policy is never asked (a secured cluster's chaos run)."""
        self.upstream = upstream
        self.opaque = opaque
        self.policy = policy or FaultPolicy()
        self.port = port
        self.stats: Counter[str] = Counter()
        self.replays: list[Replay] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task] = set()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> Self:
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)  # gather() below looks the thread's loop up
            self._loop = loop

            async def serve() -> None:
                # A plain callback that spawns the connection's task: given a coroutine
                # function, Python 3.11's start_server reads each task's exception, and
                # logs one cancelled at the stop as an error with a traceback.
                self._server = await asyncio.start_server(
                    lambda reader, writer: self._spawn(self._accept(reader, writer)), "127.0.0.1", self.port)
                self.port = self._server.sockets[0].getsockname()[1]
                ready.set()

            loop.run_until_complete(serve())
            loop.run_forever()
            assert self._server is not None  # serve() ran
            self._server.close()
            # Every task of the loop, again while cancelling them starts new ones (a
            # connection accepted just before the stop), so that none is destroyed
            # while pending.
            for _ in range(10):
                tasks = asyncio.all_tasks(loop)
                if not tasks:
                    break
                for task in tasks:
                    task.cancel()
                loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
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

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def _spawn(self, coroutine) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _replay(self, kind: str, pending: _Pending, request: bytes) -> None:
        """Send `request` to the broker again, on a connection of its own, after the delay."""
        await asyncio.sleep(self.policy.replay_delay_ms / 1000)
        try:
            reader, writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            self.stats["replay_failed"] += 1
            return
        try:
            if kind == "duplicate_request":
                self.stats[kind] += 1
            writer.write(request)
            await writer.drain()
            async with asyncio.timeout(REPLAY_ANSWER_TIMEOUT_S):
                response = await _read_frame(reader)
        except (OSError, asyncio.IncompleteReadError, TimeoutError):
            self.stats["replay_failed"] += 1
            return
        finally:
            writer.close()
        self.stats["replay_answered"] += 1
        self.replays.append(Replay(kind, pending.api_key, pending.api_version, request, response))

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self.stats["connections"] += 1
        try:
            broker_reader, broker_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            client_writer.close()
            return
        except asyncio.CancelledError:  # the proxy stops while the broker does not answer (paused, cut off)
            client_writer.close()
            raise
        pending: dict[int, _Pending] = {}  # correlation id -> targeted request

        async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while chunk := await reader.read(65536):
                writer.write(chunk)
                await writer.drain()

        async def client_to_broker() -> None:
            while True:
                request = await _read_frame(client_reader)
                if len(request) >= 4 + _REQUEST_HEADER.size:
                    api_key, version, correlation_id = _REQUEST_HEADER.unpack_from(request, 4)
                    if api_key in self.policy.api_keys:
                        action = self.policy.decide_request(api_key)
                        if action != "forward" and action != "duplicate_request":
                            self.stats[action] += 1
                        if action == "drop_request_and_close":
                            return
                        if action == "drop_request":
                            continue
                        if action == "late_request":
                            self._spawn(self._replay(action, _Pending(api_key, version, None), request))
                            return
                        copy = request if action == "duplicate_request" else None
                        pending[correlation_id] = _Pending(api_key, version, copy)
                broker_writer.write(request)
                await broker_writer.drain()

        async def broker_to_client() -> None:
            while True:
                response = await _read_frame(broker_reader)
                (correlation_id,) = _SIZE.unpack_from(response, 4)
                request = pending.pop(correlation_id, None)
                if request is not None:
                    if request.copy is not None:
                        if _answer_accepted(request.api_key, request.api_version, response):
                            self._spawn(self._replay("duplicate_request", request, request.copy))
                        else:
                            self.stats["duplicate_skipped"] += 1
                    action = self.policy.decide_response()
                    self.stats[action] += 1
                    if action == "drop_and_close":
                        return
                    if action == "drop":
                        continue
                    if action == "truncate_response":
                        client_writer.write(response[:self.policy.cut_point(len(response))])
                        await client_writer.drain()
                        return
                    if action == "delay":
                        await asyncio.sleep(self.policy.delay_ms / 1000)
                client_writer.write(response)
                await client_writer.drain()

        if self.opaque:
            directions = [asyncio.create_task(pipe(client_reader, broker_writer)),
                          asyncio.create_task(pipe(broker_reader, client_writer))]
        else:
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


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    """One whole frame, its size prefix included."""
    prefix = await reader.readexactly(4)
    (size,) = _SIZE.unpack(prefix)
    return prefix + await reader.readexactly(size)


def _answer_accepted(api_key: int, version: int, response: bytes) -> bool:
    """True when a response frame decodes and carries no error code anywhere (for
    Produce: every partition's batch was accepted)."""
    from kio.serial import entity_reader

    from oncelog.protocol import framing
    from oncelog.protocol.messages import is_flexible, response_class

    try:
        body = response[4:]
        position = 4  # after the correlation id
        if is_flexible(api_key, version) and api_key != framing.API_VERSIONS_KEY:
            position = framing.skip_tagged_fields(body, position)
        entity, _ = entity_reader(response_class(api_key, version))(body, position)
    except Exception:  # noqa: BLE001 - an answer we cannot read is not known to be an acceptance
        return False
    return not _carries_error(entity)


def _carries_error(value) -> bool:
    if isinstance(value, tuple):
        return any(_carries_error(item) for item in value)
    if not dataclasses.is_dataclass(value):
        return False
    for entry in dataclasses.fields(value):
        item = getattr(value, entry.name)
        if entry.name == "error_code" and item != 0:
            return True
        if _carries_error(item):
            return True
    return False

"""The network side: accept connections, read frames, dispatch, write responses in order.

Each connection is served by one task that handles one request at a time, as Kafka does
(it mutes a channel while a request is in flight), so responses leave in request order.
A frame that cannot be parsed, an unknown API key or an unsupported version (other than
ApiVersions) closes the connection, as Kafka does; other connections are unaffected.

Frames are read by an `asyncio.BufferedProtocol`: the socket receives a large frame
straight into a buffer of its own size, so a 1 MB Produce request reaches the handler
without being copied in Python (profiled: the stream reader's chunk joining and
`readexactly` copies were the largest CPU cost per produced MB). Small frames are
parsed out of a 64 KiB receive buffer (`oncelog.protocol.frame_receiver`, which a
broker's connections to its peers use too). While frames wait for the connection's
task, reading pauses at `_MAX_QUEUED_BYTES`, so a client that pipelines cannot make the
broker buffer without bound (TCP pushes back instead).

Listeners: one server socket per listener (`ListenerBinding`), TLS where its security
protocol says so (started on the accepted socket once it is admitted, so the limits above
apply before a handshake costs anything); each connection has a `ConnectionSession`
(oncelog.security.session)
that knows its principal and refuses what may not be sent before authentication. A SASL
client that chose SaslHandshake v0 sends bare tokens, answered here as bare tokens.

Limits, as Kafka's SocketServer applies them, each checked before it costs memory:
- `socket.request.max.bytes`: a larger length prefix closes the connection; before a
  SASL client has authenticated, `sasl.server.max.receive.size` (per listener, 512 KiB)
  does, as Kafka's SaslServerAuthenticator; a frame's buffer grows with the bytes that
  arrive, never to the size a prefix merely claims (`FrameReceiver`);
- `max.connections` and `max.connections.per.ip` (with `max.connections.per.ip.overrides`):
  counted when a connection is accepted, before its TLS handshake; one above either is
  closed at once;
- `connections.max.idle.ms`: a connection that has sent nothing and has no request in
  progress for that long is closed;
- `connections.authentication.timeout.ms` (oncelog only): the TLS handshake and the SASL
  exchange must be over that long after the connection was accepted, else it is closed;
- `queued.max.request.bytes` (`RequestMemoryPool`): the request bytes held at once over
  all connections, reserved when a frame's size is known (the moment its buffer is
  allocated) and released once its request has been handled. When the pool is used up,
  a connection that needs a new frame buffer stops reading until memory is released.
  Kafka's default (-1, or any value <= 0) is no bound.

Client quotas (oncelog.kernel.quotas, .throttling): a request of a client a quota applies
to is charged after its handler answers; over a quota, its response carries the throttle
time and the connection is muted for that long once the response is sent (KIP-219).
Without any quota configured, a request costs one attribute test.
"""

from __future__ import annotations

import asyncio
import collections
import ipaddress
import logging
import socket
import ssl
import struct
import time
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from oncelog.broker.dispatch import ApiHandler, BrokerServices, CloseConnection, RequestContext
from oncelog.broker.handlers import handler_table
from oncelog.broker.handlers.api_versions import unsupported_version_response
from oncelog.broker.heavy_work import HEAVY_REQUEST_BYTES, INLINE_PRODUCE_ELEMENTS, HeavyTurn, HeavyWork
from oncelog.broker.request_stats import RequestStats
from oncelog.broker.throttling import RequestCharge
from oncelog.config.broker import parse_ip_overrides
from oncelog.kernel.quotas import ClientQuotas
from oncelog.protocol import framing
from oncelog.protocol.error_counts import count_errors
from oncelog.protocol.frame_receiver import FrameReceiver, FrameSizeError
from oncelog.protocol.messages import (
    PRODUCE_KEY,
    ResponseBuilder,
    TooManyPartitions,
    decode_request,
    encode_response_frame,
    is_flexible,
)
from oncelog.protocol.write_flow import WriteFlow
from oncelog.security.listeners import ListenerSpec
from oncelog.security.session import ANONYMOUS, ConnectionSession, ListenerSecurity, SessionRefused

log = logging.getLogger("oncelog.server")

_WRITE_HIGH_WATER = 4 << 20
# Read-ahead while requests wait for the connection's task (Kafka reads none; a little
# keeps a pipelining client's next request in hand without unbounded buffering).
_MAX_QUEUED_BYTES = 4 << 20
_SIZE = struct.Struct(">i")
_LISTEN_BACKLOG = 100  # asyncio's default for create_server


class RequestMemoryPool:
    """`queued.max.request.bytes`: request bytes held in memory at once, over all connections.

    Kafka's semantics (SimpleMemoryPool, non-strict, as its SocketServer uses it): a
    capacity <= 0 means no bound; otherwise a reservation succeeds while the total is below
    the capacity, so the last frame admitted may take the total past it by less than
    socket.request.max.bytes, and the largest frame is admitted once the pool drains. A
    refused connection waits, reading paused; released memory resumes the waiting
    connections in the order they were refused, for as long as there is room.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self.peak = 0  # the largest `used` seen, for tests and diagnostics
        self.refusals = 0
        self._waiting: dict[_Connection, None] = {}  # insertion-ordered set

    @property
    def bounded(self) -> bool:
        return self.capacity > 0

    @property
    def waiting(self) -> int:
        """Connections that stopped reading until memory is released."""
        return len(self._waiting)

    def try_reserve(self, size: int, connection: _Connection) -> bool:
        if self.bounded and self.used >= self.capacity and size > 0:
            self.refusals += 1
            self._waiting[connection] = None
            return False
        self.used += size
        self.peak = max(self.peak, self.used)
        return True

    def release(self, size: int) -> None:
        self.used -= size
        if self.used < 0:
            raise AssertionError(f"request memory released twice: {self.used} bytes in use")
        while self._waiting and self.used < self.capacity:
            connection = next(iter(self._waiting))
            del self._waiting[connection]
            connection.memory_available()  # may reserve again, or wait again

    def forget(self, connection: _Connection) -> None:
        self._waiting.pop(connection, None)


@dataclass(frozen=True)
class ListenerBinding:
    """A listener as the server runs it: where, TLS, and how clients authenticate."""

    spec: ListenerSpec
    ssl_context: ssl.SSLContext | None
    security: ListenerSecurity


class _Connection(asyncio.BufferedProtocol):
    """One client socket: whole request frames in, response bytes out.

    Frames are bytearrays (writable), so handlers may hand slices of them to the log,
    which rewrites batch headers in place. A frame is never reused after delivery.

    Life: accepted and admitted by the server's connection limits (`KafkaServer._accept`)
    -> its TLS handshake where the listener has TLS -> `connection_made`: a session, and
    the task that serves requests. One timer watches the authentication deadline, then
    idleness (`_check_deadlines`).
    """

    def __init__(self, server: KafkaServer, listener: ListenerBinding, client_host: str, accepted_at: float) -> None:
        self._server = server
        self.listener = listener
        self.session: ConnectionSession | None = None  # once connected (after the TLS handshake)
        self._memory = server.request_memory
        self.transport: asyncio.Transport  # set by connection_made, the first callback
        self.client_host = client_host
        self._receiver = FrameReceiver(self._deliver, reserve=self._reserve, what="request")
        self._frames: collections.deque[bytearray] = collections.deque()
        self._queued_bytes = 0  # frames delivered, not yet taken by the task
        self._reserved_bytes = 0  # held in the request memory pool by this connection
        self._waiting_for_memory = False
        self._closed = False  # no more frames: the task ended or the connection was refused
        self._reading_paused = False
        self._frame_waiter: asyncio.Future | None = None
        self._failure: BaseException | None = None  # set once no more frames will come
        self._eof = False
        self._write_flow = WriteFlow()
        self.muted_until = 0.0  # a client over its quota: no request is taken before this (loop time)
        self.admitted = False  # counted in the server's connection limits (released once, by _forget)
        self._accepted_at = accepted_at
        self.last_active = accepted_at  # loop time of the last bytes received or the last answer sent
        self.busy = False  # a request is being handled: not idle, whatever the clock says
        self._deadline_timer: asyncio.TimerHandle | None = None
        self.limit_frames()

    # -- asyncio protocol callbacks --------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.transport.set_write_buffer_limits(high=_WRITE_HIGH_WATER)
        principal = self._certificate_principal()
        if principal is None:
            log.warning("closing connection from %s on %s: no ssl.principal.mapping.rules rule matches its "
                        "certificate's subject", self.client_host, self.listener.spec.name)
            self._refuse()
            return
        self.session = ConnectionSession(self.listener.security, self.client_host, principal)
        self.limit_frames()
        self._schedule_deadline_check(self.authentication_deadline)
        self._server._connection_made(self)

    def _refuse(self) -> None:
        """The connection ends before being served."""
        self.release_all()
        self._server._forget(self)
        if not self.transport.is_closing():
            self.transport.close()

    def limit_frames(self) -> None:
        """The largest request frame: `sasl.server.max.receive.size` until a SASL client
        has authenticated, `socket.request.max.bytes` after (and on other listeners).
        Called again by the serving task once a session is authenticated."""
        security = self.listener.security
        if security.protocol.sasl and (self.session is None or not self.session.identified):
            self._receiver.set_limit(min(security.max_receive_size, self._server.max_request_bytes),
                                     "sasl.server.max.receive.size before authentication")
        else:
            self._receiver.set_limit(self._server.max_request_bytes, "socket.request.max.bytes")

    # -- deadlines: authentication, then idleness ----------------------------------------

    @property
    def authentication_deadline(self) -> float:
        return self._accepted_at + self.listener.security.authentication_timeout_ms / 1000

    def _schedule_deadline_check(self, when: float) -> None:
        self._deadline_timer = asyncio.get_running_loop().call_at(when, self._check_deadlines)

    def _check_deadlines(self) -> None:
        self._deadline_timer = None
        if self._closed or self.transport.is_closing():
            return
        now = asyncio.get_running_loop().time()
        session = self.session
        if session is None or not session.identified:
            if now >= self.authentication_deadline:
                self._close_for("not authenticated within connections.authentication.timeout.ms="
                                f"{self.listener.security.authentication_timeout_ms}")
            else:
                self._schedule_deadline_check(self.authentication_deadline)
            return
        idle_ms = self._server.max_idle_ms
        if idle_ms < 0:
            return  # no idle limit: nothing more to watch
        idle_s = idle_ms / 1000
        if self.busy or self._frames:
            self._schedule_deadline_check(now + idle_s)
        elif now >= self.last_active + idle_s:
            self._close_for(f"idle for connections.max.idle.ms={idle_ms}")
        else:
            self._schedule_deadline_check(self.last_active + idle_s)

    def _close_for(self, reason: str) -> None:
        log.info("closing connection from %s on %s: %s", self.client_host, self.listener.spec.name, reason)
        self.transport.abort()  # connection_lost follows: the serving task cleans up

    def _certificate_principal(self) -> str | None:
        """SSL listeners: the mapped subject of the client's certificate (ANONYMOUS without
        one); None when no mapping rule matches it."""
        ssl_object = self.transport.get_extra_info("ssl_object")
        principal_of = self.listener.security.principal_of_certificate
        if ssl_object is None or principal_of is None:
            return ANONYMOUS
        der = ssl_object.getpeercert(binary_form=True)
        if der is None:
            return ANONYMOUS
        return principal_of(der)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._receiver.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        if self._closed:
            return  # bytes after the end are dropped, as the socket is closing
        self.last_active = asyncio.get_running_loop().time()
        try:
            self._receiver.received(nbytes)
        except FrameSizeError as error:
            self._fail(CloseConnection(str(error)))

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        # Half-closed: answer what was sent, then the task closes. TLS has no half-close:
        # asyncio closes an SSL transport at EOF whatever this returns.
        return self.listener.ssl_context is None

    def connection_lost(self, exc: Exception | None) -> None:
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
            self._deadline_timer = None
        self._eof = True
        if exc is not None and self._failure is None:
            self._failure = exc
        self._wake()
        self._write_flow.fail(exc or ConnectionResetError("connection lost"))

    def pause_writing(self) -> None:
        self._write_flow.pause()

    def resume_writing(self) -> None:
        self._write_flow.resume()

    # -- framing ---------------------------------------------------------------------

    def _deliver(self, frame: bytearray) -> None:
        self._frames.append(frame)
        self._queued_bytes += len(frame)
        self._update_reading()
        self._wake()

    def _fail(self, reason: BaseException) -> None:
        self._failure = reason
        self._update_reading()
        self._wake()

    # -- request memory --------------------------------------------------------------

    def _reserve(self, size: int) -> bool:
        """Reserve a new frame buffer in the pool; when refused, stop reading until
        `memory_available`. Once refused, no frame is taken before that."""
        if self._waiting_for_memory:
            return False
        if self._memory.try_reserve(size, self):
            self._reserved_bytes += size
            return True
        self._waiting_for_memory = True
        self._update_reading()
        return False

    def memory_available(self) -> None:
        """Called by the pool: parse what was already received, then read on."""
        self._waiting_for_memory = False
        if self._closed:
            return
        try:
            self._receiver.parse()
        except FrameSizeError as error:
            self._fail(CloseConnection(str(error)))
        self._update_reading()

    def frame_done(self, frame: bytearray) -> None:
        """The request in `frame` has been handled: its bytes leave the pool."""
        if not self._closed:
            self._reserved_bytes -= len(frame)
            self._memory.release(len(frame))

    def release_all(self) -> None:
        """The connection is over: return everything it holds (queued frames, a
        partly received one, the one in hand) to the pool."""
        self._closed = True
        self._memory.forget(self)
        reserved, self._reserved_bytes = self._reserved_bytes, 0
        self._frames.clear()
        self._receiver.drop_partial()
        if reserved:
            self._memory.release(reserved)

    def _update_reading(self) -> None:
        """Read while nothing stops it: a framing failure, the pool, or the read-ahead."""
        pause = (self._failure is not None or self._waiting_for_memory
                 or self._queued_bytes >= _MAX_QUEUED_BYTES)
        if pause and not self._reading_paused:
            self._reading_paused = True
            self.transport.pause_reading()
        elif not pause and self._reading_paused and not self._closed:
            self._reading_paused = False
            self.transport.resume_reading()

    def _wake(self) -> None:
        if self._frame_waiter is not None and not self._frame_waiter.done():
            self._frame_waiter.set_result(None)

    # -- used by the connection's task -----------------------------------------------

    async def next_frame(self) -> bytearray | None:
        """The next whole request frame; None at a clean end of stream.

        Frames received before a framing error are still answered (in order); a
        broken connection ends at once, as there is no one left to answer.
        """
        while True:
            if self._failure is not None and not isinstance(self._failure, CloseConnection):
                raise self._failure
            if self._frames:
                break
            if self._failure is not None:
                raise self._failure
            if self._eof:
                return None
            self._frame_waiter = asyncio.get_running_loop().create_future()
            try:
                await self._frame_waiter
            finally:
                self._frame_waiter = None
        frame = self._frames.popleft()
        self._queued_bytes -= len(frame)
        self._update_reading()
        return frame

    def mute(self, throttle_ms: int) -> None:
        """Take no request for `throttle_ms` from now (a quota's throttle time)."""
        self.muted_until = asyncio.get_running_loop().time() + throttle_ms / 1000

    async def wait_unmuted(self) -> None:
        delay, self.muted_until = self.muted_until - asyncio.get_running_loop().time(), 0.0
        if delay > 0:
            await asyncio.sleep(delay)

    async def write(self, response: list) -> None:
        """Send one response (its buffers, in order: one writev, no joining copy)."""
        if self.transport.is_closing():
            # The client left while its request was being handled (uvloop raises
            # RuntimeError for a write to a closed transport): nobody to answer.
            raise ConnectionResetError("the client closed the connection before its answer")
        self.transport.writelines(response)
        if self._write_flow.paused:
            await self._write_flow.drained(self._closed_for_writing)

    def _closed_for_writing(self) -> ConnectionResetError | None:
        return ConnectionResetError("connection closed while writing") if self.transport.is_closing() else None


class KafkaServer:
    def __init__(self, broker: BrokerServices) -> None:
        self.broker = broker
        self.handlers = handler_table(broker.config["transaction.version"], broker.config["share.version"])
        # ApiVersions' FinalizedFeaturesEpoch (Kafka: the metadata offset of the features).
        # The level can only change across a restart, so the start time orders them.
        self.finalized_features_epoch = time.time_ns() // 1_000_000
        self.max_request_bytes = broker.config["socket.request.max.bytes"]
        self.max_idle_ms = broker.config["connections.max.idle.ms"]
        # max.connections and the per-IP limits are dynamic: read per connection.
        self._config = broker.config
        self.request_memory = RequestMemoryPool(broker.config["queued.max.request.bytes"])
        self._listening: list[socket.socket] = []
        self._accepting: list[asyncio.Task] = []
        self._admitted: set[_Connection] = set()  # every connection counted in the limits
        self._per_ip: collections.Counter[str] = collections.Counter()
        self._refusals = _RefusalLog()
        self._connections: set[asyncio.Task] = set()  # the serving tasks
        self._opening: set[asyncio.Task] = set()  # admitted, in their TLS handshake
        self.request_stats = RequestStats()  # per API, for /metrics
        self.heavy = HeavyWork()  # large requests' decoding and encoding, off the loop
        # Client quotas: replaced by the broker's quota store at start-up and on every change.
        self.quotas = ClientQuotas(broker.config["quota.window.num"], broker.config["quota.window.size.seconds"])

    async def start(self, listeners: list[ListenerBinding]) -> dict[str, tuple[str, int]]:
        """Listen on every listener; the bound (host, port) of each, by name."""
        loop = asyncio.get_running_loop()
        bound: dict[str, tuple[str, int]] = {}
        for binding in listeners:
            sockets = await _listening_sockets(binding.spec.bind.host or None, binding.spec.bind.port)
            self._listening.extend(sockets)
            self._accepting.extend(loop.create_task(self._accept(sock, binding)) for sock in sockets)
            address = sockets[0].getsockname()
            bound[binding.spec.name] = (address[0], address[1])
        return bound

    async def close(self) -> None:
        for task in self._accepting:
            task.cancel()
        await asyncio.gather(*self._accepting, return_exceptions=True)
        for sock in self._listening:
            sock.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        if self._opening:  # still in their TLS handshake
            for task in list(self._opening):
                task.cancel()
            await asyncio.gather(*self._opening, return_exceptions=True)
        self.heavy.close()

    async def _accept(self, listening: socket.socket, binding: ListenerBinding) -> None:
        """Accept connections on one listening socket, each counted against the limits
        before anything else is done for it (its TLS handshake included), as Kafka's
        Acceptor counts them."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, address = await loop.sock_accept(listening)
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                continue
            except OSError as error:  # out of descriptors or memory: back off, as asyncio's servers do
                log.warning("accepting on %s failed (%s); trying again in 1 s", binding.spec.name, error)
                await asyncio.sleep(1)
                continue
            connection = _Connection(self, binding, str(address[0]), loop.time())
            if not self._admit(connection):
                sock.close()
                continue
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            task = loop.create_task(self._open(sock, connection))
            self._opening.add(task)
            task.add_done_callback(self._opening.discard)

    async def _open(self, sock: socket.socket, connection: _Connection) -> None:
        """Hand an admitted socket to the loop: its TLS handshake first, within the
        connection's authentication deadline; `connection_made` follows."""
        loop = asyncio.get_running_loop()
        context = connection.listener.ssl_context
        try:
            if context is None:
                await loop.connect_accepted_socket(lambda: connection, sock)
            else:
                timeout = max(0.001, connection.authentication_deadline - loop.time())
                await loop.connect_accepted_socket(lambda: connection, sock, ssl=context,
                                                   ssl_handshake_timeout=timeout)
        except (OSError, ssl.SSLError, TimeoutError) as error:  # the transport is closed already
            log.info("closing connection from %s on %s: TLS handshake failed (%s)", connection.client_host,
                     connection.listener.spec.name, error or type(error).__name__)
            connection.release_all()
            self._forget(connection)
        except BaseException:
            connection.release_all()
            self._forget(connection)
            raise

    def _admit(self, connection: _Connection) -> bool:
        """Count a connection just accepted, unless it is one too many: `max.connections`
        over all listeners, `max.connections.per.ip` (or its override) from its address."""
        max_connections = self._config["max.connections"]
        host = connection.client_host
        if len(self._admitted) >= max_connections:
            self._refusals.note(host, f"max.connections={max_connections} reached")
            return False
        limit = per_ip_limits(self._config["max.connections.per.ip.overrides"]).get(
            host, self._config["max.connections.per.ip"])
        if self._per_ip[host] >= limit:
            overridden = "" if limit == self._config["max.connections.per.ip"] else " (its override)"
            self._refusals.note(host, f"max.connections.per.ip{overridden}={limit} reached")
            return False
        self._per_ip[host] += 1
        self._admitted.add(connection)
        connection.admitted = True
        return True

    def _forget(self, connection: _Connection) -> None:
        """The connection is over: it leaves the counts (once)."""
        if not connection.admitted:
            return
        connection.admitted = False
        self._admitted.discard(connection)
        host = connection.client_host
        self._per_ip[host] -= 1
        if self._per_ip[host] <= 0:
            del self._per_ip[host]

    def connections_from(self, host: str) -> int:
        return self._per_ip.get(host, 0)

    @property
    def connection_count(self) -> int:
        """Connections accepted and counted, serving or still in their TLS handshake."""
        return len(self._admitted)

    def _connection_made(self, connection: _Connection) -> None:
        task = asyncio.get_running_loop().create_task(self._serve_connection(connection))
        self._connections.add(task)

    async def _serve_connection(self, connection: _Connection) -> None:
        task = asyncio.current_task()
        client_host = connection.client_host
        session = connection.session
        assert session is not None  # set when the connection was made
        try:
            while True:
                frame = await connection.next_frame()
                if frame is None:
                    return  # the client closed its side
                response: list | None
                connection.busy = True
                identified = session.identified
                try:
                    if session.expects_raw_tokens:
                        response = self._raw_token(session, frame)
                    else:
                        response = await self._handle(frame, session, connection)
                finally:
                    connection.frame_done(frame)
                if session.identified != identified:
                    connection.limit_frames()  # authenticated: socket.request.max.bytes from now on
                if session.failed:  # a failed authentication: answer late, then close (a guesser waits)
                    await asyncio.sleep(session.listener.failed_authentication_delay_ms / 1000)
                if response is not None:
                    await connection.write(response)
                connection.busy = False
                connection.last_active = asyncio.get_running_loop().time()
                if connection.muted_until:  # over a quota: the answer went out, the next request waits
                    await connection.wait_unmuted()
                if session.failed:
                    return
        except ConnectionError:
            pass  # the client went away
        except (CloseConnection, SessionRefused) as reason:
            log.info("closing connection from %s on %s: %s", client_host, connection.listener.spec.name, reason)
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("closing connection from %s after an unexpected error", client_host)
        finally:
            self._connections.discard(task)
            connection.transport.close()
            connection.release_all()
            session.connection_closed()  # e.g. its share sessions end, their records go back
            self._forget(connection)

    @staticmethod
    def _raw_token(session: ConnectionSession, frame: bytearray) -> list:
        """SaslHandshake v0's exchange: a bare token in, a bare token (length-prefixed) out."""
        outcome = session.authenticate(bytes(frame))
        return [] if session.failed else [_SIZE.pack(len(outcome.token)) + outcome.token]

    async def _handle(self, frame: bytearray, session: ConnectionSession, connection: _Connection) -> list | None:
        """The response frame's buffers for one request frame, or None for no response."""
        try:
            api_key, version, correlation_id, client_id, position = framing.read_request_header(frame)
        except framing.MalformedRequestError as error:
            raise CloseConnection(str(error)) from None
        handler = self.handlers.get(api_key)
        if handler is None:
            raise CloseConnection(f"unknown API key {api_key}")
        session.check(api_key, handler.name)
        if not handler.min_version <= version <= handler.max_version:
            if api_key == framing.API_VERSIONS_KEY:
                return [framing.response_frame(
                    correlation_id, unsupported_version_response(self.handlers), flexible_header=False
                )]
            raise CloseConnection(
                f"{handler.name} v{version} is not supported "
                f"(v{handler.min_version}-v{handler.max_version})"
            )
        flexible = is_flexible(api_key, version)
        heavy = False
        try:
            if flexible:
                position = framing.skip_tagged_fields(frame, position)
            if len(frame) < HEAVY_REQUEST_BYTES:
                request = decode_request(api_key, version, frame, position)
            elif api_key == PRODUCE_KEY:  # a large Produce of a few partitions is cheap to decode here
                request = decode_request(api_key, version, frame, position, max_partitions=INLINE_PRODUCE_ELEMENTS)
            else:
                heavy = True
        except TooManyPartitions:
            heavy = True
        except Exception as error:  # noqa: BLE001 (kio raises several types for malformed bodies)
            raise CloseConnection(f"malformed {handler.name} v{version} request: {error}") from None
        if not heavy:
            return await self._serve(handler, version, request, frame, correlation_id, client_id, flexible,
                                     session, connection)
        async with self.heavy.turn() as turn:
            try:
                request, worker_seconds = await self.heavy.decode(api_key, version, frame, position)
            except Exception as error:  # noqa: BLE001 (the readers raise several types for malformed bodies)
                raise CloseConnection(f"malformed {handler.name} v{version} request: {error}") from None
            turn.dispose(request)  # freed by the worker thread once the turn is over
            return await self._serve(handler, version, request, frame, correlation_id, client_id, flexible,
                                     session, connection, turn=turn, worker_seconds=worker_seconds)

    async def _serve(self, handler: ApiHandler, version: int, request: Any, frame: bytearray, correlation_id: int,
                     client_id: str | None, flexible: bool, session: ConnectionSession, connection: _Connection,
                     *, turn: HeavyTurn | None = None, worker_seconds: float = 0.0) -> list | None:
        """Handle a decoded request; its response frame's buffers. `turn`: a heavy request's,
        decoded on the worker thread (in `worker_seconds`), which encodes its response too."""
        api_key = handler.api_key
        context = RequestContext(
            broker=self.broker,
            api_key=api_key,
            api_version=version,
            correlation_id=correlation_id,
            client_id=client_id,
            client_host=session.client_host,
            response=ResponseBuilder(api_key, version),
            session=session,
            handlers=self.handlers,
            finalized_features_epoch=self.finalized_features_epoch,
        )
        quota = self.quotas.of(session.principal, client_id) if self.quotas.active else None
        charge = None if quota is None else RequestCharge(quota, api_key, request, len(frame),
                                                                    self.broker.fetch_sessions)
        stats = self.request_stats.started(api_key)
        started = time.perf_counter()
        try:
            if charge is None:
                response = await handler.handle(context, request)
            else:
                response = await charge.timed(handler.handle(context, charge.request))
        finally:
            self.request_stats.finished(stats, time.perf_counter() - started)
        if response is None:  # e.g. Produce with acks=0
            if charge is not None and (throttled := charge.settle(None, None)) is not None:
                connection.mute(throttled[0])
            return None
        flexible_header = flexible and api_key != framing.API_VERSIONS_KEY
        if turn is None:
            count_errors(response, stats.errors)
            encoded = encode_response_frame(correlation_id, response, flexible_header=flexible_header)
        else:
            (encoded, errors), seconds = await self.heavy.encode(correlation_id, response,
                                                                 flexible_header=flexible_header)
            worker_seconds += seconds
            for code, count in errors.items():
                stats.errors[code] = stats.errors.get(code, 0) + count
            turn.dispose(response)  # freed by the worker thread once the turn is over
        if charge is None:
            return encoded
        charge.add_request_time(worker_seconds)
        throttled = charge.settle(response, encoded)
        if throttled is None:
            return encoded
        throttle_ms, response = throttled
        connection.mute(throttle_ms)
        if turn is None:
            return encode_response_frame(correlation_id, response, flexible_header=flexible_header)
        (encoded, _errors), _seconds = await self.heavy.encode(correlation_id, response,
                                                               flexible_header=flexible_header)
        turn.dispose(response)
        return encoded

class _RefusalLog:
    """One INFO line per client address and reason every `INTERVAL_S` for connections
    refused by a limit, with how many more were refused since: a client opening thousands
    of connections cannot flood the log (Kafka logs each)."""

    INTERVAL_S = 10.0
    _MAX_ADDRESSES = 10_000  # past it the oldest entries go (every address is an entry)

    def __init__(self) -> None:
        self._last: dict[tuple[str, str], tuple[float, int]] = {}  # (host, reason) -> (logged at, refused since)

    def note(self, host: str, reason: str) -> None:
        now = time.monotonic()
        key = (host, reason)
        logged_at, since = self._last.get(key, (-self.INTERVAL_S, 0))
        if now - logged_at < self.INTERVAL_S:
            self._last[key] = (logged_at, since + 1)
            return
        more = f" ({since} more refused since the last line)" if since else ""
        log.info("refusing connection from %s: %s%s", host, reason, more)
        self._last.pop(key, None)
        self._last[key] = (now, 0)
        while len(self._last) > self._MAX_ADDRESSES:
            del self._last[next(iter(self._last))]


@cache
def per_ip_limits(overrides: str) -> Mapping[str, int]:
    """`max.connections.per.ip.overrides` (host:count,...) by IP address. A host name is
    resolved once per value of the setting (as Kafka resolves it when the config is
    read); one that does not resolve is left out, with a warning. Checked at start-up by
    the config (`parse_ip_overrides`)."""
    limits: dict[str, int] = {}
    for host, count in parse_ip_overrides(overrides).items():
        try:
            ipaddress.ip_address(host)
            addresses = [host]
        except ValueError:
            try:
                infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
                addresses = sorted({str(info[4][0]) for info in infos})
            except OSError as error:
                log.warning("max.connections.per.ip.overrides: %s does not resolve (%s); its limit is not applied",
                            host, error)
                continue
        for address in addresses:
            limits[str(address)] = count
    return limits


async def _listening_sockets(host: str | None, port: int) -> list[socket.socket]:
    """Bound, listening, non-blocking sockets for host:port, as `loop.create_server`
    makes them (every address the host resolves to; None: every interface)."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, family=socket.AF_UNSPEC, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _name, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
            except OSError as error:
                raise OSError(error.errno, f"error while attempting to bind on address {address!r}: "
                                           f"{(error.strerror or str(error)).lower()}") from None
            sock.listen(_LISTEN_BACKLOG)
            sock.setblocking(False)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets

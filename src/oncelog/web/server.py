"""The HTTP listener's transport (`http.listener`): connections, TLS, the Host check,
request limits, and the threads that answer. What a request is answered with is the
application's (oncelog.web.http.ConsoleApp): a function of `HttpRequest` that returns an
`HttpResponse`, called on a worker thread.

h11 (the sans-I/O HTTP/1.1 library of httpx, uvicorn and hypercorn) parses every request
and writes every response, one `h11.Connection` per connection; this module feeds it the
bytes read, and keeps a connection open when h11 says it may (`start_next_cycle`: after
an HTTP/1.1 request without `Connection: close`; h11 closes HTTP/1.0 connections, even
with `Connection: keep-alive`). A request h11 finds malformed (a bad request line or
header line, conflicting Content-Lengths, a second Host, an HTTP/1.1 request without one)
is answered 400, and the connection closes: nothing sent after it is read. Deviation:
stricter than h11, which takes RFC 9112's leniencies, because a proxy in front that reads
them otherwise could be smuggled a request past: a line of the head ending in a bare LF,
a header folded across lines (obs-fold), both a Content-Length and a Transfer-Encoding
(h11 lets Transfer-Encoding win and keeps the connection) and an HTTP version other than
1.0 and 1.1 are each answered 400.

As Kafka's SocketServer splits network threads from request handler threads, every
connection is read and written by one asyncio loop of the listener's own (its thread,
`oncelog-http`; never the broker's loop), and only a complete request reaches one of
`http.worker.threads` threads. A connection costs no thread while it waits, so a slow or
silent client pins nothing:

- The TLS handshake (`http.ssl.enabled`) and each request's head and body must arrive
  within `http.request.timeout.ms` of the accept, or of the previous answer on a kept-alive
  connection; else the connection is closed (after a 408 when a request had begun).
- A request head is at most `MAX_HEAD_BYTES` and `MAX_HEADERS` headers (431), a body at
  most `MAX_BODY_BYTES` with a Content-Length (413: a larger Content-Length before the
  body is read, and the body is counted as it arrives, so a larger one is never held).
  Chunked bodies get 501: no client of this listener sends one (browsers and Prometheus
  send a Content-Length), and h11 ends a chunked body's trailers at a bare LF, which a
  proxy may read otherwise.
- At most `http.max.connections` are open at once. A connection past it closes the open
  one that has waited longest for its next request (never one being answered), or is
  itself closed when every open connection is being answered.
- A complete request waits on the loop, not on a thread, for a free worker, for at most
  the request timeout (then 503).
- The Host header must be one of the listener's own names (`AllowedHosts`), else 421
  Misdirected Request before the application sees it: a page of another site that
  rebinds its DNS name to this address gets nothing.
- An answer the application gives a `delay_s` (a failed sign-in) is held that long on the
  loop before it is sent: the delay costs no thread.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import ssl
import threading
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http import HTTPStatus

import h11

log = logging.getLogger("oncelog.web")

MAX_HEAD_BYTES = 16 * 1024  # request line and headers
MAX_HEADERS = 100
MAX_BODY_BYTES = 64 * 1024
_READ_BYTES = 8192
_WILDCARD_BINDS = frozenset({"", "0.0.0.0", "::"})


@dataclass(frozen=True, slots=True)
class HttpRequest:
    method: str
    path: str  # percent-decoded, without the query
    query: str
    headers: Mapping[str, str]  # lower-case names; a repeated header's values joined with ", "
    body: bytes
    client_host: str  # the peer's address
    version: str = "HTTP/1.1"

    def header(self, name: str) -> str:
        return self.headers.get(name, "")


@dataclass(frozen=True, slots=True)
class HttpResponse:
    status: int
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: tuple[tuple[str, str], ...] = ()
    delay_s: float = 0.0  # held this long on the listener's loop before it is sent


HttpApp = Callable[[HttpRequest], HttpResponse]


@dataclass(frozen=True, slots=True)
class HttpLimits:
    max_connections: int = 256  # http.max.connections
    worker_threads: int = 4  # http.worker.threads
    request_timeout_s: float = 10.0  # http.request.timeout.ms


@dataclass(frozen=True, slots=True)
class AllowedHosts:
    """The names a request's Host header may give: the listener's own (`listener_names`),
    `localhost` on a connection to a loopback address, and the IP address the connection
    came in on. `any_host`: no check (`http.allowed.hosts=*`, behind a proxy that checks)."""

    names: frozenset[str]
    any_host: bool = False

    def allows(self, host_header: str, local_address: str) -> bool:
        name = _host_name(host_header)
        if name is None:
            return False
        if self.any_host or name in self.names:
            return True
        local = _ip(local_address)
        if local is None:
            return False
        if name == "localhost":
            return local.is_loopback
        return _ip(name) == local


def listener_names(bind_host: str, advertised_hosts: Iterable[str], configured: str) -> AllowedHosts:
    """The HTTP listener's own names: the host it is bound to (unless every interface),
    the hosts the broker's listeners advertise, this machine's host name, and the names in
    `http.allowed.hosts` (`configured`, comma-separated; `*` for any)."""
    extra = {name.strip().lower().rstrip(".") for name in configured.split(",") if name.strip()}
    names = {host.lower().rstrip(".") for host in advertised_hosts if host}
    names.add(socket.gethostname().lower())
    if bind_host not in _WILDCARD_BINDS:
        names.add(bind_host.lower())
    return AllowedHosts(frozenset((names | extra) - {"*"}), any_host="*" in extra)


def _host_name(header: str) -> str | None:
    """The name of a Host header's value, without its port, lower-case; None when malformed."""
    value = header.strip().lower()
    if value.startswith("["):  # an IPv6 literal
        literal, bracket, rest = value[1:].partition("]")
        if not bracket or (rest and not (rest.startswith(":") and rest[1:].isdigit())):
            return None
        return literal
    name, colon, port = value.rpartition(":")
    if not colon:
        name = value
    elif not port.isdigit():
        return None
    name = name.rstrip(".")
    return name or None


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        address = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


class _RequestError(Exception):
    """A request that cannot be read: answered with `status`, then the connection closes."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


# What a client is told when h11 refuses its request (h11's own message, which can quote
# the request's bytes, is logged, never sent back).
_REFUSALS = {
    400: "malformed request",
    431: f"the request line and headers exceed {MAX_HEAD_BYTES} bytes",
    501: "request bodies must have a Content-Length (no transfer codings)",
}


def _parser() -> h11.Connection:
    # h11 refuses (431) a head still incomplete past this many bytes; _check_head bounds a
    # complete one, which can arrive in the same read as more.
    return h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)


@dataclass(eq=False)
class _Connection:
    writer: asyncio.StreamWriter
    client_host: str
    local_address: str
    parser: h11.Connection = field(default_factory=_parser)
    method: bytes = b""  # the method of the request being answered (a HEAD's answer has no body)

    def abort(self) -> None:
        self.writer.transport.abort()


class HttpListener:
    """The server on its own thread and loop; `address` and `scheme` once started."""

    def __init__(self, host: str, port: int, app: HttpApp, hosts: AllowedHosts, limits: HttpLimits | None = None,
                 tls: ssl.SSLContext | None = None) -> None:
        self._host, self._port = host, port
        self._app = app
        self._hosts = hosts
        self._limits = limits or HttpLimits()
        self._tls = tls
        self.scheme = "https" if tls is not None else "http"
        self.address: tuple[str, int] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._workers = ThreadPoolExecutor(self._limits.worker_threads, thread_name_prefix="oncelog-http-worker")
        self._free_workers: asyncio.Semaphore | None = None
        # Open connections; those waiting for a request, oldest first (dicts keep insertion order).
        self._open: set[_Connection] = set()
        self._waiting: dict[_Connection, None] = {}

    def start(self) -> tuple[str, int]:
        started = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self._listen())
            except BaseException as error:  # noqa: BLE001 (reported to the starting thread)
                failure.append(error)
                started.set()
                loop.close()
                return
            started.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(self._close_all())
                loop.close()

        self._thread = threading.Thread(target=run, name="oncelog-http", daemon=True)
        self._thread.start()
        started.wait()
        if failure:
            raise failure[0]
        assert self.address is not None
        log.info("metrics at %s://%s:%d/metrics, the console at %s://%s:%d/", self.scheme, *self.address,
                 self.scheme, *self.address)
        return self.address

    async def _listen(self) -> None:
        self._free_workers = asyncio.Semaphore(self._limits.worker_threads)
        self._server = await asyncio.start_server(self._serve, self._host, self._port, reuse_address=True)
        port = self._server.sockets[0].getsockname()[1]
        self.address = (self._host, port)

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        self._loop = self._thread = None
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        self._workers.shutdown(wait=False, cancel_futures=True)

    async def _close_all(self) -> None:
        """Every connection closed: those waiting end at once, those being answered when
        their worker returns (or are cancelled after a second)."""
        if self._server is not None:
            self._server.close()
        for connection in list(self._open):
            connection.abort()
        tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=1.0)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    # -- one connection ------------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        local = writer.get_extra_info("sockname")
        connection = _Connection(writer, peer[0] if peer else "?", local[0] if local else "")
        if not self._admit(connection):
            writer.transport.abort()
            return
        loop = asyncio.get_running_loop()
        timeout_s = self._limits.request_timeout_s
        deadline = loop.time() + timeout_s  # for the handshake and the first request together
        try:
            if self._tls is not None:
                async with asyncio.timeout_at(deadline):
                    await writer.start_tls(self._tls)
            while True:
                try:
                    async with asyncio.timeout_at(deadline):
                        request = await self._read_request(reader, connection)
                except TimeoutError:
                    if _request_begun(connection.parser):
                        await self._send(connection, _plain(408, "the request did not arrive in time\n"), close=True)
                    return
                except _RequestError as error:
                    await self._send(connection, _plain(error.status, f"{error}\n"), close=True)
                    return
                if request is None:  # the client closed the connection
                    return
                response = await self._answer(request, connection)
                await self._send(connection, response, close=False)  # h11 closes when the client asked
                parser = connection.parser
                if parser.our_state is not h11.DONE or parser.their_state is not h11.DONE:
                    return
                parser.start_next_cycle()
                connection.method = b""
                self._waiting[connection] = None  # waits for its next request: the newest to wait
                deadline = loop.time() + timeout_s
        except (ConnectionError, ssl.SSLError, TimeoutError, asyncio.IncompleteReadError, OSError):
            return  # the client went away, broke TLS or stopped reading
        except asyncio.CancelledError:
            # The listener is stopping. Ended, not cancelled: asyncio's stream callback (3.11)
            # asks a cancelled handler task for its exception and logs the error it gets.
            return
        finally:
            self._forget(connection)
            writer.close()

    def _admit(self, connection: _Connection) -> bool:
        """Room for one more connection (which waits for its first request from now): the
        one that has waited longest for a request (or for its TLS handshake) is closed when
        the listener is full; refused when every open one is being answered."""
        if len(self._open) >= self._limits.max_connections:
            if not self._waiting:
                log.warning("refusing an HTTP connection from %s: http.max.connections=%d, all being answered",
                            connection.client_host, self._limits.max_connections)
                return False
            oldest = next(iter(self._waiting))
            self._forget(oldest)
            oldest.abort()
            log.info("closed an idle HTTP connection from %s to make room (http.max.connections=%d)",
                     oldest.client_host, self._limits.max_connections)
        self._open.add(connection)
        self._waiting[connection] = None
        return True

    def _forget(self, connection: _Connection) -> None:
        self._open.discard(connection)
        self._waiting.pop(connection, None)

    async def _read_request(self, reader: asyncio.StreamReader, connection: _Connection) -> HttpRequest | None:
        """The next request, or None when the client closed the connection between requests."""
        parser = connection.parser
        head = bytearray(parser.trailing_data[0])  # read since the last request, until this one's head is parsed
        request: h11.Request | None = None
        body = bytearray()
        while True:
            try:
                event = parser.next_event()
            except h11.RemoteProtocolError as error:
                status = error.error_status_hint
                log.debug("refused an HTTP request from %s (%d): %s", connection.client_host, status, error)
                raise _RequestError(status, _REFUSALS.get(status, HTTPStatus(status).phrase)) from None
            if event is h11.NEED_DATA:
                chunk = await reader.read(_READ_BYTES)
                if request is None:
                    head += chunk
                parser.receive_data(chunk)  # b"": the client closed its side
            elif isinstance(event, h11.Request):
                request = event
                del head[len(head) - len(parser.trailing_data[0]):]  # what follows the head
                connection.method = request.method
                self._waiting.pop(connection, None)  # being answered: never closed to make room
                _check_head(request, head)
            elif isinstance(event, h11.Data):
                body += event.data
                if len(body) > MAX_BODY_BYTES:
                    raise _RequestError(413, f"request bodies are at most {MAX_BODY_BYTES} bytes")
            elif isinstance(event, h11.EndOfMessage):
                assert request is not None
                return self._http_request(request, bytes(body), connection)
            elif isinstance(event, h11.ConnectionClosed):
                return None
            else:  # PAUSED: never, as each request is answered before the next is read
                raise AssertionError(f"h11 gave {event!r} while a request was read")

    def _http_request(self, request: h11.Request, body: bytes, connection: _Connection) -> HttpRequest:
        """What the application sees of a request h11 has read; raises _RequestError."""
        headers: dict[str, str] = {}
        for raw_name, raw_value in request.headers:  # names lower-case, values without surrounding space
            name, value = raw_name.decode("ascii"), raw_value.decode("latin-1")
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        host = headers.get("host")
        if host is None:  # HTTP/1.0 (h11 refuses an HTTP/1.1 request without one)
            raise _RequestError(400, "the request has no Host header")
        raw_path, _, query = request.target.decode("ascii").partition("?")
        if not raw_path.startswith("/"):
            raise _RequestError(400, "the request target must be a path")
        if not self._hosts.allows(host, connection.local_address):
            raise _RequestError(421, "this listener does not answer for that Host; its names are the broker's "
                                     "(add others to http.allowed.hosts)")
        try:
            path = urllib.parse.unquote(raw_path, errors="strict")
        except UnicodeDecodeError:
            raise _RequestError(400, "the path is not UTF-8") from None
        method = request.method.decode("ascii")
        return HttpRequest(method, path, query, headers, body, connection.client_host,
                           "HTTP/" + request.http_version.decode("ascii"))

    async def _answer(self, request: HttpRequest, connection: _Connection) -> HttpResponse:
        assert self._free_workers is not None
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._limits.request_timeout_s):
                await self._free_workers.acquire()
        except TimeoutError:
            return _plain(503, "every HTTP worker is busy; try again\n")
        try:
            return await loop.run_in_executor(self._workers, self._app, request)
        finally:
            self._free_workers.release()

    async def _send(self, connection: _Connection, response: HttpResponse, *, close: bool) -> None:
        if response.delay_s > 0:
            await asyncio.sleep(response.delay_s)
        status = HTTPStatus(response.status)
        headers = [("Content-Type", response.content_type), ("Content-Length", str(len(response.body))),
                   *response.headers]
        if close:
            headers.append(("Connection", "close"))
        parser = connection.parser
        writer = connection.writer
        writer.write(parser.send(h11.Response(status_code=status.value, reason=status.phrase, headers=headers)))
        if response.body and connection.method != b"HEAD":
            writer.write(parser.send(h11.Data(data=response.body)))
        writer.write(parser.send(h11.EndOfMessage()))
        async with asyncio.timeout(self._limits.request_timeout_s):
            await writer.drain()


def _check_head(request: h11.Request, head: bytearray) -> None:
    """The limits and refusals h11 leaves to us (see the module docstring); raises _RequestError."""
    if len(head) > MAX_HEAD_BYTES:
        raise _RequestError(431, f"the request line and headers exceed {MAX_HEAD_BYTES} bytes")
    if len(request.headers) > MAX_HEADERS:
        raise _RequestError(431, f"more than {MAX_HEADERS} headers")
    if head.count(b"\n") != head.count(b"\r\n"):
        raise _RequestError(400, "a line of the request head ends in a bare LF")
    if b"\n " in head or b"\n\t" in head:
        raise _RequestError(400, "a header is folded across lines")
    if request.http_version not in (b"1.0", b"1.1"):
        raise _RequestError(400, "the HTTP version is not 1.0 or 1.1")
    framing = {name: value for name, value in request.headers if name in (b"content-length", b"transfer-encoding")}
    if b"transfer-encoding" in framing:
        if b"content-length" in framing:
            raise _RequestError(400, "the request has both a Content-Length and a Transfer-Encoding")
        raise _RequestError(501, _REFUSALS[501])
    # Refused before the body is read; h11 has checked the value is digits, and one value.
    if int(framing.get(b"content-length", b"0")) > MAX_BODY_BYTES:
        raise _RequestError(413, f"request bodies are at most {MAX_BODY_BYTES} bytes")


def _request_begun(parser: h11.Connection) -> bool:
    """Whether any of the next request has arrived (its timeout is then answered 408)."""
    return parser.their_state is not h11.IDLE or bool(parser.trailing_data[0])


def _plain(status: int, text: str) -> HttpResponse:
    return HttpResponse(status, text.encode())

"""An asyncio client for etcd's v3 HTTP/JSON gateway, with no third-party package.

etcd (3.4+) serves its gRPC API as JSON over HTTP/1.1 on the client port (`POST /v3/...`,
grpc-gateway). This client speaks plain HTTP/1.1 over `asyncio.open_connection`, so the
metadata store stays on the broker's event loop: no gRPC, no protobuf, no thread.

Gateway quirks, handled here once so callers see `KeyValue`, ints and bools:

- Keys and values are base64 strings in JSON. Keys are str here (utf-8), values bytes.
- int64 fields (revisions, lease ids, TTLs, counts) arrive as JSON strings.
- proto3 JSON omits default values: a field that is false, 0, empty or an enum's first
  member is simply absent. A txn whose compare failed has no `succeeded`; a key with an
  empty value has no `value`; a PUT event has no `type`; a keepalive for an expired
  lease answers TTL 0, i.e. no `TTL` at all (raised here as `LeaseNotFound`).
- Errors come back with an HTTP error status and `{"error", "message", "code"}` (gRPC
  status codes); inside a stream (watch, keepalive) as a line `{"error": {...}}`.
- Streaming RPCs answer with a chunked body of newline-delimited `{"result": {...}}`
  messages. A watch is one POST whose request body (one `create_request`) ends at once:
  the gateway then half-closes the gRPC stream, which etcd's watch server ignores, so the
  watch keeps streaming.
- Every request but `status` carries the gRPC metadata `hasleader: true` (header
  `Grpc-Metadata-Hasleader`): a member that knows no leader refuses the request at once
  with "etcdserver: no leader" instead of letting it hang, and cancels such watches when
  it loses its leader. That refusal happens before anything is proposed, so the client
  moves on to the next endpoint even for writes.

Silence: a member cut off by the network neither answers nor errs, and TCP notices
nothing for minutes. Reads and writes have timeouts; a watch stream that brings nothing
(no event, no progress notification) for `watch_silence_timeout_s` is taken as cut and
made again on the next endpoint.

Failover and indeterminate writes: a call tries the endpoints in turn (starting with the
last one that worked) until `request_timeout_s` runs out. A connection that cannot be
made, or a "no leader" refusal, moves on to the next endpoint. A read whose answer does
not come moves on too. A write whose request may have reached etcd but whose answer did
not come (timeout, connection lost, etcd's own "request timed out") is *indeterminate*:
it raises `EtcdUnavailable` with `indeterminate=True` and is never resent here, because
resending a txn could apply it twice. Callers make writes CAS (a compare on a revision)
and, after re-reading, retry them: a CAS cannot apply twice.
"""

from __future__ import annotations

import asyncio
import base64
import json
import select
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Self
from urllib.parse import urlsplit

from oncelog.cluster.kv import Event, EventType, KeyValue

# gRPC status codes etcd answers with (google.golang.org/grpc/codes).
GRPC_NOT_FOUND = 5
GRPC_OUT_OF_RANGE = 11
GRPC_UNAVAILABLE = 14
GRPC_DEADLINE_EXCEEDED = 4

_NO_LEADER = "etcdserver: no leader"
_LEASE_NOT_FOUND = "etcdserver: requested lease not found"
_RETRY_PAUSE_S = 0.05  # between rounds over endpoints that all refused at once
# Members started by oncelog send a quiet watch a progress notification every second
# (EtcdMember); after an event the next one can take two seconds. A stream silent for
# longer than this is taken as cut.
WATCH_PROGRESS_INTERVAL_S = 1.0
WATCH_SILENCE_TIMEOUT_S = 3 * WATCH_PROGRESS_INTERVAL_S


class EtcdError(Exception):
    """etcd answered with an error (`code` is the gRPC status code)."""

    def __init__(self, message: str, code: int = 0) -> None:
        super().__init__(f"{message} (code {code})" if code else message)
        self.message = message
        self.code = code


class EtcdUnavailable(EtcdError):
    """No endpoint answered in time. With `indeterminate`, a write may have been applied
    or not: re-read, then retry it as a CAS."""

    def __init__(self, message: str, *, indeterminate: bool = False) -> None:
        super().__init__(message, GRPC_UNAVAILABLE)
        self.indeterminate = indeterminate


class LeaseNotFound(EtcdError):
    """The lease expired or was revoked (or never existed)."""


class WatchCompacted(EtcdError):
    """The watch asked for revisions etcd has compacted away. Resync: range at the
    current revision, then watch from that revision + 1."""

    def __init__(self, compact_revision: int) -> None:
        super().__init__(f"required revision has been compacted (compacted up to {compact_revision})",
                         GRPC_OUT_OF_RANGE)
        self.compact_revision = compact_revision


@dataclass(slots=True)
class RangeResult:
    kvs: list[KeyValue]
    revision: int  # the store's revision when the range was served


@dataclass(slots=True)
class TxnResult:
    succeeded: bool
    revision: int  # the store's revision after the txn (unchanged if it wrote nothing)
    # One entry per op of the branch that ran: list[KeyValue] for a range op, else None.
    responses: list = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class EtcdStatus:
    endpoint: str
    member_id: int
    leader: int  # member id of the leader this member knows, 0 for none
    version: str
    db_size: int
    raft_term: int
    raft_index: int


# ---- request building ---------------------------------------------------------------------

def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _key(key: str) -> str:
    return _b64(key.encode())


def prefix_end(prefix: bytes) -> bytes:
    """The range_end that makes [prefix, end) cover every key starting with `prefix`."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\0"  # every key: etcd reads "\0" as "to the end of the keyspace"


def _range_fields(key: str, prefix: bool) -> dict[str, Any]:
    fields = {"key": _key(key)}
    if prefix:
        fields["range_end"] = _b64(prefix_end(key.encode()))
    return fields


_RESULTS = {"=": "EQUAL", "!=": "NOT_EQUAL", "<": "LESS", ">": "GREATER"}


class Compare:
    """Conditions of a txn. `op` is one of "=", "!=", "<", ">". A missing key has
    create/mod revision 0 and version 0: `create_revision(key, "=", 0)` is "absent"."""

    @staticmethod
    def _make(key: str, op: str, target: str, field_name: str, value: Any) -> dict[str, Any]:
        if op not in _RESULTS:
            raise ValueError(f"compare op must be one of {sorted(_RESULTS)}, not {op!r}")
        return {"key": _key(key), "result": _RESULTS[op], "target": target, field_name: value}

    @staticmethod
    def mod_revision(key: str, op: str, value: int) -> dict[str, Any]:
        return Compare._make(key, op, "MOD", "mod_revision", str(value))

    @staticmethod
    def create_revision(key: str, op: str, value: int) -> dict[str, Any]:
        return Compare._make(key, op, "CREATE", "create_revision", str(value))

    @staticmethod
    def version(key: str, op: str, value: int) -> dict[str, Any]:
        return Compare._make(key, op, "VERSION", "version", str(value))

    @staticmethod
    def value(key: str, op: str, value: bytes) -> dict[str, Any]:
        return Compare._make(key, op, "VALUE", "value", _b64(value))


class Op:
    """Operations of a txn branch."""

    @staticmethod
    def put(key: str, value: bytes, lease: int = 0) -> dict[str, Any]:
        request: dict[str, Any] = {"key": _key(key), "value": _b64(value)}
        if lease:
            request["lease"] = str(lease)
        return {"request_put": request}

    @staticmethod
    def delete(key: str, prefix: bool = False) -> dict[str, Any]:
        return {"request_delete_range": _range_fields(key, prefix)}

    @staticmethod
    def range(key: str, prefix: bool = False) -> dict[str, Any]:
        return {"request_range": _range_fields(key, prefix)}


# ---- response reading ---------------------------------------------------------------------

def _int(fields: dict[str, Any], name: str) -> int:
    return int(fields.get(name, 0))  # int64 as a string; absent means 0


def _revision(response: dict[str, Any]) -> int:
    return _int(response.get("header", {}), "revision")


def _kv(fields: dict[str, Any]) -> KeyValue:
    return KeyValue(
        key=base64.b64decode(fields.get("key", "")).decode(),
        value=base64.b64decode(fields.get("value", "")),
        create_revision=_int(fields, "create_revision"),
        mod_revision=_int(fields, "mod_revision"),
        version=_int(fields, "version"),
        lease=_int(fields, "lease"),
    )


def _event(fields: dict[str, Any]) -> Event:
    kind = EventType.DELETE if fields.get("type") == "DELETE" else EventType.PUT  # PUT is 0: omitted
    return Event(kind, _kv(fields.get("kv", {})))


def _error_from(body: dict[str, Any]) -> EtcdError:
    """Unary errors are {"error": text, "message", "code"}; stream errors (also sent with
    an HTTP error status) are {"error": {"grpc_code", "http_code", "message", ...}}."""
    if isinstance(body.get("error"), dict):
        body = body["error"]
    message = body.get("message") or body.get("error") or "unknown etcd error"
    code = int(body.get("code", body.get("grpc_code", 0)))
    if message == _LEASE_NOT_FOUND:
        return LeaseNotFound(message, code)
    return EtcdError(message, code)


class _Broken(Exception):
    """The HTTP exchange failed part way (connection lost, bad framing)."""


class _Refused(Exception):
    """The member refused before doing anything ("no leader"): try another one."""


# ---- HTTP/1.1 --------------------------------------------------------------------------------

class _Connection:
    def __init__(self, endpoint: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.endpoint = endpoint
        self.reader = reader
        self.writer = writer
        self.reusable = True

    @classmethod
    async def open(cls, endpoint: str) -> _Connection:
        parts = urlsplit(endpoint)
        if parts.scheme != "http" or parts.hostname is None or parts.port is None:
            raise ValueError(f"etcd endpoint must be http://host:port, not {endpoint!r}")
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
        return cls(endpoint, reader, writer)

    def idle_and_healthy(self) -> bool:
        """An idle keep-alive connection has nothing to read: if its socket is readable,
        the server closed it (or sent garbage). Checked before reuse so that a request is
        not written into a connection that is already dead."""
        if self.writer.is_closing() or self.reader.at_eof():
            return False
        sock = self.writer.get_extra_info("socket")
        if sock is None:
            return False
        poller = select.poll()
        poller.register(sock.fileno(), select.POLLIN | select.POLLERR | select.POLLHUP)
        return not poller.poll(0)

    def send(self, path: str, payload: bytes, *, require_leader: bool = True) -> None:
        host = urlsplit(self.endpoint).netloc
        leader = "Grpc-Metadata-Hasleader: true\r\n" if require_leader else ""
        head = (f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(payload)}\r\n{leader}\r\n")
        self.writer.write(head.encode("ascii") + payload)

    async def read_head(self) -> tuple[int, dict[str, str]]:
        try:
            raw = await self.reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError) as error:
            raise _Broken(f"no response head from {self.endpoint}: {error!r}") from error
        lines = raw.decode("latin-1").split("\r\n")
        try:
            status = int(lines[0].split(" ", 2)[1])
        except (IndexError, ValueError) as error:
            raise _Broken(f"bad status line from {self.endpoint}: {lines[0]!r}") from error
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                name, value = line.split(":", 1)
                headers[name.strip().lower()] = value.strip()
        if headers.get("connection", "").lower() == "close":
            self.reusable = False
        return status, headers

    async def body_chunks(self, headers: dict[str, str]) -> AsyncIterator[bytes]:
        try:
            if "chunked" in headers.get("transfer-encoding", "").lower():
                while True:
                    size_line = await self.reader.readuntil(b"\r\n")
                    size = int(size_line.split(b";", 1)[0].strip(), 16)
                    if size == 0:
                        while await self.reader.readuntil(b"\r\n") != b"\r\n":
                            pass  # trailers (the gateway declares Grpc-Trailer-*)
                        return
                    chunk = await self.reader.readexactly(size)
                    await self.reader.readexactly(2)
                    yield chunk
            elif "content-length" in headers:
                yield await self.reader.readexactly(int(headers["content-length"]))
            else:
                self.reusable = False
                yield await self.reader.read()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, ValueError) as error:
            self.reusable = False
            raise _Broken(f"response body from {self.endpoint} cut: {error!r}") from error

    async def read_body(self, headers: dict[str, str]) -> bytes:
        return b"".join([chunk async for chunk in self.body_chunks(headers)])

    def close(self) -> None:
        self.reusable = False
        self.writer.close()


class _Pool:
    """Keep-alive connections to one endpoint; at most `size` requests in flight on it."""

    def __init__(self, endpoint: str, size: int) -> None:
        self.endpoint = endpoint
        self.idle: list[_Connection] = []
        self.slots = asyncio.Semaphore(size)

    async def acquire(self) -> _Connection:
        await self.slots.acquire()
        try:
            while self.idle:
                connection = self.idle.pop()
                if connection.idle_and_healthy():
                    return connection
                connection.close()
            return await _Connection.open(self.endpoint)
        except BaseException:
            self.slots.release()
            raise

    def release(self, connection: _Connection) -> None:
        if connection.reusable:
            self.idle.append(connection)
        else:
            connection.close()
        self.slots.release()

    def discard(self, connection: _Connection) -> None:
        connection.close()
        self.release(connection)

    def close(self) -> None:
        for connection in self.idle:
            connection.close()
        self.idle.clear()


# ---- the client ------------------------------------------------------------------------------

class EtcdClient:
    def __init__(self, endpoints: Sequence[str], *, request_timeout_s: float = 3.0,
                 connections_per_endpoint: int = 4, watch_reconnect_timeout_s: float = 10.0,
                 watch_silence_timeout_s: float = WATCH_SILENCE_TIMEOUT_S) -> None:
        if not endpoints:
            raise ValueError("EtcdClient needs at least one endpoint")
        self.endpoints = [endpoint.rstrip("/") for endpoint in endpoints]
        self.request_timeout_s = request_timeout_s
        self.watch_reconnect_timeout_s = watch_reconnect_timeout_s
        self.watch_silence_timeout_s = watch_silence_timeout_s
        self._connections_per_endpoint = connections_per_endpoint
        self._pools: dict[str, _Pool] = {}
        self._preferred = 0  # index of the endpoint that answered last
        self._watch_connections: set[_Connection] = set()
        self._closed = False

    # ---- KV ----

    async def range(self, key: str, *, prefix: bool = False, revision: int = 0) -> RangeResult:
        request = _range_fields(key, prefix)
        if revision:
            request["revision"] = str(revision)
        response = await self._call("/v3/kv/range", request, write=False)
        return RangeResult([_kv(kv) for kv in response.get("kvs", [])], _revision(response))

    async def get(self, key: str) -> KeyValue | None:
        kvs = (await self.range(key)).kvs
        return kvs[0] if kvs else None

    async def put(self, key: str, value: bytes, *, lease: int = 0) -> int:
        """Returns the revision of the put."""
        response = await self._call("/v3/kv/put", Op.put(key, value, lease)["request_put"], write=True)
        return _revision(response)

    async def delete(self, key: str, *, prefix: bool = False) -> int:
        """Returns the store's revision after the delete (unchanged when nothing was
        deleted; use a txn with a compare to know whether the key existed)."""
        response = await self._call("/v3/kv/deleterange", _range_fields(key, prefix), write=True)
        return _revision(response)

    async def txn(self, compare: Iterable[dict], success: Iterable[dict], failure: Iterable[dict] = ()) -> TxnResult:
        request = {"compare": list(compare), "success": list(success), "failure": list(failure)}
        response = await self._call("/v3/kv/txn", request, write=True)
        responses: list = []
        for op_response in response.get("responses", []):
            ranged = op_response.get("response_range")
            responses.append([_kv(kv) for kv in ranged.get("kvs", [])] if ranged is not None else None)
        return TxnResult(bool(response.get("succeeded", False)), _revision(response), responses)

    async def compact(self, revision: int, *, physical: bool = True) -> None:
        """Drop the history before `revision`. With `physical`, returns once the
        compaction has been applied to the backend."""
        await self._call("/v3/kv/compaction", {"revision": str(revision), "physical": physical}, write=True)

    # ---- leases ----

    async def lease_grant(self, ttl_s: int) -> int:
        response = await self._call("/v3/lease/grant", {"TTL": str(ttl_s)}, write=True)
        if response.get("error"):
            raise EtcdError(response["error"])
        return _int(response, "ID")

    async def lease_keepalive(self, lease_id: int) -> int:
        """One keepalive round trip (the gateway's bidirectional stream, used as a single
        POST). Returns the remaining TTL; raises LeaseNotFound when the lease is gone."""
        response = await self._call("/v3/lease/keepalive", {"ID": str(lease_id)}, write=False, stream=True)
        ttl = _int(response, "TTL")
        if ttl <= 0:
            raise LeaseNotFound(f"{_LEASE_NOT_FOUND} ({lease_id})", GRPC_NOT_FOUND)
        return ttl

    async def lease_revoke(self, lease_id: int) -> None:
        """Deletes the lease and every key attached to it; LeaseNotFound if it is gone."""
        await self._call("/v3/lease/revoke", {"ID": str(lease_id)}, write=True)

    # ---- maintenance ----

    async def status(self, endpoint: str | None = None) -> EtcdStatus:
        """The status of one member: `endpoint`, or whichever answers first."""
        answered, response = await self._call_at("/v3/maintenance/status", {}, write=False, require_leader=False,
                                                 endpoints=[endpoint.rstrip("/")] if endpoint else None)
        return EtcdStatus(
            endpoint=answered,
            member_id=_int(response.get("header", {}), "member_id"),
            leader=_int(response, "leader"),
            version=response.get("version", ""),
            db_size=_int(response, "dbSize"),
            raft_term=_int(response, "raftTerm"),
            raft_index=_int(response, "raftIndex"),
        )

    async def member_state(self, endpoint: str, timeout_s: float) -> str:
        """What one member says of itself within `timeout_s`: "leader" (it knows one),
        "leaderless", "down" (its host refused the connection: no etcd there) or
        "unknown" (no answer: slow, stopped, or cut off by the network)."""
        try:
            async with asyncio.timeout(timeout_s):
                connection = await _Connection.open(endpoint.rstrip("/"))
        except ConnectionRefusedError:
            return "down"
        except (OSError, TimeoutError):
            return "unknown"
        try:
            async with asyncio.timeout(timeout_s):
                connection.send("/v3/maintenance/status", b"{}", require_leader=False)
                status, headers = await connection.read_head()
                body = await connection.read_body(headers)
            if status != 200:
                return "unknown"
            return "leader" if _int(_loads(body, endpoint), "leader") else "leaderless"
        except (OSError, TimeoutError, _Broken):
            return "unknown"
        finally:
            connection.close()

    # ---- watch ----

    async def watch(self, key: str, *, prefix: bool = False,
                    start_revision: int) -> AsyncIterator[tuple[int, list[Event]]]:
        """Changes to `key` (or every key under it) from `start_revision` on, as
        (header revision, events) in revision order. `events` is empty for a progress
        notification: everything up to the header revision has been delivered.

        When the stream breaks (member down, connection lost, member lost its leader) the
        watch is made again on the next endpoint from the revision after the last one
        delivered, so no event is lost or repeated. Raises WatchCompacted when the next
        revision needed was compacted away, EtcdUnavailable when no endpoint takes the
        watch for `watch_reconnect_timeout_s`.
        """
        loop = asyncio.get_running_loop()
        next_revision = start_revision
        index = self._preferred
        attempts = 0
        failing_since: float | None = None
        last_failure = "no endpoint tried"
        while True:
            if self._closed:
                raise EtcdError("etcd client closed")
            endpoint = self.endpoints[index % len(self.endpoints)]
            request = {"create_request": {**_range_fields(key, prefix), "start_revision": str(next_revision),
                                          "progress_notify": True}}
            connection: _Connection | None = None
            try:
                async with asyncio.timeout(self.request_timeout_s):
                    connection = await _Connection.open(endpoint)
                    self._watch_connections.add(connection)
                    connection.send("/v3/watch", json.dumps(request).encode())
                    status, headers = await connection.read_head()
                    if status != 200:
                        error = _error_from(_loads(await connection.read_body(headers), endpoint))
                        if error.code in (GRPC_UNAVAILABLE, GRPC_DEADLINE_EXCEEDED):
                            raise _Refused(error.message)
                        raise error
                async for message in _silence_bounded(_json_lines(connection.body_chunks(headers), endpoint),
                                                      self.watch_silence_timeout_s, endpoint):
                    if "error" in message:
                        error = _error_from(message["error"])
                        if error.code in (GRPC_UNAVAILABLE, GRPC_DEADLINE_EXCEEDED, 1):  # 1: canceled
                            raise _Refused(error.message)
                        raise error
                    result = message.get("result", {})
                    compacted = _int(result, "compact_revision")
                    if compacted:
                        raise WatchCompacted(compacted)
                    if result.get("canceled"):
                        raise EtcdError(f"watch canceled: {result.get('cancel_reason', 'no reason given')}")
                    if result.get("created"):
                        failing_since, attempts = None, 0
                        continue
                    events = [_event(event) for event in result.get("events", [])]
                    revision = _revision(result)
                    if events:
                        next_revision = events[-1].kv.mod_revision + 1
                    else:
                        next_revision = max(next_revision, revision + 1)
                    yield revision, events
                raise _Broken(f"watch stream from {endpoint} ended")
            except (OSError, TimeoutError, _Broken, _Refused) as failure:
                last_failure = f"{endpoint}: {failure!r}"
            finally:
                if connection is not None:
                    self._watch_connections.discard(connection)
                    connection.close()
            now = loop.time()
            if failing_since is None:
                failing_since = now
            elif now - failing_since > self.watch_reconnect_timeout_s:
                raise EtcdUnavailable(f"no etcd endpoint took the watch on {key!r}; last: {last_failure}")
            index += 1
            attempts += 1
            if attempts % len(self.endpoints) == 0:
                await asyncio.sleep(_RETRY_PAUSE_S)  # a whole round failed

    async def close(self) -> None:
        self._closed = True
        for pool in self._pools.values():
            pool.close()
        for connection in list(self._watch_connections):
            connection.close()
        self._watch_connections.clear()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.close()

    # ---- one call, with failover ----

    async def _call(self, path: str, request: dict[str, Any], *, write: bool,
                    stream: bool = False) -> dict[str, Any]:
        return (await self._call_at(path, request, write=write, stream=stream))[1]

    async def _call_at(self, path: str, request: dict[str, Any], *, write: bool, stream: bool = False,
                       require_leader: bool = True,
                       endpoints: list[str] | None = None) -> tuple[str, dict[str, Any]]:
        """The endpoint that answered, and its answer."""
        if self._closed:
            raise EtcdError("etcd client closed")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.request_timeout_s
        payload = json.dumps(request).encode()
        order = endpoints or [self.endpoints[(self._preferred + i) % len(self.endpoints)]
                              for i in range(len(self.endpoints))]
        failures: list[str] = []
        while True:
            for position, endpoint in enumerate(order):
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                # A read may move on when an answer is late; give each endpoint its share.
                budget = remaining if write else remaining / (len(order) - position)
                try:
                    response = await self._exchange(endpoint, path, payload, budget, stream=stream,
                                                    require_leader=require_leader)
                except _Refused as refusal:
                    failures.append(f"{endpoint}: {refusal}")
                    self._skip(endpoint)
                    continue
                except _Indeterminate as failure:
                    self._skip(endpoint)
                    if write:
                        raise EtcdUnavailable(f"{path} sent to {endpoint} got no answer ({failure}); "
                                              "it may or may not have been applied", indeterminate=True) from None
                    failures.append(f"{endpoint}: {failure}")
                    continue
                if endpoints is None:
                    self._preferred = self.endpoints.index(endpoint)
                return endpoint, response
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise EtcdUnavailable(f"{path}: no etcd endpoint answered within {self.request_timeout_s}s "
                                      f"({'; '.join(failures[-len(order):]) or 'no attempt'})")
            await asyncio.sleep(min(_RETRY_PAUSE_S, remaining))

    def _skip(self, endpoint: str) -> None:
        if endpoint in self.endpoints and self.endpoints[self._preferred] == endpoint:
            self._preferred = (self._preferred + 1) % len(self.endpoints)

    def _pool(self, endpoint: str) -> _Pool:
        pool = self._pools.get(endpoint)
        if pool is None:
            pool = self._pools[endpoint] = _Pool(endpoint, self._connections_per_endpoint)
        return pool

    async def _exchange(self, endpoint: str, path: str, payload: bytes, budget: float, *,
                        stream: bool, require_leader: bool) -> dict[str, Any]:
        """One request on one endpoint. Raises _Refused when nothing was sent or the
        member refused before acting, _Indeterminate when the request went out and no
        usable answer came, EtcdError for etcd's own errors."""
        pool = self._pool(endpoint)
        try:
            async with asyncio.timeout(budget):
                connection = await pool.acquire()
        except (OSError, TimeoutError) as error:
            raise _Refused(f"cannot connect: {error!r}") from None
        try:
            async with asyncio.timeout(budget):
                connection.send(path, payload, require_leader=require_leader)
                status, headers = await connection.read_head()
                body = await connection.read_body(headers)
            if stream and status == 200:
                # A streaming RPC used for one message: the first line is the answer.
                response = _loads(body.split(b"\n", 1)[0], endpoint)
                if "error" in response:
                    response, status = response["error"], 500
                else:
                    response = response.get("result", {})
            else:
                response = _loads(body, endpoint)
        except (OSError, TimeoutError, _Broken) as error:
            pool.discard(connection)
            raise _Indeterminate(repr(error)) from None
        except BaseException:  # cancelled part way: the connection's state is unknown
            pool.discard(connection)
            raise
        pool.release(connection)
        if status != 200:
            failure = _error_from(response)
            if failure.message == _NO_LEADER:
                raise _Refused(failure.message)
            if failure.code in (GRPC_UNAVAILABLE, GRPC_DEADLINE_EXCEEDED):
                raise _Indeterminate(failure.message)  # e.g. "etcdserver: request timed out"
            raise failure
        return response


class _Indeterminate(Exception):
    """The request was sent and no usable answer came back."""


def _loads(body: bytes, endpoint: str) -> dict[str, Any]:
    try:
        return json.loads(body) if body.strip() else {}
    except ValueError as error:
        raise _Broken(f"{endpoint} answered with something that is not JSON: {body[:200]!r}") from error


async def _silence_bounded(messages: AsyncGenerator[dict[str, Any], None], timeout_s: float,
                           endpoint: str) -> AsyncIterator[dict[str, Any]]:
    """`messages`, failing with _Broken when none comes for `timeout_s`: a member cut off
    by the network sends nothing and no error either (TCP notices nothing for minutes)."""
    while True:
        try:
            async with asyncio.timeout(timeout_s):
                message = await anext(messages)
        except StopAsyncIteration:
            return
        except TimeoutError:
            await messages.aclose()
            raise _Broken(f"watch stream from {endpoint} silent for {timeout_s:g}s") from None
        yield message


async def _json_lines(chunks: AsyncIterator[bytes], endpoint: str) -> AsyncGenerator[dict[str, Any], None]:
    """The newline-delimited JSON messages of a streamed body, whatever the chunking."""
    buffer = b""
    async for chunk in chunks:
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            if line.strip():
                yield _loads(line, endpoint)
    if buffer.strip():
        yield _loads(buffer, endpoint)

"""Requests from this broker to another one (replica fetches, transaction markers).

One connection per destination broker, one request in flight on it at a time: the
callers (a replica fetcher per leader, the marker channel) are themselves sequential.
A failed connection is dropped and the next request reconnects.

A request to a broker that leaves the cluster (its registration goes: fenced, cut off
by the network, out with a failed disk) fails at once with ConnectionError instead of
waiting out its timeout: a broker across a partition answers nothing, and the callers
are better off asking whoever takes its place. So do all requests of a broker that
itself stops acting (it finds itself unregistered: `ClusterRuntime`'s fenced view).

A connection given up with a request on it is reset, never closed gracefully: a graceful
close leaves the request in the kernel's send queue, and TCP delivers it once the
network heals, on its retransmission backoff, seconds later. The third soak-faults run
lost a transaction that way: a WriteTxnMarkers given up during a network partition
reached its broker 13 s after the partition healed, and its COMMIT marker, of an
earlier transaction of the same producer and epoch (transaction version 1), committed
the record the producer's next transaction had just written there. A reset drops the
queued bytes. A window remains: bytes that already reached a paused broker's socket are
read when it resumes. The coordinator gives such a request up only when the broker
leaves the cluster (its session lapsed, so its leaderships moved: a late marker is
refused there, or lands in a log the new leader's followers never take) or after
`request.timeout.ms` (30 s).

A broker across a partition that heals before its session lapses keeps its place, and
its peers must find it again quickly. TCP alone would not: a connection whose segments
were dropped retransmits on a doubling backoff (0.2, 0.4, ... 6.4 s), so a request out
when a 9 s cut began was answered 12.6 s after it (the soak's worst commit gaps). So a
peer connection is aborted by the kernel once the other broker stops acknowledging
anything: keepalive probes after 1 s of silence, and `TCP_USER_TIMEOUT` for bytes sent,
give up after `SILENT_PEER_S`. An aborted socket drops its send queue, as a reset
does, so nothing of its request arrives later. A connection attempt gives up after
`CONNECT_TIMEOUT_S` (SYNs are retransmitted 1, 3, 7 s after the first), and the
caller's next request connects again, so a healed network is found within about a
second.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import socket
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from oncelog.protocol.client import check_correlation, decode_response, encode_request
from oncelog.protocol.frame_receiver import FrameReceiver, FrameSizeError
from oncelog.protocol.write_flow import WriteFlow
from oncelog.security.inter_broker import PeerSecurity

if TYPE_CHECKING:
    from oncelog.kernel.node import BrokerDirectory, MetadataChanges
    from oncelog.security.sasl_client import SaslClient

log = logging.getLogger("oncelog.kernel.peer")

# A response larger than this is a stream that is not Kafka's (a TLS alert or an HTTP
# answer read as a size would ask for hundreds of MiB): the connection fails instead.
# Kafka's own limits stay far below it (replica.fetch.response.max.bytes: 10 MiB).
MAX_RESPONSE_BYTES = 128 * 1024 * 1024
_RESET_ON_CLOSE = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST, drops the send queue
SILENT_PEER_S = 4  # the kernel aborts a connection the other broker acknowledged nothing on for this long
CONNECT_TIMEOUT_S = 2.0


async def _connected_socket(host: str, port: int) -> socket.socket:
    """A TCP connection to `host`, each of its addresses given `CONNECT_TIMEOUT_S`, set
    up to be aborted when the other side falls silent."""
    loop = asyncio.get_running_loop()
    failure: OSError | None = None
    for family, kind, proto, _, address in await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        sock = socket.socket(family, kind, proto)
        sock.setblocking(False)
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                await loop.sock_connect(sock, address)
        except OSError as error:  # TimeoutError included
            sock.close()
            failure = error
            continue
        except BaseException:
            sock.close()
            raise
        _abort_when_silent(sock)
        return sock
    if isinstance(failure, TimeoutError):
        raise ConnectionError(f"no connection within {CONNECT_TIMEOUT_S:g}s")
    raise ConnectionError(f"cannot connect: {failure}")


def _abort_when_silent(sock) -> None:
    """Have the kernel abort the connection after `SILENT_PEER_S` without an
    acknowledgement from the other side (Linux's options; elsewhere the defaults stay)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (("TCP_KEEPIDLE", 1), ("TCP_KEEPINTVL", 1), ("TCP_KEEPCNT", SILENT_PEER_S - 1),
                        ("TCP_USER_TIMEOUT", SILENT_PEER_S * 1000)):
        option = getattr(socket, name, None)
        if option is not None:
            sock.setsockopt(socket.IPPROTO_TCP, option, value)


class PeerAuthenticationError(ConnectionError):
    """The other broker refused this one's SASL authentication (a configuration error)."""


class PeerConnection:
    def __init__(self, node_id: int, host: str, port: int, *, client_id: str,
                 security: PeerSecurity | None = None) -> None:
        self.node_id = node_id
        self.address = (host, port)
        self._client_id = client_id
        self._security = security or PeerSecurity()
        self._transport: asyncio.Transport | None = None
        self._receiver: _ResponseReceiver | None = None
        self._correlation = 0
        self._lock = asyncio.Lock()
        self._in_flight: asyncio.Future | None = None
        self._abandoned = False
        # abandon() calls so far: a request that was waiting for the lock when one came
        # was meant for the broker that left, and fails with the one in flight.
        self._departures = 0

    def retarget(self, host: str, port: int) -> None:
        """The broker re-registered elsewhere: reconnect there on the next request."""
        if (host, port) != self.address:
            self.address = (host, port)
            self.reset()

    async def request(self, entity, timeout_s: float, *, raw: bool = False):
        """Send `entity`, return the response entity (with `raw`, the response frame after
        its correlation id, a read-only view, for a reader of its own such as
        `read_fetch_response`); ConnectionError or TimeoutError (the connection is then
        closed) when the broker does not answer."""
        departures = self._departures
        async with self._lock:
            if self._departures != departures:
                raise ConnectionError(f"broker {self.node_id} left the cluster")
            exchange = self._in_flight = asyncio.ensure_future(self._exchange(entity, raw))
            try:
                async with asyncio.timeout(timeout_s):  # not wait_for: on 3.11 it can swallow a cancel
                    return await exchange
            except asyncio.CancelledError:
                self.reset()  # part of the request may have gone out
                if self._abandoned:
                    raise ConnectionError(f"broker {self.node_id} left the cluster") from None
                raise
            except (OSError, TimeoutError, ValueError, struct.error, RuntimeError) as error:
                self.reset()
                if isinstance(error, TimeoutError):
                    raise TimeoutError(
                        f"broker {self.node_id} at {self.address} did not answer in {timeout_s}s"
                    ) from None
                raise ConnectionError(f"broker {self.node_id} at {self.address}: {error}") from None
            finally:
                self._in_flight, self._abandoned = None, False

    def abandon(self) -> None:
        """Fail the request in flight and those queued behind it now (ConnectionError),
        and drop the connection. Requests made afterwards connect again."""
        self._departures += 1
        if self._in_flight is not None and not self._in_flight.done():
            self._abandoned = True
            self._in_flight.cancel()
        self.reset()

    async def _exchange(self, entity, raw: bool):
        if self._receiver is not None and self._receiver.failed:
            self.reset()  # it ended while idle (the other broker restarted, say): connect again
        if self._transport is None:
            await self._connect()
        return await self._round_trip(entity, raw)

    async def _round_trip(self, entity, raw: bool = False):
        assert self._transport is not None and self._receiver is not None
        self._correlation += 1
        self._transport.write(encode_request(entity, self._correlation, self._client_id))
        await self._receiver.drained()
        frame = memoryview(await self._receiver.next_frame()).toreadonly()  # kio reads only read-only buffers
        if raw:
            check_correlation(frame, self._correlation)
            return frame[4:]
        return decode_response(entity, frame, self._correlation)

    async def _connect(self) -> None:
        security = self._security
        host, port = self.address
        sock = await _connected_socket(host, port)
        try:
            # The TLS handshake is bounded by the request's timeout, not the connect's: it
            # waits on the other broker's loop, which a busy moment may hold up.
            self._transport, self._receiver = await asyncio.get_running_loop().create_connection(
                _ResponseReceiver, sock=sock, ssl=security.ssl_context,
                server_hostname=host if security.ssl_context else None)
        except BaseException:
            sock.close()
            raise
        if security.new_sasl_client is not None:
            await self._authenticate(security.sasl_mechanism or "", security.new_sasl_client())

    async def _authenticate(self, mechanism: str, client: SaslClient) -> None:
        """SaslHandshake v1 and SaslAuthenticate v2, as a client does."""
        handshake = await self._round_trip(SaslHandshakeRequest(mechanism=mechanism))
        if handshake.error_code != 0:
            raise PeerAuthenticationError(f"broker {self.node_id} does not offer SASL mechanism {mechanism} on its "
                                          f"inter-broker listener (it offers {', '.join(handshake.mechanisms)})")
        token: bytes | None = client.initial_response()
        while token is not None:
            answer = await self._round_trip(SaslAuthenticateRequest(auth_bytes=token))
            if answer.error_code != 0:
                raise PeerAuthenticationError(f"broker {self.node_id} refused this broker's {mechanism} "
                                              f"authentication: {answer.error_message}")
            token = None if client.complete else client.evaluate(bytes(answer.auth_bytes))

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
        self._transport = self._receiver = None

    def reset(self) -> None:
        """Drop the connection with a TCP reset, discarding whatever is still queued to
        send (a graceful close would deliver it once the network heals)."""
        if self._transport is not None:
            sock = self._transport.get_extra_info("socket")
            if sock is not None:
                try:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET_ON_CLOSE)
                except (OSError, ValueError):
                    pass  # already gone (the kernel aborted it: uvloop's socket then has no descriptor)
            self._transport.abort()
        self._transport = self._receiver = None


class _ResponseReceiver(asyncio.BufferedProtocol):
    """The socket of a PeerConnection: whole response frames, in order. A response
    larger than the receive buffer (a replica fetch's records) is received straight into
    a bytearray of its exact size, which the reader then slices (`FrameReceiver`): no
    stream buffer to copy it through (two copies of every replicated byte before)."""

    def __init__(self) -> None:
        self._receiver = FrameReceiver(self._deliver, max_size=MAX_RESPONSE_BYTES, what="response",
                                       preallocate=True)
        self._frames: collections.deque[bytearray] = collections.deque()
        self._failure: BaseException | None = None  # the connection is over
        self._frame_waiter: asyncio.Future | None = None
        self._write_flow = WriteFlow()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._receiver.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        try:
            self._receiver.received(nbytes)
        except FrameSizeError as error:
            self._fail(ConnectionError(str(error)))

    def _deliver(self, frame: bytearray) -> None:
        self._frames.append(frame)
        if self._frame_waiter is not None and not self._frame_waiter.done():
            self._frame_waiter.set_result(None)

    @property
    def failed(self) -> bool:
        """The connection is over (its frames received before may still be taken)."""
        return self._failure is not None

    def _fail(self, failure: BaseException) -> None:
        if self._failure is None:
            if not isinstance(failure, OSError):  # e.g. MemoryError, or the event loop's RuntimeError
                wrapped = ConnectionError(f"the connection failed: {failure!r}")
                wrapped.__cause__ = failure
                failure = wrapped
            self._failure = failure
        if self._frame_waiter is not None and not self._frame_waiter.done():
            self._frame_waiter.set_exception(self._failure)
        self._write_flow.fail(self._failure)

    def eof_received(self) -> bool:
        self._fail(ConnectionResetError("the broker closed the connection"))
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(exc or ConnectionResetError("connection lost"))

    def pause_writing(self) -> None:
        self._write_flow.pause()

    def resume_writing(self) -> None:
        self._write_flow.resume()

    async def drained(self) -> None:
        """Once the transport takes more (at once unless its write buffer is full)."""
        await self._write_flow.drained(lambda: self._failure)

    async def next_frame(self) -> bytearray:
        """The next response frame (without its size); the connection's failure once it
        is over and every frame received before has been taken."""
        while not self._frames:
            if self._failure is not None:
                raise self._failure
            self._frame_waiter = asyncio.get_running_loop().create_future()
            try:
                await self._frame_waiter
            finally:
                self._frame_waiter = None
        return self._frames.popleft()


class PeerHost(Protocol):
    """What a PeerPool needs of its broker: its id, and where the other brokers are
    (`NoPeers` standalone)."""

    @property
    def node_id(self) -> int: ...
    @property
    def directory(self) -> BrokerDirectory: ...


class PeerPool:
    """One PeerConnection per broker, for one purpose (transaction markers, KIP-890
    verification), kept pointed at the broker's registered inter-broker address."""

    def __init__(self, broker: PeerHost, purpose: str) -> None:
        self._broker = broker
        self._client_id = f"broker-{broker.node_id}-{purpose}"
        self._peers: dict[int, PeerConnection] = {}
        broker.directory.add_listener(self._metadata_changed)

    def _metadata_changed(self, _image, delta) -> None:
        gone = set(self._peers) if self._broker.node_id in delta.unregistered_brokers else delta.unregistered_brokers
        for node_id in gone:
            peer = self._peers.get(node_id)
            if peer is not None:
                peer.abandon()

    def get(self, node_id: int) -> PeerConnection | None:
        """The connection to `node_id`, or None while it is not registered."""
        directory = self._broker.directory
        address = directory.inter_broker_address(node_id)
        if address is None:
            return None
        peer = self._peers.get(node_id)
        if peer is None:
            peer = self._peers[node_id] = PeerConnection(node_id, *address, client_id=self._client_id,
                                                         security=directory.peer_security)
        else:
            peer.retarget(*address)
        return peer

    def close(self) -> None:
        for peer in self._peers.values():
            peer.reset()  # a request still out is given up: it must not arrive later
        self._peers.clear()


class NoPeers:
    """A standalone broker's `BrokerDirectory`: it has no other brokers to reach."""

    def add_listener(self, listener: Callable[[object, MetadataChanges], None]) -> None:
        pass

    def inter_broker_address(self, node_id: int) -> tuple[str, int] | None:
        return None

    @property
    def peer_security(self) -> PeerSecurity | None:
        return None

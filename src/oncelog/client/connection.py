"""One blocking TCP (or TLS) connection to one broker.

- On connect: TLS (SSL, SASL_SSL), then ApiVersions (v3, falling back to v0 as Kafka
  answers a version it does not know), keeping each API's version range: `version()`
  picks the highest version both sides speak within the range a caller can use.
- SASL_PLAINTEXT and SASL_SSL then authenticate: SaslHandshake v1, and SaslAuthenticate
  (v0-v2) for each token of the configured mechanism (oncelog.security.sasl_client). A
  failed exchange closes the connection and raises `AuthenticationFailed`, naming the
  mechanism and the broker's message; it is not retriable, so no retry loop repeats it.
- KIP-368: when SaslAuthenticate gives a session lifetime, the connection counts as
  `closed` from SESSION_LIFETIME_USED of it on, so `Cluster` opens a fresh, freshly
  authenticated one rather than re-authenticating this one (the broker closes a
  connection whose session expired). The responses it still owes callers are read
  before its socket closes.
- Requests may be pipelined: `send()` several, then `receive()` each response by its
  correlation id. A broker answers in the order requests came, so a response read
  while waiting for a later one is kept for its own caller: a producer's Produce requests
  and its coordinator calls can share the connection to one broker.
- Any socket error, EOF or timeout closes the connection and raises `ConnectionLost`;
  the connection is then dead and `Cluster` opens a new one.

Frames are read into one buffer of the frame's size (a Fetch response of several MB is
received without joining chunks).
"""

from __future__ import annotations

import select
import socket
import ssl
import struct
import time
from collections import deque

from kio.schema.api_versions.v0.request import ApiVersionsRequest as ApiVersionsRequestV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode

from oncelog.client.config import ClientConfig, split_address
from oncelog.client.errors import AuthenticationFailed, ConnectionLost, UnsupportedVersion
from oncelog.protocol.client import decode_response, encode_request
from oncelog.protocol.messages import RequestBuilder
from oncelog.security.sasl_client import SaslClientError, new_sasl_client

_SIZE = struct.Struct(">i")
_ERROR_CODE = struct.Struct(">h")
MAX_RESPONSE_BYTES = 1 << 30
SASL_HANDSHAKE_KEY = 17
SASL_AUTHENTICATE_KEY = 36
# The share of a SASL session's lifetime after which the connection is replaced; Kafka's
# clients re-authenticate at 85-95% of it.
SESSION_LIFETIME_USED = 0.85


class Connection:
    """A connection to the broker at `address` ("host:port"); `node_id` is the broker's id
    when known (-1 for a bootstrap address)."""

    def __init__(self, address: str, config: ClientConfig, node_id: int = -1) -> None:
        self.address = address
        self.node_id = node_id
        self.config = config
        self._correlation = 0
        self._pending: deque = deque()  # (correlation id, request) sent, response not yet read
        self._ready: dict[int, object] = {}  # responses read on behalf of a later caller
        self._spare: bytearray | None = None  # a raw frame's buffer, given back for the next one
        self._closed = True  # until connected
        self.session_ends_at: float | None = None  # time.monotonic() after which it counts as closed
        self.versions: dict[int, tuple[int, int]] = {}
        host, port = split_address(address)
        try:
            raw = socket.create_connection((host, port), timeout=config.connect_timeout_s)
        except OSError as error:
            raise ConnectionLost(f"cannot connect to {address}: {error}") from None
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            self._socket = _secure(raw, host, config) if config.uses_tls else raw
        except (OSError, ssl.SSLError) as error:
            raw.close()
            raise ConnectionLost(f"TLS handshake with {address} failed: {error}") from None
        self._prefix = bytearray(4)
        self._closed = False
        self.versions = self._api_versions()
        if config.uses_sasl:
            self._authenticate()

    # -- versions ---------------------------------------------------------------------------

    def _api_versions(self) -> dict[int, tuple[int, int]]:
        request = ApiVersionsRequest(client_software_name="oncelog", client_software_version="1")
        frame = self._exchange_raw(request)
        (error,) = _ERROR_CODE.unpack_from(frame, 4)
        entity: ApiVersionsRequest | ApiVersionsRequestV0 = request
        if error == ErrorCode.unsupported_version:
            entity = ApiVersionsRequestV0()  # the broker answered in v0's layout
        response = decode_response(entity, frame, self._correlation)
        if response.error_code not in (ErrorCode.none, ErrorCode.unsupported_version):
            self.close()
            raise ConnectionLost(f"ApiVersions on {self.address} failed: {ErrorCode(response.error_code).name}")
        return {int(api.api_key): (int(api.min_version), int(api.max_version)) for api in response.api_keys}

    def version(self, api_key: int, lowest: int, highest: int) -> int:
        """The highest version of `api_key` in [lowest, highest] the broker also speaks."""
        offered = self.versions.get(api_key)
        if offered is not None:
            chosen = min(highest, offered[1])
            if chosen >= max(lowest, offered[0]):
                return chosen
        raise UnsupportedVersion(
            f"the broker at {self.address} offers API {api_key} versions "
            f"{'none' if offered is None else f'{offered[0]}-{offered[1]}'}; "
            f"this client needs one of {lowest}-{highest}"
        )

    # -- SASL -------------------------------------------------------------------------------

    def _authenticate(self) -> None:
        """SaslHandshake v1, then SaslAuthenticate until the mechanism has nothing more to
        send. Closes the connection and raises AuthenticationFailed when it fails."""
        config = self.config
        assert config.sasl_mechanism is not None, "ClientConfig checks that SASL protocols name a mechanism"
        mechanism = config.sasl_mechanism
        what = f"SASL/{mechanism} authentication with {self.address}"
        client = new_sasl_client(mechanism, username=config.sasl_username, password=config.sasl_password,
                                 oauth_config=config.sasl_oauthbearer)
        try:
            handshake = self.request(RequestBuilder(SASL_HANDSHAKE_KEY, self.version(SASL_HANDSHAKE_KEY, 1, 1))
                                     .make("SaslHandshakeRequest", mechanism=mechanism))
            if handshake.error_code != ErrorCode.none:
                offered = (f"the listener offers {', '.join(handshake.mechanisms)}" if handshake.mechanisms else
                           "the listener offers no SASL mechanism: is kafka.security.protocol right?")
                raise AuthenticationFailed(ErrorCode(handshake.error_code), what, offered)
            build = RequestBuilder(SASL_AUTHENTICATE_KEY, self.version(SASL_AUTHENTICATE_KEY, 0, 2))
            token: bytes | None = client.initial_response()
            while token is not None:
                sent_at = time.monotonic()
                answer = self.request(build.make("SaslAuthenticateRequest", auth_bytes=token))
                if answer.error_code != ErrorCode.none:
                    raise AuthenticationFailed(ErrorCode(answer.error_code), what, answer.error_message)
                lifetime = getattr(answer, "session_lifetime", None)  # v1+; 0: the session does not end
                if lifetime is not None and lifetime.total_seconds() > 0:
                    self.session_ends_at = sent_at + SESSION_LIFETIME_USED * lifetime.total_seconds()
                try:
                    token = client.evaluate(bytes(answer.auth_bytes))
                except SaslClientError as error:
                    raise AuthenticationFailed(ErrorCode.sasl_authentication_failed, what, str(error)) from None
            if not client.complete:
                raise AuthenticationFailed(ErrorCode.sasl_authentication_failed, what,
                                           "the exchange ended before the client was authenticated")
        except (AuthenticationFailed, UnsupportedVersion):
            self.close()
            raise

    @property
    def closed(self) -> bool:
        """Closed, or past its SASL session's end (KIP-368): no new request should go on
        it. The socket of an expired connection stays open until the responses still
        owed to callers have been read."""
        if self._closed:
            return True
        if self._session_over():
            self._close_if_drained()
            return True
        return False

    def _session_over(self) -> bool:
        return self.session_ends_at is not None and time.monotonic() >= self.session_ends_at

    def _close_if_drained(self) -> None:
        if not self._pending and not self._ready:
            self.close()

    # -- requests ---------------------------------------------------------------------------

    def send(self, entity, *, raw: bool = False) -> int:
        """Send a request; returns the correlation id its response is received by. With
        `raw`, `receive()` returns the response frame itself (after the correlation id) for
        the caller to decode: the Fetch path decodes its answers by hand."""
        self._correlation += 1
        frame = encode_request(entity, self._correlation, self.config.client_id)
        try:
            self._socket.settimeout(self.config.request_timeout_s)
            self._socket.sendall(frame)
        except OSError as error:
            self._fail(f"sending to {self.address} failed: {error}")
        self._pending.append((self._correlation, None if raw else entity))
        return self._correlation

    def receive(self, correlation: int, extra_wait_s: float = 0.0):
        """The response to the request sent as `correlation`. Responses come in the order
        requests went out; those that arrive first are kept for their own callers."""
        ready = self._ready.pop(correlation, None)
        if ready is not None:
            if self._session_over():
                self._close_if_drained()
            return ready
        while self._pending:
            expected, entity = self._pending.popleft()
            frame = self._read_frame(self.config.request_timeout_s + extra_wait_s, reuse=entity is None)
            if entity is None:  # sent with raw=True
                (answered,) = _SIZE.unpack_from(frame, 0)
                if answered != expected:
                    self._fail(f"{self.address} answered request {answered} where {expected} was next")
                response = frame[4:]
            else:
                try:
                    response = decode_response(entity, frame, expected)
                except Exception as error:  # noqa: BLE001 (any decode failure: the stream is unusable)
                    self._fail(f"cannot decode the {type(entity).__name__[:-7]} response from {self.address}: {error}")
            if expected == correlation:
                if self._session_over():
                    self._close_if_drained()
                return response
            self._ready[expected] = response
        raise ConnectionLost(f"no request {correlation} is waiting for an answer from {self.address}")

    def request(self, entity, extra_wait_s: float = 0.0):
        """Send `entity` and return its response."""
        return self.receive(self.send(entity), extra_wait_s)

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def answer_arrived(self, correlation: int) -> bool:
        """Whether the response to `correlation` may be here, so `receive()` would not wait
        long: it was kept for this caller, or bytes wait in TLS's buffer or the socket."""
        if self._closed:
            return False
        if correlation in self._ready:
            return True
        if isinstance(self._socket, ssl.SSLSocket) and self._socket.pending():
            return True
        readable, _, _ = select.select([self._socket], [], [], 0)
        return bool(readable)

    def _exchange_raw(self, entity) -> memoryview:
        self.send(entity)
        self._pending.popleft()
        return self._read_frame(self.config.request_timeout_s)

    def _read_frame(self, timeout_s: float, *, reuse: bool = False) -> memoryview:
        """The next response frame. With `reuse`, into the buffer `recycle()` gave back if it
        is large enough (a fresh buffer costs a page fault per 4 KB on first touch)."""
        try:
            self._socket.settimeout(timeout_s)
            self._receive_into(memoryview(self._prefix))
            (size,) = _SIZE.unpack(self._prefix)
            if not 4 <= size <= MAX_RESPONSE_BYTES:
                self._fail(f"{self.address} sent a response of {size} bytes")
            spare, self._spare = self._spare, None
            buffer = spare if reuse and spare is not None and len(spare) >= size else bytearray(size)
            frame = memoryview(buffer)[:size]
            self._receive_into(frame)
        except OSError as error:
            self._fail(f"reading from {self.address} failed: {error or type(error).__name__}")
        return frame if reuse else frame.toreadonly()  # kio reads read-only buffers only

    def _receive_into(self, view: memoryview) -> None:
        """Fill `view` from the socket: with MSG_WAITALL, one system call for a whole
        frame (the GIL is released for all of it), except on TLS, which reads in pieces."""
        flags = 0 if isinstance(self._socket, ssl.SSLSocket) else socket.MSG_WAITALL
        received = 0
        while received < len(view):
            count = self._socket.recv_into(view[received:], len(view) - received, flags)
            if count == 0:
                self._fail(f"{self.address} closed the connection")
            received += count

    def recycle(self, view) -> None:
        """The caller of a raw `receive()` is done with everything in that frame (`view`, any
        view of it): its buffer may take the next raw response."""
        buffer = getattr(view, "obj", None)
        if isinstance(buffer, bytearray) and (self._spare is None or len(buffer) > len(self._spare)):
            self._spare = buffer

    def _fail(self, message: str):
        self.close()
        raise ConnectionLost(message)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._pending.clear()
        self._ready.clear()
        try:
            self._socket.close()
        except OSError:
            pass

    def __repr__(self) -> str:
        return f"Connection({self.address}, node {self.node_id})"


def _secure(raw: socket.socket, host: str, config: ClientConfig) -> ssl.SSLSocket:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if config.ssl_ca_location:
        context.load_verify_locations(cafile=config.ssl_ca_location)
    else:
        context.load_default_certs()
    if config.ssl_certificate_location:
        context.load_cert_chain(config.ssl_certificate_location, config.ssl_key_location,
                                config.ssl_key_password)
    context.check_hostname = config.ssl_check_hostname and config.ssl_verify
    if not config.ssl_verify:
        context.verify_mode = ssl.CERT_NONE
    raw.settimeout(config.connect_timeout_s)
    return context.wrap_socket(raw, server_hostname=host)

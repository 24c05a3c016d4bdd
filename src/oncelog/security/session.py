"""Who is on the other end of a connection, and what it may send before it says so.

A `ConnectionSession` per connection, as Kafka's SaslServerAuthenticator and
KafkaChannel keep it. Its principal is `User:ANONYMOUS` on PLAINTEXT, the mapped subject
of the client certificate on SSL (ANONYMOUS without one), and the SASL identity once a
SASL listener's client has authenticated. The state machine, as an explicit table:

    state            accepted requests                        next
    HANDSHAKE        ApiVersions, SaslHandshake               AUTHENTICATE (v1) / RAW_TOKENS (v0)
    AUTHENTICATE     SaslAuthenticate                         AUTHENTICATED when complete, FAILED
    RAW_TOKENS       bare SASL tokens (SaslHandshake v0)      AUTHENTICATED when complete, FAILED
    AUTHENTICATED    everything; SaslHandshake starts a       REAUTH_AUTHENTICATE (KIP-368)
                     re-authentication
    REAUTH_AUTHENTICATE  SaslAuthenticate                     AUTHENTICATED, same principal only
    FAILED           nothing: the connection closes

Anything else is refused by closing the connection, as Kafka does. With
`connections.max.reauth.ms` (or an OAUTHBEARER token's expiry) a session ends: a request
that arrives after it, other than a re-authentication, closes the connection.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from enum import Enum

from oncelog import clock
from oncelog.security.listeners import SecurityProtocol
from oncelog.security.sasl import IllegalSaslStateError, SaslAuthenticationError, SaslServer

log = logging.getLogger("oncelog.security")

ANONYMOUS = "User:ANONYMOUS"
API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36

# Kafka's error codes for the SASL exchange.
NONE = 0
ILLEGAL_SASL_STATE = 34
UNSUPPORTED_SASL_MECHANISM = 33
SASL_AUTHENTICATION_FAILED = 58


class State(Enum):
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    RAW_TOKENS = "raw tokens"
    AUTHENTICATED = "authenticated"
    REAUTH_AUTHENTICATE = "re-authentication"
    FAILED = "failed"


# state -> the API keys a request may have in it (None: every API).
ACCEPTED: Mapping[State, frozenset[int] | None] = {
    State.HANDSHAKE: frozenset({API_VERSIONS, SASL_HANDSHAKE}),
    State.AUTHENTICATE: frozenset({SASL_AUTHENTICATE}),
    State.RAW_TOKENS: frozenset(),  # frames are bare tokens, not requests
    State.AUTHENTICATED: None,
    State.REAUTH_AUTHENTICATE: frozenset({SASL_AUTHENTICATE}),
    State.FAILED: frozenset(),
}


class SessionRefused(Exception):
    """The request cannot be served in this state: the connection closes (the message says why)."""


@dataclass(frozen=True)
class ListenerSecurity:
    """A listener's authentication settings (built once from the broker's config)."""

    name: str
    protocol: SecurityProtocol
    mechanisms: tuple[str, ...] = ()  # sasl.enabled.mechanisms, SASL listeners only
    new_sasl_server: Callable[[str], SaslServer] | None = None  # mechanism -> a fresh server
    max_reauth_ms: int = 0  # connections.max.reauth.ms (0: sessions never end)
    max_receive_size: int = 524_288  # sasl.server.max.receive.size: the largest frame before authentication
    authentication_timeout_ms: int = 10_000  # connections.authentication.timeout.ms (TLS handshake and SASL)
    failed_authentication_delay_ms: int = 100
    principal_of_certificate: Callable[[bytes], str | None] | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class AuthenticateOutcome:
    error_code: int
    message: str | None
    token: bytes
    session_lifetime_ms: int  # 0: the session does not end (SaslAuthenticate v1+)


class ConnectionSession:
    def __init__(self, listener: ListenerSecurity, client_host: str, principal: str = ANONYMOUS,
                 now_ms: Callable[[], int] | None = None) -> None:
        self.listener = listener
        self.client_host = client_host
        self.principal = principal
        self.state = State.HANDSHAKE if listener.protocol.sasl else State.AUTHENTICATED
        self._now_ms = now_ms or clock.now_ms
        self._server: SaslServer | None = None
        self._mechanism: str | None = None
        self.expires_at_ms: int | None = None  # when the SASL session ends (None: never)
        # What the connection holds that ends with it (a share session, KIP-932), by key.
        self._at_close: dict[Hashable, Callable[[], None]] = {}

    def at_close(self, key: Hashable, callback: Callable[[], None]) -> None:
        """Call `callback` when the connection closes (one per `key`: a later one replaces it)."""
        self._at_close[key] = callback

    def forget_at_close(self, key: Hashable) -> None:
        self._at_close.pop(key, None)

    def connection_closed(self) -> None:
        """The connection closed: what it held is released."""
        callbacks, self._at_close = list(self._at_close.values()), {}
        for callback in callbacks:
            try:
                callback()
            except Exception:
                log.exception("releasing what a closed connection held failed")

    @property
    def authenticated(self) -> bool:
        return self.state is State.AUTHENTICATED

    @property
    def identified(self) -> bool:
        """The client has proved who it is (it may be re-authenticating, KIP-368): past
        the limits that bound a connection before authentication."""
        return self.state in (State.AUTHENTICATED, State.REAUTH_AUTHENTICATE)

    @property
    def expects_raw_tokens(self) -> bool:
        return self.state is State.RAW_TOKENS

    @property
    def failed(self) -> bool:
        return self.state is State.FAILED

    def check(self, api_key: int, api_name: str) -> None:
        """Raises SessionRefused unless a request of `api_key` may be served now."""
        if self.state is State.AUTHENTICATED and self.expires_at_ms is not None and api_key != SASL_HANDSHAKE \
                and self._now_ms() >= self.expires_at_ms:
            raise SessionRefused(f"the SASL session of {self.principal} expired (connections.max.reauth.ms or "
                                 "the token's lifetime) and the client did not re-authenticate")
        accepted = ACCEPTED[self.state]
        if accepted is not None and api_key not in accepted:
            raise SessionRefused(f"unexpected {api_name} request during SASL {self.state.value}")

    # -- SaslHandshake ---------------------------------------------------------------------

    def handshake(self, mechanism: str, version: int) -> int:
        """The error code of a SaslHandshake for `mechanism`; the listener's mechanisms are
        in the response either way. UNSUPPORTED_SASL_MECHANISM fails the session."""
        if mechanism not in self.listener.mechanisms:
            log.info("authentication from %s failed: mechanism %r not enabled on %s (%s)", self.client_host,
                     mechanism, self.listener.name, ", ".join(self.listener.mechanisms))
            self.state = State.FAILED
            return UNSUPPORTED_SASL_MECHANISM
        reauthenticating = self.state is State.AUTHENTICATED
        if reauthenticating and mechanism != self._mechanism:
            self.state = State.FAILED
            return UNSUPPORTED_SASL_MECHANISM  # KIP-368: re-authentication keeps the mechanism
        assert self.listener.new_sasl_server is not None
        self._server = self.listener.new_sasl_server(mechanism)
        self._mechanism = mechanism
        if reauthenticating:
            self.state = State.REAUTH_AUTHENTICATE
        else:
            self.state = State.AUTHENTICATE if version >= 1 else State.RAW_TOKENS
        return NONE

    # -- SaslAuthenticate and bare tokens ----------------------------------------------------

    def authenticate(self, token: bytes) -> AuthenticateOutcome:
        """One step of the exchange. A failure (SASL_AUTHENTICATION_FAILED) ends the session:
        answer, wait `failed_authentication_delay_ms`, close."""
        server = self._server
        if server is None or self.state not in (State.AUTHENTICATE, State.RAW_TOKENS, State.REAUTH_AUTHENTICATE):
            self.state = State.FAILED
            return AuthenticateOutcome(ILLEGAL_SASL_STATE, "SaslAuthenticate before SaslHandshake", b"", 0)
        if len(token) > self.listener.max_receive_size:
            message = (f"the SASL token of {len(token)} bytes is larger than sasl.server.max.receive.size="
                       f"{self.listener.max_receive_size}")
            return self._fail(message, None)
        reauthenticating = self.state is State.REAUTH_AUTHENTICATE
        try:
            response = server.evaluate(token)
        except IllegalSaslStateError as error:
            self.state = State.FAILED
            return AuthenticateOutcome(ILLEGAL_SASL_STATE, error.message, b"", 0)
        except SaslAuthenticationError as error:
            return self._fail(error.message, error.log_detail)
        if not server.complete:
            return AuthenticateOutcome(NONE, None, response, 0)
        principal = server.principal
        if reauthenticating and principal != self.principal:
            return self._fail("re-authentication must keep the connection's principal (KIP-368)",
                              f"re-authenticated as {principal} on a connection of {self.principal}")
        self.principal = principal
        self.state = State.AUTHENTICATED
        lifetime = self._session_lifetime_ms(server)
        self.expires_at_ms = None if lifetime == 0 else self._now_ms() + lifetime
        log.debug("%s %s from %s with %s on %s", principal,
                  "re-authenticated" if reauthenticating else "authenticated", self.client_host, self._mechanism,
                  self.listener.name)
        return AuthenticateOutcome(NONE, None, response, lifetime)

    def _session_lifetime_ms(self, server: SaslServer) -> int:
        limits = [limit for limit in (self.listener.max_reauth_ms, server.session_lifetime_ms) if limit]
        return max(min(limits), 1) if limits else 0

    def _fail(self, message: str, detail: str | None) -> AuthenticateOutcome:
        """`message` goes to the client; `detail` (never a secret) only to the log."""
        self.state = State.FAILED
        log.warning("authentication from %s with %s on listener %s failed: %s", self.client_host, self._mechanism,
                    self.listener.name, detail or message)
        return AuthenticateOutcome(SASL_AUTHENTICATION_FAILED, message, b"", 0)

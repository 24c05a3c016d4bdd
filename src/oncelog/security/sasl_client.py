"""The client side of Kafka's SASL mechanisms, as state machines without I/O: what
oncelog's own client (oncelog.client.connection) sends in SaslAuthenticate requests.
The server side is oncelog.security.sasl.

    client = new_sasl_client("SCRAM-SHA-512", username="alice", password="...")
    token = client.initial_response()
    while token is not None:            # send `token`, read the server's answer
        token = client.evaluate(answer)  # None: nothing more to send
    assert client.complete

- PLAIN (RFC 4616): one message, `NUL user NUL password`; the server answers with nothing.
- SCRAM-SHA-256, SCRAM-SHA-512 (RFC 5802, 7677; formats in oncelog.security.sasl.scram):
  client-first with a random nonce, client-final with the proof, then the server-final
  message's signature is checked: a server that does not know the password cannot make
  it, so a mismatch fails the exchange.
- OAUTHBEARER (RFC 7628) with an unsecured JWT (`{"alg":"none"}`, no signature), as
  librdkafka's `sasl.oauthbearer.config` and Java's OAuthBearerUnsecuredLoginCallbackHandler
  make one: for development only, since a broker that accepts such tokens accepts anyone's.
  A refused token gets RFC 7628's JSON error as a challenge; the client acknowledges it
  with \\x01 and the broker then fails the exchange with that JSON as its message.

Errors are `SaslClientError`s (a failed exchange) or ValueErrors (settings); neither ever
holds a password.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import math
import re
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from oncelog.security.sasl.scram import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    SCRAM_MECHANISMS,
    encode_sasl_name,
    salted_password,
)

PLAIN = "PLAIN"
OAUTHBEARER = "OAUTHBEARER"
CLIENT_MECHANISMS = (PLAIN, *SCRAM_MECHANISMS, OAUTHBEARER)

_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
_GS2_HEADER = "n,,"  # no channel binding, no authorization id
_SEPARATOR = "\x01"
_EXTENSION_NAME = re.compile(r"[A-Za-z]+")  # RFC 7628 section 3.1
_EXTENSION_VALUE = re.compile(r"[\x21-\x7e \t\r\n]+")
_RESERVED_CLAIMS = frozenset({"iat", "exp"})  # set from the lifetime

# Java's OAuthBearerUnsecuredLoginCallbackHandler options (OAuthBearerLoginModule's JAAS entry).
JAAS_PRINCIPAL_CLAIM_NAME = "unsecuredLoginPrincipalClaimName"
JAAS_LIFETIME_SECONDS = "unsecuredLoginLifetimeSeconds"
JAAS_SCOPE_CLAIM_NAME = "unsecuredLoginScopeClaimName"
JAAS_STRING_CLAIM = "unsecuredLoginStringClaim_"
JAAS_NUMBER_CLAIM = "unsecuredLoginNumberClaim_"
JAAS_LIST_CLAIM = "unsecuredLoginListClaim_"
JAAS_EXTENSION = "unsecuredLoginExtension_"


class SaslClientError(Exception):
    """The exchange failed on the client's side (a server message it cannot accept). The
    message never holds a secret."""


class SaslClient(Protocol):
    """The client side of one SASL exchange, for one connection."""

    @property
    def mechanism(self) -> str: ...

    @property
    def complete(self) -> bool:
        """True once the exchange succeeded as far as the client can tell."""

    def initial_response(self) -> bytes:
        """The first token, sent in the first SaslAuthenticate request."""

    def evaluate(self, challenge: bytes) -> bytes | None:
        """The token answering the server's `challenge`, or None when nothing more is to be
        sent; raises SaslClientError when the challenge cannot be accepted."""


def new_sasl_client(mechanism: str, *, username: str | None = None, password: str | None = None,
                    oauth_config: UnsecuredTokenConfig | None = None) -> SaslClient:
    """A client for one exchange of `mechanism` (one of CLIENT_MECHANISMS). ValueError
    for another mechanism or a missing credential (the message names it, never a value)."""
    if mechanism == PLAIN or mechanism in SCRAM_MECHANISMS:
        if not username or not password:
            raise ValueError(f"SASL/{mechanism} needs a user name and a password")
        if mechanism == PLAIN:
            return PlainSaslClient(username, password)
        return ScramSaslClient(mechanism, username, password)
    if mechanism == OAUTHBEARER:
        if oauth_config is None:
            raise ValueError("SASL/OAUTHBEARER needs a principal for its unsecured token")
        return OAuthBearerSaslClient(oauth_config)
    raise ValueError(f"unsupported SASL mechanism {mechanism!r} (supported: {', '.join(CLIENT_MECHANISMS)})")


# -- PLAIN ------------------------------------------------------------------------------------


class PlainSaslClient:
    mechanism = PLAIN

    def __init__(self, username: str, password: str) -> None:
        self._username = username
        self._password = password
        self._sent = False
        self.complete = False

    def __repr__(self) -> str:
        return f"PlainSaslClient({self._username!r})"

    def initial_response(self) -> bytes:
        self._sent = True
        return f"\x00{self._username}\x00{self._password}".encode()

    def evaluate(self, challenge: bytes) -> bytes | None:
        if not self._sent or self.complete:
            raise SaslClientError("unexpected SASL/PLAIN challenge: the exchange is one message")
        self.complete = True  # the server answered the one message without an error
        return None


# -- SCRAM ------------------------------------------------------------------------------------


class _ScramState(Enum):
    SEND_CLIENT_FIRST = "send client-first message"
    RECEIVE_SERVER_FIRST = "receive server-first message"
    RECEIVE_SERVER_FINAL = "receive server-final message"
    COMPLETE = "complete"
    FAILED = "failed"


def new_client_nonce() -> str:
    """192 random bits, base64url: printable ASCII without ','."""
    return secrets.token_urlsafe(24)


class ScramSaslClient:
    """One SCRAM exchange; `nonce` makes the client nonce (tests inject RFC vectors')."""

    def __init__(self, mechanism: str, username: str, password: str, *,
                 nonce: Callable[[], str] = new_client_nonce) -> None:
        if mechanism not in _HASHES:
            raise ValueError(f"not a SCRAM mechanism: {mechanism!r} (supported: {', '.join(SCRAM_MECHANISMS)})")
        self.mechanism = mechanism
        self._hash_name = _HASHES[mechanism]
        self._username = username
        self._password = password
        self._nonce = nonce()
        self._state = _ScramState.SEND_CLIENT_FIRST
        self._client_first_bare = ""
        self._expected_server_signature = b""

    def __repr__(self) -> str:
        return f"ScramSaslClient({self.mechanism}, {self._username!r}, {self._state.value})"

    @property
    def complete(self) -> bool:
        return self._state is _ScramState.COMPLETE

    def initial_response(self) -> bytes:
        if self._state is not _ScramState.SEND_CLIENT_FIRST:
            raise SaslClientError(f"SASL/{self.mechanism}: the client-first message was already sent")
        self._client_first_bare = f"n={encode_sasl_name(self._username)},r={self._nonce}"
        self._state = _ScramState.RECEIVE_SERVER_FIRST
        return (_GS2_HEADER + self._client_first_bare).encode()

    def evaluate(self, challenge: bytes) -> bytes | None:
        try:
            if self._state is _ScramState.RECEIVE_SERVER_FIRST:
                return self._client_final(challenge)
            if self._state is _ScramState.RECEIVE_SERVER_FINAL:
                self._check_server_final(challenge)
                return None
        except SaslClientError:
            self._state = _ScramState.FAILED
            self._password = ""
            raise
        raise SaslClientError(f"unexpected SASL/{self.mechanism} challenge in state {self._state.value}")

    def _client_final(self, server_first: bytes) -> bytes:
        text = self._text(server_first, "server-first")
        fields = text.split(",")
        if fields[0].startswith("m="):
            raise SaslClientError(f"SASL/{self.mechanism}: the server asks for a mandatory extension")
        if len(fields) < 3 or not fields[0].startswith("r=") or not fields[1].startswith("s=") \
                or not fields[2].startswith("i="):
            raise SaslClientError(f"SASL/{self.mechanism}: the server-first message is not r=…,s=…,i=…")
        combined_nonce = fields[0][2:]
        if not combined_nonce.startswith(self._nonce) or len(combined_nonce) == len(self._nonce):
            raise SaslClientError(f"SASL/{self.mechanism}: the server-first nonce does not extend the client's")
        try:
            salt = base64.b64decode(fields[1][2:], validate=True)
            iterations = int(fields[2][2:])
        except (binascii.Error, ValueError):
            raise SaslClientError(f"SASL/{self.mechanism}: the server-first salt or iteration count is "
                                  "malformed") from None
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise SaslClientError(f"SASL/{self.mechanism}: the server asks for {iterations} iterations, outside "
                                  f"{MIN_ITERATIONS}-{MAX_ITERATIONS}")
        salted = salted_password(self.mechanism, self._password, salt, iterations)
        self._password = ""  # not needed any more
        client_key = hmac.digest(salted, b"Client Key", self._hash_name)
        stored_key = hashlib.new(self._hash_name, client_key).digest()
        channel_binding = base64.b64encode(_GS2_HEADER.encode()).decode()
        without_proof = f"c={channel_binding},r={combined_nonce}"
        auth_message = f"{self._client_first_bare},{text},{without_proof}".encode()
        client_signature = hmac.digest(stored_key, auth_message, self._hash_name)
        proof = bytes(a ^ b for a, b in zip(client_key, client_signature, strict=True))
        server_key = hmac.digest(salted, b"Server Key", self._hash_name)
        self._expected_server_signature = hmac.digest(server_key, auth_message, self._hash_name)
        self._state = _ScramState.RECEIVE_SERVER_FINAL
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def _check_server_final(self, server_final: bytes) -> None:
        text = self._text(server_final, "server-final")
        field = text.split(",")[0]
        if field.startswith("e="):
            raise SaslClientError(f"SASL/{self.mechanism}: the server refused the proof: {field[2:]}")
        if not field.startswith("v="):
            raise SaslClientError(f"SASL/{self.mechanism}: the server-final message is not v=…")
        try:
            signature = base64.b64decode(field[2:], validate=True)
        except binascii.Error:
            raise SaslClientError(f"SASL/{self.mechanism}: the server signature is not base64") from None
        if not hmac.compare_digest(signature, self._expected_server_signature):
            raise SaslClientError(f"SASL/{self.mechanism}: the server signature does not match: the server does "
                                  "not know this user's credential")
        self._state = _ScramState.COMPLETE

    def _text(self, message: bytes, what: str) -> str:
        try:
            return message.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslClientError(f"SASL/{self.mechanism}: the {what} message is not UTF-8") from None


# -- OAUTHBEARER ------------------------------------------------------------------------------

ClaimValue = str | int | float | tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class UnsecuredTokenConfig:
    """What an unsecured JWT says: `principal` in claim `principal_claim_name`, "iat" now
    and "exp" `lifetime_s` later, any other `claims` (such as "scope"), and the SASL
    `extensions` sent beside the token."""

    principal: str
    principal_claim_name: str = "sub"
    lifetime_s: int = 3600
    claims: tuple[tuple[str, ClaimValue], ...] = ()
    extensions: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not self.principal.strip():
            raise ValueError("the token's principal is blank")
        if not self.principal_claim_name.strip():
            raise ValueError("the principal claim name is blank")
        if self.lifetime_s <= 0:
            raise ValueError(f"the token's lifetime must be positive, not {self.lifetime_s} seconds")
        for name, _value in self.claims:
            if name in _RESERVED_CLAIMS or name == self.principal_claim_name:
                raise ValueError(f"claim {name!r} cannot be set: the client sets it")
        for name, value in self.extensions:
            if not _EXTENSION_NAME.fullmatch(name) or name == "auth":
                raise ValueError(f"SASL extension name {name!r} must be letters only, and not 'auth'")
            if not _EXTENSION_VALUE.fullmatch(value):
                raise ValueError(f"SASL extension {name!r} has a value with characters RFC 7628 does not allow")

    @classmethod
    def from_librdkafka(cls, text: str) -> UnsecuredTokenConfig:
        """From librdkafka's `sasl.oauthbearer.config`: space-separated `principal=<name>`
        (required), `principalClaimName=`, `scope=<a,b>`, `scopeClaimName=`,
        `lifeSeconds=`, `extension_<name>=<value>`. ValueError naming a bad key."""
        values: dict[str, str] = {}
        extensions: list[tuple[str, str]] = []
        for pair in text.split():
            key, equals, value = pair.partition("=")
            if not equals or not key:
                raise ValueError(f"{pair.split('=')[0]!r} is not <name>=<value>")
            if key.startswith("extension_"):
                extensions.append((key[len("extension_"):], value))
            elif key in ("principal", "principalClaimName", "scope", "scopeClaimName", "lifeSeconds"):
                if key in values:
                    raise ValueError(f"{key} is given twice")
                values[key] = value
            else:
                raise ValueError(f"unknown key {key!r} (known: principal, principalClaimName, scope, "
                                 "scopeClaimName, lifeSeconds, extension_<name>)")
        if "principal" not in values:
            raise ValueError("principal=<name> is required")
        scope = tuple(element for element in values.get("scope", "").split(",") if element)
        claims: tuple[tuple[str, ClaimValue], ...] = ((values.get("scopeClaimName", "scope"), scope),) if scope else ()
        return cls(principal=values["principal"], principal_claim_name=values.get("principalClaimName", "sub"),
                   lifetime_s=_whole_seconds(values.get("lifeSeconds", "3600"), "lifeSeconds"), claims=claims,
                   extensions=tuple(extensions))

    @classmethod
    def from_jaas_options(cls, options: Mapping[str, str]) -> UnsecuredTokenConfig:
        """From the options of Java's OAuthBearerLoginModule entry:
        `unsecuredLoginStringClaim_sub="alice"` (the principal claim, required),
        `unsecuredLoginStringClaim_/NumberClaim_/ListClaim_<name>` (a list's first
        character is its delimiter), `unsecuredLoginExtension_<name>`,
        `unsecuredLoginPrincipalClaimName`, `unsecuredLoginScopeClaimName` (whose claim
        is a list: a string claim of that name is split on spaces),
        `unsecuredLoginLifetimeSeconds`. ValueError naming a bad option."""
        principal_claim_name = options.get(JAAS_PRINCIPAL_CLAIM_NAME, "").strip() or "sub"
        scope_claim_name = options.get(JAAS_SCOPE_CLAIM_NAME, "").strip() or "scope"
        claims: dict[str, ClaimValue] = {}
        extensions: list[tuple[str, str]] = []
        for option, value in options.items():
            for prefix in (JAAS_STRING_CLAIM, JAAS_NUMBER_CLAIM, JAAS_LIST_CLAIM):
                if option.startswith(prefix):
                    name = option[len(prefix):]
                    if not name or name in claims:
                        raise ValueError(f"option {option} names no claim, or one given twice")
                    claims[name] = _jaas_claim(prefix, option, value)
            if option.startswith(JAAS_EXTENSION):
                extensions.append((option[len(JAAS_EXTENSION):], value))
        principal = claims.pop(principal_claim_name, None)
        if not isinstance(principal, str):
            raise ValueError(f"option {JAAS_STRING_CLAIM}{principal_claim_name}=\"<principal>\" is required")
        scope = claims.get(scope_claim_name)
        if isinstance(scope, str):
            claims[scope_claim_name] = tuple(scope.split())
        return cls(principal=principal, principal_claim_name=principal_claim_name,
                   lifetime_s=_whole_seconds(options.get(JAAS_LIFETIME_SECONDS, "3600"), JAAS_LIFETIME_SECONDS),
                   claims=tuple(claims.items()), extensions=tuple(extensions))

    def token(self, now_s: float) -> str:
        """An unsecured JWS compact serialization issued at `now_s` (seconds since the epoch)."""
        issued_at = math.floor(now_s)
        claims: dict[str, object] = {name: list(value) if isinstance(value, tuple) else value
                                     for name, value in self.claims}
        claims.update({self.principal_claim_name: self.principal, "iat": issued_at,
                       "exp": issued_at + self.lifetime_s})
        return f"{_base64url({'alg': 'none'})}.{_base64url(claims)}."


def _jaas_claim(prefix: str, option: str, value: str) -> ClaimValue:
    if prefix == JAAS_NUMBER_CLAIM:
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"option {option} is not a number") from None
        if not math.isfinite(number):
            raise ValueError(f"option {option} is not a finite number")
        return int(number) if number.is_integer() else number
    if prefix == JAAS_LIST_CLAIM:
        text = value.strip()
        if not text:
            return ()
        return tuple(element for element in text[1:].split(text[0]) if element)
    return value


def _whole_seconds(value: str, name: str) -> int:
    try:
        seconds = int(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} is not a whole number of seconds") from None
    if seconds <= 0:
        raise ValueError(f"{name}={value} must be positive")
    return seconds


def _base64url(document: object) -> str:
    encoded = json.dumps(document, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(encoded).rstrip(b"=").decode()


class OAuthBearerSaslClient:
    """One OAUTHBEARER exchange with an unsecured token made when the exchange starts;
    `clock` gives the time in seconds since the epoch."""

    mechanism = OAUTHBEARER

    def __init__(self, config: UnsecuredTokenConfig, *, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self._clock = clock
        self._sent = False
        self.complete = False
        self.server_error: str | None = None  # RFC 7628's JSON error, once the server sent one

    def initial_response(self) -> bytes:
        self._sent = True
        extensions = "".join(f"{name}={value}{_SEPARATOR}" for name, value in self.config.extensions)
        token = self.config.token(self._clock())
        return f"{_GS2_HEADER}{_SEPARATOR}auth=Bearer {token}{_SEPARATOR}{extensions}{_SEPARATOR}".encode()

    def evaluate(self, challenge: bytes) -> bytes | None:
        if not self._sent or self.complete or self.server_error is not None:
            raise SaslClientError("unexpected SASL/OAUTHBEARER challenge: the exchange has finished")
        if not challenge:
            self.complete = True
            return None
        # The token was refused: acknowledge the error, and the server fails the exchange
        # with it as its message.
        self.server_error = challenge.decode("utf-8", "replace")
        return _SEPARATOR.encode()

"""SASL/OAUTHBEARER (RFC 7628) with Kafka's unsecured JWS validation: for development
only, since any client can write itself such a token.

The client's one message:

    n,[a=<authzid>],\\x01auth=Bearer <token>\\x01[<key>=<value>\\x01…]\\x01

The token is an unsecured JWT: base64url(header) "." base64url(claims) "." with header
{"alg":"none"} and an empty signature. As Kafka's OAuthBearerUnsecuredValidatorCallbackHandler,
the claims must hold the principal claim (default "sub", a non-blank string) and "exp"
(seconds since the epoch, may be fractional) not in the past beyond the allowed clock skew;
"iat", if present, must not be in the future beyond it and must be before "exp"; and the
token's scope must hold every required scope element.

A token that fails gets no error yet: the server answers with RFC 7628's JSON error
({"status":"invalid_token"}, or "insufficient_scope" with the required "scope"), the client
acknowledges it with a lone \\x01, and only then does the server fail, with that JSON as the
message, as Kafka's OAuthBearerSaslServer. Extensions are accepted and ignored.

Deviations from Kafka: a string scope claim is split on spaces (RFC 8693's format; Kafka
takes the whole string as one scope element), and a token's parts may use either base64
alphabet (Kafka decodes only the standard one, although base64url is JWT's).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from oncelog.clock import now_ms
from oncelog.security.sasl.mechanism import (
    IllegalSaslStateError,
    SaslAuthenticationError,
    invalid_credentials_message,
)
from oncelog.security.sasl.scram import decode_sasl_name

MECHANISM = "OAUTHBEARER"
LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
_SEPARATOR = "\x01"
_KEY = re.compile(r"[A-Za-z]+")
_VALUE = re.compile(r"[\x21-\x7e \t\r\n]+")
_AUTH = re.compile(r"(\w+) +([-_~+/.a-zA-Z0-9]+=*)")
_MAX_EXPIRY_MS = 2.0**62  # an "exp" beyond the year 146 million is as good as never
_SCOPE_ITEM = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+")  # RFC 6749 section 3.3

# The broker-side options of the OAuthBearerLoginModule JAAS entry.
PRINCIPAL_CLAIM_NAME_OPTION = "unsecuredValidatorPrincipalClaimName"
SCOPE_CLAIM_NAME_OPTION = "unsecuredValidatorScopeClaimName"
REQUIRED_SCOPE_OPTION = "unsecuredValidatorRequiredScope"
ALLOWABLE_CLOCK_SKEW_MS_OPTION = "unsecuredValidatorAllowableClockSkewMs"


@dataclass(frozen=True, slots=True, kw_only=True)
class OAuthBearerSettings:
    """How the broker validates unsecured tokens."""

    principal_claim_name: str = "sub"
    scope_claim_name: str = "scope"
    required_scope: tuple[str, ...] = ()
    allowable_clock_skew_ms: int = 0

    def __post_init__(self) -> None:
        if not self.principal_claim_name.strip() or not self.scope_claim_name.strip():
            raise ValueError("the principal and scope claim names must not be blank")
        if self.allowable_clock_skew_ms < 0:
            raise ValueError(f"the allowable clock skew must not be negative: {self.allowable_clock_skew_ms} ms")
        for element in self.required_scope:
            if not _SCOPE_ITEM.fullmatch(element):
                raise ValueError(f"invalid scope element: {element!r}")

    @classmethod
    def from_jaas_options(cls, options: Mapping[str, str]) -> OAuthBearerSettings:
        """From the options of the listener's OAuthBearerLoginModule entry (the client's
        unsecuredLoginStringClaim_… options are ignored); blank options take the defaults.
        ValueError for a malformed option."""
        skew_text = options.get(ALLOWABLE_CLOCK_SKEW_MS_OPTION, "").strip()
        try:
            skew = int(skew_text) if skew_text else 0
        except ValueError:
            raise ValueError(f"{ALLOWABLE_CLOCK_SKEW_MS_OPTION} must be an integer number of milliseconds, "
                             f"not {skew_text!r}") from None
        return cls(
            principal_claim_name=options.get(PRINCIPAL_CLAIM_NAME_OPTION, "").strip() or "sub",
            scope_claim_name=options.get(SCOPE_CLAIM_NAME_OPTION, "").strip() or "scope",
            required_scope=tuple(options.get(REQUIRED_SCOPE_OPTION, "").split()),
            allowable_clock_skew_ms=skew,
        )


class _InvalidToken(Exception):
    def __init__(self, reason: str, *, required_scope: tuple[str, ...] | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.required_scope = required_scope

    def challenge(self) -> str:
        """RFC 7628's server error message."""
        if self.required_scope is not None:
            return json.dumps({"status": "insufficient_scope", "scope": " ".join(self.required_scope)},
                              separators=(",", ":"))
        return json.dumps({"status": "invalid_token"}, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class _ValidToken:
    principal_name: str
    expiry_ms: int


class OAuthBearerSaslServer:
    """One OAUTHBEARER exchange; `clock` gives the time in ms since the epoch."""

    mechanism = MECHANISM

    def __init__(self, settings: OAuthBearerSettings, *, clock: Callable[[], int] = now_ms) -> None:
        self._settings = settings
        self._clock = clock
        self._principal_name: str | None = None
        self._session_lifetime_ms: int | None = None
        self._pending_error: str | None = None  # the JSON challenge the client must acknowledge
        self._failed = False
        self.extensions: dict[str, str] = {}
        self.failure_reason: str | None = None  # why the token was refused: for the broker's log

    @property
    def complete(self) -> bool:
        return self._principal_name is not None

    @property
    def principal(self) -> str:
        if self._principal_name is None:
            raise RuntimeError("SASL/OAUTHBEARER authentication has not completed")
        return f"User:{self._principal_name}"

    @property
    def session_lifetime_ms(self) -> int | None:
        return self._session_lifetime_ms

    def evaluate(self, token: bytes) -> bytes:
        if self._failed or self.complete:
            raise IllegalSaslStateError("Unexpected SASL/OAUTHBEARER token: the authentication exchange has finished")
        if token == _SEPARATOR.encode() and self._pending_error is not None:
            self._failed = True
            raise SaslAuthenticationError(self._pending_error, log_detail=self.failure_reason)
        self._pending_error = None  # anything else is a new initial response, as Kafka
        try:
            authorization_id, token_value, self.extensions = _parse_initial_response(token)
        except ValueError as malformed:
            self._failed = True
            raise SaslAuthenticationError(invalid_credentials_message(MECHANISM),
                                          log_detail=f"malformed OAUTHBEARER message: {malformed}") from None
        now = self._clock()
        try:
            valid = _validate_unsecured_token(token_value, self._settings, now)
        except _InvalidToken as invalid:
            self.failure_reason = invalid.reason
            self._pending_error = invalid.challenge()
            return self._pending_error.encode()
        if authorization_id and authorization_id != valid.principal_name:
            self._failed = True
            raise SaslAuthenticationError(
                f"Authentication failed: Client requested an authorization id ({authorization_id}) that is different "
                f"from the token's principal name ({valid.principal_name})")
        self._principal_name = valid.principal_name
        # At least 1: a SaslAuthenticate session lifetime of 0 means "no limit".
        self._session_lifetime_ms = max(1, valid.expiry_ms - now)
        return b""


def _parse_initial_response(token: bytes) -> tuple[str, str, dict[str, str]]:
    """(authorization id or "", token, extensions) of a client initial response."""
    try:
        text = token.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("not UTF-8") from None
    if not text.startswith("n,"):
        raise ValueError("the gs2 header must start 'n,' (channel binding is not supported)")
    header_end = text.find(",", 2)
    if header_end < 0:
        raise ValueError("the gs2 header is not terminated")
    authorization_field = text[2:header_end]
    if authorization_field and not authorization_field.startswith("a="):
        raise ValueError("the gs2 header has something other than a=<authzid>")
    authorization_id = decode_sasl_name(authorization_field[2:]) if authorization_field else ""
    body = text[header_end + 1:]
    if len(body) < 2 or not body.startswith(_SEPARATOR) or not body.endswith(_SEPARATOR):
        raise ValueError("key-value pairs must be framed by \\x01")
    pairs_text = body[1:-1]
    if pairs_text and not pairs_text.endswith(_SEPARATOR):
        raise ValueError("the last key-value pair is not terminated by \\x01")
    pairs: dict[str, str] = {}
    for pair in pairs_text[:-1].split(_SEPARATOR) if pairs_text else []:
        key, equals, value = pair.partition("=")
        if not equals or not _KEY.fullmatch(key) or not _VALUE.fullmatch(value):
            raise ValueError("a key-value pair is not <letters>=<printable value>")
        if key in pairs:
            raise ValueError(f"key {key!r} is given twice")
        pairs[key] = value
    auth = pairs.pop("auth", None)
    if auth is None:
        raise ValueError("'auth' not specified")
    match = _AUTH.fullmatch(auth)
    if match is None or match[1].lower() != "bearer":
        raise ValueError("'auth' is not 'Bearer <token>'")
    return authorization_id, match[2], pairs


def _validate_unsecured_token(token: str, settings: OAuthBearerSettings, now_ms: int) -> _ValidToken:
    """The principal name and expiry of an unsecured JWS; raises _InvalidToken."""
    if ".." in token:
        raise _InvalidToken("Malformed compact serialization contains '..'")
    parts = token.split(".")
    if len(parts) != 3:
        raise _InvalidToken("Unsecured JWS compact serializations must have 3 dot-separated Base64URL-encoded values")
    header, claims = _json_object(parts[0]), _json_object(parts[1])
    if header.get("alg") != "none":
        raise _InvalidToken("Unsecured JWS must have 'none' for an algorithm")
    if parts[2]:
        raise _InvalidToken("Unsecured JWS must not contain a digital signature")
    principal_claim = settings.principal_claim_name.strip()
    principal_name = claims.get(principal_claim)
    if principal_name is None:
        raise _InvalidToken(f"Required claim missing: {principal_claim}")
    if not isinstance(principal_name, str) or not principal_name.strip():
        raise _InvalidToken(f"No principal name in JWT claim: {principal_claim}")
    expiration = _time_claim(claims, "exp")
    if expiration is None:
        raise _InvalidToken("No expiration time in JWT")
    issued_at = _time_claim(claims, "iat")
    skew = settings.allowable_clock_skew_ms
    if issued_at is not None and 1000 * issued_at > now_ms + skew:
        raise _InvalidToken(f"The Issued At value ({issued_at} seconds) was after the indicated time ({now_ms} ms) "
                            f"plus allowable clock skew ({skew} ms)")
    if now_ms - skew >= 1000 * expiration:
        raise _InvalidToken(f"The indicated time ({now_ms} ms) minus allowable clock skew ({skew} ms) was on or after "
                            f"the Expiration Time value ({expiration} seconds)")
    if issued_at is not None and expiration <= issued_at:
        raise _InvalidToken(f"The Expiration Time ({expiration} seconds) was not after the Issued At time "
                            f"({issued_at} seconds)")
    scope = _scope(claims, settings.scope_claim_name.strip())
    for element in settings.required_scope:
        if element not in scope:
            raise _InvalidToken(f"The provided scope ({sorted(scope)}) was missing a required scope ({element})",
                                required_scope=settings.required_scope)
    return _ValidToken(principal_name=principal_name, expiry_ms=round(min(expiration * 1000, _MAX_EXPIRY_MS)))


def _json_object(part: str) -> dict[str, Any]:
    try:
        decoded = base64.urlsafe_b64decode(part.replace("+", "-").replace("/", "_") + "=" * (-len(part) % 4))
        document = json.loads(decoded)
    except (binascii.Error, ValueError):
        raise _InvalidToken("malformed Base64 URL encoded value or JSON") from None
    if not isinstance(document, dict):
        raise _InvalidToken("a JWS part is not a JSON object")
    return document


def _time_claim(claims: Mapping[str, Any], name: str) -> float | None:
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _InvalidToken(f"The '{name}' claim was not a number")
    try:
        seconds = float(value)
    except OverflowError:
        seconds = math.inf
    if not math.isfinite(seconds):
        raise _InvalidToken(f"The '{name}' claim was not a finite number")
    return seconds


def _scope(claims: Mapping[str, Any], scope_claim_name: str) -> set[str]:
    value = claims.get(scope_claim_name)
    if value is None:
        return set()
    if isinstance(value, str):
        return set(value.split())
    if isinstance(value, list) and all(isinstance(element, str) for element in value):
        return {element.strip() for element in value if element.strip()}
    raise _InvalidToken(f"The '{scope_claim_name}' claim was neither a string nor a list of strings")

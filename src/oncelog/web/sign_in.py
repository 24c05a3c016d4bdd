"""Who an HTTP request is: its HTTP Basic credentials, a SASL user's (a SCRAM credential
or a listener's PLAIN user, checked by the console's backend), without letting password
guessing cost the broker.

- A successful check is remembered for `CACHE_TTL_S` under a keyed hash (HMAC-SHA256 with
  a key made at start) of the Authorization header, never the password: the console's
  polling every 2 s costs one SCRAM key derivation (PBKDF2) a minute, not thirty. A
  password changed or a user removed meanwhile still signs in until the entry expires.
- Checks run one at a time, on the calling HTTP worker thread (the SCRAM credential is
  read on the broker's loop; the key derivation never runs there), so guesses from any
  number of clients derive at most one key at a time.
- Each client address (an IPv6 address's /64) has a token bucket of `FAILURE_BURST`
  failed sign-ins, refilled at one per `FAILURE_REFILL_S`: a check takes a token and a
  successful one gives it back. With none left, credentials from that address are refused
  (429, Retry-After) without being checked. Sustained, an address guesses once every 2 s.
- A refused sign-in is answered after `connection.failed.authentication.delay.ms` (Kafka's
  delay before it closes a connection whose authentication failed), held by the listener's
  loop (oncelog.web.server), not by a thread.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

CACHE_TTL_S = 60.0
CACHE_ENTRIES = 1024
FAILURE_BURST = 10
FAILURE_REFILL_S = 2.0  # one failed sign-in more per this long, per client address
TRACKED_ADDRESSES = 4096  # buckets kept (least recently used dropped: a full bucket again)

Authenticate = Callable[[str, str], "str | None"]  # (user, password) -> principal, or None


class Outcome(Enum):
    SIGNED_IN = "signed in"
    NO_CREDENTIALS = "no credentials"
    WRONG = "wrong user name or password"
    LIMITED = "too many failed sign-ins from this address"


@dataclass(frozen=True, slots=True)
class SignIn:
    outcome: Outcome
    principal: str | None = None
    retry_after_s: float = 0.0  # LIMITED: when the address may try again


class SignIns:
    """Called on the HTTP worker threads."""

    def __init__(self, authenticate: Authenticate, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._authenticate = authenticate
        self._clock = clock
        self._key = secrets.token_bytes(32)
        self._state = threading.Lock()  # the cache and the buckets, held briefly
        self._checking = threading.Lock()  # one password check at a time
        self._cache: OrderedDict[bytes, tuple[str, float]] = OrderedDict()  # digest -> (principal, expiry)
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # address -> (tokens, when)

    def check(self, authorization: str, client_host: str) -> SignIn:
        """The outcome of an Authorization header's value from `client_host`."""
        if not authorization:
            return SignIn(Outcome.NO_CREDENTIALS)
        digest = hmac.digest(self._key, authorization.encode("utf-8", "surrogateescape"), hashlib.sha256)
        now = self._clock()
        address = _bucket_key(client_host)
        with self._state:
            cached = self._cached(digest, now)
            if cached is not None:
                return SignIn(Outcome.SIGNED_IN, cached)
            tokens = self._tokens(address, now)
            if tokens < 1:
                return SignIn(Outcome.LIMITED, retry_after_s=(1 - tokens) * FAILURE_REFILL_S)
            self._set_tokens(address, tokens - 1, now)  # taken before the check: concurrent guesses wait for it
        with self._checking:
            principal = self._principal(authorization)
        with self._state:
            now = self._clock()
            if principal is None:
                return SignIn(Outcome.WRONG)
            self._set_tokens(address, self._tokens(address, now) + 1, now)
            self._cache[digest] = (principal, now + CACHE_TTL_S)
            while len(self._cache) > CACHE_ENTRIES:
                self._cache.popitem(last=False)
        return SignIn(Outcome.SIGNED_IN, principal)

    def _principal(self, authorization: str) -> str | None:
        scheme, _, encoded = authorization.partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            user, separator, password = base64.b64decode(encoded.strip(), validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        if not separator or not user:
            return None
        return self._authenticate(user, password)

    def _cached(self, digest: bytes, now: float) -> str | None:
        entry = self._cache.get(digest)
        if entry is None:
            return None
        principal, expiry = entry
        if expiry <= now:
            del self._cache[digest]
            return None
        return principal

    def _tokens(self, address: str, now: float) -> float:
        tokens, when = self._buckets.get(address, (float(FAILURE_BURST), now))
        return min(FAILURE_BURST, tokens + (now - when) / FAILURE_REFILL_S)

    def _set_tokens(self, address: str, tokens: float, now: float) -> None:
        self._buckets[address] = (min(tokens, FAILURE_BURST), now)
        self._buckets.move_to_end(address)
        while len(self._buckets) > TRACKED_ADDRESSES:
            self._buckets.popitem(last=False)


def _bucket_key(client_host: str) -> str:
    """The client's address; an IPv6 one by its /64, which one subscriber usually holds whole."""
    try:
        address = ipaddress.ip_address(client_host)
    except ValueError:
        return client_host
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network(f"{address}/64", strict=False))
    return str(address)

"""SASL/PLAIN (RFC 4616) against the users of the listener's JAAS config, as Kafka's
PlainSaslServer and PlainServerCallbackHandler.

One client message, `authzid NUL authcid NUL passwd` (UTF-8); the server answers with an
empty token and is complete. Users come from the `user_<name>="<password>"` options of a
PlainLoginModule entry (`parse_plain_jaas_users`). The messages are Kafka's: PLAIN sends
its specific reasons to the client, since a password check over TLS reveals no more than
its own outcome.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from oncelog.security.sasl.jaas import parse_jaas_config
from oncelog.security.sasl.mechanism import IllegalSaslStateError, SaslAuthenticationError

MECHANISM = "PLAIN"
LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
_USER_PREFIX = "user_"


def parse_plain_jaas_users(jaas_config: str) -> dict[str, str]:
    """{user: password} from the `user_<name>` options of a PlainLoginModule entry (its
    `username`/`password` options are the broker's own client credentials, not users).
    ValueError for a malformed config or another login module; never echoes a password."""
    entry = parse_jaas_config(jaas_config)
    if entry.login_module != LOGIN_MODULE:
        raise ValueError(f"JAAS config: SASL/PLAIN needs login module {LOGIN_MODULE}, not {entry.login_module}")
    users: dict[str, str] = {}
    for key, password in entry.options.items():
        if key.startswith(_USER_PREFIX):
            user = key[len(_USER_PREFIX):]
            if not user:
                raise ValueError(f"JAAS config: option {key!r} names no user")
            users[user] = password
    return users


class PlainSaslServer:
    """One SASL/PLAIN exchange; `users` maps user names to passwords."""

    mechanism = MECHANISM
    session_lifetime_ms: int | None = None

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = users
        self._finished = False
        self._user: str | None = None

    @property
    def complete(self) -> bool:
        return self._user is not None

    @property
    def principal(self) -> str:
        if self._user is None:
            raise RuntimeError("SASL/PLAIN authentication has not completed")
        return f"User:{self._user}"

    def evaluate(self, token: bytes) -> bytes:
        if self._finished:
            raise IllegalSaslStateError("Unexpected SASL/PLAIN token: the authentication exchange has finished")
        self._finished = True  # one message, whatever its outcome
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslAuthenticationError("Invalid SASL/PLAIN response: not UTF-8") from None
        fields = text.split("\x00")
        if len(fields) != 3:
            raise SaslAuthenticationError(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(fields)}")
        authorization_id, user, password = fields
        if not user:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationError("Authentication failed: password not specified")
        expected = self._users.get(user)
        # Compared even for an unknown user, so that the time taken does not tell.
        matches = hmac.compare_digest(password.encode(), (expected if expected is not None else "\x00").encode())
        if expected is None or not matches:
            raise SaslAuthenticationError("Authentication failed: Invalid username or password",
                                          log_detail=f"wrong password for user {user!r}" if expected is not None
                                          else f"unknown user {user!r}")
        if authorization_id and authorization_id != user:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different from username")
        self._user = user
        return b""

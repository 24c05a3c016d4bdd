"""What every SASL mechanism's server is: the `SaslServer` protocol, its errors, and the
message Kafka sends a client whose credentials were refused.

A server is a state machine over the tokens of one exchange (SaslAuthenticate's
`auth_bytes`), with no I/O: the broker hands it each token and sends back what
`evaluate` returns, or the error's `message` with SASL_AUTHENTICATION_FAILED.
"""

from __future__ import annotations

from typing import Protocol


class SaslAuthenticationError(Exception):
    """The exchange failed. `message` is safe to send to the (unauthenticated) client: it
    never holds a secret and never says whether a user exists. `log_detail` says why, for
    the broker's log only (it may name the user; it never holds a password or key)."""

    def __init__(self, message: str, *, log_detail: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.log_detail = log_detail


class IllegalSaslStateError(SaslAuthenticationError):
    """A token arrived when the exchange expected none (after it completed or failed):
    Kafka answers ILLEGAL_SASL_STATE."""


def invalid_credentials_message(mechanism: str) -> str:
    """Kafka's one message for every failure whose cause must not reach the client
    (unknown user, wrong password, malformed message)."""
    return f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"


class SaslServer(Protocol):
    """The server side of one SASL exchange, for one connection."""

    @property
    def mechanism(self) -> str: ...

    @property
    def complete(self) -> bool:
        """True once the client is authenticated (never after a failure)."""

    @property
    def principal(self) -> str:
        """`User:<name>`; only once `complete` (raises RuntimeError before)."""

    @property
    def session_lifetime_ms(self) -> int | None:
        """How long the session may last before the client must re-authenticate: the
        OAUTHBEARER token's remaining lifetime; None for the other mechanisms."""

    def evaluate(self, token: bytes) -> bytes:
        """The response to the client's `token`; raises SaslAuthenticationError when the
        exchange fails (the server is then finished)."""

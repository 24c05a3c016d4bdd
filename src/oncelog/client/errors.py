"""What the client raises. A broker's error code travels as `BrokerError` (with kio's
`ErrorCode`, whose `retriable` flag mirrors Kafka's); a connection that failed or timed out
as `ConnectionLost`; a SASL exchange that failed as `AuthenticationFailed`, never retried;
a retry loop that ran out of time as `NoAnswer`, naming what it tried and the last thing
that went wrong."""

from __future__ import annotations

from kio.schema.errors import ErrorCode


class ClientError(Exception):
    """Base class of the client's errors."""


class ConnectionLost(ClientError, OSError):
    """The connection to a broker failed, was closed, or a response did not come in time.
    Whether a request sent on it took effect is unknown."""


class UnsupportedVersion(ClientError):
    """The broker offers no version of an API this client can use."""


class BrokerError(ClientError):
    """A broker answered with an error code."""

    def __init__(self, code: ErrorCode, what: str, message: str | None = None) -> None:
        detail = f"{what}: {code.name.upper()}"
        if message:
            detail += f" ({message})"
        super().__init__(detail)
        self.code = code
        self.what = what

    @property
    def retriable(self) -> bool:
        return self.code in RETRIABLE


class AuthenticationFailed(BrokerError):
    """The SASL exchange on a new connection failed: SASL_AUTHENTICATION_FAILED (wrong
    credentials, or a server signature that did not match), UNSUPPORTED_SASL_MECHANISM,
    ILLEGAL_SASL_STATE. Not retriable: the same credentials fail again."""


class NoAnswer(ClientError):
    """A call kept failing with retriable errors until its deadline."""


class Fenced(BrokerError):
    """A newer producer with the same transactional id exists (PRODUCER_FENCED,
    INVALID_PRODUCER_EPOCH): this one may do nothing more."""


# Kafka's retriable codes, plus the coordinator answers a client retries after looking the
# coordinator up again, and CONCURRENT_TRANSACTIONS (a transaction still completing).
RETRIABLE = frozenset(
    code for code in ErrorCode if code.retriable
) | {
    ErrorCode.not_coordinator,
    ErrorCode.coordinator_not_available,
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.concurrent_transactions,
    ErrorCode.unstable_offset_commit,
}

# Answers meaning the metadata (a leader or a coordinator) this client used is stale.
STALE_LEADER = frozenset({
    ErrorCode.not_leader_or_follower,
    ErrorCode.leader_not_available,
    ErrorCode.fenced_leader_epoch,
    ErrorCode.unknown_leader_epoch,
    ErrorCode.unknown_topic_or_partition,
    ErrorCode.kafka_storage_error,
})
STALE_COORDINATOR = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_not_available})
FENCED = frozenset({ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch})


def raise_for(code: int, what: str, message: str | None = None) -> None:
    """Raise the error `code` stands for (nothing for NONE)."""
    if code == ErrorCode.none:
        return
    error = ErrorCode(code)
    if error in FENCED:
        raise Fenced(error, what, message)
    raise BrokerError(error, what, message)

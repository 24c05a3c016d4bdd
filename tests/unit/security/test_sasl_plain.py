"""SASL/PLAIN against JAAS users: Kafka's messages for each way it fails."""

from __future__ import annotations

import pytest

from oncelog.security.sasl import IllegalSaslStateError, SaslAuthenticationError
from oncelog.security.sasl.plain import PlainSaslServer

USERS = {"admin": "admin-secret", "alice": "alice-secret", "émile": "mot de passe"}


def test_good_password_completes_with_an_empty_response():
    server = PlainSaslServer(USERS)
    assert not server.complete
    assert server.evaluate(b"\x00alice\x00alice-secret") == b""
    assert server.complete
    assert server.principal == "User:alice"
    assert server.mechanism == "PLAIN"
    assert server.session_lifetime_ms is None


def test_utf8_user_and_password():
    server = PlainSaslServer(USERS)
    server.evaluate("\x00émile\x00mot de passe".encode())
    assert server.principal == "User:émile"


def test_authorization_id_equal_to_the_user_is_accepted():
    server = PlainSaslServer(USERS)
    server.evaluate(b"alice\x00alice\x00alice-secret")
    assert server.principal == "User:alice"


@pytest.mark.parametrize("token, message", [
    (b"\x00alice\x00wrong", "Authentication failed: Invalid username or password"),
    (b"\x00nobody\x00alice-secret", "Authentication failed: Invalid username or password"),
    (b"\x00alice\x00ALICE-SECRET", "Authentication failed: Invalid username or password"),
    (b"admin\x00alice\x00alice-secret",
     "Authentication failed: Client requested an authorization id that is different from username"),
    (b"\x00\x00alice-secret", "Authentication failed: username not specified"),
    (b"\x00alice\x00", "Authentication failed: password not specified"),
    (b"alice-secret", "Invalid SASL/PLAIN response: expected 3 tokens, got 1"),
    (b"\x00alice", "Invalid SASL/PLAIN response: expected 3 tokens, got 2"),
    (b"\x00alice\x00alice-secret\x00", "Invalid SASL/PLAIN response: expected 3 tokens, got 4"),
    (b"\x00alice\x00\xff", "Invalid SASL/PLAIN response: not UTF-8"),
], ids=["wrong password", "unknown user", "case matters", "authzid mismatch", "no user", "no password",
        "one token", "two tokens", "four tokens", "not utf-8"])
def test_refused(token, message):
    server = PlainSaslServer(USERS)
    with pytest.raises(SaslAuthenticationError) as failure:
        server.evaluate(token)
    assert failure.value.message == message
    assert "secret" not in message
    assert not server.complete


def test_one_message_only():
    server = PlainSaslServer(USERS)
    with pytest.raises(SaslAuthenticationError):
        server.evaluate(b"\x00alice\x00wrong")
    with pytest.raises(IllegalSaslStateError):
        server.evaluate(b"\x00alice\x00alice-secret")
    done = PlainSaslServer(USERS)
    done.evaluate(b"\x00alice\x00alice-secret")
    with pytest.raises(IllegalSaslStateError):
        done.evaluate(b"\x00alice\x00alice-secret")


def test_principal_before_completion_is_a_programming_error():
    with pytest.raises(RuntimeError):
        _ = PlainSaslServer(USERS).principal

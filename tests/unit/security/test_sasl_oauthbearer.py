"""SASL/OAUTHBEARER with unsecured JWTs: Kafka's validation and its error exchange (JSON
challenge, the client's \\x01, then the failure)."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from oncelog.security.sasl import IllegalSaslStateError, SaslAuthenticationError
from oncelog.security.sasl.oauthbearer import OAuthBearerSaslServer, OAuthBearerSettings

NOW_MS = 1_700_000_000_000
NOW_S = NOW_MS // 1000
INVALID_TOKEN = b'{"status":"invalid_token"}'


def b64url(document: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(document).encode()).rstrip(b"=").decode()


def unsecured_jwt(claims: dict[str, Any], header: dict[str, Any] | None = None, signature: str = "") -> str:
    return f"{b64url(header if header is not None else {'alg': 'none'})}.{b64url(claims)}.{signature}"


def initial_response(token: str, *, authorization_id: str = "", extensions: str = "") -> bytes:
    authzid = f"a={authorization_id}" if authorization_id else ""
    return f"n,{authzid},\x01auth=Bearer {token}\x01{extensions}\x01".encode()


def server(**settings: Any) -> OAuthBearerSaslServer:
    return OAuthBearerSaslServer(OAuthBearerSettings(**settings), clock=lambda: NOW_MS)


def refused(server: OAuthBearerSaslServer, token: bytes, challenge: bytes = INVALID_TOKEN) -> SaslAuthenticationError:
    """Drives Kafka's error exchange and returns the final failure."""
    assert server.evaluate(token) == challenge
    assert not server.complete
    with pytest.raises(SaslAuthenticationError) as failure:
        server.evaluate(b"\x01")
    assert failure.value.message == challenge.decode()
    return failure.value


def test_good_token():
    oauth = server()
    assert oauth.evaluate(initial_response(unsecured_jwt({"sub": "alice", "exp": NOW_S + 3600, "iat": NOW_S}))) == b""
    assert oauth.complete
    assert oauth.principal == "User:alice"
    assert oauth.session_lifetime_ms == 3_600_000
    assert oauth.mechanism == "OAUTHBEARER"


def test_fractional_exp():
    oauth = server()
    oauth.evaluate(initial_response(unsecured_jwt({"sub": "alice", "exp": NOW_S + 1.5})))
    assert oauth.session_lifetime_ms == 1500


def test_parts_in_the_standard_base64_alphabet_are_accepted():
    claims = {"sub": "alice", "exp": NOW_S + 60, "note": "\u00ff\u00ff\u00ff>>>???"}
    standard = base64.b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    assert "+" in standard or "/" in standard
    oauth = server()
    oauth.evaluate(initial_response(f"{b64url({'alg': 'none'})}.{standard}."))
    assert oauth.complete


def test_extensions_and_matching_authorization_id_are_accepted():
    oauth = server()
    token = unsecured_jwt({"sub": "alice", "exp": NOW_S + 60})
    extensions = "traceId=abc 1\x01logicalCluster=x\x01"
    oauth.evaluate(initial_response(token, authorization_id="alice", extensions=extensions))
    assert oauth.principal == "User:alice"
    assert oauth.extensions == {"traceId": "abc 1", "logicalCluster": "x"}


def test_authorization_id_different_from_the_principal_fails():
    oauth = server()
    with pytest.raises(SaslAuthenticationError, match=r"authorization id \(admin\) that is different from the "
                                                      r"token's principal name \(alice\)"):
        oauth.evaluate(initial_response(unsecured_jwt({"sub": "alice", "exp": NOW_S + 60}), authorization_id="admin"))


def test_principal_claim_name_is_configurable():
    oauth = server(principal_claim_name="email")
    oauth.evaluate(initial_response(unsecured_jwt({"email": "a@example.com", "sub": "x", "exp": NOW_S + 60})))
    assert oauth.principal == "User:a@example.com"


def test_expired_token():
    failure = refused(server(), initial_response(unsecured_jwt({"sub": "alice", "exp": NOW_S - 1})))
    assert "Expiration Time" in (failure.log_detail or "")


def test_token_expiring_now_is_expired_but_clock_skew_allows_it():
    token = initial_response(unsecured_jwt({"sub": "alice", "exp": NOW_S}))
    refused(server(), token)
    lenient = server(allowable_clock_skew_ms=1000)
    lenient.evaluate(token)
    assert lenient.complete
    assert lenient.session_lifetime_ms == 1  # never 0, which would mean "no limit"


@pytest.mark.parametrize("claims, reason", [
    ({"exp": NOW_S + 60}, "Required claim missing: sub"),
    ({"sub": "", "exp": NOW_S + 60}, "No principal name"),
    ({"sub": 42, "exp": NOW_S + 60}, "No principal name"),
    ({"sub": "alice"}, "No expiration time"),
    ({"sub": "alice", "exp": "tomorrow"}, "'exp' claim was not a number"),
    ({"sub": "alice", "exp": True}, "'exp' claim was not a number"),
    ({"sub": "alice", "exp": 10**400}, "'exp' claim was not a finite number"),
    ({"sub": "alice", "exp": NOW_S + 60, "iat": NOW_S + 30}, "Issued At"),
    ({"sub": "alice", "exp": NOW_S + 60, "iat": NOW_S + 60}, "Issued At"),
    ({"sub": "alice", "exp": NOW_S + 60, "scope": 7}, "neither a string nor a list"),
])
def test_invalid_claims(claims, reason):
    failure = refused(server(allowable_clock_skew_ms=0), initial_response(unsecured_jwt(claims)))
    assert reason in (failure.log_detail or "")


def test_iat_after_exp_is_refused():
    oauth = server(allowable_clock_skew_ms=60_000)
    failure = refused(oauth, initial_response(unsecured_jwt({"sub": "a", "exp": NOW_S + 10, "iat": NOW_S + 20})))
    assert "not after the Issued At" in (failure.log_detail or "")


@pytest.mark.parametrize("token, reason", [
    (unsecured_jwt({"sub": "alice", "exp": NOW_S + 60}, header={"alg": "HS256"}), "'none' for an algorithm"),
    (unsecured_jwt({"sub": "alice", "exp": NOW_S + 60}, header={}), "'none' for an algorithm"),
    (unsecured_jwt({"sub": "alice", "exp": NOW_S + 60}, signature="c2lnbmF0dXJl"), "must not contain a digital"),
    (unsecured_jwt({"sub": "alice", "exp": NOW_S + 60}).rstrip("."), "3 dot-separated"),
    (b64url({"alg": "none"}) + "..", "contains '..'"),
    (b64url({"alg": "none"}) + ".bm90IGpzb24.", "malformed"),
    (b64url({"alg": "none"}) + "." + b64url(["a list"]) + ".", "not a JSON object"),
])
def test_malformed_tokens(token, reason):
    failure = refused(server(), initial_response(token))
    assert reason in (failure.log_detail or "")


def test_required_scope():
    required = ("read", "write")
    as_string = unsecured_jwt({"sub": "alice", "exp": NOW_S + 60, "scope": "read write admin"})
    as_list = unsecured_jwt({"sub": "alice", "exp": NOW_S + 60, "scope": ["write", " read "]})
    for token in (as_string, as_list):
        oauth = server(required_scope=required)
        oauth.evaluate(initial_response(token))
        assert oauth.complete
    missing = unsecured_jwt({"sub": "alice", "exp": NOW_S + 60, "scope": "read"})
    failure = refused(server(required_scope=required), initial_response(missing),
                      challenge=b'{"status":"insufficient_scope","scope":"read write"}')
    assert "missing a required scope (write)" in (failure.log_detail or "")
    no_scope = unsecured_jwt({"sub": "alice", "exp": NOW_S + 60})
    refused(server(required_scope=required), initial_response(no_scope),
            challenge=b'{"status":"insufficient_scope","scope":"read write"}')


def test_scope_claim_name_is_configurable():
    oauth = server(scope_claim_name="scp", required_scope=("read",))
    oauth.evaluate(initial_response(unsecured_jwt({"sub": "a", "exp": NOW_S + 60, "scp": ["read"], "scope": "x"})))
    assert oauth.complete


def test_after_an_error_challenge_a_new_initial_response_is_evaluated_as_kafka():
    oauth = server()
    assert oauth.evaluate(initial_response(unsecured_jwt({"sub": "alice", "exp": NOW_S - 1}))) == INVALID_TOKEN
    oauth.evaluate(initial_response(unsecured_jwt({"sub": "alice", "exp": NOW_S + 60})))
    assert oauth.complete


def test_a_lone_control_a_without_an_error_is_malformed():
    with pytest.raises(SaslAuthenticationError, match="invalid credentials with SASL mechanism OAUTHBEARER"):
        server().evaluate(b"\x01")


@pytest.mark.parametrize("message", [
    b"",
    b"n,,auth=Bearer x.y.\x01\x01",                            # no \x01 after the gs2 header
    b"y,,\x01auth=Bearer x.y.\x01\x01",                        # channel binding flag
    b"n,,\x01auth=Bearer x.y.\x01",                            # not terminated by \x01\x01
    b"n,,\x01\x01",                                            # no auth
    b"n,,\x01host=example\x01\x01",                            # no auth
    b"n,,\x01auth=Basic dXNlcjpwYXNz\x01\x01",                 # not Bearer
    b"n,,\x01auth=Bearer\x01\x01",                             # no token
    b"n,,\x01auth=Bearer a b\x01\x01",                         # token with a space
    b"n,,\x01auth=Bearer x.y.\x01auth=Bearer z.y.\x01\x01",    # auth twice
    b"n,,\x01auth=Bearer x.y.\x01bad key=v\x01\x01",           # extension key not letters
    b"n,,\x01auth=Bearer x.y.\x01key=\x01\x01",                # empty extension value
    b"n,x=y,\x01auth=Bearer x.y.\x01\x01",                     # gs2 field other than a=
    b"n,a=bad=name,\x01auth=Bearer x.y.\x01\x01",              # bad authzid escape
    b"n,,\x01auth=Bearer x.y.\xff\x01\x01",                    # not UTF-8
], ids=repr)
def test_malformed_initial_responses_fail_with_the_generic_message(message):
    oauth = server()
    with pytest.raises(SaslAuthenticationError) as failure:
        oauth.evaluate(message)
    assert failure.value.message == \
        "Authentication failed during authentication due to invalid credentials with SASL mechanism OAUTHBEARER"
    with pytest.raises(IllegalSaslStateError):
        oauth.evaluate(initial_response(unsecured_jwt({"sub": "alice", "exp": NOW_S + 60})))


def test_token_after_completion_is_an_illegal_state():
    oauth = server()
    good = initial_response(unsecured_jwt({"sub": "alice", "exp": NOW_S + 60}))
    oauth.evaluate(good)
    with pytest.raises(IllegalSaslStateError):
        oauth.evaluate(good)
    with pytest.raises(RuntimeError):
        _ = server().principal


def test_settings_are_validated():
    with pytest.raises(ValueError):
        OAuthBearerSettings(principal_claim_name=" ")
    with pytest.raises(ValueError):
        OAuthBearerSettings(allowable_clock_skew_ms=-1)

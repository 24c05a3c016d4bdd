"""`new_sasl_server` makes each supported mechanism's server."""

from __future__ import annotations

import pytest

from oncelog.security.sasl import SUPPORTED_MECHANISMS, OAuthBearerSettings, SaslServer, new_sasl_server
from oncelog.security.sasl.scram import scram_credential_from_password

CREDENTIAL = scram_credential_from_password("SCRAM-SHA-256", "pw")


def make(mechanism: str) -> SaslServer:
    return new_sasl_server(mechanism, plain_users={"alice": "pw"},
                           scram_lookup=lambda user, mech: CREDENTIAL if (user, mech) == ("alice", "SCRAM-SHA-256")
                           else None,
                           scram_fake_salt_key=b"k" * 32, oauth=OAuthBearerSettings())


@pytest.mark.parametrize("mechanism", SUPPORTED_MECHANISMS)
def test_each_supported_mechanism(mechanism):
    server = make(mechanism)
    assert server.mechanism == mechanism
    assert not server.complete


def test_plain_users_and_scram_lookup_are_wired():
    plain = make("PLAIN")
    plain.evaluate(b"\x00alice\x00pw")
    assert plain.principal == "User:alice"
    scram = make("SCRAM-SHA-256")
    assert scram.evaluate(b"n,,n=alice,r=abc").startswith(b"r=abc")


@pytest.mark.parametrize("mechanism", ["GSSAPI", "plain", "SCRAM-SHA-1"])
def test_unsupported_mechanism(mechanism):
    with pytest.raises(ValueError, match="unsupported SASL mechanism"):
        make(mechanism)

"""SCRAM-SHA-256/512 server: RFC 7677's test vector, full exchanges with a client written
here, and every way the exchange must fail without telling whether the user exists."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from oncelog.security.sasl import IllegalSaslStateError, SaslAuthenticationError
from oncelog.security.sasl.scram import (
    DEFAULT_ITERATIONS,
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    ScramCredential,
    ScramSaslServer,
    decode_sasl_name,
    encode_sasl_name,
    random_salt,
    salted_password,
    scram_credential_from_password,
    scram_credential_from_salted_password,
    scram_mechanism_name,
)

# RFC 7677 section 3.
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC_CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")

HASHES = {SCRAM_SHA_256: "sha256", SCRAM_SHA_512: "sha512"}


def invalid_credentials(mechanism: str) -> str:
    return f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"


class ScramTestClient:
    """The client side of RFC 5802, enough to drive the server."""

    def __init__(self, mechanism: str, user: str, password: str, *, nonce: str = "fyko+d2lbbFgONRv9qkxdawL",
                 authorization_id: str = "", extensions: str = "") -> None:
        self.mechanism, self.password = mechanism, password
        self.gs2_header = f"n,{'a=' + encode_sasl_name(authorization_id) if authorization_id else ''},"
        self.client_first_bare = f"n={encode_sasl_name(user)},r={nonce}{extensions}"
        self.server_signature = b""

    def first_message(self) -> bytes:
        return (self.gs2_header + self.client_first_bare).encode()

    def final_message(self, server_first: bytes) -> bytes:
        hash_name = HASHES[self.mechanism]
        fields = dict(field.split("=", 1) for field in server_first.decode().split(","))
        salted = salted_password(self.mechanism, self.password, base64.b64decode(fields["s"]), int(fields["i"]))
        without_proof = f"c={base64.b64encode(self.gs2_header.encode()).decode()},r={fields['r']}"
        auth_message = f"{self.client_first_bare},{server_first.decode()},{without_proof}".encode()
        client_key = hmac.digest(salted, b"Client Key", hash_name)
        signature = hmac.digest(hashlib.new(hash_name, client_key).digest(), auth_message, hash_name)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self.server_signature = hmac.digest(hmac.digest(salted, b"Server Key", hash_name), auth_message, hash_name)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


def server_for(credentials: dict[tuple[str, str], ScramCredential], mechanism: str = SCRAM_SHA_512,
               nonce: str = "3rfcNHYJY1ZVvWVs7j") -> ScramSaslServer:
    return ScramSaslServer(mechanism, lambda user, mech: credentials.get((user, mech)), nonce=lambda: nonce)


def rfc_server() -> ScramSaslServer:
    credential = scram_credential_from_password(SCRAM_SHA_256, "pencil", 4096, RFC_SALT)
    return server_for({("user", SCRAM_SHA_256): credential}, SCRAM_SHA_256, RFC_SERVER_NONCE)


def test_rfc_7677_test_vector():
    server = rfc_server()
    assert server.evaluate(RFC_CLIENT_FIRST) == RFC_SERVER_FIRST
    assert not server.complete
    assert server.evaluate(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert server.complete
    assert server.principal == "User:user"
    assert server.session_lifetime_ms is None


def test_rfc_7677_credential_from_salted_password_matches_from_password():
    salted = salted_password(SCRAM_SHA_256, "pencil", RFC_SALT, 4096)
    assert scram_credential_from_salted_password(SCRAM_SHA_256, RFC_SALT, salted, 4096) == \
        scram_credential_from_password(SCRAM_SHA_256, "pencil", 4096, RFC_SALT)


@pytest.mark.parametrize("mechanism", [SCRAM_SHA_256, SCRAM_SHA_512])
def test_full_exchange_with_a_client(mechanism):
    credential = scram_credential_from_password(mechanism, "alice-secret", iterations=8192)
    server = server_for({("alice", mechanism): credential}, mechanism)
    client = ScramTestClient(mechanism, "alice", "alice-secret")
    server_first = server.evaluate(client.first_message())
    assert b",i=8192" in server_first
    server_final = server.evaluate(client.final_message(server_first))
    assert server_final == b"v=" + base64.b64encode(client.server_signature)
    assert server.complete and server.principal == "User:alice"
    assert server.mechanism == mechanism


def test_wrong_password_fails_at_client_final_with_kafkas_message():
    server = server_for({("alice", SCRAM_SHA_512): scram_credential_from_password(SCRAM_SHA_512, "right")})
    client = ScramTestClient(SCRAM_SHA_512, "alice", "wrong")
    server_first = server.evaluate(client.first_message())
    with pytest.raises(SaslAuthenticationError) as failure:
        server.evaluate(client.final_message(server_first))
    assert failure.value.message == invalid_credentials(SCRAM_SHA_512)
    assert not server.complete
    with pytest.raises(IllegalSaslStateError):
        server.evaluate(b"anything")


def test_unknown_user_fails_only_at_client_final_with_the_same_message():
    server = server_for({})
    client = ScramTestClient(SCRAM_SHA_512, "mallory", "guess")
    server_first = server.evaluate(client.first_message())  # looks like any user's
    fields = dict(field.split("=", 1) for field in server_first.decode().split(","))
    assert fields["i"] == "4096" and base64.b64decode(fields["s"])
    with pytest.raises(SaslAuthenticationError) as failure:
        server.evaluate(client.final_message(server_first))
    assert failure.value.message == invalid_credentials(SCRAM_SHA_512)
    assert "mallory" in (failure.value.log_detail or "")


def test_unknown_user_sees_the_same_salt_every_time():
    first = server_for({}, nonce="a").evaluate(ScramTestClient(SCRAM_SHA_512, "mallory", "x").first_message())
    second = server_for({}, nonce="a").evaluate(ScramTestClient(SCRAM_SHA_512, "mallory", "y").first_message())
    other = server_for({}, nonce="a").evaluate(ScramTestClient(SCRAM_SHA_512, "trudy", "y").first_message())
    assert first == second
    assert first != other


def test_an_unknown_users_salt_has_the_form_of_a_default_stored_salt_and_comes_from_the_key():
    """The salt Kafka's tools store (random_salt: a 130-bit number in base 36) and 4096
    iterations; derived from the broker's key, so the same for a new server with that key."""
    def server_first(key: bytes, user: str) -> dict[str, str]:
        server = ScramSaslServer(SCRAM_SHA_256, lambda user, mech: None, nonce=lambda: "n", fake_salt_key=key)
        answer = server.evaluate(ScramTestClient(SCRAM_SHA_256, user, "x").first_message())
        return dict(field.split("=", 1) for field in answer.decode().split(","))

    def kafka_form(salt: bytes) -> bool:
        return salt.isascii() and salt.isalnum() and salt == salt.lower() and int(salt, 36) < 2**130

    salts = [base64.b64decode(server_first(b"k" * 32, f"user-{n}")["s"]) for n in range(200)]
    stored = [random_salt() for _ in range(200)]
    assert all(map(kafka_form, salts)) and all(map(kafka_form, stored))
    assert max(map(len, salts)) == 26 and min(map(len, salts)) >= 20  # 26 digits 41% of the time, 25 58%
    assert server_first(b"k" * 32, "mallory") == server_first(b"k" * 32, "mallory")
    assert server_first(b"k" * 32, "mallory")["s"] != server_first(b"j" * 32, "mallory")["s"]
    assert server_first(b"k" * 32, "mallory")["i"] == str(DEFAULT_ITERATIONS) == "4096"


def test_credential_with_too_few_iterations_fails_like_an_unknown_user():
    weak = scram_credential_from_password(SCRAM_SHA_256, "secret", iterations=1024)
    server = server_for({("bob", SCRAM_SHA_256): weak}, SCRAM_SHA_256)
    client = ScramTestClient(SCRAM_SHA_256, "bob", "secret")
    server_first = server.evaluate(client.first_message())
    assert b",i=4096" in server_first
    with pytest.raises(SaslAuthenticationError, match="invalid credentials"):
        server.evaluate(client.final_message(server_first))


def test_credential_of_the_other_mechanism_does_not_count():
    server = server_for({("alice", SCRAM_SHA_256): scram_credential_from_password(SCRAM_SHA_256, "pw")})
    client = ScramTestClient(SCRAM_SHA_512, "alice", "pw")
    with pytest.raises(SaslAuthenticationError):
        server.evaluate(client.final_message(server.evaluate(client.first_message())))


def test_user_name_with_comma_and_equals_is_escaped():
    assert encode_sasl_name("a,b=c") == "a=2Cb=3Dc"
    assert decode_sasl_name("a=2Cb=3Dc") == "a,b=c"
    credential = scram_credential_from_password(SCRAM_SHA_512, "pw")
    server = server_for({("a,b=c", SCRAM_SHA_512): credential})
    client = ScramTestClient(SCRAM_SHA_512, "a,b=c", "pw")
    assert client.first_message().startswith(b"n,,n=a=2Cb=3Dc,")
    server.evaluate(client.final_message(server.evaluate(client.first_message())))
    assert server.principal == "User:a,b=c"


@pytest.mark.parametrize("sasl_name", ["a=b", "a=2", "a=", "=41"])
def test_a_bad_escape_in_a_user_name_is_malformed(sasl_name):
    with pytest.raises(ValueError, match="=2C or =3D"):
        decode_sasl_name(sasl_name)
    server = server_for({})
    with pytest.raises(SaslAuthenticationError, match="invalid credentials"):
        server.evaluate(f"n,,n={sasl_name},r=abc".encode())


def test_authorization_id_equal_to_the_user_is_accepted():
    server = server_for({("alice", SCRAM_SHA_512): scram_credential_from_password(SCRAM_SHA_512, "pw")})
    client = ScramTestClient(SCRAM_SHA_512, "alice", "pw", authorization_id="alice")
    assert client.first_message().startswith(b"n,a=alice,n=alice,")
    server.evaluate(client.final_message(server.evaluate(client.first_message())))  # c= is base64("n,a=alice,")
    assert server.principal == "User:alice"


def test_authorization_id_different_from_the_user_fails_at_client_first():
    server = server_for({("alice", SCRAM_SHA_512): scram_credential_from_password(SCRAM_SHA_512, "pw")})
    client = ScramTestClient(SCRAM_SHA_512, "alice", "pw", authorization_id="admin")
    with pytest.raises(SaslAuthenticationError) as failure:
        server.evaluate(client.first_message())
    assert failure.value.message == \
        "Authentication failed: Client requested an authorization id that is different from username"


def test_delegation_token_extension_is_refused_and_others_ignored():
    credential = scram_credential_from_password(SCRAM_SHA_512, "pw")
    with pytest.raises(SaslAuthenticationError, match="invalid credentials") as failure:
        server_for({("alice", SCRAM_SHA_512): credential}).evaluate(b"n,,n=alice,r=abc,tokenauth=true")
    assert "delegation token" in (failure.value.log_detail or "")
    server = server_for({("alice", SCRAM_SHA_512): credential})
    client = ScramTestClient(SCRAM_SHA_512, "alice", "pw", extensions=",tokenauth=false,traceid=x1")
    server.evaluate(client.final_message(server.evaluate(client.first_message())))
    assert server.complete


@pytest.mark.parametrize("client_first", [
    b"",
    b"n=user,r=abc",                      # no gs2 header
    b"y,,n=user,r=abc",                   # channel binding flags
    b"p=tls-unique,,n=user,r=abc",
    b"n,,r=abc,n=user",                   # fields out of order
    b"n,,n=user",                         # no nonce
    b"n,,n=,r=abc",                       # empty user
    b"n,,n=user,r=",                      # empty nonce
    b"n,,n=user,r=ab\x7fc",               # nonce not printable
    b"n,,m=ext,n=user,r=abc",             # mandatory extension
    b"n,,n=user,r=abc,bad",               # extension without a value
    b"n,x=y,n=user,r=abc",                # gs2 header field other than a=
    b"n,,n=us\xffer,r=abc",               # not UTF-8
], ids=repr)
def test_malformed_client_first_fails_with_the_generic_message(client_first):
    server = server_for({("user", SCRAM_SHA_512): scram_credential_from_password(SCRAM_SHA_512, "pw")})
    with pytest.raises(SaslAuthenticationError) as failure:
        server.evaluate(client_first)
    assert failure.value.message == invalid_credentials(SCRAM_SHA_512)
    with pytest.raises(IllegalSaslStateError):
        server.evaluate(client_first)


def malformed_finals(valid: bytes) -> list[bytes]:
    text = valid.decode()
    channel_binding, nonce, proof = text.split(",")
    return [
        b"",
        f"{nonce},{channel_binding},{proof}".encode(),           # out of order
        f"{channel_binding},{nonce}".encode(),                     # no proof
        f"c=bixx,{nonce},{proof}".encode(),                        # channel binding not the gs2 header
        f"c=eSws,{nonce},{proof}".encode(),                        # "y,," is not what the client sent
        f"{channel_binding},{nonce}extra,{proof}".encode(),        # nonce changed
        f"{channel_binding},r=3rfcNHYJY1ZVvWVs7j,{proof}".encode(),  # the server nonce alone
        f"{channel_binding},{nonce},p=!!!".encode(),                # proof not base64
        f"{channel_binding},{nonce},p=AAAA".encode(),               # proof too short
        f"{channel_binding},{nonce},bad,{proof}".encode(),          # extension without a value
        f"{channel_binding},{nonce},{proof},e=1".encode(),          # proof not last
    ]


@pytest.mark.parametrize("case", range(11))
def test_malformed_client_final_fails_with_the_generic_message(case):
    credential = scram_credential_from_password(SCRAM_SHA_512, "pw")
    server = server_for({("alice", SCRAM_SHA_512): credential})
    client = ScramTestClient(SCRAM_SHA_512, "alice", "pw")
    final = client.final_message(server.evaluate(client.first_message()))
    with pytest.raises(SaslAuthenticationError) as failure:
        server.evaluate(malformed_finals(final)[case])
    assert failure.value.message == invalid_credentials(SCRAM_SHA_512)
    assert not server.complete


def test_client_final_extensions_are_part_of_the_auth_message():
    credential = scram_credential_from_password(SCRAM_SHA_512, "pw")
    server = server_for({("alice", SCRAM_SHA_512): credential})
    client = ScramTestClient(SCRAM_SHA_512, "alice", "pw")
    final = client.final_message(server.evaluate(client.first_message()))
    without_proof, proof = final.rsplit(b",", 1)
    with pytest.raises(SaslAuthenticationError):  # the proof was computed without the extension
        server.evaluate(without_proof + b",ext=1," + proof)


def test_token_after_completion_is_an_illegal_state():
    server = rfc_server()
    server.evaluate(RFC_CLIENT_FIRST)
    server.evaluate(RFC_CLIENT_FINAL)
    with pytest.raises(IllegalSaslStateError):
        server.evaluate(RFC_CLIENT_FINAL)


def test_principal_before_completion_is_a_programming_error():
    server = rfc_server()
    server.evaluate(RFC_CLIENT_FIRST)
    with pytest.raises(RuntimeError):
        _ = server.principal


def test_credentials_hide_their_keys_and_mechanisms_are_checked():
    credential = scram_credential_from_password(SCRAM_SHA_256, "pw")
    assert repr(credential) == "ScramCredential(iterations=4096)"
    assert (MIN_ITERATIONS, MAX_ITERATIONS) == (4096, 16384)
    assert [scram_mechanism_name(t) for t in (0, 1, 2, 3)] == ["UNKNOWN", SCRAM_SHA_256, SCRAM_SHA_512, "UNKNOWN"]
    with pytest.raises(ValueError, match="not a SCRAM mechanism"):
        salted_password("SCRAM-SHA-1", "pw", b"salt", 4096)
    with pytest.raises(ValueError):
        ScramSaslServer("PLAIN", lambda user, mechanism: None)

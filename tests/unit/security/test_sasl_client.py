"""The client side of SASL (oncelog.security.sasl_client) driven against the broker's own
servers end to end: PLAIN, SCRAM-SHA-256/512 (RFC 7677's vector, a server signature that
does not match), OAUTHBEARER tokens from librdkafka's and Java's settings; and the SASL
settings of `ClientConfig`, which never show a secret."""

from __future__ import annotations

import base64
import json
import pickle

import pytest

from oncelog.client.config import ClientConfig, ConfigError, librdkafka_settings
from oncelog.security.sasl import (
    OAuthBearerSaslServer,
    OAuthBearerSettings,
    PlainSaslServer,
    SaslAuthenticationError,
    ScramSaslServer,
    parse_jaas_config,
)
from oncelog.security.sasl.scram import SCRAM_SHA_256, SCRAM_SHA_512, scram_credential_from_password
from oncelog.security.sasl_client import (
    OAuthBearerSaslClient,
    SaslClient,
    SaslClientError,
    ScramSaslClient,
    UnsecuredTokenConfig,
    new_sasl_client,
)

NOW_S = 1_700_000_000


def exchange(client: SaslClient, server) -> None:
    """What the connection does: tokens back and forth until the client has nothing more."""
    token: bytes | None = client.initial_response()
    while token is not None:
        token = client.evaluate(server.evaluate(token))


# -- PLAIN ------------------------------------------------------------------------------------


def test_plain_authenticates_against_the_brokers_plain_server():
    server = PlainSaslServer({"alice": "alice-secret"})
    client = new_sasl_client("PLAIN", username="alice", password="alice-secret")
    exchange(client, server)
    assert client.complete and server.principal == "User:alice"


def test_plain_with_a_wrong_password_is_refused_by_the_server():
    client = new_sasl_client("PLAIN", username="alice", password="wrong")
    with pytest.raises(SaslAuthenticationError, match="Invalid username or password"):
        exchange(client, PlainSaslServer({"alice": "alice-secret"}))
    assert not client.complete


# -- SCRAM ------------------------------------------------------------------------------------


def scram_server(mechanism: str, user: str, password: str) -> ScramSaslServer:
    credential = scram_credential_from_password(mechanism, password, iterations=8192)
    return ScramSaslServer(mechanism, lambda name, mech: credential if (name, mech) == (user, mechanism) else None)


@pytest.mark.parametrize("mechanism", [SCRAM_SHA_256, SCRAM_SHA_512])
@pytest.mark.parametrize("user", ["alice", "odd=user,name"])
def test_scram_authenticates_and_checks_the_servers_signature(mechanism, user):
    server = scram_server(mechanism, user, "p4ss,word=")
    client = new_sasl_client(mechanism, username=user, password="p4ss,word=")
    exchange(client, server)
    assert client.complete and server.complete and server.principal == f"User:{user}"


def test_scram_nonces_differ_between_exchanges():
    first = new_sasl_client(SCRAM_SHA_512, username="a", password="b").initial_response()
    second = new_sasl_client(SCRAM_SHA_512, username="a", password="b").initial_response()
    assert first.startswith(b"n,,n=a,r=") and first != second


def test_scram_rfc_7677_test_vector():
    client = ScramSaslClient(SCRAM_SHA_256, "user", "pencil", nonce=lambda: "rOprNGfwEbeRWgbNEkqO")
    assert client.initial_response() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    server_first = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    assert client.evaluate(server_first) == (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                                             b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert client.evaluate(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=") is None
    assert client.complete


def test_scram_with_a_wrong_password_is_refused_by_the_server():
    client = new_sasl_client(SCRAM_SHA_512, username="alice", password="wrong")
    with pytest.raises(SaslAuthenticationError, match="invalid credentials with SASL mechanism SCRAM-SHA-512"):
        exchange(client, scram_server(SCRAM_SHA_512, "alice", "right"))
    assert not client.complete


def test_scram_fails_when_the_servers_signature_does_not_match():
    """A server that does not know the password (an impostor that accepts any proof)
    cannot make the signature: the client refuses it."""
    server = scram_server(SCRAM_SHA_512, "alice", "alice-secret")
    client = new_sasl_client(SCRAM_SHA_512, username="alice", password="alice-secret")
    client_final = client.evaluate(server.evaluate(client.initial_response()))
    assert client_final is not None
    genuine = server.evaluate(client_final)
    signature = bytearray(base64.b64decode(genuine[2:]))
    signature[0] ^= 1
    with pytest.raises(SaslClientError, match="server signature does not match"):
        client.evaluate(b"v=" + base64.b64encode(bytes(signature)))
    assert not client.complete
    with pytest.raises(SaslClientError):
        client.evaluate(genuine)  # the exchange is over


@pytest.mark.parametrize("server_first, reason", [
    (b"r=other-nonce,s=c2FsdA==,i=4096", "does not extend the client's"),
    (b"r=NONCE,s=c2FsdA==,i=4096", "does not extend the client's"),  # nothing added by the server
    (b"r=NONCEserver,s=c2FsdA==,i=1024", "1024 iterations"),
    (b"r=NONCEserver,s=not base64!,i=4096", "malformed"),
    (b"s=c2FsdA==,r=NONCEserver,i=4096", "not r="),
    (b"m=ext,r=NONCEserver,s=c2FsdA==,i=4096", "mandatory extension"),
    (b"\xff", "not UTF-8"),
])
def test_scram_refuses_a_malformed_server_first_message(server_first, reason):
    client = ScramSaslClient(SCRAM_SHA_256, "alice", "secret", nonce=lambda: "NONCE")
    client.initial_response()
    with pytest.raises(SaslClientError, match=reason) as failure:
        client.evaluate(server_first)
    assert "secret" not in str(failure.value)


def test_scram_server_final_error_is_reported():
    client = ScramSaslClient(SCRAM_SHA_256, "alice", "secret", nonce=lambda: "NONCE")
    client.initial_response()
    client.evaluate(b"r=NONCEserver,s=c2FsdA==,i=4096")
    with pytest.raises(SaslClientError, match="refused the proof: invalid-proof"):
        client.evaluate(b"e=invalid-proof")


# -- OAUTHBEARER ------------------------------------------------------------------------------


def oauth_server(**settings) -> OAuthBearerSaslServer:
    return OAuthBearerSaslServer(OAuthBearerSettings(**settings), clock=lambda: NOW_S * 1000)


def token_claims(client: OAuthBearerSaslClient) -> dict:
    message = client.initial_response().decode()
    token = message.split("auth=Bearer ")[1].split("\x01")[0]
    header, claims, signature = token.split(".")
    assert json.loads(base64.urlsafe_b64decode(header + "==")) == {"alg": "none"} and signature == ""
    return json.loads(base64.urlsafe_b64decode(claims + "=" * (-len(claims) % 4)))


def test_oauthbearer_token_from_librdkafkas_config_is_accepted():
    config = UnsecuredTokenConfig.from_librdkafka("principal=alice scope=read,write lifeSeconds=600 extension_a=b")
    client = OAuthBearerSaslClient(config, clock=lambda: NOW_S + 0.7)
    server = oauth_server(required_scope=("write",))
    exchange(client, server)
    assert client.complete and server.principal == "User:alice"
    assert server.session_lifetime_ms == 600_000
    assert server.extensions == {"a": "b"}
    assert token_claims(client) == {"sub": "alice", "scope": ["read", "write"], "iat": NOW_S, "exp": NOW_S + 600}


def test_oauthbearer_token_from_javas_jaas_options_is_accepted():
    jaas = ('org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
            'unsecuredLoginStringClaim_sub="bob" unsecuredLoginListClaim_scope="|read|admin" '
            'unsecuredLoginNumberClaim_level="3" unsecuredLoginLifetimeSeconds="120" '
            'unsecuredLoginExtension_traceId="t1";')
    client = OAuthBearerSaslClient(UnsecuredTokenConfig.from_jaas_options(parse_jaas_config(jaas).options),
                                   clock=lambda: NOW_S)
    server = oauth_server(required_scope=("admin",))
    exchange(client, server)
    assert client.complete and server.principal == "User:bob" and server.session_lifetime_ms == 120_000
    assert token_claims(client) == {"sub": "bob", "scope": ["read", "admin"], "level": 3, "iat": NOW_S,
                                    "exp": NOW_S + 120}


def test_oauthbearer_other_principal_claim_name():
    client = OAuthBearerSaslClient(UnsecuredTokenConfig.from_librdkafka("principal=carol principalClaimName=user"),
                                   clock=lambda: NOW_S)
    server = oauth_server(principal_claim_name="user")
    exchange(client, server)
    assert server.principal == "User:carol"


def test_oauthbearer_refused_token_is_acknowledged_then_fails_with_the_servers_json():
    client = OAuthBearerSaslClient(UnsecuredTokenConfig.from_librdkafka("principal=alice"), clock=lambda: NOW_S)
    with pytest.raises(SaslAuthenticationError) as failure:
        exchange(client, oauth_server(required_scope=("admin",)))
    assert json.loads(failure.value.message) == {"status": "insufficient_scope", "scope": "admin"}
    assert client.server_error is not None and not client.complete


@pytest.mark.parametrize("text, reason", [
    ("scope=a", "principal=<name> is required"),
    ("principal=a lifeSeconds=0", "must be positive"),
    ("principal=a lifeSeconds=soon", "not a whole number"),
    ("principal=a colour=blue", "unknown key 'colour'"),
    ("principal=a principal=b", "given twice"),
    ("principal=a extension_auth=x", "not 'auth'"),
    ("principal=a extension_a1=x", "letters only"),
    ("principal", "not <name>=<value>"),
])
def test_oauthbearer_librdkafka_config_errors_name_the_key(text, reason):
    with pytest.raises(ValueError, match=reason):
        UnsecuredTokenConfig.from_librdkafka(text)


@pytest.mark.parametrize("options, reason", [
    ({}, 'unsecuredLoginStringClaim_sub="<principal>" is required'),
    ({"unsecuredLoginStringClaim_sub": "a", "unsecuredLoginNumberClaim_exp": "1"}, "claim 'exp' cannot be set"),
    ({"unsecuredLoginStringClaim_sub": "a", "unsecuredLoginNumberClaim_n": "x"}, "is not a number"),
])
def test_oauthbearer_jaas_option_errors_name_the_option(options, reason):
    with pytest.raises(ValueError, match=reason):
        UnsecuredTokenConfig.from_jaas_options(options)


# -- the factory --------------------------------------------------------------------------------


def test_new_sasl_client_refuses_gssapi_and_missing_credentials_without_echoing_secrets():
    with pytest.raises(ValueError, match="unsupported SASL mechanism 'GSSAPI'"):
        new_sasl_client("GSSAPI", username="a", password="b")
    with pytest.raises(ValueError, match="needs a user name and a password"):
        new_sasl_client("SCRAM-SHA-256", username="alice", password=None)
    with pytest.raises(ValueError, match="needs a principal"):
        new_sasl_client("OAUTHBEARER")
    assert "hunter2" not in repr(new_sasl_client("PLAIN", username="a", password="hunter2"))
    assert "hunter2" not in repr(new_sasl_client("SCRAM-SHA-256", username="a", password="hunter2"))


# -- ClientConfig's SASL settings ------------------------------------------------------------------

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" '
              'password="s3cr3t-pw";')
SCRAM_JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" '
              'password="s3cr3t-pw";')
OAUTH_JAAS = ('org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
              'unsecuredLoginStringClaim_sub="alice";')


def config(**settings: str) -> ClientConfig:
    return ClientConfig.from_settings("127.0.0.1:9092", {key.replace("_", "."): value
                                                         for key, value in settings.items()})


def test_librdkafka_credentials():
    made = config(security_protocol="sasl_ssl", sasl_mechanism="scram-sha-512", sasl_username="alice",
                  sasl_password="s3cr3t-pw")
    assert (made.security_protocol, made.sasl_mechanism, made.sasl_username, made.sasl_password) == (
        "SASL_SSL", "SCRAM-SHA-512", "alice", "s3cr3t-pw")
    assert made.uses_tls and made.uses_sasl
    assert "s3cr3t-pw" not in repr(made)
    assert pickle.loads(pickle.dumps(made)) == made  # it goes to Spark executors


@pytest.mark.parametrize("jaas", [PLAIN_JAAS, SCRAM_JAAS])
def test_java_jaas_credentials(jaas):
    made = ClientConfig.from_settings("h:1", {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
                                              "sasl.jaas.config": jaas})
    assert (made.sasl_username, made.sasl_password) == ("alice", "s3cr3t-pw")
    assert not made.uses_tls


def test_oauthbearer_from_either_form():
    librdkafka = ClientConfig.from_settings("h:1", {"security.protocol": "SASL_PLAINTEXT",
                                                    "sasl.mechanisms": "OAUTHBEARER",
                                                    "sasl.oauthbearer.config": "principal=alice"})
    java = ClientConfig.from_settings("h:1", {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
                                              "sasl.jaas.config": OAUTH_JAAS})
    assert librdkafka.sasl_oauthbearer == java.sasl_oauthbearer == UnsecuredTokenConfig(principal="alice")
    assert hash(java) == hash(java)  # configurations key the per-process clusters


@pytest.mark.parametrize("settings, message", [
    ({"security.protocol": "SASL_SSL"},
     ("security.protocol=SASL_SSL: set sasl.mechanism to one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER "
      "(Kafka's default, GSSAPI, is Kerberos, which oncelog's client does not speak)")),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"},
     ("sasl.mechanism=GSSAPI: Kerberos is not supported by oncelog's client (use PLAIN, SCRAM-SHA-256, "
      "SCRAM-SHA-512, OAUTHBEARER)")),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.password": "s3cr3t-pw"},
     "sasl.username: sasl.mechanism=PLAIN needs a user name and password"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "a", "sasl.password": "s3cr3t-pw",
      "sasl.jaas.config": PLAIN_JAAS}, "sasl.jaas.config: give the credentials either there"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.jaas.config": OAUTH_JAAS},
     "sasl.jaas.config: sasl.mechanism=PLAIN needs org.apache.kafka.common.security.plain.PlainLoginModule"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER", "sasl.jaas.config": PLAIN_JAAS},
     "sasl.jaas.config: sasl.mechanism=OAUTHBEARER needs"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
      "sasl.jaas.config": PLAIN_JAAS.replace('password="s3cr3t-pw"', "password=s3cr3t!pw")},
     "sasl.jaas.config: JAAS config: unexpected character"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"}, "sasl.oauthbearer.config: "),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc"},
     "sasl.oauthbearer.method=oidc"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.mechanisms": "SCRAM-SHA-256"},
     "sasl.mechanism=PLAIN and sasl.mechanisms=SCRAM-SHA-256 disagree"),
    ({"security.protocol": "KERBEROS"}, "security.protocol=KERBEROS"),
])
def test_sasl_setting_errors_start_with_the_setting_and_hold_no_secret(settings, message):
    with pytest.raises(ConfigError) as failure:
        ClientConfig.from_settings("h:1", settings)
    assert str(failure.value).startswith(message)
    assert "s3cr3t" not in str(failure.value) and "\n" not in str(failure.value)


def test_sasl_settings_are_ignored_on_protocols_without_sasl():
    made = ClientConfig.from_settings("h:1", {"security.protocol": "SSL", "sasl.mechanism": "GSSAPI"})
    assert made.sasl_mechanism is None and not made.uses_sasl


def test_librdkafka_settings_translate_javas_jaas_config():
    scram = librdkafka_settings([("security.protocol", "SASL_SSL"), ("sasl.mechanism", "SCRAM-SHA-512"),
                                 ("sasl.jaas.config", SCRAM_JAAS), ("linger.ms", "5")])
    assert scram == {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "linger.ms": "5",
                     "sasl.username": "alice", "sasl.password": "s3cr3t-pw"}
    oauth = librdkafka_settings([("security.protocol", "SASL_SSL"), ("sasl.mechanism", "OAUTHBEARER"),
                                 ("sasl.jaas.config", OAUTH_JAAS)])
    assert oauth["sasl.oauthbearer.config"] == "principal=alice principalClaimName=sub lifeSeconds=3600"
    assert oauth["enable.sasl.oauthbearer.unsecure.jwt"] == "true" and "sasl.jaas.config" not in oauth
    untouched = [("security.protocol", "SASL_SSL"), ("sasl.username", "a")]
    assert librdkafka_settings(untouched) == dict(untouched)


def test_librdkafka_accepts_the_translated_settings():
    from confluent_kafka import Producer

    for jaas, mechanism in ((SCRAM_JAAS, "SCRAM-SHA-512"), (OAUTH_JAAS, "OAUTHBEARER")):
        Producer({**librdkafka_settings([("security.protocol", "SASL_PLAINTEXT"), ("sasl.mechanism", mechanism),
                                         ("sasl.jaas.config", jaas)]), "bootstrap.servers": "", "log_level": 0})

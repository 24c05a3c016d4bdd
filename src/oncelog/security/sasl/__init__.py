"""The server side of Kafka's SASL mechanisms, as state machines without I/O.

The broker picks a mechanism at SaslHandshake, makes its server with `new_sasl_server`,
and feeds it each SaslAuthenticate token:

- PLAIN (plain.py): user name and password against the listener's JAAS users.
- SCRAM-SHA-256, SCRAM-SHA-512 (scram.py): against stored SCRAM credentials
  (oncelog.security.scram_credentials).
- OAUTHBEARER (oauthbearer.py): unsecured JWTs, Kafka's development-only validation.

jaas.py parses the `sasl.jaas.config` values they are configured with.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from oncelog.security.sasl.jaas import JaasConfigEntry, parse_jaas_config
from oncelog.security.sasl.mechanism import (
    IllegalSaslStateError,
    SaslAuthenticationError,
    SaslServer,
    invalid_credentials_message,
)
from oncelog.security.sasl.oauthbearer import OAuthBearerSaslServer, OAuthBearerSettings
from oncelog.security.sasl.plain import PlainSaslServer, parse_plain_jaas_users
from oncelog.security.sasl.scram import SCRAM_MECHANISMS, ScramCredential, ScramSaslServer

__all__ = [
    "SUPPORTED_MECHANISMS", "IllegalSaslStateError", "JaasConfigEntry", "OAuthBearerSaslServer", "OAuthBearerSettings",
    "PlainSaslServer", "SaslAuthenticationError", "SaslServer", "ScramCredential", "ScramSaslServer",
    "invalid_credentials_message", "new_sasl_server", "parse_jaas_config", "parse_plain_jaas_users",
]

SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


def new_sasl_server(mechanism: str, *, plain_users: Mapping[str, str],
                    scram_lookup: Callable[[str, str], ScramCredential | None], scram_fake_salt_key: bytes,
                    oauth: OAuthBearerSettings) -> SaslServer:
    """A server for one exchange of `mechanism` (one of SUPPORTED_MECHANISMS, which the
    broker checks at SaslHandshake; ValueError for any other). `scram_fake_salt_key`: the
    broker's secret for the salts SCRAM shows unknown users."""
    if mechanism == "PLAIN":
        return PlainSaslServer(plain_users)
    if mechanism in SCRAM_MECHANISMS:
        return ScramSaslServer(mechanism, scram_lookup, fake_salt_key=scram_fake_salt_key)
    if mechanism == "OAUTHBEARER":
        return OAuthBearerSaslServer(oauth)
    raise ValueError(f"unsupported SASL mechanism {mechanism!r} (supported: {', '.join(SUPPORTED_MECHANISMS)})")

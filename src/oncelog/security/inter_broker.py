"""How a broker reaches the other brokers of its cluster on their inter-broker listener:
TLS and SASL as a client (built from the configuration by
oncelog.broker.listener_setup.inter_broker_security, used by oncelog.kernel.peer)."""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass, field

from oncelog.security.sasl_client import SaslClient


@dataclass(frozen=True)
class PeerSecurity:
    """How this broker connects to the others' inter-broker listener: TLS (a client
    context with the listener's truststore and keystore) and SASL (the mechanism of
    `sasl.mechanism.inter.broker.protocol`, with the credentials of the listener's JAAS
    config). None of either: PLAINTEXT."""

    ssl_context: ssl.SSLContext | None = None
    sasl_mechanism: str | None = None
    new_sasl_client: Callable[[], SaslClient] | None = field(default=None, repr=False)

"""Kafka brokers for tests: oncelog's pytest plugin (`pytest_plugin.py`, which pytest
loads through the `pytest11` entry point wherever oncelog is installed) and the settings
it builds, which work without pytest too.

    def test_roundtrip(kafka_bootstrap):
        Producer({"bootstrap.servers": kafka_bootstrap}).produce("orders", b"hello")

    def test_signed_in(kafka_broker_factory):
        broker = kafka_broker_factory(sasl_users={"alice": "alice-secret"})
        Producer(sasl_plain_client_config(broker.bootstrap_servers, "alice", "alice-secret"))

See docs/testing.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["sasl_plain_broker_config", "sasl_plain_client_config"]

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"

# The characters of an unquoted JAAS word (security/sasl/jaas.py), which the option
# naming a user, user_<name>, must be made of.
_USER_NAME_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_$.-")


def sasl_plain_broker_config(users: Mapping[str, str]) -> dict[str, str]:
    """Broker settings for one SASL_PLAINTEXT listener on a free loopback port, where
    clients sign in with SASL PLAIN as one of `users` (name -> password): Kafka's keys,
    the PlainLoginModule's `user_<name>` options in the listener's `sasl.jaas.config`."""
    if not users:
        raise ValueError("SASL PLAIN needs at least one user")
    options = []
    for name, password in users.items():
        if not name or not set(name) <= _USER_NAME_CHARACTERS:
            raise ValueError(f"SASL user name {name!r}: only letters, digits and _$.- can name a PLAIN user")
        options.append(f"user_{name}={_jaas_quoted(password)}")
    return {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": f"{PLAIN_LOGIN_MODULE} required {' '.join(options)};",
    }


def sasl_plain_client_config(bootstrap_servers: str, user: str, password: str, **extra: Any) -> dict[str, Any]:
    """confluent-kafka (librdkafka) settings to sign in as `user` on a broker made with
    sasl_plain_broker_config; `extra` adds or overrides settings (dots as in Kafka's
    keys: pass them as `**{"group.id": "g"}`)."""
    return {
        "bootstrap.servers": bootstrap_servers,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": password,
        **extra,
    }


def _jaas_quoted(value: str) -> str:
    """A JAAS quoted string: Java's escapes for the quote, the backslash and line ends."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return f'"{escaped}"'

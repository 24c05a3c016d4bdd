"""`ClientConfig`: how to reach a cluster, built from librdkafka-style settings (the
`kafka.*` options of the Spark connectors without their prefix), so a job keeps the
settings it used with confluent-kafka or Spark's Kafka connector.

Honoured: `client.id`, `security.protocol` (PLAINTEXT, SSL), `ssl.ca.location`,
`ssl.certificate.location`, `ssl.key.location`, `ssl.key.password`,
`ssl.endpoint.identification.algorithm`, `enable.ssl.certificate.verification`,
`socket.timeout.ms` / `request.timeout.ms`, `socket.connection.setup.timeout.ms`. The
producer's and fetcher's own settings are read where they are used
(`ProducerSettings`, `FetchSettings`). SASL is refused with a message: the client
does not speak it yet.

Frozen and made of plain values: it is pickled to Spark executors.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

PLAINTEXT = "PLAINTEXT"
SSL = "SSL"
_SECURITY_PROTOCOLS = (PLAINTEXT, SSL)


class ConfigError(ValueError):
    """A setting the client cannot use; the message starts with the setting's name."""


@dataclass(frozen=True)
class ClientConfig:
    bootstrap_servers: tuple[str, ...]
    client_id: str = "oncelog"
    request_timeout_s: float = 30.0
    connect_timeout_s: float = 10.0
    security_protocol: str = PLAINTEXT
    ssl_ca_location: str | None = None
    ssl_certificate_location: str | None = None
    ssl_key_location: str | None = None
    ssl_key_password: str | None = field(default=None, repr=False)
    ssl_check_hostname: bool = True
    ssl_verify: bool = True

    def __post_init__(self) -> None:
        if not self.bootstrap_servers:
            raise ConfigError("bootstrap.servers names no broker")
        for server in self.bootstrap_servers:
            try:
                split_address(server)
            except ConfigError as error:
                raise ConfigError(f"bootstrap.servers: {error}") from None

    @classmethod
    def from_settings(cls, bootstrap_servers: str,
                      settings: Mapping[str, object] | Iterable[tuple[str, object]] = ()) -> ClientConfig:
        """From `bootstrap.servers` and librdkafka setting names; keys this client has no
        use for are left to the caller (they may be the producer's or fetcher's)."""
        values = {str(key).lower(): str(value) for key, value in dict(settings).items()}
        servers = tuple(server.strip() for server in bootstrap_servers.split(",") if server.strip())
        protocol = values.get("security.protocol", PLAINTEXT).upper()
        if protocol not in _SECURITY_PROTOCOLS:
            raise ConfigError(
                f"security.protocol={values['security.protocol']}: oncelog's Spark connectors speak "
                f"{' and '.join(_SECURITY_PROTOCOLS)} (SASL is not supported yet)"
            )
        timeout_ms = values.get("socket.timeout.ms") or values.get("request.timeout.ms") or "30000"
        return cls(
            bootstrap_servers=servers,
            client_id=values.get("client.id", "oncelog"),
            request_timeout_s=_positive_ms(timeout_ms, "socket.timeout.ms") / 1000,
            connect_timeout_s=_positive_ms(values.get("socket.connection.setup.timeout.ms", "10000"),
                                           "socket.connection.setup.timeout.ms") / 1000,
            security_protocol=protocol,
            ssl_ca_location=values.get("ssl.ca.location"),
            ssl_certificate_location=values.get("ssl.certificate.location"),
            ssl_key_location=values.get("ssl.key.location"),
            ssl_key_password=values.get("ssl.key.password"),
            ssl_check_hostname=values.get("ssl.endpoint.identification.algorithm", "https").lower() != "none",
            ssl_verify=_boolean(values.get("enable.ssl.certificate.verification", "true"),
                                "enable.ssl.certificate.verification"),
        )

    @property
    def description(self) -> str:
        return f"kafka.bootstrap.servers={','.join(self.bootstrap_servers)}"


def split_address(address: str) -> tuple[str, int]:
    """`host:port` (IPv6 hosts in brackets) as (host, port)."""
    host, separator, port = address.rpartition(":")
    if not separator or not host or not port.isdigit():
        raise ConfigError(f"{address!r} is not host:port")
    return host.strip("[]"), int(port)


def _positive_ms(value: str, name: str) -> int:
    return positive_setting({name: value}, name, 0)


def positive_setting(settings: Mapping[str, object], name: str, default: int) -> int:
    """Setting `name` as a positive integer (`default` when absent)."""
    value = settings.get(name)
    if value is None:
        return default
    try:
        number = int(str(value))
    except ValueError:
        raise ConfigError(f"{name}={value!r} is not a whole number") from None
    if number <= 0:
        raise ConfigError(f"{name}={value} must be positive")
    return number


def _boolean(value: str, name: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ConfigError(f"{name}={value!r}: use true or false")

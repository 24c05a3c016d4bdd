"""`ClientConfig`: how to reach a cluster, built from librdkafka-style settings (the
`kafka.*` options of the Spark connectors without their prefix), so a job keeps the
settings it used with confluent-kafka or Spark's Kafka connector.

Honoured: `client.id`, `security.protocol` (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL),
`ssl.ca.location`, `ssl.certificate.location`, `ssl.key.location`, `ssl.key.password`,
`ssl.endpoint.identification.algorithm`, `enable.ssl.certificate.verification`,
`socket.timeout.ms` / `request.timeout.ms`, `socket.connection.setup.timeout.ms`. The
producer's and fetcher's own settings are read where they are used
(`ProducerSettings`, `FetchSettings`).

SASL: `sasl.mechanism` (or librdkafka's `sasl.mechanisms`) PLAIN, SCRAM-SHA-256,
SCRAM-SHA-512 or OAUTHBEARER (unsecured JWTs only); GSSAPI, Kafka's default, is refused.
Credentials as librdkafka takes them (`sasl.username`, `sasl.password`,
`sasl.oauthbearer.config` "principal=alice [scope=a,b] [lifeSeconds=3600]") or as Java
does (`sasl.jaas.config`: PlainLoginModule or ScramLoginModule with username= and
password=, OAuthBearerLoginModule with unsecuredLoginStringClaim_sub=). Secrets are never
in a repr or an error message. `librdkafka_settings()` turns the Java-only settings into
librdkafka's, for the code that hands the same settings to confluent-kafka.

Frozen and made of plain values: it is pickled to Spark executors.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from oncelog.security.sasl.jaas import parse_jaas_config
from oncelog.security.sasl_client import CLIENT_MECHANISMS, OAUTHBEARER, UnsecuredTokenConfig

PLAINTEXT = "PLAINTEXT"
SSL = "SSL"
SASL_PLAINTEXT = "SASL_PLAINTEXT"
SASL_SSL = "SASL_SSL"
_SECURITY_PROTOCOLS = (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)
GSSAPI = "GSSAPI"  # Kafka's default sasl.mechanism: Kerberos, which this client does not speak

_PASSWORD_LOGIN_MODULES = (
    "org.apache.kafka.common.security.plain.PlainLoginModule",
    "org.apache.kafka.common.security.scram.ScramLoginModule",
)
_OAUTHBEARER_LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


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
    sasl_mechanism: str | None = None  # SASL_* protocols only
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    sasl_oauthbearer: UnsecuredTokenConfig | None = None

    def __post_init__(self) -> None:
        if not self.bootstrap_servers:
            raise ConfigError("bootstrap.servers names no broker")
        for server in self.bootstrap_servers:
            try:
                split_address(server)
            except ConfigError as error:
                raise ConfigError(f"bootstrap.servers: {error}") from None
        if self.uses_sasl:
            _check_sasl(self)

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in (SSL, SASL_SSL)

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in (SASL_PLAINTEXT, SASL_SSL)

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
                f"{', '.join(_SECURITY_PROTOCOLS)}"
            )
        sasl = _sasl_settings(values, protocol) if protocol in (SASL_PLAINTEXT, SASL_SSL) else {}
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
            **sasl,
        )

    @property
    def description(self) -> str:
        return f"kafka.bootstrap.servers={','.join(self.bootstrap_servers)}"


# -- SASL -----------------------------------------------------------------------------------


def _sasl_settings(values: Mapping[str, str], protocol: str) -> dict:
    """The SASL fields of a ClientConfig from librdkafka or Java settings (lower-case keys)."""
    mechanism = _mechanism(values, protocol)
    username, password = values.get("sasl.username"), values.get("sasl.password")
    oauthbearer = None
    if mechanism == OAUTHBEARER:
        if values.get("sasl.oauthbearer.method", "default").lower() != "default":
            raise ConfigError(f"sasl.oauthbearer.method={values['sasl.oauthbearer.method']}: oncelog's client "
                              "makes unsecured tokens only (sasl.oauthbearer.config); OIDC is not supported")
        if "sasl.login.callback.handler.class" in values:
            raise ConfigError("sasl.login.callback.handler.class: oncelog's client makes unsecured tokens only "
                              "(unsecuredLoginStringClaim_sub= in sasl.jaas.config); OIDC is not supported")
        if "sasl.oauthbearer.config" in values:
            try:
                oauthbearer = UnsecuredTokenConfig.from_librdkafka(values["sasl.oauthbearer.config"])
            except ValueError as error:
                raise ConfigError(f"sasl.oauthbearer.config: {error}") from None
    jaas = values.get("sasl.jaas.config")
    if jaas is not None:
        if username is not None or password is not None or oauthbearer is not None:
            raise ConfigError("sasl.jaas.config: give the credentials either there (Java's form) or in "
                              "sasl.username/sasl.password/sasl.oauthbearer.config (librdkafka's), not both")
        username, password, oauthbearer = _from_jaas(jaas, mechanism)
    return {"sasl_mechanism": mechanism, "sasl_username": username, "sasl_password": password,
            "sasl_oauthbearer": oauthbearer}


def _mechanism(values: Mapping[str, str], protocol: str) -> str:
    given = {key: values[key].strip().upper() for key in ("sasl.mechanism", "sasl.mechanisms") if key in values}
    if len(set(given.values())) > 1:
        raise ConfigError(f"sasl.mechanism={given['sasl.mechanism']} and sasl.mechanisms="
                          f"{given['sasl.mechanisms']} disagree")
    if not given:
        raise ConfigError(f"security.protocol={protocol}: set sasl.mechanism to one of {', '.join(CLIENT_MECHANISMS)} "
                          f"(Kafka's default, {GSSAPI}, is Kerberos, which oncelog's client does not speak)")
    mechanism = next(iter(given.values()))
    if mechanism not in CLIENT_MECHANISMS:
        what = "Kerberos is" if mechanism == GSSAPI else "it is"
        raise ConfigError(f"sasl.mechanism={mechanism}: {what} not supported by oncelog's client "
                          f"(use {', '.join(CLIENT_MECHANISMS)})")
    return mechanism


def _from_jaas(jaas: str, mechanism: str) -> tuple[str | None, str | None, UnsecuredTokenConfig | None]:
    """(username, password, token config) from a `sasl.jaas.config` entry. Its errors name
    options, never values (jaas.py's parser never echoes one)."""
    try:
        module, _flag, options = parse_jaas_config(jaas)
    except ValueError as error:
        raise ConfigError(f"sasl.jaas.config: {error}") from None
    if mechanism == OAUTHBEARER:
        if module != _OAUTHBEARER_LOGIN_MODULE:
            raise ConfigError(f"sasl.jaas.config: sasl.mechanism={mechanism} needs {_OAUTHBEARER_LOGIN_MODULE}, "
                              f"not {module}")
        try:
            return None, None, UnsecuredTokenConfig.from_jaas_options(options)
        except ValueError as error:
            raise ConfigError(f"sasl.jaas.config: {error}") from None
    if module not in _PASSWORD_LOGIN_MODULES:
        raise ConfigError(f"sasl.jaas.config: sasl.mechanism={mechanism} needs "
                          f"{' or '.join(_PASSWORD_LOGIN_MODULES)}, not {module}")
    return options.get("username"), options.get("password"), None


def _check_sasl(config: ClientConfig) -> None:
    mechanism = config.sasl_mechanism
    if mechanism is None or mechanism not in CLIENT_MECHANISMS:
        raise ConfigError(f"sasl.mechanism={mechanism}: use one of {', '.join(CLIENT_MECHANISMS)}")
    if mechanism == OAUTHBEARER:
        if config.sasl_oauthbearer is None:
            raise ConfigError("sasl.oauthbearer.config: sasl.mechanism=OAUTHBEARER needs a principal "
                              "(sasl.oauthbearer.config=\"principal=<name>\", or sasl.jaas.config with "
                              "unsecuredLoginStringClaim_sub=\"<name>\")")
        return
    missing = [name for name, value in (("sasl.username", config.sasl_username),
                                        ("sasl.password", config.sasl_password)) if not value]
    if missing:
        raise ConfigError(f"{' and '.join(missing)}: sasl.mechanism={mechanism} needs a user name and password "
                          "(sasl.username and sasl.password, or username= and password= in sasl.jaas.config)")


def librdkafka_settings(settings: Iterable[tuple[str, str]]) -> dict[str, str]:
    """`settings` as librdkafka takes them: a Java `sasl.jaas.config` (which librdkafka
    refuses) becomes sasl.username/sasl.password or sasl.oauthbearer.config, and an
    unsecured OAUTHBEARER token is enabled as librdkafka requires. For the code that
    gives the connectors' `kafka.*` settings to confluent-kafka. Raises ConfigError."""
    result = dict(settings)
    lowered = {key.lower(): key for key in result}
    jaas_key = lowered.get("sasl.jaas.config")
    if jaas_key is None:
        return result
    values = {key.lower(): str(value) for key, value in result.items()}
    protocol = values.get("security.protocol", PLAINTEXT).upper()
    del result[jaas_key]
    if protocol not in (SASL_PLAINTEXT, SASL_SSL):
        return result  # not used, as Kafka ignores it
    sasl = _sasl_settings(values, protocol)
    token = sasl["sasl_oauthbearer"]
    if token is not None:
        result["sasl.oauthbearer.config"] = _librdkafka_token_config(token)
        result.setdefault("enable.sasl.oauthbearer.unsecure.jwt", "true")
    else:
        for name in ("username", "password"):
            if sasl[f"sasl_{name}"] is not None:
                result[f"sasl.{name}"] = sasl[f"sasl_{name}"]
    return result


def _librdkafka_token_config(token: UnsecuredTokenConfig) -> str:
    parts = [f"principal={token.principal}", f"principalClaimName={token.principal_claim_name}",
             f"lifeSeconds={token.lifetime_s}"]
    lists = [(name, value) for name, value in token.claims if isinstance(value, tuple)]
    if lists:  # librdkafka sends one list claim: the scope
        parts += [f"scopeClaimName={lists[0][0]}", f"scope={','.join(lists[0][1])}"]
    parts += [f"extension_{name}={value}" for name, value in token.extensions]
    return " ".join(parts)


# -- values ---------------------------------------------------------------------------------


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

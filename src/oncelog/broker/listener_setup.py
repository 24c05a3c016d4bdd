"""The broker's listeners as the server runs them (`ListenerBinding`s), built once at
start-up from the configuration: each listener's TLS context (`ssl.*`, per listener with
`listener.name.<name>.ssl.*`) and how its clients authenticate (`sasl.enabled.mechanisms`,
the PLAIN users of `listener.name.<name>.plain.sasl.jaas.config`, SCRAM credentials from
the broker's store, OAUTHBEARER's unsecured-token options, `connections.max.reauth.ms`).

A setting that cannot work (a GSSAPI-only SASL listener, a keystore that does not open,
PLAIN without users) is a ConfigError naming the key, before the broker listens.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from oncelog.broker.server import ListenerBinding
from oncelog.config.broker import BrokerConfig, ConfigError
from oncelog.security.inter_broker import PeerSecurity
from oncelog.security.listeners import ListenerSpec
from oncelog.security.sasl import (
    SUPPORTED_MECHANISMS,
    OAuthBearerSettings,
    SaslServer,
    new_sasl_server,
    parse_jaas_config,
    parse_plain_jaas_users,
)
from oncelog.security.sasl.scram import ScramCredential
from oncelog.security.sasl_client import UnsecuredTokenConfig, new_sasl_client
from oncelog.security.session import ListenerSecurity
from oncelog.security.tls import (
    PrincipalMapper,
    TlsConfigError,
    certificate_subject,
    client_context,
    server_context,
)

ScramLookup = Callable[[str, str], "ScramCredential | None"]


def listener_bindings(config: BrokerConfig, scram_lookup: ScramLookup,
                      scram_fake_salt_key: bytes) -> list[ListenerBinding]:
    """Every listener's binding. `scram_fake_salt_key`: the broker's secret for the salts
    SCRAM shows unknown users (`scram_credentials.load_fake_salt_key`)."""
    return [_binding(config, spec, scram_lookup, scram_fake_salt_key) for spec in config.listeners]


def _binding(config: BrokerConfig, spec: ListenerSpec, scram_lookup: ScramLookup,
             scram_fake_salt_key: bytes) -> ListenerBinding:
    name = spec.name
    prefix = f"listener.name.{name.lower()}."
    ssl_context = None
    principal_of = None
    if spec.protocol.tls:
        settings = config.listener_strings(name, "ssl.")
        try:
            ssl_context = server_context(settings)
            mapper = PrincipalMapper(settings.get("ssl.principal.mapping.rules", "DEFAULT"))
        except TlsConfigError as error:
            raise ConfigError(f"listener {name} ({spec.protocol.value}): {error}") from None
        if spec.protocol.value == "SSL":
            principal_of = partial(_certificate_principal, mapper)
    mechanisms: tuple[str, ...] = ()
    factory = None
    if spec.protocol.sasl:
        mechanisms = tuple(m.strip().upper() for m in config.for_listener(name, "sasl.enabled.mechanisms").split(",")
                           if m.strip())
        unsupported = [m for m in mechanisms if m not in SUPPORTED_MECHANISMS]
        if unsupported or not mechanisms:
            raise ConfigError(
                f"{prefix}sasl.enabled.mechanisms (or sasl.enabled.mechanisms): "
                f"{', '.join(unsupported) or 'none'} cannot be offered on {name}; oncelog offers "
                f"{', '.join(SUPPORTED_MECHANISMS)} (GSSAPI, Kafka's default, is Kerberos)")
        plain_users: dict[str, str] = {}
        if "PLAIN" in mechanisms:
            jaas = config.jaas_config(name, "PLAIN")
            if jaas is None:
                raise ConfigError(f"{prefix}plain.sasl.jaas.config: PLAIN is enabled on {name} but no users are "
                                  "configured (PlainLoginModule required user_<name>=\"<password>\" ...;)")
            try:
                plain_users = parse_plain_jaas_users(jaas)
            except ValueError as error:
                raise ConfigError(f"{prefix}plain.sasl.jaas.config: {error}") from None
        oauth = OAuthBearerSettings()
        if "OAUTHBEARER" in mechanisms:
            jaas = config.jaas_config(name, "OAUTHBEARER")
            if jaas is not None:
                try:
                    oauth = OAuthBearerSettings.from_jaas_options(parse_jaas_config(jaas)[2])
                except ValueError as error:
                    raise ConfigError(f"{prefix}oauthbearer.sasl.jaas.config: {error}") from None
        factory = partial(_new_server, plain_users, scram_lookup, scram_fake_salt_key, oauth)
    authentication_timeout_ms = config.for_listener(name, "connections.authentication.timeout.ms")
    if authentication_timeout_ms <= 0:
        raise ConfigError(f"{prefix}connections.authentication.timeout.ms: must be positive, got "
                          f"{authentication_timeout_ms}")
    security = ListenerSecurity(
        name, spec.protocol, mechanisms, factory,
        max_reauth_ms=config.for_listener(name, "connections.max.reauth.ms"),
        max_receive_size=config.for_listener(name, "sasl.server.max.receive.size"),
        authentication_timeout_ms=authentication_timeout_ms,
        failed_authentication_delay_ms=config["connection.failed.authentication.delay.ms"],
        principal_of_certificate=principal_of,
    )
    return ListenerBinding(spec, ssl_context, security)


def _new_server(plain_users: dict[str, str], scram_lookup: ScramLookup, scram_fake_salt_key: bytes,
                oauth: OAuthBearerSettings, mechanism: str) -> SaslServer:
    return new_sasl_server(mechanism, plain_users=plain_users, scram_lookup=scram_lookup,
                           scram_fake_salt_key=scram_fake_salt_key, oauth=oauth)


def _certificate_principal(mapper: PrincipalMapper, der: bytes) -> str | None:
    """User:<mapped subject DN>, or None when no mapping rule matches (the server then
    closes the connection, as Kafka fails its authentication). A certificate OpenSSL
    accepted but whose subject cannot be read is refused the same way."""
    try:
        subject = certificate_subject(der)
    except ValueError:
        return None
    name = mapper.name(subject)
    return None if name is None else f"User:{name}"


def inter_broker_security(config: BrokerConfig) -> PeerSecurity | None:
    """How this broker connects to the others (cluster mode), as Kafka's brokers do: to
    their `inter.broker.listener.name` listener, with TLS per its `ssl.*` settings (its
    keystore as the client certificate) and SASL with `sasl.mechanism.inter.broker.protocol`
    and the user of the listener's JAAS config for that mechanism (`username` and
    `password`; OAUTHBEARER's `unsecuredLoginStringClaim_sub`). None: PLAINTEXT."""
    spec = config.inter_broker_listener
    if not (spec.protocol.tls or spec.protocol.sasl):
        return None
    ssl_context = None
    if spec.protocol.tls:
        try:
            ssl_context = client_context(config.listener_strings(spec.name, "ssl."))
        except TlsConfigError as error:
            raise ConfigError(f"inter-broker listener {spec.name}: {error}") from None
    if not spec.protocol.sasl:
        return PeerSecurity(ssl_context)
    mechanism = config["sasl.mechanism.inter.broker.protocol"].strip().upper()
    offered = [m.strip().upper() for m in config.for_listener(spec.name, "sasl.enabled.mechanisms").split(",")]
    if mechanism not in offered:
        raise ConfigError(f"sasl.mechanism.inter.broker.protocol: {mechanism} is not enabled on the inter-broker "
                          f"listener {spec.name} (it offers {', '.join(offered)})")
    key = f"listener.name.{spec.name.lower()}.{mechanism.lower()}.sasl.jaas.config"
    jaas = config.jaas_config(spec.name, mechanism)
    if jaas is None:
        raise ConfigError(f"{key}: the inter-broker listener needs this broker's own credentials (username and "
                          "password options) for its connections to the other brokers")
    try:
        options = parse_jaas_config(jaas)[2]
        if mechanism == "OAUTHBEARER":
            token = UnsecuredTokenConfig.from_jaas_options(options)
            factory = partial(new_sasl_client, mechanism, oauth_config=token)
        else:
            username, password = options.get("username"), options.get("password")
            if not username or not password:
                raise ValueError("no username and password options (this broker's own credentials)")
            factory = partial(new_sasl_client, mechanism, username=username, password=password)
        factory()  # a credential that cannot work fails here, at start
    except ValueError as error:
        raise ConfigError(f"{key}: {error}") from None
    return PeerSecurity(ssl_context, mechanism, factory)


def plain_users(config: BrokerConfig) -> tuple[dict[str, str], ...]:
    """The PLAIN users of every SASL listener that offers PLAIN (checked at start by
    `listener_bindings`), for password checks outside SASL (the console's sign-in)."""
    users = []
    for spec in config.listeners:
        if spec.protocol.sasl and "PLAIN" in config.for_listener(spec.name, "sasl.enabled.mechanisms").upper():
            jaas = config.jaas_config(spec.name, "PLAIN")
            if jaas is not None:
                users.append(parse_plain_jaas_users(jaas))
    return tuple(users)

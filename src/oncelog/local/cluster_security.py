"""The listeners of `oncelog cluster start`, and the TLS and SASL settings it makes for
them when none are given, so that a secured local cluster is one command.

- **Listeners.** `--listeners` is a template for every node, or `N=...` for node N:
  Kafka's `listeners` value in which `{node}` is the node id and each `{port}` a free
  port of its own (`expand_listeners`). The ports are kept in node-N.properties.
- **TLS.** When a listener is SSL or SASL_SSL and `ssl.keystore.location` is not given,
  `generate_tls` makes a CA and one broker certificate (an EC key, valid for localhost,
  127.0.0.1 and every listener host, for 825 days) under `<data-dir>/tls/`, as PEM files
  (`ssl.keystore.type=PEM`), and every node trusts that CA.
- **SASL.** When a listener is SASL_PLAINTEXT or SASL_SSL and `sasl.enabled.mechanisms`
  is not given, `GeneratedSasl` enables PLAIN with users of random passwords, `broker`
  (how the nodes reach each other) and `admin`, both super users, and any others asked
  for (the chaos run's workers), in each SASL listener's
  `listener.name.<name>.plain.sasl.jaas.config`.
- **For the tools.** `client_properties` is what a client needs on the cluster's client
  listener (security.protocol, the CA, the admin's SASL login), written to
  `<data-dir>/client.properties` for `--command-config`. Files holding a password or a
  private key are readable by their owner only.
"""

from __future__ import annotations

import datetime
import ipaddress
import re
import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from oncelog.local.files import write_private
from oncelog.security.listeners import DEFAULT_PROTOCOL_MAP, ListenerSpec, parse_listeners

TLS_DIR = "tls"
CLIENT_PROPERTIES = "client.properties"
CERTIFICATE_DAYS = 825  # what browsers and most tools still take for a server certificate
_PLACEHOLDER = re.compile(r"\{(node|port)\}")
PLAIN_LOGIN = "org.apache.kafka.common.security.plain.PlainLoginModule"


def expand_listeners(template: str, node_id: int, free_port: Callable[[], int]) -> str:
    """`template` with `{node}` replaced by the node id and each `{port}` by a new free
    port; any other brace is an error (ValueError)."""
    def replace(match: re.Match[str]) -> str:
        return str(node_id) if match.group(1) == "node" else str(free_port())

    expanded = _PLACEHOLDER.sub(replace, template)
    if "{" in expanded or "}" in expanded:
        raise ValueError(f"--listeners: only {{node}} and {{port}} may stand in braces, got {template!r}")
    return expanded


def listeners_of(config: Mapping[str, str]) -> list[ListenerSpec]:
    """A node's listeners (ValueError when they do not parse)."""
    return parse_listeners(config.get("listeners", ""), config.get("advertised.listeners", ""),
                           config.get("listener.security.protocol.map", DEFAULT_PROTOCOL_MAP))


def client_listener(config: Mapping[str, str]) -> ListenerSpec:
    """The listener clients are pointed at: the first one that is not the inter-broker
    listener, else the first."""
    specs = listeners_of(config)
    inter_broker = config.get("inter.broker.listener.name", "").upper()
    if not inter_broker:
        inter_broker = config.get("security.inter.broker.protocol", "PLAINTEXT").upper()
        if inter_broker not in {spec.name for spec in specs}:
            inter_broker = specs[0].name
    return next((spec for spec in specs if spec.name != inter_broker), specs[0])


@dataclass(frozen=True, slots=True)
class GeneratedTls:
    ca: Path  # the CA certificate (PEM): every node's and client's truststore
    keystore: Path  # the broker's private key and certificate (PEM)

    def settings(self) -> dict[str, str]:
        return {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(self.keystore),
                "ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.ca)}


def generate_tls(directory: Path, hosts: set[str]) -> GeneratedTls:
    """A CA and a broker certificate for `hosts` (with localhost and 127.0.0.1) in
    `directory`, which is created readable by its owner only."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    valid_from, valid_to = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=CERTIFICATE_DAYS)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"oncelog local cluster CA {directory.parent.name}")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(valid_from).not_valid_after(valid_to)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                       crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = []
    for host in sorted(hosts | {"localhost", "127.0.0.1"}):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    broker = (x509.CertificateBuilder()
              .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "broker")]))
              .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(valid_from).not_valid_after(valid_to)
              .add_extension(x509.SubjectAlternativeName(names), critical=False)
              .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                    ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
              .sign(ca_key, hashes.SHA256()))
    generated = GeneratedTls(directory / "ca.pem", directory / "broker-keystore.pem")
    generated.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    write_private(generated.keystore, private + broker.public_bytes(serialization.Encoding.PEM))
    return generated


@dataclass(frozen=True, slots=True)
class GeneratedSasl:
    passwords: Mapping[str, str]  # user -> password: "broker", "admin" and any others asked for

    @classmethod
    def new(cls, users: tuple[str, ...] = ()) -> GeneratedSasl:
        return cls({user: secrets.token_urlsafe(18) for user in ("broker", "admin", *users)})

    def settings(self, specs: list[ListenerSpec]) -> dict[str, str]:
        accounts = " ".join(f'user_{user}="{password}"' for user, password in self.passwords.items())
        jaas = f'{PLAIN_LOGIN} required username="broker" password="{self.passwords["broker"]}" {accounts};'
        settings = {"sasl.enabled.mechanisms": "PLAIN", "sasl.mechanism.inter.broker.protocol": "PLAIN"}
        for spec in specs:
            if spec.protocol.sasl:
                settings[f"listener.name.{spec.name.lower()}.plain.sasl.jaas.config"] = jaas
        return settings


def secure_settings(data_dir: Path, configs: Iterable[Mapping[str, str]],
                    users: tuple[str, ...] = ()) -> dict[str, str]:
    """What a node needs beyond `config` for its TLS and SASL listeners: generated
    certificates unless a keystore is given, generated PLAIN users (`broker`, `admin` and
    `users`, not super users) unless SASL mechanisms are; nothing for a cluster of
    PLAINTEXT listeners. The same for every node (one CA, one certificate, one set of
    users), from the listeners of all of `configs` (a given key counts when node 1, the
    first of them, has it); the certificate is valid for every host they bind or
    advertise."""
    configs = list(configs)
    config = configs[0]
    specs = [spec for each in configs for spec in listeners_of(each)]
    added: dict[str, str] = {}
    if any(spec.protocol.tls for spec in specs) and "ssl.keystore.location" not in config:
        hosts = {address.host for spec in specs for address in (spec.bind, spec.advertised) if address} - {""}
        added.update(generate_tls(data_dir / TLS_DIR, hosts).settings())
    if any(spec.protocol.sasl for spec in specs) and "sasl.enabled.mechanisms" not in config:
        sasl = GeneratedSasl.new(users)
        added.update(sasl.settings(specs))
        super_users = config.get("super.users", "")
        wanted = [user for user in ("User:broker", "User:admin") if user not in super_users.split(";")]
        added["super.users"] = ";".join(filter(None, [super_users, *wanted]))
    return added


def client_properties(config: Mapping[str, str], user: str = "admin") -> dict[str, str]:
    """A client's settings for the cluster's client listener, as node `config` has it:
    the login of the generated `user` where the users were generated."""
    spec = client_listener(config)
    properties = {"security.protocol": spec.protocol.value}
    if spec.protocol.tls and config.get("ssl.truststore.location"):
        properties["ssl.ca.location"] = config["ssl.truststore.location"]
    if spec.protocol.sasl:
        jaas = config.get(f"listener.name.{spec.name.lower()}.plain.sasl.jaas.config", "")
        account = re.search(rf'user_{re.escape(user)}="([^"]*)"', jaas)
        if account is not None:
            properties.update({"sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": account.group(1)})
    return properties

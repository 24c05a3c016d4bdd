"""A test CA with a broker certificate (for localhost and 127.0.0.1) and client
certificates, made with the `cryptography` package, written as PEM and PKCS12 files. The
CA signs any subject it is given, as a careless CA would: see `openssl_subject`."""

from __future__ import annotations

import datetime
import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

PASSWORD = "test-store-secret"
# The principal mapping rule the docs show (docs/security.md, "Mapping rules that cannot be
# fooled"): the name is the most specific RDN's CN, of letters, digits, '.', '_' and '-' only.
CN_RULE = "RULE:^CN=([A-Za-z0-9._-]+)(,.*)?$/$1/L"


@dataclass(frozen=True)
class Issued:
    certificate: Path  # PEM certificate
    key: Path  # PEM private key, unencrypted
    combined: Path  # PEM: key then certificate (ssl.keystore.type=PEM, ssl.keystore.location)
    pkcs12: Path  # key and certificate, password PASSWORD


@dataclass(frozen=True)
class CertificateAuthority:
    directory: Path
    certificate: Path  # the CA's PEM certificate: the truststore
    _key: ec.EllipticCurvePrivateKey
    _cert: x509.Certificate

    @classmethod
    def create(cls, directory: Path) -> CertificateAuthority:
        directory.mkdir(parents=True, exist_ok=True)
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "oncelog test CA")])
        now = datetime.datetime.now(datetime.UTC)
        certificate = (
            x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256())
        )
        path = directory / "ca.pem"
        path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        return cls(directory, path, key, certificate)

    def issue(self, name: str, subject: str | x509.Name, *, server: bool) -> Issued:
        """A certificate for `subject`: "CN=alice,OU=eng,O=oncelog" (most specific first),
        OpenSSL's `-subj` form "/O=CN=admin/CN=mallory" (see `openssl_subject`) or an
        x509.Name; a server one is valid for localhost and 127.0.0.1."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(self._cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        )
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        certificate = builder.sign(self._key, hashes.SHA256())
        certificate_pem = certificate.public_bytes(serialization.Encoding.PEM)
        key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
        paths = Issued(self.directory / f"{name}.pem", self.directory / f"{name}.key",
                       self.directory / f"{name}-keystore.pem", self.directory / f"{name}.p12")
        paths.certificate.write_bytes(certificate_pem)
        paths.key.write_bytes(key_pem)
        paths.combined.write_bytes(key_pem + certificate_pem)
        paths.pkcs12.write_bytes(pkcs12.serialize_key_and_certificates(
            name.encode(), key, certificate, [self._cert],
            serialization.BestAvailableEncryption(PASSWORD.encode())))
        return paths


_OIDS = {"CN": NameOID.COMMON_NAME, "OU": NameOID.ORGANIZATIONAL_UNIT_NAME, "O": NameOID.ORGANIZATION_NAME,
         "C": NameOID.COUNTRY_NAME, "L": NameOID.LOCALITY_NAME, "ST": NameOID.STATE_OR_PROVINCE_NAME,
         "STREET": NameOID.STREET_ADDRESS, "DC": NameOID.DOMAIN_COMPONENT, "UID": NameOID.USER_ID,
         "emailAddress": NameOID.EMAIL_ADDRESS, "serialNumber": NameOID.SERIAL_NUMBER, "title": NameOID.TITLE}


def _name(subject: str | x509.Name) -> x509.Name:
    if isinstance(subject, x509.Name):
        return subject
    if subject.startswith("/"):
        return openssl_subject(subject)
    # RFC 4514 text lists the most specific part first; the certificate holds them the other way round.
    parts = [part.split("=", 1) for part in subject.split(",")]
    return x509.Name([x509.NameAttribute(_OIDS[key.strip()], value.strip()) for key, value in reversed(parts)])


def openssl_subject(subject: str) -> x509.Name:
    """A Name written as OpenSSL's `req -subj` takes it: RDNs in certificate order, each
    after a `/`, the attributes of a multi-valued one joined with `+`, a `\\` escaping the
    next character; a value is everything after its type's first `=`, commas and `=`
    included: "/O=CN=admin/CN=mallory", "/O=x,CN=admin/CN=mallory", "/CN=a+UID=b"."""
    if not subject.startswith("/"):
        raise ValueError(f"an OpenSSL subject starts with '/': {subject!r}")
    rdns = []
    for rdn in _split_unescaped(subject[1:], "/"):
        attributes = []
        for attribute in _split_unescaped(rdn, "+"):
            key, separator, value = attribute.partition("=")
            if not separator:
                raise ValueError(f"{attribute!r} in {subject!r} is not TYPE=value")
            oid = _OIDS[key] if key in _OIDS else x509.ObjectIdentifier(key)
            attributes.append(x509.NameAttribute(oid, re.sub(r"\\(.)", r"\1", value, flags=re.DOTALL)))
        rdns.append(x509.RelativeDistinguishedName(attributes))
    return x509.Name(rdns)


def _split_unescaped(text: str, separator: str) -> list[str]:
    """`text` cut at each `separator` no backslash escapes; the escapes stay in the parts."""
    parts, current = [], ""
    position = 0
    while position < len(text):
        char = text[position]
        if char == "\\":
            current += text[position:position + 2]
            position += 2
            continue
        if char == separator:
            parts.append(current)
            current = ""
        else:
            current += char
        position += 1
    return [*parts, current]


# PLAIN users of the SASL_SSL listener of `four_listeners`: admin and bob.
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret" user_bob="bob-secret";')


def four_listeners(ca: CertificateAuthority, server: Issued, *,
                   sasl_ssl_mechanisms: str = "PLAIN,SCRAM-SHA-256") -> dict[str, str]:
    """A broker's settings with one listener of each security protocol: PLAINTEXT (for
    setup), SSL requiring client certificates (a PKCS12 keystore; the principal is the
    certificate's CN), SASL_SSL (a PEM keystore given inline; PLAIN users admin and bob,
    and SCRAM) and SASL_PLAINTEXT (SCRAM-SHA-512, OAUTHBEARER)."""
    return {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(server.pkcs12), "ssl.keystore.password": PASSWORD,
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca.certificate),
        "listener.name.ssl.ssl.client.auth": "required",
        "listener.name.ssl.ssl.principal.mapping.rules": f"{CN_RULE},DEFAULT",
        "listener.name.sasl_ssl.ssl.keystore.type": "PEM",
        "listener.name.sasl_ssl.ssl.keystore.location": "",  # not the broker-wide PKCS12 one
        "listener.name.sasl_ssl.ssl.keystore.certificate.chain": server.certificate.read_text(),
        "listener.name.sasl_ssl.ssl.keystore.key": server.key.read_text(),
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": sasl_ssl_mechanisms,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "SCRAM-SHA-512,OAUTHBEARER",
        "connection.failed.authentication.delay.ms": "50",
    }

"""A test CA with a broker certificate (for localhost and 127.0.0.1) and client
certificates, made with the `cryptography` package, written as PEM and PKCS12 files."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

PASSWORD = "test-store-secret"


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

    def issue(self, name: str, subject: str, *, server: bool) -> Issued:
        """A certificate for `subject` ("CN=alice,OU=eng,O=oncelog"); a server one is valid
        for localhost and 127.0.0.1."""
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


def _name(subject: str) -> x509.Name:
    oids = {"CN": NameOID.COMMON_NAME, "OU": NameOID.ORGANIZATIONAL_UNIT_NAME, "O": NameOID.ORGANIZATION_NAME,
            "C": NameOID.COUNTRY_NAME, "L": NameOID.LOCALITY_NAME}
    # RFC 4514 text lists the most specific part first; the certificate holds them the other way round.
    parts = [part.split("=", 1) for part in subject.split(",")]
    return x509.Name([x509.NameAttribute(oids[key.strip()], value.strip()) for key, value in reversed(parts)])


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
        "listener.name.ssl.ssl.principal.mapping.rules": "RULE:^CN=(.*?),OU=.*$/$1/L,DEFAULT",
        "listener.name.sasl_ssl.ssl.keystore.type": "PEM",
        "listener.name.sasl_ssl.ssl.keystore.location": "",  # not the broker-wide PKCS12 one
        "listener.name.sasl_ssl.ssl.keystore.certificate.chain": server.certificate.read_text(),
        "listener.name.sasl_ssl.ssl.keystore.key": server.key.read_text(),
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": sasl_ssl_mechanisms,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "SCRAM-SHA-512,OAUTHBEARER",
        "connection.failed.authentication.delay.ms": "50",
    }

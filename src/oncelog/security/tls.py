"""TLS for SSL and SASL_SSL listeners, from Kafka's `ssl.*` keys.

- Keystore (this broker's certificate and key): `ssl.keystore.type=PEM` with
  `ssl.keystore.location` (a file holding the private key and the certificate chain)
  or inline `ssl.keystore.key` and `ssl.keystore.certificate.chain`; or
  `ssl.keystore.type=PKCS12` with `ssl.keystore.location` and `ssl.keystore.password`.
  `ssl.key.password` decrypts an encrypted PEM key. JKS (Kafka's default type) cannot be
  read here: convert it with `keytool -importkeystore -deststoretype PKCS12`.
- Truststore (the CAs client certificates must chain to): `ssl.truststore.type` PEM or
  PKCS12 with `ssl.truststore.location`, or inline `ssl.truststore.certificates`.
- `ssl.client.auth`: none, requested (a certificate is asked for and checked when
  given) or required; `ssl.enabled.protocols` (TLSv1.2, TLSv1.3); `ssl.cipher.suites`
  (OpenSSL names).
- The principal of a client certificate: its subject DN as RFC 2253 text (as Java's
  X500Principal prints it, e.g. `CN=alice,OU=eng,O=example`) mapped by
  `ssl.principal.mapping.rules` (`RULE:^CN=(.*?),OU=.*$/$1/L,DEFAULT`).

Keys and passwords never reach a log line; a bad keystore is a one-line error that names
the key.
"""

from __future__ import annotations

import contextlib
import os
import re
import ssl
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

_PROTOCOLS = {"TLSV1.2": ssl.TLSVersion.TLSv1_2, "TLSV1.3": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


class TlsConfigError(ValueError):
    """A TLS setting that cannot be used; the message names the key, never a secret."""


def server_context(settings: Mapping[str, str]) -> ssl.SSLContext:
    """The SSLContext of a listener, from its `ssl.*` settings (listener overrides applied)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _set_protocols(context, settings.get("ssl.enabled.protocols", "TLSv1.2,TLSv1.3"))
    certificate_chain, key = _keystore(settings)
    with _private_files(certificate_chain, key) as (chain_path, key_path):
        try:
            context.load_cert_chain(chain_path, key_path)
        except ssl.SSLError as error:
            raise TlsConfigError(f"ssl.keystore: the key does not match the certificate ({error.reason})") from None
    client_auth = settings.get("ssl.client.auth", "none").strip().lower() or "none"
    if client_auth not in _CLIENT_AUTH:
        raise TlsConfigError(f"ssl.client.auth: expected none, requested or required, got {client_auth!r}")
    context.verify_mode = _CLIENT_AUTH[client_auth]
    trusted = _truststore(settings)
    if trusted:
        context.load_verify_locations(cadata=trusted)
    elif client_auth != "none":
        raise TlsConfigError(f"ssl.client.auth={client_auth} needs a truststore (ssl.truststore.location or "
                             "ssl.truststore.certificates) to check client certificates against")
    ciphers = settings.get("ssl.cipher.suites", "").strip()
    if ciphers:
        try:
            context.set_ciphers(ciphers.replace(",", ":"))
        except ssl.SSLError:
            raise TlsConfigError(f"ssl.cipher.suites: none of {ciphers!r} is a cipher suite OpenSSL knows "
                                 "(use OpenSSL names, e.g. ECDHE-RSA-AES128-GCM-SHA256)") from None
    return context


def client_context(settings: Mapping[str, str]) -> ssl.SSLContext:
    """The SSLContext a broker connects to another broker's TLS listener with: the same
    listener's truststore to check the peer, its keystore as the client certificate
    (mutual TLS), host names checked unless `ssl.endpoint.identification.algorithm` is
    empty (Kafka's rule)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _set_protocols(context, settings.get("ssl.enabled.protocols", "TLSv1.2,TLSv1.3"))
    trusted = _truststore(settings)
    if trusted:
        context.load_verify_locations(cadata=trusted)
    else:
        context.load_default_certs()
    certificate_chain, key = _keystore(settings)
    with _private_files(certificate_chain, key) as (chain_path, key_path):
        context.load_cert_chain(chain_path, key_path)
    context.check_hostname = bool(settings.get("ssl.endpoint.identification.algorithm", "https").strip())
    return context


def _set_protocols(context: ssl.SSLContext, value: str) -> None:
    versions = []
    for name in filter(None, (part.strip() for part in value.split(","))):
        version = _PROTOCOLS.get(name.upper())
        if version is None:
            raise TlsConfigError(f"ssl.enabled.protocols: {name!r} is not supported (TLSv1.2 and TLSv1.3 are)")
        versions.append(version)
    if not versions:
        raise TlsConfigError("ssl.enabled.protocols: no protocol given")
    context.minimum_version = min(versions)
    context.maximum_version = max(versions)


def _keystore(settings: Mapping[str, str]) -> tuple[bytes, bytes]:
    """(PEM certificate chain, unencrypted PEM private key)."""
    kind = settings.get("ssl.keystore.type", "JKS").strip().upper()
    location = settings.get("ssl.keystore.location", "").strip()
    inline_chain = settings.get("ssl.keystore.certificate.chain", "").strip()
    inline_key = settings.get("ssl.keystore.key", "").strip()
    key_password = settings.get("ssl.key.password", "") or None
    if kind == "PEM":
        if inline_chain or inline_key:
            if location:
                raise TlsConfigError("ssl.keystore: give ssl.keystore.location or the inline "
                                     "ssl.keystore.certificate.chain and ssl.keystore.key, not both")
            if not (inline_chain and inline_key):
                raise TlsConfigError("ssl.keystore: ssl.keystore.certificate.chain and ssl.keystore.key go together")
            return _pem_pair(inline_chain.encode(), inline_key.encode(), key_password, "ssl.keystore.key")
        data = _read(location, "ssl.keystore.location")
        return _pem_pair(data, data, key_password, "ssl.keystore.location")
    if kind == "PKCS12":
        data = _read(location, "ssl.keystore.location")
        password = settings.get("ssl.keystore.password", "")
        try:
            key, certificate, extra = pkcs12.load_key_and_certificates(data, password.encode() or None)
        except ValueError:
            raise TlsConfigError(f"ssl.keystore.location: {location} is not a PKCS12 keystore this "
                                 "ssl.keystore.password opens") from None
        if key is None or certificate is None:
            raise TlsConfigError(f"ssl.keystore.location: {location} holds no private key with its certificate")
        chain = b"".join(c.public_bytes(serialization.Encoding.PEM) for c in (certificate, *extra))
        return chain, _unencrypted(key)
    if kind == "JKS":
        raise TlsConfigError("ssl.keystore.type: JKS keystores cannot be read here; use PKCS12 (keytool "
                             "-importkeystore -deststoretype PKCS12) or PEM, and set ssl.keystore.type")
    raise TlsConfigError(f"ssl.keystore.type: expected PEM or PKCS12, got {kind!r}")


def _pem_pair(chain_source: bytes, key_source: bytes, password: str | None, key_name: str) -> tuple[bytes, bytes]:
    certificates = _pem_blocks(chain_source, "CERTIFICATE")
    if not certificates:
        raise TlsConfigError(f"{key_name}: no PEM certificate found")
    key_blocks = re.findall(rb"-----BEGIN [A-Z ]*PRIVATE KEY-----.+?-----END [A-Z ]*PRIVATE KEY-----",
                            key_source, re.DOTALL)
    if not key_blocks:
        raise TlsConfigError(f"{key_name}: no PEM private key found")
    try:
        key = serialization.load_pem_private_key(key_blocks[0], password.encode() if password else None)
    except TypeError:
        raise TlsConfigError(f"{key_name}: the private key is encrypted; set ssl.key.password") from None
    except ValueError:
        raise TlsConfigError(f"{key_name}: the private key cannot be read (a wrong ssl.key.password?)") from None
    return b"\n".join(certificates) + b"\n", _unencrypted(key)


def _unencrypted(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _truststore(settings: Mapping[str, str]) -> str:
    """The trusted CA certificates as PEM text ('' when none is configured)."""
    kind = settings.get("ssl.truststore.type", "JKS").strip().upper()
    location = settings.get("ssl.truststore.location", "").strip()
    inline = settings.get("ssl.truststore.certificates", "").strip()
    if inline:
        blocks = _pem_blocks(inline.encode(), "CERTIFICATE")
        if not blocks:
            raise TlsConfigError("ssl.truststore.certificates: no PEM certificate found")
        return b"\n".join(blocks).decode()
    if not location:
        return ""
    data = _read(location, "ssl.truststore.location")
    if kind == "PEM" or (kind == "JKS" and b"-----BEGIN CERTIFICATE-----" in data):
        blocks = _pem_blocks(data, "CERTIFICATE")
        if not blocks:
            raise TlsConfigError(f"ssl.truststore.location: no PEM certificate in {location}")
        return b"\n".join(blocks).decode()
    if kind == "PKCS12":
        password = settings.get("ssl.truststore.password", "")
        try:
            _key, certificate, extra = pkcs12.load_key_and_certificates(data, password.encode() or None)
        except ValueError:
            raise TlsConfigError(f"ssl.truststore.location: {location} is not a PKCS12 truststore this "
                                 "ssl.truststore.password opens") from None
        certificates = [c for c in (certificate, *extra) if c is not None]
        return "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certificates)
    raise TlsConfigError(f"ssl.truststore.type: {kind} truststores cannot be read here; use PEM or PKCS12")


def _pem_blocks(data: bytes, label: str) -> list[bytes]:
    return re.findall(rb"-----BEGIN " + label.encode() + rb"-----.+?-----END " + label.encode() + rb"-----",
                      data, re.DOTALL)


def _read(location: str, key: str) -> bytes:
    if not location:
        raise TlsConfigError(f"{key}: not set")
    try:
        return Path(location).read_bytes()
    except OSError as error:
        raise TlsConfigError(f"{key}: cannot read {location}: {error.strerror or error}") from None


@contextlib.contextmanager
def _private_files(chain: bytes, key: bytes) -> Iterator[tuple[str, str]]:
    """The chain and key as files readable by this user only, removed once loaded
    (Python's ssl module loads certificates only from files)."""
    with tempfile.TemporaryDirectory(prefix="oncelog-tls-") as directory:
        paths = []
        for name, content in (("chain.pem", chain), ("key.pem", key)):
            path = os.path.join(directory, name)
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "wb") as file:
                file.write(content)
            paths.append(path)
        yield paths[0], paths[1]


# -- principals ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""  # "", "L" or "U"


class PrincipalMapper:
    """`ssl.principal.mapping.rules`: the first rule whose pattern matches the whole DN
    gives the name; DEFAULT keeps the DN. No matching rule: authentication fails (as Kafka)."""

    _RULE = re.compile(r"\s*(?:(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?))\s*(?:,|$)")

    def __init__(self, rules: str = "DEFAULT") -> None:
        self._rules: list[_Rule] = []
        text = rules.strip() or "DEFAULT"
        position = 0
        while position < len(text):
            match = self._RULE.match(text, position)
            if match is None or match.end() == position:
                raise TlsConfigError(f"ssl.principal.mapping.rules: cannot parse {text[position:]!r}")
            if match.group(1):
                self._rules.append(_Rule(None))
            else:
                try:
                    pattern = re.compile(match.group(2).replace("\\/", "/"))
                except re.error as error:
                    raise TlsConfigError(
                        f"ssl.principal.mapping.rules: bad pattern {match.group(2)!r}: {error}") from None
                replacement = re.sub(r"\$(\d+)", r"\\\1", match.group(3).replace("\\/", "/"))
                self._rules.append(_Rule(pattern, replacement, match.group(4)))
            position = match.end()

    def name(self, distinguished_name: str) -> str | None:
        for rule in self._rules:
            if rule.pattern is None:
                return distinguished_name
            if rule.pattern.fullmatch(distinguished_name):
                name = rule.pattern.sub(rule.replacement, distinguished_name, count=1)
                return name.lower() if rule.case == "L" else name.upper() if rule.case == "U" else name
        return None


def certificate_subject(der: bytes) -> str:
    """The subject of a DER certificate as RFC 2253 text (`CN=alice,OU=eng,O=example`)."""
    return x509.load_der_x509_certificate(der).subject.rfc4514_string()

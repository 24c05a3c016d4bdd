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
- The principal of a client certificate: its subject DN as RFC 2253 text, exactly as
  Java's X500Principal.getName() prints it (`CN=alice,OU=eng,O=example`; see
  distinguished_names), mapped by `ssl.principal.mapping.rules` as Kafka's
  SslPrincipalMapper does (`RULE:^CN=([A-Za-z0-9._-]+)(,.*)?$/$1/L`: the CN of the most
  specific RDN; docs/security.md says why a rule must be anchored like this one).

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

from oncelog.security.distinguished_names import rfc2253, tbs_subject

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
class _Group:
    """A reference to a capturing group in a rule's replacement: `$n` or `${name}`."""

    key: int | str


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: tuple[str | _Group, ...] = ()
    case: str = ""  # "", "L" or "U"

    def apply(self, distinguished_name: str) -> str | None:
        if self.pattern is None:
            return distinguished_name
        if self.pattern.fullmatch(distinguished_name) is None:
            return None
        # Java's replaceAll: every match is replaced, the empty one at the end of `.*` too.
        name = self.pattern.sub(self._expand, distinguished_name)
        return name.lower() if self.case == "L" else name.upper() if self.case == "U" else name

    def _expand(self, match: re.Match[str]) -> str:
        return "".join(part if isinstance(part, str) else match.group(part.key) or "" for part in self.replacement)


class PrincipalMapper:
    r"""`ssl.principal.mapping.rules`, as Kafka's SslPrincipalMapper: a comma-separated list
    of `RULE:pattern/replacement/` (optionally `L` or `U` after the last slash: lower or
    upper case the result) and `DEFAULT` (the DN as it is). The first rule whose pattern
    matches the whole DN (RFC 2253 text, `distinguished_names.rfc2253`) gives the name:
    the DN with every match of the pattern replaced (Java's replaceAll). No rule matches:
    None, and the connection is refused, as Kafka fails its authentication.

    In a pattern or a replacement `\/` is a `/`. A replacement is Java's: `$n` and `${name}`
    are groups, `\x` is `x`; as Kafka, a `$n` whose first digit is past the last group is
    text, and `$12` is group 1 then `2` when there is no group 12. Empty rules are skipped,
    so an empty list has no rule and refuses every certificate (Kafka's behaviour).

    Deviation: patterns are Python regular expressions, which agree with Java's in what
    mapping rules use (classes, groups, anchors, quantifiers); a named group is written
    `(?P<name>...)`, and `.` and `$` stop only at `\n` (Java's also at `\r`, U+0085,
    U+2028 and U+2029). Deviation: a replacement Java would fail on at the first
    connection (`$` not before a digit or `{`, a group the pattern does not have) is a
    configuration error at start-up here.
    """

    def __init__(self, rules: str = "DEFAULT") -> None:
        self._rules: list[_Rule] = []
        for rule in _split_rules(rules):
            if rule == "DEFAULT":
                self._rules.append(_Rule(None))
            elif rule:
                self._rules.append(_parse_rule(rule))

    def name(self, distinguished_name: str) -> str | None:
        for rule in self._rules:
            name = rule.apply(distinguished_name)
            if name is not None:
                return name
        return None


# One rule: DEFAULT, or RULE: then a pattern, a replacement and the case flag, `\` escaping
# the next character (a `/` among them) in the pattern and the replacement.
_RULE = re.compile(r"DEFAULT|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?)", re.DOTALL)
_RULE_END = re.compile(r"\s*(?:,\s*|$)")


def _split_rules(rules: str) -> Iterator[str]:
    """The rules of the list, each as written ('' for an empty one)."""
    text = rules.strip()
    position = 0
    while position < len(text):
        match = _RULE.match(text, position)
        end = match.end() if match else position
        separator = _RULE_END.match(text, end)
        if separator is None:
            following = text.find(",", end)
            rest = text[position:] if following < 0 else text[position:following]
            raise TlsConfigError(f"ssl.principal.mapping.rules: cannot parse {rest.strip()!r} (expected "
                                 "RULE:pattern/replacement/ with an optional L or U after it, or DEFAULT)")
        yield text[position:end]
        position = separator.end()


def _parse_rule(rule: str) -> _Rule:
    match = _RULE.fullmatch(rule)
    assert match is not None and match.group(1) is not None  # _split_rules gave it
    pattern_text, replacement_text, case = match.groups()
    try:
        pattern = re.compile(pattern_text)
    except re.error as error:
        raise TlsConfigError(f"ssl.principal.mapping.rules: bad pattern {pattern_text!r}: {error}") from None
    return _Rule(pattern, _parse_replacement(replacement_text, pattern), case)


def _parse_replacement(text: str, pattern: re.Pattern[str]) -> tuple[str | _Group, ...]:
    """Java's Matcher replacement syntax, with Kafka's treatment of `$n` past the last group."""
    def fail(reason: str) -> TlsConfigError:
        return TlsConfigError(f"ssl.principal.mapping.rules: replacement {text!r}: {reason}")

    parts: list[str | _Group] = []
    literal: list[str] = []
    position = 0
    while position < len(text):
        char = text[position]
        if char == "\\":
            if position + 1 == len(text):
                raise fail("a trailing \\ escapes nothing")
            literal.append(text[position + 1])
            position += 2
            continue
        if char != "$":
            literal.append(char)
            position += 1
            continue
        following = text[position + 1:position + 2]
        if following == "{":
            close = text.find("}", position + 2)
            group_name = text[position + 2:close] if close > 0 else ""
            if not group_name.isidentifier() or group_name not in pattern.groupindex:
                raise fail(f"no group named {group_name!r} in the pattern")
            reference: int | str = group_name
            position = close + 1
        elif following.isdigit() and following.isascii():
            number = int(following)
            if number > pattern.groups and pattern.groups > 0:
                literal.append("$")  # Kafka: text, not a group (SslPrincipalMapper)
                position += 1
                continue
            if number > pattern.groups:
                raise fail(f"group {number} does not exist (the pattern has no groups)")
            position += 2
            # Java takes the next digits too while they still name a group.
            while position < len(text) and text[position].isdigit() and text[position].isascii() \
                    and number * 10 + int(text[position]) <= pattern.groups:
                number = number * 10 + int(text[position])
                position += 1
            reference = number
        else:
            raise fail("$ must be followed by a group number or {name} (write \\$ for a $)")
        if literal:
            parts.append("".join(literal))
            literal = []
        parts.append(_Group(reference))
    if literal:
        parts.append("".join(literal))
    return tuple(parts)


def certificate_subject(der: bytes) -> str:
    """The subject of a DER certificate as RFC 2253 text, exactly as Java's
    X500Principal.getName() gives it (`CN=alice,OU=eng,O=example`); see
    distinguished_names. ValueError if the certificate cannot be read."""
    certificate = x509.load_der_x509_certificate(der)
    return rfc2253(tbs_subject(certificate.tbs_certificate_bytes))

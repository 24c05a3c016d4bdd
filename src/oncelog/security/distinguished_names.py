"""A certificate's subject as text: the DER encoding of an X.500 Name printed as Java's
`X500Principal.getName()` prints it (RFC 2253, by sun.security.x509's X500Name, RDN and
AVA). That text is what Kafka's `ssl.principal.mapping.rules` match and what a Kafka
principal of an SSL client is named, so ACLs and rules written for Kafka work here.

- The RDNs in reverse order of the DER sequence (the most specific first), joined with
  `,`; the attributes of a multi-valued RDN in their DER order, joined with `+`.
- Attribute types: Java's RFC 2253 keywords CN, C, L, ST, O, OU, STREET, DC and UID; any
  other type as its dotted OID (emailAddress is `1.2.840.113549.1.9.1`).
- Values of a string type (UTF8String, PrintableString, T61String, IA5String,
  GeneralString, BMPString) as text; any other value, and every value of a type printed as
  an OID, as `#` and the lowercase hex of its DER encoding (tag, length and content).
- Escapes, as AVA.toRFC2253String: a backslash before each `,` `=` `+` `<` `>` `#` `;`
  `"` `\\` wherever it is (Java escapes `=` and `#` everywhere, beyond what RFC 2253
  requires), NUL as `\\00`, and a backslash before each leading or trailing space or
  carriage return. Every other character, control characters and non-ASCII included,
  is printed as it is.

So in this text an unescaped `,` always ends an RDN, an unescaped `+` always ends an
attribute of a multi-valued RDN, and an unescaped `=` always ends an attribute type: the
subject `/O=CN=admin/CN=mallory` prints as `CN=mallory,O=CN\\=admin`.

Values are decoded as JDK 25 does: UTF8String as UTF-8 (each malformed sequence becomes
U+FFFD as Java's decoder cuts them, an encoded surrogate one U+FFFD for its three bytes),
BMPString as UTF-16BE, the other string types as ISO-8859-1. Deviation: older JDKs
(17.0.15 is one) decode every string type as UTF-8, so there a BMPString `admin` prints as
`\\00a\\00d\\00m\\00i\\00n` and a Latin-1 T61String's `é` as U+FFFD; the two agree on
UTF-8 and ASCII values, which is what CAs issue. Deviation: a BMPString holding a UTF-16
surrogate (not UCS-2) is refused as malformed; JDK 25 refuses a paired one and prints an
unpaired one as U+FFFD.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterator
from dataclasses import dataclass

_SEQUENCE, _SET, _OID = 0x30, 0x31, 0x06
_UTF8, _PRINTABLE, _T61, _IA5, _GENERAL, _BMP = 0x0C, 0x13, 0x14, 0x16, 0x1B, 0x1E
# The string types Java prints as text (AVA.isDerString), with the charset JDK 25 reads them in.
_TEXT_CHARSETS = {_UTF8: "utf-8", _PRINTABLE: "latin-1", _T61: "latin-1", _IA5: "latin-1",
                  _GENERAL: "latin-1", _BMP: "utf-16-be"}
# Java's RFC 2253 keywords (AVAKeyword with rfc2253Compliant); other types print as OIDs.
_KEYWORDS = {
    "2.5.4.3": "CN", "2.5.4.6": "C", "2.5.4.7": "L", "2.5.4.8": "ST", "2.5.4.10": "O", "2.5.4.11": "OU",
    "2.5.4.9": "STREET", "0.9.2342.19200300.100.1.25": "DC", "0.9.2342.19200300.100.1.1": "UID",
}
_ESCAPED = frozenset(',=+<>#;"\\')
_JAVA_REPLACE = "oncelog-java-replace"  # the codecs error handler registered at the end
_EDGE_WHITESPACE = " \r"  # escaped at either end of a value


@dataclass(frozen=True, slots=True)
class _Element:
    """One DER element: its first identifier octet, its content, and all of its bytes."""

    tag: int
    content: bytes
    encoded: bytes


def _elements(data: bytes) -> Iterator[_Element]:
    """The DER elements that `data` is made of, one after another."""
    position = 0
    while position < len(data):
        start = position
        tag = data[position]
        position += 1
        if tag & 0x1F == 0x1F:  # high tag number: base-128 octets follow
            while position < len(data) and data[position] & 0x80:
                position += 1
            position += 1
        if position >= len(data):
            raise ValueError("a DER element ends inside its header")
        length = data[position]
        position += 1
        if length == 0x80:
            raise ValueError("an indefinite length is not DER")
        if length > 0x80:
            size = length & 0x7F
            if size > 4 or position + size > len(data):
                raise ValueError("a DER length does not fit")
            length = int.from_bytes(data[position:position + size], "big")
            position += size
        end = position + length
        if end > len(data):
            raise ValueError("a DER element is longer than what holds it")
        yield _Element(tag, data[position:end], data[start:end])
        position = end


def _only(data: bytes, tag: int, what: str) -> _Element:
    found = list(_elements(data))
    if len(found) != 1 or found[0].tag != tag:
        raise ValueError(f"{what}: expected one element of tag 0x{tag:02x}")
    return found[0]


def tbs_subject(tbs_certificate: bytes) -> bytes:
    """The DER encoding of the subject Name, as it is in a TBSCertificate (RFC 5280: version
    [0] (optional), serialNumber, signature, issuer, validity, subject, ...)."""
    fields = list(_elements(_only(tbs_certificate, _SEQUENCE, "TBSCertificate").content))
    first = 1 if fields and fields[0].tag == 0xA0 else 0
    if len(fields) < first + 5 or fields[first + 4].tag != _SEQUENCE:
        raise ValueError("TBSCertificate: no subject Name where RFC 5280 puts it")
    return fields[first + 4].encoded


def rfc2253(name: bytes) -> str:
    """The DER Name `name` as RFC 2253 text, as Java's X500Principal.getName() gives it."""
    rdns = []
    for rdn in _elements(_only(name, _SEQUENCE, "Name").content):
        if rdn.tag != _SET:
            raise ValueError("Name: an RDN is not a SET")
        attributes = []
        for attribute in _elements(rdn.content):
            parts = list(_elements(attribute.content)) if attribute.tag == _SEQUENCE else []
            if len(parts) != 2 or parts[0].tag != _OID:
                raise ValueError("Name: an attribute is not a SEQUENCE of a type and a value")
            attributes.append(_attribute(_dotted(parts[0].content), parts[1]))
        rdns.append("+".join(attributes))
    return ",".join(reversed(rdns))


def _attribute(oid: str, value: _Element) -> str:
    keyword = _KEYWORDS.get(oid, oid)
    charset = _TEXT_CHARSETS.get(value.tag)
    if charset is None or keyword[0].isdigit():
        return f"{keyword}=#{value.encoded.hex()}"
    if value.tag == _BMP and any(0xD8 <= high <= 0xDF for high in value.content[::2]):
        raise ValueError("Name: a BMPString holds a UTF-16 surrogate")
    return f"{keyword}={_escape(value.content.decode(charset, _JAVA_REPLACE))}"


def _escape(text: str) -> str:
    escaped = "".join("\\" + c if c in _ESCAPED else "\\00" if c == "\0" else c for c in text)
    body = escaped.lstrip(_EDGE_WHITESPACE)
    leading = escaped[: len(escaped) - len(body)]
    core = body.rstrip(_EDGE_WHITESPACE)
    trailing = body[len(core):]
    return "".join("\\" + c for c in leading) + core + "".join("\\" + c for c in trailing)


def _dotted(content: bytes) -> str:
    """An OBJECT IDENTIFIER's content as dotted decimal (the first octets hold two arcs)."""
    arcs: list[int] = []
    value = 0
    for octet in content:
        value = value << 7 | octet & 0x7F
        if not octet & 0x80:
            arcs.append(value)
            value = 0
    if not arcs or content[-1] & 0x80:
        raise ValueError("Name: a malformed OBJECT IDENTIFIER")
    first = arcs[0]
    head = [first // 40, first % 40] if first < 80 else [2, first - 80]
    return ".".join(str(arc) for arc in head + arcs[1:])


def _java_replace(error: UnicodeError) -> tuple[str, int]:
    """U+FFFD for each malformed sequence, cut as Java's UTF-8 decoder cuts them: Python's
    stops an `ED` lead at a second octet of A0-BF (an encoded surrogate); Java reads it
    as any three-octet sequence and replaces all of it (two octets if the third is not a
    continuation, or at the end)."""
    if not isinstance(error, UnicodeDecodeError):
        raise error
    data, start = error.object, error.start
    if error.encoding in ("utf-8", "utf8") and data[start] == 0xED and start + 1 < len(data) \
            and 0xA0 <= data[start + 1] <= 0xBF:
        third_continues = start + 2 < len(data) and data[start + 2] & 0xC0 == 0x80
        return "\ufffd", start + (3 if third_continues else 2)
    return "\ufffd", error.end


codecs.register_error(_JAVA_REPLACE, _java_replace)

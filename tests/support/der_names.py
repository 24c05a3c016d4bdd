"""X.500 Names written byte by byte in DER, for subjects a CA library will not write: any
string type, malformed text, attributes of a multi-valued RDN in any order."""

from __future__ import annotations


def der(tag: int, content: bytes) -> bytes:
    """One DER element (definite length, short or long form)."""
    length = len(content)
    if length < 0x80:
        return bytes([tag, length]) + content
    size = (length.bit_length() + 7) // 8
    return bytes([tag, 0x80 | size]) + length.to_bytes(size, "big") + content


def oid(dotted: str) -> bytes:
    arcs = [int(arc) for arc in dotted.split(".")]
    content = b""
    for arc in [arcs[0] * 40 + arcs[1], *arcs[2:]]:
        octets = [arc & 0x7F]
        while arc := arc >> 7:
            octets.append(0x80 | arc & 0x7F)
        content += bytes(reversed(octets))
    return der(0x06, content)


def attribute(type_oid: str, tag: int, value: bytes | str) -> bytes:
    """An AttributeTypeAndValue: the type's OID and a value of DER tag `tag`."""
    return der(0x30, oid(type_oid) + der(tag, value.encode() if isinstance(value, str) else value))


def name(*rdns: list[bytes]) -> bytes:
    """A Name of RDNs in certificate order (least specific first), each a list of
    attributes kept in the order given (DER would sort them; Java prints them as found)."""
    return der(0x30, b"".join(der(0x31, b"".join(rdn)) for rdn in rdns))

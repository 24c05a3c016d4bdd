"""Certificate principals: the subject as RFC 2253 text exactly as Java's
X500Principal.getName() prints it (security/distinguished_names.py), and
`ssl.principal.mapping.rules` as Kafka's SslPrincipalMapper applies them (security/tls.py).

The expected strings follow from sun.security.x509's rules (AVA.toRFC2253String, RDN,
X500Name.getRFC2253Name); each was also checked against JDK 17 and JDK 25, and
tests/integration/test_certificate_principals_java.py compares them with the JDK on the
machine whenever there is one.
"""

from __future__ import annotations

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID

from oncelog.security.distinguished_names import rfc2253
from oncelog.security.tls import PrincipalMapper, TlsConfigError, certificate_subject
from tests.support.certs import CN_RULE, CertificateAuthority
from tests.support.der_names import attribute, der, name

CN, ORG, UID = "2.5.4.3", "2.5.4.10", "0.9.2342.19200300.100.1.1"
UTF8, PRINTABLE, T61, IA5, NUMERIC, BMP = 0x0C, 0x13, 0x14, 0x16, 0x12, 0x1E


@pytest.fixture(scope="module")
def ca(tmp_path_factory) -> CertificateAuthority:
    return CertificateAuthority.create(tmp_path_factory.mktemp("principal-certs"))


def subject_of(ca: CertificateAuthority, subject: str | x509.Name) -> str:
    issued = ca.issue("client", subject, server=False)
    certificate = x509.load_pem_x509_certificate(issued.certificate.read_bytes())
    return certificate_subject(certificate.public_bytes(serialization.Encoding.DER))


# -- the subject as Java prints it ------------------------------------------------------


@pytest.mark.parametrize(("subject", "expected"), [
    ("/O=CN=admin/CN=mallory", r"CN=mallory,O=CN\=admin"),
    ("/O=x,CN=admin/CN=mallory", r"CN=mallory,O=x\,CN\=admin"),
    ("/CN=mallory/O=CN=admin", r"O=CN\=admin,CN=mallory"),
    ("/CN=admin/O=example/CN=mallory", "CN=mallory,O=example,CN=admin"),
    ("/C=US/ST=CA/L=SF/STREET=1 Main St/O=example/OU=eng/DC=com/UID=u1/CN=alice",
     "CN=alice,UID=u1,DC=com,OU=eng,O=example,STREET=1 Main St,L=SF,ST=CA,C=US"),
], ids=["o-holding-cn-equals", "comma-inside-a-value", "cn-first-in-the-certificate", "two-cns", "every-keyword"])
def test_rdns_print_most_specific_first_with_javas_keywords(ca, subject, expected):
    assert subject_of(ca, subject) == expected


def test_other_types_print_as_dotted_oids_with_the_hex_of_their_der_value(ca):
    # emailAddress is an IA5String (tag 0x16): 16 05 "a@b.c"; title a UTF8String (0x0c).
    subject = "/O=example/CN=alice/emailAddress=a@b.c/title=boss"
    assert subject_of(ca, subject) == "2.5.4.12=#0c04626f7373,1.2.840.113549.1.9.1=#16056140622e63,CN=alice,O=example"


def test_java_escapes_these_characters_wherever_they_are(ca):
    # , = + < > # ; " \ each get a backslash, = and # too (beyond RFC 2253's minimum).
    assert subject_of(ca, r'/CN=a,b\+c=d<e>f#g;h"i\\j') == r'CN=a\,b\+c\=d\<e\>f\#g\;h\"i\\j'


@pytest.mark.parametrize(("value", "expected"), [
    ("  #x  ", r"\ \ \#x\ \ "),  # each leading and trailing space; # anywhere
    ("a b  c", "a b  c"),  # inner spaces as they are
    ("   ", r"\ \ \ "),
    ("\ra\r", "\\\ra\\\r"),  # a carriage return at either end, as a space
    ("a\x00b", r"a\00b"),  # NUL as \00
    ("a\nb\tc\x7f", "a\nb\tc\x7f"),  # other control characters as they are
    ("José 日本 😀", "José 日本 😀"),  # non-ASCII as it is, never as \hex
    ("a\\ ", "a\\\\\\ "),  # a backslash, then an escaped trailing space
], ids=["edge-spaces-and-hash", "inner-spaces", "only-spaces", "carriage-returns", "nul", "controls", "unicode",
        "backslash-then-space"])
def test_values_escape_as_java_does(ca, value, expected):
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, value)])
    assert subject_of(ca, subject) == f"CN={expected}"


def test_a_multi_valued_rdn_joins_its_attributes_with_plus_in_der_order(ca):
    subject = x509.Name([x509.RelativeDistinguishedName([x509.NameAttribute(NameOID.USER_ID, "m1"),
                                                         x509.NameAttribute(NameOID.COMMON_NAME, "mallory")]),
                         ])
    # The library writes a SET OF in DER order (sorted by encoding): CN's is the shorter.
    assert subject_of(ca, subject) == "CN=mallory+UID=m1"
    assert rfc2253(name([attribute(UID, UTF8, "a"), attribute(CN, UTF8, "b")], [attribute(ORG, UTF8, "o")])) \
        == "O=o,UID=a+CN=b"


def test_an_empty_subject_is_empty_text(ca):
    assert subject_of(ca, x509.Name([])) == ""


@pytest.mark.parametrize(("tag", "value", "expected"), [
    (UTF8, b"a\xffb\xed\xa0\x80z", "a\ufffdb\ufffdz"),  # Java: one U+FFFD for an encoded surrogate's 3 bytes
    (UTF8, b"a\xe2\x82", "a\ufffd"),
    (PRINTABLE, b"Alice", "Alice"),
    (IA5, b"a@b", "a@b"),
    (T61, b"caf\xe9", "café"),  # ISO-8859-1, as JDK 25 (JDK 17 decodes it as UTF-8: U+FFFD)
    (BMP, "admin".encode("utf-16-be"), "admin"),  # UTF-16, as JDK 25 (JDK 17: \00a\00d\00m\00i\00n)
    (BMP, "a=b".encode("utf-16-be"), r"a\=b"),
    (NUMERIC, b"123", "#1203313233"),  # not a string type Java prints as text
    (0x04, b"\x01\x02", "#04020102"),
], ids=["utf8-malformed", "utf8-truncated", "printable", "ia5", "t61-latin1", "bmp", "bmp-escaped", "numeric",
        "octet-string"])
def test_string_types_decode_as_jdk_25_and_others_print_as_hex(tag, value, expected):
    assert rfc2253(name([attribute(CN, tag, value)])) == f"CN={expected}"


@pytest.mark.parametrize("encoded", [
    name([attribute(CN, BMP, "😀".encode("utf-16-be"))]),  # not UCS-2: JDK 25 refuses it too
    b"\x30\x80\x00\x00",  # an indefinite length
    b"\x30\x05\x31\x03\x30\x01",  # a length past the end
    der(0x30, der(0x30, b"")),  # an RDN that is not a SET
], ids=["bmp-surrogates", "indefinite-length", "truncated", "rdn-not-a-set"])
def test_a_malformed_name_is_a_value_error(encoded):
    with pytest.raises(ValueError):
        rfc2253(encoded)


def test_a_large_oid_arc_prints_in_full():
    assert rfc2253(name([attribute("2.999.1234567890123", UTF8, "x")])) == "2.999.1234567890123=#0c0178"


# -- ssl.principal.mapping.rules --------------------------------------------------------


@pytest.mark.parametrize(("dn", "expected"), [
    (r"CN=mallory,O=CN\=admin", "mallory"),
    (r"CN=mallory,O=x\,CN\=admin", "mallory"),
    (r"O=CN\=admin,CN=mallory", None),  # the most specific RDN is not a CN
    ("CN=mallory,O=example,CN=admin", "mallory"),
    ("CN=admin+CN=mallory,O=example", None),  # a multi-valued first RDN
    (r"CN=admin\,x,O=example", None),  # an escaped character in the name
    (r"CN=\ admin", None),
    ("CN=admin\n", None),  # `$` before a final newline is not the end of the DN
    ("CN=Alice,OU=eng,O=example", "alice"),
    ("CN=svc-1.prod_a", "svc-1.prod_a"),
])
def test_the_documented_rule_takes_the_most_specific_cn_or_nothing(dn, expected):
    assert PrincipalMapper(CN_RULE).name(dn) == expected


def test_a_rule_that_searches_for_the_last_cn_is_fooled_by_a_second_cn():
    """Why docs/security.md warns against `.*CN=`: greedy, it takes the least specific CN."""
    unsafe = PrincipalMapper(r"RULE:^.*CN=([^,]+).*$/$1/L")
    assert unsafe.name("CN=mallory,O=example,CN=admin") == "admin"
    assert PrincipalMapper(CN_RULE).name("CN=mallory,O=example,CN=admin") == "mallory"


@pytest.mark.parametrize(("rules", "dn", "expected"), [
    ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,DEFAULT", "CN=Duke,OU=ServiceUsers,O=Org,C=US", "Duke"),
    ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,DEFAULT", "CN=Duke,OU=Other,O=Org", "CN=Duke,OU=Other,O=Org"),
    ("RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
     "CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US", "duke@sme"),
    ("RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U", "cn=duke,ou=sme,dc=mycp,dc=com", "DUKE@SME"),
    (" RULE:^CN=(.*?),.*$/$1/ ,  DEFAULT ", "CN=a,O=b", "a"),  # spaces around rules and commas
    ("DEFAULT,,RULE:^CN=(.*)$/$1/", "CN=a", "CN=a"),  # an empty rule is skipped; DEFAULT ends the list
    ("RULE:.*/x/", "CN=a", "xx"),  # Java's replaceAll: the empty match at the end is replaced too
    ("RULE:^CN=(.*)$/$1$4/", "CN=a", "a$4"),  # Kafka: past the last group, $4 is text
    ("RULE:^CN=(.*)$/$12/", "CN=a", "a2"),  # Java: group 1, then 2
    ("RULE:^CN=(.*)$/\\$1=$0/", "CN=a", "$1=CN=a"),
    ("RULE:^CN=(.*)\\/(.*)$/$2\\/$1/", "CN=a/b", "b/a"),  # \/ in a pattern and in a replacement
    ("RULE:^CN=(?P<user>[a-z]+)(,.*)?$/${user}/", "CN=ann,O=x", "ann"),
    ("RULE:^CN=(a)?(b)$/[$1]$2/", "CN=b", "[]b"),  # a group that took no part is empty
    ("RULE:^CN=((\\\\, *|\\w)+)(,.*|$)/$1/,DEFAULT", "CN=Tkac\\, Adam,OU=ITZ,DC=geodis,DC=cz", "Tkac\\, Adam"),
    ("RULE:^CN=(.*)$/$1/", "O=x", None),  # no rule matches: the connection is refused
    ("", "CN=a", None),  # an empty list has no rule (Kafka's behaviour)
])
def test_rules_apply_as_kafkas_ssl_principal_mapper(rules, dn, expected):
    assert PrincipalMapper(rules).name(dn) == expected


def test_the_whole_dn_must_match():
    assert PrincipalMapper("RULE:CN=([a-z]+)/$1/").name("CN=ann,O=x") is None


@pytest.mark.parametrize(("rules", "message"), [
    ("DEFAUL", "cannot parse 'DEFAUL'"),
    ("DEFAULT/L", "cannot parse"),
    ("RULE:^CN=(.*)$/$1", "cannot parse"),  # no closing slash
    ("RULE:^CN=(.*)$/$1/LU", "cannot parse"),
    ("RULE:^CN=(.*)$/$1/l", "cannot parse"),  # Kafka's flags are L and U only
    ("RULE:^CN=(.*)$/$1/L DEFAULT", "cannot parse"),
    ("RULE:^CN=(.*$/$1/", "bad pattern"),
    ("RULE:^CN=.*$/$1/", "the pattern has no groups"),
    ("RULE:^CN=(.*)$/$x/", "$ must be followed by a group number"),
    ("RULE:^CN=(.*)$/${user}/", "no group named 'user'"),
])
def test_a_rule_that_cannot_work_is_a_config_error(rules, message):
    with pytest.raises(TlsConfigError) as raised:
        PrincipalMapper(rules)
    assert str(raised.value).startswith("ssl.principal.mapping.rules: ")
    assert message in str(raised.value)

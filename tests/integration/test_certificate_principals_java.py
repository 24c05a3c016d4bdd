"""oncelog's certificate principals against Apache Kafka's own code: the JDK's
X500Principal.getName() for the subject text and kafka-clients' SslPrincipalMapper for
`ssl.principal.mapping.rules` (tests/java/PrincipalNames.java), one JVM for every query.
Skipped, naming what is missing, without a JDK 17+ or the kafka-clients jar.

The names are the attack subjects of tests/integration/test_attack_certificates.py and a
few hundred random ones (seeded) of the types every JDK 17+ prints alike: UTF8String with
any bytes, ASCII PrintableString and IA5String, types printed as hex. BMPString and
non-ASCII bytes in the other string types are left out: JDK 25 decodes them by type and
JDK 17 as UTF-8 (security/distinguished_names.py follows JDK 25; the unit tests cover it).
The rules are the documented ones, the unsafe one the docs used to show and rules from
Kafka's own examples, applied to those subjects' text.
"""

from __future__ import annotations

import base64
import random
from pathlib import Path

import pytest

from oncelog.security.distinguished_names import rfc2253
from oncelog.security.tls import PrincipalMapper
from tests.support.certs import CN_RULE, openssl_subject
from tests.support.der_names import attribute, name
from tests.support.java import JavaProgram
from tests.support.principal_attacks import ATTACKS, documented_rules

SOURCE = Path(__file__).resolve().parents[1] / "java" / "PrincipalNames.java"
OIDS = ("2.5.4.3", "2.5.4.10", "2.5.4.11", "2.5.4.6", "0.9.2342.19200300.100.1.25", "0.9.2342.19200300.100.1.1",
        "1.2.840.113549.1.9.1", "2.5.4.5", "1.3.6.1.4.1.311.60.2.1.3")
JAVA_ONLY_LINE_TERMINATORS = "\r\x85\u2028\u2029"
SPECIALS = ' ,=+<>#;"\\\r\n\t\x00'
RULES = (
    CN_RULE,
    f"{CN_RULE},DEFAULT",
    r"RULE:^.*CN=([^,]+).*$/$1/L",  # the unsafe rule the docs used to show
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,DEFAULT",
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
    "RULE:.*/x/",
    "RULE:^CN=(.*)$/$1$4/U",
    "RULE:^CN=(.*)$/$12/",
    r"RULE:^CN=((\\, *|\w)+)(,.*|$)/$1/,DEFAULT",
)


def random_names(count: int, seed: int = 38) -> list[bytes]:
    rng = random.Random(seed)
    ascii_text = "aZ9 '()-./:?*&@" + SPECIALS
    utf8_bytes = [*ascii_text.encode(), 0xC3, 0xA9, 0xED, 0xA0, 0x80, 0xBF, 0xE2, 0x82, 0xF0, 0x9F, 0x98, 0xFF, 0xC0]
    names = []
    for _ in range(count):
        rdns = []
        for _ in range(rng.randint(0, 3)):
            attributes = []
            for _ in range(rng.randint(1, 3)):
                tag = rng.choice((0x0C, 0x0C, 0x13, 0x16, 0x12, 0x04, 0x02))
                if tag == 0x0C:
                    value = bytes(rng.choice(utf8_bytes) for _ in range(rng.randint(0, 8)))
                else:
                    value = "".join(rng.choice(ascii_text) for _ in range(rng.randint(0, 8))).encode()
                attributes.append(attribute(rng.choice(OIDS), tag, value))
            rdns.append(attributes)
        names.append(name(*rdns))
    return names


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@pytest.fixture(scope="module")
def kafka(java_tools, tmp_path_factory):
    """A function running queries through PrincipalNames.java: (outcome, text) each."""
    directory = tmp_path_factory.mktemp("principal-names")
    program = JavaProgram(java_tools, directory / "classes", SOURCE)

    def run(queries: list[str]) -> list[tuple[str, str]]:
        path = directory / "queries.txt"
        path.write_text("".join(f"{query}\n" for query in queries))
        results = program.run(str(path), timeout=120).results
        answers = []
        for index in range(len(queries)):
            [(outcome, value)] = results[str(index)].items()
            answers.append((outcome, base64.b64decode(value).decode() if outcome == "ok" else value))
        return answers

    return run


def test_subjects_print_as_the_jdks_x500principal_prints_them(kafka):
    attacks = [openssl_subject(subject).public_bytes() for subject in ATTACKS.values()]
    names = attacks + random_names(400)
    answers = kafka([f"dn {encoded.hex()}" for encoded in names])
    differ = [(encoded.hex(), answer, rfc2253(encoded)) for encoded, answer in zip(names, answers, strict=True)
              if answer != ("ok", rfc2253(encoded))]
    assert not differ, differ[:5]


def test_rules_map_as_kafkas_ssl_principal_mapper(kafka):
    dns = [rfc2253(openssl_subject(subject).public_bytes()) for subject in ATTACKS.values()]
    dns += ["CN=Duke,OU=ServiceUsers,O=Org,C=US", "CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US",
            "CN=Tkac\\, Adam,OU=ITZ,DC=geodis,DC=cz", "CN=admin\n", "CN=a"]
    dns += [rfc2253(encoded) for encoded in random_names(60, seed=3)]
    # Java's `.` and `$` also stop at these line terminators, Python's at \n only (a
    # Deviation docs/security.md names): left out.
    dns = [dn for dn in dns if not any(terminator in dn for terminator in JAVA_ONLY_LINE_TERMINATORS)]
    cases = [(rules, dn) for rules in (*RULES, *documented_rules()) for dn in dns]
    answers = kafka([f"map {b64(rules)} {b64(dn)}" for rules, dn in cases])
    differ = []
    for (rules, dn), (outcome, value) in zip(cases, answers, strict=True):
        ours = PrincipalMapper(rules).name(dn)
        if (outcome, value) != (("ok", ours) if ours is not None else ("nomatch", "-")):
            differ.append((rules, dn, outcome, value, ours))
    assert not differ, differ[:5]


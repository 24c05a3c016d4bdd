"""The certificate subjects an attacker asks a careless CA for, and every mapping rule the
repository shows: shared by the certificate attack tests and their comparison with Java
(tests/integration/test_attack_certificates.py, test_certificate_principals_java.py)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository
# OpenSSL -subj form: RDNs in certificate order, the most specific (the CN here) last.
ATTACKS = {
    "o-holding-cn-equals-admin": "/O=CN=admin/CN=mallory",
    "comma-inside-a-value": "/O=x,CN=admin/CN=mallory",
    "cn-first-in-the-certificate": "/CN=mallory/O=CN=admin",
    "a-second-cn": "/CN=admin/O=example/CN=mallory",
    "multi-valued-cn": "/O=example/CN=mallory+CN=admin",
}
# The attacks whose most specific RDN is CN=mallory alone: mallory, under every rule.
MALLORY_FIRST = ("o-holding-cn-equals-admin", "comma-inside-a-value", "a-second-cn")
ADMIN_SUBJECT = "/O=example/CN=admin"
_SHOWN_RULE = re.compile(r"RULE:(?:\\.|[^\\/\s`'\"])*/(?:\\.|[^\\/\s`'\"])*/[LU]?")


def documented_rules() -> list[str]:
    """Every `RULE:pattern/replacement/[LU]` written in the repository's docs, READMEs,
    example configs, src/ (docstrings) and tests/support, once each; a syntax placeholder
    (a pattern without `=`, such as `RULE:pattern/replacement/`) is not a rule."""
    places = [ROOT / "README.md", *ROOT.glob("docs/**/*.md"), *ROOT.glob("config/**/*"), *ROOT.glob("examples/**/*"),
              *ROOT.glob("src/**/*.py"), *ROOT.glob("tests/support/**/*.py")]
    found: dict[str, None] = {}
    for path in places:
        if path.is_file():
            for rule in _SHOWN_RULE.findall(path.read_text(encoding="utf-8", errors="replace")):
                if "=" in rule.split("/", 1)[0]:
                    found[rule] = None
    return list(found)

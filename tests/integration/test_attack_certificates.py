"""Attacks on certificate principals (issue 38, item 3). A CA that signs any subject as
long as its CN is the requester's lets mallory write the rest of it. docs/security.md
showed `RULE:^.*CN=([^,]+).*$/$1/L`, which takes the last `CN=` of the subject's text,
and the subject was printed without Java's escape of `=`: mallory's certificate for
`/O=CN=admin/CN=mallory` was `CN=mallory,O=CN=admin`, so `User:admin`, a super user.

One broker with an SSL listener (ssl.client.auth=required) for each mapping rule the
repository shows (README.md, docs/, config/, examples/, src/ docstrings, tests/support;
`documented_rules`), each listener with that rule alone, so a certificate it does not
match is refused; `super.users=User:admin`, ACLs on, no access without an ACL. User:mallory
may describe one topic, `mallorys-topic`; only a super user sees `admins-topic` or the
ACLs (DescribeAcls needs Cluster DESCRIBE). Each attacker's certificate is signed by the broker's
trusted CA; a certificate for `/O=example/CN=admin` shows that the rights are there to steal.
"""

from __future__ import annotations

import socket
import ssl
import struct
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka import admin as confluent
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.describe_acls.v3.request import DescribeAclsRequest
from kio.static.primitive import i8

from oncelog import EmbeddedBroker
from oncelog.protocol.client import decode_response, encode_request
from oncelog.protocol.messages import ErrorCode
from oncelog.security.acl import AclOperation, AclPermissionType, PatternType, ResourceType
from oncelog.security.tls import PrincipalMapper
from tests.support.certs import PASSWORD, CertificateAuthority, Issued
from tests.support.principal_attacks import ADMIN_SUBJECT, ATTACKS, MALLORY_FIRST, ROOT, documented_rules
from tests.support.secured import STANDARD_AUTHORIZER

RULES = documented_rules()


@dataclass(frozen=True)
class Attacked:
    ports: dict[str, int]  # rule: the port of its listener
    ca: CertificateAuthority
    certificates: dict[str, Issued]  # attack name (or "admin"): its certificate


def listener_name(index: int) -> str:
    return f"RULE{index}"


@pytest.fixture(scope="module")
def attacked(tmp_path_factory) -> Iterator[Attacked]:
    base = tmp_path_factory.mktemp("attack-certificates")
    ca = CertificateAuthority.create(base / "certs")
    server = ca.issue("broker", "CN=localhost,O=oncelog", server=True)
    certificates = {label: ca.issue(label, subject, server=False) for label, subject in ATTACKS.items()}
    certificates["admin"] = ca.issue("admin", ADMIN_SUBJECT, server=False)
    names = [listener_name(index) for index in range(len(RULES))]
    config = {
        "listeners": ",".join(f"{name}://127.0.0.1:0" for name in names),
        "listener.security.protocol.map": ",".join(f"{name}:SSL" for name in names),
        "ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(server.pkcs12), "ssl.keystore.password": PASSWORD,
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca.certificate),
        "ssl.client.auth": "required",
        "authorizer.class.name": STANDARD_AUTHORIZER,
        "allow.everyone.if.no.acl.found": "false",
        "super.users": "User:admin",
        "connection.failed.authentication.delay.ms": "0",
    }
    for name, rule in zip(names, RULES, strict=True):
        config[f"listener.name.{name.lower()}.ssl.principal.mapping.rules"] = rule
    with EmbeddedBroker(base / "data", config) as running:
        ports = {rule: running.broker.endpoints[name][1] for name, rule in zip(names, RULES, strict=True)}
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{ports[RULES[0]]}", "security.protocol": "SSL",
                             "ssl.ca.location": str(ca.certificate), "ssl.key.location": str(certificates["admin"].key),
                             "ssl.certificate.location": str(certificates["admin"].certificate)})
        for future in admin.create_topics([NewTopic("admins-topic", 1, 1), NewTopic("mallorys-topic", 1, 1)]).values():
            future.result(10)
        for future in admin.create_acls([confluent.AclBinding(
                confluent.ResourceType.TOPIC, "mallorys-topic", confluent.ResourcePatternType.LITERAL, "User:mallory",
                "*", confluent.AclOperation.DESCRIBE, confluent.AclPermissionType.ALLOW)]).values():
            future.result(10)
        del admin
        yield Attacked(ports, ca, certificates)


def tls_request(port: int, ca: CertificateAuthority, certificate: Issued, entity):
    """`entity`'s response over a TLS connection with this certificate, or None when the
    broker closes the connection instead of answering (no mapping rule matched)."""
    context = ssl.create_default_context(cafile=str(ca.certificate))
    context.load_cert_chain(str(certificate.certificate), str(certificate.key))
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            context.wrap_socket(raw, server_hostname="localhost") as tls:
        try:
            tls.sendall(encode_request(entity, 1))
            frame = b""
            while len(frame) < 4 or len(frame) < 4 + struct.unpack_from(">i", frame)[0]:
                chunk = tls.recv(65536)
                if not chunk:
                    return None
                frame += chunk
        except (ConnectionError, ssl.SSLError):
            return None
    return decode_response(entity, frame[4:], 1)


def refused(port: int, ca: CertificateAuthority, certificate: Issued) -> bool:
    return tls_request(port, ca, certificate, ApiVersionsRequest(client_software_name="attack",
                                                                 client_software_version="1")) is None


@dataclass(frozen=True)
class Rights:
    topics: frozenset[str]  # the topics Metadata shows it (confluent-kafka's list_topics)
    describe_acls: ErrorCode  # DescribeAcls needs Cluster DESCRIBE: super users only here


def rights(port: int, ca: CertificateAuthority, certificate: Issued) -> Rights:
    client = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SSL",
                          "ssl.ca.location": str(ca.certificate), "ssl.key.location": str(certificate.key),
                          "ssl.certificate.location": str(certificate.certificate)})
    topics = frozenset(client.list_topics(timeout=10).topics)
    # On the wire: librdkafka's describe_acls answers CLUSTER_AUTHORIZATION_FAILED with an empty list.
    answer = tls_request(port, ca, certificate, DescribeAclsRequest(
        resource_type_filter=i8(ResourceType.ANY), resource_name_filter=None, pattern_type_filter=i8(PatternType.ANY),
        principal_filter=None, host_filter=None, operation=i8(AclOperation.ANY),
        permission_type=i8(AclPermissionType.ANY)))
    assert answer is not None
    return Rights(topics, answer.error_code)


def test_the_repository_shows_mapping_rules_and_each_one_parses():
    assert RULES, "no RULE: found in the docs: documented_rules() reads nothing"
    assert any(rule in (ROOT / "docs" / "security.md").read_text() for rule in RULES)
    for rule in RULES:
        PrincipalMapper(rule)


@pytest.mark.parametrize("rule", RULES)
def test_a_real_admin_certificate_is_a_super_user(attacked, rule):
    """The control: the rights mallory is after are there, under each rule."""
    port = attacked.ports[rule]
    assert not refused(port, attacked.ca, attacked.certificates["admin"])
    assert rights(port, attacked.ca, attacked.certificates["admin"]) == Rights(
        frozenset({"admins-topic", "mallorys-topic"}), ErrorCode.none)


@pytest.mark.parametrize("attack", MALLORY_FIRST)
@pytest.mark.parametrize("rule", RULES)
def test_a_certificate_whose_cn_is_mallory_is_user_mallory_under_every_documented_rule(attacked, rule, attack):
    port = attacked.ports[rule]
    certificate = attacked.certificates[attack]
    assert not refused(port, attacked.ca, certificate), f"{ATTACKS[attack]} refused under {rule}"
    assert rights(port, attacked.ca, certificate) == Rights(frozenset({"mallorys-topic"}),
                                                           ErrorCode.cluster_authorization_failed)


@pytest.mark.parametrize("attack", ATTACKS)
@pytest.mark.parametrize("rule", RULES)
def test_no_attack_certificate_gets_a_super_users_rights(attacked, rule, attack):
    """Refused, or at most mallory's rights: `/CN=mallory/O=CN=admin` prints as
    `O=CN\\=admin,CN=mallory` and a multi-valued `CN=admin+CN=mallory` is no one's name;
    neither is ever User:admin."""
    port = attacked.ports[rule]
    certificate = attacked.certificates[attack]
    if not refused(port, attacked.ca, certificate):
        seen = rights(port, attacked.ca, certificate)
        assert seen.topics <= {"mallorys-topic"}, (ATTACKS[attack], rule, seen)
        assert seen.describe_acls == ErrorCode.cluster_authorization_failed, (ATTACKS[attack], rule, seen)

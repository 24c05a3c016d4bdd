"""`oncelog acls` run as a real subprocess against a real broker with SASL users and
Kafka's StandardAuthorizer (tests/support/secured.py): what kafka-acls.sh users type and
see, that the ACLs it adds really decide what a client may do, and its one-line errors
(no authorizer, a user who may not describe ACLs, a misspelt operation)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.support.secured import SecuredBroker, password, secured_broker

ONCELOG = Path(sys.executable).with_name("oncelog")
COMMAND_TIMEOUT_S = 60


class Cli:
    """`oncelog acls ...` as one user: `--bootstrap-server` and `--command-config` (a SASL
    PLAIN properties file, as an operator writes it) are added to every command."""

    def __init__(self, bootstrap: str, command_config: Path | None) -> None:
        self.bootstrap = bootstrap
        self.command_config = command_config

    def __call__(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        connection = ["--bootstrap-server", self.bootstrap]
        if self.command_config is not None:
            connection += ["--command-config", str(self.command_config)]
        return subprocess.run(
            [str(ONCELOG), "acls", *args, *connection], input=stdin,
            stdin=subprocess.DEVNULL if stdin is None else None, capture_output=True, text=True, check=False,
            timeout=COMMAND_TIMEOUT_S, env={k: v for k, v in os.environ.items() if k != "ONCELOG_BOOTSTRAP"},
        )

    def ok(self, *args: str, stdin: str | None = None) -> str:
        completed = self(*args, stdin=stdin)
        assert completed.returncode == 0, f"oncelog acls {' '.join(args)}: {completed.stderr}"
        assert completed.stderr == "", completed.stderr
        return completed.stdout

    def fails(self, *args: str, stdin: str | None = None) -> str:
        """The one error line of a command that must fail the user-facing way."""
        completed = self(*args, stdin=stdin)
        assert completed.returncode == 1, (completed.returncode, completed.stderr)
        assert completed.stderr.count("\n") == 1 and completed.stderr.startswith("oncelog: error: "), \
            completed.stderr
        return completed.stderr.strip()


def sasl_properties(directory: Path, user: str) -> Path:
    path = directory / f"{user}.properties"
    path.write_text("# as for kafka-acls.sh --command-config\nsecurity.protocol=SASL_PLAINTEXT\n"
                    f"sasl.mechanism=PLAIN\nsasl.username={user}\nsasl.password={password(user)}\n")
    return path


@pytest.fixture(scope="module")
def secured(tmp_path_factory) -> Iterator[SecuredBroker]:
    with secured_broker(tmp_path_factory.mktemp("acls-broker")) as broker:
        yield broker


@pytest.fixture(scope="module")
def admin_cli(secured, tmp_path_factory) -> Cli:
    return Cli(secured.bootstrap_servers, sasl_properties(tmp_path_factory.mktemp("admin"), "admin"))


def pattern(resource_type: str, name: str, pattern_type: str = "LITERAL") -> str:
    return f"ResourcePattern(resourceType={resource_type}, name={name}, patternType={pattern_type})"


def entry(principal: str, operation: str, permission: str = "ALLOW", host: str = "*") -> str:
    return f"(principal={principal}, host={host}, operation={operation}, permissionType={permission})"


def current(resource: str, *entries: str) -> str:
    """kafka-acls.sh's listing of one resource."""
    return f"Current ACLs for resource `{resource}`:\n" + "\n".join(f"\t{e}" for e in entries) + "\n\n"


def produce_one(secured: SecuredBroker, user: str, topic: str) -> str | None:
    """None if `user` could write a record to `topic`, else the error's name."""
    producer = Producer(secured.client(user, **{"message.timeout.ms": 5000}))
    outcome: list[str | None] = []
    producer.produce(topic, b"value", on_delivery=lambda error, _: outcome.append(None if error is None
                                                                                   else error.name()))
    producer.flush(10)
    return outcome[0]


def test_topic_acl_added_listed_and_removed_decides_whether_alice_may_produce(secured, admin_cli):
    secured.create_topic("payments")
    assert produce_one(secured, "alice", "payments") == "TOPIC_AUTHORIZATION_FAILED"

    added = admin_cli.ok("--add", "--allow-principal", "User:alice", "--operation", "Write", "--topic", "payments")
    assert added == (f"Adding ACLs for resource `{pattern('TOPIC', 'payments')}`: \n"
                     f" \t{entry('User:alice', 'WRITE')}\n\n")
    assert produce_one(secured, "alice", "payments") is None
    assert admin_cli.ok("--list", "--topic", "payments") == current(pattern("TOPIC", "payments"),
                                                                    entry("User:alice", "WRITE"))
    # kafka-acls.sh takes --force with --list (scripts pass it to every call): the same list.
    assert admin_cli.ok("--list", "--topic", "payments", "--force") == current(pattern("TOPIC", "payments"),
                                                                               entry("User:alice", "WRITE"))
    again = admin_cli.ok("--add", "--allow-principal", "User:alice", "--operation", "WRITE", "--topic", "payments")
    assert again == (f"Acl (pattern={pattern('TOPIC', 'payments')}, entry={entry('User:alice', 'WRITE')}) "
                     "already exists.\n")

    removed = admin_cli.ok("--remove", "--allow-principal", "User:alice", "--topic", "payments", "--force")
    assert removed == (f"Removed ACLs for resource `{pattern('TOPIC', 'payments')}`:\n"
                       f"\t{entry('User:alice', 'WRITE')}\n\n")
    assert admin_cli.ok("--list", "--topic", "payments") == ""
    assert produce_one(secured, "alice", "payments") == "TOPIC_AUTHORIZATION_FAILED"


def test_group_transactional_id_and_cluster_acls_round_trip_with_confirmation_on_stdin(admin_cli):
    resources = ("--group", "billing", "--transactional-id", "billing-tx", "--cluster")
    admin_cli.ok("--add", "--allow-principal", "User:bob", "--operation", "describe", *resources)
    bob_describes = entry("User:bob", "DESCRIBE")
    assert admin_cli.ok("--list", *resources) == (
        current(pattern("GROUP", "billing"), bob_describes)
        + current(pattern("CLUSTER", "kafka-cluster"), bob_describes)
        + current(pattern("TRANSACTIONAL_ID", "billing-tx"), bob_describes))

    # Without --force each resource is asked about on stdin: 'n' keeps the group's ACLs.
    removed = admin_cli.ok("--remove", "--principal", "User:bob", *resources, stdin="n\ny\nY\n")
    bob_filter = "(principal=User:bob, host=<any>, operation=ANY, permissionType=ANY)"
    assert removed.startswith(f"Are you sure you want to remove ACLs: \n \t{bob_filter}\n from resource filter "
                              f"`{pattern('GROUP', 'billing')}`? (y/n)\n")
    assert f"Removed ACLs for resource `{pattern('GROUP', 'billing')}`" not in removed
    assert f"Removed ACLs for resource `{pattern('TRANSACTIONAL_ID', 'billing-tx')}`" in removed
    assert f"Removed ACLs for resource `{pattern('CLUSTER', 'kafka-cluster')}`" in removed
    assert admin_cli.ok("--list", *resources) == current(pattern("GROUP", "billing"), bob_describes)

    assert admin_cli.fails("--remove", "--group", "billing") == (
        "oncelog: error: --remove asks for confirmation on stdin and got none (use --force to not ask)")
    admin_cli.ok("--remove", "--group", "billing", "--force")
    assert admin_cli.ok("--list", "--group", "billing") == ""


def test_prefixed_allow_for_everyone_with_a_deny_is_listed_by_match_and_removed_alone(admin_cli):
    admin_cli.ok("--add", "--allow-principal", "User:*", "--deny-principal", "User:carol", "--operation", "Read",
                 "--topic", "ledger-", "--resource-pattern-type", "prefixed")
    prefixed = pattern("TOPIC", "ledger-", "PREFIXED")
    # match: every pattern that applies to a topic named ledger-2024, i.e. the prefix.
    assert admin_cli.ok("--list", "--topic", "ledger-2024", "--resource-pattern-type", "match") == current(
        prefixed, entry("User:*", "READ"), entry("User:carol", "READ", "DENY"))
    assert admin_cli.ok("--list", "--topic", "ledger-2024") == ""  # literal, the default: nothing

    admin_cli.ok("--remove", "--deny-principal", "User:carol", "--topic", "ledger-",
                 "--resource-pattern-type", "prefixed", "--force")
    assert admin_cli.ok("--list", "--topic", "ledger-", "--resource-pattern-type", "any") == current(
        prefixed, entry("User:*", "READ"))
    admin_cli.ok("--remove", "--topic", "ledger-", "--resource-pattern-type", "prefixed", "--force")


def test_producer_and_consumer_conveniences_grant_kafkas_sets(admin_cli):
    admin_cli.ok("--add", "--allow-principal", "User:carol", "--producer", "--idempotent", "--topic", "audit",
                 "--transactional-id", "audit-tx")
    admin_cli.ok("--add", "--allow-principal", "User:carol", "--consumer", "--topic", "audit", "--group", "auditors")
    resources = ("--topic", "audit", "--transactional-id", "audit-tx", "--group", "auditors", "--cluster")
    listed = admin_cli.ok("--list", *resources, "--principal", "User:carol")
    assert listed == ("ACLs for principal `User:carol`\n"
                      + current(pattern("TOPIC", "audit"), *(entry("User:carol", op) for op in
                                                             ("READ", "WRITE", "CREATE", "DESCRIBE")))
                      + current(pattern("GROUP", "auditors"), entry("User:carol", "READ"))
                      + current(pattern("CLUSTER", "kafka-cluster"), entry("User:carol", "IDEMPOTENT_WRITE"))
                      + current(pattern("TRANSACTIONAL_ID", "audit-tx"), entry("User:carol", "WRITE"),
                                entry("User:carol", "DESCRIBE")))

    admin_cli.ok("--remove", "--allow-principal", "User:carol", "--producer", "--consumer", "--idempotent",
                 "--topic", "audit", "--transactional-id", "audit-tx", "--group", "auditors", "--force")
    assert admin_cli.ok("--list", *resources) == ""


def test_acl_errors_are_one_line(secured, admin_cli, shared_broker, tmp_path):
    assert admin_cli.fails("--add", "--allow-principal", "User:alice", "--operation", "Frobnicate",
                           "--topic", "t") == (
        "oncelog: error: --operation: unknown operation 'Frobnicate'; one of All, Read, Write, Create, Delete, "
        "Alter, Describe, ClusterAction, DescribeConfigs, AlterConfigs, IdempotentWrite")
    assert admin_cli.fails("--add", "--allow-principal", "User:alice", "--operation", "Read") == (
        "oncelog: error: --add needs a resource: --topic, --group, --transactional-id or --cluster")
    assert admin_cli.fails("--add", "--allow-principal", "alice", "--topic", "t") == (
        "oncelog: error: --allow-principal: expected a string in format principalType:principalName but got alice")

    # librdkafka hands over both refusals of DescribeAcls as an empty list; --list says what it was.
    alice = Cli(secured.bootstrap_servers, sasl_properties(tmp_path, "alice"))
    assert alice.fails("--list") == (
        "oncelog: error: CLUSTER_AUTHORIZATION_FAILED: this user may not describe ACLs (needs Cluster DESCRIBE)")
    unsecured = Cli(shared_broker.bootstrap_servers, None)
    no_authorizer = ("oncelog: error: SECURITY_DISABLED: no authorizer is configured on the broker "
                     "(authorizer.class.name)")
    assert unsecured.fails("--list") == no_authorizer
    assert unsecured.fails("--remove", "--topic", "t", "--force") == no_authorizer


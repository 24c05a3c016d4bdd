"""The CLI against secured listeners, run as real subprocesses the way an operator runs
them: one broker with SASL_SSL (PLAIN and SCRAM-SHA-256), SSL with client certificates,
and PLAINTEXT for the setup only, with Kafka's StandardAuthorizer. The security settings
come from a `--command-config` file (or `-X`), as for Kafka's tools. The commands that
speak the protocol themselves (`transactions`, `configs`, `consume --group`'s coordinator
check) and those on librdkafka (`topics`, `groups`, `produce`, `consume`) alike; a wrong
password, a certificate the client does not trust and a user without ACLs are each one
line on stderr. Also the pipeline runner's pre-Spark checks with Java's sasl.jaas.config."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from oncelog import EmbeddedBroker
from tests.support.certs import CN_RULE, PASSWORD, CertificateAuthority, Issued
from tests.support.secured import STANDARD_AUTHORIZER

ONCELOG = Path(sys.executable).with_name("oncelog")
COMMAND_TIMEOUT_S = 60
PLAIN_USERS = 'user_alice="alice-plain" user_mallory="mallory-secret"'
SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule"


@dataclass
class Secured:
    addresses: dict[str, str]  # listener name: host:port
    ca: Path  # the CA's certificate
    alice: Issued  # a client certificate, CN=alice
    directory: Path

    def properties(self, name: str, **settings: str) -> Path:
        """A --command-config file, as an operator writes one for Kafka's tools."""
        path = self.directory / f"{name}.properties"
        path.write_text("".join(f"{key.replace('_', '.')}={value}\n" for key, value in settings.items()))
        return path

    def sasl_ssl(self, name: str, mechanism: str, user: str, password: str) -> Path:
        return self.properties(name, security_protocol="SASL_SSL", ssl_ca_location=str(self.ca),
                               sasl_mechanism=mechanism, sasl_username=user, sasl_password=password)


@pytest.fixture(scope="module")
def secured(tmp_path_factory) -> Iterator[Secured]:
    base = tmp_path_factory.mktemp("cli-secured")
    ca = CertificateAuthority.create(base / "certs")
    server = ca.issue("broker", "CN=localhost,O=oncelog", server=True)
    alice = ca.issue("alice", "CN=alice,OU=eng,O=oncelog", server=False)
    config = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0,SSL://127.0.0.1:0",
        "ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(server.pkcs12), "ssl.keystore.password": PASSWORD,
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca.certificate),
        "listener.name.ssl.ssl.client.auth": "required",
        "listener.name.ssl.ssl.principal.mapping.rules": f"{CN_RULE},DEFAULT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "listener.name.sasl_ssl.plain.sasl.jaas.config":
            f"org.apache.kafka.common.security.plain.PlainLoginModule required {PLAIN_USERS};",
        "authorizer.class.name": STANDARD_AUTHORIZER,
        "allow.everyone.if.no.acl.found": "false",
        "super.users": "User:ANONYMOUS",  # the PLAINTEXT listener: the setup below
        "connection.failed.authentication.delay.ms": "50",
    }
    with EmbeddedBroker(base / "data", config) as running:
        addresses = {name: f"{host}:{port}" for name, (host, port) in running.broker.endpoints.items()}
        admin = AdminClient({"bootstrap.servers": addresses["PLAINTEXT"]})
        for future in admin.create_topics([NewTopic("orders", 1, 1), NewTopic("orders-out", 1, 1)]).values():
            future.result(10)
        for future in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
                "alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"alice-scram")]).values():
            future.result(10)
        # alice (by password or by her certificate's CN) may do anything with her own
        # topics, group and transactional ids; mallory has no ACL at all.
        bindings = [AclBinding(resource_type, name, ResourcePatternType.PREFIXED, "User:alice", "*",
                               AclOperation.ALL, AclPermissionType.ALLOW)
                    for resource_type, name in ((ResourceType.TOPIC, "orders"), (ResourceType.GROUP, "readers"),
                                                (ResourceType.TRANSACTIONAL_ID, "tx-"))]
        for future in admin.create_acls(bindings).values():
            future.result(10)
        yield Secured(addresses, ca.certificate, alice, base)


@pytest.fixture(scope="module")
def alice_scram(secured) -> Path:
    return secured.sasl_ssl("alice-scram", "SCRAM-SHA-256", "alice", "alice-scram")


@pytest.fixture(scope="module")
def alice_plain(secured) -> Path:
    return secured.sasl_ssl("alice-plain", "PLAIN", "alice", "alice-plain")


@pytest.fixture(scope="module")
def records(secured, alice_scram) -> list[str]:
    """Two records from `oncelog produce`, then a transaction left open by alice."""
    ok(secured, "SASL_SSL", alice_scram, "produce", "--topic", "orders", "--value", "one", "--value", "two")
    producer = Producer({"bootstrap.servers": secured.addresses["SASL_SSL"], "security.protocol": "SASL_SSL",
                         "ssl.ca.location": str(secured.ca), "sasl.mechanism": "PLAIN", "sasl.username": "alice",
                         "sasl.password": "alice-plain", "transactional.id": "tx-open"})
    producer.init_transactions(10)
    producer.begin_transaction()
    producer.produce("orders", b"open")
    producer.flush(10)
    return ["one", "two"]


def oncelog(secured: Secured, listener: str, command_config: Path | None, *args: str,
            extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    connection = ["--bootstrap-server", secured.addresses[listener], *extra]
    if command_config is not None:
        connection += ["--command-config", str(command_config)]
    return subprocess.run(
        [str(ONCELOG), *args, *connection], stdin=subprocess.DEVNULL, capture_output=True, text=True,
        check=False, timeout=COMMAND_TIMEOUT_S,
        env={key: value for key, value in os.environ.items() if key != "ONCELOG_BOOTSTRAP"},
    )


def ok(secured: Secured, listener: str, command_config: Path | None, *args: str,
       extra: tuple[str, ...] = (), stderr: str = "") -> str:
    completed = oncelog(secured, listener, command_config, *args, extra=extra)
    assert completed.returncode == 0, f"oncelog {' '.join(args)}: {completed.stderr}"
    assert completed.stderr == stderr, completed.stderr
    return completed.stdout


def one_line_error(secured: Secured, listener: str, command_config: Path | None, *args: str) -> str:
    completed = oncelog(secured, listener, command_config, *args)
    assert completed.returncode == 1, (completed.returncode, completed.stdout, completed.stderr)
    assert completed.stderr.count("\n") == 1 and completed.stderr.startswith("oncelog: error: "), completed.stderr
    return completed.stderr.strip()


def rows(table: str) -> list[dict[str, str]]:
    header, *lines = table.splitlines()
    return [dict(zip(header.split(), line.split(), strict=False)) for line in lines]


# -- every command over SASL_SSL ------------------------------------------------------------------


def test_produce_and_consume_with_a_group_over_sasl_ssl_scram(secured, alice_scram, records):
    """consume --group also asks FindCoordinator itself (client/wire.py) before librdkafka joins."""
    consumed = ok(secured, "SASL_SSL", alice_scram, "consume", "--topic", "orders", "--group", "readers",
                  "--from-beginning", "--max-messages", "2", stderr="Processed a total of 2 messages\n")
    assert consumed.splitlines() == records


def test_groups_list_and_describe_over_sasl_ssl_plain(secured, alice_plain, records):
    ok(secured, "SASL_SSL", alice_plain, "consume", "--topic", "orders", "--group", "readers-listed",
       "--from-beginning", "--max-messages", "2", stderr="Processed a total of 2 messages\n")
    assert "readers-listed" in ok(secured, "SASL_SSL", alice_plain, "groups", "list").split()
    [row] = rows(ok(secured, "SASL_SSL", alice_plain, "groups", "describe", "--group", "readers-listed",
                    stderr="Consumer group 'readers-listed' has no active members.\n"))
    assert (row["GROUP"], row["TOPIC"], row["PARTITION"], row["CURRENT-OFFSET"]) == ("readers-listed", "orders",
                                                                                     "0", "2")


def test_topics_list_and_configs_describe_over_sasl_ssl_scram(secured, alice_scram):
    assert ok(secured, "SASL_SSL", alice_scram, "topics", "list").split() == ["orders", "orders-out"]
    described = ok(secured, "SASL_SSL", alice_scram, "configs", "--describe", "--entity-type", "topics")
    assert "Dynamic configs for topic orders are:" in described
    assert "Dynamic configs for topic orders-out are:" in described


def test_transactions_commands_over_sasl_ssl(secured, alice_scram, alice_plain, records):
    [listed] = rows(ok(secured, "SASL_SSL", alice_scram, "transactions", "list"))
    assert (listed["TransactionalId"], listed["TransactionState"]) == ("tx-open", "Ongoing")
    [described] = rows(ok(secured, "SASL_SSL", alice_plain, "transactions", "describe", "--transactional-id",
                          "tx-open"))
    assert (described["TransactionState"], described["TopicPartitions"]) == ("Ongoing", "orders-0")
    assert described["ProducerId"] == listed["ProducerId"]
    [producer] = [row for row in rows(ok(secured, "SASL_SSL", alice_scram, "transactions", "describe-producers",
                                         "--topic", "orders", "--partition", "0"))
                  if row["ProducerId"] == listed["ProducerId"]]
    assert producer["CurrentTransactionStartOffset"] == str(len(records))
    # Open for longer than 0 minutes, but its coordinator holds the partition: not hanging.
    hanging = ok(secured, "SASL_SSL", alice_plain, "transactions", "find-hanging", "--max-transaction-timeout", "0")
    assert rows(hanging) == []


# -- SSL, Java's JAAS form, -X ---------------------------------------------------------------------


def test_wire_and_librdkafka_commands_over_ssl_with_a_client_certificate(secured, records):
    """The certificate's CN is the principal (ssl.principal.mapping.rules): alice's ACLs apply."""
    mtls = secured.properties("alice-mtls", security_protocol="SSL", ssl_ca_location=str(secured.ca),
                              ssl_certificate_location=str(secured.alice.certificate),
                              ssl_key_location=str(secured.alice.key))
    [producer] = [row for row in rows(ok(secured, "SSL", mtls, "transactions", "describe-producers", "--topic",
                                         "orders", "--partition", "0"))
                  if row["CurrentTransactionStartOffset"] != "None"]
    assert producer["CurrentTransactionStartOffset"] == str(len(records))
    assert ok(secured, "SSL", mtls, "topics", "list").split() == ["orders", "orders-out"]


def test_java_sasl_jaas_config_in_the_command_config_and_in_x(secured):
    jaas = f'{SCRAM_LOGIN} required username="alice" password="alice-scram";'
    java = secured.properties("alice-java", security_protocol="SASL_SSL", ssl_ca_location=str(secured.ca),
                              sasl_mechanism="SCRAM-SHA-256")
    assert "tx-open" in ok(secured, "SASL_SSL", java, "transactions", "list", extra=("-X", f"sasl.jaas.config={jaas}"))
    with java.open("a") as file:
        file.write(f"sasl.jaas.config={jaas}\n")
    assert "orders" in ok(secured, "SASL_SSL", java, "topics", "list").split()


# -- one line each: wrong password, untrusted certificate, no ACLs ---------------------------------


def test_a_wrong_password_is_one_line(secured):
    """On librdkafka too (`topics list`), which says so only in its log, then reports an
    unreachable broker: the command asks oncelog's client why."""
    wrong = secured.sasl_ssl("alice-wrong", "SCRAM-SHA-256", "alice", "not-her-password")
    for command in (("transactions", "list"), ("topics", "list")):
        error = one_line_error(secured, "SASL_SSL", wrong, *command)
        assert error.startswith(f"oncelog: error: authentication failed: SASL/SCRAM-SHA-256 authentication with "
                                f"{secured.addresses['SASL_SSL']}: SASL_AUTHENTICATION_FAILED"), error
        assert "not-her-password" not in error


def test_a_broker_certificate_the_client_does_not_trust_is_one_line(secured, tmp_path):
    other_ca = CertificateAuthority.create(tmp_path / "other-ca")
    untrusting = secured.properties("alice-untrusting", security_protocol="SASL_SSL",
                                    ssl_ca_location=str(other_ca.certificate), sasl_mechanism="PLAIN",
                                    sasl_username="alice", sasl_password="alice-plain")
    error = one_line_error(secured, "SASL_SSL", untrusting, "configs", "--describe", "--entity-type", "topics")
    assert error.startswith(f"oncelog: error: TLS handshake with {secured.addresses['SASL_SSL']} failed: "), error
    assert "CERTIFICATE_VERIFY_FAILED" in error


def test_an_ssl_listener_refuses_a_client_without_certificate_in_one_line(secured):
    anonymous = secured.properties("no-certificate", security_protocol="SSL", ssl_ca_location=str(secured.ca))
    error = one_line_error(secured, "SSL", anonymous, "transactions", "list")
    # oncelog's broker closes the connection (TLS 1.3: after the client's handshake is done);
    # another may send an alert first.
    assert error in (f"oncelog: error: TLS with {secured.addresses['SSL']} failed: the broker closed the "
                     "connection after the handshake; does the listener require a client certificate "
                     "(ssl.certificate.location, ssl.key.location)?") or error.startswith(
        f"oncelog: error: TLS handshake with {secured.addresses['SSL']} failed: "), error


def test_a_user_without_acls_gets_the_authorization_error_as_one_line(secured, records):
    mallory = secured.sasl_ssl("mallory", "PLAIN", "mallory", "mallory-secret")
    assert one_line_error(secured, "SASL_SSL", mallory, "transactions", "describe-producers", "--topic", "orders",
                          "--partition", "0") == "oncelog: error: topic 'orders': TOPIC_AUTHORIZATION_FAILED"
    assert one_line_error(secured, "SASL_SSL", mallory, "transactions", "describe", "--transactional-id",
                          "tx-open") == ("oncelog: error: no transaction coordinator for transactional id "
                                         "'tx-open': TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "
                                         "Transactional Id authorization failed.")


# -- oncelog pipeline run: the checks before Spark starts -----------------------------------------


def test_pipeline_checks_take_java_sasl_jaas_config(secured):
    """librdkafka refuses sasl.jaas.config; the runner's cluster check gives it librdkafka's form."""
    from oncelog.spark.pipeline.checks import check_cluster, check_options
    from oncelog.spark.pipeline.spec import PipelineError, PipelineSpec

    kafka = (("kafka.security.protocol", "SASL_SSL"), ("kafka.ssl.ca.location", str(secured.ca)),
             ("kafka.sasl.mechanism", "SCRAM-SHA-256"),
             ("kafka.sasl.jaas.config", f'{SCRAM_LOGIN} required username="alice" password="alice-scram";'))
    spec = PipelineSpec(source_topic="orders", sink_topics=("orders-out",), checkpoint=str(secured.directory / "ckpt"),
                        bootstrap_servers=secured.addresses["SASL_SSL"], sql="SELECT * FROM source",
                        source_options=kafka, sink_options=kafka)
    check_options(spec)
    check_cluster(spec)
    wrong = dataclasses.replace(spec, source_options=(*kafka[:-1], ("kafka.sasl.jaas.config",
                                f'{SCRAM_LOGIN} required username="alice" password="not-her-password";')))
    with pytest.raises(PipelineError, match=r"^the broker at --bootstrap-server \S+ refused the kafka.sasl.\* "
                                            "credentials: SASL/SCRAM-SHA-256 authentication with"):
        check_cluster(wrong)


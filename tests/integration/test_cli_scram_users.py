"""`oncelog configs --entity-type users` run as a real subprocess against a real broker
with a SASL listener that takes PLAIN and SCRAM: SCRAM credentials altered, described and
deleted as with kafka-configs.sh, a client then logging in with them, and no password
ever printed."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from tests.support.secured import SecuredBroker, password, secured_broker

ONCELOG = Path(sys.executable).with_name("oncelog")
COMMAND_TIMEOUT_S = 60
SCRAM_LISTENER = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0",
                  "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
                  "connection.failed.authentication.delay.ms": "0"}


class Cli:
    """`oncelog configs --entity-type users ...` as admin, over SASL PLAIN from --command-config."""

    def __init__(self, bootstrap: str, command_config: Path) -> None:
        self.bootstrap = bootstrap
        self.command_config = command_config
        self.printed: list[str] = []  # everything any command printed, to look for passwords in

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        completed = subprocess.run(
            [str(ONCELOG), "configs", "--entity-type", "users", *args, "--bootstrap-server", self.bootstrap,
             "--command-config", str(self.command_config)],
            stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False, timeout=COMMAND_TIMEOUT_S,
            env={k: v for k, v in os.environ.items() if k != "ONCELOG_BOOTSTRAP"},
        )
        self.printed += [completed.stdout, completed.stderr]
        return completed

    def ok(self, *args: str) -> str:
        completed = self(*args)
        assert completed.returncode == 0 and completed.stderr == "", completed.stderr
        return completed.stdout

    def fails(self, *args: str) -> str:
        completed = self(*args)
        assert completed.returncode == 1, (completed.returncode, completed.stderr)
        assert completed.stderr.count("\n") == 1 and completed.stderr.startswith("oncelog: error: "), \
            completed.stderr
        return completed.stderr.strip()


@pytest.fixture(scope="module")
def secured(tmp_path_factory) -> Iterator[SecuredBroker]:
    with secured_broker(tmp_path_factory.mktemp("scram-broker"), SCRAM_LISTENER) as broker:
        yield broker


@pytest.fixture
def users(secured, tmp_path) -> Cli:
    properties = tmp_path / "admin.properties"
    properties.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                          f"sasl.username=admin\nsasl.password={password('admin')}\n")
    return Cli(secured.bootstrap_servers, properties)


def logs_in(secured: SecuredBroker, user: str, secret: str, mechanism: str, timeout_s: float = 10) -> bool:
    admin = AdminClient({**secured.client(user), "sasl.mechanism": mechanism, "sasl.password": secret})
    try:
        admin.list_topics(timeout=timeout_s)
    except KafkaException:
        return False
    return True


def test_scram_credentials_altered_described_and_deleted_decide_who_logs_in(secured, users):
    both = "SCRAM-SHA-256=[iterations=8192,password=dave-pw-1],SCRAM-SHA-512=[password=dave-pw-1]"
    # Two mechanisms of one user: Kafka refuses them in one request; the command sends two.
    assert users.ok("--alter", "--entity-name", "dave", "--add-config", both) == \
        "Completed updating config for user dave.\n"
    assert users.ok("--describe", "--entity-name", "dave") == (
        "SCRAM credential configs for user-principal 'dave' are SCRAM-SHA-256=iterations=8192, "
        "SCRAM-SHA-512=iterations=4096\n")
    assert logs_in(secured, "dave", "dave-pw-1", "SCRAM-SHA-256")
    assert logs_in(secured, "dave", "dave-pw-1", "SCRAM-SHA-512")

    users.ok("--alter", "--entity-name", "dave", "--delete-config", "SCRAM-SHA-512")
    assert users.ok("--describe") == \
        "SCRAM credential configs for user-principal 'dave' are SCRAM-SHA-256=iterations=8192\n"
    assert not logs_in(secured, "dave", "dave-pw-1", "SCRAM-SHA-512", timeout_s=2)
    assert users.fails("--alter", "--entity-name", "dave", "--delete-config", "SCRAM-SHA-512") == (
        "oncelog: error: SCRAM-SHA-512 of user dave: RESOURCE_NOT_FOUND: "
        "Attempt to delete a user credential that does not exist")
    assert users.ok("--describe", "--entity-name", "nobody") == ""  # as kafka-configs.sh: no line
    assert not any("dave-pw-1" in text for text in users.printed)


def test_password_from_a_file_works_and_bad_values_are_refused_without_echoing_them(secured, users, tmp_path):
    credentials = tmp_path / "erin.properties"
    credentials.write_text("SCRAM-SHA-256=[iterations=4096,password=erin, with a comma]\n")
    users.ok("--alter", "--entity-name", "erin", "--add-config-file", str(credentials))
    assert logs_in(secured, "erin", "erin, with a comma", "SCRAM-SHA-256")

    assert users.fails("--alter", "--entity-name", "erin", "--add-config",
                       "SCRAM-SHA-256=[iterations=8192,password=hunter2") == (
        "oncelog: error: --add-config of users expects MECHANISM=[iterations=N,password=P] pairs, "
        "comma-separated (the value is not shown: it holds a password)")
    assert users.fails("--alter", "--entity-name", "erin", "--add-config",
                       "SCRAM-SHA-256=[iterations=1000,password=hunter2]") == (
        "oncelog: error: --add-config SCRAM-SHA-256: iterations 1000 is less than the minimum 4096")
    assert users.fails("--alter", "--entity-name", "erin", "--add-config", "retention.ms=1") == (
        "oncelog: error: Only quota and SCRAM credential configs can be added for 'users' using "
        "--bootstrap-server. Unexpected config names: Set(retention.ms)")
    assert not any("hunter2" in text or "with a comma" in text for text in users.printed)

"""docs/security.md stays true: its openssl commands make the certificates, its
server.properties starts a broker (paths and ports made local), its `oncelog configs`
and `oncelog acls` commands run, and the SCRAM user they create then writes a
transaction as the ACLs allow, over SASL_SSL."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog import EmbeddedBroker
from oncelog.config.broker import BrokerConfig

DOC = Path(__file__).resolve().parents[2] / "docs" / "security.md"


def blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", DOC.read_text(), re.DOTALL)


def shell_lines(block: str) -> list[str]:
    """The commands of a shell block, continuation lines joined, comments dropped."""
    return [line for line in block.replace("\\\n", " ").splitlines() if line.strip() and not line.startswith("#")]


def test_the_documented_broker_runs_with_the_documented_certificates_users_and_acls(tmp_path):
    certificates = tmp_path / "certs"
    subprocess.run(["bash", "-euc", blocks("sh")[0]], cwd=tmp_path, check=True, capture_output=True)  # as written
    assert (certificates / "broker.p12").is_file() and (certificates / "alice.pem").is_file()

    properties = blocks("properties")[0].replace("\\\n    ", "")
    properties = properties.replace("/etc/oncelog/certs", str(certificates)).replace("/var/lib/oncelog",
                                                                                     str(tmp_path / "data"))
    properties = properties.replace("broker1.example.com", "localhost")  # the name the certificate has here
    properties = re.sub(r":909[2-4]", ":0", properties)  # free ports (advertised port 0: the bound one)
    assert "ANONYMOUS" not in properties and "PLAINTEXT" not in properties  # nobody unauthenticated is let in
    server = tmp_path / "server.properties"
    server.write_text(properties)
    admin_properties = tmp_path / "admin.properties"
    admin_properties.write_text(blocks("properties")[1].replace("/etc/oncelog/certs", str(certificates)))
    config = BrokerConfig.load(server)
    with EmbeddedBroker(tmp_path / "data", dict(config.explicit) | _listener_keys(properties)) as running:
        sasl_ssl = "localhost:{}".format(running.broker.endpoints["SASL_SSL"][1])
        admin = AdminClient({"bootstrap.servers": sasl_ssl, **_client_properties(admin_properties)})
        admin.create_topics([NewTopic("orders", 1, 1)])["orders"].result(10)
        for command in shell_lines(blocks("sh")[1])[1:]:  # after `oncelog broker start`
            assert command.startswith("oncelog ")
            argv = [a.strip("'") for a in re.findall(r"'[^']*'|\S+", command)][1:]
            argv = [sasl_ssl if a == "broker1.example.com:9094" else str(admin_properties) if a == "admin.properties"
                    else a for a in argv]
            done = subprocess.run([sys.executable, "-m", "oncelog", *argv], capture_output=True, text=True,
                                  timeout=60, check=False)
            assert done.returncode == 0, f"{command}: {done.stderr}"
        carol = {"bootstrap.servers": sasl_ssl, "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                 "sasl.username": "carol", "sasl.password": "carol-secret",
                 "ssl.ca.location": str(certificates / "ca.pem")}
        producer = Producer({**carol, "transactional.id": "orders-app"})
        producer.init_transactions(20)
        producer.begin_transaction()
        producer.produce("orders", b"by carol")
        producer.commit_transaction(20)
        other = Producer({**carol, "transactional.id": "not-carols"})
        with pytest.raises(KafkaException, match=r"TRANSACTIONAL_ID_AUTHORIZATION_FAILED|authoriz"):
            other.init_transactions(20)


def _client_properties(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def _listener_keys(properties: str) -> dict[str, str]:
    """listener.name.* keys are kept by BrokerConfig apart from `explicit`."""
    keys = {}
    for line in properties.splitlines():
        key, separator, value = line.partition("=")
        if separator and key.startswith("listener.name."):
            keys[key.strip()] = value.strip()
    return keys

"""The oncelog source and sink (both modes) against a broker whose data listener is
SASL_SSL with SCRAM-SHA-512: a Trigger.AvailableNow query reads committed input and writes
its transform exactly once, with the credentials in Java's form (`kafka.sasl.jaas.config`)
on one side and librdkafka's (`kafka.sasl.username`/`password`) on the other; a wrong
password fails the query with one line naming SASL. The broker's PLAINTEXT listener serves
the test's own admin, input and checks only: the queries are given the SASL_SSL address,
and the broker's log shows their connections authenticating there."""

from __future__ import annotations

import logging
import re

import pytest
from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
from pyspark.sql import functions as F

from oncelog import EmbeddedBroker
from tests.support.certs import PASSWORD, CertificateAuthority
from tests.support.kafka import create_topics
from tests.support.spark.topics import read_all, transformed, values, watermarks, write_source

USER, SECRET = "carol", "carol-secret"
AUTHENTICATED = re.compile(r"User:carol authenticated from .* with SCRAM-SHA-512 on SASL_SSL")


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    """A broker with SASL_SSL (SCRAM-SHA-512) for the queries and PLAINTEXT for the harness;
    KIP-939 2PC on for batch mode."""
    base = tmp_path_factory.mktemp("spark-sasl-ssl")
    ca = CertificateAuthority.create(base / "certs")
    server = ca.issue("broker", "CN=localhost", server=True)
    config = {
        "listeners": "SASL_SSL://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
        "ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(server.pkcs12), "ssl.keystore.password": PASSWORD,
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "transaction.two.phase.commit.enable": "true",
        "connection.failed.authentication.delay.ms": "20",
    }
    with EmbeddedBroker(base / "data", config) as running:
        addresses = {name: f"{host}:{port}" for name, (host, port) in running.broker.endpoints.items()}
        admin = AdminClient({"bootstrap.servers": addresses["PLAINTEXT"]})
        for future in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
                USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), SECRET.encode())]).values():
            future.result(10)
        yield {"sasl_ssl": addresses["SASL_SSL"], "plaintext": addresses["PLAINTEXT"], "ca": str(ca.certificate)}


def client_options(secured, form: str, password: str = SECRET) -> dict[str, str]:
    """The `kafka.*` options of a query over SASL_SSL, credentials in `form` "java" or "librdkafka"."""
    if form == "java":
        credentials = {"kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
                                                 f'required username="{USER}" password="{password}";'}
    else:
        credentials = {"kafka.sasl.username": USER, "kafka.sasl.password": password}
    return {"kafka.bootstrap.servers": secured["sasl_ssl"], "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "SCRAM-SHA-512", "kafka.ssl.ca.location": secured["ca"], **credentials}


def start(spark, secured, *, source: str, output: str, mode: str, checkpoint: str, source_form: str,
          sink_form: str, source_password: str = SECRET, sink_password: str = SECRET):
    reader = spark.readStream.format("oncelog").option("subscribe", source).option("startingOffsets", "earliest")
    for key, value in client_options(secured, source_form, source_password).items():
        reader = reader.option(key, value)
    stream = reader.load().select("key", F.upper(F.col("value").cast("string")).alias("value"))
    writer = (stream.writeStream.format("oncelog").option("topic", output).option("mode", mode)
              .option("checkpointLocation", checkpoint).option("clusterTimeoutMs", "20000")
              .trigger(availableNow=True))
    for key, value in client_options(secured, sink_form, sink_password).items():
        writer = writer.option(key, value)
    return writer.start()


@pytest.mark.parametrize("mode, source_form, sink_form", [
    ("partition", "java", "librdkafka"),
    ("batch", "librdkafka", "java"),
])
def test_a_query_reads_and_writes_exactly_once_over_sasl_ssl(spark, secured, topic, tmp_path, caplog, mode,
                                                            source_form, sink_form):
    plaintext = secured["plaintext"]
    source, output = f"{topic}-in", f"{topic}-out"
    create_topics(plaintext, (source, 2), (output, 2))
    committed = write_source(plaintext, source, 2, transactions=3, per_transaction=10)  # one aborted
    with caplog.at_level(logging.DEBUG, logger="oncelog.security"):
        query = start(spark, secured, source=source, output=output, mode=mode, checkpoint=str(tmp_path / "cp"),
                      source_form=source_form, sink_form=sink_form)
        query.awaitTermination(120)
    assert query.exception() is None
    assert values(read_all(plaintext, output)) == transformed(committed)
    assert len(committed) == 20
    assert all(stable == high for stable, high in watermarks(plaintext, output).values())  # no transaction left open
    # The query knows only the SASL_SSL address, and Metadata there names only SASL_SSL addresses: the
    # connections of its driver (librdkafka, oncelog's client) and of its executors authenticated there.
    assert len([r for r in caplog.records if AUTHENTICATED.search(r.getMessage())]) >= 2


@pytest.mark.parametrize("side", ["source", "sink"])
def test_a_wrong_password_fails_the_query_with_one_line_naming_sasl(spark, secured, topic, tmp_path, side):
    plaintext = secured["plaintext"]
    source, output = f"{topic}-in", f"{topic}-out"
    create_topics(plaintext, (source, 1), (output, 1))
    write_source(plaintext, source, 1, transactions=1, per_transaction=3)
    wrong = "not-the-password"
    query = start(spark, secured, source=source, output=output, mode="partition", checkpoint=str(tmp_path / "cp"),
                  source_form="java", sink_form="java", **{f"{side}_password": wrong})
    with pytest.raises(Exception) as raised:  # Spark wraps the error in its StreamingQueryException
        query.awaitTermination(120)
    message = str(raised.value)
    assert wrong not in message
    [line] = {line.strip() for line in message.splitlines() if "SASL" in line}
    address = re.escape(secured["sasl_ssl"])
    refused = (rf"SASL/SCRAM-SHA-512 authentication with {address}: SASL_AUTHENTICATION_FAILED \(Authentication "
               r"failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512\)$")
    error = {"source": "SourceOptionError", "sink": "ClusterUnreachable"}[side]  # on the driver, before any task
    expected = rf"{error}: kafka.bootstrap.servers={address} refused the kafka.sasl.\* credentials: "
    assert re.search(expected + refused, line), line

"""Real clients over the TLS and SASL listeners: kafka-python, aiokafka, kcat (librdkafka)
and the Apache Kafka Java client each connect over SSL with a client certificate (mTLS),
SASL_SSL with SCRAM-SHA-256, SCRAM-SHA-512 and PLAIN, and SASL_PLAINTEXT with
SCRAM-SHA-512; each commits a transaction (kcat, which has none, an idempotent produce)
and reads it back with a read_committed consumer; and each gets an authentication error,
not a hang or a half-open connection, for a wrong password.

One broker for the module, set up as tests/integration/test_security_listeners.py's; the
broker's certificate is for localhost and 127.0.0.1 and every client checks it against
the address it dialled (Python's ssl, librdkafka's and Java's
ssl.endpoint.identification.algorithm=https). The Java client (tests/java/SecureRoundTrip.java)
runs every case in one JVM; it is skipped, naming what is missing, without a JDK 17+ or
the kafka-clients jar.

kcat's SCRAM cases need librdkafka 2.6.1 or later: an older one repeats its client nonce
in the client-final message, which Apache Kafka 4 and oncelog refuse; with such a kcat
they are skipped and a test shows that refusal instead.
"""

from __future__ import annotations

import asyncio
import logging
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import aiokafka
import kafka
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError
from aiokafka.helpers import create_ssl_context
from aiokafka.structs import TopicPartition as AioTopicPartition
from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaTimeoutError

from oncelog import EmbeddedBroker
from tests.support.certs import CertificateAuthority, Issued, four_listeners
from tests.support.java import JavaProgram, JavaRun
from tests.support.kafka import create_topics

DEADLINE_S = 20.0
RECORDS = 3  # per transaction; with the COMMIT marker the partition then ends at RECORDS + 1
WRONG_PASSWORD = "not-the-password"
SOURCE = Path(__file__).resolve().parents[1] / "java" / "SecureRoundTrip.java"
# librdkafka before 2.6.1 repeats its client nonce in the SCRAM client-final message
# (confluentinc/librdkafka#4895); Apache Kafka 4 checks the nonce as RFC 5802 says
# (ScramSaslServer: equals, not endsWith) and refuses it, and so does oncelog.
LIBRDKAFKA_SCRAM_FIXED = (2, 6, 1)


@dataclass(frozen=True)
class Case:
    """How a client connects: the listener, and a SASL mechanism with a user (None: SSL
    with alice's client certificate)."""

    name: str
    listener: str
    mechanism: str | None = None
    user: str = ""
    password: str = ""

    @property
    def tls(self) -> bool:
        return self.listener in ("SSL", "SASL_SSL")

    @property
    def scram(self) -> bool:
        return (self.mechanism or "").startswith("SCRAM-")

    def with_wrong_password(self) -> Case:
        return replace(self, name=f"{self.name}-wrong-password", password=WRONG_PASSWORD)


MTLS = Case("ssl-mtls", "SSL")
CASES = (
    MTLS,
    Case("sasl-ssl-scram-256", "SASL_SSL", "SCRAM-SHA-256", "carol", "carol-secret"),
    Case("sasl-ssl-scram-512", "SASL_SSL", "SCRAM-SHA-512", "carol", "carol-secret"),
    Case("sasl-ssl-plain", "SASL_SSL", "PLAIN", "bob", "bob-secret"),
    Case("sasl-plaintext-scram-512", "SASL_PLAINTEXT", "SCRAM-SHA-512", "carol", "carol-secret"),
)
SASL_CASES = tuple(case for case in CASES if case.mechanism)
CLIENTS = ("kp", "aio", "kcat", "java")  # topic and transactional id prefixes


def ids(cases) -> list[str]:
    return [case.name for case in cases]


@dataclass(frozen=True)
class Secured:
    addresses: dict[str, str]
    ca: CertificateAuthority
    alice: Issued  # CN=alice,OU=eng,O=oncelog: a client certificate
    directory: Path

    def bootstrap(self, case: Case) -> str:
        return self.addresses[case.listener]


@pytest.fixture(scope="module")
def secure(tmp_path_factory) -> Iterator[Secured]:
    """One broker with PLAINTEXT, SSL (mTLS required, PKCS12 keystore, a principal mapping
    rule), SASL_SSL (PLAIN and both SCRAMs, PEM keystore given inline) and SASL_PLAINTEXT
    (SCRAM-SHA-512, OAUTHBEARER) listeners; user carol's SCRAM credentials and every
    client's topic made through the PLAINTEXT one."""
    base = tmp_path_factory.mktemp("security-clients")
    ca = CertificateAuthority.create(base / "certs")
    server = ca.issue("broker", "CN=localhost,O=oncelog", server=True)
    alice = ca.issue("alice", "CN=alice,OU=eng,O=oncelog", server=False)
    config = four_listeners(ca, server, sasl_ssl_mechanisms="PLAIN,SCRAM-SHA-256,SCRAM-SHA-512")
    with EmbeddedBroker(base / "data", config) as running:
        addresses = {name: f"{host}:{port}" for name, (host, port) in running.broker.endpoints.items()}
        admin = AdminClient({"bootstrap.servers": addresses["PLAINTEXT"]})
        for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):  # one request each, as Kafka
            for future in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
                    "carol", ScramCredentialInfo(mechanism, 8192), b"carol-secret")]).values():
                future.result(10)
        del admin  # closed now, not at the broker's stop
        create_topics(addresses["PLAINTEXT"], *((f"{client}-{case.name}", 1) for client in CLIENTS for case in CASES))
        yield Secured(addresses, ca, alice, base)


def expected_values(name: str) -> list[str]:
    return [f"{name}-{i}" for i in range(RECORDS)]


def assert_refused_in_broker_log(caplog, case: Case) -> None:
    """The broker logged the failed authentication (never the password)."""
    assert f"with {case.mechanism} on listener {case.listener} failed" in caplog.text
    assert WRONG_PASSWORD not in caplog.text


# -- kafka-python -----------------------------------------------------------------------


def kafka_python_settings(secure: Secured, case: Case) -> dict:
    settings: dict = {"bootstrap_servers": secure.bootstrap(case), "security_protocol": case.listener}
    if case.tls:
        settings["ssl_cafile"] = str(secure.ca.certificate)  # ssl_check_hostname is on by default
    if case.mechanism is None:
        settings |= {"ssl_certfile": str(secure.alice.certificate), "ssl_keyfile": str(secure.alice.key)}
    else:
        settings |= {"sasl_mechanism": case.mechanism, "sasl_plain_username": case.user,
                     "sasl_plain_password": case.password}
    return settings


def test_kafka_python_supports_transactions():
    """kafka-python has transactions and read_committed since 2.2 (KIP-98); this project's is 3.0."""
    assert tuple(int(part) for part in kafka.__version__.split(".")[:2]) >= (2, 2), kafka.__version__


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_kafka_python_commits_a_transaction_and_reads_it_back_read_committed(secure, case):
    name = f"kp-{case.name}"
    settings = kafka_python_settings(secure, case)
    producer = KafkaProducer(**settings, transactional_id=name)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for value in expected_values(name):
            producer.send(name, value.encode(), partition=0)
        producer.commit_transaction()
    finally:
        producer.close(timeout=5)

    tp = TopicPartition(name, 0)
    consumer = KafkaConsumer(**settings, isolation_level="read_committed", enable_auto_commit=False,
                             auto_offset_reset="earliest", fetch_max_wait_ms=100)
    try:
        consumer.assign([tp])
        consumer.seek_to_beginning()
        assert consumer.end_offsets([tp]) == {tp: RECORDS + 1}  # the records and the COMMIT marker
        read: list[str] = []
        deadline = time.monotonic() + DEADLINE_S
        while consumer.position(tp) < RECORDS + 1:
            assert time.monotonic() < deadline, (consumer.position(tp), read)
            for messages in consumer.poll(timeout_ms=200).values():
                read.extend(message.value.decode() for message in messages)
    finally:
        consumer.close()
    assert read == expected_values(name)


@pytest.mark.parametrize("case", [case.with_wrong_password() for case in SASL_CASES], ids=ids(SASL_CASES))
def test_kafka_python_with_a_wrong_password_cannot_bootstrap(secure, case, caplog):
    """kafka-python treats a failed authentication at bootstrap as a failed connection: it
    retries with backoff and raises KafkaTimeoutError at bootstrap_timeout_ms. Each attempt
    is answered SASL_AUTHENTICATION_FAILED and closed; kafka-python 3.0 sometimes reports
    only "socket disconnected" for it (its transport drops bytes that arrive in the same
    read as the close), so the test counts the broker's refusals."""
    caplog.set_level(logging.WARNING)
    started = time.monotonic()
    with pytest.raises(KafkaTimeoutError, match="Unable to bootstrap"):
        KafkaProducer(**kafka_python_settings(secure, case), transactional_id=case.name, bootstrap_timeout_ms=1500)
    assert time.monotonic() - started < 10
    assert_refused_in_broker_log(caplog, case)
    lost = [record.getMessage() for record in caplog.records
            if record.name == "kafka.net.connection" and "Connection lost" in record.getMessage()]
    assert lost, caplog.text
    assert all("SaslAuthenticationFailedError" in line or "socket disconnected" in line for line in lost), lost


# -- aiokafka ---------------------------------------------------------------------------


def aiokafka_settings(secure: Secured, case: Case) -> dict:
    settings: dict = {"bootstrap_servers": secure.bootstrap(case), "security_protocol": case.listener}
    if case.tls:  # check_hostname is always on
        certificate = {} if case.mechanism else {"certfile": str(secure.alice.certificate),
                                                 "keyfile": str(secure.alice.key)}
        settings["ssl_context"] = create_ssl_context(cafile=str(secure.ca.certificate), **certificate)
    if case.mechanism is not None:
        settings |= {"sasl_mechanism": case.mechanism, "sasl_plain_username": case.user,
                     "sasl_plain_password": case.password}
    return settings


async def aiokafka_round_trip(secure: Secured, case: Case, name: str) -> tuple[dict, list[str]]:
    settings = aiokafka_settings(secure, case)
    producer = AIOKafkaProducer(**settings, transactional_id=name)
    await producer.start()  # InitProducerId
    try:
        async with producer.transaction():
            for value in expected_values(name):
                await producer.send(name, value.encode(), partition=0)
    finally:
        await producer.stop()

    tp = AioTopicPartition(name, 0)
    consumer = AIOKafkaConsumer(**settings, isolation_level="read_committed", enable_auto_commit=False,
                                auto_offset_reset="earliest", group_id=None, fetch_max_wait_ms=100)
    await consumer.start()
    try:
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        ends = await consumer.end_offsets([tp])
        read: list[str] = []
        deadline = time.monotonic() + DEADLINE_S
        while await consumer.position(tp) < RECORDS + 1:
            assert time.monotonic() < deadline, (await consumer.position(tp), read)
            for messages in (await consumer.getmany(timeout_ms=200)).values():
                read.extend(message.value.decode() for message in messages)
    finally:
        await consumer.stop()
    return ends, read


def test_aiokafka_supports_transactions():
    """aiokafka has transactions since 0.5."""
    assert tuple(int(part) for part in aiokafka.__version__.split(".")[:2]) >= (0, 5), aiokafka.__version__


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_aiokafka_commits_a_transaction_and_reads_it_back_read_committed(secure, case):
    name = f"aio-{case.name}"
    ends, read = asyncio.run(aiokafka_round_trip(secure, case, name))
    assert ends == {AioTopicPartition(name, 0): RECORDS + 1}
    assert read == expected_values(name)


@pytest.mark.parametrize("case", [case.with_wrong_password() for case in SASL_CASES], ids=ids(SASL_CASES))
def test_aiokafka_with_a_wrong_password_fails_to_start_naming_the_failed_authentication(secure, case, caplog):
    caplog.set_level(logging.WARNING)

    async def start() -> None:
        producer = AIOKafkaProducer(**aiokafka_settings(secure, case), transactional_id=case.name)
        try:
            await producer.start()
        finally:
            await producer.stop()

    started = time.monotonic()
    with pytest.raises(KafkaConnectionError, match="Unable to bootstrap"):
        asyncio.run(start())
    assert time.monotonic() - started < 5
    assert "[Error 58] SaslAuthenticationFailed" in caplog.text  # aiokafka's log of the broker's answer
    assert_refused_in_broker_log(caplog, case)


# -- kcat (librdkafka) ------------------------------------------------------------------


@pytest.fixture(scope="module")
def kcat() -> str:
    path = shutil.which("kcat")
    if path is None:  # `make setup` installs it; a missing kcat is a setup failure
        pytest.fail("kcat is not installed: run `make setup` (or apt-get install kcat)")
    return path


@pytest.fixture(scope="module")
def librdkafka_version(kcat) -> tuple[int, ...]:
    banner = subprocess.run([kcat, "-V"], capture_output=True, text=True, check=False, timeout=30).stdout
    found = re.search(r"librdkafka (\d+)\.(\d+)\.(\d+)", banner)
    assert found, banner
    return tuple(int(part) for part in found.groups())


def kcat_settings(secure: Secured, case: Case) -> list[str]:
    settings = [f"security.protocol={case.listener}"]
    if case.tls:  # ssl.endpoint.identification.algorithm is https by default
        settings.append(f"ssl.ca.location={secure.ca.certificate}")
    if case.mechanism is None:
        settings += [f"ssl.certificate.location={secure.alice.certificate}",
                     f"ssl.key.location={secure.alice.key}"]
    else:
        settings += [f"sasl.mechanisms={case.mechanism}", f"sasl.username={case.user}",
                     f"sasl.password={case.password}"]
    return [argument for setting in settings for argument in ("-X", setting)]


def run_kcat(kcat: str, secure: Secured, case: Case, *args: str,
             stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([kcat, "-b", secure.bootstrap(case), *kcat_settings(secure, case), *args], input=stdin,
                          stdin=subprocess.DEVNULL if stdin is None else None, capture_output=True, check=False,
                          timeout=60)


def skip_scram_with_old_librdkafka(case: Case, version: tuple[int, ...]) -> None:
    if case.scram and version < LIBRDKAFKA_SCRAM_FIXED:
        pytest.skip(f"librdkafka {'.'.join(map(str, version))} repeats its SCRAM client nonce, which Kafka 4 "
                    "and oncelog refuse (see the test for it below)")


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_kcat_produces_idempotently_and_reads_back_read_committed(secure, kcat, librdkafka_version, case):
    skip_scram_with_old_librdkafka(case, librdkafka_version)
    name = f"kcat-{case.name}"
    produced = run_kcat(kcat, secure, case, "-P", "-t", name, "-p", "0", "-X", "enable.idempotence=true",
                        stdin="".join(f"{value}\n" for value in expected_values(name)).encode())
    assert produced.returncode == 0, produced.stderr.decode(errors="replace")
    deadline = time.monotonic() + DEADLINE_S
    while True:  # -e stops at the end offset it sees first
        consumed = run_kcat(kcat, secure, case, "-C", "-t", name, "-p", "0", "-e", "-o", "beginning",
                            "-X", "isolation.level=read_committed", "-f", "%o %s\n")
        assert consumed.returncode == 0, consumed.stderr.decode(errors="replace")
        lines = consumed.stdout.decode().splitlines()
        if len(lines) >= RECORDS or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert lines == [f"{offset} {value}" for offset, value in enumerate(expected_values(name))]


@pytest.mark.parametrize("case", SASL_CASES, ids=ids(SASL_CASES))
def test_kcat_with_a_wrong_password_exits_with_an_authentication_failure(secure, kcat, librdkafka_version, case,
                                                                          caplog):
    skip_scram_with_old_librdkafka(case, librdkafka_version)
    caplog.set_level(logging.WARNING)
    wrong = case.with_wrong_password()
    started = time.monotonic()
    completed = run_kcat(kcat, secure, wrong, "-P", "-t", f"kcat-{case.name}", stdin=b"never\n")
    assert time.monotonic() - started < 10
    assert completed.returncode != 0
    stderr = completed.stderr.decode(errors="replace")
    assert "Local: Authentication failure" in stderr
    answer = ("Invalid username or password" if case.mechanism == "PLAIN"
              else f"invalid credentials with SASL mechanism {case.mechanism}")
    assert answer in stderr, stderr
    assert_refused_in_broker_log(caplog, wrong)


@pytest.mark.parametrize("case", [case for case in SASL_CASES if case.scram], ids=ids(c for c in SASL_CASES if c.scram))
def test_kcat_scram_from_librdkafka_before_2_6_1_is_refused_for_its_repeated_client_nonce(
        secure, kcat, librdkafka_version, case, caplog):
    """librdkafka before 2.6.1 sends back client nonce + server-first nonce instead of the
    server-first nonce (librdkafka#4895). Kafka 4 refuses that, whatever the password, and
    so does oncelog: the client is told invalid credentials, the broker log says why."""
    if librdkafka_version >= LIBRDKAFKA_SCRAM_FIXED:
        pytest.skip(f"librdkafka {'.'.join(map(str, librdkafka_version))} sends the right nonce")
    caplog.set_level(logging.WARNING)
    completed = run_kcat(kcat, secure, case, "-P", "-t", f"kcat-{case.name}", stdin=b"never\n")
    assert completed.returncode != 0
    assert f"invalid credentials with SASL mechanism {case.mechanism}" in completed.stderr.decode(errors="replace")
    refusal = (f"with {case.mechanism} on listener {case.listener} failed: malformed SCRAM message: "
               "client-final nonce is not the server-first nonce")
    assert refusal in caplog.text


# -- the Java client --------------------------------------------------------------------


def java_properties(secure: Secured, case: Case) -> dict[str, str]:
    settings = {"security.protocol": case.listener}
    if case.tls:
        settings |= {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(secure.ca.certificate),
                     "ssl.endpoint.identification.algorithm": "https"}  # the default, said out loud
    if case.mechanism is None:  # key then certificate, in one PEM file
        settings |= {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(secure.alice.combined)}
    else:
        module = ("org.apache.kafka.common.security.plain.PlainLoginModule" if case.mechanism == "PLAIN"
                  else "org.apache.kafka.common.security.scram.ScramLoginModule")
        settings |= {"sasl.mechanism": case.mechanism,
                     "sasl.jaas.config": f'{module} required username="{case.user}" password="{case.password}";'}
    return settings


def write_properties(path: Path, settings: dict[str, str]) -> Path:
    escape = str.maketrans({"\\": "\\\\", "\n": "\\n", "=": "\\=", ":": "\\:"})
    path.write_text("".join(f"{key}={value.translate(escape)}\n" for key, value in settings.items()))
    return path


JAVA_WRONG_PASSWORD = tuple(case.with_wrong_password() for case in SASL_CASES)


@pytest.fixture(scope="module")
def java_run(secure, java_tools, tmp_path_factory) -> JavaRun:
    """Every case, and each SASL one with a wrong password, in one JVM."""
    program = JavaProgram(java_tools, tmp_path_factory.mktemp("java-classes"), SOURCE)
    arguments: list[str] = []
    for case in (*CASES, *JAVA_WRONG_PASSWORD):
        name = f"java-{case.name}"
        properties = write_properties(secure.directory / f"{name}.properties", java_properties(secure, case))
        topic = name.removesuffix("-wrong-password")
        arguments += [secure.bootstrap(case), str(properties), topic, name]
    return program.run(*arguments, timeout=120)


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_java_client_commits_a_transaction_and_reads_it_back_read_committed(java_run, case):
    name = f"java-{case.name}"
    results = java_run.scenario(name)
    assert results["end_offset_read_committed"] == str(RECORDS + 1)
    assert results["read"] == ",".join(expected_values(name))


@pytest.mark.parametrize("case", JAVA_WRONG_PASSWORD, ids=ids(JAVA_WRONG_PASSWORD))
def test_java_client_with_a_wrong_password_fails_init_transactions_with_sasl_authentication_exception(
        java_run, case):
    results = java_run.results[f"java-{case.name}"]
    assert "done" not in results, results
    assert results["root"] == "org.apache.kafka.common.errors.SaslAuthenticationException", results
    assert "Authentication failed" in results["error"], results
    assert int(results["elapsed_ms"]) < 10_000, results

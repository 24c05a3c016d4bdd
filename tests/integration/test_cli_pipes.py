"""`oncelog ... | head -1`: every command whose output pipe closes ends quietly, with exit
status 141 (128 + SIGPIPE, as a Unix tool ends) or 0 when it had written everything before
the reader left, and nothing on stderr of the closed pipe (no traceback, no BrokenPipeError);
`consume` counts the records that reached the pipe. Real subprocesses, real pipes, a real
broker (the pytest plugin's kafka_bootstrap, and kafka_broker_factory for the ACLs)."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

from oncelog.testing import sasl_plain_client_config
from tests.support.kafka import create_topic

ONCELOG = Path(sys.executable).with_name("oncelog")
COMMAND_TIMEOUT_S = 60
EXIT_OUTPUT_CLOSED = 141

TOPIC = "pipes-orders"
BIG_TOPIC = "pipes-big"
QUIET_TOPIC = "pipes-quiet"
GROUP = "pipes-group"
TRANSACTIONAL_ID = "pipes-txn"
BIG_RECORDS = 3000
BIG_RECORD = 100  # bytes a record takes in consume's output, its newline included


@dataclass(frozen=True)
class Ended:
    returncode: int
    stderr: str
    first_line: bytes = b""


def environment() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if key != "ONCELOG_BOOTSTRAP"}


def into_closed_pipe(*args: str) -> Ended:
    """`oncelog ...` writing to a pipe whose reader has already gone (`... | true`): its
    first write of output fails, whenever it comes."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        completed = subprocess.run(
            [str(ONCELOG), *args], stdin=subprocess.DEVNULL, stdout=write_end, stderr=subprocess.PIPE,
            timeout=COMMAND_TIMEOUT_S, check=False, env=environment(),
        )
    finally:
        os.close(write_end)
    return Ended(completed.returncode, completed.stderr.decode(errors="replace"))


def through_head(*args: str) -> Ended:
    """`oncelog ... | head -1`, the pipeline a shell makes."""
    command = subprocess.Popen(
        [str(ONCELOG), *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env=environment(),
    )
    try:
        assert command.stdout is not None and command.stderr is not None
        head = subprocess.Popen(["head", "-1"], stdin=command.stdout, stdout=subprocess.PIPE)
        command.stdout.close()  # head holds the only reader
        first_line, _ = head.communicate(timeout=COMMAND_TIMEOUT_S)
        command.wait(timeout=COMMAND_TIMEOUT_S)
        stderr = command.stderr.read().decode(errors="replace")
    finally:
        command.kill()
    return Ended(command.returncode, stderr, first_line)


def assert_quiet(ended: Ended, *, notes_allowed: bool = False) -> None:
    """Nothing on stderr about the closed pipe; nothing at all unless the command prints
    notes there (consume's count, a group's members)."""
    for noise in ("Traceback", "BrokenPipeError", "Exception ignored", "Broken pipe"):
        assert noise not in ended.stderr, ended.stderr
    if not notes_allowed:
        assert ended.stderr == "", ended.stderr


@pytest.fixture(scope="module")
def bootstrap(kafka_bootstrap: str) -> str:
    """The session broker with something to show: a topic of three partitions, written by
    a transaction and read by a group that committed; a topic larger than a pipe holds."""
    create_topic(kafka_bootstrap, TOPIC, partitions=3)
    create_topic(kafka_bootstrap, BIG_TOPIC, partitions=1)
    create_topic(kafka_bootstrap, QUIET_TOPIC, partitions=1)
    transactional = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": TRANSACTIONAL_ID})
    transactional.init_transactions(10)
    transactional.begin_transaction()
    for partition in range(3):
        transactional.produce(TOPIC, b"order-%d" % partition, key=b"k%d" % partition, partition=partition)
    transactional.commit_transaction(10)
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": GROUP,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([TOPIC])
    read, deadline = 0, time.monotonic() + 30
    while read < 3 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            read += 1
    consumer.commit(asynchronous=False)
    consumer.close()
    assert read == 3
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 50})
    for number in range(BIG_RECORDS):
        producer.produce(BIG_TOPIC, b"%05d-" % number + b"z" * (BIG_RECORD - 7))
    producer.produce(QUIET_TOPIC, b"the only record")
    assert producer.flush(30) == 0
    return kafka_bootstrap


# Each command that prints more than a line, and how its output begins.
COMMANDS = {
    "topics-list": (["topics", "list"], b"__consumer_offsets\n"),
    "topics-describe": (["topics", "describe"], b"Topic: "),
    "groups-list": (["groups", "list"], b""),
    "groups-describe": (["groups", "describe", "--group", GROUP], b"GROUP "),
    "configs-describe": (["configs", "--describe", "--entity-type", "topics", "--entity-name", TOPIC, "--all"],
                         b"All configs for topic pipes-orders are:\n"),
    "configs-describe-brokers": (["configs", "--describe", "--entity-type", "brokers", "--entity-name", "1", "--all"],
                                 b"All configs for broker 1 are:\n"),
    "transactions-list": (["transactions", "list"], b"TransactionalId "),
    "transactions-describe": (["transactions", "describe", "--transactional-id", TRANSACTIONAL_ID],
                              b"CoordinatorId "),
    "transactions-describe-producers": (["transactions", "describe-producers", "--topic", TOPIC, "--partition", "0"],
                                        b"ProducerId "),
    "producers-describe": (["producers", "describe", "--topic", TOPIC, "--partition", "0"], b"ProducerId "),
    "consume": (["consume", "--topic", TOPIC, "--from-beginning", "--max-messages", "3"], b"order-"),
    "consume-properties": (["consume", "--topic", TOPIC, "--from-beginning", "--max-messages", "3",
                            "--property", "print.key=true", "--property", "print.offset=true",
                            "--property", "print.partition=true", "--property", "print.headers=true"],
                           b"Partition:"),
    "consume-transaction-state": (["consume", "--topic", "__transaction_state", "--from-beginning",
                                   "--formatter", "transaction-state", "--timeout-ms", "20000"], b'{"key":'),
    "consume-offsets": (["consume", "--topic", "__consumer_offsets", "--from-beginning",
                         "--formatter", "offsets", "--timeout-ms", "20000"], b'{"key":'),
}

@pytest.mark.parametrize("name", COMMANDS)
def test_a_command_whose_reader_has_gone_ends_with_141_and_nothing_on_stderr(bootstrap, name):
    args, _ = COMMANDS[name]
    ended = into_closed_pipe(*args, "--bootstrap-server", bootstrap)
    assert ended.returncode == EXIT_OUTPUT_CLOSED, ended
    assert_quiet(ended, notes_allowed=args[0] in ("consume", "groups"))
    if args[0] == "consume":
        assert ended.stderr == "Processed a total of 0 messages\n"


@pytest.mark.parametrize("name", COMMANDS)
def test_a_command_piped_into_head_ends_quietly_and_head_prints_its_first_line(bootstrap, name):
    args, first_line = COMMANDS[name]
    ended = through_head(*args, "--bootstrap-server", bootstrap)
    assert ended.returncode in (0, EXIT_OUTPUT_CLOSED), ended
    assert_quiet(ended, notes_allowed=args[0] in ("consume", "groups"))
    assert ended.first_line.endswith(b"\n") and ended.first_line.startswith(first_line), ended.first_line


@pytest.mark.parametrize("args", [["--help"], ["topics", "--help"], ["consume", "--help"]], ids=" ".join)
def test_help_into_a_closed_pipe_ends_quietly(args):
    """argparse prints the help and ignores a failed write: 0 or 141, never a traceback."""
    ended = into_closed_pipe(*args)
    assert ended.returncode in (0, EXIT_OUTPUT_CLOSED), ended
    assert ended.stderr == ""
    piped = through_head(*args)
    assert piped.returncode in (0, EXIT_OUTPUT_CLOSED), piped
    assert piped.stderr == "" and piped.first_line.startswith(b"usage: oncelog")


def test_acls_list_into_a_closed_pipe_or_head_ends_quietly(kafka_broker_factory, tmp_path):
    broker = kafka_broker_factory(
        {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
         "super.users": "User:admin"},
        sasl_users={"admin": "admin-secret"},
    )
    admin = sasl_plain_client_config(broker.bootstrap_servers, "admin", "admin-secret")
    properties = tmp_path / "admin.properties"
    properties.write_text("".join(f"{key}={value}\n" for key, value in admin.items() if key != "bootstrap.servers"))
    connection = ["--bootstrap-server", broker.bootstrap_servers, "--command-config", str(properties)]
    for topic in ("orders", "payments"):
        added = subprocess.run(
            [str(ONCELOG), "acls", "--add", "--allow-principal", "User:alice", "--operation", "Read",
             "--topic", topic, *connection],
            stdin=subprocess.DEVNULL, capture_output=True, timeout=COMMAND_TIMEOUT_S, check=False, env=environment(),
        )
        assert added.returncode == 0, added.stderr

    ended = into_closed_pipe("acls", "--list", *connection)
    assert ended.returncode == EXIT_OUTPUT_CLOSED, ended
    assert_quiet(ended)
    piped = through_head("acls", "--list", *connection)
    assert piped.returncode in (0, EXIT_OUTPUT_CLOSED), piped
    assert_quiet(piped)
    assert piped.first_line.startswith(b"Current ACLs for resource `ResourcePattern(resourceType=TOPIC"), piped


def test_consume_counts_only_the_records_that_reached_a_pipe_whose_reader_left(bootstrap):
    """More output than the pipe holds: the reader takes one line and closes. Every record
    counted reached the pipe in full: at most what was read plus what the pipe held."""
    read_end, write_end = os.pipe()
    pipe_capacity = fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)
    command = subprocess.Popen(
        [str(ONCELOG), "consume", "--topic", BIG_TOPIC, "--from-beginning", "--bootstrap-server", bootstrap],
        stdin=subprocess.DEVNULL, stdout=write_end, stderr=subprocess.PIPE, env=environment(),
    )
    os.close(write_end)
    try:
        received = b""
        while b"\n" not in received:
            chunk = os.read(read_end, BIG_RECORD)
            assert chunk, "consume ended before printing a line"
            received += chunk
        os.close(read_end)
        command.wait(timeout=COMMAND_TIMEOUT_S)
        assert command.stderr is not None
        stderr = command.stderr.read().decode()
    finally:
        command.kill()
    assert received.startswith(b"00000-z")
    assert command.returncode == EXIT_OUTPUT_CLOSED, stderr
    assert stderr.startswith("Processed a total of ") and stderr.endswith(" messages\n"), stderr
    counted = int(stderr.removeprefix("Processed a total of ").removesuffix(" messages\n"))
    assert 1 <= counted <= (len(received) + pipe_capacity) // BIG_RECORD < BIG_RECORDS


def test_consume_piped_into_head_counts_what_it_wrote(bootstrap):
    ended = through_head("consume", "--topic", BIG_TOPIC, "--from-beginning", "--bootstrap-server", bootstrap)
    assert ended.returncode == EXIT_OUTPUT_CLOSED, ended
    assert ended.first_line == b"00000-" + b"z" * (BIG_RECORD - 7) + b"\n"
    assert_quiet(ended, notes_allowed=True)
    counted = int(ended.stderr.removeprefix("Processed a total of ").removesuffix(" messages\n"))
    # What a pipe and head's read could take, far from the whole topic.
    assert 1 <= counted < BIG_RECORDS


def test_consume_waiting_for_records_stops_when_its_reader_leaves(bootstrap):
    """`oncelog consume --topic T | head -1` on a topic with one record: head has its line
    and exits; the consumer, with nothing more to write, finds that out between polls."""
    started = time.monotonic()
    ended = through_head("consume", "--topic", QUIET_TOPIC, "--from-beginning", "--bootstrap-server", bootstrap)
    assert ended.first_line == b"the only record\n"
    assert ended.returncode == EXIT_OUTPUT_CLOSED, ended
    assert ended.stderr == "Processed a total of 1 messages\n"
    assert time.monotonic() - started < 20

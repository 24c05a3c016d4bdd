"""The `oncelog` command (topics, produce, consume) run as a real subprocess against a
real embedded broker: what a user types, what they see, and what ends up in the log."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.support.cli import ONCELOG, Cli, run_oncelog
from tests.support.kafka import create_topic


@pytest.fixture
def cli(shared_broker) -> Cli:
    return Cli(shared_broker.bootstrap_servers)


@pytest.fixture
def topic(request) -> str:
    """A topic name unique to the test (tests share one broker)."""
    return re.sub(r"[^A-Za-z0-9._-]", "-", request.node.name)[:200]


def read_values(bootstrap: str, topic: str, partition: int, expected: int) -> list[bytes | None]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-reader",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, partition, 0)])
    values: list[bytes | None] = []
    deadline = time.monotonic() + 30
    while len(values) < expected and time.monotonic() < deadline:
        for message in consumer.consume(100, timeout=0.5):
            assert message.error() is None, message.error()
            values.append(message.value())
    consumer.close()
    return values


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# ----------------------------------------------------------------------------- topics


def test_topics_create_prints_created_and_the_topic_is_listed(cli, topic):
    assert cli.ok("topics", "create", "--topic", topic, "--partitions", "2") == (
        f"Created topic {topic}.\n"
    )
    assert topic in cli.ok("topics", "list").splitlines()
    assert topic in cli.ok("topics", "list", "--exclude-internal").splitlines()


def test_topics_create_of_an_existing_topic_fails_in_one_line(cli, topic):
    cli.ok("topics", "create", "--topic", topic)
    assert cli.fails("topics", "create", "--topic", topic) == (
        f"oncelog: error: topic '{topic}' already exists"
    )


def test_topics_create_if_not_exists_accepts_an_existing_topic(cli, topic):
    cli.ok("topics", "create", "--topic", topic, "--partitions", "3")
    assert cli.ok("topics", "create", "--topic", topic, "--if-not-exists") == ""
    assert "PartitionCount: 3" in cli.ok("topics", "describe", "--topic", topic)


def test_topics_describe_prints_kafka_topics_layout_with_one_line_per_partition(cli, topic):
    cli.ok("topics", "create", "--topic", topic, "--partitions", "3",
           "--replication-factor", "1")
    lines = cli.ok("topics", "describe", "--topic", topic).splitlines()
    assert len(lines) == 4, lines
    assert re.fullmatch(
        rf"Topic: {re.escape(topic)}\tTopicId: \S*\tPartitionCount: 3\t"
        r"ReplicationFactor: 1\tConfigs: .*",
        lines[0],
    ), lines[0]
    for partition, line in enumerate(lines[1:]):
        assert re.fullmatch(
            rf"\tTopic: {re.escape(topic)}\tPartition: {partition}\tLeader: (\d+)\t"
            r"Replicas: \1\tIsr: \1",
            line,
        ), line


def test_topics_describe_shows_configs_given_at_create(cli, topic):
    cli.ok("topics", "create", "--topic", topic, "--config", "retention.ms=3600000",
           "--config", "cleanup.policy=delete")
    header = cli.ok("topics", "describe", "--topic", topic).splitlines()[0]
    configs = header.split("Configs: ", 1)[1].split(",")
    assert "retention.ms=3600000" in configs
    assert "cleanup.policy=delete" in configs


def test_topics_describe_without_topic_lists_every_topic(cli, topic):
    cli.ok("topics", "create", "--topic", topic + "-a")
    cli.ok("topics", "create", "--topic", topic + "-b", "--partitions", "2")
    output = cli.ok("topics", "describe")
    assert f"Topic: {topic}-a\t" in output
    assert re.search(rf"^Topic: {re.escape(topic)}-b\t.*PartitionCount: 2\t", output, re.MULTILINE)


def test_topics_describe_of_a_missing_topic_fails_in_one_line(cli, topic):
    assert cli.fails("topics", "describe", "--topic", topic) == (
        f"oncelog: error: topic '{topic}' does not exist"
    )


def test_topics_alter_adds_partitions(cli, topic):
    cli.ok("topics", "create", "--topic", topic, "--partitions", "1")
    assert cli.ok("topics", "alter", "--topic", topic, "--partitions", "4") == ""
    lines = cli.ok("topics", "describe", "--topic", topic).splitlines()
    assert "PartitionCount: 4" in lines[0]
    assert [line.split("\t")[2] for line in lines[1:]] == [f"Partition: {p}" for p in range(4)]


def test_topics_alter_cannot_reduce_partitions(cli, topic):
    cli.ok("topics", "create", "--topic", topic, "--partitions", "3")
    error = cli.fails("topics", "alter", "--topic", topic, "--partitions", "2")
    assert "INVALID_PARTITIONS" in error.replace(topic, "<topic>")
    assert "PartitionCount: 3" in cli.ok("topics", "describe", "--topic", topic)


def test_topics_delete_removes_the_topic(cli, topic):
    cli.ok("topics", "create", "--topic", topic)
    assert cli.ok("topics", "delete", "--topic", topic) == ""
    deadline = time.monotonic() + 10
    while topic in cli.ok("topics", "list").splitlines() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert topic not in cli.ok("topics", "list").splitlines()


def test_topics_delete_of_a_missing_topic_fails_unless_if_exists(cli, topic):
    assert cli.fails("topics", "delete", "--topic", topic) == (
        f"oncelog: error: topic '{topic}' does not exist"
    )
    assert cli.ok("topics", "delete", "--topic", topic, "--if-exists") == ""


# ----------------------------------------------------------------------------- configs


def test_configs_alter_and_describe_like_kafka_configs(cli, topic):
    cli.ok("topics", "create", "--topic", topic, "--config", "segment.bytes=1048576")
    done = cli.ok("configs", "--alter", "--entity-type", "topics", "--entity-name", topic,
                  "--add-config", "retention.ms=86400000,cleanup.policy=[delete,compact]")
    assert done == f"Completed updating config for topic {topic}.\n"
    lines = cli.ok("configs", "--describe", "--topic", topic).splitlines()
    assert lines[0] == f"Dynamic configs for topic {topic} are:"
    segment_bytes = ("  segment.bytes=1048576 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:segment.bytes=1048576, "
                     "DEFAULT_CONFIG:log.segment.bytes=1073741824}")
    assert lines[1:] == [
        ("  cleanup.policy=delete,compact sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=delete,"
         "compact, DEFAULT_CONFIG:log.cleanup.policy=delete}"),
        "  retention.ms=86400000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=86400000}",
        segment_bytes,
    ]
    cli.ok("configs", "--alter", "--topic", topic, "--delete-config", "retention.ms,cleanup.policy")
    everything = cli.ok("configs", "--describe", "--topic", topic, "--all").splitlines()
    assert everything[0] == f"All configs for topic {topic} are:"
    assert "  retention.ms=604800000 sensitive=false synonyms={}" in everything  # as Kafka: see DescribeConfigs
    assert cli.ok("configs", "--describe", "--topic", topic).splitlines()[1:] == [segment_bytes]


def test_configs_of_brokers_default_and_own_are_altered_and_described(kafka_broker_factory):
    cli = Cli(kafka_broker_factory().bootstrap_servers)  # its own: broker configs change every topic
    assert cli.ok("configs", "--alter", "--entity-type", "brokers", "--entity-default",
                  "--add-config", "log.retention.ms=7200000") == \
        "Completed updating default config for brokers in the cluster.\n"
    assert cli.ok("configs", "--alter", "--broker", "1", "--add-config", "log.cleanup.policy=[delete,compact]") == \
        "Completed updating config for broker 1.\n"
    assert cli.ok("configs", "--describe", "--broker-defaults").splitlines() == [
        "Default configs for brokers in the cluster are:",
        ("  log.retention.ms=7200000 sensitive=false "
         "synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=7200000}"),
    ]
    assert cli.ok("configs", "--describe", "--broker", "1").splitlines() == [  # its own only, as Kafka's tool
        "Dynamic configs for broker 1 are:",
        ("  log.cleanup.policy=delete,compact sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:log.cleanup.policy="
         "delete,compact, DEFAULT_CONFIG:log.cleanup.policy=delete}"),
    ]
    assert ("  log.retention.ms=7200000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms="
            "7200000, DEFAULT_CONFIG:log.retention.hours=168}") in cli.ok(
        "configs", "--describe", "--broker", "1", "--all").splitlines()


def test_configs_refusals_are_one_line_naming_what_is_wrong(cli, topic):
    cli.ok("topics", "create", "--topic", topic)
    assert cli.fails("configs", "--alter", "--topic", topic, "--add-config", "retention.ms=soon") == (
        "oncelog: error: INVALID_CONFIG: config 'retention.ms': invalid value 'soon': 'soon' is not an integer")
    assert cli.fails("configs", "--alter", "--topic", topic + "-missing", "--add-config", "retention.ms=1") == (
        f"oncelog: error: topic '{topic}-missing' does not exist")
    assert cli.fails("configs", "--alter", "--broker", "1", "--add-config", "log.dirs=/elsewhere") == (
        "oncelog: error: INVALID_REQUEST: Cannot update these configs dynamically: Set(log.dirs)")
    assert cli.fails("configs", "--alter", "--topic", topic) == (
        "oncelog: error: --alter needs --add-config, --add-config-file or --delete-config")
    assert cli.fails("configs", "--describe") == (
        "oncelog: error: --entity-type is required (or --topic, --broker, --broker-defaults, --group, --user, "
        "--client, --user-defaults, --client-defaults)")


# ---------------------------------------------------------------------------- produce


def test_stdin_lines_produced_are_consumed_from_beginning_in_order(cli, topic):
    cli.ok("topics", "create", "--topic", topic)
    cli.ok("produce", "--topic", topic, stdin=b"first\nsecond\r\nthird")
    completed = cli("consume", "--topic", topic, "--from-beginning", "--max-messages", "3")
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout == b"first\nsecond\nthird\n"
    assert completed.stderr.decode().strip() == "Processed a total of 3 messages"


def test_value_option_produces_without_reading_stdin(cli, topic):
    cli.ok("topics", "create", "--topic", topic)
    cli.ok("produce", "--topic", topic, "--value", "a", "--value", "b")
    assert read_values(cli.bootstrap, topic, 0, 2) == [b"a", b"b"]


def test_parse_key_splits_each_line_and_print_key_shows_the_key(cli, topic):
    cli.ok("topics", "create", "--topic", topic)
    cli.ok("produce", "--topic", topic, "--property", "parse.key=true",
           "--property", "key.separator=:", stdin=b"user-1:login\nuser-2:logout:now\n")
    output = cli.ok("consume", "--topic", topic, "--from-beginning", "--max-messages", "2",
                    "--property", "print.key=true")
    assert output == "user-1\tlogin\nuser-2\tlogout:now\n"


def test_parse_key_line_without_separator_fails_naming_the_line(cli, topic):
    cli.ok("topics", "create", "--topic", topic)
    error = cli.fails("produce", "--topic", topic, "--property", "parse.key=true",
                      "--property", "key.separator=:", stdin=b"k:v\nno separator here\n")
    assert "line 2" in error and "no separator here" in error


def test_null_marker_produces_a_null_value_printed_as_null(cli, topic):
    cli.ok("topics", "create", "--topic", topic)
    cli.ok("produce", "--topic", topic, "--property", "parse.key=true",
           "--property", "key.separator=:", "--property", "null.marker=NULL",
           stdin=b"gone:NULL\n")
    assert read_values(cli.bootstrap, topic, 0, 1) == [None]
    output = cli.ok("consume", "--topic", topic, "--from-beginning", "--max-messages", "1",
                    "--property", "print.key=true")
    assert output == "gone\tnull\n"


def test_header_options_are_printed_by_print_headers(cli, topic):
    cli.ok("topics", "create", "--topic", topic)
    cli.ok("produce", "--topic", topic, "--header", "trace=abc", "--header", "source=cli",
           "--value", "with-headers")
    cli.ok("produce", "--topic", topic, "--value", "without-headers")
    output = cli.ok("consume", "--topic", topic, "--from-beginning", "--max-messages", "2",
                    "--property", "print.headers=true")
    assert output == "trace:abc,source:cli\twith-headers\nNO_HEADERS\twithout-headers\n"


def test_parse_headers_reads_headers_before_the_key(cli, topic):
    cli.ok("topics", "create", "--topic", topic)
    cli.ok("produce", "--topic", topic, "--property", "parse.headers=true",
           "--property", "parse.key=true", stdin=b"h1:v1,h2:v2\tkey\tvalue\n")
    output = cli.ok("consume", "--topic", topic, "--from-beginning", "--max-messages", "1",
                    "--property", "print.headers=true", "--property", "print.key=true")
    assert output == "h1:v1,h2:v2\tkey\tvalue\n"


def test_print_properties_give_kafka_column_order(cli, topic):
    cli.ok("topics", "create", "--topic", topic, "--partitions", "2")
    cli.ok("produce", "--topic", topic, "--partition", "1", "--header", "h=1",
           "--property", "parse.key=true", "--property", "key.separator=:",
           stdin=b"k0:v0\nk1:v1\n")
    before = int(time.time() * 1000) - 60_000
    output = cli.ok("consume", "--topic", topic, "--from-beginning", "--max-messages", "2",
                    "--property", "print.timestamp=true", "--property", "print.partition=true",
                    "--property", "print.offset=true", "--property", "print.headers=true",
                    "--property", "print.key=true")
    lines = output.splitlines()
    for offset, line in enumerate(lines):
        match = re.fullmatch(
            rf"CreateTime:(\d+)\tPartition:1\tOffset:{offset}\th:1\tk{offset}\tv{offset}", line
        )
        assert match, line
        assert int(match.group(1)) > before
    assert len(lines) == 2


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_every_compression_type_round_trips(cli, topic, codec):
    cli.ok("topics", "create", "--topic", topic)
    lines = [f"{codec}-record-{i}-" + "x" * (i % 50) for i in range(200)]
    cli.ok("produce", "--topic", topic, "--compression-type", codec,
           stdin=("\n".join(lines) + "\n").encode())
    output = cli.ok("consume", "--topic", topic, "--from-beginning", "--max-messages", "200")
    assert output.splitlines() == lines


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_every_acks_setting_delivers(cli, topic, acks):
    cli.ok("topics", "create", "--topic", topic)
    cli.ok("produce", "--topic", topic, "--acks", acks, "--value", f"acks={acks}")
    assert read_values(cli.bootstrap, topic, 0, 1) == [f"acks={acks}".encode()]


def test_produce_to_a_new_topic_auto_creates_it_like_kafka(cli, topic):
    cli.ok("produce", "--topic", topic, "--value", "first")
    assert topic in cli.ok("topics", "list").splitlines()
    assert read_values(cli.bootstrap, topic, 0, 1) == [b"first"]


def test_produce_to_a_missing_topic_fails_in_one_line_when_auto_create_is_off(kafka_broker_factory, topic):
    cli = Cli(kafka_broker_factory({"auto.create.topics.enable": "false"}).bootstrap_servers)
    assert cli.fails("produce", "--topic", topic, "--value", "x") == (
        f"oncelog: error: topic '{topic}' does not exist"
    )
    assert cli.fails("topics", "alter", "--topic", topic, "--partitions", "2") == (
        f"oncelog: error: topic '{topic}' does not exist"
    )
    assert topic not in cli.ok("topics", "list").splitlines()


def test_produce_to_a_missing_partition_fails_in_one_line(cli, topic):
    cli.ok("topics", "create", "--topic", topic, "--partitions", "2")
    error = cli.fails("produce", "--topic", topic, "--partition", "5", "--value", "x")
    assert "partition 5" in error and topic in error


# ---------------------------------------------------------------------------- consume


def test_partition_and_offset_start_reading_at_that_offset(cli, topic):
    cli.ok("topics", "create", "--topic", topic, "--partitions", "2")
    cli.ok("produce", "--topic", topic, "--partition", "1",
           stdin=b"".join(f"p1-{i}\n".encode() for i in range(5)))
    cli.ok("produce", "--topic", topic, "--partition", "0", "--value", "p0-0")
    output = cli.ok("consume", "--topic", topic, "--partition", "1", "--offset", "2",
                    "--max-messages", "3", "--property", "print.offset=true")
    assert output == "Offset:2\tp1-2\nOffset:3\tp1-3\nOffset:4\tp1-4\n"
    earliest = cli.ok("consume", "--topic", topic, "--partition", "0", "--offset", "earliest",
                      "--max-messages", "1")
    assert earliest == "p0-0\n"


def test_timeout_ms_ends_the_consumer_when_no_more_records_arrive(cli, topic):
    cli.ok("topics", "create", "--topic", topic)
    cli.ok("produce", "--topic", topic, "--value", "only-one")
    started = time.monotonic()
    completed = cli("consume", "--topic", topic, "--from-beginning", "--timeout-ms", "2000")
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout == b"only-one\n"
    assert completed.stderr.decode().strip() == "Processed a total of 1 messages"
    assert time.monotonic() - started < 30


def test_without_from_beginning_only_new_records_are_printed(cli, topic):
    cli.ok("topics", "create", "--topic", topic)
    cli.ok("produce", "--topic", topic, "--value", "old")
    consumer = subprocess.Popen(
        [str(ONCELOG), "consume", "--topic", topic, "--max-messages", "1",
         "--bootstrap-server", cli.bootstrap],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        # The consumer starts at the end once it is assigned; keep producing until it
        # has printed something, then check that it was never the old record.
        sent = 0
        deadline = time.monotonic() + 30
        while consumer.poll() is None and time.monotonic() < deadline:
            cli.ok("produce", "--topic", topic, "--value", f"new-{sent}")
            sent += 1
            time.sleep(0.3)
        stdout, stderr = consumer.communicate(timeout=30)
    finally:
        consumer.kill()
    assert consumer.returncode == 0, stderr
    assert re.fullmatch(rb"new-\d+\n", stdout), stdout


def test_read_committed_consumer_reads_non_transactional_records(cli, topic):
    cli.ok("topics", "create", "--topic", topic)
    cli.ok("produce", "--topic", topic, "--value", "a", "--value", "b")
    output = cli.ok("consume", "--topic", topic, "--from-beginning", "--max-messages", "2",
                    "--isolation-level", "read_committed")
    assert output == "a\nb\n"


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_stops_the_consumer_cleanly_and_reports_the_count(cli, topic, signum):
    cli.ok("topics", "create", "--topic", topic)
    cli.ok("produce", "--topic", topic, "--value", "one")
    consumer = subprocess.Popen(
        [str(ONCELOG), "consume", "--topic", topic, "--from-beginning",
         "--bootstrap-server", cli.bootstrap],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        assert consumer.stdout.readline() == b"one\n"
        consumer.send_signal(signum)
        stdout, stderr = consumer.communicate(timeout=30)
    finally:
        consumer.kill()
    assert consumer.returncode == 128 + signum  # as the JVM exits on that signal
    assert stdout == b""
    assert stderr.decode().strip() == "Processed a total of 1 messages"


def test_group_consumer_resumes_from_the_offsets_it_committed(cli, topic):
    cli.ok("topics", "create", "--topic", topic)
    cli.ok("produce", "--topic", topic, "--value", "a", "--value", "b", "--value", "c",
           "--value", "d")
    group = f"{topic}-group"
    first = cli.ok("consume", "--topic", topic, "--group", group, "--from-beginning",
                   "--max-messages", "2")
    second = cli.ok("consume", "--topic", topic, "--group", group, "--max-messages", "2")
    assert (first, second) == ("a\nb\n", "c\nd\n")


def test_consume_of_a_missing_topic_fails_in_one_line(cli, topic):
    assert cli.fails("consume", "--topic", topic, "--timeout-ms", "1000") == (
        f"oncelog: error: topic '{topic}' does not exist"
    )


def test_offset_without_partition_is_a_usage_error(cli, topic):
    assert cli.fails("consume", "--topic", topic, "--offset", "3") == (
        "oncelog: error: --offset requires --partition"
    )


# ------------------------------------------------------------------ connection options


def test_bootstrap_server_defaults_to_the_oncelog_bootstrap_variable(shared_broker, topic):
    create_topic(shared_broker.bootstrap_servers, topic)
    completed = run_oncelog("topics", "list",
                            env={"ONCELOG_BOOTSTRAP": shared_broker.bootstrap_servers})
    assert completed.returncode == 0, completed.stderr
    assert topic in completed.stdout.decode().splitlines()


def test_command_config_file_supplies_client_properties(shared_broker, topic, tmp_path):
    create_topic(shared_broker.bootstrap_servers, topic)
    config = tmp_path / "client.properties"
    config.write_text(
        "# client settings, Java properties syntax\n"
        f"bootstrap.servers={shared_broker.bootstrap_servers}\n"
        "client.id: from-command-config\n"
    )
    completed = run_oncelog("topics", "list", "--command-config", str(config))
    assert completed.returncode == 0, completed.stderr
    assert topic in completed.stdout.decode().splitlines()


def test_command_config_and_x_properties_reach_librdkafka(cli, tmp_path):
    bad = tmp_path / "bad.properties"
    bad.write_text("no.such.property=1\n")
    for options in (["--command-config", str(bad)], ["-X", "no.such.property=1"]):
        error = cli.fails("topics", "list", *options)
        assert error.startswith("oncelog: error: invalid client configuration:")
        assert "no.such.property" in error


def test_unreachable_bootstrap_server_fails_in_one_line(topic):
    address = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    commands = (["topics", "list"], ["consume", "--topic", topic], ["produce", "--topic", topic, "--value", "x"])
    # at once: each waits out the grace a starting broker gets (UNREACHABLE_GRACE_S)
    environment = {k: v for k, v in os.environ.items() if k != "ONCELOG_BOOTSTRAP"}
    running = [subprocess.Popen([str(ONCELOG), *command, "--bootstrap-server", address], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environment)
               for command in commands]
    for process in running:
        _stdout, stderr_bytes = process.communicate(timeout=60)
        assert process.returncode == 1
        stderr = stderr_bytes.decode()
        assert stderr.startswith(f"oncelog: error: cannot reach bootstrap server(s) {address}")
        assert stderr.count("\n") == 1, stderr
    assert time.monotonic() - started < 60


# ----------------------------------------------------------------------- usage errors


@pytest.mark.parametrize("args, line", [
    (["topics", "create"],
     ("oncelog: error: topics create: the following arguments are required: --topic "
      "(see oncelog topics create --help)")),
    (["topics", "create", "--topic", "t", "--partitions", "two"],
     ("oncelog: error: topics create: argument --partitions: invalid int value: 'two' "
      "(see oncelog topics create --help)")),
    (["transactions", "list", "--no-such-option"],
     "oncelog: error: unrecognized arguments: --no-such-option (see oncelog --help)"),
    ([], "oncelog: error: the following arguments are required: COMMAND (see oncelog --help)"),
], ids=["missing-argument", "bad-value", "unknown-option", "no-command"])
def test_usage_errors_are_one_line_and_exit_1_like_the_other_errors(args, line):
    completed = run_oncelog(*args)
    assert completed.returncode == 1
    assert completed.stderr.decode() == line + "\n"

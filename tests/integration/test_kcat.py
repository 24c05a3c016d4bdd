"""kcat (Debian's package, librdkafka underneath) against a real embedded broker:
metadata listing, keyed produce with headers, consume with a format string, every codec,
and records written by one client read back by another."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.support.kafka import create_topic

KCAT_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def kcat() -> str:
    path = shutil.which("kcat")
    if path is None:  # `make setup` installs it; a missing kcat is a setup failure
        pytest.fail("kcat is not installed: run `make setup` (or apt-get install kcat)")
    return path


@pytest.fixture
def topic(request) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "-", request.node.name)[:200]


def run_kcat(kcat: str, bootstrap: str, *args: str,
             stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    completed = subprocess.run(
        [kcat, "-b", bootstrap, *args],
        input=stdin,
        stdin=subprocess.DEVNULL if stdin is None else None,
        capture_output=True,
        check=False,
        timeout=KCAT_TIMEOUT_S,
    )
    assert completed.returncode == 0, (
        f"kcat {' '.join(args)} exited {completed.returncode}: "
        f"{completed.stderr.decode(errors='replace')}"
    )
    return completed


def consume_formatted(kcat: str, bootstrap: str, topic: str, expected: int,
                      fmt: str = "%k=%s %h\n", *extra: str) -> list[str]:
    """`kcat -C -e -o beginning -f FMT`; retried briefly until `expected` lines are there
    (kcat -e stops at the end offset it sees first)."""
    deadline = time.monotonic() + 30
    while True:
        completed = run_kcat(kcat, bootstrap, "-C", "-t", topic, "-e", "-o", "beginning",
                             "-f", fmt, *extra)
        lines = completed.stdout.decode().splitlines()
        if len(lines) >= expected or time.monotonic() > deadline:
            return lines
        time.sleep(0.3)


def test_kcat_metadata_lists_the_broker_and_its_topics(kcat, broker, topic):
    create_topic(broker.bootstrap_servers, topic, partitions=3)
    output = run_kcat(kcat, broker.bootstrap_servers, "-L").stdout.decode()
    host, port = broker.bootstrap_servers.rsplit(":", 1)
    assert re.search(rf"^ 1 brokers:\n  broker (\d+) at {re.escape(host)}:{port}", output, re.MULTILINE), output
    assert f' topic "{topic}" with 3 partitions:' in output
    for partition in range(3):
        assert re.search(rf"^    partition {partition}, leader \d+, replicas: \d+, isrs: \d+",
                         output, re.MULTILINE), output


def test_kcat_json_metadata_agrees_with_the_broker(kcat, broker, topic):
    create_topic(broker.bootstrap_servers, topic, partitions=2)
    metadata = json.loads(run_kcat(kcat, broker.bootstrap_servers, "-L", "-J").stdout)
    assert [b["name"] for b in metadata["brokers"]] == [broker.bootstrap_servers]
    (described,) = [t for t in metadata["topics"] if t["topic"] == topic]
    assert [p["partition"] for p in described["partitions"]] == [0, 1]
    leader = metadata["brokers"][0]["id"]
    assert all(p["leader"] == leader for p in described["partitions"])


def test_kcat_keys_and_headers_round_trip(kcat, broker, topic):
    create_topic(broker.bootstrap_servers, topic)
    run_kcat(kcat, broker.bootstrap_servers, "-P", "-t", topic, "-K:",
             "-H", "trace=t-1", "-H", "origin=kcat",
             stdin=b"alice:hello\nbob:world\n")
    lines = consume_formatted(kcat, broker.bootstrap_servers, topic, 2)
    assert lines == [
        "alice=hello trace=t-1,origin=kcat",
        "bob=world trace=t-1,origin=kcat",
    ]


def test_kcat_reads_partition_offset_and_key_of_each_record(kcat, broker, topic):
    create_topic(broker.bootstrap_servers, topic, partitions=2)
    run_kcat(kcat, broker.bootstrap_servers, "-P", "-t", topic, "-p", "1", "-K:",
             stdin=b"k0:v0\nk1:v1\nk2:v2\n")
    lines = consume_formatted(kcat, broker.bootstrap_servers, topic, 2,
                              "%p/%o %k=%s\n", "-p", "1", "-o", "1")
    assert lines == ["1/1 k1=v1", "1/2 k2=v2"]


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_kcat_compressed_batches_round_trip(kcat, broker, topic, codec):
    create_topic(broker.bootstrap_servers, topic)
    values = [f"{codec}-{i}-" + "y" * (i % 40) for i in range(300)]
    run_kcat(kcat, broker.bootstrap_servers, "-P", "-t", topic, "-z", codec,
             stdin=("\n".join(values) + "\n").encode())
    assert consume_formatted(kcat, broker.bootstrap_servers, topic, 300, "%s\n") == values


def test_kcat_reads_what_confluent_kafka_wrote(kcat, broker, topic):
    create_topic(broker.bootstrap_servers, topic, partitions=3)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "acks": "all"})
    for i in range(30):
        producer.produce(topic, key=f"key-{i}", value=f"value-{i}", partition=i % 3,
                         headers=[("n", str(i).encode())])
    assert producer.flush(30) == 0
    lines = consume_formatted(kcat, broker.bootstrap_servers, topic, 30, "%p %k=%s %h\n")
    assert sorted(lines) == sorted(f"{i % 3} key-{i}=value-{i} n={i}" for i in range(30))
    for partition in range(3):  # offset order within each partition
        in_partition = [line for line in lines if line.startswith(f"{partition} ")]
        numbers = [int(line.split()[1].split("=")[0][4:]) for line in in_partition]
        assert numbers == sorted(numbers)


def test_oncelog_consume_reads_what_kcat_wrote(kcat, broker, topic):
    create_topic(broker.bootstrap_servers, topic)
    run_kcat(kcat, broker.bootstrap_servers, "-P", "-t", topic, "-K:", "-H", "via=kcat",
             stdin=b"k1:v1\nk2:v2\n")
    completed = subprocess.run(
        [str(Path(sys.executable).with_name("oncelog")), "consume", "--topic", topic,
         "--bootstrap-server", broker.bootstrap_servers, "--from-beginning",
         "--max-messages", "2", "--property", "print.key=true",
         "--property", "print.headers=true"],
        stdin=subprocess.DEVNULL, check=False, capture_output=True, timeout=60,
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout == b"via:kcat\tk1\tv1\nvia:kcat\tk2\tv2\n"

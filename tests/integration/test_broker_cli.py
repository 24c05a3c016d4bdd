"""`oncelog broker start` as the README shows it: the example config on another port, and
the mistakes a new user makes, each one line `oncelog: error: ...` and exit status 1."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from oncelog.local.process import BrokerProcess, free_port

EXAMPLE_CONFIG = Path(__file__).resolve().parents[2] / "config" / "server.properties"


def start_broker(*args: str) -> tuple[subprocess.Popen, str]:
    """`oncelog broker start ARGS`, running; (process, its first line of output)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "oncelog", "broker", "start", *args],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert process.stdout is not None and process.stderr is not None  # PIPEs
    line = process.stdout.readline()
    if not line:
        process.wait(30)
        pytest.fail(f"the broker exited {process.returncode}: {process.stderr.read()[-3000:]}")
    return process, line


def one_line_error(*args: str) -> str:
    completed = subprocess.run(
        [sys.executable, "-m", "oncelog", "broker", "start", *args],
        stdin=subprocess.DEVNULL, check=False, capture_output=True, text=True, timeout=60,
    )
    assert completed.returncode == 1, completed.stderr
    assert completed.stderr.count("\n") == 1 and completed.stderr.startswith("oncelog: error: "), completed.stderr
    return completed.stderr.strip()


def produce_and_consume(bootstrap: str, topic: str) -> None:
    """The CLI producer and consumer, through the address the broker advertises."""
    oncelog = [sys.executable, "-m", "oncelog"]
    produced = subprocess.run([*oncelog, "produce", "--topic", topic, "--value", "hello", "--bootstrap-server",
                               bootstrap], check=False, capture_output=True, text=True, timeout=60)
    assert produced.returncode == 0, produced.stderr
    consumed = subprocess.run([*oncelog, "consume", "--topic", topic, "--from-beginning", "--max-messages", "1",
                               "--timeout-ms", "20000", "--bootstrap-server", bootstrap],
                              check=False, capture_output=True, text=True, timeout=60)
    assert (consumed.returncode, consumed.stdout) == (0, "hello\n"), consumed.stderr


def test_example_config_with_another_listener_port_advertises_and_prints_that_port(tmp_path):
    """The README's command with listeners on a port other than 9092: clients are told
    that port (advertised.listeners defaults to listeners, as in Kafka) and the broker
    prints where it really listens."""
    port = free_port()
    process, line = start_broker("--config", str(EXAMPLE_CONFIG),
                                 "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
                                 "--override", f"log.dirs={tmp_path / 'logs'}")
    try:
        assert line == f"oncelog broker 1 listening on 127.0.0.1:{port}\n"
        produce_and_consume(f"127.0.0.1:{port}", "greetings")
    finally:
        process.terminate()
        assert process.wait(30) == 0


def test_an_advertised_address_other_than_the_bound_one_is_printed_beside_it(tmp_path):
    port = free_port()
    process, line = start_broker("--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
                                 "--override", "advertised.listeners=PLAINTEXT://broker.example:9092",
                                 "--override", f"log.dirs={tmp_path / 'logs'}")
    try:
        assert line == (
            f"oncelog broker 1 listening on 127.0.0.1:{port} (advertised to clients as broker.example:9092)\n"
        )
    finally:
        process.terminate()
        process.wait(30)


def test_a_sigterm_sent_the_moment_the_address_line_appears_stops_the_broker(tmp_path):
    """The line was printed between two runs of uvloop's loop, which drops a signal that
    comes while it is not running: on a busy machine the broker then never stopped."""
    for attempt in range(5):
        process, _line = start_broker("--override", "listeners=PLAINTEXT://127.0.0.1:0",
                                      "--override", f"log.dirs={tmp_path / str(attempt)}")
        process.terminate()
        try:
            assert process.wait(20) == 0
        finally:
            process.kill()
            process.communicate()


def test_a_server_properties_that_is_not_utf8_is_a_one_line_error(tmp_path):
    config = tmp_path / "server.properties"
    config.write_bytes(b"node.id=1\n# r\xe9pertoire des journaux (Latin-1)\nlog.dirs=/tmp/x\n")
    assert one_line_error("--config", str(config)) == (
        f"oncelog: error: {config}:2: not UTF-8 text (byte 0xe9); save the file as UTF-8"
    )


def test_a_second_broker_on_log_dirs_in_use_is_a_one_line_error_and_the_first_keeps_serving(tmp_path):
    with BrokerProcess(tmp_path / "logs") as running:
        error = one_line_error("--override", f"log.dirs={tmp_path / 'logs'}",
                               "--override", "listeners=PLAINTEXT://127.0.0.1:0")
        assert error == (f"oncelog: error: cannot start broker: {tmp_path / 'logs'}: log directory is in use by "
                         "another process")
        produce_and_consume(running.bootstrap_servers, "still-served")

"""oncelog's pytest plugin: a Kafka broker for any project's tests, in-process, started in
milliseconds, with no Docker and no conftest (pytest loads it through the `pytest11`
entry point `oncelog`; `-p no:oncelog` turns it off).

Fixtures:
- `kafka_broker` (session): the running EmbeddedBroker, on a free loopback port, its
  logs in a temporary directory; started only when a test asks for it.
- `kafka_bootstrap` (session): its `host:port`, for `bootstrap.servers`.
- `kafka_client_config`: confluent-kafka settings to reach it (bootstrap.servers, and
  with SASL users the first user's sign-in), a fresh dict for each test.
- `kafka_broker_factory`: makes brokers of a test's own settings; they stop when it ends.

Options of the session broker, Kafka's own keys (as in server.properties):
- ini `kafka_broker_config`: `key=value` lines; `--kafka-broker-config key=value`
  (repeatable) wins over them.
- ini `kafka_broker_sasl_users`: `user:password` lines, and
  `--kafka-broker-sasl-user user:password`: a SASL_PLAINTEXT listener with these PLAIN users.

Importing this module costs nothing: the broker is imported when a fixture first needs one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from oncelog.testing import sasl_plain_broker_config, sasl_plain_client_config

if TYPE_CHECKING:
    from oncelog.broker.embedded import EmbeddedBroker

BrokerFactory = Callable[..., "EmbeddedBroker"]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("oncelog", "oncelog's Kafka broker (the kafka_broker fixture)")
    group.addoption(
        "--kafka-broker-config", action="append", default=[], metavar="KEY=VALUE",
        help="a setting of the kafka_broker fixture's broker, Kafka's key (e.g. num.partitions=3), repeatable; "
        "wins over the kafka_broker_config ini lines",
    )
    group.addoption(
        "--kafka-broker-sasl-user", action="append", default=[], metavar="USER:PASSWORD",
        help="a SASL PLAIN user of the kafka_broker fixture's broker, which then listens on SASL_PLAINTEXT; "
        "repeatable, added to the kafka_broker_sasl_users ini lines",
    )
    parser.addini("kafka_broker_config", type="linelist", default=[],
                  help="settings of the kafka_broker fixture's broker: key=value lines, Kafka's keys")
    parser.addini("kafka_broker_sasl_users", type="linelist", default=[],
                  help="SASL PLAIN users of the kafka_broker fixture's broker: user:password lines")


_SESSION_SETTINGS = pytest.StashKey["SessionSettings"]()


class SessionSettings:
    """The session broker's settings, read from the options once, at start-up, so that a
    mistake in them stops the run before any test."""

    def __init__(self, config: pytest.Config) -> None:
        self.broker_config: dict[str, str] = {}
        for line in [*config.getini("kafka_broker_config"), *config.getoption("kafka_broker_config")]:
            key, value = _split(line, "=", "kafka_broker_config", "KEY=VALUE")
            self.broker_config[key] = value
        self.sasl_users: dict[str, str] = {}
        for line in [*config.getini("kafka_broker_sasl_users"), *config.getoption("kafka_broker_sasl_user")]:
            user, password = _split(line, ":", "kafka_broker_sasl_users", "USER:PASSWORD")
            self.sasl_users[user] = password
        try:
            self.sasl_config = sasl_plain_broker_config(self.sasl_users) if self.sasl_users else {}
        except ValueError as error:
            raise pytest.UsageError(f"kafka_broker_sasl_users: {error}") from None


def _split(line: str, separator: str, option: str, form: str) -> tuple[str, str]:
    key, found, value = line.partition(separator)
    if not found or not key.strip():
        # Not echoed: the line may hold a password.
        raise pytest.UsageError(f"{option}: every entry must be {form}")
    return key.strip(), value.strip()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_SESSION_SETTINGS] = SessionSettings(config)


def _start_broker(data_dir: Path, config: Mapping[str, str]) -> EmbeddedBroker:
    from oncelog.broker.embedded import EmbeddedBroker

    return EmbeddedBroker(data_dir, config).start()


@pytest.fixture(scope="session")
def kafka_broker(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    """An oncelog EmbeddedBroker for the whole session, on a free loopback port, its logs
    in a temporary directory; settings from the kafka_broker_config and
    kafka_broker_sasl_users ini options (or --kafka-broker-config and
    --kafka-broker-sasl-user). Tests share it: give each its own topic names."""
    settings = pytestconfig.stash[_SESSION_SETTINGS]
    broker = _start_broker(tmp_path_factory.mktemp("kafka-broker"), {**settings.sasl_config, **settings.broker_config})
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def kafka_bootstrap(kafka_broker: EmbeddedBroker) -> str:
    """The session broker's `host:port` (kafka_broker), for `bootstrap.servers`."""
    return kafka_broker.bootstrap_servers


@pytest.fixture
def kafka_client_config(pytestconfig: pytest.Config, kafka_bootstrap: str) -> dict[str, Any]:
    """confluent-kafka settings for the session broker: `bootstrap.servers`, and when it
    has SASL users, the sign-in of the first one listed. A new dict for each test."""
    users = pytestconfig.stash[_SESSION_SETTINGS].sasl_users
    if not users:
        return {"bootstrap.servers": kafka_bootstrap}
    user, password = next(iter(users.items()))
    return sasl_plain_client_config(kafka_bootstrap, user, password)


@pytest.fixture
def kafka_broker_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerFactory]:
    """Makes brokers of the test's own settings, each started on a free loopback port and
    stopped when the test ends:

        broker = kafka_broker_factory({"num.partitions": "3"}, sasl_users={"alice": "secret"})

    `config`: Kafka's keys, winning over what `sasl_users` (name -> password: a
    SASL_PLAINTEXT listener with these PLAIN users) sets; `data_dir`: the log directory,
    to start a broker again on the logs of one stopped (a new temporary one otherwise)."""
    brokers: list[EmbeddedBroker] = []

    def make(config: Mapping[str, str] | None = None, *, sasl_users: Mapping[str, str] | None = None,
             data_dir: Path | str | None = None) -> EmbeddedBroker:
        settings = {**(sasl_plain_broker_config(sasl_users) if sasl_users else {}), **dict(config or {})}
        directory = Path(data_dir) if data_dir is not None else tmp_path_factory.mktemp("kafka-broker")
        broker = _start_broker(directory, settings)
        brokers.append(broker)
        return broker

    try:
        yield make
    finally:
        for broker in reversed(brokers):
            broker.stop()

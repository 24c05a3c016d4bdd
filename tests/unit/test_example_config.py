"""config/server.properties, the example the README points to, stays loadable."""

from pathlib import Path

from oncelog.config.broker import BrokerConfig

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "server.properties"


def test_example_server_properties_uses_only_keys_the_broker_reads():
    config = BrokerConfig.load(EXAMPLE, {})
    assert list(config.ignored) == []

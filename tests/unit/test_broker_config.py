"""Broker configuration from server.properties and --override, with Kafka's keys."""

import re

import pytest

from oncelog.config.broker import BrokerConfig, ConfigError, is_sensitive, parse_overrides, read_properties


def test_properties_file_then_overrides(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text("# comment\nnode.id=3\nlog.dirs=/a,/b\nnum.partitions = 4\nlisteners=PLAINTEXT://0.0.0.0:19092\n")
    config = BrokerConfig.load(path, parse_overrides(["num.partitions=6"]))
    assert config.node_id == 3
    assert [str(p) for p in config.log_dirs] == ["/a", "/b"]
    assert config["num.partitions"] == 6
    assert config.listeners[0].bind.port == 19092


def test_unknown_key_is_an_error_naming_it():
    with pytest.raises(ConfigError, match=re.escape("unknown configuration key: log.segmnt.bytes")):
        BrokerConfig({"log.segmnt.bytes": "1"})


def test_kafka_keys_without_meaning_here_are_accepted_and_listed():
    config = BrokerConfig({"num.network.threads": "3", "zookeeper.connect": "x"})
    assert config.ignored == ["num.network.threads", "zookeeper.connect"]


def test_bad_value_names_the_key():
    with pytest.raises(ConfigError, match=re.escape("auto.create.topics.enable")):
        BrokerConfig({"auto.create.topics.enable": "yes"})
    with pytest.raises(ConfigError, match=re.escape("message.max.bytes")):
        BrokerConfig({"message.max.bytes": "0"})


def test_retention_precedence_is_ms_then_minutes_then_hours():
    assert BrokerConfig({}).retention_ms == 168 * 3_600_000
    assert BrokerConfig({"log.retention.hours": "1"}).retention_ms == 3_600_000
    assert BrokerConfig({"log.retention.minutes": "2", "log.retention.hours": "1"}).retention_ms == 120_000
    assert BrokerConfig({"log.retention.ms": "5", "log.retention.minutes": "2"}).retention_ms == 5


def test_a_listener_needs_a_port_and_a_security_protocol():
    with pytest.raises(ConfigError, match="no valid port"):
        BrokerConfig({"listeners": "PLAINTEXT://localhost"})
    with pytest.raises(ConfigError, match="no security protocol for listener SECURE"):
        BrokerConfig({"listeners": "SECURE://localhost:9093"})


def test_override_needs_key_and_value():
    with pytest.raises(ConfigError, match="key=value"):
        parse_overrides(["novalue"])


def test_properties_reader_accepts_colon_separator(tmp_path):
    path = tmp_path / "p"
    path.write_text("a: 1\n! bang comment\nb=x=y\n")
    assert read_properties(path) == {"a": "1", "b": "x=y"}


def test_log_cleaner_keys_set_the_cleaner_and_the_topic_compaction_defaults():
    from oncelog.storage.config import LogConfig

    config = BrokerConfig({
        "log.cleaner.enable": "false", "log.cleaner.backoff.ms": "250",
        "log.cleaner.min.cleanable.ratio": "0.2", "log.cleaner.delete.retention.ms": "1000",
        "log.cleaner.min.compaction.lag.ms": "5", "log.cleaner.max.compaction.lag.ms": "60000",
        "log.cleaner.threads": "2", "log.cleaner.io.max.bytes.per.second": "1e6",
    })
    assert (config["log.cleaner.enable"], config["log.cleaner.backoff.ms"]) == (False, 250)
    assert config.ignored == ["log.cleaner.io.max.bytes.per.second", "log.cleaner.threads"]
    topic_defaults = LogConfig().with_overrides(config.log_defaults())
    assert (topic_defaults.min_cleanable_dirty_ratio, topic_defaults.delete_retention_ms) == (0.2, 1000)
    assert (topic_defaults.min_compaction_lag_ms, topic_defaults.max_compaction_lag_ms) == (5, 60000)
    assert BrokerConfig({})["log.cleaner.enable"] is True


def test_the_replication_keys_of_kafka_pythons_test_broker_config_are_accepted():
    # kafka-python's integration fixture (servers/resources/default/kafka.properties)
    # sets these; oncelog refused to start with them. replica.lag.time.max.ms and
    # offsets.commit.timeout.ms are real settings now (cluster mode); the other is
    # accepted and ignored.
    config = BrokerConfig({"replica.lag.time.max.ms": "1000", "replica.socket.timeout.ms": "1000",
                           "offsets.commit.timeout.ms": "500"})
    assert config.ignored == ["replica.socket.timeout.ms"]
    assert (config["replica.lag.time.max.ms"], config["offsets.commit.timeout.ms"]) == (1000, 500)


# Every broker key Kafka types PASSWORD (SslConfigs, BrokerSecurityConfigs, SaslConfigs,
# PasswordEncoderConfigs, DelegationTokenManagerConfigs, ZkConfigs).
KAFKA_PASSWORD_KEYS = ("ssl.keystore.password", "ssl.key.password", "ssl.keystore.key",
                       "ssl.keystore.certificate.chain", "ssl.truststore.password", "ssl.truststore.certificates",
                       "sasl.jaas.config", "password.encoder.secret", "password.encoder.old.secret",
                       "delegation.token.secret.key", "delegation.token.master.key",
                       "zookeeper.ssl.keystore.password", "zookeeper.ssl.truststore.password")


@pytest.mark.parametrize("key", KAFKA_PASSWORD_KEYS)
def test_every_kafka_password_key_is_sensitive_bare_and_for_a_listener(key):
    assert is_sensitive(key)
    if key.startswith("ssl."):
        assert is_sensitive(f"listener.name.sasl_ssl.{key}")


@pytest.mark.parametrize("mechanism", ["plain", "scram-sha-256", "SCRAM-SHA-512", "oauthbearer"])
def test_a_listeners_jaas_config_is_sensitive(mechanism):
    assert is_sensitive(f"listener.name.sasl_ssl.{mechanism}.sasl.jaas.config")


def test_keys_that_are_no_secret_are_not_sensitive_and_an_unknown_listener_key_is():
    for key in ("ssl.truststore.location", "ssl.client.auth", "listener.name.ssl.ssl.client.auth",
                "listener.name.sasl_ssl.plain.connections.max.reauth.ms", "log.dirs", "retention.ms"):
        assert not is_sensitive(key), key
    assert is_sensitive("listener.name.ssl.something.unknown")  # as Kafka: a type it cannot tell

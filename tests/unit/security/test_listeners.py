"""Kafka's listener keys: listeners, advertised.listeners, listener.security.protocol.map,
inter.broker.listener.name and listener.name.<name>.* overrides (oncelog.security.listeners
and BrokerConfig)."""

from __future__ import annotations

import pytest

from oncelog.config.broker import BrokerConfig, ConfigError
from oncelog.security.listeners import Address, SecurityProtocol


def test_named_listeners_get_their_protocol_from_the_map_and_their_advertised_address_by_name():
    config = BrokerConfig({
        "listeners": "PLAINTEXT://:9092,SECURE://0.0.0.0:9093,SSL://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SECURE:SASL_SSL,SSL:SSL",
        "advertised.listeners": "SECURE://broker1.example.com:19093",
        "inter.broker.listener.name": "secure",
    })
    by_name = {listener.name: listener for listener in config.listeners}
    assert [listener.name for listener in config.listeners] == ["PLAINTEXT", "SECURE", "SSL"]
    assert by_name["SECURE"].protocol is SecurityProtocol.SASL_SSL and by_name["SECURE"].protocol.tls
    assert by_name["SECURE"].advertised == Address("broker1.example.com", 19093)
    assert by_name["PLAINTEXT"].advertised is None and by_name["PLAINTEXT"].bind == Address("", 9092)
    assert config.inter_broker_listener.name == "SECURE"


def test_the_inter_broker_listener_defaults_to_the_one_named_after_security_inter_broker_protocol():
    config = BrokerConfig({"listeners": "SSL://:9093,PLAINTEXT://:9092"})
    assert config.inter_broker_listener.name == "PLAINTEXT"
    assert BrokerConfig({"listeners": "SSL://:9093"}).inter_broker_listener.name == "SSL"


@pytest.mark.parametrize(("settings", "message"), [
    ({"listeners": "PLAINTEXT://:9092,PLAINTEXT://:9093"}, "given twice"),
    ({"listeners": "PLAINTEXT://:9092,SSL://:9092"}, "its own port"),
    ({"listeners": "PLAINTEXT://:9092", "advertised.listeners": "SSL://h:1"}, "SSL is not one of listeners"),
    ({"listeners": "A://:9092", "listener.security.protocol.map": "A:TLS"}, "unknown security protocol 'TLS'"),
    ({"listeners": "PLAINTEXT://:9092", "inter.broker.listener.name": "B"}, "B is not one of listeners"),
    ({"listeners": "PLAINTEXT://:9092", "listener.name.ssl.ssl.keystore.type": "PEM"}, "there is no listener SSL"),
    ({"listeners": "SSL://:9092", "listener.name.ssl.log.retention.ms": "5"}, "not a setting a listener can"),
])
def test_listener_settings_that_cannot_work_are_errors_naming_the_key(settings, message):
    with pytest.raises(ConfigError, match=message):
        BrokerConfig(settings)


def test_a_listener_override_wins_for_its_listener_only():
    config = BrokerConfig({
        "listeners": "SSL://:9093,SASL_SSL://:9094",
        "ssl.client.auth": "requested",
        "listener.name.ssl.ssl.client.auth": "required",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": "PlainLoginModule required user_a=\"b\";",
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": "PLAIN",
    })
    assert config.for_listener("SSL", "ssl.client.auth") == "required"
    assert config.for_listener("SASL_SSL", "ssl.client.auth") == "requested"
    assert config.listener_strings("SSL", "ssl.")["ssl.client.auth"] == "required"
    assert config.jaas_config("SASL_SSL", "PLAIN") == "PlainLoginModule required user_a=\"b\";"
    assert config.jaas_config("SSL", "PLAIN") is None
    assert config.for_listener("SASL_SSL", "sasl.enabled.mechanisms") == "PLAIN"


def test_a_bad_secret_is_reported_without_its_value():
    with pytest.raises(ConfigError) as refused:
        BrokerConfig({"listeners": "SSL://:9093", "listener.name.ssl.connections.max.reauth.ms": "soon"})
    assert "soon" in str(refused.value)  # not a secret: shown
    config = BrokerConfig({"ssl.keystore.password": "hunter2"})
    assert config["ssl.keystore.password"] == "hunter2"

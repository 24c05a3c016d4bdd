"""The listener templates of `oncelog cluster start` and what it generates for TLS and
SASL listeners (oncelog.local.cluster_security)."""

from __future__ import annotations

import itertools
import re
import ssl

import pytest
from cryptography import x509

from oncelog.local.cluster_security import (
    client_listener,
    client_properties,
    expand_listeners,
    secure_settings,
)


def test_a_template_gets_the_node_id_and_a_port_of_its_own_for_each_placeholder():
    ports = itertools.count(9000)
    expanded = expand_listeners("A://host-{node}:{port},B://127.0.0.1:{port}", 2, lambda: next(ports))
    assert expanded == "A://host-2:9000,B://127.0.0.1:9001"


def test_a_template_with_another_placeholder_is_refused():
    with pytest.raises(ValueError, match=re.escape("only {node} and {port}")):
        expand_listeners("A://127.0.0.1:{prot}", 1, lambda: 1)


def test_the_client_listener_is_the_first_that_is_not_the_inter_broker_one():
    config = {"listeners": "INTERNAL://127.0.0.1:1,CLIENT://127.0.0.1:2",
              "listener.security.protocol.map": "INTERNAL:SSL,CLIENT:SASL_SSL",
              "inter.broker.listener.name": "INTERNAL"}
    assert client_listener(config).name == "CLIENT"
    assert client_listener({"listeners": "PLAINTEXT://127.0.0.1:1"}).name == "PLAINTEXT"


def test_plaintext_listeners_get_nothing_and_given_keystores_and_mechanisms_are_kept(tmp_path):
    assert secure_settings(tmp_path, [{"listeners": "PLAINTEXT://127.0.0.1:1"}]) == {}
    given = {"listeners": "SASL_SSL://127.0.0.1:1", "ssl.keystore.location": "/mine.pem",
             "sasl.enabled.mechanisms": "SCRAM-SHA-512"}
    assert secure_settings(tmp_path, [given]) == {}
    assert not (tmp_path / "tls").exists()


def test_a_sasl_ssl_listener_gets_a_ca_a_certificate_for_its_hosts_and_plain_users(tmp_path):
    config = {"listeners": "SASL_SSL://broker.test:1", "advertised.listeners": "SASL_SSL://10.1.2.3:1",
              "super.users": "User:ops"}
    added = secure_settings(tmp_path, [config])
    certificate = x509.load_pem_x509_certificates((tmp_path / "tls" / "broker-keystore.pem").read_bytes())[0]
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {"broker.test", "localhost"} <= set(names.get_values_for_type(x509.DNSName))
    assert {str(a) for a in names.get_values_for_type(x509.IPAddress)} == {"10.1.2.3", "127.0.0.1"}
    context = ssl.create_default_context(cafile=added["ssl.truststore.location"])  # the CA loads as a trust root
    context.load_cert_chain(added["ssl.keystore.location"])  # key and certificate match
    assert (tmp_path / "tls" / "broker-keystore.pem").stat().st_mode & 0o077 == 0
    assert added["super.users"] == "User:ops;User:broker;User:admin"
    jaas = added["listener.name.sasl_ssl.plain.sasl.jaas.config"]
    assert 'username="broker"' in jaas and "user_admin=" in jaas
    client = client_properties({**config, **added})
    assert client["security.protocol"] == "SASL_SSL" and client["sasl.username"] == "admin"
    assert f'user_admin="{client["sasl.password"]}"' in jaas
    assert client["ssl.ca.location"] == added["ssl.truststore.location"]
    other = secure_settings(tmp_path / "other", [config])
    assert other["listener.name.sasl_ssl.plain.sasl.jaas.config"] != jaas  # passwords are drawn anew

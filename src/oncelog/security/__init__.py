"""Kafka's security model: listeners, TLS, SASL, ACLs."""

"""Test and fault-injection helpers that drive real brokers: processes, proxies."""

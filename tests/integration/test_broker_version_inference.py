"""kafka-python infers the broker's Kafka version from ApiVersions (the newest marker API
version it finds). oncelog advertises what Kafka 4.3 does for the markers it checks
(DescribeLogDirs v5, ListOffsets v11), so kafka-python treats it as Kafka 4.3 and uses
that release's protocol versions, as its own integration suite expects."""

from __future__ import annotations

from kafka import KafkaConsumer
from kafka.protocol.broker_version_data import BrokerVersionData


def test_kafka_python_infers_the_newest_kafka_version_it_knows(shared_broker):
    newest_known = BrokerVersionData((4, 3)).broker_version
    consumer = KafkaConsumer(bootstrap_servers=shared_broker.bootstrap_servers)
    try:
        assert consumer.config["api_version"] == newest_known
    finally:
        consumer.close()

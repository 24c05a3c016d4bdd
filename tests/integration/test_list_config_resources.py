"""ListConfigResources (KIP-1142) lists what DescribeConfigs can describe: the topics and
this broker; kafka-python's own admin tests found it missing."""

from __future__ import annotations

import uuid

from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from kio.schema.errors import ErrorCode
from kio.schema.list_config_resources.v0 import request as list_v0
from kio.schema.list_config_resources.v1 import request as list_v1

from oncelog.protocol.client import WireClient

TOPIC, BROKER, CLIENT_METRICS = 2, 4, 16


def test_config_resources_are_the_topics_and_this_broker(shared_broker):
    bootstrap = shared_broker.bootstrap_servers
    topic = f"config-resources-{uuid.uuid4().hex[:8]}"
    with KafkaAdminClient(bootstrap_servers=bootstrap) as admin:
        admin.create_topics([NewTopic(topic, 1, 1)])
        listed = admin.list_config_resources()
    assert listed["broker"] == [str(shared_broker.broker.node_id)]
    assert topic in listed["topic"]
    with WireClient.connect(bootstrap) as client:
        only_brokers = client.request(list_v1.ListConfigResourcesRequest(resource_types=(BROKER,)))
        unknown_type = client.request(list_v1.ListConfigResourcesRequest(resource_types=(TOPIC, 3)))
        client_metrics = client.request(list_v0.ListConfigResourcesRequest())
    assert [(r.resource_type, r.resource_name) for r in only_brokers.config_resources] == [
        (BROKER, str(shared_broker.broker.node_id))]
    assert (unknown_type.error_code, unknown_type.config_resources) == (ErrorCode.unsupported_version, ())
    assert (client_metrics.error_code, client_metrics.config_resources) == (ErrorCode.none, ())

"""Client quotas in a cluster live in the metadata quorum (oncelog.cluster.client_quotas):
a change answered by one broker is described and enforced by every broker, changes sent
through three brokers at once all land, and they survive a restart of every node."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable, Iterator, Mapping

import pytest
from confluent_kafka import Producer
from kio.schema.alter_client_quotas.v1 import request as alter_v1
from kio.schema.describe_client_quotas.v1 import request as describe_v1
from kio.static.primitive import f64

from oncelog.cluster.image import KeyKind, Keys, MetadataImage
from oncelog.cluster.kv import Event, EventType, KeyValue
from oncelog.local.cluster import ClusterProcess
from oncelog.protocol.client import WireClient
from tests.support.kafka import create_topic

NODES = (1, 2, 3)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[ClusterProcess]:
    with ClusterProcess(tmp_path_factory.mktemp("quota-cluster"), 3) as running:
        yield running
    for node in running.nodes.values():  # free the etcd WALs
        shutil.rmtree(node.data_dir / "__cluster_metadata-etcd", ignore_errors=True)


def alter(cluster: ClusterProcess, node_id: int, client_id: str, quotas: Mapping[str, float | None]) -> None:
    request = alter_v1.AlterClientQuotasRequest(entries=(alter_v1.EntryData(
        entity=(alter_v1.EntityData(entity_type="client-id", entity_name=client_id),),
        ops=tuple(alter_v1.OpData(key=key, value=f64(float(value or 0.0)), remove=value is None)
                  for key, value in quotas.items())),), validate_only=False)
    with WireClient.connect(cluster.nodes[node_id].bootstrap_servers) as client:
        [entry] = client.request(request).entries
    assert (entry.error_code, entry.error_message) == (0, None)


def described(cluster: ClusterProcess, node_id: int) -> dict[str | None, dict[str, float]]:
    """Every client-id entity's quotas, as broker `node_id` describes them."""
    request = describe_v1.DescribeClientQuotasRequest(components=(), strict=False)
    with WireClient.connect(cluster.nodes[node_id].bootstrap_servers) as client:
        response = client.request(request)
    assert response.error_code == 0
    return {entry.entity[0].entity_name: {value.key: value.value for value in entry.values}
            for entry in response.entries}


def eventually(check: Callable[[], object], expected: object, timeout: float = 5.0) -> None:
    """Other brokers apply a change from their metadata watch, a few milliseconds later."""
    deadline = time.monotonic() + timeout
    while (seen := check()) != expected:
        assert time.monotonic() < deadline, f"still {seen!r}, expected {expected!r}"
        time.sleep(0.05)


def test_quotas_set_through_one_broker_are_enforced_by_all_and_survive_a_restart_of_every_node(cluster):
    # Three brokers changing the one key at once: each change lands.
    writers = [threading.Thread(target=alter, args=(cluster, node_id, f"c{node_id}", {"producer_byte_rate": 1e6}))
               for node_id in NODES]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    alter(cluster, 1, "limited", {"producer_byte_rate": 10_000.0})
    expected = {"c1": {"producer_byte_rate": 1e6}, "c2": {"producer_byte_rate": 1e6},
                "c3": {"producer_byte_rate": 1e6}, "limited": {"producer_byte_rate": 10_000.0}}
    for node_id in NODES:
        eventually(lambda node_id=node_id: described(cluster, node_id), expected)

    create_topic(cluster.bootstrap_servers, "cluster-quotas", partitions=3, replication_factor=3)
    cluster.wait_for_topic("cluster-quotas")
    leaders = {cluster.leader_of("cluster-quotas", partition): partition for partition in range(3)}
    throttled_by: set[int] = set()

    def throttled(event) -> None:
        if event.throttle_time > 0:
            throttled_by.add(event.broker_id)

    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "client.id": "limited",
                         "throttle_cb": throttled})
    for partition in leaders.values():  # 200 KB to each leader: each one holds "limited" to 10 KB/s
        producer.produce("cluster-quotas", b"q" * 200_000, partition=partition)
    assert producer.flush(30) == 0
    producer.poll(0.1)
    assert throttled_by == set(leaders)

    alter(cluster, 2, "c3", {"producer_byte_rate": None})  # the last key: the entity is gone
    del expected["c3"]
    cluster.kill_all()  # kill -9 of every broker and quorum member
    cluster.start()
    for node_id in NODES:
        assert described(cluster, node_id) == expected


def test_client_quotas_are_a_key_of_the_image_and_their_changes_are_flagged():
    keys = Keys("c1")
    assert keys.client_quotas == "/oncelog/c1/client-quotas"
    assert keys.parse(keys.client_quotas) == (KeyKind.CLIENT_QUOTAS,)
    document = b'{"v":1,"entities":[{"entity":{"client-id":null},"quotas":{"producer_byte_rate":1.0}}]}'
    image = MetadataImage.from_kvs(5, [])
    image, delta = image.apply(6, [Event(EventType.PUT, KeyValue(keys.client_quotas, document, 6, 6))])
    assert delta.client_quotas_changed and not delta.acls_changed and not delta.is_empty
    assert [dict(entry) for entry in image.client_quotas["entities"]] == [
        {"entity": {"client-id": None}, "quotas": {"producer_byte_rate": 1.0}}]
    assert image.fenced_view(1).client_quotas is image.client_quotas  # an isolated broker keeps enforcing them
    _, delta = image.apply(7, [Event(EventType.PUT, KeyValue(keys.controller, b'{"v":1,"node_id":1}', 7, 7))])
    assert not delta.client_quotas_changed
    image, delta = image.apply(8, [Event(EventType.DELETE, KeyValue(keys.client_quotas, b"", 6, 8))])
    assert delta.client_quotas_changed and image.client_quotas == {}

"""Three broker processes forming one cluster (M1, M2): metadata, topic creation with
replication factor 3, leaders spread over the brokers, acks=all through the ISR, all
seen by real clients.

One cluster for the module: every node runs a broker and an etcd member. Tests use
their own topics.
"""

from __future__ import annotations

import datetime
import json
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.types import ProducerId
from kio.static.primitive import i16, i32Timedelta

from oncelog.local.cluster import ClusterProcess
from oncelog.protocol import record_batch
from oncelog.protocol.client import WireClient
from oncelog.protocol.messages import ErrorCode
from tests.support.browser import chromium


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    base = tmp_path_factory.mktemp("cluster")
    with ClusterProcess(base, 3, {"http.listener": "127.0.0.1:0"}) as running:
        yield running
    for node in running.nodes.values():  # free the etcd WALs, keep the logs
        shutil.rmtree(node.data_dir / "__cluster_metadata-etcd", ignore_errors=True)


def create(cluster: ClusterProcess, name: str, partitions: int, replication_factor: int, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    future = admin.create_topics([NewTopic(name, partitions, replication_factor, config=configs)])[name]
    future.result(timeout=30)
    cluster.wait_for_topic(name)


def consume_all(cluster: ClusterProcess, topic: str, partition: int, expected: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "unused",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(topic, partition, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(values) < expected and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            value = message.value()
            assert value is not None  # the test writes no tombstones
            values.append(value)
    consumer.close()
    return values


def test_three_brokers_each_lead_a_share_of_the_partitions(cluster):
    create(cluster, "spread", 6, 3)
    metadata = cluster.metadata(["spread"])
    assert sorted(b.node_id for b in metadata.brokers) == [1, 2, 3]
    assert metadata.controller_id in (1, 2, 3)
    partitions = metadata.topics[0].partitions
    assert all(sorted(p.replica_nodes) == [1, 2, 3] for p in partitions)
    leaders = [p.leader_id for p in partitions]
    assert sorted(set(leaders)) == [1, 2, 3] and all(leaders.count(n) == 2 for n in (1, 2, 3))

    # kcat (librdkafka) sees the same cluster from any one broker.
    kcat = shutil.which("kcat")
    if kcat is None:
        pytest.fail("kcat is not installed: run `make setup`")
    listing = subprocess.run([kcat, "-b", cluster.nodes[2].bootstrap_servers, "-L", "-t", "spread"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    assert " 3 brokers:" in listing and "6 partitions:" in listing
    replicas = re.findall(r"partition \d+, leader (\d), replicas: ([\d,]+), isrs: ([\d,]+)", listing)
    assert len(replicas) == 6
    assert all(sorted(r.split(",")) == ["1", "2", "3"] and sorted(i.split(",")) == ["1", "2", "3"]
               for _leader, r, i in replicas)


def test_topic_created_on_one_broker_appears_on_all_and_is_written_through_each_leader(cluster):
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka.admin import NewTopic as PyNewTopic

    admin = KafkaAdminClient(bootstrap_servers=cluster.nodes[3].bootstrap_servers)
    admin.create_topics([PyNewTopic("everywhere", 3, 3)])
    admin.close()
    cluster.wait_for_topic("everywhere")
    for node in cluster.nodes.values():
        with WireClient.connect(node.bootstrap_servers) as client:
            from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

            response = client.request(MetadataRequest(
                topics=(MetadataRequestTopic(name="everywhere", topic_id=None),),
                allow_auto_topic_creation=False, include_topic_authorized_operations=False))
            assert response.topics[0].error_code == ErrorCode.none
            assert len(response.topics[0].partitions) == 3
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all")
    for partition in range(3):
        for i in range(20):
            producer.send("everywhere", f"{partition}-{i}".encode(), partition=partition)
    producer.flush(30)
    producer.close()
    for partition in range(3):
        values = consume_all(cluster, "everywhere", partition, 20)
        assert values == [f"{partition}-{i}".encode() for i in range(20)]


def test_produce_to_a_non_leader_is_not_leader_or_follower(cluster):
    create(cluster, "led-elsewhere", 1, 2)
    partition = cluster.partition("led-elsewhere", 0)
    outsider = next(n for n in (1, 2, 3) if n not in partition.replica_nodes)
    follower = next(n for n in partition.replica_nodes if n != partition.leader_id)
    batch = record_batch.build_batch([record_batch.Record(b"k", b"v")], timestamp_ms=int(time.time() * 1000))
    for node_id in (outsider, follower):
        with WireClient.connect(cluster.nodes[node_id].bootstrap_servers) as client:
            response = client.request(ProduceRequest(
                transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=5),
                topic_data=(TopicProduceData(name="led-elsewhere", partition_data=(
                    PartitionProduceData(index=0, records=batch),)),),
            ))
        assert response.responses[0].partition_responses[0].error_code == ErrorCode.not_leader_or_follower


def test_replication_factor_above_live_brokers_is_refused_with_kafkas_message(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    future = admin.create_topics([NewTopic("too-many-copies", 1, 4)])["too-many-copies"]
    with pytest.raises(Exception) as raised:
        future.result(timeout=30)
    error = raised.value.args[0]
    assert error.code() == ErrorCode.invalid_replication_factor
    assert "The target replication factor of 4 cannot be reached because only 3 broker(s) are registered" in error.str()


def test_acks_all_is_acknowledged_only_once_every_isr_replica_has_the_batch(cluster):
    create(cluster, "replicated", 1, 3, **{"min.insync.replicas": "3"})
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "enable.idempotence": True})
    acknowledged: list[int] = []
    for i in range(200):
        producer.produce("replicated", str(i).encode(), partition=0,
                         on_delivery=lambda error, message: error is None and acknowledged.append(message.offset()))
    assert producer.flush(30) == 0 and len(acknowledged) == 200
    # Every replica's log holds the acknowledged batches: read each one's files.
    for node in cluster.nodes.values():
        directory = node.data_dir / "replicated-0"
        size = sum(f.stat().st_size for f in directory.glob("*.log"))
        assert size > 200 * 10, f"replica on {node.data_dir.name} lacks acknowledged data ({size} bytes)"


def test_cluster_start_prints_bootstrap_and_stops_on_sigterm(tmp_path):
    process = subprocess.Popen(
        [sys.executable, "-m", "oncelog", "cluster", "start", "--brokers", "3", "--data-dir", str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        lines = [process.stdout.readline() for _ in range(2)]
        assert lines[1].startswith("bootstrap servers: "), lines
        bootstrap = lines[1].split(": ", 1)[1].strip()
        admin = AdminClient({"bootstrap.servers": bootstrap})
        name = f"t-{uuid.uuid4().hex[:6]}"
        admin.create_topics([NewTopic(name, 1, 3)])[name].result(timeout=30)
        assert len(admin.list_topics(timeout=10).brokers) == 3
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
    finally:
        if process.poll() is None:
            process.kill()
        for node in tmp_path.glob("node-*"):
            shutil.rmtree(node / "__cluster_metadata-etcd", ignore_errors=True)


def test_a_one_node_cluster_runs_transactions_and_groups(tmp_path):
    """`oncelog cluster start --brokers 1` sizes the internal topics for one node (as
    Kafka's single-node sample configs do), so coordinators work there too."""
    process = subprocess.Popen(
        [sys.executable, "-m", "oncelog", "cluster", "start", "--brokers", "1", "--data-dir", str(tmp_path),
         "--override", "offsets.topic.num.partitions=2", "--override", "transaction.state.log.num.partitions=2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        bootstrap = [process.stdout.readline() for _ in range(2)][1].split(": ", 1)[1].strip()
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("solo", 1, 1)])["solo"].result(30)
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "solo-txn"})
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce("solo", b"committed", partition=0)
        producer.commit_transaction(30)
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "solo-group",
                             "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                             "enable.auto.commit": False})
        consumer.subscribe(["solo"])
        message = None
        deadline = time.monotonic() + 30
        while message is None and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error():
                message = None
        assert message is not None and message.value() == b"committed"
        consumer.commit(message, asynchronous=False)
        assert consumer.committed([TopicPartition("solo", 0)], timeout=10)[0].offset == 1
        consumer.close()
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
    finally:
        if process.poll() is None:
            process.kill()
        for node in tmp_path.glob("node-*"):
            shutil.rmtree(node / "__cluster_metadata-etcd", ignore_errors=True)


def test_admin_apis_describe_the_cluster_and_answer_only_on_the_leader(cluster):
    """DescribeCluster lists every broker and the active controller; DescribeTopicPartitions
    shows each partition's leader, epoch, replicas and ISR; DescribeProducers and
    DeleteRecords are answered by the leader alone, as Kafka's are."""
    from kio.schema.delete_records.v2.request import DeleteRecordsPartition, DeleteRecordsRequest, DeleteRecordsTopic
    from kio.schema.describe_cluster.v1.request import DescribeClusterRequest
    from kio.schema.describe_producers.v0.request import DescribeProducersRequest
    from kio.schema.describe_producers.v0.request import TopicRequest as ProducersTopic
    from kio.schema.describe_topic_partitions.v0.request import DescribeTopicPartitionsRequest, TopicRequest

    create(cluster, "described", 1, 3)
    cluster.wait_for_isr("described", 0, 3)
    leader = cluster.leader_of("described", 0)
    follower = next(n for n in (1, 2, 3) if n != leader)
    with WireClient.connect(cluster.nodes[follower].bootstrap_servers) as client:
        described = client.request(DescribeClusterRequest(include_cluster_authorized_operations=False,
                                                          endpoint_type=1))
        partitions = client.request(DescribeTopicPartitionsRequest(
            topics=(TopicRequest(name="described"),), response_partition_limit=10, cursor=None))
        producers = client.request(DescribeProducersRequest(
            topics=(ProducersTopic(name="described", partition_indexes=(0,)),)))
        deleted = client.request(DeleteRecordsRequest(
            topics=(DeleteRecordsTopic(name="described", partitions=(DeleteRecordsPartition(partition_index=0,
                                                                                            offset=0),)),),
            timeout=datetime.timedelta(seconds=5)))
    assert sorted(b.broker_id for b in described.brokers) == [1, 2, 3]
    assert described.controller_id in (1, 2, 3)
    entry = partitions.topics[0].partitions[0]
    assert (entry.leader_id, sorted(entry.replica_nodes), sorted(entry.isr_nodes)) == (leader, [1, 2, 3], [1, 2, 3])
    assert entry.leader_epoch == cluster.partition("described", 0).leader_epoch
    assert producers.topics[0].partitions[0].error_code == ErrorCode.not_leader_or_follower
    assert deleted.topics[0].partitions[0].error_code == ErrorCode.not_leader_or_follower
    with WireClient.connect(cluster.nodes[leader].bootstrap_servers) as client:
        producers = client.request(DescribeProducersRequest(
            topics=(ProducersTopic(name="described", partition_indexes=(0,)),)))
    assert producers.topics[0].partitions[0].error_code == ErrorCode.none


def test_producer_ids_are_unique_across_brokers_and_restarts(cluster):
    """Every broker hands out ids from blocks reserved in the metadata quorum: concurrent
    InitProducerId on all three brokers, and again after a restart, never repeat an id."""
    import concurrent.futures

    from kio.schema.init_producer_id.v4.request import InitProducerIdRequest

    def ids_from(node_id: int, count: int) -> list[int]:
        with WireClient.connect(cluster.nodes[node_id].bootstrap_servers) as client:
            answers = [client.request(InitProducerIdRequest(
                transactional_id=None, transaction_timeout=i32Timedelta.parse(datetime.timedelta(0)),
                producer_id=ProducerId(-1), producer_epoch=i16(-1)))
                for _ in range(count)]
        assert all(a.error_code == ErrorCode.none for a in answers)
        return [a.producer_id for a in answers]

    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        before = [i for ids in pool.map(ids_from, (1, 2, 3), (200, 200, 200)) for i in ids]
    cluster.stop(2)
    cluster.start_node(2)
    after = ids_from(2, 50)
    assert len(set(before + after)) == len(before) + len(after)


def test_a_topic_config_altered_through_one_broker_reaches_every_brokers_logs(cluster):
    from confluent_kafka.admin import (
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ConfigSource,
        ResourceType,
    )

    create(cluster, "altered", 1, 3, **{"retention.ms": "60000"})
    resource = ConfigResource(ResourceType.TOPIC, "altered", incremental_configs=[
        ConfigEntry("retention.ms", "120000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND)])
    admin = AdminClient({"bootstrap.servers": cluster.nodes[2].bootstrap_servers})
    admin.incremental_alter_configs([resource])[resource].result(30)
    wanted = {"retention.ms": "120000", "cleanup.policy": "delete,compact"}
    for node_id, node in cluster.nodes.items():  # each broker describes the topic from its own logs
        node_admin = AdminClient({"bootstrap.servers": node.bootstrap_servers})
        deadline = time.monotonic() + 15
        while True:
            described = ConfigResource(ResourceType.TOPIC, "altered")
            configs = node_admin.describe_configs([described])[described].result(10)
            seen = {name: entry.value for name, entry in configs.items()
                    if entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}
            if seen == wanted or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert seen == wanted, node_id


def test_a_dynamic_broker_default_reaches_every_broker_and_a_brokers_own_stays_its_own(cluster):
    from kio.schema.describe_configs.v4 import request as describe_v4
    from kio.schema.incremental_alter_configs.v1 import request as alter_v1
    from kio.static.primitive import i8

    def alter(node_id: int, name: str, key: str, value: str | None) -> None:
        request = alter_v1.IncrementalAlterConfigsRequest(resources=(alter_v1.AlterConfigsResource(
            resource_type=i8(4), resource_name=name, configs=(alter_v1.AlterableConfig(
                name=key, config_operation=i8(0 if value is not None else 1), value=value),)),), validate_only=False)
        with WireClient.connect(cluster.nodes[node_id].bootstrap_servers) as client:
            [result] = client.request(request).responses
        assert result.error_code == ErrorCode.none, result.error_message

    def segment_bytes(node_id: int) -> tuple[str, int]:
        request = describe_v4.DescribeConfigsRequest(resources=(describe_v4.DescribeConfigsResource(
            resource_type=i8(2), resource_name="dynamic-defaults", configuration_keys=("segment.bytes",)),),
            include_synonyms=False, include_documentation=False)
        with WireClient.connect(cluster.nodes[node_id].bootstrap_servers) as client:
            [entry] = client.request(request).results[0].configs
        return entry.value, entry.config_source

    def eventually(node_id: int, wanted: tuple[str, int]) -> tuple[str, int]:
        deadline = time.monotonic() + 15
        while (seen := segment_bytes(node_id)) != wanted and time.monotonic() < deadline:
            time.sleep(0.2)
        return seen

    create(cluster, "dynamic-defaults", 1, 3)
    alter(1, "", "log.segment.bytes", "2097152")  # the cluster default, through broker 1
    alter(3, "3", "log.segment.bytes", "4194304")  # broker 3's own
    try:
        assert eventually(1, ("2097152", 3)) == ("2097152", 3)  # DYNAMIC_DEFAULT_BROKER_CONFIG
        assert eventually(2, ("2097152", 3)) == ("2097152", 3)
        assert eventually(3, ("4194304", 2)) == ("4194304", 2)  # DYNAMIC_BROKER_CONFIG
    finally:  # other tests of the module share the cluster
        alter(1, "", "log.segment.bytes", None)
        alter(3, "3", "log.segment.bytes", None)
    assert eventually(2, ("1073741824", 5)) == ("1073741824", 5)


def test_a_group_config_set_through_one_broker_is_described_by_another(cluster):
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    def set_session(node_id: int, value: str | None) -> None:
        operation = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
        resource = ConfigResource(ResourceType.GROUP, "cluster-group-configs", incremental_configs=[
            ConfigEntry("consumer.session.timeout.ms", value, incremental_operation=operation)])
        admin = AdminClient({"bootstrap.servers": cluster.nodes[node_id].bootstrap_servers})
        admin.incremental_alter_configs([resource])[resource].result(30)

    def session_on(node_id: int, wanted: tuple[str, int]) -> tuple[str, int]:
        admin = AdminClient({"bootstrap.servers": cluster.nodes[node_id].bootstrap_servers})
        resource = ConfigResource(ResourceType.GROUP, "cluster-group-configs")
        deadline = time.monotonic() + 15
        while True:
            entry = admin.describe_configs([resource])[resource].result(10)["consumer.session.timeout.ms"]
            if (entry.value, entry.source) == wanted or time.monotonic() > deadline:
                return entry.value, entry.source
            time.sleep(0.2)

    set_session(1, "50000")
    assert session_on(2, ("50000", 8)) == ("50000", 8)  # DYNAMIC_GROUP_CONFIG, from the metadata store
    set_session(3, None)
    assert session_on(2, ("45000", 5)) == ("45000", 5)


def console_url(cluster: ClusterProcess, node: int) -> str:
    found = re.findall(r"the console at (http://\S+/)", cluster.nodes[node].log_path.read_text())
    assert found, f"broker {node} logged no console address"
    return found[-1]  # the node's latest start (port 0: a new port each time)


def test_the_console_of_any_broker_shows_every_broker_and_the_isr(cluster):
    create(cluster, "watched-isr", 3, 3)
    for node in cluster.nodes:
        url = console_url(cluster, node) + "api/console?partitions_filter=watched-isr-"
        with urllib.request.urlopen(url, timeout=10) as response:
            view = json.load(response)
        assert view["mode"] == "cluster" and view["node_id"] == node
        brokers = {b["node_id"]: b for b in view["brokers"]}
        assert set(brokers) == {1, 2, 3}
        assert sum(b["controller"] for b in brokers.values()) == 1
        assert sum(b["leaders"] for b in brokers.values()) >= 3
        local = {p["partition"]: p for p in view["partitions"] if p["topic"] == "watched-isr"}
        assert set(local) == {0, 1, 2}  # RF 3: every broker holds every partition
        assert all(sorted(p["isr"]) == [1, 2, 3] and p["leader"] in (1, 2, 3) for p in local.values())
    with chromium() as browser:
        page = browser.new_page()
        page.goto(console_url(cluster, 2))
        page.wait_for_selector("body[data-loaded]", state="attached", timeout=15_000)
        assert page.locator("#cluster").is_visible()
        assert page.locator("#brokers tr[data-broker]").count() == 3
        assert "controller" in page.locator("#brokers").inner_text()
        row = page.locator('#partitions tr[data-partition="watched-isr-0"]').inner_text()
        assert re.search(r"\d / \[[123],[123],[123]\]", row), row  # leader / ISR


def test_the_console_of_one_broker_shows_each_brokers_own_configs(cluster):
    """Static configs are each broker's own: broker 1's console asks broker 2 for its
    configs (DescribeConfigs over the inter-broker listener), as kafka-configs.sh does."""
    def configs(node: int, query: str = "") -> tuple[int, dict]:
        try:
            url = console_url(cluster, node) + "api/broker/configs" + query
            with urllib.request.urlopen(url, timeout=30) as answer:
                return answer.status, json.load(answer)
        except urllib.error.HTTPError as refused:
            return refused.code, json.load(refused)

    status, own = configs(1)
    assert status == 200 and own["node_id"] == 1
    status, other = configs(1, "?broker=2")
    assert status == 200 and other["node_id"] == 2
    values = {entry["name"]: entry for entry in other["configs"]}
    assert values["node.id"]["value"] == "2"
    assert values["log.dirs"]["value"] != {entry["name"]: entry for entry in own["configs"]}["log.dirs"]["value"]
    assert values["log.dirs"]["source"] == "STATIC_BROKER_CONFIG"
    assert configs(1, "?broker=9")[0] == 404  # not registered
    assert configs(1, "?broker=two")[0] == 400 and configs(1, "?broker=2&broker=3")[0] == 400
    with chromium() as browser:
        page = browser.new_page()
        page.goto(console_url(cluster, 1))
        page.wait_for_selector("body[data-loaded]", state="attached", timeout=15_000)
        page.click("#broker-configs summary")
        page.wait_for_selector("#broker-configs[data-node='1']", state="attached", timeout=15_000)
        page.select_option("#broker-configs-node", "3")
        page.wait_for_selector("#broker-configs[data-node='3']", state="attached", timeout=15_000)
        page.fill("#broker-configs-filter", "node.id")
        assert page.locator('#broker-configs-table tr[data-config="node.id"] td').nth(1).inner_text() == "3"

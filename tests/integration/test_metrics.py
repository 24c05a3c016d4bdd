"""The broker's Prometheus endpoint (`http.listener`): scraped over HTTP as Prometheus
does and parsed with prometheus_client's own parser. The log-dir families while a dir is
offline are in tests/cluster/test_log_dir_failure.py (a full disk, as root)."""

from __future__ import annotations

import re
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from oncelog import EmbeddedBroker
from oncelog.config.broker import BrokerConfig, ConfigError


def scrape(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """{family: [(labels, value)]} of the text at `url`."""
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    return {family.name: [(sample.labels, sample.value) for sample in family.samples]
            for family in text_string_to_metric_families(text)}


def test_metrics_are_served_at_the_http_listener_with_every_log_dir_online(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b"]
    config = {"http.listener": "127.0.0.1:0", "log.dirs": ",".join(str(d) for d in dirs)}
    with EmbeddedBroker(tmp_path / "unused", config) as running:
        host, port = running.broker.http.address
        families = scrape(f"http://{host}:{port}/metrics")
    assert families["kafka_log_offline_log_directory_count"] == [({}, 0.0)]
    per_dir = {labels["log_directory"]: value for labels, value in families["kafka_log_log_directory_offline"]}
    assert per_dir == {str(d): 0.0 for d in dirs}


def test_without_http_listener_there_is_no_endpoint(tmp_path):
    with EmbeddedBroker(tmp_path / "b") as running:
        assert running.broker.http is None


@pytest.mark.parametrize("value", ["9100", "host:port", "127.0.0.1:70000"])
def test_an_http_listener_that_is_not_host_port_is_a_config_error(value):
    with pytest.raises(ConfigError, match=re.escape("http.listener: expected HOST:PORT")):
        BrokerConfig({"http.listener": value})


def test_partition_and_transaction_metrics_show_the_lso_lag_of_an_open_transaction(tmp_path):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    with EmbeddedBroker(tmp_path / "b", {"http.listener": "127.0.0.1:0"}) as running:
        host, port = running.broker.http.address
        admin = AdminClient({"bootstrap.servers": running.bootstrap_servers})
        admin.create_topics([NewTopic("watched", 1, 1)])["watched"].result(10)
        plain = Producer({"bootstrap.servers": running.bootstrap_servers})
        for i in range(3):
            plain.produce("watched", str(i).encode())
        plain.flush(10)
        txn = Producer({"bootstrap.servers": running.bootstrap_servers, "transactional.id": "metrics-open"})
        txn.init_transactions(10)
        txn.begin_transaction()
        for i in range(2):
            txn.produce("watched", f"open-{i}".encode())
        txn.flush(10)  # written, not committed: read_committed waits at offset 3
        families = scrape(f"http://{host}:{port}/metrics")

        def value(family: str) -> float:
            [found] = [v for labels, v in families[family] if labels == {"topic": "watched", "partition": "0"}]
            return found

        assert (value("kafka_log_log_start_offset"), value("kafka_log_log_end_offset")) == (0, 5)
        assert (value("oncelog_log_high_watermark"), value("oncelog_log_last_stable_offset")) == (5, 3)
        assert value("kafka_cluster_partition_last_stable_offset_lag") == 2
        assert value("kafka_log_num_log_segments") == 1 and value("kafka_log_size_bytes") > 0
        assert ({"state": "Ongoing"}, 1.0) in families["oncelog_transactions"]
        txn.commit_transaction(10)
        families = scrape(f"http://{host}:{port}/metrics")
        assert value("kafka_cluster_partition_last_stable_offset_lag") == 0
        assert ({"state": "CompleteCommit"}, 1.0) in families["oncelog_transactions"]
        assert families["oncelog_transactions_completed"] == [({"result": "commit"}, 1.0), ({"result": "abort"}, 0.0)]
        assert ({}, 1.0) in families["oncelog_transaction_markers_seconds"]  # the _count sample
        # a new instance fences the old one, whose open transaction is aborted
        txn.begin_transaction()
        txn.produce("watched", b"left-open")
        txn.flush(10)
        successor = Producer({"bootstrap.servers": running.bootstrap_servers, "transactional.id": "metrics-open"})
        successor.init_transactions(10)
        families = scrape(f"http://{host}:{port}/metrics")
        assert families["oncelog_producers_fenced"] == [({}, 1.0)]
        assert ({"result": "abort"}, 1.0) in families["oncelog_transactions_completed"]
        assert families["oncelog_transactions_timed_out"] == [({}, 0.0)]


def test_requests_are_counted_and_timed_per_api(tmp_path):
    from confluent_kafka.admin import AdminClient

    with EmbeddedBroker(tmp_path / "b", {"http.listener": "127.0.0.1:0"}) as running:
        host, port = running.broker.http.address
        admin = AdminClient({"bootstrap.servers": running.bootstrap_servers})
        for _ in range(3):
            admin.list_topics(timeout=10)
        families = scrape(f"http://{host}:{port}/metrics")
    requests = {labels["request"]: value for labels, value in families["kafka_network_request_requests"]}
    assert requests["Metadata"] >= 3 and requests["ApiVersions"] >= 1
    timed = {(labels["request"], labels.get("le")): value
             for labels, value in families["oncelog_network_request_handle_seconds"]}
    assert timed[("Metadata", "+Inf")] == requests["Metadata"]
    assert timed[("Metadata", "30.0")] == requests["Metadata"]  # none slower than the last bound
    assert all(value == 0 for _labels, value in families["oncelog_network_requests_in_flight"]
               if _labels["request"] == "Metadata")


def test_per_topic_traffic_counts_records_in_and_out_refused_batches_error_codes_and_flushes(tmp_path):
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    with EmbeddedBroker(tmp_path / "b", {"http.listener": "127.0.0.1:0"}) as running:
        host, port = running.broker.http.address
        admin = AdminClient({"bootstrap.servers": running.bootstrap_servers})
        configs = {"max.message.bytes": "2000", "flush.messages": "1"}
        admin.create_topics([NewTopic("traffic", 1, 1, config=configs)])["traffic"].result(10)
        producer = Producer({"bootstrap.servers": running.bootstrap_servers, "linger.ms": 0})
        for i in range(5):
            producer.produce("traffic", b"x" * 100, key=str(i).encode())
        producer.flush(10)
        errors = []
        producer.produce("traffic", b"y" * 5000, on_delivery=lambda error, _message: errors.append(error))
        producer.flush(10)
        assert errors and errors[0] is not None  # MESSAGE_TOO_LARGE
        consumer = Consumer({"bootstrap.servers": running.bootstrap_servers, "group.id": "traffic"})
        consumer.assign([TopicPartition("traffic", 0, 0)])
        read = 0
        while read < 5:
            message = consumer.poll(5)
            if message is None:
                raise KafkaException("no records within 5 s")
            read += message.error() is None
        consumer.close()
        families = scrape(f"http://{host}:{port}/metrics")

    def counter(name: str) -> float:
        [value] = [v for labels, v in families[name] if labels == {"topic": "traffic"}]
        return value

    assert counter("kafka_server_brokertopicmetrics_messages_in") == 5
    assert counter("kafka_server_brokertopicmetrics_bytes_in") > 5 * 100
    assert counter("kafka_server_brokertopicmetrics_bytes_out") >= counter("kafka_server_brokertopicmetrics_bytes_in")
    assert counter("kafka_server_brokertopicmetrics_failed_produce_requests") >= 1
    assert counter("kafka_server_brokertopicmetrics_failed_fetch_requests") == 0
    errors_by_code = {(labels["request"], labels["error"]): value
                      for labels, value in families["kafka_network_request_errors"]}
    assert errors_by_code[("Produce", "MESSAGE_TOO_LARGE")] == 1
    assert errors_by_code[("Produce", "NONE")] >= 1  # librdkafka may batch the five records
    assert errors_by_code[("Fetch", "NONE")] >= 1
    assert ("Fetch", "MESSAGE_TOO_LARGE") not in errors_by_code
    flushes = {labels.get("le"): value for labels, value in families["kafka_log_logflushstats_log_flush_seconds"]
               if "le" in labels}
    assert flushes["+Inf"] >= 1  # flush.messages=1: every accepted batch is fsynced


def test_a_transaction_open_past_its_timeout_is_counted_late_with_its_age_and_producers(tmp_path):
    """A transactional batch stamped an hour ago (CreateTime) and never ended: its age is
    measured from that first batch, past transaction.max.timeout.ms (15 min) plus Kafka's
    5-minute buffer, so the partition counts as having a late transaction."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    an_hour_ago_ms = int(time.time() * 1000) - 3600_000
    with EmbeddedBroker(tmp_path / "b", {"http.listener": "127.0.0.1:0"}) as running:
        host, port = running.broker.http.address
        url = f"http://{host}:{port}/metrics"
        admin = AdminClient({"bootstrap.servers": running.bootstrap_servers})
        admin.create_topics([NewTopic("hanging", 1, 1)])["hanging"].result(10)
        before = scrape(url)
        txn = Producer({"bootstrap.servers": running.bootstrap_servers, "transactional.id": "late-one"})
        txn.init_transactions(10)
        txn.begin_transaction()
        txn.produce("hanging", b"stale", timestamp=an_hour_ago_ms)
        txn.flush(10)
        during = scrape(url)
        txn.abort_transaction(10)
        after = scrape(url)
    key = {"topic": "hanging", "partition": "0"}
    assert (key, 0.0) in before["oncelog_log_oldest_transaction_age_seconds"]
    assert before["kafka_server_replicamanager_partitions_with_late_transactions_count"] == [({}, 0.0)]
    (age,) = [value for labels, value in during["oncelog_log_oldest_transaction_age_seconds"] if labels == key]
    assert 3600 <= age < 3700
    assert during["kafka_server_replicamanager_partitions_with_late_transactions_count"] == [({}, 1.0)]
    assert (key, 1.0) in during["oncelog_log_producers"]
    assert during["kafka_server_replicamanager_producer_id_count"][0][1] >= 1
    assert (key, 0.0) in after["oncelog_log_oldest_transaction_age_seconds"]
    assert after["kafka_server_replicamanager_partitions_with_late_transactions_count"] == [({}, 0.0)]
    assert after["oncelog_producers_expired"] == [({}, 0.0)]
    # The process collectors of prometheus_client: CPU, memory, open files.
    assert during["process_cpu_seconds"][0][1] > 0 and during["process_open_fds"][0][1] > 0


def test_consumer_groups_show_their_lag_to_the_high_watermark_and_to_the_last_stable_offset(tmp_path):
    """5 committed records, then an open transaction of 2: a group committed at 3 lags 4
    records behind the high watermark but only 2 behind the LSO, which a read_committed
    consumer can reach; a subscribed consumer makes a Stable group and a rebalance."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    config = {"http.listener": "127.0.0.1:0", "group.initial.rebalance.delay.ms": "0"}
    with EmbeddedBroker(tmp_path / "b", config) as running:
        host, port = running.broker.http.address
        bootstrap = running.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("lagged", 1, 1)])["lagged"].result(10)
        plain = Producer({"bootstrap.servers": bootstrap})
        for i in range(5):
            plain.produce("lagged", str(i).encode(), partition=0)
        plain.flush(10)
        txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": "lag-open"})
        txn.init_transactions(10)
        txn.begin_transaction()
        for i in range(2):
            txn.produce("lagged", f"t{i}".encode(), partition=0)
        txn.flush(10)
        simple = Consumer({"bootstrap.servers": bootstrap, "group.id": "lag-simple", "enable.auto.commit": False})
        simple.commit(offsets=[TopicPartition("lagged", 0, 3)], asynchronous=False)
        simple.close()
        member = Consumer({"bootstrap.servers": bootstrap, "group.id": "lag-member", "auto.offset.reset": "earliest",
                           "isolation.level": "read_committed"})
        member.subscribe(["lagged"])
        deadline = time.monotonic() + 20
        while not member.assignment():
            assert time.monotonic() < deadline, "no assignment"
            member.poll(0.2)
        families = scrape(f"http://{host}:{port}/metrics")
        member.close()
        txn.abort_transaction(10)
    key = {"consumergroup": "lag-simple", "topic": "lagged", "partition": "0"}
    assert (key, 3.0) in families["kafka_consumergroup_current_offset"]
    assert (key, 4.0) in families["kafka_consumergroup_lag"]
    assert (key, 2.0) in families["oncelog_consumergroup_lag_stable"]
    groups = {(labels["state"], labels["protocol_type"]): value for labels, value in families["oncelog_groups"]}
    assert groups[("Empty", "")] == 1 and groups[("Stable", "consumer")] == 1
    assert families["oncelog_group_rebalances"][0][1] >= 1
    for coordinator in ("group", "transaction"):  # both topics were created: each loaded its 50 partitions
        count_and_sum = [value for labels, value in families["oncelog_coordinator_partition_load_seconds"]
                         if labels == {"coordinator": coordinator}]
        assert max(count_and_sum) == 50, coordinator
    purgatory = {labels["delayed_operation"]: value
                 for labels, value in families["kafka_server_delayedoperationpurgatory_purgatory_size"]}
    assert set(purgatory) == {"Fetch", "Produce"} and purgatory["Produce"] == 0
    assert families["oncelog_transactions_completing"] == [({}, 0.0)]
    assert families["oncelog_transactions_prepared"] == [({}, 0.0)]


def test_the_log_cleaner_reports_its_rounds_and_how_dirty_the_compacted_logs_are(tmp_path):
    """200 updates of 10 keys in small segments: the cleaner's rounds remove all but the
    latest of each key below the active segment, and /metrics counts them."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    config = {"http.listener": "127.0.0.1:0", "log.cleaner.backoff.ms": "50",
              "log.cleaner.min.cleanable.ratio": "0.01"}
    with EmbeddedBroker(tmp_path / "b", config) as running:
        host, port = running.broker.http.address
        url = f"http://{host}:{port}/metrics"
        admin = AdminClient({"bootstrap.servers": running.bootstrap_servers})
        topic_config = {"cleanup.policy": "compact", "segment.bytes": "4096"}
        admin.create_topics([NewTopic("compacted", 1, 1, config=topic_config)])["compacted"].result(10)
        producer = Producer({"bootstrap.servers": running.bootstrap_servers, "linger.ms": 0})
        for i in range(200):
            producer.produce("compacted", key=f"k{i % 10}".encode(), value=b"v" * 100)
            producer.flush(10)
        deadline = time.monotonic() + 20
        while True:
            families = scrape(url)
            removed = families["oncelog_log_cleaner_records_removed"][0][1]
            if removed > 0 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    rounds = {labels["result"]: value for labels, value in families["oncelog_log_cleaner_rounds"]}
    assert rounds["completed"] >= 1 and removed > 0
    assert families["oncelog_log_cleaner_read_bytes"][0][1] > families["oncelog_log_cleaner_written_bytes"][0][1]
    assert families["kafka_log_logcleanermanager_uncleanable_partitions_count"] == [({}, 0.0)]
    assert 0 <= families["kafka_log_logcleanermanager_max_dirty_percent"][0][1] <= 100
    assert families["oncelog_log_cleaner_last_round_seconds"][0][1] > 0

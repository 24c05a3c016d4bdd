"""`oncelog share-groups` (kafka-share-groups.sh) against a real broker: a share group
listed, described (start offsets and lag, members, state), reset while empty (a dry run,
then --execute), its offsets deleted, and the group deleted; one-line errors."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from oncelog import EmbeddedBroker
from oncelog.cli import main


@pytest.fixture(scope="module")
def cli_broker(tmp_path_factory):
    config = {"offsets.topic.num.partitions": "1", "share.coordinator.state.topic.num.partitions": "1",
              "group.share.heartbeat.interval.ms": "500", "group.share.min.heartbeat.interval.ms": "100"}
    with EmbeddedBroker(tmp_path_factory.mktemp("share-cli"), config) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        admin.create_topics([NewTopic("jobs", 2, 1)])["jobs"].result(10)
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
        for i in range(10):
            producer.produce("jobs", f"job-{i}".encode(), partition=i % 2)
        assert producer.flush(10) == 0
        resource = ConfigResource("group", "workers", incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
        for future in admin.incremental_alter_configs([resource]).values():
            future.result(10)
        yield broker


def oncelog(broker, capsys, *args: str) -> tuple[int, list[list[str]], str]:
    capsys.readouterr()
    status = main([*args, "--bootstrap-server", broker.bootstrap_servers])
    out, err = capsys.readouterr()
    return status, [line.split() for line in out.splitlines()], err


def test_a_share_group_is_listed_described_reset_and_deleted(cli_broker, capsys):
    consumer = ShareConsumer({"bootstrap.servers": cli_broker.bootstrap_servers, "group.id": "workers",
                              "client.id": "worker-1"})
    consumer.subscribe(["jobs"])
    try:
        seen = 0
        for _ in range(50):
            seen += sum(1 for m in consumer.poll(0.2) if m.error() is None)
            if seen >= 10:
                break
        consumer.commit_sync(10)
        assert seen == 10
        status, rows, _ = oncelog(cli_broker, capsys, "share-groups", "list", "--state")
        assert status == 0 and ["workers", "Stable"] in rows
        status, rows, _ = oncelog(cli_broker, capsys, "share-groups", "describe", "--group", "workers")
        assert rows == [["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"],
                        ["workers", "jobs", "0", "5", "0"], ["workers", "jobs", "1", "5", "0"]]
        # `oncelog groups` shows them too, with --type share.
        status, rows, _ = oncelog(cli_broker, capsys, "groups", "list", "--type", "share", "--state", "stable")
        assert status == 0 and rows == [["GROUP", "STATE"], ["workers", "Stable"]]
        status, rows, _ = oncelog(cli_broker, capsys, "groups", "describe", "--type", "share", "--all-groups")
        assert status == 0 and rows[0] == ["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"] and len(rows) == 3
        status, rows, _ = oncelog(cli_broker, capsys, "groups", "list")
        assert ["workers"] not in rows  # consumer groups only, as kafka-consumer-groups.sh
        status, rows, _ = oncelog(cli_broker, capsys, "share-groups", "describe", "--group", "workers", "--members")
        assert rows[0] == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
        assert (rows[1][0], rows[1][3], rows[1][4], rows[1][5]) == ("workers", "worker-1", "2", "jobs:0,1")
        status, _, err = oncelog(cli_broker, capsys, "share-groups", "reset-offsets", "--group", "workers",
                                 "--topic", "jobs", "--to-earliest", "--execute")
        assert status == 1 and "NON_EMPTY_GROUP" in err and len(err.strip().splitlines()) == 1
    finally:
        consumer.close()
    status, rows, _ = oncelog(cli_broker, capsys, "share-groups", "describe", "--group", "workers", "--state")
    assert rows[1][0] == "workers" and rows[1][-2:] == ["Empty", "0"]
    status, rows, _ = oncelog(cli_broker, capsys, "share-groups", "reset-offsets", "--group", "workers",
                              "--topic", "jobs", "--to-offset", "3")
    assert status == 0 and rows[1:] == [["workers", "jobs", "0", "3"], ["workers", "jobs", "1", "3"]]
    status, rows, _ = oncelog(cli_broker, capsys, "share-groups", "describe", "--group", "workers")
    assert [row[3] for row in rows[1:]] == ["5", "5"]  # a dry run changes nothing
    status, rows, _ = oncelog(cli_broker, capsys, "share-groups", "reset-offsets", "--group", "workers",
                              "--topic", "jobs", "--to-earliest", "--execute")
    assert status == 0
    status, rows, _ = oncelog(cli_broker, capsys, "share-groups", "describe", "--group", "workers")
    assert [(row[3], row[4]) for row in rows[1:]] == [("0", "5"), ("0", "5")]
    status, _, _ = oncelog(cli_broker, capsys, "share-groups", "delete-offsets", "--group", "workers", "--topic",
                           "jobs")
    assert status == 0
    status, rows, _ = oncelog(cli_broker, capsys, "share-groups", "describe", "--group", "workers")
    assert rows == [["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"]]
    status, _, _ = oncelog(cli_broker, capsys, "share-groups", "delete", "--group", "workers")
    assert status == 0
    status, rows, _ = oncelog(cli_broker, capsys, "share-groups", "list")
    assert ["workers"] not in rows


def test_describing_a_group_that_is_no_share_group_is_one_line(cli_broker, capsys):
    status, _, err = oncelog(cli_broker, capsys, "share-groups", "describe", "--group", "nobody")
    assert status == 1 and "GROUP_ID_NOT_FOUND" in err and len(err.strip().splitlines()) == 1

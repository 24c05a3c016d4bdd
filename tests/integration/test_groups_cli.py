"""`oncelog groups` (kafka-consumer-groups.sh) against a real broker: listing, per-partition
offsets with log end offset, LSO and both lags, members, and one-line errors."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog import EmbeddedBroker
from oncelog.cli import main


@pytest.fixture(scope="module")
def cli_broker(tmp_path_factory):
    with EmbeddedBroker(tmp_path_factory.mktemp("groups-cli"), {"group.initial.rebalance.delay.ms": "100"}) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        admin.create_topics([NewTopic("clicks", 2, 1)])["clicks"].result(10)
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
        for i in range(10):
            producer.produce("clicks", b"x", partition=i % 2)
        assert producer.flush(10) == 0
        yield broker


def oncelog(broker, capsys, *args: str) -> tuple[int, list[list[str]], str]:
    """Run `oncelog ARGS`; (exit status, stdout split into rows of columns, stderr)."""
    capsys.readouterr()
    status = main([*args, "--bootstrap-server", broker.bootstrap_servers])
    out, err = capsys.readouterr()
    return status, [line.split() for line in out.splitlines()], err


def consume_and_commit(bootstrap: str, group: str, count: int) -> Consumer:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "client.id": f"{group}-client"})
    consumer.subscribe(["clicks"])
    consumed = 0
    while consumed < count:
        message = consumer.poll(1.0)
        if message is not None and not message.error() and message.partition() == 0:
            consumed += 1
            consumer.commit(message=message, asynchronous=False)
    return consumer


def test_describe_shows_offsets_lso_and_lags_per_partition(cli_broker, capsys):
    bootstrap = cli_broker.bootstrap_servers
    # An open transaction on partition 0: its record is past the LSO.
    transactional = Producer({"bootstrap.servers": bootstrap, "transactional.id": "cli-open-txn"})
    transactional.init_transactions(10)
    transactional.begin_transaction()
    transactional.produce("clicks", b"pending", partition=0)
    transactional.flush(10)

    consumer = consume_and_commit(bootstrap, "readers", 3)
    try:
        status, rows, _ = oncelog(cli_broker, capsys, "groups", "describe", "--group", "readers")
        assert status == 0
        assert rows[0] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LSO", "LAG",
                           "LSO-LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]
        first, second = rows[1], rows[2]
        assert first[:8] == ["readers", "clicks", "0", "3", "6", "5", "3", "2"]
        assert first[8].startswith("readers-client-") and first[9:] == ["/127.0.0.1", "readers-client"]
        assert second[:8] == ["readers", "clicks", "1", "-", "5", "5", "-", "-"]  # assigned, nothing committed

        status, rows, _ = oncelog(cli_broker, capsys, "groups", "describe", "--group", "readers", "--members")
        assert rows[1][0] == "readers" and rows[1][-1] == "2"  # one member owning both partitions

        status, rows, _ = oncelog(cli_broker, capsys, "groups", "list", "--state")
        assert ["readers", "Stable"] in rows
    finally:
        consumer.close()
        transactional.abort_transaction(10)

    status, rows, err = oncelog(cli_broker, capsys, "groups", "describe", "--group", "readers")
    assert "Consumer group 'readers' has no active members." in err
    assert rows[1][:8] == ["readers", "clicks", "0", "3", "7", "7", "4", "4"]  # aborted: LSO caught up
    assert rows[1][8:] == ["-", "-", "-"] and len(rows) == 2


def test_list_and_delete_groups(cli_broker, capsys):
    consume_and_commit(cli_broker.bootstrap_servers, "short-lived", 1).close()
    status, rows, _ = oncelog(cli_broker, capsys, "groups", "list")
    assert status == 0 and ["short-lived"] in rows
    status, rows, _ = oncelog(cli_broker, capsys, "groups", "delete", "--group", "short-lived")
    assert status == 0 and rows == [["Deletion", "of", "requested", "consumer", "groups", "('short-lived')", "was",
                                     "successful."]]
    status, rows, _ = oncelog(cli_broker, capsys, "groups", "list")
    assert ["short-lived"] not in rows


def test_missing_group_is_a_one_line_error(cli_broker, capsys):
    status, rows, err = oncelog(cli_broker, capsys, "groups", "describe", "--group", "no-such-group")
    assert status == 1 and rows == []
    assert err == "oncelog: error: consumer group 'no-such-group' does not exist\n"
    status, _, err = oncelog(cli_broker, capsys, "groups", "delete", "--group", "no-such-group")
    assert status == 1 and err == "oncelog: error: consumer group 'no-such-group' does not exist\n"


def test_deleting_a_group_with_members_is_refused(cli_broker, capsys):
    consumer = consume_and_commit(cli_broker.bootstrap_servers, "busy", 1)
    try:
        status, _, err = oncelog(cli_broker, capsys, "groups", "delete", "--group", "busy")
        assert status == 1
        assert err == "oncelog: error: consumer group 'busy' has active members and cannot be deleted\n"
    finally:
        consumer.close()


def test_lso_lag_of_a_read_uncommitted_group_past_an_open_transaction_is_zero_not_negative(cli_broker, capsys):
    """The group has read 5 records of a transaction still open (read_uncommitted): its
    offset is past the LSO, and no read_committed consumer could read anything yet."""
    bootstrap = cli_broker.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("views", 1, 1)])["views"].result(10)
    transactional = Producer({"bootstrap.servers": bootstrap, "transactional.id": "views-open-txn"})
    transactional.init_transactions(10)
    transactional.begin_transaction()
    for _ in range(5):
        transactional.produce("views", b"pending", partition=0)
    transactional.flush(10)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "dirty-readers", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "isolation.level": "read_uncommitted"})
    consumer.subscribe(["views"])
    try:
        consumed = 0
        while consumed < 5:
            message = consumer.poll(1.0)
            if message is not None and not message.error():
                consumed += 1
                consumer.commit(message=message, asynchronous=False)
        consumer.close()
        status, rows, _ = oncelog(cli_broker, capsys, "groups", "describe", "--group", "dirty-readers")
        assert status == 0
        # CURRENT-OFFSET 5, LOG-END-OFFSET 5, LSO 0 (the open transaction starts at 0), LAG 0, LSO-LAG 0
        assert rows[1][:8] == ["dirty-readers", "views", "0", "5", "5", "0", "0", "0"]
    finally:
        transactional.abort_transaction(10)

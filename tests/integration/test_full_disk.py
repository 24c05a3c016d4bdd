"""A full disk: produce fails with KAFKA_STORAGE_ERROR, the log stays whole, and the broker
takes writes again once space returns. The log directory is a small tmpfs made for the test."""

import datetime
import os
import subprocess
import uuid

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.produce.v9 import request as produce_v9

from oncelog import EmbeddedBroker
from oncelog.protocol import record_batch as rb
from oncelog.protocol.client import WireClient


@pytest.fixture
def small_disk(tmp_path):
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount_point)],
                            check=False, capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def produce(client, value_size=64 * 1024):
    batch = rb.build_batch([rb.Record(None, uuid.uuid4().hex.encode() + b"." * value_size)], timestamp_ms=1)
    request = produce_v9.ProduceRequest(
        transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=5),
        topic_data=(produce_v9.TopicProduceData(
            name="full", partition_data=(produce_v9.PartitionProduceData(index=0, records=batch),)),),
    )
    return client.request(request).responses[0].partition_responses[0]


def test_full_disk_refuses_writes_without_corrupting_the_log_and_recovers(small_disk):
    with (
        EmbeddedBroker(small_disk / "logs", {"num.partitions": "1"}) as broker,
        WireClient.connect(broker.bootstrap_servers) as client,
    ):
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        admin.create_topics([NewTopic("full", 1, 1)])["full"].result(10)
        acknowledged = []
        errors = []
        for _ in range(200):
            result = produce(client)
            if result.error_code == ErrorCode.none:
                acknowledged.append(result.base_offset)
            else:
                errors.append(result.error_code)
                if len(errors) >= 3:
                    break
        assert acknowledged, "some writes fit before the disk filled"
        assert errors and set(errors) == {ErrorCode.kafka_storage_error}
        partition_log = broker.broker.logs.partition("full", 0)
        assert broker.call(lambda: partition_log.log_end_offset) == len(acknowledged)
        # The log is whole batches: everything acknowledged reads back.
        records = broker.call(lambda: partition_log.read(0, 1 << 30).records)
        assert [h.base_offset for h in rb.parse_batches(records)] == acknowledged

        # Space returns (the tmpfs grows): writes are accepted again, offsets continue.
        subprocess.run(["mount", "-o", "remount,size=16m", str(small_disk)], check=True)
        again = produce(client)
        assert (again.error_code, again.base_offset) == (ErrorCode.none, len(acknowledged))
    with EmbeddedBroker(small_disk / "logs") as restarted:
        partition_log = restarted.broker.logs.partition("full", 0)
        assert restarted.call(lambda: partition_log.log_end_offset) == len(acknowledged) + 1

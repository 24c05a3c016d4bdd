"""A client that closes its connection while the broker is still working on its request:
the answer has nowhere to go, and that is no error of the broker's."""

from __future__ import annotations

import datetime
import socket
import struct
import time

from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic

from oncelog.local.process import BrokerProcess
from oncelog.protocol.client import encode_request


def test_an_answer_to_a_client_that_already_closed_is_not_logged_as_an_error(tmp_path):
    with BrokerProcess(tmp_path / "broker") as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        admin.create_topics([NewTopic("quiet", 1, 1)])["quiet"].result(10)
        # A long poll on an empty partition: answered only after max_wait_ms.
        fetch = FetchRequest(
            replica_id=-1, max_wait=datetime.timedelta(milliseconds=500), min_bytes=1, max_bytes=1 << 20,
            isolation_level=0,
            session_id=0, session_epoch=-1,
            topics=(FetchTopic(topic="quiet", partitions=(FetchPartition(
                partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                log_start_offset=-1, partition_max_bytes=1 << 20),)),),
            forgotten_topics_data=(), rack_id="",
        )
        for _ in range(5):
            with socket.create_connection(("127.0.0.1", broker.port)) as sock:
                sock.sendall(encode_request(fetch, correlation_id=1))
                time.sleep(0.05)  # the request is read and waiting
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST on close
        time.sleep(1.0)  # every long poll has ended and tried to answer
        assert broker.process.poll() is None
    log = broker.log_path.read_text()
    assert "unexpected error" not in log and "Traceback" not in log, log[-3000:]

"""A broker's peer connection across a network cut, from inside a network namespace:
`python -m tests.support.peer_across_cut HOST PORT TOPIC` (tests/cluster/test_peer.py).

It asks the broker at HOST:PORT once, then keeps a long-polling Fetch of TOPIC-0 out
and prints `polling`; the test cuts the network then. It prints `failed <seconds>` when
that request fails, and after a line on stdin (the test healed the network) asks again
until answered and prints `answered <seconds since the line>`.
"""

from __future__ import annotations

import asyncio
import datetime
import sys
import time

import uvloop
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i32Timedelta, i64

from oncelog.kernel.peer import PeerConnection

POLL = datetime.timedelta(seconds=20)


def _fetch(topic: str) -> FetchRequest:
    partition = FetchPartition(partition=i32(0), current_leader_epoch=i32(-1), fetch_offset=i64(0),
                               last_fetched_epoch=i32(-1), log_start_offset=i64(-1), partition_max_bytes=i32(1 << 20))
    return FetchRequest(replica_id=BrokerId(-1), max_wait=i32Timedelta.parse(POLL), min_bytes=i32(1),
                        max_bytes=i32(1 << 20), isolation_level=i8(0), session_id=i32(0), session_epoch=i32(-1),
                        topics=(FetchTopic(topic=TopicName(topic), partitions=(partition,)),), forgotten_topics_data=(),
                        rack_id="")


async def main(host: str, port: int, topic: str) -> None:
    loop = asyncio.get_running_loop()
    peer = PeerConnection(1, host, port, client_id="cut-test")
    versions = ApiVersionsRequest(client_software_name="cut-test", client_software_version="1")
    await peer.request(versions, 10)
    started = time.monotonic()
    polling = asyncio.ensure_future(peer.request(_fetch(topic), 60, raw=True))
    await asyncio.sleep(0.5)
    print("polling", flush=True)
    try:
        await polling
        print("answered during the cut", flush=True)
    except (ConnectionError, TimeoutError):
        print(f"failed {time.monotonic() - started:.1f}", flush=True)
    await loop.run_in_executor(None, sys.stdin.readline)
    healed = time.monotonic()
    while True:
        try:
            await peer.request(versions, 60)
            break
        except (ConnectionError, TimeoutError) as error:
            print(f"retrying: {error}", file=sys.stderr, flush=True)
            await asyncio.sleep(0.05)
    print(f"answered {time.monotonic() - healed:.1f}", flush=True)


if __name__ == "__main__":
    uvloop.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3]))  # the broker's loop

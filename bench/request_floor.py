"""The broker's CPU per request for requests that do almost nothing: the floor under
every API's cost (receive, frame, decode, dispatch, encode, send).

    python bench/request_floor.py                          Heartbeat and Metadata, 3 runs
    python bench/request_floor.py --baseline-src ../old/src   against another tree, interleaved

One broker process (as bench/run.py starts it); 16 connections, each sending its next
request as soon as its answer arrives, from one client thread (pre-encoded requests, so
the client costs little). The figure is the broker's own CPU time (/proc) over the timed
phase divided by the requests answered. A Heartbeat for an unknown group is answered
with an error code and touches no log; a Metadata request for no topics lists the
brokers. Issue 22 compares a transaction's broker CPU (three requests: AddPartitionsToTxn,
Produce, EndTxn) with three times this floor.
"""

from __future__ import annotations

import argparse
import selectors
import socket
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.types import GroupId
from kio.static.primitive import i32

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # `bench` as a package when run as a script

from bench.peers import OncelogTarget  # noqa: E402
from bench.profile import process_cpu_seconds  # noqa: E402
from oncelog.protocol.client import encode_request  # noqa: E402

REQUESTS = {
    "heartbeat": HeartbeatRequest(group_id=GroupId("floor"), generation_id=i32(1), member_id="floor",
                                  group_instance_id=None),
    "metadata": MetadataRequest(topics=(), allow_auto_topic_creation=False,
                                include_topic_authorized_operations=False),
}
_SIZE = struct.Struct(">i")


def measure(bootstrap: str, pid: int, request: bytes, connections: int, seconds: float) -> tuple[float, float]:
    """(requests/s, broker CPU microseconds per request) over `seconds`."""
    host, port = bootstrap.rsplit(":", 1)
    selector = selectors.DefaultSelector()
    buffers: dict[socket.socket, bytearray] = {}
    for _ in range(connections):
        sock = socket.create_connection((host, int(port)))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
        buffers[sock] = bytearray()
    try:
        for sock in buffers:  # warm up: one answer on each connection before timing
            sock.sendall(request)
        answered = _pump(selector, buffers, request, until=time.perf_counter() + 1.0)
        cpu_before = process_cpu_seconds(pid)
        started = time.perf_counter()
        answered = _pump(selector, buffers, request, until=started + seconds)
        wall = time.perf_counter() - started
        cpu = process_cpu_seconds(pid)
        assert cpu is not None and cpu_before is not None and answered > 0
        return answered / wall, (cpu - cpu_before) / answered * 1e6
    finally:
        for sock in buffers:
            sock.close()
        selector.close()


def _pump(selector: selectors.BaseSelector, buffers: dict[socket.socket, bytearray], request: bytes,
          until: float) -> int:
    answered = 0
    while time.perf_counter() < until:
        for key, _ in selector.select(1.0):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            buffer = buffers[sock]
            chunk = sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("the broker closed a connection")
            buffer += chunk
            while len(buffer) >= 4:
                size = _SIZE.unpack_from(buffer)[0]
                if len(buffer) < 4 + size:
                    break
                del buffer[:4 + size]
                answered += 1
                sock.sendall(request)  # ~50 bytes into an empty send buffer
    return answered


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kinds", nargs="+", choices=sorted(REQUESTS), default=sorted(REQUESTS))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--baseline-src", type=Path, help="also measure the oncelog in this src/ directory")
    args = parser.parse_args()
    targets: list[tuple[str, Path | None]] = [("oncelog", None)]
    if args.baseline_src is not None:
        targets.append(("baseline", args.baseline_src.resolve()))
    results: dict[tuple[str, str], list[float]] = {}
    for run in range(args.runs):
        for name, source in targets if run % 2 == 0 else targets[::-1]:  # interleaved, first in turn
            with tempfile.TemporaryDirectory(prefix="floor-") as work_dir:
                target = OncelogTarget(Path(work_dir), source_dir=source)
                with target as bootstrap:
                    assert target.pid is not None
                    for kind in args.kinds:
                        frame = encode_request(REQUESTS[kind], 1)
                        rate, cpu_us = measure(bootstrap, target.pid, frame, args.connections, args.seconds)
                        results.setdefault((name, kind), []).append(cpu_us)
                        print(f"run {run + 1}/{args.runs} {name:8} {kind:9} {rate:10,.0f} requests/s "
                              f"{cpu_us:7.1f} us of broker CPU per request", flush=True)
    print()
    for kind in args.kinds:
        medians = {name: statistics.median(results[(name, kind)]) for name, _ in targets}
        line = f"{kind:9} median broker CPU per request: " + ", ".join(
            f"{name} {median:.1f} us" for name, median in medians.items())
        if args.baseline_src is not None:
            line += f"; oncelog / baseline {medians['oncelog'] / medians['baseline']:.2f}x"
        print(line)


if __name__ == "__main__":
    main()

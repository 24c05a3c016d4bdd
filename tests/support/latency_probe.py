"""A latency probe for tests that a broker keeps answering while it does heavy work."""

from __future__ import annotations

import json
import subprocess
import sys

# Runs in a process of its own, so that its timings are not the broker's GIL waits.
_PROBE = """
import json, sys, threading, time
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.metadata.v12.request import MetadataRequest
from oncelog.protocol.client import WireClient

stop_requested = []  # when "stop" came: every probe due before it is still sent


def wait_for_stop():
    sys.stdin.readline()
    stop_requested.append(time.monotonic())


threading.Thread(target=wait_for_stop, daemon=True).start()
samples = []
with WireClient.connect(sys.argv[1], timeout=60) as client:
    interval = float(sys.argv[2])
    due = time.monotonic()
    number = 0
    while not stop_requested or due <= stop_requested[0]:
        wait = due - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        if number % 2:
            client.request(MetadataRequest(topics=(), allow_auto_topic_creation=False,
                                           include_topic_authorized_operations=False))
        else:
            client.request(ApiVersionsRequest(client_software_name="probe", client_software_version="1"))
        samples.append((due, time.monotonic() - due))
        if number == 0:
            print("ready", flush=True)
        due += interval
        number += 1
print(json.dumps(samples), flush=True)
"""


class LatencyProbe:
    """ApiVersions and Metadata round trips on a fixed schedule, from another process.
    Each latency counts from the probe's scheduled send time, so a stalled event loop
    shows in every probe that fell due during the stall, not in one slow answer only.
    (CLOCK_MONOTONIC is the same in both processes.)"""

    def __init__(self, bootstrap: str, interval_s: float = 0.005) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", _PROBE, bootstrap, str(interval_s)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None  # a PIPE
        assert self.process.stdout.readline().strip() == "ready"
        self.samples: list[tuple[float, float]] = []  # (scheduled time, latency)

    def stop(self) -> None:
        output, _ = self.process.communicate("stop\n", timeout=60)
        assert self.process.returncode == 0, output
        self.samples = [tuple(sample) for sample in json.loads(output)]

    def latencies_between(self, start: float, end: float) -> list[float]:
        return sorted(latency for due, latency in self.samples if start <= due <= end)


def assert_p99_below(probe: LatencyProbe, started: float, finished: float, limit_s: float, doing: str) -> None:
    """The probes due while the broker was `doing` something from `started` to `finished`
    were answered within `limit_s` at the 99th percentile (and there were enough of them)."""
    during = probe.latencies_between(started, finished)
    assert len(during) >= 20, f"only {len(during)} probes while {doing} for {finished - started:.2f} s"
    p99 = during[int(len(during) * 0.99) - 1]
    assert p99 < limit_s, (
        f"p99 {p99 * 1000:.0f} ms, max {during[-1] * 1000:.0f} ms over {len(during)} probes "
        f"while {doing} for {finished - started:.2f} s"
    )

"""A local etcd cluster for tests: N members on loopback ports, fast elections.

    with EtcdCluster(tmp_path / "etcd") as etcd:
        client = EtcdClient(etcd.endpoints)
        etcd.kill(0)       # SIGKILL one member
        etcd.restart(0)    # same data dir and ports: it rejoins and catches up

Each member costs about 123 MB of disk (etcd 3.4 preallocates its WAL), so use one
cluster per test module. `start()` returns once every member answers and a write has
been committed. Readiness checks use blocking HTTP (urllib), so the harness works from
sync tests and from inside a running event loop's thread alike.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Self

from oncelog.cluster.etcd_member import EtcdMember
from oncelog.local.process import free_port


class EtcdCluster:
    def __init__(self, base_dir: str | Path, members: int = 3, *, election_timeout_ms: int = 500,
                 heartbeat_interval_ms: int = 50) -> None:
        self.base_dir = Path(base_dir)
        names = [f"etcd{i}" for i in range(members)]
        client_urls = [f"http://127.0.0.1:{free_port()}" for _ in names]
        peer_urls = [f"http://127.0.0.1:{free_port()}" for _ in names]
        initial_cluster = ",".join(f"{name}={url}" for name, url in zip(names, peer_urls, strict=True))
        self.members = [
            EtcdMember(name, self.base_dir / name, client_url, peer_url, initial_cluster,
                       election_timeout_ms=election_timeout_ms, heartbeat_interval_ms=heartbeat_interval_ms,
                       log_path=self.base_dir / f"{name}.log", cluster_token=f"oncelog-test-{id(self)}")
            for name, client_url, peer_url in zip(names, client_urls, peer_urls, strict=True)
        ]

    @property
    def endpoints(self) -> list[str]:
        return [member.client_url for member in self.members]

    def start(self, timeout: float = 30.0) -> Self:
        for member in self.members:
            member.start()
        try:
            self.wait_ready(range(len(self.members)), timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def kill(self, i: int) -> None:
        """SIGKILL member i."""
        self.members[i].kill()

    def restart(self, i: int, timeout: float = 30.0) -> None:
        """Start member i again on its data dir (killing it first if it still runs) and
        wait until it answers and has caught up with the others' revision."""
        if self.members[i].alive:
            self.members[i].kill()
        self.members[i].start()
        self.wait_ready([i], timeout)

    def stop(self) -> None:
        """SIGTERM every member, SIGKILL after a short grace (a member without quorum may
        ignore SIGTERM for seconds)."""
        for member in self.members:
            if member.alive and member.process is not None:
                member.process.terminate()
        for member in self.members:
            member.stop(grace_s=1.0)

    def status(self, i: int, timeout: float = 2.0) -> dict:
        return post(self.endpoints[i], "/v3/maintenance/status", {}, timeout)

    def leader_index(self, timeout: float = 10.0) -> int:
        """The index of the member every live member agrees is the leader."""
        deadline = time.monotonic() + timeout
        while True:
            ids: dict[int, int] = {}
            leaders = set()
            for i, member in enumerate(self.members):
                if not member.alive:
                    continue
                try:
                    status = self.status(i)
                except OSError:
                    continue
                ids[int(status["header"]["member_id"])] = i
                leaders.add(int(status.get("leader", 0)))
            if len(leaders) == 1 and (leader := leaders.pop()) in ids:
                return ids[leader]
            if time.monotonic() > deadline:
                raise TimeoutError(f"the etcd members do not agree on a leader: {leaders}")
            time.sleep(0.05)

    def wait_ready(self, indexes, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        probe = base64.b64encode(b"/oncelog-test/ready").decode()
        for i in indexes:
            member = self.members[i]
            while True:
                if not member.alive:
                    raise RuntimeError(f"etcd member {member.name} exited; its log:\n{member.log_tail()}")
                try:
                    status = self.status(i)
                    # A write through this member proves it has a leader and a quorum; the
                    # answer comes after the member applied it, so it has caught up too.
                    if int(status.get("leader", 0)):
                        post(self.endpoints[i], "/v3/kv/put", {"key": probe, "value": probe}, 2.0)
                        break
                except (OSError, ValueError):
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"etcd member {member.name} did not become ready in {timeout}s; "
                                       f"its log:\n{member.log_tail()}")
                time.sleep(0.05)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()


class GatewayError(OSError):
    """An HTTP error status from etcd's JSON gateway (`status`: e.g. 404 for a lease
    that is gone)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def post(endpoint: str, path: str, body: dict, timeout: float) -> dict:
    """One call of etcd's JSON gateway; an HTTP error status is a GatewayError."""
    request = urllib.request.Request(endpoint + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as error:
        raise GatewayError(f"{endpoint}{path}: HTTP {error.code}: {error.read()[:200]!r}", error.code) from None

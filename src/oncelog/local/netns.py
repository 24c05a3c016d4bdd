"""Nodes in their own network namespaces, for network partitions that are real.

    lab = NetworkLab([1, 2, 3]).create()      # needs root (CAP_NET_ADMIN) and iproute2
    lab.address(1)                             # "10.87.13.11": node 1's own address
    lab.command(1, ["python", "-m", ...])      # the command, run inside node 1's namespace
    lab.isolate(1)                             # node 1 cut from nodes 2 and 3, both ways
    lab.heal(1)
    lab.destroy()

Each node gets a namespace with a veth pair whose other end hangs on one bridge in the
host's namespace; the bridge has the subnet's first address. So the host (clients, fault
proxies, test code) reaches every node, and the nodes reach each other over the bridge.
`isolate(node)` points the neighbour entries between the node and every other node at a
hardware address nobody has (permanent entries, both ways): frames between them vanish
without an error, as across a partition of a real network (no RST, no ICMP, no
unreachable route: an established connection and a new connect alike just wait), while
the host still reaches the cut-off node, as clients on its side of the partition would.
(The kernels this runs on may lack tc's drop actions, and a blackhole route fails new
connects at once with EINVAL, which a real partition does not do.)

`NetworkLab.unavailable()` says why namespaces cannot be made here (not root, no `ip`,
no CAP_NET_ADMIN), or None; tests skip with that reason.
"""

from __future__ import annotations

import ipaddress
import itertools
import os
import random
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from typing import Self

_NOWHERE = "02:00:00:00:00:01"  # a locally administered unicast address no interface has


class NetworkLabError(RuntimeError):
    """An `ip` command failed; the message has its stderr."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(["ip", *args], check=False, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise NetworkLabError(f"ip {' '.join(args)}: {result.stderr.strip() or f'status {result.returncode}'}")
    return result


_LAB_NUMBERS = itertools.count()


class NetworkLab:
    def __init__(self, nodes: Iterable[int], *, seed: int | None = None) -> None:
        self.nodes = sorted(set(nodes))
        if not self.nodes or self.nodes[0] < 0 or self.nodes[-1] > 200:
            raise ValueError(f"node ids must be 0..200, not {self.nodes}")
        rng = random.Random(seed if seed is not None else os.getpid())
        # Named after the process, not the seed: a run killed before its teardown leaves
        # its bridge behind, and the next run with the same seed must not trip on it.
        tag = f"{os.getpid() & 0xFFFFF:05x}{next(_LAB_NUMBERS) & 0xFF:02x}"
        self.bridge = f"olb{tag}"
        self._namespaces = {node: f"oncelog-{tag}-{node}" for node in self.nodes}
        self._veths = {node: (f"olv{tag}{node}", f"olp{tag}{node}") for node in self.nodes}
        self.subnet = self._free_subnet(rng)
        self._isolated: set[int] = set()
        self._created = False

    @staticmethod
    def unavailable() -> str | None:
        """Why namespaces cannot be made here, or None when they can."""
        if os.geteuid() != 0:
            return "network partitions need root (network namespaces); run as root to include them"
        if shutil.which("ip") is None:
            return "network partitions need iproute2's `ip` (apt-get install iproute2)"
        probe = f"oncelog-probe-{os.getpid()}"
        result = _ip("netns", "add", probe, check=False)
        if result.returncode != 0:
            return f"cannot create a network namespace here: {result.stderr.strip()}"
        _ip("netns", "del", probe, check=False)
        return None

    @staticmethod
    def _free_subnet(rng: random.Random) -> ipaddress.IPv4Network:
        """A /24 in 10.0.0.0/8 that no route of the host's already covers."""
        routes = _ip("-4", "route", "show", "table", "all", check=False).stdout.split() if shutil.which("ip") else []
        taken = []
        for word in routes:
            try:
                taken.append(ipaddress.ip_network(word, strict=False))
            except ValueError:
                continue
        for _ in range(200):
            candidate = ipaddress.IPv4Network(f"10.{rng.randrange(64, 250)}.{rng.randrange(1, 250)}.0/24")
            if not any(candidate.overlaps(network) for network in taken if network.prefixlen > 0):
                return candidate
        raise NetworkLabError("no free 10.x.y.0/24 subnet for the lab")

    def address(self, node: int) -> str:
        return str(self.subnet.network_address + 10 + node)

    @property
    def host_address(self) -> str:
        return str(self.subnet.network_address + 1)

    def namespace(self, node: int) -> str:
        return self._namespaces[node]

    def command(self, node: int, argv: Sequence[str]) -> list[str]:
        """`argv` run inside the node's namespace (`ip netns exec` execs it: same pid)."""
        return ["ip", "netns", "exec", self._namespaces[node], *argv]

    def create(self) -> Self:
        self._created = True
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            _ip("addr", "add", f"{self.host_address}/{self.subnet.prefixlen}", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            for node in self.nodes:
                namespace, (host_end, node_end) = self._namespaces[node], self._veths[node]
                _ip("netns", "add", namespace)
                _ip("link", "add", host_end, "type", "veth", "peer", "name", node_end)
                _ip("link", "set", node_end, "netns", namespace)
                _ip("link", "set", host_end, "master", self.bridge)
                _ip("link", "set", host_end, "up")
                _ip("-n", namespace, "addr", "add", f"{self.address(node)}/{self.subnet.prefixlen}", "dev", node_end)
                _ip("-n", namespace, "link", "set", node_end, "up")
                _ip("-n", namespace, "link", "set", "lo", "up")
        except BaseException:
            self.destroy()
            raise
        return self

    def isolate(self, node: int) -> None:
        """Cut `node` from every other node, both ways; the host still reaches it."""
        for other in self.nodes:
            if other != node:
                self._misaddress(node, other)
                self._misaddress(other, node)
        self._isolated.add(node)

    def heal(self, node: int) -> None:
        for other in self.nodes:
            if other != node and other not in self._isolated - {node}:
                for source, target in ((node, other), (other, node)):
                    _ip("-n", self._namespaces[source], "neigh", "del", self.address(target), "dev",
                        self._veths[source][1], check=False)
        self._isolated.discard(node)

    def _misaddress(self, source: int, target: int) -> None:
        """`source` sends what it means for `target` to a hardware address nobody has: the
        bridge floods the frames and every port drops them. No error comes back, and
        connections (old and new) just wait, as across a real partition."""
        _ip("-n", self._namespaces[source], "neigh", "replace", self.address(target), "lladdr", _NOWHERE, "dev",
            self._veths[source][1], "nud", "permanent")

    @property
    def isolated(self) -> set[int]:
        return set(self._isolated)

    def destroy(self) -> None:
        """Remove every namespace, veth and the bridge (processes inside keep running
        with no network: stop them first)."""
        if not self._created:
            return
        for node in self.nodes:
            _ip("link", "del", self._veths[node][0], check=False)  # takes its peer with it
            _ip("netns", "del", self._namespaces[node], check=False)
        _ip("link", "del", self.bridge, check=False)
        self._created = False

    def __enter__(self) -> Self:
        return self.create()

    def __exit__(self, *exc_info) -> None:
        self.destroy()

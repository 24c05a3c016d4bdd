"""The faults `oncelog chaos` injects into a cluster, each with its cure.

    disks = NodeDisks(root, [1, 2, 3]).mount()      # a tmpfs per node's log.dirs (root only)
    nemesis = ClusterNemesis(cluster, network=lab, disks=disks)
    fault = nemesis.inject("partition", rng)        # node N cut off from the others...
    ...                                             # ...for as long as the caller likes
    fault.heal()                                    # ...and back

Kinds (`FAULT_KINDS`):

- `kill`: SIGKILL of a node (its etcd member dies with it); healed by starting it again on
  the same ports and log.dirs.
- `pause`: SIGSTOP of a partition leader's broker, a coordinator's, the active
  controller's, a whole node's (broker and etcd member), or of an etcd member alone;
  healed by SIGCONT. A stopped process keeps its connections: nothing fails, it just
  stops answering.
- `partition`: one node cut from the other nodes, brokers and etcd members alike, while
  clients (and the fault proxies) still reach it; needs the cluster in network namespaces
  (`NetworkLab`, root). Sometimes node 1, whose etcd member is the first voter: the one
  every broker's watch starts on.
- `disk`: one node's log dir volume filled to the last byte; healed by freeing it. Needs
  each node's log.dirs on a volume of its own (`NodeDisks`, root).
- `sessions`: every broker's session lease revoked at once through the quorum's API, as
  etcd once did when a paused member resumed: every broker is fenced within milliseconds
  and registers again. Nothing to heal.

Victims: a third of the time the leader of a random partition of the watched topics, a
third a coordinator, otherwise (or when no answer comes in time) a random node; pauses
and partitions also take the active controller, and pauses sometimes an etcd member alone.
`Fault.led` holds the partitions the victim led when the fault began: stalls there are
expected, stalls elsewhere are what short failovers avoid.
"""

from __future__ import annotations

import errno
import os
import random
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from oncelog.local.cluster import ClusterProcess
from oncelog.local.netns import NetworkLab

FAULT_KINDS = ("kill", "pause", "partition", "disk", "sessions")
FILLER = "chaos-filler"  # the file that fills a node's disk
DISK_SIZE = "512m"  # each node's tmpfs: room for its etcd member's preallocated WAL and the run's logs


@dataclass
class Fault:
    number: int
    kind: str
    node: int  # the node it hit (for an etcd member alone: the member's node)
    target: str  # what the victim was chosen as: leader, transaction_coordinator, controller, ...
    description: str
    led: frozenset[tuple[str, int]]  # partitions (of the watched topics) the node led when it began
    began: float  # wall-clock time
    ended: float | None = None  # wall-clock time the cure was applied
    cure: Callable[[], object] = field(default=lambda: None, repr=False)  # what it returns is ignored

    def heal(self) -> None:
        self.cure()
        self.ended = time.time()


class NodeDisks:
    """A tmpfs of `size` (default `DISK_SIZE`) per node, mounted on the node's log.dirs
    before it starts, that `fill` fills to the last byte and `free` empties again."""

    def __init__(self, cluster_dir: Path, nodes: Iterable[int], size: str = DISK_SIZE) -> None:
        self.dirs = {node: Path(cluster_dir) / f"node-{node}" for node in nodes}
        self.size = size
        self._mounted: list[Path] = []

    @staticmethod
    def unavailable() -> str | None:
        if os.geteuid() != 0:
            return "a full disk needs root (a tmpfs per node); run as root to include it"
        return None

    def mount(self) -> NodeDisks:
        for directory in self.dirs.values():
            directory.mkdir(parents=True, exist_ok=True)
            result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.size}", "tmpfs", str(directory)],
                                    check=False, capture_output=True, text=True)
            if result.returncode != 0:
                self.unmount()
                raise OSError(f"cannot mount a tmpfs on {directory}: {result.stderr.strip()}")
            self._mounted.append(directory)
        return self

    def fill(self, node: int) -> None:
        # Unbuffered: a buffered file whose last write stopped part-way through a chunk
        # could keep the rest, and closing it would raise ENOSPC once more.
        with open(self._filler(node), "wb", buffering=0) as out:
            chunk = b"\0" * (1 << 20)
            try:
                while True:
                    out.write(chunk)
            except OSError as error:
                if error.errno != errno.ENOSPC:
                    raise

    def free(self, node: int) -> None:
        self._filler(node).unlink(missing_ok=True)

    def _filler(self, node: int) -> Path:
        return self.dirs[node] / FILLER

    def unmount(self, keep: bool = False) -> None:
        """Unmounts every tmpfs; with `keep`, what each held (the filler aside) is copied
        first and put back in the directory it was mounted on, so that `--data-dir`
        keeps the logs of a run that hit full disks."""
        for directory in self._mounted:
            saved = None
            if keep:
                saved = Path(tempfile.mkdtemp(prefix=f"{directory.name}-", dir=directory.parent))
                (directory / FILLER).unlink(missing_ok=True)
                shutil.copytree(directory, saved, dirs_exist_ok=True, symlinks=True)
            subprocess.run(["umount", "-l", str(directory)], capture_output=True, check=False)
            if saved is not None:
                shutil.copytree(saved, directory, dirs_exist_ok=True, symlinks=True)
                shutil.rmtree(saved, ignore_errors=True)
        self._mounted.clear()


class ClusterNemesis:
    """Chooses victims in `cluster` and injects faults of the kinds its setup allows."""

    def __init__(self, cluster: ClusterProcess, watched: Sequence[tuple[str, int]], *,
                 coordinator_keys: Sequence[tuple[str, int]], network: NetworkLab | None = None,
                 disks: NodeDisks | None = None, restart: Callable[[int], None] | None = None) -> None:
        """`watched`: the partitions whose leaders are victims (and reported in `led`);
        `coordinator_keys`: (key, key type) of the coordinators that are (1: transactional
        id, 0: group). `restart` starts a killed node (default: `cluster.start_node`)."""
        self.cluster = cluster
        self.watched = list(watched)
        self.coordinator_keys = list(coordinator_keys)
        self.network = network
        self.disks = disks
        self.restart = restart or (lambda node: cluster.start_node(node, timeout=60))
        self.count = 0

    def inject(self, kind: str, rng: random.Random) -> Fault:
        self.count += 1
        if kind == "kill":
            node, target, why = self._victim(rng, controller=False)
            led = self._led_by(node)
            self.cluster.kill(node)
            return self._fault(kind, node, target, f"kill -9 of node {node} ({why})", led,
                               lambda: self.restart(node))
        if kind == "pause":
            return self._pause(rng)
        if kind == "partition":
            network = self.network
            assert network is not None  # partition faults come with a network lab
            node, target, why = self._victim(rng, controller=True, first_voter=True)
            led = self._led_by(node)
            network.isolate(node)
            return self._fault(kind, node, target, f"node {node} ({why}) cut off from the other nodes", led,
                               lambda: network.heal(node))
        if kind == "disk":
            disks = self.disks
            assert disks is not None  # disk faults come with a tmpfs per node
            node, target, why = self._victim(rng, controller=False)
            led = self._led_by(node)
            disks.fill(node)
            return self._fault(kind, node, target, f"the disk of node {node} ({why}) full", led,
                               lambda: disks.free(node))
        if kind == "sessions":
            node = min(self.cluster.alive())  # none in particular: every broker is hit
            revoked = self.cluster.revoke_sessions()
            return self._fault(kind, node, "sessions", f"every broker's session lease revoked ({revoked} leases)",
                               frozenset(), lambda: None)
        raise ValueError(f"unknown fault kind {kind!r}; known: {', '.join(FAULT_KINDS)}")

    def undo_all(self) -> None:
        """Whatever a fault may have left behind (its healer failed): every process
        continued, every node reconnected, every disk freed."""
        for node_id, node in self.cluster.nodes.items():
            for pid in (node.process.pid if node.process is not None else None,
                        self.cluster.quorum_member_pid(node_id)):
                if pid is not None:
                    try:
                        os.kill(pid, signal.SIGCONT)
                    except ProcessLookupError:
                        pass
            if self.disks is not None:
                self.disks.free(node_id)
        if self.network is not None:
            for node_id in self.network.isolated:
                self.network.heal(node_id)

    def _pause(self, rng: random.Random) -> Fault:
        what = rng.choice(("broker", "broker", "node", "quorum_member"))
        node, target, why = self._victim(rng, controller=True)
        led = self._led_by(node)
        broker = self.cluster.nodes[node].pid
        member = self.cluster.quorum_member_pid(node)
        if what == "quorum_member" and member is not None:
            pids, description, target = [member], f"SIGSTOP of the etcd member of node {node}", "quorum_member"
            led = frozenset()
        elif what == "node" and member is not None:
            pids, description = [broker, member], f"SIGSTOP of node {node} ({why}): broker and etcd member"
        else:
            pids, description = [broker], f"SIGSTOP of the broker of node {node} ({why})"
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)

        def resume() -> None:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass

        return self._fault("pause", node, target, description, led, resume)

    def _fault(self, kind: str, node: int, target: str, description: str, led: frozenset,
               cure: Callable[[], object]) -> Fault:
        return Fault(self.count, kind, node, target, description, led, time.time(), cure=cure)

    def _victim(self, rng: random.Random, *, controller: bool, first_voter: bool = False) -> tuple[int, str, str]:
        """(node, what it was chosen as, why in words)."""
        alive = self.cluster.alive()
        choices = ["leader", "coordinator", "random"] + (["controller"] if controller else []) \
            + (["first_voter"] if first_voter else [])
        choice = rng.choice(choices)
        victim, target, why = -1, "random", "a random node"
        try:
            if choice == "leader":
                topic, partition = rng.choice(self.watched)
                victim = self.cluster.leader_of(topic, partition)
                target, why = "leader", f"leader of {topic}-{partition}"
            elif choice == "coordinator":
                key, key_type = rng.choice(self.coordinator_keys)
                victim = self.cluster.coordinator_of(key, key_type, timeout=5)
                target = "transaction_coordinator" if key_type == 1 else "group_coordinator"
                why = f"{target.replace('_', ' ')} of {key}"
            elif choice == "controller":
                victim = self.cluster.metadata([]).controller_id
                target, why = "controller", "the active controller"
            elif choice == "first_voter":
                victim = min(self.cluster.nodes)
                target, why = "first_voter", "its etcd member is the first voter"
        except (OSError, LookupError, AssertionError):
            victim = -1  # no answer in time: any node will do
        if victim not in alive:
            victim, target, why = rng.choice(alive), "random", "a random node"
        return victim, target, why

    def _led_by(self, node: int) -> frozenset[tuple[str, int]]:
        try:
            metadata = self.cluster.metadata(sorted({topic for topic, _ in self.watched}))
        except OSError:
            return frozenset()
        return frozenset((topic.name, p.partition_index) for topic in metadata.topics for p in topic.partitions
                         if p.leader_id == node and (topic.name, p.partition_index) in self.watched)

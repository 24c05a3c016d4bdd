"""Replica comparison: after a cluster run, every replica of a partition must hold the
same batches up to the smallest high watermark among them.

    cluster.stop_all()                       # clean shutdown: checkpoints written
    mismatches = compare_replicas(cluster, ["orders"])
    assert not mismatches, "\n".join(map(str, mismatches))

Each node's log directory is opened with the storage layer (`LogManager`, replicated,
so each log's high watermark is the one its broker checkpointed), and each partition's
batches are read from the largest log start offset up to the smallest high watermark
over its replicas. Below that bound the replication protocol promises identical logs:
the leader's batches copied byte for byte, with their offsets and leader epochs. A
batch is compared by what identifies it: base and last offset, partition leader epoch,
CRC32C (which covers everything from the attributes on), producer id and epoch, and
the control flag; every batch's CRC is also checked against its bytes. Beyond the bound
replicas may differ (an uncommitted tail a follower has not fetched yet).

The nodes must be stopped: opening a log directory takes its lock, and loading it
recovers and rewrites checkpoints as a broker start does. Compacted topics are not for
this comparison (each replica cleans its own segments, as in Kafka).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from oncelog.names import INTERNAL_TOPICS
from oncelog.protocol.record_batch import CorruptRecordError, parse_batches
from oncelog.storage.config import LogConfig
from oncelog.storage.errors import LogError
from oncelog.storage.manager import LogManager

if TYPE_CHECKING:
    from oncelog.local.cluster import ClusterProcess

READ_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class BatchIdentity:
    base_offset: int
    last_offset: int
    partition_leader_epoch: int
    crc: int
    producer_id: int
    producer_epoch: int
    control: bool

    def __str__(self) -> str:
        return (f"[{self.base_offset}..{self.last_offset}] epoch {self.partition_leader_epoch} crc {self.crc:#010x} "
                f"producer {self.producer_id}/{self.producer_epoch}{' control' if self.control else ''}")


@dataclass(frozen=True, slots=True)
class ReplicaMismatch:
    topic: str
    partition: int
    description: str

    def __str__(self) -> str:
        return f"replica_mismatch: {self.topic}-{self.partition}: {self.description}"


@dataclass(frozen=True, slots=True)
class ReplicaComparison:
    """What was compared (for the report) and what differed."""

    partitions: int
    batches: int  # batches compared per replica, summed over partitions
    bounds: dict[str, tuple[int, int]]  # partition name -> (smallest, largest) high watermark
    mismatches: list[ReplicaMismatch]

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def summary(self) -> str:
        return (f"replicas: {self.partitions} partitions compared, {self.batches} batches, "
                f"replica_mismatches={len(self.mismatches)}")


@dataclass(frozen=True, slots=True)
class _Replica:
    log_start_offset: int
    high_watermark: int
    log_end_offset: int
    batches: list[BatchIdentity]  # from the log start offset up to the bound
    problem: str | None = None  # a batch failing its CRC, or a read error


def compare_replicas(cluster: ClusterProcess, topics: Iterable[str] | None = None) -> ReplicaComparison:
    """Compare the replicas of `topics` (default: every non-internal topic) on the nodes
    of a stopped cluster."""
    alive = cluster.alive()
    if alive:
        raise RuntimeError(f"nodes {alive} are running: stop the cluster before comparing its replicas")
    return compare_log_dirs({node_id: Path(node.config["log.dirs"]) for node_id, node in cluster.nodes.items()},
                            topics)


def compare_log_dirs(log_dirs: Mapping[int, Path], topics: Iterable[str] | None = None) -> ReplicaComparison:
    """Compare the partitions of `topics` held in the given log directories (node id ->
    its log dir); a partition held by only one of them is not compared."""
    managers: dict[int, LogManager] = {}
    try:
        for node_id, directory in sorted(log_dirs.items()):
            manager = LogManager([Path(directory)], LogConfig(), replicated=True)
            manager.load()
            managers[node_id] = manager
        wanted = None if topics is None else set(topics)
        keys = sorted({
            (log.topic, log.partition)
            for manager in managers.values() for log in manager.partitions()
            if (log.topic in wanted if wanted is not None else log.topic not in INTERNAL_TOPICS)
        })
        mismatches: list[ReplicaMismatch] = []
        bounds: dict[str, tuple[int, int]] = {}
        batches = 0
        compared = 0
        for topic, partition in keys:
            logs = {node_id: log for node_id, manager in managers.items()
                    if (log := manager.partition(topic, partition)) is not None}
            if len(logs) < 2:
                continue
            compared += 1
            bound = min(log.high_watermark for log in logs.values())
            start = max(log.log_start_offset for log in logs.values())
            bounds[f"{topic}-{partition}"] = (bound, max(log.high_watermark for log in logs.values()))
            replicas = {node_id: _read(log, start, bound) for node_id, log in logs.items()}
            found = _differences(topic, partition, replicas, bound)
            mismatches += found
            batches += min(len(r.batches) for r in replicas.values())
        return ReplicaComparison(compared, batches, bounds, mismatches)
    finally:
        for manager in managers.values():
            manager.close()


def _read(log, start: int, bound: int) -> _Replica:
    identities: list[BatchIdentity] = []
    offset = start
    problem = None
    while offset < bound:
        try:
            result = log.read(offset, READ_BYTES, upper_bound=bound)
            headers = parse_batches(result.records, verify_crc=True)
        except (CorruptRecordError, LogError, OSError, ValueError) as error:
            problem = f"cannot read from offset {offset}: {error}"
            break
        if not headers:
            problem = f"no batch at offset {offset}, below the bound {bound}"
            break
        for header in headers:
            identities.append(BatchIdentity(header.base_offset, header.last_offset, header.partition_leader_epoch,
                                            header.crc, header.producer_id, header.producer_epoch,
                                            header.is_control))
        offset = headers[-1].next_offset
    return _Replica(log.log_start_offset, log.high_watermark, log.log_end_offset, identities, problem)


def _differences(topic: str, partition: int, replicas: Mapping[int, _Replica], bound: int) -> list[ReplicaMismatch]:
    found = [ReplicaMismatch(topic, partition, f"node {node_id}: {replica.problem}")
             for node_id, replica in replicas.items() if replica.problem is not None]
    (reference_node, reference), *others = sorted(replicas.items())
    for node_id, replica in others:
        difference = _first_difference(reference.batches, replica.batches)
        if difference is None:
            continue
        index, left, right = difference
        found.append(ReplicaMismatch(
            topic, partition,
            f"below the smallest high watermark {bound}, batch #{index} differs: node {reference_node} has "
            f"{left or 'nothing'}, node {node_id} has {right or 'nothing'} (high watermark / log end offset: "
            + ", ".join(f"node {n} {r.high_watermark}/{r.log_end_offset}" for n, r in sorted(replicas.items()))
            + ")",
        ))
    return found


def _first_difference(left: list[BatchIdentity], right: list[BatchIdentity]):
    for index in range(max(len(left), len(right))):
        a = left[index] if index < len(left) else None
        b = right[index] if index < len(right) else None
        if a != b:
            return index, a, b
    return None

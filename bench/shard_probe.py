"""What shards as nodes of a local cluster would give today (issue 42, before shards exist).

    python bench/shard_probe.py [--shards 2] [--messages 100000] [--runs 2] [--client wire|confluent]

Runs scenario 3c's load (16 confluent-kafka transactional producers, a commit every 10
records of 1 KB; `loadgen.py produce`) and 3p's (the same over 4 of 8 partitions per
transaction; at least one partition per shard, the same for both; `--client wire`:
`loadgen.py wire-txn`, the same transactions as raw requests from a client of half the
CPU, so that the brokers get the cores) against a local
cluster of 1 node and of `--shards` nodes, in alternating
order, each cluster new: node 1 runs the one etcd member (process.roles=broker,controller),
the others are broker-only nodes on it. Every partition and internal topic has one
replica (RF 1), placed round-robin over the nodes, as shards would hold them. Prints, per
run and per node count, commits/s, the brokers' CPU per transaction (summed over every
node; the etcd member, a child of node 1, not counted), the client's CPU per transaction
and commit p50, and the ratio of N nodes to 1 in the same run.

This measures the simplest shard design (docs/shards-design.md): what cross-node
transactions cost on the paths cluster mode has today (KIP-890 verification and
WriteTxnMarkers between nodes), with no shard-specific change.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from oncelog.local.cluster import ClusterProcess, node_configs  # noqa: E402

ONE_REPLICA = {"offsets.topic.replication.factor": "1", "transaction.state.log.replication.factor": "1",
               "transaction.state.log.min.isr": "1", "min.insync.replicas": "1", "default.replication.factor": "1"}
LOADS = {"3c": (1, 0), "3p": (8, 4)}  # scenario: (partitions, partitions per transaction; 0: one)
TOPIC = "bench-shard-probe"


def shard_configs(base: Path, nodes: int) -> dict[int, dict[str, str]]:
    """Node 1 with the one etcd member, the others broker-only nodes on it."""
    configs = node_configs(base, nodes, overrides=ONE_REPLICA)
    voter = configs[1]["controller.quorum.voters"].split(",")[0]
    peer = configs[1]["controller.quorum.peers"].split(",")[0]
    for node_id, config in configs.items():
        config["controller.quorum.voters"], config["controller.quorum.peers"] = voter, peer
        if node_id != 1:
            config["process.roles"] = "broker"
    return configs


def cpu_seconds(pids: list[int]) -> float:
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / ticks  # utime + stime
    return total


def loadgen(*args: object) -> dict:
    done = subprocess.run([sys.executable, str(REPO / "bench" / "loadgen.py"), *map(str, args)],
                          capture_output=True, text=True, check=True, cwd=REPO)
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_once(scenario: str, nodes: int, messages: int, shards: int, client: str) -> dict[str, float]:
    """One run; the topic has as many partitions for 1 node as for `shards` (at least one per shard)."""
    partitions, spread = LOADS[scenario]
    base = Path(tempfile.mkdtemp(prefix="oncelog-shard-probe-"))
    with ClusterProcess(base, node_settings=shard_configs(base, nodes)) as cluster:
        bootstrap = cluster.bootstrap_servers
        loadgen("create-topic", "--bootstrap", bootstrap, "--topic", TOPIC, "--partitions", max(partitions, shards))
        pids = [node.process.pid for node in cluster.nodes.values() if node.process is not None]
        before, started = cpu_seconds(pids), time.monotonic()
        common = ("--bootstrap", bootstrap, "--topic", TOPIC, "--messages", messages, "--size", 1024,
                  "--transactional-id", f"probe-{nodes}", "--transaction-size", 10, "--producers", 16,
                  "--spread", spread)
        load = loadgen("wire-txn", *common) if client == "wire" else loadgen("produce", *common, "--acks", "all")
        used = cpu_seconds(pids) - before
    transactions = load["transactions"]
    return {"commits_per_s": transactions / load["seconds"], "broker_cpu_us_per_txn": used * 1e6 / transactions,
            "client_cpu_us_per_txn": load["client_cpu_s"] * 1e6 / transactions,
            "commit_p50_ms": load["commit_p50_ms"], "wall_s": time.monotonic() - started}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=2, help="nodes to compare with one (default 2)")
    parser.add_argument("--messages", type=int, default=100_000, help="records per run (default 100000)")
    parser.add_argument("--runs", type=int, default=2, help="runs per scenario and node count (default 2)")
    parser.add_argument("--scenarios", nargs="+", default=list(LOADS), choices=list(LOADS))
    parser.add_argument("--client", default="confluent", choices=["confluent", "wire"],
                        help="confluent-kafka's transactional producers (default) or loadgen.py wire-txn")
    args = parser.parse_args()
    for scenario in args.scenarios:
        figures: dict[int, list[dict[str, float]]] = {1: [], args.shards: []}
        for _run in range(args.runs):
            for nodes in (1, args.shards):  # alternating, each cluster new
                figures[nodes].append(run_once(scenario, nodes, args.messages, args.shards, args.client))
                print(json.dumps({"scenario": scenario, "client": args.client, "nodes": nodes,
                                  **{k: round(v, 1) for k, v in figures[nodes][-1].items()}}), flush=True)
        median = {nodes: {key: statistics.median(run[key] for run in runs) for key in runs[0]}
                  for nodes, runs in figures.items()}
        one, many = median[1], median[args.shards]
        print(f"{scenario} ({args.client} client): {one['commits_per_s']:,.0f} commits/s on 1 node, "
              f"{many['commits_per_s']:,.0f} on "
              f"{args.shards} ({many['commits_per_s'] / one['commits_per_s']:.2f}x); broker CPU per transaction "
              f"{one['broker_cpu_us_per_txn']:,.0f} and {many['broker_cpu_us_per_txn']:,.0f} us "
              f"({many['broker_cpu_us_per_txn'] / one['broker_cpu_us_per_txn']:.2f}x); client CPU per transaction "
              f"{one['client_cpu_us_per_txn']:,.0f} and {many['client_cpu_us_per_txn']:,.0f} us", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

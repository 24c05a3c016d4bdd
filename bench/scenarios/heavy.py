"""Scenario 9: another client's round trips while one principal sends requests of a
million items (issue 38: one 10 MB Metadata request naming 1,000,000 topics held the
event loop for 8.2 s, and an unrelated client's ApiVersions waited 7.6 s).

The broker: a SASL_PLAINTEXT listener with PLAIN users, Kafka's StandardAuthorizer,
`allow.everyone.if.no.acl.found=false`. The attacker (`bench/heavy_requests.py attack`,
its own process) is a principal with no ACLs; it sends, one after the other, Metadata
naming 1,000,000 topics, ListOffsets of 1,000,000 partitions, OffsetFetch of 1,000,000
partitions, DescribeConfigs of 1,000,000 topics and CreateTopics of 1,000,000 topics
(`--messages` sets the count). The prober (another process), a super user, sends an
ApiVersions and a one-record Produce every 5 ms on connections of its own. Reported:
the prober's round trips while an attack is in progress, p50 and p99 of each kind, the
largest, and each attack's p99; the prober's p99 before the attacks, for reference;
and how long the attacks took. The issue's target: p99 under 100 ms.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from bench.peers import ONCELOG
from bench.scenarios.base import Metric, Scenario, ScenarioFailed, Settings, running
from oncelog.local.process import free_port

SCRIPT = Path(__file__).resolve().parent.parent / "heavy_requests.py"
# Each attack, with its name as the table prints it (18 characters a label).
APIS = {"Metadata": "Metadata", "ListOffsets": "ListOffsets", "OffsetFetch": "OffsetFetch",
        "DescribeConfigs": "DescConfigs", "CreateTopics": "CreateTopics"}
USERS = {"admin": "admin-secret", "mallory": "mallory-secret"}


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))]


class HeavyRequestsScenario(Scenario):
    id = "9"
    title = "others' round trips, 1M-item requests"
    supports_baseline = True
    peers = (ONCELOG,)
    metrics = (
        Metric("api_versions_p50_ms", "ApiVersions p50 ms", higher_is_better=False),
        Metric("api_versions_p99_ms", "ApiVersions p99 ms", higher_is_better=False, target=("<=", 100)),
        Metric("produce_p50_ms", "Produce p50 ms", higher_is_better=False),
        Metric("produce_p99_ms", "Produce p99 ms", higher_is_better=False, target=("<=", 100)),
        Metric("max_ms", "slowest ms", higher_is_better=False),
        *(Metric(f"{api.lower()}_p99_ms", f"p99 ms {label}", higher_is_better=False) for api, label in APIS.items()),
        Metric("idle_p99_ms", "p99 ms no attack", higher_is_better=False),
        Metric("attack_s", "attacks took s", higher_is_better=False),
    )

    def run_once(self, peer: str, settings: Settings) -> dict[str, float]:
        items = 20_000 if settings.quick else 1_000_000
        sasl_port = free_port()
        jaas = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
                + " ".join(f'user_{user}="{password}"' for user, password in USERS.items()) + ";")
        config = {
            "listeners": f"PLAINTEXT://127.0.0.1:{{port}},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
            "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin",
            "allow.everyone.if.no.acl.found": "false",
        }
        work = Path(settings.work_dir) / f"heavy-{time.time_ns()}"
        work.mkdir(parents=True)
        ready, go, stop = work / "ready", work / "go", work / "stop"
        with running(peer, settings, config):
            bootstrap = f"127.0.0.1:{sasl_port}"
            attacker = subprocess.Popen(
                [sys.executable, str(SCRIPT), "attack", "--bootstrap", bootstrap, "--user", "mallory",
                 "--password", USERS["mallory"], "--items", str(items), "--ready", str(ready), "--go", str(go)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            prober = None
            try:
                _wait_for(ready, attacker, timeout=600)
                prober = subprocess.Popen(
                    [sys.executable, str(SCRIPT), "probe", "--bootstrap", bootstrap, "--user", "admin",
                     "--password", USERS["admin"], "--topic", "probed", "--stop", str(stop)],
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                time.sleep(2)  # round trips before the attacks, for reference
                go.write_text("go")
                attacks = _result(attacker, timeout=900)["attacks"]
                time.sleep(0.2)
                stop.write_text("stop")
                samples = _result(prober, timeout=60)["samples"]
            finally:
                stop.write_text("stop")
                for process in (attacker, prober):
                    if process is not None and process.poll() is None:
                        process.kill()
        return _figures(attacks, samples)


def _figures(attacks: list[dict], samples: list[list]) -> dict[str, float]:
    def during(sample: list, attack: dict) -> bool:
        return attack["start"] <= sample[0] <= attack["end"]

    attacked = [sample for sample in samples if any(during(sample, attack) for attack in attacks)]
    before = [sample[2] for sample in samples if sample[0] < attacks[0]["start"]]
    figures: dict[str, float] = {}
    for kind in ("api_versions", "produce"):
        values = [sample[2] for sample in attacked if sample[1] == kind]
        if not values:
            raise ScenarioFailed(f"no {kind} round trip completed during the attacks")
        figures[f"{kind}_p50_ms"] = _percentile(values, 0.5)
        figures[f"{kind}_p99_ms"] = _percentile(values, 0.99)
    figures["max_ms"] = max(sample[2] for sample in attacked)
    for attack in attacks:
        values = [sample[2] for sample in attacked if during(sample, attack)]
        if values:
            figures[f"{attack['api'].lower()}_p99_ms"] = _percentile(values, 0.99)
    if before:
        figures["idle_p99_ms"] = _percentile(before, 0.99)
    figures["attack_s"] = sum(attack["end"] - attack["start"] for attack in attacks)
    return figures


def _wait_for(path: Path, process: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if process.poll() is not None:
            error = process.stderr.read() if process.stderr is not None else ""
            raise ScenarioFailed(f"the attacker exited before it was ready: {error[-1500:]}")
        if time.monotonic() > deadline:
            raise ScenarioFailed("the attacker did not build its requests in time")
        time.sleep(0.05)


def _result(process: subprocess.Popen, timeout: float) -> dict:
    mode = str(list(process.args)[2])  # type: ignore[arg-type]
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        raise ScenarioFailed(f"{mode} timed out after {timeout:.0f} s") from None
    if process.returncode != 0:
        raise ScenarioFailed(f"{mode} failed: {(err or out)[-1500:]}")
    return json.loads(out.strip().splitlines()[-1])


HEAVY_REQUESTS = HeavyRequestsScenario()

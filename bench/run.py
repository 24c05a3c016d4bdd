#!/usr/bin/env python
"""oncelog benchmarks: run scenarios against oncelog and its peers, print medians and
ratios, write bench/results/latest.json.

    python bench/run.py                       every available scenario, 5 runs each
    python bench/run.py --quick               smoke run of every scenario (~2 minutes)
    python bench/run.py --scenarios 1 2 --runs 9
    python bench/run.py --full                also 7r: recovery after kill -9 with ~1 GB
    python bench/run.py --scenarios 2 --profile   py-spy the broker under load
    python bench/run.py --scenarios 2w --baseline-src ../old/src   before/after a change

Figures are medians over runs; the machine is shared, so read ratios against peers
measured in the same run rather than absolute numbers. See bench/README.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # `bench` as a package when run as a script

from bench import peers
from bench.peers import BASELINE, ONCELOG, ONCELOG_3, TANSU
from bench.scenarios import BY_ID, SCENARIOS
from bench.scenarios.base import Scenario, Settings

RESULTS_DIR = REPO / "bench" / "results"


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    selected = _select(args.scenarios)
    work_dir = Path(tempfile.mkdtemp(prefix="oncelog-bench-", dir=args.work_dir))
    settings = Settings(
        work_dir=work_dir,
        results_dir=RESULTS_DIR,
        runs=args.runs,
        messages=args.messages,
        value_size=args.value_size,
        partitions=args.partitions,
        quick=args.quick,
        full=args.full,
        recovery_bytes=args.recovery_mb << 20,
        with_peers=not args.no_peers,
        profile=args.profile,
        baseline_src=Path(args.baseline_src).resolve() if args.baseline_src else None,
    )
    started = time.time()
    report: dict = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": _machine(),
        "settings": {
            "runs": settings.runs, "messages": settings.messages, "value_size": settings.value_size,
            "partitions": settings.partitions, "quick": settings.quick, "full": settings.full,
            "peers": settings.with_peers,
            "baseline_src": str(settings.baseline_src) if settings.baseline_src else None,
        },
        "limits": {},
        "scenarios": {},
    }
    try:
        runnable = []
        for scenario in selected:
            reason = _skip_reason(scenario, settings)
            if reason is None:
                runnable.append(scenario)
            else:
                report["scenarios"][scenario.id] = {
                    "title": scenario.title, "status": "not available", "reason": reason,
                }
        if not args.no_limits and any(s.compare_with_limits for s in runnable):
            report["limits"] = _measure_limits(settings, work_dir)
        for scenario in runnable:
            report["scenarios"][scenario.id] = _run_scenario(scenario, settings)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    report["elapsed_s"] = round(time.time() - started, 1)
    report["profiles"] = settings.profiles
    _add_comparisons(report, {s.id: s for s in selected})
    _add_cross_targets(report)
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2) + "\n")
    print(_table(report, {s.id: s for s in selected}))
    print(f"\nwrote {output} ({report['elapsed_s']} s)")
    failed = any(r.get("status") == "failed" for r in report["scenarios"].values())
    return 1 if failed else 0


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenarios", nargs="+", metavar="ID",
                        help=f"scenario ids (default: all): {', '.join(BY_ID)}")
    parser.add_argument("--runs", type=int, help="runs per scenario and peer (default 5, --quick 1)")
    parser.add_argument("--messages", type=int, help="records per produce/consume run (default 300000, --quick 50000)")
    parser.add_argument("--quick", action="store_true", help="smoke run: fewer runs and records")
    parser.add_argument("--full", action="store_true", help="include heavy scenarios (7r recovery of ~1 GB)")
    parser.add_argument("--recovery-mb", type=int, default=1024, help="log size for 7r (default 1024)")
    parser.add_argument("--value-size", type=int, default=1024, help="record value bytes (default 1024)")
    parser.add_argument("--partitions", type=int, default=1, help="partitions of the benchmark topics (default 1)")
    parser.add_argument("--no-peers", action="store_true", help="measure oncelog only (no tansu)")
    parser.add_argument("--no-limits", action="store_true", help="skip the loopback, page cache and disk limits")
    parser.add_argument("--profile", action="store_true",
                        help="py-spy the oncelog broker during each load (bench/results/profiles/)")
    parser.add_argument("--baseline-src", metavar="SRC_DIR",
                        help="also run the oncelog in SRC_DIR (another checkout's src/) as peer 'baseline', "
                             "interleaved with this one, to measure a change")
    parser.add_argument("--work-dir", help="where brokers keep their logs (default: the system temp dir)")
    parser.add_argument("--output", default=str(RESULTS_DIR / "latest.json"))
    args = parser.parse_args(argv)
    if args.runs is None:
        args.runs = 1 if args.quick else 5
    if args.messages is None:
        args.messages = 50_000 if args.quick else 300_000
    if args.runs < 1 or args.messages < 1:
        parser.error("--runs and --messages must be positive")
    return args


def _select(ids: list[str] | None) -> list[Scenario]:
    if not ids:
        return list(SCENARIOS)
    wanted = [part for value in ids for part in value.split(",") if part]
    unknown = [i for i in wanted if i not in BY_ID]
    if unknown:
        sys.exit(f"unknown scenario(s) {', '.join(unknown)}; known: {', '.join(BY_ID)}")
    return [s for s in SCENARIOS if s.id in wanted]


def _skip_reason(scenario: Scenario, settings: Settings) -> str | None:
    if scenario.full_only and not settings.full:
        return "heavy: runs only with --full"
    return scenario.unavailable_reason(settings)


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _measure_limits(settings: Settings, work_dir: Path) -> dict:
    size = (256 if settings.quick else 1024) << 20
    limits = {}
    for name, measure in (("loopback", lambda: peers.loopback_limit(size)),
                          ("pagecache", lambda: peers.page_cache_limit(work_dir, size // 2)),
                          ("disk", lambda: peers.disk_limit(work_dir, size // 2))):
        runs = [measure()["mb_per_s"] for _ in range(1 if settings.quick else 3)]
        limits[name] = {"mb_per_s": statistics.median(runs), "runs": runs}
        _progress(f"limit {name}: {limits[name]['mb_per_s']:,.0f} MB/s")
    return limits


def _run_scenario(scenario: Scenario, settings: Settings) -> dict:
    # --no-peers leaves out other brokers (tansu), not oncelog's own cluster (scenario 2r).
    peer_names = [p for p in scenario.peers if settings.with_peers or p in (ONCELOG, ONCELOG_3)]
    if settings.baseline_src is not None and scenario.supports_baseline:
        peer_names.insert(1, BASELINE)
    results: dict[str, list[dict]] = {p: [] for p in peer_names}
    errors: dict[str, list[str]] = {p: [] for p in peer_names}
    _progress(f"scenario {scenario.id}: {scenario.title}")

    def record(peer: str, run, *args) -> None:
        try:
            figures = run(*args)
        except peers.PeerUnavailable as error:
            errors[peer].append(f"peer unavailable: {error}")
            return
        except Exception as error:  # noqa: BLE001 (a failed run is reported, the others go on)
            errors[peer].append(f"{type(error).__name__}: {error}")
            _progress(traceback.format_exc(limit=3))
            return
        for one in figures if isinstance(figures, list) else [figures]:
            results[peer].append(one)
            headline = scenario.metrics[0]
            _progress(f"  {peer:9} run {len(results[peer])}/{settings.runs}: "
                      f"{_number(one.get(headline.key))} {headline.label}")

    if type(scenario).run_all is not Scenario.run_all:  # shares one setup across runs
        for peer in peer_names:
            record(peer, scenario.run_all, peer, settings, settings.runs)
    else:
        for _ in range(settings.runs):
            for peer in peer_names:  # interleaved, so load from others hits peers alike
                if errors[peer] and errors[peer][-1].startswith("peer unavailable"):
                    continue
                record(peer, scenario.run_once, peer, settings)
    summary: dict = {"title": scenario.title, "peers": {}}
    for peer in peer_names:
        entry: dict = {"runs": results[peer], "errors": errors[peer], "metrics": {}}
        for metric in scenario.metrics:
            values = [r[metric.key] for r in results[peer] if metric.key in r]
            if values:
                entry["metrics"][metric.key] = {
                    "median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values),
                }
        summary["peers"][peer] = entry
    ours = summary["peers"][ONCELOG]
    summary["status"] = "ok" if ours["metrics"] and not ours["errors"] else ("partial" if ours["metrics"] else "failed")
    return summary


def _add_comparisons(report: dict, scenarios: dict[str, Scenario]) -> None:
    """Ratios of our medians to the peers' and to the limits, and targets met."""
    limits = report["limits"]
    for scenario_id, summary in report["scenarios"].items():
        if "peers" not in summary:
            continue
        scenario = scenarios[scenario_id]
        ours = summary["peers"].get(ONCELOG, {}).get("metrics", {})
        comparisons = {}
        for peer in (TANSU, BASELINE):
            theirs = summary["peers"].get(peer, {}).get("metrics", {})
            for metric in scenario.metrics:
                if metric.key in ours and metric.key in theirs and theirs[metric.key]["median"]:
                    comparisons[f"{metric.key}_vs_{peer}"] = ours[metric.key]["median"] / theirs[metric.key]["median"]
        # oncelog's own cluster over the single broker (scenario 2r: "3 brokers vs 1"),
        # the other way round from the peers above.
        cluster = summary["peers"].get(ONCELOG_3, {}).get("metrics", {})
        for metric in scenario.metrics:
            if metric.key in ours and metric.key in cluster and ours[metric.key]["median"]:
                comparisons[f"{metric.key}_{ONCELOG_3}_over_{ONCELOG}"] = (
                    cluster[metric.key]["median"] / ours[metric.key]["median"])
        if "mb_per_s" in ours:
            for limit in scenario.compare_with_limits:
                if limit in limits:
                    comparisons[f"mb_per_s_vs_{limit}"] = ours["mb_per_s"]["median"] / limits[limit]["mb_per_s"]
        targets = {}
        for metric in scenario.metrics:
            if metric.target is not None and metric.key in ours:
                targets[metric.key] = {
                    "target": f"{metric.target[0]} {metric.target[1]:g}",
                    "median": ours[metric.key]["median"],
                    "met": metric.meets(ours[metric.key]["median"]),
                }
        if "msg_per_s_vs_tansu" in comparisons and scenario_id in ("1", "2"):
            targets["ahead_of_tansu"] = {"target": "> 1.0 x tansu", "median": comparisons["msg_per_s_vs_tansu"],
                                         "met": comparisons["msg_per_s_vs_tansu"] > 1.0}
        summary["comparisons"] = comparisons
        summary["targets"] = targets


# The targets that compare two of our own scenarios in the same run:
# (numerator scenario, denominator scenario, at least this fraction).
CROSS_TARGETS = (
    ("2", "1", 0.90),   # idempotent acks=all vs plain acks=1: "close to 1", the check is per batch
    ("4", "2", 0.90),   # transactions every 1000 records vs idempotent produce
    ("3", "2", 0.40),   # transactions every 10 records (one producer) vs idempotent produce
    ("3c", "2", 0.40),  # the same from 16 producers at once
    ("5c", "5", 0.90),  # read_committed vs read_uncommitted consume
)


def _add_cross_targets(report: dict) -> None:
    """`report["cross_targets"]`: our msg/s medians of one scenario over another's."""
    found = []
    for numerator, denominator, fraction in CROSS_TARGETS:
        medians = []
        for scenario_id in (numerator, denominator):
            metric = (report["scenarios"].get(scenario_id, {}).get("peers", {}).get(ONCELOG, {})
                      .get("metrics", {}).get("msg_per_s"))
            medians.append(None if metric is None else metric["median"])
        if None in medians or not medians[1]:
            continue
        ratio = medians[0] / medians[1]
        found.append({"scenario": numerator, "over": denominator, "ratio": ratio, "target": fraction,
                      "met": ratio >= fraction})
    report["cross_targets"] = found


def _number(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


def _table(report: dict, scenarios: dict[str, Scenario]) -> str:
    machine = report["machine"]
    lines = [
        (f"oncelog benchmarks {report['date']} on {machine['cpu']} ({machine['cores']} cores), "
         f"{report['settings']['runs']} run(s), {report['settings']['messages']:,} x "
         f"{report['settings']['value_size']} B records"),
    ]
    if report["limits"]:
        lines.append("limits (median, runs' range): " + ", ".join(
            f"{name} {_number(v['mb_per_s'])} MB/s ({_number(min(v['runs']))}-{_number(max(v['runs']))})"
            for name, v in report["limits"].items()))
    header = f"{'scenario':<44} {'peer':<9} {'metric':<18} {'median':>10} {'min':>10} {'max':>10} {'n':>3}"
    lines += ["", header, "-" * len(header)]
    notes = []
    for scenario_id, summary in report["scenarios"].items():
        title = f"{scenario_id:>2} {summary['title']}"
        if "peers" not in summary:
            lines.append(f"{title[:44]:<44} {'-':<9} {summary['status']}: {summary['reason']}")
            continue
        scenario = scenarios[scenario_id]
        for peer, entry in summary["peers"].items():
            for metric in scenario.metrics:
                m = entry["metrics"].get(metric.key)
                if m is None:
                    continue
                lines.append(f"{title[:44]:<44} {peer:<9} {metric.label[:18]:<18} {_number(m['median']):>10} "
                             f"{_number(m['min']):>10} {_number(m['max']):>10} {m['n']:>3}")
                title = ""
            for error in entry["errors"]:
                notes.append(f"{scenario_id} {peer}: {error}")
        ratios = ", ".join(f"{key.replace('_', ' ')} {value:.2f}x" for key, value in summary["comparisons"].items())
        if ratios:
            lines.append(f"{'':<44} ratios: {ratios}")
        for key, target in summary["targets"].items():
            verdict = {True: "met", False: "NOT met", None: "-"}[target["met"]]
            lines.append(f"{'':<44} target {key} {target['target']}: {_number(target['median'])} -> {verdict}")
    if report.get("cross_targets"):
        lines += ["", "ours over ours (msg/s medians, same run):"]
        for entry in report["cross_targets"]:
            verdict = "met" if entry["met"] else "NOT met"
            lines.append(f"  {entry['scenario']:>2} / {entry['over']:<2} {entry['ratio']:.2f}  "
                         f"target >= {entry['target']:.2f} -> {verdict}")
    if notes:
        lines += ["", "errors:"] + [f"  {note}" for note in notes]
    lines.append("\nmedians of noisy runs on a shared machine: compare ratios, not absolute figures")
    return "\n".join(lines)


def _machine() -> dict:
    cpu = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        from confluent_kafka import libversion

        client = f"confluent-kafka (librdkafka {libversion()[0]})"
    except ImportError:
        client = "confluent-kafka missing"
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "client": client,
        "load_average_at_start": os.getloadavg(),
    }


if __name__ == "__main__":
    sys.exit(main())

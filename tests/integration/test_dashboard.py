"""docs/grafana/oncelog-dashboard.json and docs/prometheus-alerts.yml stay true to the
broker: both parse, the dashboard is an importable Grafana dashboard, every alert has what
Alertmanager and its runbook in docs/alerts.md need, and every metric name in their PromQL
is one the broker really exports, with the labels it really has.

The names are checked against a scrape of an embedded broker with `http.listener` after a
little traffic (a topic, a committed transaction, a group's offset commit), plus what the
same collector exports in cluster mode, fed a cluster snapshot (a real cluster would need
etcd and take far longer), plus the families of the pipeline runner's own /metrics
(`oncelog pipeline run --metrics-port`). Families still being added (issue 20: the
pipelines' `oncelog_pipeline_*`, `kafka_network_request_errors`, the log flushes) are
checked against docs/metrics.md while the code does not export them, and against the
names in PENDING while docs/metrics.md does not name them either (with a warning)."""

from __future__ import annotations

import asyncio
import importlib
import json
import re
import socket
import urllib.request
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from oncelog import EmbeddedBroker
from oncelog.broker.metrics import BrokerSnapshot, ClusterSnapshot, _BrokerCollector
from oncelog.cluster.replica_manager import FollowerLag, ReplicationSnapshot

DOCS = Path(__file__).resolve().parents[2] / "docs"
DASHBOARD = DOCS / "grafana" / "oncelog-dashboard.json"
ALERTS = DOCS / "prometheus-alerts.yml"
ALERTS_DOC = DOCS / "alerts.md"
METRICS_DOC = DOCS / "metrics.md"

TARGET_LABELS = {"job", "instance"}  # attached by Prometheus to every scraped series
PROMETHEUS_SERIES: dict[str, set[str]] = {"up": set()}  # written by Prometheus itself, per target

# Being added now (issue 20): series name -> labels. The pipelines' as the issue names them,
# but for the records written, which the runner names oncelog_pipeline_sink_records_written.
PENDING_GROUPS = ("oncelog_pipeline_", "kafka_network_request_errors", "kafka_log_logflushstats_")
_PIPELINE_HISTOGRAMS = {"oncelog_pipeline_batch_duration_seconds": {"query", "phase"},
                        "oncelog_pipeline_sink_commit_seconds": {"query"}}
PENDING: dict[str, set[str]] = {
    "kafka_network_request_errors_total": {"request", "error"},
    "oncelog_pipeline_batches_total": {"query"},
    "oncelog_pipeline_input_records_total": {"query"},
    "oncelog_pipeline_input_rows_per_second": {"query"},
    "oncelog_pipeline_processed_rows_per_second": {"query"},
    "oncelog_pipeline_sink_records_written_total": {"query"},
    "oncelog_pipeline_sink_decisions_total": {"query", "outcome"},
    **{f"{name}_bucket": {*labels, "le"} for name, labels in _PIPELINE_HISTOGRAMS.items()},
    **{f"{name}_{suffix}": labels for name, labels in _PIPELINE_HISTOGRAMS.items() for suffix in ("sum", "count")},
    "kafka_log_logflushstats_log_flush_seconds_bucket": {"le"},
    "kafka_log_logflushstats_log_flush_seconds_sum": set(),
    "kafka_log_logflushstats_log_flush_seconds_count": set(),
}

GRAFANA_VARIABLES = {"__rate_interval", "__interval", "__range", "__range_s", "__interval_ms"}
SEVERITIES = {"critical", "warning", "info"}


# -- PromQL ----------------------------------------------------------------------------

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^()]*)\)")
_SELECTOR = re.compile(r"(?<![\w:.])([A-Za-z_:][\w:]*)\s*\{([^{}]*)\}")
_MATCHER_LABEL = re.compile(r"([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)")
_IDENTIFIER = re.compile(r"(?<![\w:.$])[A-Za-z_:][\w:]*")
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left",
             "group_right", "inf", "nan", "atan2"}


@dataclass
class Query:
    """What one PromQL expression refers to."""

    metrics: set[str] = field(default_factory=set)
    selector_labels: dict[str, set[str]] = field(default_factory=dict)  # metric -> labels matched on
    grouping_labels: set[str] = field(default_factory=set)  # by (...), on (...), ...
    variables: set[str] = field(default_factory=set)  # Grafana's $name and ${name}


def parse_promql(expr: str) -> Query:
    """The metric names, label names and Grafana variables of a PromQL expression: every
    identifier outside strings, selectors, ranges and grouping clauses that is not a
    keyword and not followed by "(" (a function or aggregation) is a metric name."""
    query = Query(variables=set(re.findall(r"\$\{?(\w+)", expr)))
    text = _STRING.sub('""', expr)
    text = re.sub(r"\$\{?\w+\}?", "0", text)
    for metric, matchers in _SELECTOR.findall(text):
        query.selector_labels.setdefault(metric, set()).update(_MATCHER_LABEL.findall(matchers))
    text = re.sub(r"\{[^{}]*\}", " ", text)
    text = re.sub(r"\[[^\[\]]*\]", " ", text)
    for _keyword, labels in _GROUPING.findall(text):
        query.grouping_labels.update(label.strip() for label in labels.split(",") if label.strip())
    text = _GROUPING.sub(" ", text)
    for match in _IDENTIFIER.finditer(text):
        name = match.group()
        if name.lower() in _KEYWORDS or text[match.end():].lstrip().startswith("("):
            continue
        query.metrics.add(name)
    return query


def test_parse_promql_finds_metrics_labels_and_variables():
    query = parse_promql(
        'histogram_quantile(0.99, sum by (request, le) (rate(oncelog_network_request_handle_seconds_bucket'
        '{job=~"$job", request!="Fetch"}[$__rate_interval]))) > 0.5 and on (job) up offset 5m '
        'or vector(0) / sum without (topic) (kafka_log_size_bytes{topic=~"a{2}(b|c)"})')
    assert query.metrics == {"oncelog_network_request_handle_seconds_bucket", "up", "kafka_log_size_bytes"}
    assert query.selector_labels == {"oncelog_network_request_handle_seconds_bucket": {"job", "request"},
                                     "kafka_log_size_bytes": {"topic"}}
    assert query.grouping_labels == {"request", "le", "job", "topic"}
    assert query.variables == {"job", "__rate_interval"}


# -- a subset of YAML, for the alert rules when PyYAML is not installed ------------------

_KEY = re.compile(r"([A-Za-z_][\w.-]*):(?: +(.*))?$")


def load_yaml_subset(text: str) -> Any:
    """Block mappings and sequences, `|`, `|-`, `>` and `>-` block scalars, plain and quoted
    scalars, comments on lines of their own: the YAML the alert rules are written in.
    Anything else raises ValueError rather than being read differently from PyYAML."""
    lines = text.splitlines()
    if any("\t" in line[: len(line) - len(line.lstrip())] for line in lines):
        raise ValueError("tabs in indentation")
    start = _skip(lines, 0)
    value, end = _node(lines, start, _indent(lines[start]))
    if _skip(lines, end) != len(lines):
        raise ValueError(f"line {end + 1}: unexpected indentation")
    return value


def _skip(lines: list[str], i: int) -> int:
    while i < len(lines) and (not lines[i].strip() or lines[i].lstrip().startswith("#")):
        i += 1
    return i


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _node(lines: list[str], i: int, indent: int) -> tuple[Any, int]:
    if lines[i].lstrip().startswith("- "):
        items = []
        while i < len(lines) and _indent(lines[i]) == indent and lines[i].lstrip().startswith("- "):
            lines[i] = " " * (indent + 2) + lines[i].lstrip()[2:]  # the item: a node 2 further in
            item, i = _node(lines, i, indent + 2)
            items.append(item)
            i = _skip(lines, i)
        return items, i
    if not _KEY.match(lines[i].strip()):
        raise ValueError(f"line {i + 1}: expected 'key: value' or '- item'")
    mapping: dict[str, Any] = {}
    while i < len(lines) and _indent(lines[i]) == indent and not lines[i].lstrip().startswith("- "):
        match = _KEY.match(lines[i].strip())
        if match is None:
            raise ValueError(f"line {i + 1}: expected 'key: value'")
        key, rest = match[1], (match[2] or "").strip()
        if key in mapping:
            raise ValueError(f"line {i + 1}: duplicate key {key!r}")
        i += 1
        if rest in ("|", "|-", ">", ">-"):
            mapping[key], i = _block_scalar(lines, i, indent, rest)
        elif rest:
            mapping[key] = _scalar(rest, i)
        else:
            i = _skip(lines, i)
            if i == len(lines) or _indent(lines[i]) <= indent:
                raise ValueError(f"line {i}: {key!r} has no value")
            mapping[key], i = _node(lines, i, _indent(lines[i]))
        i = _skip(lines, i)
    return mapping, i


def _block_scalar(lines: list[str], i: int, indent: int, style: str) -> tuple[str, int]:
    body: list[str] = []
    while i < len(lines) and (not lines[i].strip() or _indent(lines[i]) > indent):
        body.append(lines[i])
        i += 1
    while body and not body[-1].strip():
        body.pop()
    if not body:
        return "", i
    margin = _indent(body[0])
    if any(line.strip() and _indent(line) < margin for line in body):
        raise ValueError(f"line {i}: a block scalar's lines must not be less indented than its first")
    texts = [line[margin:] for line in body]
    if style.startswith("|"):
        value = "\n".join(texts)
    else:
        if any(text.startswith(" ") for text in texts):
            raise ValueError(f"line {i}: more-indented lines in a folded scalar")
        value = re.sub(r"(?<!\n)\n(?!\n)", " ", "\n".join(texts)).replace("\n\n", "\n")
    return value + ("" if style.endswith("-") else "\n"), i


def _scalar(text: str, line: int) -> Any:
    if text.startswith('"'):
        return json.loads(text)
    if text.startswith("'"):
        if not text.endswith("'") or len(text) < 2:
            raise ValueError(f"line {line}: unterminated quoted scalar")
        return text[1:-1].replace("''", "'")
    if text[0] in "[{&*!|>%@`" or " #" in text or text.endswith(":") or ": " in text:
        raise ValueError(f"line {line}: not in the YAML subset: {text!r}")
    if re.fullmatch(r"[-+]?\d+", text):
        return int(text)
    return {"true": True, "false": False, "null": None, "~": None}.get(text, text)


def load_alert_rules() -> Any:
    text = ALERTS.read_text()
    rules = load_yaml_subset(text)
    try:
        yaml = importlib.import_module("yaml")
    except ImportError:
        return rules
    assert yaml.safe_load(text) == rules, "PyYAML reads docs/prometheus-alerts.yml differently"
    return rules


def test_the_yaml_subset_reads_the_alert_rules_style():
    text = (
        "# comment\ngroups:\n  - name: g\n    rules:\n      - alert: A\n        expr: |\n          up\n"
        "          == 0\n        for: 1m\n        labels:\n          severity: warning\n        annotations:\n"
        "          summary: \"{{ $labels.instance }} down\"\n          description: >-\n            one\n"
        "            two\n\n            three\n      - alert: B\n        expr: vector(1)\n")
    assert load_yaml_subset(text) == {"groups": [{"name": "g", "rules": [
        {"alert": "A", "expr": "up\n== 0\n", "for": "1m", "labels": {"severity": "warning"},
         "annotations": {"summary": "{{ $labels.instance }} down", "description": "one two\nthree"}},
        {"alert": "B", "expr": "vector(1)"}]}]}
    for bad in ("a: [1, 2]\n", "a: b # comment\n", "a:\nb: 1\n", "a: 1\na: 2\n"):
        with pytest.raises(ValueError):
            load_yaml_subset(bad)


# -- what the broker exports -------------------------------------------------------------

@dataclass
class Exported:
    labels: dict[str, set[str] | None]  # series name -> label names of its samples (None: no sample yet)


def _series(text: str) -> dict[str, set[str] | None]:
    """Series name -> label names, for every family in a Prometheus text exposition,
    families without samples included (their names from the family's type; labels None)."""
    found: dict[str, set[str] | None] = {}
    for family in text_string_to_metric_families(text):
        if family.type == "counter":
            names = [f"{family.name}_total"]
        elif family.type == "histogram":
            names = [f"{family.name}_{suffix}" for suffix in ("bucket", "sum", "count")]
        else:
            names = [family.name]
        for name in names:
            found.setdefault(name, None)
        for sample in family.samples:
            found[sample.name] = (found.get(sample.name) or set()) | set(sample.labels)
    return found


def _cluster_mode_exposition(running: EmbeddedBroker) -> str:
    """What the broker's collector exports in cluster mode: the same collector, on the
    broker's loop, fed a snapshot with replication, the controller and the session."""
    replication = ReplicationSnapshot(partitions=1, leaders=1, under_replicated=0, under_min_isr=0, isr_shrinks=0,
                                      isr_expands=0, follower_lags=(FollowerLag("dash", 0, 2, 0),))
    snapshot = BrokerSnapshot({}, cluster=ClusterSnapshot(replication, True, True, 0))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_BrokerCollector(running.call(asyncio.get_running_loop), lambda: snapshot))
    return generate_latest(registry).decode()


def _pipeline_runner_exposition() -> str:
    """The families of `oncelog pipeline run --metrics-port` (none yet: no query), where
    the runner exports them; "" where it does not yet."""
    try:
        module = importlib.import_module("oncelog.spark.pipeline.metrics")
    except ImportError:
        return ""
    return generate_latest(module.PipelineMetrics("127.0.0.1", 0).registry).decode()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Exported]:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    port = _free_port()
    config = {"http.listener": f"127.0.0.1:{port}", "group.initial.rebalance.delay.ms": "0"}
    with EmbeddedBroker(tmp_path_factory.mktemp("dashboard-broker"), config) as running:
        bootstrap = running.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
        admin.create_topics([NewTopic("dash", 1, 1)])["dash"].result(10)
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "dash-txn", "linger.ms": 0,
                             "log_level": 0})
        producer.init_transactions(10)
        producer.begin_transaction()
        for i in range(3):
            producer.produce("dash", str(i).encode(), partition=0)
        producer.commit_transaction(10)
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "dash-group", "enable.auto.commit": False,
                             "log_level": 0})
        consumer.commit(offsets=[TopicPartition("dash", 0, 1)], asynchronous=False)
        consumer.close()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            text = response.read().decode()
        cluster_text = _cluster_mode_exposition(running)
    labels = _series(text)
    for other in (cluster_text, _pipeline_runner_exposition()):
        for name, names in _series(other).items():
            if labels.get(name) is None:
                labels[name] = names
    yield Exported(labels)


# -- the checks --------------------------------------------------------------------------

def _documented_names() -> set[str]:
    return set(re.findall(r"`([a-z_:][a-z0-9_:]*)`", METRICS_DOC.read_text()))


def check_names(queries: dict[str, Query], exported: Exported, documented: set[str],
                only_named: list[str]) -> list[str]:
    """Problems with the names `queries` use (where -> query). Names of PENDING_GROUPS
    neither exported nor documented yet are accepted when PENDING has them, and added to
    `only_named`."""
    def mentioned(prefix: str) -> bool:
        return any(name.startswith(prefix) for name in (*exported.labels, *documented))

    problems = []
    for where, query in sorted(queries.items()):
        known: dict[str, set[str] | None] = {}  # metric -> its labels (None: not known yet)
        for metric in sorted(query.metrics):
            base = re.sub(r"_(bucket|sum|count)$", "", metric)
            group = next((prefix for prefix in PENDING_GROUPS if metric.startswith(prefix)), None)
            if metric in exported.labels:
                seen = exported.labels[metric]
                known[metric] = seen if seen is not None else PENDING.get(metric)
            elif metric in PROMETHEUS_SERIES:
                known[metric] = set()
            elif group is not None and (metric in documented or base in documented):
                known[metric] = PENDING.get(metric)
            elif group is not None and not mentioned(group) and metric in PENDING:
                known[metric] = PENDING[metric]
                only_named.append(metric)
            else:
                problems.append(f"{where}: {metric} is not exported (broker, cluster mode, pipeline runner)"
                                + (" nor listed in docs/metrics.md" if group else ""))
        for metric, used in sorted(query.selector_labels.items()):
            labels = known.get(metric)
            if labels is not None and not used <= labels | TARGET_LABELS:
                problems.append(f"{where}: {metric} has no label {sorted(used - labels - TARGET_LABELS)}")
        label_sets = [labels for labels in known.values() if labels is not None]
        if len(label_sets) == len(known):  # the labels of every metric of the query are known
            every = set().union(*label_sets, TARGET_LABELS, {"le"})
            if not query.grouping_labels <= every:
                problems.append(f"{where}: no metric of the query has label {sorted(query.grouping_labels - every)}")
    return problems


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def dashboard_queries(dashboard: dict[str, Any]) -> dict[str, Query]:
    queries = {}
    for panel in _panels(dashboard["panels"]):
        for target in panel.get("targets", []):
            query = parse_promql(target["expr"])
            legend = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", target.get("legendFormat", "")))
            query.grouping_labels |= legend  # a legend's labels must come from the query too
            queries[f"panel {panel['title']!r} {target['refId']}"] = query
    for variable in dashboard["templating"]["list"]:
        definition = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
        match = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", definition)
        assert match, f"variable {variable['name']}: expected label_values(selector, label)"
        query = parse_promql(match[1])
        query.grouping_labels.add(match[2])
        queries[f"variable ${variable['name']}"] = query
    return queries


def alert_queries(rules: Any) -> dict[str, Query]:
    return {f"alert {rule['alert']}": parse_promql(rule["expr"])
            for group in rules["groups"] for rule in group["rules"]}


def test_every_metric_in_the_dashboard_and_the_alerts_is_exported_with_those_labels(exported):
    queries = {**dashboard_queries(json.loads(DASHBOARD.read_text())), **alert_queries(load_alert_rules())}
    only_named: list[str] = []
    assert check_names(queries, exported, _documented_names(), only_named) == []
    assert len({metric for query in queries.values() for metric in query.metrics}) > 60
    if only_named:
        warnings.warn(f"not exported nor in docs/metrics.md yet, checked against issue 20's names only: "
                      f"{sorted(set(only_named))}", stacklevel=1)


def test_a_misspelt_name_or_label_fails_the_check(exported):
    dashboard = json.loads(DASHBOARD.read_text())
    queries = dashboard_queries(dashboard)
    for query in queries.values():
        assert not query.metrics & {"oncelog_transactions_complete_total", "oncelog_pipeline_batch_total"}
    misspelt = {
        "exported": parse_promql("rate(oncelog_transactions_complete_total[5m])"),
        "pending": parse_promql("rate(oncelog_pipeline_batch_total[5m])"),
        "suffix": parse_promql("rate(oncelog_producers_fenced[5m])"),  # a counter without _total
        "label": parse_promql('kafka_consumergroup_lag{group="g"}'),
        "by": parse_promql("sum by (topics) (kafka_log_size_bytes)"),
    }
    problems = check_names(misspelt, exported, _documented_names(), [])
    assert [problem.split(":")[0] for problem in problems] == sorted(misspelt), problems


def test_families_being_added_are_checked_against_the_code_then_metrics_md_then_pending():
    used = {"q": parse_promql("rate(oncelog_pipeline_batches_total[5m])")}
    nothing = Exported({})
    only_named: list[str] = []
    assert check_names(used, nothing, set(), only_named) == [] and only_named == ["oncelog_pipeline_batches_total"]
    # once docs/metrics.md names any family of the group, it decides
    assert check_names(used, nothing, {"oncelog_pipeline_batches_total"}, []) == []
    assert check_names(used, nothing, {"oncelog_pipeline_micro_batches_total"}, []) != []
    # once the code exports any of them, the code and the docs decide
    assert check_names(used, Exported({"oncelog_pipeline_batches_total": {"query"}}), set(), []) == []
    assert check_names(used, Exported({"oncelog_pipeline_micro_batches_total": {"query"}}), set(), []) != []


def test_the_dashboard_is_an_importable_grafana_dashboard():
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["schemaVersion"] >= 39 and dashboard["uid"] and dashboard["title"]
    assert dashboard["id"] is None  # Grafana gives it one on import
    [source] = dashboard["__inputs"]
    assert (source["name"], source["type"], source["pluginId"]) == ("DS_PROMETHEUS", "datasource", "prometheus")
    datasource = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
    variables = {variable["name"]: variable for variable in dashboard["templating"]["list"]}
    assert {"job", "instance", "topic"} <= set(variables)
    for variable in variables.values():
        assert variable["type"] == "query" and variable["datasource"] == datasource, variable["name"]
    panels = list(_panels(dashboard["panels"]))
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    rows = [panel["title"] for panel in panels if panel["type"] == "row"]
    assert len(rows) == 7, rows
    areas = []
    for panel in panels:
        x, y, w, h = (panel["gridPos"][key] for key in "xywh")
        assert x >= 0 and w > 0 and x + w <= 24 and h > 0, panel["title"]
        for other, (ox, oy, ow, oh) in areas:
            assert x >= ox + ow or ox >= x + w or y >= oy + oh or oy >= y + h, (panel["title"], other)
        areas.append((panel["title"], (x, y, w, h)))
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == datasource and panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == datasource and target["expr"].strip(), panel["title"]
            for variable in parse_promql(target["expr"]).variables:
                assert variable in variables or variable in GRAFANA_VARIABLES, (panel["title"], variable)
            assert _balanced(target["expr"]), (panel["title"], target["expr"])


def _balanced(expr: str) -> bool:
    depth: list[str] = []
    for char in _STRING.sub('""', expr):
        if char in "([{":
            depth.append(char)
        elif char in ")]}" and (not depth or "([{"[")]}".index(char)] != depth.pop()):
            return False
    return not depth and expr.count('"') % 2 == 0


_DURATION = re.compile(r"(\d+[smhdwy])+|0")


def test_every_alert_has_a_severity_annotations_and_a_runbook_in_alerts_md():
    rules = load_alert_rules()
    doc = ALERTS_DOC.read_text()
    headings = {heading.lower() for heading in re.findall(r"^###\s+(\S+)\s*$", doc, re.MULTILINE)}
    names = []
    for group in rules["groups"]:
        assert group["name"] and group["rules"]
        for rule in group["rules"]:
            name = rule["alert"]
            names.append(name)
            assert set(rule) == {"alert", "expr", "for", "labels", "annotations"}, name
            assert _DURATION.fullmatch(str(rule["for"])), name
            assert rule["labels"]["severity"] in SEVERITIES, name
            assert set(rule["annotations"]) == {"summary", "description"}, name
            assert _balanced(rule["expr"]), name
            assert name.lower() in headings, f"docs/alerts.md has no '### {name}'"
            for anchor in re.findall(r"docs/alerts\.md#([\w-]+)", rule["annotations"]["description"]):
                assert anchor in headings, f"{name}: docs/alerts.md has no #{anchor}"
            expr = " ".join(rule["expr"].split())
            assert expr in " ".join(doc.split()), f"docs/alerts.md does not show {name}'s expression as in the rules"
    assert len(names) == len(set(names)) and len(names) >= 12

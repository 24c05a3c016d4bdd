// The oncelog console: reads /api/console every REFRESH_MS and redraws. On a broker with an
// authorizer the API answers 401 until someone signs in (the form shows first), then shows
// what that principal may describe; a signed-in operator with Cluster ALTER may abort an
// open transaction. Read-only otherwise.
// Every value from the broker reaches the page through textContent (never as HTML):
// transactional ids, group ids and topic names are whatever clients chose.
"use strict";

const REFRESH_MS = 2000;
const STALE_PIPELINE_MS = 60000;
const PAGE_ROWS = 100; // rows per page of every table
// The partitions table is paged by the broker (it may hold 10,000 partitions and more):
// the page asks /api/console for one page, sorted and filtered over all of them. These are
// the names its columns sort by there (null: not sortable).
const PARTITION_SORTS = ["partition", "leader", "log_start_offset", "high_watermark", "last_stable_offset", "lso_lag",
  null, "producers", "open_transactions", "oldest_transaction_age_ms", "size_bytes"];

let lsoChart = null;
let lsoChartKeys = "";
let latest = null;
// Signed in (brokers with an authorizer only): the credentials live in this page's memory
// for its lifetime, never in storage; every action sends them again.
let session = null; // {authorization, principal, mayAbort}
let refreshTimer = null;
let refreshGeneration = 0; // only the latest refresh draws and schedules the next

// Every API request says it is the console's (the broker then sends no Basic challenge, so
// the browser shows this page's form rather than a dialog of its own) and carries the
// credentials once signed in.
function apiHeaders(extra) {
  const headers = { "X-Oncelog-Console": "1", ...(extra || {}) };
  if (session !== null) headers.Authorization = session.authorization;
  return headers;
}

// Internal topics (__consumer_offsets, __transaction_state, _oncelog_pipelines) and the
// Spark sink's marker groups (shown under their pipeline) are hidden unless asked for: they
// are many, and rarely what an operator looks for first.
function showInternal() {
  return document.getElementById("show-internal").checked;
}

function shown(topic) {
  return showInternal() || !topic.startsWith("_");
}

function shownGroup(group) {
  return showInternal() || group.pipeline_query === null;
}

// A pipeline's metrics URL comes from a topic anyone with WRITE on it may write: only an
// http(s) URL becomes a link.
function httpUrl(text) {
  try {
    const url = new URL(text);
    return url.protocol === "http:" || url.protocol === "https:" ? url.href : null;
  } catch (_error) {
    return null;
  }
}

function el(tag, attributes, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "class") node.className = value;
    else node.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function cell(value, numeric) {
  return el("td", { class: numeric ? "num" : null }, value);
}

function flag(text, kind) {
  return el("span", { class: `flag ${kind}` }, text);
}

// Tables marked data-sortable sort by the column whose header was clicked (again: the other
// way); a cell's data-sort (a raw number) is its key when it has one, else its text.
const sortedBy = new Map(); // table id -> {column, descending}

function sortKey(row, column) {
  const td = row.children[column];
  if (td === undefined) return "";
  if (td.dataset.sort !== undefined) return Number(td.dataset.sort);
  const text = td.textContent.trim();
  const number = Number(text.replace(/,/g, ""));
  return text !== "" && text !== "–" && !Number.isNaN(number) ? number : text.toLowerCase();
}

function sortRows(id, rows) {
  const sort = sortedBy.get(id);
  if (sort === undefined) return rows;
  return [...rows].sort((a, b) => {
    const x = sortKey(a, sort.column), y = sortKey(b, sort.column);
    const order = typeof x === typeof y ? (x < y ? -1 : x > y ? 1 : 0) : typeof x === "number" ? -1 : 1;
    return sort.descending ? -order : order;
  });
}

// Every table shows PAGE_ROWS rows at a time, with a pager under it once it has more.
const pages = new Map(); // table id -> the page shown (from 0)
const drawn = new Map(); // table id -> the rows it was last given (a sort or another page draws them again)

function pager(table) {
  let node = table.nextElementSibling;
  if (node === null || !node.classList.contains("pager")) {
    node = el("div", { class: "pager", "data-pager-for": table.id });
    table.after(node);
  }
  return node;
}

// Draws `rows` in table `id`, sorted as its header says and one page of them. `paged`:
// rows already one page of `paged.matching` (the partitions, paged by the broker), whose
// pager calls `paged.turn(page)`.
function fillTable(id, rows, emptyText, columns, paged) {
  const body = document.querySelector(`#${id} tbody`);
  const table = document.getElementById(id);
  drawn.set(id, [rows, emptyText, columns, paged]);
  let total = rows.length, page = paged ? paged.page : pages.get(id) || 0;
  if (!paged) {
    if (table.hasAttribute("data-sortable")) rows = sortRows(id, rows);
    page = Math.min(page, Math.max(Math.ceil(total / PAGE_ROWS) - 1, 0));
    pages.set(id, page);
    rows = rows.slice(page * PAGE_ROWS, (page + 1) * PAGE_ROWS);
  } else {
    total = paged.matching;
  }
  body.replaceChildren(...(rows.length ? rows : [el("tr", { class: "empty" }, el("td", { colspan: columns }, emptyText))]));
  const limit = paged ? paged.limit : PAGE_ROWS;
  const controls = pager(table);
  controls.hidden = total <= limit;
  if (controls.hidden) return;
  const turn = (to) => {
    if (paged) paged.turn(to);
    else { pages.set(id, to); rerender(id); }
  };
  const last = Math.ceil(total / limit) - 1;
  const button = (label, to, name) => {
    const node = el("button", { type: "button", "data-page": name, disabled: to < 0 || to > last || to === page }, label);
    node.addEventListener("click", () => turn(to));
    return node;
  };
  controls.replaceChildren(button("« first", 0, "first"), button("‹ previous", page - 1, "previous"),
    el("span", { class: "muted", "data-rows": "" },
      `rows ${count(page * limit + 1)}–${count(Math.min((page + 1) * limit, total))} of ${count(total)}`),
    button("next ›", page + 1, "next"), button("last »", last, "last"));
}

// Draws table `id` again, sorted as its header now says or at another page: the
// partitions are asked of the broker, every other table draws the rows it was last given.
function rerender(id) {
  if (id === "partitions") refreshNow();
  else if (drawn.has(id)) fillTable(id, ...drawn.get(id));
}

// Rows whose cells' text (one space between cells) holds every word typed in the filter box `filterId`.
function matching(rows, filterId) {
  const words = document.getElementById(filterId).value.toLowerCase().split(/\s+/).filter(Boolean);
  const text = (row) => [...row.children].map((td) => td.textContent).join(" ").toLowerCase();
  return words.length ? rows.filter((row) => words.every((word) => text(row).includes(word))) : rows;
}

function sortableHeaders() {
  for (const table of document.querySelectorAll("table[data-sortable]")) {
    [...table.querySelectorAll("thead th")].forEach((th, column) => {
      if (table.id === "partitions" && PARTITION_SORTS[column] === null) return;
      th.classList.add("sortable");
      th.addEventListener("click", () => {
        const sort = sortedBy.get(table.id);
        sortedBy.set(table.id, { column, descending: sort !== undefined && sort.column === column && !sort.descending });
        for (const other of table.querySelectorAll("thead th")) delete other.dataset.sorted;
        th.dataset.sorted = sortedBy.get(table.id).descending ? "descending" : "ascending";
        pages.set(table.id, 0);
        rerender(table.id);
      });
    });
  }
}

function duration(ms) {
  if (ms === null || ms === undefined) return "–";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = ms / 1000;
  if (s < 120) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  const m = s / 60;
  if (m < 120) return `${m.toFixed(0)} min`;
  return `${(m / 60).toFixed(1)} h`;
}

function count(n) {
  return n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US");
}

function bytes(n) {
  const units = ["B", "KB", "MB", "GB", "TB"];
  let value = n, unit = 0;
  while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit++; }
  return `${value.toFixed(unit ? 1 : 0)} ${units[unit]}`;
}

function sparkline(values) {
  const width = 120, height = 22;
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("class", "spark");
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  const known = values.filter((v) => v !== null);
  if (!known.length) return svg;
  const max = Math.max(1, ...known);
  const step = values.length > 1 ? width / (values.length - 1) : width;
  const points = [];
  values.forEach((v, i) => {
    if (v !== null) points.push(`${(i * step).toFixed(1)},${(height - 1 - (v / max) * (height - 3)).toFixed(1)}`);
  });
  const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
  line.setAttribute("points", points.join(" "));
  svg.append(line);
  if (known[known.length - 1] > 0) svg.classList.add("lagging");
  svg.setAttribute("aria-label", `LSO lag from ${known[0]} to ${known[known.length - 1]}`);
  return svg;
}

function renderSummary(data) {
  const open = data.transactions.length;
  const hanging = data.transactions.filter((t) => t.hanging).length;
  const maxLag = data.max_lso_lag; // over every partition, not only the page shown
  const late = data.late_partitions;
  const cards = [
    ["open transactions", count(open), false],
    ["hanging transactions", count(hanging), hanging > 0],
    ["largest LSO lag", count(maxLag), false],
    ["partitions with late transactions", count(late), late > 0],
    ["committed / aborted", `${count(data.completed.commit)} / ${count(data.completed.abort)}`, false],
    ["fenced / timed out", `${count(data.completed.fenced)} / ${count(data.completed.timed_out)}`, false],
    ["consumer groups", count(data.groups.filter((g) => g.pipeline_query === null).length), false],
  ];
  if (data.mode === "cluster") {
    cards.push(["under min ISR", count(data.under_min_isr), data.under_min_isr > 0]);
    cards.push(["under-replicated", count(data.under_replicated), data.under_replicated > 0]);
  }
  document.getElementById("summary").replaceChildren(...cards.map(([label, value, bad]) =>
    el("div", { class: bad ? "card bad" : "card", "data-card": label },
      el("div", { class: "value" }, value), el("div", { class: "label" }, label))));
}

function abortButton(t) {
  if (!session || !session.mayAbort || t.state !== "Ongoing") return null;
  const button = el("button", { type: "button", class: "abort", "data-abort": t.transactional_id }, "Abort");
  button.addEventListener("click", () => abortTransaction(t.transactional_id));
  return button;
}

function renderTransactions(data) {
  const rows = data.transactions.map((t) => el("tr", { class: t.hanging ? "hanging" : null, "data-txn": t.transactional_id },
    el("td", {}, t.transactional_id, " ", t.hanging ? flag("hanging", "hanging") : null,
      t.prepared ? flag("prepared (2PC)", "info") : null),
    cell(t.producer_id, true), cell(t.producer_epoch, true), cell(t.state),
    el("td", { class: "num", "data-sort": t.age_ms }, duration(t.age_ms)),
    el("td", { class: "num", "data-sort": t.prepared ? Number.MAX_SAFE_INTEGER : t.timeout_ms },
      t.prepared ? "none (2PC)" : duration(t.timeout_ms)),
    cell(t.partitions.join(", ") || "–"), el("td", {}, abortButton(t))));
  fillTable("transactions", matching(rows, "transactions-filter"), "No open transactions.", 8);
}

// -- a topic's configs (GET /api/topics/{topic}/configs), and setting one (POST, signed in) --

let configsTopic = null;

async function showTopicConfigs(topic) {
  configsTopic = topic;
  const panel = document.getElementById("topic-configs");
  panel.hidden = false;
  document.getElementById("topic-configs-name").textContent = topic;
  document.getElementById("topic-config-form").hidden = session === null;
  const response = await fetch(`/api/topics/${encodeURIComponent(topic)}/configs`, { cache: "no-store", headers: apiHeaders() });
  const answer = await response.json().catch(() => ({}));
  if (!response.ok) {
    fillTable("topic-configs-table", [], answer.error || response.statusText, 3);
    return;
  }
  fillTable("topic-configs-table", answer.configs.map(configRow), "No configs.", 3);
  panel.dataset.shown = String(Number(panel.dataset.shown || 0) + 1);
}

async function setTopicConfig(event) {
  event.preventDefault();
  if (configsTopic === null || session === null) return;
  const value = document.getElementById("topic-config-value").value;
  const response = await fetch(`/api/topics/${encodeURIComponent(configsTopic)}/configs`, {
    method: "POST", headers: apiHeaders({ "Content-Type": "application/json" }),
    body: JSON.stringify({ name: document.getElementById("topic-config-key").value.trim(), value: value === "" ? null : value }),
  });
  const answer = await response.json().catch(() => ({}));
  showResult(response.ok ? answer.message : `Not changed: ${answer.error}`, !response.ok);
  if (response.ok) showTopicConfigs(configsTopic);
}

let brokerConfigs = null;

function configRow(c) {
  return el("tr", { "data-config": c.name, "data-source": c.source }, cell(c.name),
    cell(c.sensitive ? "(hidden)" : c.value === null ? "null" : c.value), cell(c.source));
}

function renderBrokerConfigs() {
  if (brokerConfigs === null) return;
  fillTable("broker-configs-table", matching(brokerConfigs.map(configRow), "broker-configs-filter"), "No keys.", 3);
}

// In a cluster, the broker chosen (this one until another is): the console asks it for its configs.
function renderBrokerChoice(data) {
  const label = document.getElementById("broker-configs-node-label");
  const select = document.getElementById("broker-configs-node");
  label.hidden = data.mode !== "cluster" || !data.brokers.length;
  if (label.hidden) return;
  const ids = data.brokers.map((b) => String(b.node_id));
  const signature = ids.join(",");
  if (select.dataset.brokers === signature) return;
  const chosen = select.value || String(data.node_id);
  select.replaceChildren(...ids.map((id) => el("option", { value: id, selected: id === chosen },
    id === String(data.node_id) ? `${id} (this broker)` : id)));
  select.dataset.brokers = signature;
}

let brokerConfigsAsked = 0; // only the answer to the latest question is drawn

async function loadBrokerConfigs() {
  if (!document.getElementById("broker-configs").open) return;
  const asked = ++brokerConfigsAsked;
  const chosen = document.getElementById("broker-configs-node").value;
  const query = chosen && latest !== null && chosen !== String(latest.node_id) ? `?broker=${encodeURIComponent(chosen)}` : "";
  const response = await fetch(`/api/broker/configs${query}`, { cache: "no-store", headers: apiHeaders() });
  const answer = await response.json().catch(() => ({}));
  if (asked !== brokerConfigsAsked) return; // the operator chose another broker meanwhile
  brokerConfigs = response.ok ? answer.configs : null;
  if (!response.ok) fillTable("broker-configs-table", [], answer.error || response.statusText, 3);
  renderBrokerConfigs();
  const details = document.getElementById("broker-configs");
  if (response.ok) details.dataset.node = String(answer.node_id);
  details.dataset.loaded = String(Number(details.dataset.loaded || 0) + 1);
}

function renderTopics(data) {
  const rows = data.topics.filter((t) => shown(t.topic)).map((t) => el("tr", { "data-topic": t.topic, class: "clickable" },
    cell(t.topic), cell(count(t.partitions), true), cell(count(t.replication_factor), true),
    el("td", { class: "num", "data-sort": t.size_bytes }, bytes(t.size_bytes)),
    el("td", { class: "num", "data-sort": t.messages_in_per_s }, count(Math.round(t.messages_in_per_s))),
    el("td", { class: "num", "data-sort": t.bytes_in_per_s }, bytes(t.bytes_in_per_s)),
    el("td", { class: "num", "data-sort": t.bytes_out_per_s }, bytes(t.bytes_out_per_s))));
  for (const row of rows) row.addEventListener("click", () => showTopicConfigs(row.dataset.topic));
  fillTable("topics", matching(rows, "topics-filter"), "No topics on this broker.", 7);
}

function renderPartitions(data) {
  const history = data.lso_history.series;
  const rows = data.partitions.map((p) => {
    const key = `${p.topic}-${p.partition}`;
    const placement = p.leader === null ? "this broker" : `${p.leader} / [${p.isr.join(",")}]`;
    return el("tr", { class: p.late ? "late" : null, "data-partition": key },
      cell(key), cell(placement), cell(count(p.log_start_offset), true), cell(count(p.high_watermark), true),
      cell(count(p.last_stable_offset), true),
      el("td", { class: "num" }, count(p.lso_lag), " ", p.late ? flag("late", "bad") : null),
      el("td", {}, sparkline(history[key] || [])),
      cell(count(p.producers), true), cell(count(p.open_transactions), true),
      cell(duration(p.oldest_transaction_age_ms), true),
      el("td", { class: "num", "data-sort": p.size_bytes }, bytes(p.size_bytes)));
  });
  const paged = { ...data.partitions_page, turn: (page) => { pages.set("partitions", page); refreshNow(); } };
  fillTable("partitions", rows, "No partitions on this broker.", 11, paged);
}

function renderLsoChart(data) {
  const container = document.getElementById("lso-chart");
  if (typeof uPlot === "undefined") return;
  const history = data.lso_history;
  const keys = history.charted; // chosen by the broker over every partition: the largest lag in the window
  const chartData = [history.times_ms.map((t) => t / 1000), ...keys.map((k) => history.series[k])];
  const signature = keys.join("\n");
  document.getElementById("lso-chart-empty").hidden = keys.length > 0;
  if (!keys.length) {
    if (lsoChart !== null) lsoChart.destroy();
    lsoChart = null;
    lsoChartKeys = "";
    return;
  }
  if (lsoChart === null || signature !== lsoChartKeys) {
    if (lsoChart !== null) lsoChart.destroy();
    const palette = ["#2a5db0", "#b3261e", "#1f7a4d", "#b76e00", "#7b3fa0", "#00838f", "#6d4c41", "#546e7a"];
    lsoChart = new uPlot({
      width: Math.max(container.clientWidth - 2, 300), height: 220,
      scales: { y: { range: (_u, min, max) => [0, Math.max(max, 1)] } },
      axes: [{}, { label: "records", size: 60 }],
      series: [{}, ...keys.map((k, i) => ({ label: k, stroke: palette[i % palette.length], width: 1.5, spanGaps: false }))],
    }, chartData, container);
    lsoChartKeys = signature;
  } else {
    lsoChart.setData(chartData);
  }
}

// A marker group's offset is the next micro-batch of its sink task: it has no lag.
function renderGroups(data) {
  const rows = [];
  const pipelines = new Map(data.pipelines.map((p) => [p.id, p.name || p.id]));
  for (const g of data.groups.filter(shownGroup)) {
    const offsets = g.offsets.length ? g.offsets : [null];
    const marker = g.pipeline_query !== null;
    for (const o of offsets) { // one row per committed partition, each naming its group: the rows sort
      const stuck = !marker && o && o.lag_stable !== null && o.lag !== null && o.lag > o.lag_stable;
      const name = el("td", {}, g.group_id, " ", marker
        ? flag(`sink marker of ${pipelines.get(g.pipeline_query) || g.pipeline_query}`, "info") : null);
      rows.push(el("tr", { "data-group": g.group_id, class: marker ? "marker" : null },
        name, cell(g.state), cell(count(g.members), true),
        cell(o ? `${o.topic}-${o.partition}` : "–"), cell(o ? count(o.committed) : "–", true),
        cell(o && !marker ? count(o.lag) : "–", true),
        el("td", { class: "num", "data-sort": o && !marker && o.lag_stable !== null ? o.lag_stable : undefined },
          o && !marker ? count(o.lag_stable) : "–", " ",
          stuck ? flag("waits for transactions", "warn") : null)));
    }
  }
  fillTable("groups", matching(rows, "groups-filter"), "No consumer groups coordinated here.", 7);
}

function renderMembers(data) {
  const rows = [];
  for (const g of data.groups.filter(shownGroup)) {
    for (const m of g.member_list) {
      const assigned = m.assignment.map(([topic, partitions]) => `${topic}: ${partitions.join(", ")}`).join("; ");
      rows.push(el("tr", { "data-group": g.group_id, "data-member": m.member_id }, cell(g.group_id), cell(m.member_id),
        cell(m.instance_id || "–"), cell(m.client_id), cell(m.client_host), cell(assigned || "–")));
    }
  }
  fillTable("members", matching(rows, "members-filter"), "No group members.", 6);
}

// -- resetting a group's offsets: a dry run first, then the same plan executed --

let resetPlan = null; // the request of the plan shown, until executed or changed

function resetRequest(dryRun) {
  const to = document.getElementById("reset-to").value;
  const request = {
    group: document.getElementById("reset-group").value.trim(),
    topic: document.getElementById("reset-topic").value.trim(), to, dry_run: dryRun,
  };
  if (to === "timestamp" || to === "offset") request.value = Number(document.getElementById("reset-value").value);
  return request;
}

async function resetOffsets(request) {
  const response = await fetch("/api/groups/reset-offsets", {
    method: "POST", headers: apiHeaders({ "Content-Type": "application/json" }), body: JSON.stringify(request),
  });
  const answer = await response.json().catch(() => ({}));
  const execute = document.getElementById("reset-execute");
  if (!response.ok) {
    resetPlan = null;
    execute.disabled = true;
    fillTable("reset-plan", [], "–", 3);
    showResult(`Not reset: ${answer.error || response.statusText}`, true);
    return;
  }
  fillTable("reset-plan", answer.offsets.map((o) => el("tr", { "data-partition": o.partition },
    cell(`${o.topic}-${o.partition}`), cell(o.current === null ? "–" : count(o.current), true),
    cell(count(o.target), true))), "No partitions.", 3);
  resetPlan = request.dry_run ? { ...request, dry_run: false } : null;
  execute.disabled = resetPlan === null;
  showResult(request.dry_run ? `Planned: ${answer.offsets.length} partition(s); execute to commit the new offsets`
    : `Reset ${answer.offsets.length} partition(s) of ${answer.group}`, false);
  document.getElementById("reset-plan").dataset.shown = String(Number(document.getElementById("reset-plan").dataset.shown || 0) + 1);
}

function renderBrokers(data) {
  const section = document.getElementById("cluster");
  section.hidden = data.mode !== "cluster";
  if (section.hidden) return;
  const rows = data.brokers.map((b) => el("tr", { "data-broker": b.node_id },
    cell(b.node_id, true), cell(`${b.host}:${b.port}`),
    el("td", {}, b.controller ? flag("controller", "info") : "broker"),
    cell(count(b.leaders), true), cell(count(b.replicas), true),
    el("td", { class: "num" }, `${count(b.in_isr)} of ${count(b.replicas)}`, " ",
      b.in_isr < b.replicas ? flag("out of sync", "warn") : null)));
  fillTable("brokers", rows, "No brokers registered.", 6);
}

// The task partitions of a pipeline's marker groups (names.py: <prefix>-<query id>-<task>).
function markerTasks(data, p) {
  return data.groups.filter((g) => g.pipeline_query === p.id)
    .map((g) => Number(g.group_id.slice(g.group_id.lastIndexOf("-") + 1))).sort((a, b) => a - b);
}

function renderPipelines(data) {
  const container = document.getElementById("pipelines");
  const cards = data.pipelines.map((p) => {
    // age_ms: measured by the broker against its own clock (oncelog.web.pipelines), never negative.
    const stale = p.state === "running" && p.age_ms > STALE_PIPELINE_MS;
    const state = stale ? flag("no report for " + duration(p.age_ms), "warn")
      : flag(p.state, p.state === "failed" ? "bad" : p.state === "running" ? "ok" : "info");
    const rate = p.processed_rows_per_second === null || p.processed_rows_per_second === undefined
      ? "–" : `${count(Math.round(p.processed_rows_per_second))} records/s`;
    const fields = [
      ["source → sink", `${p.source_topic} → ${(p.sink_topics || []).concat(p.sink_table ? [`iceberg:${p.sink_table}`] : []).join(", ")}`],
      ["sink mode", p.sink_mode], ["micro-batches", count(p.batches)], ["last batch", p.batch === null ? "–" : p.batch],
      ["records", count(p.records)], ["rate", rate], ["batch duration", duration(p.batch_ms)],
      ["commit latency", duration(p.commit_ms)], ["last report", duration(p.age_ms) + " ago"],
    ];
    const tasks = markerTasks(data, p);
    if (tasks.length) fields.push(["sink marker groups", `${tasks.length} (tasks ${tasks.join(", ")})`]);
    const metrics = httpUrl(p.metrics_url);
    fields.push(["metrics", metrics === null ? "–"
      : el("a", { href: metrics, class: "pipeline-metrics", target: "_blank", rel: "noopener noreferrer" }, metrics)]);
    return el("div", { class: "card pipeline", "data-pipeline": p.id },
      el("h3", {}, p.name || p.id, " ", state),
      el("dl", {}, ...fields.flatMap(([label, value]) => [el("dt", {}, label), el("dd", {}, value)])));
  });
  if (data.pipelines_error) cards.push(el("p", { class: "muted" }, data.pipelines_error));
  container.replaceChildren(...(cards.length ? cards : [el("p", { class: "muted" }, "No pipeline has reported yet.")]));
}

function renderSignIn(data) {
  const enabled = Boolean(data.actions && data.actions.sign_in);
  document.getElementById("sign-in").hidden = !enabled || session !== null;
  document.getElementById("signed-in").hidden = session === null;
  if (session !== null) {
    document.getElementById("signed-in-as").textContent =
      `${session.principal}${session.mayAbort ? "" : " (may not abort transactions)"}`;
  }
}

function showResult(text, isError) {
  const result = document.getElementById("action-result");
  result.hidden = false;
  result.textContent = text;
  result.classList.toggle("error", isError);
}

async function signIn(event) {
  event.preventDefault();
  const user = document.getElementById("sign-in-user").value;
  const password = document.getElementById("sign-in-password").value;
  const authorization = "Basic " + btoa(unescape(encodeURIComponent(`${user}:${password}`)));
  document.getElementById("sign-in-password").value = "";
  const response = await fetch("/api/session", {
    headers: { Authorization: authorization, "X-Oncelog-Console": "1" }, cache: "no-store" });
  const answer = await response.json();
  if (!response.ok) {
    showResult(`Sign-in failed: ${answer.error}`, true);
    return;
  }
  session = { authorization, principal: answer.principal, mayAbort: answer.may_abort };
  document.getElementById("action-result").hidden = true;
  refreshNow();
}

function signOut() {
  session = null;
  clearView();
  refreshNow();
}

// Nothing of the broker is drawn until someone signs in (or after they sign out).
function clearView() {
  latest = null;
  document.getElementById("identity").textContent = "sign in to see this broker";
  document.getElementById("summary").replaceChildren();
  for (const [id, columns] of [["transactions", 8], ["topics", 7], ["partitions", 11], ["groups", 7], ["members", 6], ["brokers", 6],
    ["records", 8], ["reset-plan", 3]]) {
    fillTable(id, [], "Sign in to see this broker.", columns);
  }
  document.getElementById("records-note").textContent = "";
  document.getElementById("records-topics").replaceChildren();
  document.getElementById("records-next").disabled = true;
  recordsNext = null;
  security = null;
  fillTable("acls", [], "Sign in to see this broker.", 7);
  fillTable("quotas", [], "Sign in to see this broker.", 2);
  document.getElementById("security").open = false;
  document.getElementById("topic-configs").hidden = true;
  configsTopic = null;
  brokerConfigs = null;
  document.getElementById("broker-configs").open = false;
  fillTable("broker-configs-table", [], "Sign in to see this broker.", 3);
  document.getElementById("cluster").hidden = true;
  document.getElementById("pipelines").replaceChildren();
  document.getElementById("lso-chart-empty").hidden = false;
  if (lsoChart !== null) lsoChart.destroy();
  lsoChart = null;
  lsoChartKeys = "";
}

// 401 (or 429) from /api/console: the broker wants credentials, or no longer takes these.
function signInRequired(answer) {
  if (session !== null) showResult(`Signed out: ${answer.error || "the broker refused the credentials"}`, true);
  session = null;
  clearView();
  document.getElementById("sign-in").hidden = false;
  document.getElementById("signed-in").hidden = true;
  document.body.dataset.signIn = "required";
}

async function abortTransaction(transactionalId) {
  if (!session || !window.confirm(`Abort the open transaction of ${transactionalId}? Its producer is fenced.`)) return;
  const response = await fetch("/api/transactions/abort", {
    method: "POST",
    headers: apiHeaders({ "Content-Type": "application/json" }),
    body: JSON.stringify({ transactional_id: transactionalId }),
  });
  const answer = await response.json();
  showResult(response.ok ? answer.message : `Not aborted: ${answer.error}`, !response.ok);
}

// -- the message browser: one partition's records with their fate (GET /api/topics/{topic}/records) --

const RECORDS_LIMIT = 100;
const FATE_FLAGS = { committed: "ok", aborted: "bad", open: "warn" };
let recordsNext = null; // the next page's offset, once a page is shown

function hex(base64) {
  return Array.from(atob(base64), (c) => c.charCodeAt(0).toString(16).padStart(2, "0")).join(" ");
}

// A key, value or header value as the format asks: text (hex when it is not UTF-8), JSON
// (pretty when it parses), or hex.
function payload(field, format) {
  if (field === null) return "null";
  const cut = field.truncated ? ` … (${count(field.size)} bytes)` : "";
  if (format === "hex" || field.text === undefined) return hex(field.base64) + cut;
  if (format === "json") {
    try {
      return JSON.stringify(JSON.parse(field.text), null, 2) + cut;
    } catch (_error) {
      return field.text + cut;
    }
  }
  return field.text + cut;
}

function recordRow(r, format) {
  const status = r.control ? flag(`${r.marker} marker`, FATE_FLAGS[r.status] || "info") : FATE_FLAGS[r.status]
    ? flag(r.status, FATE_FLAGS[r.status]) : r.status;
  const headers = r.headers.map((h) => `${h.key}=${payload(h.value, format)}`).join("\n");
  return el("tr", { class: r.control ? "marker" : null, "data-status": r.status, "data-offset": r.offset },
    cell(r.offset, true), cell(new Date(r.timestamp).toISOString()),
    el("td", { class: "payload" }, r.control ? "" : payload(r.key, format)),
    el("td", { class: "payload" }, r.control ? "" : payload(r.value, format)),
    el("td", { class: "payload" }, headers), el("td", null, status),
    cell(r.producer_id < 0 ? "–" : `${r.producer_id} / ${r.producer_epoch}`, true),
    cell(r.marker_offset === null ? "–" : r.marker_offset, true));
}

async function showRecords(offset) {
  const topic = document.getElementById("records-topic").value.trim();
  const note = document.getElementById("records-note");
  const params = new URLSearchParams({
    partition: document.getElementById("records-partition").value || "0",
    offset: String(offset), limit: String(RECORDS_LIMIT),
    isolation: document.getElementById("records-isolation").value,
  });
  for (const [name, id] of [["key", "records-key"], ["contains", "records-contains"]]) {
    const value = document.getElementById(id).value;
    if (value) params.set(name, value); // a search: the records it finds, over a bounded part of the log
  }
  const response = await fetch(`/api/topics/${encodeURIComponent(topic)}/records?${params}`,
    { cache: "no-store", headers: apiHeaders() });
  const answer = await response.json().catch(() => ({}));
  const next = document.getElementById("records-next");
  if (!response.ok) {
    recordsNext = null;
    next.disabled = true;
    note.textContent = answer.error || `${response.status} ${response.statusText}`;
    fillTable("records", [], "No records.", 8);
    return;
  }
  const format = document.getElementById("records-format").value;
  fillTable("records", answer.records.map((r) => recordRow(r, format)), "No records from this offset.", 8);
  note.textContent = `${answer.isolation}: log start ${count(answer.log_start_offset)}, ` +
    `last stable offset ${count(answer.last_stable_offset)}, high watermark ${count(answer.high_watermark)}`;
  const end = answer.isolation === "read_committed" ? answer.last_stable_offset : answer.high_watermark;
  recordsNext = answer.next_offset < end ? answer.next_offset : null;
  next.disabled = recordsNext === null;
  document.getElementById("records").dataset.shown = String(Number(document.getElementById("records").dataset.shown || 0) + 1);
}

function renderRecordTopics(data) {
  const topics = data.topics.map((t) => t.topic).filter(shown);
  document.getElementById("records-topics").replaceChildren(...topics.map((topic) => el("option", { value: topic })));
}

// -- the security views: ACLs and client quotas (GET /api/security), loaded when opened --

let security = null;

function renderSecurity() {
  if (security === null) return;
  const acls = (security.acls || []).map((a) => el("tr", null, cell(a.resource_type), cell(a.name),
    cell(a.pattern_type), cell(a.principal), cell(a.host), cell(a.operation),
    el("td", null, flag(a.permission, a.permission === "ALLOW" ? "ok" : "bad"))));
  const quotas = (security.quotas || []).map((q) => {
    const entity = q.entity.map((e) => `${e.type}=${e.name === null ? "<default>" : e.name}`).join(", ");
    const values = Object.entries(q.values).map(([key, value]) => `${key}=${value}`).join(", ");
    return el("tr", null, cell(entity), cell(values));
  });
  fillTable("acls", matching(acls, "acls-filter"),
    security.acls === null ? (security.authorizer ? "Not yours to see (needs Cluster DESCRIBE)." : "No authorizer: no ACLs.")
      : "No ACLs.", 7);
  fillTable("quotas", matching(quotas, "quotas-filter"),
    security.quotas === null ? "Not yours to see (needs Cluster DESCRIBE_CONFIGS)." : "No client quotas.", 2);
  const shown = security.acls === null ? 0 : security.acls.length;
  document.getElementById("security-note").textContent =
    security.acls_total > shown ? `showing ${count(shown)} of ${count(security.acls_total)} ACLs` : "";
  document.getElementById("security").dataset.loaded = String(Number(document.getElementById("security").dataset.loaded || 0) + 1);
}

async function loadSecurity() {
  if (!document.getElementById("security").open) return;
  const response = await fetch("/api/security", { cache: "no-store", headers: apiHeaders() });
  const answer = await response.json().catch(() => ({}));
  if (!response.ok) {
    security = null;
    document.getElementById("security-note").textContent = answer.error || `${response.status} ${response.statusText}`;
    fillTable("acls", [], "–", 7);
    fillTable("quotas", [], "–", 2);
    return;
  }
  security = answer;
  renderSecurity();
}

function render(data) {
  latest = data;
  renderSignIn(data);
  document.getElementById("identity").textContent =
    `broker ${data.node_id} · cluster ${data.cluster_id} · ${data.mode}`;
  renderSummary(data);
  renderTransactions(data);
  renderTopics(data);
  renderPartitions(data);
  renderLsoChart(data);
  renderGroups(data);
  renderMembers(data);
  renderBrokers(data);
  renderBrokerChoice(data);
  renderPipelines(data);
  renderRecordTopics(data);
}

// The page of partitions to ask the broker for: as the table's header sorts and its filter says.
function partitionsQuery() {
  const sort = sortedBy.get("partitions");
  const params = new URLSearchParams({ partitions_page: String(pages.get("partitions") || 0), partitions_limit: String(PAGE_ROWS),
    internal: showInternal() ? "1" : "0" });
  if (sort !== undefined) {
    params.set("partitions_sort", PARTITION_SORTS[sort.column]);
    params.set("partitions_order", sort.descending ? "desc" : "asc");
  }
  const words = document.getElementById("partitions-filter").value.trim();
  if (words) params.set("partitions_filter", words.slice(0, 256));
  return params;
}

function refreshNow() {
  clearTimeout(refreshTimer);
  refresh();
}

async function refresh() {
  const generation = ++refreshGeneration;
  const status = document.getElementById("status");
  try {
    const response = await fetch(`/api/console?${partitionsQuery()}`, { cache: "no-store", headers: apiHeaders() });
    const answer = await response.json().catch(() => ({}));
    if (generation !== refreshGeneration) return; // a newer refresh (a sign-in, a sign-out) took over
    if (response.status === 401 || response.status === 429) {
      signInRequired(answer);
      status.textContent = "sign in to see this broker";
      status.classList.remove("error");
      return;
    }
    if (!response.ok) throw new Error(`${response.status} ${answer.error || response.statusText}`);
    delete document.body.dataset.signIn;
    render(answer);
    status.textContent = `updated ${new Date().toLocaleTimeString()}`;
    status.classList.remove("error");
    document.body.dataset.loaded = String(Number(document.body.dataset.loaded || 0) + 1);
  } catch (error) {
    if (generation !== refreshGeneration) return;
    status.textContent = `cannot reach the broker: ${error.message}`;
    status.classList.add("error");
  } finally {
    if (generation === refreshGeneration) refreshTimer = setTimeout(refresh, REFRESH_MS);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("show-internal").addEventListener("change", () => {
    pages.set("partitions", 0);
    refreshNow();
  });
  document.getElementById("sign-in").addEventListener("submit", signIn);
  document.getElementById("sign-out").addEventListener("click", signOut);
  sortableHeaders();
  document.getElementById("topic-config-form").addEventListener("submit", setTopicConfig);
  document.getElementById("broker-configs").addEventListener("toggle", loadBrokerConfigs);
  document.getElementById("broker-configs-node").addEventListener("change", () => {
    pages.set("broker-configs-table", 0);
    loadBrokerConfigs();
  });
  document.getElementById("broker-configs-filter").addEventListener("input", () => {
    pages.set("broker-configs-table", 0);
    renderBrokerConfigs();
  });
  for (const id of ["topics-filter", "transactions-filter", "groups-filter", "members-filter"]) {
    document.getElementById(id).addEventListener("input", () => {
      pages.set(id.replace("-filter", ""), 0);
      if (latest !== null) render(latest);
    });
  }
  let typing = null; // the partitions' filter asks the broker once typing pauses
  document.getElementById("partitions-filter").addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(() => { pages.set("partitions", 0); refreshNow(); }, 250);
  });
  document.getElementById("reset-form").addEventListener("submit", (event) => {
    event.preventDefault();
    resetOffsets(resetRequest(true));
  });
  document.getElementById("reset-form").addEventListener("input", () => {
    resetPlan = null;
    document.getElementById("reset-execute").disabled = true;
  });
  document.getElementById("reset-execute").addEventListener("click", () => {
    if (resetPlan !== null) resetOffsets(resetPlan);
  });
  document.getElementById("security").addEventListener("toggle", loadSecurity);
  for (const id of ["acls", "quotas"]) {
    document.getElementById(`${id}-filter`).addEventListener("input", () => {
      pages.set(id, 0);
      renderSecurity();
    });
  }
  document.getElementById("records-form").addEventListener("submit", (event) => {
    event.preventDefault();
    showRecords(document.getElementById("records-offset").value || "0");
  });
  document.getElementById("records-next").addEventListener("click", () => {
    if (recordsNext !== null) showRecords(recordsNext);
  });
  refresh();
});

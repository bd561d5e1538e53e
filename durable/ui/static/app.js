// The run view: reads /api/* and renders with DOM nodes and textContent only
// (never innerHTML), so run ids, errors and attributes show as text.
"use strict";

const REFRESH_MS = 2000;
const NO_TIMEOUT_MS = 5 * 365 * 24 * 3600 * 1000;
const $ = (id) => document.getElementById(id);
const page = { cursors: [null], index: 0 }; // the cursor of each page seen, newest first
let latest = 0; // the newest render: an older one's answer is dropped
let inFlight = 0;

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function cell(row, content, cls) {
  const td = el("td", null, cls);
  if (content instanceof Node) td.appendChild(content);
  else if (content !== undefined && content !== null) td.textContent = String(content);
  row.appendChild(td);
  return td;
}

function runLink(runId) {
  const a = el("a", runId, "run-link");
  a.href = "#/run/" + encodeURIComponent(runId);
  return a;
}

function badge(state) {
  return el("span", state || "unknown", "state state-" + (state || "unknown"));
}

function pad(n) { return String(n).padStart(2, "0"); }

function when(value) {
  if (value === null || value === undefined) return "";
  const d = new Date(value);
  if (Number.isNaN(d.getTime())) return "";
  return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " +
    pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
}

function duration(ms) {
  if (ms === null || ms === undefined) return "";
  if (ms < 1000) return ms + " ms";
  if (ms < 60000) return (ms / 1000).toFixed(1) + " s";
  return Math.floor(ms / 60000) + " min " + Math.round((ms % 60000) / 1000) + " s";
}

function bytes(n) {
  if (n === null || n === undefined) return "";
  if (n < 1024) return n + " B";
  if (n < 1048576) return (n / 1024).toFixed(1) + " KiB";
  return (n / 1048576).toFixed(1) + " MiB";
}

function attributesText(attrs) {
  return Object.entries(attrs || {}).map(([k, v]) => k + "=" + v).join(", ");
}

function fill(tbody, rows) {
  tbody.replaceChildren(...rows);
}

async function api(path) {
  const response = await fetch(path, { headers: { Accept: "application/json" } });
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

// ------------------------------------------------------------------ routing

function route() {
  const hash = location.hash || "#/";
  if (hash.startsWith("#/run/")) {
    return { view: "run", runId: decodeURIComponent(hash.slice("#/run/".length)) };
  }
  const query = hash.indexOf("?") >= 0 ? hash.slice(hash.indexOf("?") + 1) : "";
  return { view: "list", params: new URLSearchParams(query) };
}

function filtersFromForm() {
  const form = $("filters");
  const params = new URLSearchParams();
  for (const name of ["state", "workflow", "attr", "after"]) {
    const value = form.elements[name].value.trim();
    if (value) params.set(name, value);
  }
  return params;
}

function formFromFilters(params) {
  const form = $("filters");
  for (const name of ["state", "workflow", "attr", "after"]) {
    form.elements[name].value = params.get(name) || "";
  }
}

function apiQuery(params, cursor) {
  const query = new URLSearchParams();
  if (params.get("state")) query.set("state", params.get("state"));
  if (params.get("workflow")) query.set("workflow", params.get("workflow"));
  if (params.get("attr")) query.append("attr", params.get("attr"));
  if (params.get("after")) {
    const after = new Date(params.get("after"));
    if (!Number.isNaN(after.getTime())) query.set("started_after", after.toISOString());
  }
  if (cursor) query.set("cursor", cursor);
  return query.toString();
}

// ---------------------------------------------------------------- the list

function runRow(run) {
  const tr = el("tr");
  tr.dataset.runId = run.run_id;
  tr.dataset.state = run.state;
  cell(tr, runLink(run.run_id));
  cell(tr, run.workflow);
  cell(tr, badge(run.state));
  cell(tr, when(run.started), "time");
  cell(tr, when(run.ended), "time");
  cell(tr, run.steps, "num");
  let now = run.current_step || "";
  if (run.waiting && run.waiting.signal_key) now = "signal " + run.waiting.signal_key;
  else if (run.waiting) now = "timer until " + when(run.waiting.until);
  cell(tr, now);
  cell(tr, [run.error_type, run.error].filter(Boolean).join(": "), "error");
  cell(tr, attributesText(run.attributes));
  return tr;
}

function groupRow(group) {
  const tr = el("tr");
  tr.dataset.groupId = group.group_id;
  cell(tr, el("code", group.group_id));
  const bar = el("div", null, "progress");
  bar.title = group.done + " of " + group.total + " done";
  for (const part of ["succeeded", "failed", "cancelled"]) {
    const seg = el("div", null, "seg seg-" + part);
    seg.style.width = (group.total ? (100 * (group[part] || 0)) / group.total : 0) + "%";
    bar.appendChild(seg);
  }
  const box = el("div", null, "progress-box");
  box.append(bar, el("span", group.done + "/" + group.total, "muted"));
  cell(tr, box);
  for (const n of ["total", "succeeded", "failed", "cancelled", "pending"]) {
    cell(tr, group[n], "num " + n);
  }
  return tr;
}

async function showList(params, current) {
  const [runs, groups] = await Promise.all([
    api("/api/runs?" + apiQuery(params, page.cursors[page.index])),
    api("/api/groups"),
  ]);
  if (!current()) return;
  fill($("runs").tBodies[0], runs.runs.map(runRow));
  $("runs-empty").hidden = runs.runs.length > 0;
  page.cursors.length = page.index + 1;
  if (runs.cursor) page.cursors.push(runs.cursor);
  $("older").disabled = !runs.cursor;
  $("newer").disabled = page.index === 0;
  $("page-no").textContent = "page " + (page.index + 1);
  fill($("groups").tBodies[0], groups.groups.map(groupRow));
  $("groups-empty").hidden = groups.groups.length > 0;
}

// ----------------------------------------------------------------- one run

function field(name, value) {
  const tr = el("tr");
  tr.dataset.field = name;
  tr.appendChild(el("th", name));
  cell(tr, value, name === "error" ? "error" : null);
  return tr;
}

function waitsText(waits) {
  if (!waits) return null;
  if (waits.timer) return "a timer, until " + when(waits.until_ms);
  let text = "signal " + waits.signal_key;
  if (waits.child_run_id) text = "child run " + waits.child_run_id + " (" + text + ")";
  return waits.until_ms ? text + ", timeout at " + when(waits.until_ms) : text + ", no timeout";
}

function positionDetail(p) {
  if (p.kind === "sleep") return "timer until " + when(p.wakes_at_ms);
  if (p.signal_key) {
    const text = "signal " + p.signal_key;
    // A wait without a timeout records a deadline ten years on (as `durable show` reads it).
    const timeout = p.deadline_ms && p.started_ms && p.deadline_ms - p.started_ms < NO_TIMEOUT_MS;
    return timeout ? text + " (timeout " + when(p.deadline_ms) + ")" : text;
  }
  if (p.child_run_id) {
    const span = el("span");
    span.append("child ", runLink(p.child_run_id));
    return span;
  }
  return "";
}

function timelineBar(p, first, span) {
  const box = el("div", null, "bar-box");
  if (p.started_ms && span > 0) {
    const bar = el("div", null, "bar bar-" + p.state);
    const end = p.ended_ms || p.started_ms;
    bar.style.left = (100 * (p.started_ms - first)) / span + "%";
    bar.style.width = Math.max(0.5, (100 * (end - p.started_ms)) / span) + "%";
    box.appendChild(bar);
  }
  return box;
}

function positionRow(p, first, span) {
  const tr = el("tr");
  tr.dataset.position = p.position;
  tr.dataset.state = p.state;
  cell(tr, p.position, "num");
  cell(tr, p.kind);
  cell(tr, p.name);
  cell(tr, badge(p.state));
  cell(tr, p.attempts, "num");
  cell(tr, when(p.started_ms), "time");
  cell(tr, duration(p.duration_ms), "num");
  cell(tr, timelineBar(p, first, span), "bar-col");
  cell(tr, bytes(p.result_bytes), "num");
  cell(tr, p.error, "error");
  cell(tr, positionDetail(p), "detail");
  return tr;
}

async function showRun(runId, current) {
  const run = await api("/api/runs/" + encodeURIComponent(runId));
  if (!current()) return;
  $("run-title").textContent = run.run_id;
  const fields = [
    field("workflow", run.workflow || "(unknown)"),
    field("state", badge(run.state)),
    field("steps journaled", run.steps),
  ];
  const optional = [
    ["current step", run.current_step],
    ["waits on", waitsText(run.waiting)],
    ["error", [run.error_type, run.error].filter(Boolean).join(": ")],
    ["attributes", attributesText(run.attributes)],
    ["cancel requested", run.cancel_requested ? "yes" : null],
  ];
  for (const [name, value] of optional) {
    if (value) fields.push(field(name, value));
  }
  fill($("run-fields").tBodies[0], fields);
  const starts = run.positions.map((p) => p.started_ms).filter(Boolean);
  const ends = run.positions.map((p) => p.ended_ms || p.started_ms).filter(Boolean);
  const first = starts.length ? Math.min(...starts) : 0;
  const span = ends.length ? Math.max(...ends) - first : 0;
  fill($("timeline").tBodies[0], run.positions.map((p) => positionRow(p, first, span)));
  $("timeline-empty").hidden = run.positions.length > 0;
  fill($("children").tBodies[0], run.children.map((c) => {
    const tr = el("tr");
    cell(tr, runLink(c.run_id));
    cell(tr, c.workflow);
    cell(tr, badge(c.state));
    return tr;
  }));
  $("children-box").hidden = run.children.length === 0;
  fill($("published").tBodies[0], Object.entries(run.published).map(([k, n]) => {
    const tr = el("tr");
    cell(tr, k);
    cell(tr, bytes(n), "num");
    return tr;
  }));
  $("published-box").hidden = Object.keys(run.published).length === 0;
}

// ----------------------------------------------------------------- refresh

async function render() {
  const seq = ++latest;
  const current = () => seq === latest;
  const where = route();
  $("list-view").hidden = where.view !== "list";
  $("run-view").hidden = where.view !== "run";
  inFlight += 1;
  try {
    if (where.view === "run") await showRun(where.runId, current);
    else await showList(where.params, current);
    if (!current()) return;
    $("error").hidden = true;
    $("status").textContent = "updated " + when(Date.now());
    document.body.dataset.renders = String(seq);
  } catch (e) {
    if (!current()) return;
    $("error").textContent = e.message;
    $("error").hidden = false;
  } finally {
    inFlight -= 1;
  }
}

function tick() {
  if (inFlight === 0) render(); // a slow store: skip a beat rather than pile up
}

let timer = null;
function setRefresh(on) {
  if (timer !== null) clearInterval(timer);
  timer = on ? setInterval(tick, REFRESH_MS) : null;
}

function start() {
  api("/api/store").then((s) => { $("store").textContent = s.url; }, () => {});
  $("filters").addEventListener("submit", (event) => {
    event.preventDefault();
    const query = filtersFromForm().toString();
    location.hash = "#/" + (query ? "?" + query : "");
  });
  $("clear").addEventListener("click", () => { location.hash = "#/"; });
  $("older").addEventListener("click", () => {
    if (page.index + 1 < page.cursors.length) {
      page.index += 1;
      render();
    }
  });
  $("newer").addEventListener("click", () => {
    if (page.index > 0) {
      page.index -= 1;
      render();
    }
  });
  $("refresh-toggle").addEventListener("change", (e) => setRefresh(e.target.checked));
  window.addEventListener("hashchange", () => {
    const where = route();
    if (where.view === "list") {
      formFromFilters(where.params);
      page.cursors = [null];
      page.index = 0;
    }
    render();
  });
  const where = route();
  if (where.view === "list") formFromFilters(where.params);
  setRefresh($("refresh-toggle").checked);
  render();
}

start();

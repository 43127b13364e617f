// The status page: polls /status.json and renders it. Every value the
// node reports is set as text (textContent), never parsed as markup.
"use strict";

const POLL_MS = 1000;
const STATES = ["OPEN", "CLOSING", "CLOSED", "RECOVERING", "UNHEALTHY", "DELETED"];
const CLASSES = ["HEALTHY", "UNDER_REPLICATED", "MIS_REPLICATED", "OVER_REPLICATED", "UNRECOVERABLE", "UNMANAGED"];
const TONE = {
  HEALTHY: "good", CLOSED: "good", IN_SERVICE: "good",
  OPEN: "info", CLOSING: "info", RECOVERING: "info",
  UNDER_REPLICATED: "warn", MIS_REPLICATED: "warn", OVER_REPLICATED: "warn", STALE: "warn",
  UNMANAGED: "", DELETED: "",
  UNHEALTHY: "bad", UNRECOVERABLE: "bad", DEAD: "bad",
};

let polls = 0;

function $(id) { return document.getElementById(id); }

function text(id, s) { $(id).textContent = s; }

function show(id, on) { $(id).hidden = !on; }

function cell(value, cls) {
  const td = document.createElement("td");
  td.textContent = value === undefined || value === null ? "" : String(value);
  if (cls) td.className = cls;
  return td;
}

function badge(value) {
  const td = document.createElement("td");
  const span = document.createElement("span");
  span.className = "badge " + (TONE[value] || "");
  span.textContent = value;
  td.appendChild(span);
  return td;
}

// rows replaces the body of table id with one row per item; row returns
// the row's cells, attrs its data- attributes.
function rows(id, items, row, attrs) {
  const body = $(id).tBodies[0];
  const out = document.createDocumentFragment();
  for (const item of items || []) {
    const tr = document.createElement("tr");
    for (const td of row(item)) tr.appendChild(td);
    if (attrs) for (const [k, v] of Object.entries(attrs(item))) tr.dataset[k] = v;
    out.appendChild(tr);
  }
  body.replaceChildren(out);
}

function counts(id, order, got) {
  const ul = $(id);
  const out = document.createDocumentFragment();
  for (const name of order) {
    const li = document.createElement("li");
    const n = (got && got[name]) || 0;
    li.className = n ? (TONE[name] || "") : "zero";
    li.dataset.name = name;
    li.textContent = name + " " + n;
    out.appendChild(li);
  }
  ul.replaceChildren(out);
}

function bytes(n) {
  if (n === undefined || n === null) return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return (i === 0 ? String(v) : v.toFixed(1)) + " " + units[i];
}

function when(t) {
  if (!t) return "";
  const d = new Date(t);
  return isNaN(d) ? t : d.toLocaleString();
}

function ago(t, now) {
  if (!t) return "never";
  const s = Math.max(0, Math.round((new Date(now) - new Date(t)) / 1000));
  return s < 120 ? s + " s ago" : Math.round(s / 60) + " min ago";
}

function omitted(id, n, what) {
  show(id, n > 0);
  text(id, n > 0 ? n + " more " + what + " not shown (see /status.json limits)" : "");
}

function renderNode(s) {
  const n = s.node || {};
  text("node-id", n.id || "");
  const parts = [];
  if (n.address) parts.push("gRPC " + n.address);
  if (n.rack) parts.push("rack " + n.rack);
  text("node-desc", parts.join(" · "));
}

function renderWarehouse(w, now) {
  show("warehouse", !!w);
  if (!w) return;
  text("warehouse-desc", "backing " + w.backing + " · state " + w.state + " · source " + w.source_id);
  show("warehouse-error", !!w.error);
  text("warehouse-error", w.error || "");
  text("last-event", String(w.last_event));
  text("horizon", String(w.gc_horizon));
  const ing = w.ingest;
  show("ingest", !!ing);
  show("ingest-lag-box", !!ing);
  if (ing) {
    text("ingest-last", ing.error ? ing.error : ing.last + " (durable " + ing.durable + ")");
    text("ingest-lag", ing.lag_events + " events");
  }
  show("slots-error", !!w.slots_error);
  text("slots-error", w.slots_error || "");
  rows("slots", w.slots, (sl) => [
    cell(sl.name), cell(sl.position, "num"), cell(sl.lag_events, "num"),
    cell(sl.pinned_entries + " entries, " + bytes(sl.pinned_bytes)),
    cell(ago(sl.updated, now)),
    badge(sl.lost ? "LOST" : (sl.lag_events === 0 ? "CAUGHT UP" : "BEHIND")),
  ], (sl) => ({ slot: sl.name }));
  rows("events", w.events, (e) => [
    cell(e.id, "num"), cell(when(e.time)), cell(e.type),
    cell(e.new_path ? e.path + " → " + e.new_path : e.path, "path"),
    cell(e.files, "num"), cell(bytes(e.bytes), "num"),
  ], (e) => ({ event: String(e.id) }));
}

function renderContainers(c, node) {
  show("containers", !!c);
  if (!c) return;
  const vols = (node && node.volumes) || [];
  text("volumes", c.total + " containers, " + bytes(c.bytes) + " · volumes: " +
    vols.map((v) => v.path + " (" + bytes(v.free_bytes) + " free of " + bytes(v.capacity_bytes) + ")").join(", "));
  counts("by-state", STATES, c.by_state);
  rows("container-list", c.list, (ct) => [
    cell(ct.id), badge(ct.state), cell(ct.replication), cell(ct.replica_index, "num"),
    cell(ct.blocks, "num"), cell(bytes(ct.bytes), "num"), cell(when(ct.created)),
  ], (ct) => ({ container: ct.id, state: ct.state }));
  omitted("containers-omitted", c.omitted, "containers");
}

function renderQueue(q) {
  show("queue", !!q);
  if (!q) return;
  text("queue-running", String(q.running));
  text("queue-queued", String(q.queued));
  text("queue-limit", String(q.limit));
  rows("jobs", q.jobs, (j) => [
    cell(j.container), cell(j.target), cell(j.mode), cell(j.priority, "num"),
    badge(j.running ? "RUNNING" : "QUEUED"), cell(when(j.deadline)),
  ], (j) => ({ container: j.container, target: j.target }));
}

function renderCluster(c, now) {
  show("cluster", !!c);
  if (!c) return;
  const parts = [c.role === "coordinator" ? "this node is the coordinator" : "member"];
  if (c.join && c.join.length) parts.push("joined " + c.join.join(", "));
  if (c.leader) parts.push("leader " + c.leader);
  parts.push(c.pending_commands + " pending commands, " + c.waiting + " containers waiting");
  parts.push("last cycle " + (c.last_cycle ? ago(c.last_cycle, now) + " (" + c.last_cycle_seconds.toFixed(3) + " s)" : "none yet"));
  text("cluster-desc", parts.join(" · "));
  show("cluster-error", !!c.error);
  text("cluster-error", c.error || "");
  rows("cluster-nodes", c.nodes, (n) => [
    cell(n.id), cell(n.address), cell(n.rack), badge(n.health),
    cell(n.opstate + (n.maintenance_end ? " until " + when(n.maintenance_end) : "")),
    cell(n.containers, "num"), cell(bytes(n.used_bytes), "num"), cell(bytes(n.free_bytes), "num"),
    cell(ago(n.last_heartbeat, now)),
  ], (n) => ({ node: n.id, health: n.health }));
  counts("by-class", CLASSES, c.by_class);
  rows("cluster-containers", c.containers, (ct) => [
    cell(ct.id), badge(ct.class), cell(ct.replication), cell(ct.state), cell(bytes(ct.bytes), "num"),
    cell(ct.replicas.map((r) => r.node + (r.index ? "[" + r.index + "]" : "") + ":" + r.state).join(" ")
      + (ct.reason ? " (" + ct.reason + ")" : "")),
  ], (ct) => ({ container: ct.id, class: ct.class }));
  omitted("cluster-omitted", c.omitted, "containers");
}

function render(s) {
  renderNode(s);
  renderWarehouse(s.warehouse, s.time);
  renderContainers(s.containers, s.node);
  renderQueue(s.queue);
  renderCluster(s.cluster, s.time);
  $("updated").dateTime = s.time;
  text("updated", when(s.time));
}

async function poll() {
  try {
    const resp = await fetch("/status.json", { cache: "no-store" });
    if (!resp.ok) throw new Error("HTTP " + resp.status);
    render(await resp.json());
    polls++;
    text("polls", String(polls));
    $("conn").className = "conn ok";
    text("conn", "live");
  } catch (err) {
    $("conn").className = "conn down";
    text("conn", "not reachable: " + err.message);
  }
  setTimeout(poll, POLL_MS);
}

poll();

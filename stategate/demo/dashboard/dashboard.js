// Live dashboard of the railway-bookings demo: GraphQL subscriptions over graphql-transport-ws
// (the vendored graphql-ws client, global `graphqlWs`). No build step, no framework.
"use strict";

const HOUR = 3_600_000;
// The SVG namespace, taken from an element the HTML parser made (keeps the file free of URLs).
const SVG_NS = Object.assign(document.createElement("div"), { innerHTML: "<svg></svg>" }).firstChild.namespaceURI;

// The leaderboard: the top customers by revenue, a top-K every partition answers and the
// gateway merges; pushed again only when it changed.
const TOP = `subscription Top($first: Int!) {
  customerTotalsList(orderBy: [REVENUE_DESC], first: $first) {
    records { key bookings revenue seats }
    meta { partial partitions { partition node version failure appendedMs position { topic offset } } consistencyToken }
  }
}`;
const HOURLY = `subscription Hourly($key: String!, $from: DateTime!, $to: DateTime!) {
  hourlyRevenue(key: $key, from: $from, to: $to) { key failure windows { windowStart windowEnd bookings revenue } }
}`;
const BOOKING = "trip price seats journey { minutes fare operator }";
const LATEST = `subscription Latest($key: String!) {
  latestBooking(key: $key) { key failure record { ${BOOKING} } }
}`;
// The version valid at a chosen time: latestBooking is versioned (history = "90d").
const AS_OF = `subscription AsOf($key: String!, $asOf: DateTime!) {
  latestBookingAsOf(key: $key, asOf: $asOf) { key failure version { validFrom validTo record { ${BOOKING} } } }
}`;

// ---- small helpers ---------------------------------------------------------------------------

const $ = (selector, root = document) => root.querySelector(selector);
const num = (x) => (x == null ? null : Number(x));
// A Long (counts, sums, offsets) arrives as a decimal string, exact past 2^53: kept exact as a
// BigInt to compare and sort, shown as sent.
const long = (x) => (x == null ? null : BigInt(x));
const money = (x) => (x == null ? "–" : Number(x).toFixed(2));
const parseTime = (s) => Date.parse(/(Z|[+-]\d\d:?\d\d)$/i.test(s) ? s : `${s}Z`); // naive = UTC
const iso = (ms) => new Date(ms).toISOString().replace(/\.\d{3}Z$/, "Z");
const hh = (ms) => new Date(ms).toLocaleTimeString("en-GB", { hour: "2-digit", minute: "2-digit" });

function el(tag, attrs = {}, ...children) {
  const node = tag.startsWith("svg:") ? document.createElementNS(SVG_NS, tag.slice(4)) : document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (name === "class") node.setAttribute("class", value);
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value);
  }
  node.append(...children.filter((c) => c != null));
  return node;
}

const params = new URLSearchParams(location.search);

const leaders = Math.max(1, Math.min(100, Number(params.get("top")) || 10)); // ?top=N, 10 by default

// ---- state -----------------------------------------------------------------------------------

const state = {
  selected: params.get("customer"), // ?customer=KEY; else the leader, once known
  totals: new Map(), // key -> {bookings, revenue, seats} of the last ranking
  updates: 0,
  lastUpdateAt: null,
  skipped: null,
  errors: new Map(), // source -> [messages]
  active: 0, // subscriptions neither ended nor disposed
  hourly: null, // {dispose, hour}: the hour its 24-hour range was computed in
  latest: null, // dispose function
  asOf: null, // ms: the latest booking as of then; null: the latest
  nodes: new Map(), // node id -> {release, schema}, as the partition map says
};

// ---- connection and status -------------------------------------------------------------------

function setStatus(next) {
  const badge = $("#status");
  badge.dataset.state = next;
  badge.textContent = next;
}

if (!window.graphqlWs) {
  setStatus("error");
  setErrors("page", ["the graphql-ws client (/static/graphql-ws/graphql-ws.min.js) did not load"]);
  throw new Error("graphql-ws did not load");
}

const client = graphqlWs.createClient({
  url: `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/graphql`,
  // ?token=... for a node that checks authorization; sent in connection_init.
  connectionParams: params.get("token") ? { authorization: `Bearer ${params.get("token")}` } : undefined,
  retryAttempts: Infinity,
  shouldRetry: () => true, // also retry after a socket error (a node that is down refuses the connection)
  retryWait: (retries) => new Promise((resolve) =>
    setTimeout(resolve, Math.min(500 * 2 ** retries, 5000) + Math.random() * 500)),
  on: {
    connecting: (isRetry) => setStatus(isRetry ? "reconnecting" : "connecting"),
    connected: () => setStatus("live"),
    // Closed with subscriptions left means a retry follows; with none, they all ended in errors.
    closed: () => setStatus(state.active > 0 ? "reconnecting" : "error"),
    error: () => setStatus("error"),
  },
});

function describeError(err) {
  if (Array.isArray(err)) return err.map((e) => e.message ?? String(e));
  if (typeof err === "object" && err && "code" in err && "reason" in err) return [`connection closed: ${err.code} ${err.reason || ""}`.trim()];
  if (err instanceof Error) return [err.message];
  return ["WebSocket error"];
}

function setErrors(source, messages) {
  if (messages.length) state.errors.set(source, messages);
  else state.errors.delete(source);
  const box = $("#errors");
  const items = [...state.errors].flatMap(([src, msgs]) => msgs.map((m) => el("li", {}, el("b", {}, `${src}: `), m)));
  $("ul", box).replaceChildren(...items);
  box.hidden = items.length === 0;
}

function countUpdate() {
  state.updates += 1;
  const counter = $("#updates");
  counter.dataset.count = String(state.updates);
  counter.textContent = `${state.updates} update${state.updates === 1 ? "" : "s"}`;
}

/** Subscribes to one root field; returns the dispose function. */
function subscribe(source, query, variables, onData) {
  let ended = false;
  const end = () => { if (!ended) { ended = true; state.active -= 1; } };
  state.active += 1;
  const dispose = client.subscribe({ query, variables }, {
    next(payload) {
      countUpdate();
      setErrors(source, (payload.errors ?? []).map((e) => e.message));
      if (payload.data) onData(payload.data, payload.extensions ?? {});
    },
    error(err) {
      end();
      setErrors(source, describeError(err));
      if (!Array.isArray(err)) setStatus("error"); // the connection gave up: nothing is live
    },
    complete: end,
  });
  return () => { end(); dispose(); };
}

// ---- busiest customers -----------------------------------------------------------------------

function renderBusiest(result, extensions) {
  const rows = result.records.map((r) => ({ // in the server's order: revenue, then key
    key: r.key,
    bookings: long(r.bookings) ?? 0n,
    revenue: num(r.revenue) ?? 0,
    seats: long(r.seats) ?? 0n,
  }));
  const maxRevenue = Math.max(1e-9, ...rows.map((r) => r.revenue));
  const hadData = state.totals.size > 0;
  const trs = rows.map((r) => {
    const before = state.totals.get(r.key);
    const changed = hadData && (!before || before.bookings !== r.bookings
      || before.revenue !== r.revenue || before.seats !== r.seats);
    const classes = [changed && "flash", r.key === state.selected && "selected"];
    return el("tr", {
      class: classes.filter(Boolean).join(" "),
      "data-key": r.key, "data-bookings": String(r.bookings), "data-revenue": String(r.revenue),
      tabindex: "0", title: `Follow ${r.key}`,
      onclick: () => select(r.key),
      onkeydown: (ev) => { if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); select(r.key); } },
    },
    el("td", { class: "key" }, r.key),
    el("td", { class: "num" }, String(r.bookings)),
    el("td", { class: "num" }, money(r.revenue)),
    el("td", { class: "num" }, String(r.seats)),
    el("td", { class: "bar-cell" },
      el("span", { class: "rev-bar", style: `width: ${((100 * r.revenue) / maxRevenue).toFixed(1)}%` })));
  });
  $("#customers tbody").replaceChildren(...trs);
  state.totals = new Map(rows.map((r) => [r.key, r]));

  const failures = result.meta.partitions.filter((p) => p.failure)
    .map((p) => `partition ${p.partition} is missing from the ranking: ${p.failure}`);
  setErrors("customerTotalsList partitions", failures);
  renderFreshness(result.meta, extensions);
  if (state.selected == null && rows.length) select(rows[0].key);
}

function renderFreshness(meta, extensions) {
  const box = $("#freshness");
  state.lastUpdateAt = Date.now();
  $('[data-field="revision"]', box).textContent = extensions.revision ?? "–";
  // The newest record in this state, by the time the log appended it (meta.appendedMs).
  const appended = meta.partitions.filter((p) => p.appendedMs != null).map((p) => Number(p.appendedMs));
  state.newestAppendedMs = appended.length ? Math.max(...appended) : null;
  $('[data-field="newest"]', box).dataset.appendedMs = state.newestAppendedMs ?? "";
  const token = $('[data-field="token"]', box);
  token.textContent = meta.consistencyToken;
  token.title = meta.consistencyToken;
  if (typeof extensions.skipped === "number") {
    state.skipped = (state.skipped ?? 0) + extensions.skipped;
    for (const node of box.querySelectorAll(".skipped")) node.hidden = false;
    $('[data-field="skipped"]', box).textContent = String(state.skipped);
  }
  const rows = [...meta.partitions].sort((a, b) => a.partition - b.partition).map((p) => el("tr",
    { class: p.failure ? "failed" : "" },
    el("td", { class: "num" }, String(p.partition)),
    el("td", { title: said(p.node) }, p.node ?? "–"),
    el("td", { class: "num" }, p.version == null ? "–" : String(p.version)),
    el("td", { class: "mono" }, p.failure ?? p.position.map((t) => `${t.topic}@${t.offset}`).join(", "))));
  $("#partitions tbody").replaceChildren(...rows);
  tick();
}

// What each node runs (its release and schema version, and the stores it declares and has not
// built yet), from the partition map: a rolling upgrade or a store being added shows as nodes
// that differ.
const NODES_EVERY_MS = 5000;

async function followNodes() {
  try {
    const reply = await fetch("/cluster");
    if (reply.ok) renderNodes((await reply.json()).nodes);
  } catch (err) {
    // the next try says it again; the subscriptions' status badge reports the connection
  }
}

function said(node) {
  const runs = state.nodes.get(node);
  return runs ? `${node}: release ${runs.release ?? "unknown"}, schema ${runs.schema ?? "unknown"}` : "";
}

function renderNodes(nodes) {
  state.nodes = new Map(nodes.map((n) => [n.id, n]));
  const byRelease = new Map();
  for (const n of nodes) {
    const building = n.pending?.length ? ` · building ${n.pending.join(", ")}` : "";
    const runs = `${n.release ?? "unknown release"} · schema ${n.schema ?? "unknown"}${building}`;
    byRelease.set(runs, [...(byRelease.get(runs) ?? []), n.id]);
  }
  const box = $("#releases");
  box.classList.toggle("mixed", byRelease.size > 1);
  box.replaceChildren(...[...byRelease].map(([runs, ids]) => el("li", {}, `${ids.join(", ")}: ${runs}`)));
}

function tick() {
  if (state.hourly && Math.floor(Date.now() / HOUR) * HOUR !== state.hourly.hour) followSelected(); // new hour
  if (state.lastUpdateAt == null) return;
  const seconds = (Date.now() - state.lastUpdateAt) / 1000;
  $('#freshness [data-field="age"]').textContent = ago(seconds);
  if (state.newestAppendedMs != null) {
    $('#freshness [data-field="newest"]').textContent =
      `appended ${ago((Date.now() - state.newestAppendedMs) / 1000)}`;
  }
}

function ago(seconds) {
  return seconds < 60 ? `${Math.max(0, seconds).toFixed(1)} s ago` : `${Math.floor(seconds / 60)} min ago`;
}

// ---- the selected customer: revenue per hour and latest booking ------------------------------

function renderHourly(result, range) {
  const chart = $("#chart");
  if (!result) { chart.replaceChildren(el("p", { class: "muted" }, "No data for this customer.")); return; }
  const byStart = new Map(result.windows.map((w) => [parseTime(w.windowStart), w]));
  const slots = [];
  for (let t = range.from; t <= range.hour; t += HOUR) slots.push({ t, w: byStart.get(t) });
  const max = Math.max(1e-9, ...slots.map((s) => num(s.w?.revenue) ?? 0));
  const [W, H, left, right, bottom, top] = [720, 220, 48, 16, 22, 8];
  const step = (W - left - right) / slots.length;
  const y = (v) => top + (H - top - bottom) * (1 - v / max);
  const svg = el("svg:svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": `Revenue per hour of ${result.key}` });
  for (const v of [0, max / 2, max]) {
    svg.append(el("svg:line", { class: "gridline", x1: left, x2: W - right, y1: y(v), y2: y(v) }),
      el("svg:text", { class: "axis", x: left - 6, y: y(v) + 4, "text-anchor": "end" }, v.toFixed(0)));
  }
  slots.forEach(({ t, w }, i) => {
    const revenue = num(w?.revenue) ?? 0;
    const x = left + i * step;
    const label = `${hh(t)}–${hh(t + HOUR)}: revenue ${money(revenue)}, ${w?.bookings ?? 0} bookings`;
    svg.append(el("svg:rect", {
      class: t === range.hour ? "col current" : "col",
      x: x + step * 0.12, width: step * 0.76, y: y(revenue), height: Math.max(0, y(0) - y(revenue)),
    }, el("svg:title", {}, label)));
    if (i % 3 === 0) svg.append(el("svg:text", { class: "axis", x: x + step / 2, y: H - 6, "text-anchor": "middle" }, hh(t)));
  });
  const note = result.windows.length ? null : el("p", { class: "muted" },
    `${result.key} booked nothing in the last 24 hours: each booking shows here as it arrives.`);
  chart.replaceChildren(...[note, svg].filter((c) => c != null));
  if (result.failure) setErrors("hourlyRevenue", [`${result.key}: ${result.failure}`]);
}

/** The timetable record a booking joins (a global store): "ICE · 2 h 35 · €64.20". */
function journey(entry) {
  if (!entry) return "–";
  const time = `${Math.floor(entry.minutes / 60)} h ${String(entry.minutes % 60).padStart(2, "0")}`;
  return `${entry.operator} · ${time} · ${money(entry.fare)}`;
}

/** "since 10:42:07", or "10:42:07 – 11:03:55" once a newer version replaced it. */
function validity(version) {
  if (!version) return "–";
  const at = (s) => new Date(parseTime(s)).toLocaleString("en-GB");
  return version.validTo ? `${at(version.validFrom)} – ${at(version.validTo)}` : `since ${at(version.validFrom)}`;
}

function renderLatest(result, version) {
  const box = $("#latest");
  const rec = result?.record;
  $('[data-field="trip"]', box).textContent = rec?.trip ?? "–";
  $('[data-field="price"]', box).textContent = money(rec?.price);
  $('[data-field="seats"]', box).textContent = rec?.seats ?? "–";
  $('[data-field="journey"]', box).textContent = journey(rec?.journey);
  $('[data-field="valid"]', box).textContent = validity(version);
  box.classList.remove("flash");
  void box.offsetWidth; // restart the animation
  box.classList.add("flash");
  if (result?.failure) setErrors("latestBooking", [`${result.key}: ${result.failure}`]);
}

/** (Re)subscribes the latest-booking card: the latest version, or the one valid at the
 * chosen time (its interval shown), pushed again when a late booking changes it. */
function followLatest() {
  state.latest?.();
  setErrors("latestBooking", []);
  const key = state.selected;
  if (key == null) return;
  if (state.asOf == null) {
    state.latest = subscribe("latestBooking", LATEST, { key }, (data) => renderLatest(data.latestBooking));
    return;
  }
  state.latest = subscribe("latestBooking", AS_OF, { key, asOf: iso(state.asOf) }, (data) => {
    const found = data.latestBookingAsOf;
    renderLatest({ key: found?.key, failure: found?.failure, record: found?.version?.record }, found?.version);
  });
}

/** (Re)subscribes the per-customer panels to the selected customer, disposing the old ones. */
function followSelected() {
  state.hourly?.dispose();
  const key = state.selected;
  const hour = Math.floor(Date.now() / HOUR) * HOUR;
  const range = { hour, from: Math.floor((Date.now() - 24 * HOUR) / HOUR) * HOUR, to: Date.now() + HOUR };
  for (const node of document.querySelectorAll(".selected-key")) node.textContent = key;
  $("#chart").replaceChildren(el("p", { class: "muted" }, "Waiting for data…"));
  setErrors("hourlyRevenue", []);
  state.hourly = {
    hour,
    dispose: subscribe("hourlyRevenue", HOURLY, { key, from: iso(range.from), to: iso(range.to) },
      (data) => renderHourly(data.hourlyRevenue, range)),
  };
  followLatest();
}

function select(key) {
  if (key === state.selected) return;
  state.selected = key;
  for (const tr of document.querySelectorAll("#customers tbody tr")) {
    tr.classList.toggle("selected", tr.dataset.key === key);
  }
  followSelected();
}

// ---- start -----------------------------------------------------------------------------------

$("#as-of").addEventListener("change", (event) => {
  const value = event.target.value; // local time, as the picker shows it
  state.asOf = value ? new Date(value).getTime() : null;
  followLatest();
});
$("#as-of-now").addEventListener("click", () => {
  $("#as-of").value = "";
  state.asOf = null;
  followLatest();
});

subscribe("customerTotalsList", TOP, { first: leaders },
  (data, extensions) => data.customerTotalsList && renderBusiest(data.customerTotalsList, extensions));
if (state.selected != null) followSelected();
setInterval(tick, 200);
followNodes();
setInterval(followNodes, NODES_EVERY_MS);

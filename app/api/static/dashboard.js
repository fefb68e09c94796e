// The Skiplock dashboard: plain JavaScript, no build, nothing from elsewhere.
// State comes from GET /stats; changes come as events of the key's room (an admin:
// 'system', a tenant: 'account:<id>') over the WebSocket, or GET /events polled where
// there is none. Any event means "something changed": /stats is read again (at most
// every half second). A gap means events were missed: the page reads /stats again and
// carries on from the gap's `oldest`. The cursor only moves to a seq the page received,
// and past a gap only once /stats has been read again (a failed read leaves it, so the
// server sends the gap again on reconnecting).
"use strict";

const KEY_ITEM = "skiplock.key";
const POLL_MS = 3000;
const REFRESH_MS = 500;
const SAFETY_REFRESH_MS = 30000;
const ACTIVITY_SHOWN = 25;

const state = {
  key: null, room: null, cursor: null, socket: null, pollTimer: null, refreshTimer: null,
  safetyTimer: null, reconnectMs: 1000, failures: 0, mode: document.body.dataset.live || "ws",
  gaps: 0, closing: false,
  held: null, heldAt: 0, // after a gap: the furthest seq seen, kept off the cursor until /stats is read again
};

const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "text") node.textContent = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function svg(tag, attrs, ...children) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, String(value));
  for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return node;
}

function age(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  const s = Math.max(0, Math.round(seconds));
  if (s < 120) return `${s} s`;
  if (s < 7200) return `${Math.round(s / 60)} min`;
  if (s < 172800) return `${Math.round(s / 3600)} h`;
  return `${Math.round(s / 86400)} d`;
}

function when(iso) {
  if (!iso) return "–";
  const d = new Date(iso);
  return d.toLocaleString(undefined, { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit",
    second: "2-digit" });
}

// the end of an id: job ids are time-ordered, so jobs enqueued together share their start
function short(id) { return id ? `…${String(id).replace(/-/g, "").slice(-8)}` : "–"; }

function randomKey() {
  if (window.crypto && crypto.randomUUID) return crypto.randomUUID();
  const bytes = new Uint8Array(16);
  crypto.getRandomValues(bytes);
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

class ApiFailure extends Error {
  constructor(status, body) {
    super((body && body.error && body.error.message) || `HTTP ${status}`);
    this.status = status;
    this.code = body && body.error && body.error.code;
  }
}

// Where the app is served: the root, or the prefix an app that mounts it gives it
// (/queue/dashboard -> /queue/); every route the page calls is under it.
const BASE = location.pathname.replace(/dashboard\/?$/, "");

async function api(path, options = {}) {
  const headers = Object.assign({ Authorization: `Bearer ${state.key}`, Accept: "application/json" },
    options.headers || {});
  const response = await fetch(BASE + path.replace(/^\//, ""), Object.assign({}, options, { headers, cache: "no-store" }));
  const body = await response.json().catch(() => null);
  if (response.status === 401) {
    logout("That API key was refused (unknown, revoked or malformed).");
    throw new ApiFailure(401, body);
  }
  if (!response.ok) throw new ApiFailure(response.status, body);
  return body;
}

// ---- rendering -----------------------------------------------------------------------

function fill(tbody, rows, columns, emptyText) {
  tbody.replaceChildren();
  if (!rows.length) {
    tbody.append(el("tr", {}, el("td", { colspan: columns, class: "empty", text: emptyText })));
    return;
  }
  for (const row of rows) tbody.append(row);
}

// A table wider than its card scrolls sideways: while it does, its region takes the focus
// (named by the table's caption), so a keyboard can scroll it too. Checked after any change
// to the board and on a resize, once a frame.
function keyboardScroll() {
  for (const box of document.querySelectorAll(".scroll")) {
    if (box.scrollWidth > box.clientWidth) {
      const caption = box.querySelector("caption");
      box.tabIndex = 0;
      box.setAttribute("role", "region");
      box.setAttribute("aria-label", caption ? caption.textContent : "A table");
    } else {
      for (const name of ["tabindex", "role", "aria-label"]) box.removeAttribute(name);
    }
  }
}

let scrollCheck = null;
function keyboardScrollSoon() {
  if (scrollCheck === null) scrollCheck = requestAnimationFrame(() => { scrollCheck = null; keyboardScroll(); });
}

function num(value) { return el("td", { class: "num", text: value === null || value === undefined ? "–" : value }); }

// ready and waiting are counted up to a cap (1,000 a type): past it, "1,000+" (an admin's ready is exact while fewer wait)
function capped(n, more) { return more ? `${n.toLocaleString("en")}+` : n; }

function renderQueue(stats) {
  const t = stats.totals;
  $("t-ready").textContent = capped(t.ready, t.readyMore);
  $("t-waiting").textContent = capped(t.waiting, t.waitingMore);
  $("t-running").textContent = t.running;
  $("t-failed").textContent = t.failed;
  $("t-cancelled").textContent = t.cancelled;
  $("t-done").textContent = t.done;
  $("t-oldest").textContent = age(t.oldestReadySeconds);
  fill($("queue-table").tBodies[0], stats.queue.map((q) => el("tr", { "data-type": q.type },
    el("th", { scope: "row", text: q.type }), num(capped(q.ready, q.readyMore)), num(capped(q.waiting, q.waitingMore)), num(q.running), num(q.failed),
    num(q.done), el("td", { text: age(q.oldestReadySeconds) }))), 7, "No jobs: the queue is empty.");
  // jobs of a type no stage handles here wait for ever: say so, as `skiplock status` does
  const stray = stats.unhandled || [];
  $("unhandled").hidden = stray.length === 0;
  $("unhandled").textContent = stray.length === 0 ? "" : "Waiting for a stage that is not loaded here (a typo in an "
    + "INSERT, or a plug-in left out): " + stray.map((u) => `${u.type} (${u.pending})`).join(", ") + ".";
}

function renderTrouble(stats) {
  fill($("trouble-table").tBodies[0], stats.trouble.map((job) => {
    const retry = job.status === "failed";
    const label = `${retry ? "Retry" : "Cancel"} job ${short(job.id)}`;
    const button = el("button", { type: "button", class: retry ? "" : "secondary", "aria-label": label,
      text: retry ? "Retry" : "Cancel", onclick: () => act(button, job.id, retry ? "retry" : "cancel") });
    const errors = el("button", { type: "button", class: "secondary", "aria-label": `Errors of job ${short(job.id)}`,
      text: "Errors", onclick: () => showErrors(job.id) });
    return el("tr", { "data-job": job.id },
      el("td", {}, el("code", { title: job.id, text: short(job.id) })), el("td", { text: job.type }),
      el("td", { text: troubleState(job) }),
      num(job.attempts), el("td", { class: "err", text: job.lastError || "" }), el("td", {}, button, " ", errors));
  }), 6, "Nothing failed or running.");
}

function troubleState(job) {
  if (job.status === "pending") return `retrying ${when(job.runAfter)}`;
  if (job.status !== "running") return job.status;
  return job.cancelRequestedAt ? "running, cancel asked" : `running since ${when(job.lockedAt)}`;
}

// Every failed attempt of one job (GET /jobs/{id}: the last 20, newest first), kept in a
// panel of its own so the live refreshes of the table leave it open.
async function showErrors(jobId) {
  const box = $("job-errors");
  try {
    const job = await api(`/jobs/${encodeURIComponent(jobId)}`);
    box.replaceChildren(el("h3", { text: `Errors of job ${short(job.id)} (${job.type}, ${job.status})` }),
      errorList(job.errors));
    box.hidden = false;
  } catch (err) {
    if (err.status !== 401) notice(`Job ${short(jobId)}: ${err.message}`);
  }
}

// A job's failed attempts (GET /jobs/{id}'s `errors`, newest first), as text.
function errorList(errors) {
  if (!errors || errors.length === 0) return el("p", { class: "hint", text: "No failed attempt is recorded." });
  return el("ol", { class: "errors" }, ...errors.map((e) => el("li", {},
    el("span", { text: `attempt ${e.attempt}, ${when(e.at)}, run ${short(e.runId)}: ` }),
    el("span", { class: "err", text: e.error }))));
}

// a periodic stage's schedule (as GET /stages gives it): what it is, the period last enqueued, the next
function scheduleCell(schedule) {
  if (!schedule) return el("td", { text: "–" });
  const what = schedule.cron === null ? `every ${age(schedule.everySeconds)}` : `${schedule.cron} (${schedule.timezone})`;
  return el("td", {}, el("code", { text: what }), el("br", {}),
    `last ${schedule.lastPeriod ? when(schedule.lastPeriod) : "never"}, next ${when(schedule.nextPeriod)}`);
}

function renderStages(stats) {
  fill($("stages-table").tBodies[0], (stats.stages || []).map((stage) => {
    const action = stage.paused ? "Resume" : "Pause";
    const button = stats.admin
      ? el("button", { type: "button", class: stage.paused ? "" : "secondary", "aria-label": `${action} stage ${stage.type}`,
        text: action, onclick: () => pauseStage(button, stage.type, !stage.paused) })
      : null;
    return el("tr", { "data-stage": stage.type }, el("th", { scope: "row", text: stage.type }),
      el("td", { text: stage.paused ? `paused since ${when(stage.pausedAt)}` : "running" }),
      scheduleCell(stage.schedule), el("td", { text: limitsText(stage) }), el("td", {}, button || "–"));
  }), 5, "No stages are loaded here.");
}

// a stage's limits across every run (GET /stages' globalConcurrency, rate, limitBy), in a few words
function limitsText(stage) {
  const parts = [];
  if (stage.globalConcurrency !== null && stage.globalConcurrency !== undefined) parts.push(`${stage.globalConcurrency} at once`);
  if (stage.rate) {
    const per = stage.rate.perSeconds;  // a window may be a fraction of a second: age() would round it
    parts.push(`${stage.rate.starts} starts per ${per < 120 ? `${Number(per.toFixed(3))} s` : age(per)}`);
  }
  if (!parts.length) return "–";
  return stage.limitBy ? `${parts.join(", ")}, per ${stage.limitBy}` : parts.join(", ");
}

async function pauseStage(button, type, paused) {
  button.disabled = true;
  try {
    await api(`/stages/${encodeURIComponent(type)}`, { method: "PATCH", body: JSON.stringify({ paused }),
      headers: { "Content-Type": "application/json" } });
    notice(`Stage ${type}: ${paused ? "paused" : "resumed"}.`);
  } catch (err) {
    if (err.status !== 401) notice(`Stage ${type}: ${err.message}`);
  }
  refreshSoon(0);
}

async function act(button, jobId, action) {
  button.disabled = true;
  try {
    const job = await api(`/jobs/${encodeURIComponent(jobId)}/${action}`,
      { method: "POST", headers: { "Idempotency-Key": randomKey() } });
    notice(`Job ${short(jobId)}: ${action === "retry" ? "back to pending"
      : job.status === "running" ? "asked to stop; its run ends it within seconds" : "cancelled"}.`);
  } catch (err) {
    if (err.status !== 401) notice(`Job ${short(jobId)}: ${err.message}`);
  }
  refreshSoon(0);
}

function renderChart(stats) {
  const runs = stats.chart;
  const box = $("chart");
  box.replaceChildren();
  const width = 600, height = 140, pad = 4;
  const top = Math.max(1, ...runs.map((r) => r.done + r.failed + r.retried + r.deferred));
  const step = runs.length ? (width - 2 * pad) / runs.length : 0;
  const bar = Math.max(1, step * 0.8);
  const total = { done: 0, failed: 0, retried: 0, deferred: 0 };
  const chart = svg("svg", { viewBox: `0 0 ${width} ${height}`, preserveAspectRatio: "none", role: "img",
    "aria-labelledby": "chart-title" });
  const title = svg("title", { id: "chart-title" });
  chart.append(title);
  runs.forEach((run, i) => {
    let y = height - pad;
    for (const part of ["done", "failed", "retried", "deferred"]) {
      total[part] += run[part];
      const h = (run[part] / top) * (height - 2 * pad);
      if (h <= 0) continue;
      y -= h;
      const rect = svg("rect", { x: pad + i * step, y, width: bar, height: h, class: `bar-${part}` });
      rect.append(svg("title", {}, `${when(run.startedAt)}: ${run[part]} ${part}`));
      chart.append(rect);
    }
  });
  title.textContent = runs.length
    ? `${runs.length} runs in the last 24 hours: ${total.done} done, ${total.failed} failed, ${total.retried} retried, ${total.deferred} deferred`
    : "No finished runs in the last 24 hours";
  box.append(chart, el("p", { class: "legend" },
    el("span", {}, el("i", { class: "sw-done" }), `done ${total.done}`),
    el("span", {}, el("i", { class: "sw-failed" }), `failed ${total.failed}`),
    el("span", {}, el("i", { class: "sw-retried" }), `retried ${total.retried}`),
    el("span", {}, el("i", { class: "sw-deferred" }), `deferred ${total.deferred}`)));
  $("chart-caption").textContent = stats.admin ? title.textContent : "Runs are the operator's: an admin key shows them.";
}

function renderRuns(stats) {
  fill($("runs-table").tBodies[0], stats.runs.map((run) => el("tr", {},
    el("td", { text: when(run.startedAt) }), el("td", { text: run.trigger }),
    el("td", { text: run.stopReason || "running…" }), num(run.jobsDone), num(run.jobsFailed), num(run.jobsRetried), num(run.jobsDeferred),
    el("td", { class: "num", text: run.durationSeconds === null ? "–" : `${run.durationSeconds.toFixed(1)} s` }))),
    8, stats.admin ? "No runs yet." : "Runs are the operator's: an admin key shows them.");
}

function renderLanes(stats) {
  fill($("lanes-table").tBodies[0], stats.lanes.map((lane) => {
    const action = lane.paused ? "Resume" : "Pause";
    // a lane's pause is the operator's (PATCH /lanes/{id} refuses a tenant's key)
    const button = stats.admin
      ? el("button", { type: "button", class: lane.paused ? "" : "secondary", "aria-label": `${action} lane ${short(lane.lane)}`,
        text: action, onclick: () => pauseLane(button, lane.lane, !lane.paused) })
      : null;
    return el("tr", { "data-lane": lane.lane },
      el("td", {}, el("code", { title: lane.lane, text: short(lane.lane) })), num(lane.pending), num(lane.running),
      num(lane.priority), el("td", { text: lane.paused ? "paused" : "" }), el("td", {}, button || "–"));
  }), 6, "No open work in any lane.");
}

async function pauseLane(button, lane, paused) {
  button.disabled = true;
  try {
    await api(`/lanes/${encodeURIComponent(lane)}`, { method: "PATCH", body: JSON.stringify({ paused }),
      headers: { "Content-Type": "application/json" } });
    notice(`Lane ${short(lane)}: ${paused ? "paused" : "resumed"}.`);
  } catch (err) {
    if (err.status !== 401) notice(`Lane ${short(lane)}: ${err.message}`);
  }
  refreshSoon(0);
}

function renderBatches(stats) {
  const list = $("batches");
  list.replaceChildren();
  if (!stats.batches.length) { list.append(el("li", { class: "empty", text: "No batches." })); return; }
  for (const b of stats.batches) {
    const byUnits = b.total !== null && b.total > 0;
    const max = byUnits ? b.total : Math.max(1, b.jobs);
    const value = byUnits ? Math.min(b.progress || 0, b.total) : b.done + b.failed;
    const what = `${value} of ${max} ${byUnits ? "units" : "jobs"}, ${b.status}`;
    const label = `Batch ${short(b.id)}: ${what}`;
    const opener = el("button", { type: "button", class: "link", title: b.id, "aria-label": `Open batch ${short(b.id)}`,
      text: short(b.id), onclick: () => openBatch(b.id, opener) });
    list.append(el("li", { "data-batch": b.id }, el("div", {}, opener, ` ${what}`),
      el("progress", { max, value, "aria-label": label })));
  }
}

// What holds back VACUUM's horizon (admins only: the database is the operator's).
function renderHorizon(stats) {
  const h = stats.horizon;
  const holder = h && h.holders.length ? h.holders[0] : null;
  const card = $("horizon");
  card.classList.toggle("warn", Boolean(h && h.heldTooLong));
  card.dataset.pid = holder && holder.pid !== null ? String(holder.pid) : "";
  $("h-who").textContent = holder ? holder.who : "–";
  $("h-for").textContent = holder ? (holder.seconds === null ? "unknown" : age(holder.seconds)) : "–";
  $("h-xids").textContent = holder ? holder.xidAge : "–";
  $("h-dead").textContent = h ? h.deadTuples : "–";
  $("h-query").textContent = holder && holder.query ? holder.query : "";
  $("h-query").parentElement.hidden = !(holder && holder.query);
  let note;
  if (!h) note = "The database's snapshots are the operator's: an admin key shows them.";
  else if (!holder) note = "Nothing holds back VACUUM: it can remove every dead row version.";
  else if (h.heldTooLong) note = "Held too long: VACUUM removes no row version this snapshot may still see, and the queue slows down.";
  else note = "VACUUM can remove no row version newer than this.";
  if (holder && holder.kind === "session" && holder.seconds === null) {
    note += " How long is hidden: GRANT pg_read_all_stats TO skiplock_admin shows it.";
  }
  $("horizon-note").textContent = note;
  fill($("horizon-table").tBodies[0], (h ? h.tables : []).map((t) => el("tr", { "data-table": t.table },
    el("th", { scope: "row", text: t.table }), num(t.dead), num(t.live),
    el("td", { text: t.autovacuumSecondsAgo === null ? "never" : `${age(t.autovacuumSecondsAgo)} ago` }))),
    4, h ? "No queue tables." : "Admins only.");
}

function renderPanels(stats) {
  const box = $("panels");
  box.replaceChildren();
  stats.panels.forEach((panel, n) => {
    const id = `panel-${n}`;
    const rows = panel.rows.map((row) => el("tr", {}, ...row.map((cell, i) =>
      i === 0 ? el("th", { scope: "row", text: cell }) : el("td", { text: cell === null ? "–" : cell }))));
    const table = el("table", {}, el("thead", {}, el("tr", {}, ...panel.columns.map((c) => el("th", { scope: "col", text: c })))),
      el("tbody", {}, ...rows));
    box.append(el("section", { class: "card", "aria-labelledby": id }, el("h2", { id, text: panel.title }),
      panel.note ? el("p", { class: "hint", text: panel.note }) : null, el("div", { class: "scroll" }, table)));
  });
}

function render(stats) {
  $("who").textContent = `${stats.email || "?"} · ${stats.admin ? "admin: every tenant" : "tenant"}`;
  renderQueue(stats);
  renderStages(stats);
  renderTrouble(stats);
  renderChart(stats);
  renderRuns(stats);
  renderLanes(stats);
  renderBatches(stats);
  renderHorizon(stats);
  renderPanels(stats);
  jobsOnStats(stats);
  trendsOnStats(stats);
  batchOnStats();
  document.body.dataset.statsAt = stats.at;
}

function notice(text) {
  const box = $("notice");
  box.textContent = text;
  box.hidden = false;
}

function logActivity(item) {
  const list = $("activity");
  const text = item.type === "gap"
    ? `gap: events after ${item.after} were missed; caught up from ${item.oldest}`
    : `${item.type} ${describe(item.data)}`;
  list.prepend(el("li", {}, el("time", { datetime: item.at || new Date().toISOString(), text: when(item.at || new Date().toISOString()) }), text));
  while (list.children.length > ACTIVITY_SHOWN) list.lastChild.remove();
}

function describe(data) {
  if (!data || typeof data !== "object") return "";
  const parts = [];
  for (const name of ["type", "count", "done", "failed", "deferred", "status", "stopReason", "trigger"]) {
    if (data[name] !== undefined && data[name] !== null && data[name] !== 0) parts.push(`${name} ${data[name]}`);
  }
  return parts.join(", ");
}

// ---- finding jobs, one job's story, acting on many -------------------------------------
// The Jobs view pages GET /jobs with the filter a person submitted (keyset: "Load more"
// follows nextCursor); live changes read the rows shown again. One job's panel reads GET
// /jobs/{id}/timeline. Bulk actions name the jobs by id: those selected, or those a dry
// run of the filter found, so the confirmation's count is what is acted on.

const jobs = { query: null, rows: [], cursor: null, selected: new Set(), open: null, asked: null, stats: null };

// Labels that tell the jobs shown apart: the end of each id (time-ordered ids share their
// start, their end is random), longer wherever two shown would otherwise look the same.
function distinctLabels(ids) {
  const plain = ids.map((id) => String(id).replace(/-/g, ""));
  const labels = new Map();
  plain.forEach((p, i) => {
    let n = 8;
    while (n < p.length && plain.some((q, j) => j !== i && q !== p && q.endsWith(p.slice(-n)))) n += 4;
    labels.set(ids[i], `…${p.slice(-n)}`);
  });
  return labels;
}

function cancelled(job) { return job.status === "cancelled" || (job.status === "failed" && job.lastError === "cancelled"); }

function statusText(job) {
  if (cancelled(job)) return "cancelled";
  if (job.status === "pending" && job.attempts > 0) return `retrying ${when(job.runAfter)}`;
  return job.status;
}

function postJson(body) {
  return { method: "POST", body: JSON.stringify(body),
    headers: { "Content-Type": "application/json", "Idempotency-Key": randomKey() } };
}

// The submitted filter as GET /jobs spells it (times: this browser's, sent as UTC).
function filterQuery() {
  const form = $("jobs-filter");
  const query = {};
  for (const name of ["status", "type", "lane", "batch_id", "error"]) {
    const value = form.elements[name].value.trim();
    if (value) query[name] = value;
  }
  for (const name of ["since", "until"]) {
    const at = form.elements[name].value ? new Date(form.elements[name].value) : null;
    if (at && !Number.isNaN(at.getTime())) query[name] = at.toISOString();
  }
  return query;
}

function jobsUrl(params) { return `/jobs?${new URLSearchParams(params).toString()}`.replace(/\?$/, ""); }

async function findJobs(more) {
  const query = more ? jobs.query : filterQuery();
  const params = Object.assign({}, query, more && jobs.cursor ? { cursor: jobs.cursor } : {});
  $("jobs-error").textContent = "";
  try {
    const page = await api(jobsUrl(params));
    if (!more) { jobs.query = query; jobs.selected.clear(); }
    jobs.rows = more ? jobs.rows.concat(page.data) : page.data;
    jobs.cursor = page.nextCursor;
    renderJobs();
  } catch (err) {
    if (err.status !== 401) $("jobs-error").textContent = err.message;
  }
}

// After a change anywhere: the rows shown, read again (as many as were loaded).
async function rereadJobs() {
  if (jobs.query === null) return;
  const limit = Math.min(Math.max(jobs.rows.length, 1), (jobs.stats && jobs.stats.pageSizeMax) || 50);
  try {
    const page = await api(jobsUrl(Object.assign({}, jobs.query, { limit })));
    jobs.rows = page.data;
    jobs.cursor = page.nextCursor;
    const shown = new Set(jobs.rows.map((j) => j.id));
    for (const id of [...jobs.selected]) if (!shown.has(id)) jobs.selected.delete(id);
    renderJobs();
  } catch (err) {
    if (err.status !== 401) $("jobs-error").textContent = err.message;
  }
}

function renderJobs() {
  const labels = distinctLabels(jobs.rows.map((j) => j.id));
  fill($("jobs-table").tBodies[0], jobs.rows.map((job) => {
    const label = labels.get(job.id);
    const box = el("input", { type: "checkbox", "aria-label": `Select job ${label}`, checked: jobs.selected.has(job.id),
      onchange: (event) => { if (event.target.checked) jobs.selected.add(job.id); else jobs.selected.delete(job.id); renderBulk(); } });
    return el("tr", { "data-found": job.id },
      el("td", {}, box),
      el("td", {}, el("button", { type: "button", class: "link", title: job.id, "aria-label": `Open job ${label}`,
        text: label, onclick: () => openJob(job.id) })),
      el("td", { text: job.type }), el("td", { text: statusText(job) }), num(job.attempts),
      el("td", { text: when(job.createdAt) }), el("td", { class: "err", text: job.lastError || "" }));
  }), 7, "No job matches this filter.");
  $("jobs-more").hidden = !jobs.cursor;
  $("jobs-all").checked = jobs.rows.length > 0 && jobs.rows.every((j) => jobs.selected.has(j.id));
  renderBulk();
}

function renderBulk() {
  const n = jobs.selected.size;
  $("bulk-count").textContent = n ? `${n} selected` : "None selected";
  $("bulk-retry").disabled = n === 0;
  $("bulk-cancel").disabled = n === 0;
}

// The filter's selects: the statuses GET /jobs takes and the stages this deployment knows.
function fillChoices(select, values) {
  const kept = select.value;
  const have = [...select.options].slice(1).map((o) => o.value);
  if (have.join("\n") === values.join("\n")) return;
  select.replaceChildren(el("option", { value: "", text: "any" }), ...values.map((v) => el("option", { value: v, text: v })));
  select.value = values.includes(kept) ? kept : "";
}

function jobsOnStats(stats) {
  const first = jobs.stats === null;
  jobs.stats = stats;
  fillChoices($("f-status"), stats.jobStatuses || []);
  fillChoices($("f-type"), [...new Set([...(stats.stages || []).map((s) => s.type), ...stats.queue.map((q) => q.type)])]);
  if (first) findJobs(false); else rereadJobs();
  if (jobs.open && !first) showJob(false);
}

function resetJobs() {
  Object.assign(jobs, { query: null, rows: [], cursor: null, open: null, asked: null, stats: null });
  jobs.selected.clear();
  $("job-panel").hidden = true;
  $("bulk-confirm").hidden = true;
}

// ---- acting on many: a question that says how many, then the action -------------------

async function askBulk(action, all, from) {
  const verb = action === "retry" ? "Retry" : "Cancel";
  const limit = (jobs.stats && jobs.stats.bulkLimit) || 500;
  let ids, question;
  if (all) {
    let preview;
    try {
      preview = await api(`/jobs/bulk/${action}`, postJson({ filter: jobs.query || {}, dry_run: true }));
    } catch (err) {
      if (err.status !== 401) notice(`${verb}: ${err.message}`);
      return;
    }
    ids = preview.changed;
    if (!ids.length) { notice(`No job that matches this filter can be ${action === "retry" ? "retried" : "cancelled"}.`); return; }
    // without a status, a filter means the jobs the action changes: retry the failed, cancel the pending
    const which = (jobs.query && jobs.query.status) || (action === "retry" ? "failed" : "pending");
    question = `${verb} ${ids.length} ${which} job${ids.length === 1 ? "" : "s"} that match this filter` +
      (preview.more ? ` (the newest ${ids.length}: more match; do it again for the rest)?` : "?");
  } else {
    ids = [...jobs.selected];
    if (ids.length > limit) { notice(`${verb}: at most ${limit} jobs at once; ${ids.length} are selected.`); return; }
    question = `${verb} ${ids.length} selected job${ids.length === 1 ? "" : "s"}?`;
  }
  jobs.asked = { action, ids, from };
  $("bulk-question").textContent = question;
  $("bulk-confirm").hidden = false;
  $("bulk-yes").focus();
}

function dropQuestion() {
  const asked = jobs.asked;
  jobs.asked = null;
  $("bulk-confirm").hidden = true;
  if (asked && asked.from) asked.from.focus();
}

async function doBulk() {
  const asked = jobs.asked;
  if (!asked) return;
  dropQuestion();
  const verb = asked.action === "retry" ? "Retried" : "Cancelled";
  try {
    const result = await api(`/jobs/bulk/${asked.action}`, postJson({ ids: asked.ids }));
    const why = {};
    for (const s of result.skipped) why[s.code] = (why[s.code] || 0) + 1;
    const left = Object.entries(why).map(([code, n]) => `${n} ${code}`).join(", ");
    notice(`${verb} ${result.changed.length} of ${asked.ids.length} jobs` + (left ? `; left as they were: ${left}.` : "."));
    jobs.selected.clear();
  } catch (err) {
    if (err.status !== 401) notice(`${verb.replace(/ed$/, "")}: ${err.message}`);
  }
  refreshSoon(0);
}

// ---- one job's panel: facts, actions, timeline, errors, payload ------------------------

function openJob(id) {
  jobs.open = id;
  showJob(true);
}

// One moment of a job's timeline in words: "attempt 2 failed", "due (attempt 3)", ...
function momentTitle(m) {
  if (m.kind === "attempt_failed") return `attempt ${m.attempt} failed`;
  if (m.kind === "claimed") return `attempt ${m.attempt} claimed`;
  if (m.kind === "due") return `due (attempt ${m.attempt})`;
  if (m.kind === "changed") return `changed by ${m.actor}`;
  return m.kind;
}

function fact(name, ...value) { return el("div", {}, el("dt", { text: name }), el("dd", {}, ...value)); }

async function showJob(focus) {
  const id = jobs.open;
  let story;
  try {
    story = await api(`/jobs/${encodeURIComponent(id)}/timeline`);
  } catch (err) {
    if (err.status !== 401) notice(`Job ${short(id)}: ${err.message}`);
    return;
  }
  if (jobs.open !== id) return;
  const job = story.job;
  const label = distinctLabels([job.id]).get(job.id);
  $("job-title").textContent = `Job ${label}: ${job.type}, ${statusText(job)}`;
  $("job-id").textContent = job.id;
  const batch = el("dd", { text: job.batchId ? "…" : "none" });
  const run = el("dd", { text: job.runId ? "…" : "none" });
  $("job-facts").replaceChildren(
    fact("Status", statusText(job)), fact("Stage", job.type), fact("Attempts", String(job.attempts)),
    fact("Created", when(job.createdAt)), fact("Due", when(job.runAfter)), fact("Claimed", when(job.lockedAt)),
    fact("Finished", when(job.finishedAt)), fact("Lane", el("code", { text: job.lane })),
    fact("Priority", String(job.priority)),
    fact("Dedupe key", job.dedupeKey === null ? "none" : el("code", { text: job.dedupeKey })),
    fact("Progress", job.total === null ? "–" : `${job.progress || 0} of ${job.total}`),
    el("div", {}, el("dt", { text: "Batch" }), batch), el("div", {}, el("dt", { text: "Run" }), run));
  const actions = [];
  if (job.status === "failed" || job.status === "cancelled") actions.push(["retry", "Retry this job"]);
  // a running job can be asked to stop where the queue has the `cancelled` status
  const stoppable = job.status === "running" && !job.cancelRequestedAt
    && ((jobs.stats && jobs.stats.jobStatuses) || []).includes("cancelled");
  if (job.status === "pending" || job.status === "waiting" || stoppable) actions.push(["cancel", "Cancel this job"]);
  $("job-actions").replaceChildren(...actions.map(([action, text]) => {
    const button = el("button", { type: "button", class: action === "retry" ? "" : "secondary", text,
      onclick: () => act(button, job.id, action) });
    return button;
  }));
  $("job-timeline").replaceChildren(...story.timeline.map((m) => el("li", {},
    el("time", { datetime: m.at, text: when(m.at) }), " ",
    el("strong", { text: momentTitle(m) }), m.runId ? `, run ${short(m.runId)}` : "",
    m.text ? ": " : "", m.text ? el("span", { class: m.kind === "changed" ? "" : "err", text: m.text }) : "")));
  $("job-errlist").replaceChildren(errorList(job.errors));
  $("job-payload").textContent = JSON.stringify(job.payload, null, 2);
  $("job-panel").hidden = false;
  if (focus) { $("job-title").focus(); $("job-panel").scrollIntoView({ block: "nearest" }); }
  if (job.batchId) {
    api(`/batches/${encodeURIComponent(job.batchId)}`).then((b) => {
      const open = (b.counts.pending || 0) + (b.counts.running || 0);
      const opener = el("button", { type: "button", class: "link", title: b.id, "aria-label": `Open batch ${short(b.id)}`,
        text: short(b.id), onclick: () => openBatch(b.id, opener) });
      batch.replaceChildren(opener, ` ${b.status}, ${b.jobs - open} of ${b.jobs} jobs ended`);
    }).catch(() => batch.replaceChildren(el("code", { title: job.batchId, text: short(job.batchId) })));
  }
  if (job.runId) {
    api(`/runs/${encodeURIComponent(job.runId)}`).then((r) => {
      run.replaceChildren(el("code", { title: r.id, text: short(r.id) }),
        ` ${r.trigger}, started ${when(r.startedAt)}, ${r.stopReason ? `stopped: ${r.stopReason}` : "running"}`);
    }).catch(() => run.replaceChildren(el("code", { title: job.runId, text: short(job.runId) }),
      " (runs are the operator's)"));
  }
}

async function copyJobId() {
  const id = $("job-id").textContent;
  try {
    await navigator.clipboard.writeText(id);
    notice(`Copied ${id}.`);
  } catch (err) {
    window.getSelection().selectAllChildren($("job-id")); // selected: Ctrl+C copies it
    notice("Selected the id: press Ctrl+C (⌘C) to copy it.");
  }
}

function wireJobs() {
  $("jobs-filter").addEventListener("submit", (event) => { event.preventDefault(); findJobs(false); });
  $("f-clear").addEventListener("click", () => { $("jobs-filter").reset(); findJobs(false); });
  $("jobs-more").addEventListener("click", () => findJobs(true));
  $("jobs-all").addEventListener("change", (event) => {
    for (const job of jobs.rows) { if (event.target.checked) jobs.selected.add(job.id); else jobs.selected.delete(job.id); }
    renderJobs();
  });
  $("bulk-retry").addEventListener("click", (event) => askBulk("retry", false, event.currentTarget));
  $("bulk-cancel").addEventListener("click", (event) => askBulk("cancel", false, event.currentTarget));
  $("bulk-retry-all").addEventListener("click", (event) => askBulk("retry", true, event.currentTarget));
  $("bulk-cancel-all").addEventListener("click", (event) => askBulk("cancel", true, event.currentTarget));
  $("bulk-yes").addEventListener("click", doBulk);
  $("bulk-no").addEventListener("click", dropQuestion);
  $("bulk-confirm").addEventListener("keydown", (event) => { if (event.key === "Escape") dropQuestion(); });
  $("job-close").addEventListener("click", () => { jobs.open = null; $("job-panel").hidden = true; $("jobs-title").focus(); });
  $("job-copy").addEventListener("click", copyJobId);
}

// ---- reading state and events --------------------------------------------------------

async function refresh() {
  state.refreshTimer = null;
  const gapsBefore = state.gaps;
  try {
    const stats = await api("/stats");
    if (state.room !== stats.room) { state.room = stats.room; state.cursor = stats.head; }
    if (state.cursor === null) state.cursor = stats.head;
    render(stats);
    // a read begun after the last gap shows what it missed: only now may the cursor pass it
    if (state.held !== null && gapsBefore >= state.heldAt) {
      state.cursor = Math.max(state.cursor, state.held);
      state.held = null;
    }
    return stats;
  } catch (err) {
    if (err.status !== 401) setLive(`Could not read /stats: ${err.message}`, "warn");
    return null;
  }
}

function refreshSoon(ms = REFRESH_MS) {
  if (state.refreshTimer !== null) return;
  state.refreshTimer = setTimeout(refresh, ms);
}

function setLive(text, tone) {
  const box = $("live");
  box.textContent = text;
  box.className = `live ${tone || ""}`;
}

// One item from the room, whichever way it came: a gap, an event, or 'live'.
function receive(item) {
  if (item.type === "live") { advance(item.seq); setLive("Live", "ok"); return; }
  if (item.type === "error") { setLive(item.error.message, "warn"); return; }
  if (item.type === "gap") {
    state.gaps += 1;
    document.body.dataset.gaps = String(state.gaps);
    notice(`Caught up from a gap: more than ${document.body.dataset.replay} events passed while the page was ` +
           `not connected (after ${item.after}); it reloaded everything and carries on from event ${item.oldest}.`);
    state.held = Math.max(state.held ?? state.cursor, item.oldest - 1); // not the cursor: /stats first
    state.heldAt = state.gaps;
    logActivity(item);
    refreshSoon(0);
    return;
  }
  if (typeof item.seq === "number") {
    if (item.seq <= (state.held ?? state.cursor)) return; // seen already
    advance(item.seq);
    logActivity(item);
    refreshSoon();
  }
}

// The cursor moves to a seq received, unless a gap's reread of /stats is still to come.
function advance(seq) {
  if (state.held !== null) state.held = Math.max(state.held, seq);
  else state.cursor = seq;
}

function connect() {
  if (state.closing || !state.key || state.room === null) return;
  if (state.mode !== "ws" || !window.WebSocket) { startPolling(); return; }
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const url = `${scheme}://${location.host}${BASE}events/ws?room=${encodeURIComponent(state.room)}&after=${state.cursor}`;
  let socket;
  try {
    socket = new WebSocket(url, ["skiplock.events", `bearer.${state.key}`]);
  } catch (err) {
    startPolling();
    return;
  }
  state.socket = socket;
  let opened = false;
  socket.onopen = () => { opened = true; state.failures = 0; state.reconnectMs = 1000; };
  socket.onmessage = (message) => {
    let item;
    try { item = JSON.parse(message.data); } catch (err) { return; }
    receive(item);
  };
  socket.onclose = (event) => {
    if (state.socket !== socket || state.closing) return;
    state.socket = null;
    if (event.code === 4401) { logout("This API key is no longer valid: log in again."); return; }
    if (event.code === 4429) { startPolling(); return; } // this key's streams are all in use
    if (!opened) state.failures += 1;
    if (state.failures >= 3) { startPolling(); return; }
    setLive("Reconnecting…", "warn");
    setTimeout(connect, state.reconnectMs);
    state.reconnectMs = Math.min(state.reconnectMs * 2, 15000);
  };
}

function startPolling() {
  if (state.pollTimer !== null) return;
  setLive("Polling", "ok");
  const poll = async () => {
    state.pollTimer = null;
    if (state.closing) return;
    try {
      let page;
      do {
        page = await api(`/events?room=${encodeURIComponent(state.room)}&after=${state.held ?? state.cursor}&limit=200`);
        for (const item of page.data) receive(item);
        advance(Math.max(state.held ?? state.cursor, page.nextCursor));
      } while (page.data.length >= 200);
      setLive("Polling", "ok");
    } catch (err) {
      if (err.status === 401) return;
      setLive(`Polling failed: ${err.message}`, "warn");
    }
    state.pollTimer = setTimeout(poll, POLL_MS);
  };
  state.pollTimer = setTimeout(poll, 0);
}

// ---- session -------------------------------------------------------------------------

async function start(key) {
  state.key = key;
  state.closing = false;
  state.cursor = null;
  state.held = null;
  state.room = null;
  const stats = await refresh();
  if (!stats) return false;
  sessionStorage.setItem(KEY_ITEM, key);
  $("login").hidden = true;
  $("board").hidden = false;
  $("top-actions").hidden = false;
  connect();
  state.safetyTimer = setInterval(() => refreshSoon(0), SAFETY_REFRESH_MS);
  return true;
}

function logout(message) {
  state.closing = true;
  sessionStorage.removeItem(KEY_ITEM);
  state.key = null;
  if (state.socket) { state.socket.close(); state.socket = null; }
  clearTimeout(state.pollTimer); state.pollTimer = null;
  clearInterval(state.safetyTimer);
  $("board").hidden = true;
  $("top-actions").hidden = true;
  $("login").hidden = false;
  $("who").textContent = "";
  resetJobs();
  resetTrends();
  resetBatch();
  setLive("Not connected", "");
  $("login-error").textContent = message || "";
  $("key").focus();
}

document.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    $("login-error").textContent = "";
    const key = $("key").value.trim();
    $("key").value = "";
    if (!(await start(key)) && !$("login-error").textContent) {
      $("login-error").textContent = "Could not open the dashboard with that key.";
    }
  });
  $("logout").addEventListener("click", () => logout(""));
  new MutationObserver(keyboardScrollSoon).observe($("board"), { childList: true, subtree: true, attributes: true,
    attributeFilter: ["hidden"] });
  window.addEventListener("resize", keyboardScrollSoon);
  $("refresh").addEventListener("click", () => refreshSoon(0));
  wireJobs();
  const kept = sessionStorage.getItem(KEY_ITEM);
  if (kept) start(kept);
});

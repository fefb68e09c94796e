// One batch's panel, opened from the Batches card or from a job's panel: GET /batches/{id}
// drawn as its status, a bar of its jobs done, failed and cancelled out of all, the units
// its jobs reported, and its first jobs (each opens the job's panel; "Show its jobs" lists
// them all in the Jobs view). Uses dashboard.js's helpers, loaded before it.
"use strict";

const BATCH_JOBS_SHOWN = 50;
const batchView = { open: null, from: null };

function openBatch(id, from) {
  batchView.open = id;
  batchView.from = from || null;
  showBatch(true);
}

function batchOnStats() { if (batchView.open) showBatch(false); }

function resetBatch() {
  batchView.open = null;
  $("batch-panel").hidden = true;
}

function closeBatch() {
  const from = batchView.from;
  resetBatch();
  (from && from.isConnected ? from : $("batches-title")).focus();
}

// The jobs ended out of all as one bar: done, failed and cancelled side by side, the rest open.
function batchBar(parts, all, label) {
  const width = 600, height = 18;
  const bar = svg("svg", { viewBox: `0 0 ${width} ${height}`, preserveAspectRatio: "none", role: "img", "aria-label": label });
  bar.append(svg("rect", { x: 0, y: 0, width, height, class: "bar-open" }));
  let x = 0;
  for (const [name, n] of parts) {
    const w = all ? (n / all) * width : 0;
    if (w > 0) bar.append(svg("rect", { x, y: 0, width: w, height, class: `bar-${name}` }));
    x += w;
  }
  return bar;
}

async function showBatch(focus) {
  const id = batchView.open;
  let b;
  try {
    b = await api(`/batches/${encodeURIComponent(id)}`);
  } catch (err) {
    if (err.status !== 401) notice(`Batch ${short(id)}: ${err.message}`);
    return;
  }
  if (batchView.open !== id) return;
  const counts = b.counts;
  const cancelled = counts.cancelled || 0;
  const label = `${counts.done} done, ${counts.failed} failed, ${cancelled} cancelled of ${b.jobs} jobs`;
  $("batch-title").textContent = `Batch ${short(b.id)}: ${b.status}`;
  $("batch-id").textContent = b.id;
  $("batch-bar").replaceChildren(
    batchBar([["done", counts.done], ["failed", counts.failed], ["cancelled", cancelled]], b.jobs, label),
    el("p", { class: "legend" },
      el("span", {}, el("i", { class: "sw-done" }), `done ${counts.done}`),
      el("span", {}, el("i", { class: "sw-failed" }), `failed ${counts.failed}`),
      el("span", {}, el("i", { class: "sw-cancelled" }), `cancelled ${cancelled}`),
      el("span", {}, el("i", { class: "sw-open" }), `open ${counts.pending + counts.running}`),
      el("span", { text: `of ${b.jobs}` })));
  $("batch-facts").replaceChildren(
    fact("Status", b.status), fact("Jobs", label), fact("Units", b.total === null ? "–" : `${b.progress} of ${b.total}`),
    fact("Created", when(b.createdAt)), fact("Finished", when(b.finishedAt)), fact("Lane", el("code", { text: b.lane })));
  const shown = b.children.slice(0, BATCH_JOBS_SHOWN);
  const labels = distinctLabels(shown.map((c) => c.id));
  fill($("batch-table").tBodies[0], shown.map((c) => el("tr", { "data-child": c.id },
    el("td", {}, el("button", { type: "button", class: "link", title: c.id, "aria-label": `Open job ${labels.get(c.id)}`,
      text: labels.get(c.id), onclick: () => openJob(c.id) })),
    el("td", { text: c.type }), el("td", { text: c.status }), num(c.attempts),
    el("td", { text: c.total === null ? "–" : `${c.progress || 0} of ${c.total}` }),
    el("td", { class: "err", text: c.lastError || "" }))), 6, "No jobs.");
  $("batch-more").textContent = b.children.length > shown.length
    ? `The first ${shown.length} of ${b.children.length} jobs; "Show its jobs" lists them all.` : "";
  $("batch-panel").hidden = false;
  if (focus) { $("batch-title").focus(); $("batch-panel").scrollIntoView({ block: "nearest" }); }
}

// The Jobs view, filtered to this batch's jobs.
function batchJobs() {
  const form = $("jobs-filter");
  form.reset();
  form.elements.batch_id.value = batchView.open;
  findJobs(false);
  $("jobs-title").focus();
}

document.addEventListener("DOMContentLoaded", () => {
  $("batch-close").addEventListener("click", closeBatch);
  $("batch-jobs").addEventListener("click", batchJobs);
});

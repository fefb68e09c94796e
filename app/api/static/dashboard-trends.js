// The dashboard's Trends card: GET /trends drawn as inline SVG by this script (no chart
// library). Per stage, jobs done and failed per minute and the wait from due to claimed
// (p50, p95); the runs by stop reason. It uses dashboard.js's helpers ($, el, svg, api,
// age), loaded before it. Read when the card opens, when the window changes, and with a
// /stats refresh at most every TRENDS_EVERY_MS: a trend moves by the minute.
"use strict";

const TRENDS_EVERY_MS = 30000;
const STOP_REASON_CLASSES = ["no_work", "time_budget", "quota_reserve", "quota_exhausted", "error"];
const trends = { window: "hour", readAt: 0, reading: false, admin: false };

function trendsOnStats(stats) {
  trends.admin = stats.admin;
  if (!trends.reading && Date.now() - trends.readAt >= TRENDS_EVERY_MS) readTrends();
}

function resetTrends() { trends.readAt = 0; }

async function readTrends() {
  trends.reading = true;
  try {
    renderTrends(await api(`/trends?window=${trends.window}`));
    trends.readAt = Date.now();
  } catch (err) {
    if (err.status !== 401) $("trends-note").textContent = `Could not read /trends: ${err.message}`;
  } finally {
    trends.reading = false;
  }
}

function clock(iso) {
  return new Date(iso).toLocaleTimeString(undefined, { hour: "2-digit", minute: "2-digit" });
}

// The span a chart covers, in words, for its axis line: "14:02 – 15:01".
function span(points) { return points.length ? `${clock(points[0].at)} – ${clock(points[points.length - 1].at)}` : ""; }

function rounded(value) { return value >= 10 ? Math.round(value) : Math.round(value * 10) / 10; }

const CHART = { width: 600, height: 100, pad: 3 };

// Stacked bars, one per point: `parts` are [name, value of a point] drawn bottom up.
function barChart(points, parts, label, scale) {
  const { width, height, pad } = CHART;
  const top = Math.max(1e-9, ...points.map((p) => parts.reduce((sum, [, value]) => sum + value(p), 0)));
  const step = (width - 2 * pad) / Math.max(1, points.length);
  const chart = svg("svg", { viewBox: `0 0 ${width} ${height}`, preserveAspectRatio: "none", role: "img",
    "aria-label": label });
  points.forEach((p, i) => {
    let y = height - pad;
    for (const [name, value] of parts) {
      const h = (value(p) / top) * (height - 2 * pad);
      if (h <= 0) continue;
      y -= h;
      chart.append(svg("rect", { x: pad + i * step, y, width: Math.max(1, step * 0.8), height: h, class: `bar-${name}` }));
    }
  });
  return { chart, top: top * scale };
}

// A step line per series: each bucket's value across the bucket's width (as the bars above
// it, so they line up); a bucket without a value breaks the line.
function lineChart(points, lines, label) {
  const { width, height, pad } = CHART;
  const top = Math.max(1e-9, ...points.flatMap((p) => lines.map(([, value]) => value(p) ?? 0)));
  const step = (width - 2 * pad) / Math.max(1, points.length);
  const chart = svg("svg", { viewBox: `0 0 ${width} ${height}`, preserveAspectRatio: "none", role: "img",
    "aria-label": label });
  for (const [name, value] of lines) {
    let d = "", drawing = false;
    points.forEach((p, i) => {
      const v = value(p);
      if (v === null || v === undefined) { drawing = false; return; }
      const y = height - pad - (v / top) * (height - 2 * pad);
      d += `${drawing ? `V${y}` : `M${pad + i * step} ${y}`} H${pad + (i + 1) * step} `;
      drawing = true;
    });
    if (d) chart.append(svg("path", { d, class: `line-${name}`, "vector-effect": "non-scaling-stroke" }));
  }
  return { chart, top };
}

function legend(...items) {
  return el("p", { class: "legend" }, ...items.map(([name, text]) => el("span", {}, el("i", { class: `sw-${name}` }), text)));
}

function stageTrend(stage, perMinute, windowText) {
  const points = stage.points;
  const waits = points.map((p) => p.waitP95Seconds).filter((w) => w !== null);
  const worst = waits.length ? Math.max(...waits) : null;
  const peak = Math.max(0, ...points.map((p) => (p.done + p.failed) * perMinute));
  const rate = barChart(points, [["done", (p) => p.done], ["failed", (p) => p.failed]],
    `${stage.type}, ${windowText}: ${stage.done} done, ${stage.failed} failed; at most ${rounded(peak)} a minute`, perMinute);
  const wait = lineChart(points, [["p95", (p) => p.waitP95Seconds], ["p50", (p) => p.waitP50Seconds]],
    `${stage.type}, ${windowText}: wait from due to start, p95 at most ${worst === null ? "none" : age(worst)}`);
  return el("figure", { class: "trend", "data-stage": stage.type },
    el("figcaption", {}, el("strong", { text: stage.type }), ` ${stage.done} done, ${stage.failed} failed`),
    el("div", { class: "chart" }, rate.chart),
    el("p", { class: "axis" }, el("span", { text: `jobs a minute (top ${rounded(rate.top)})` }), el("span", { text: span(points) })),
    legend(["done", "done"], ["failed", "failed"]),
    el("div", { class: "chart" }, wait.chart),
    el("p", { class: "axis" }, el("span", { text: `wait, due to start (top ${age(wait.top)})` }), el("span", { text: span(points) })),
    legend(["p50", "p50"], ["p95", "p95"]));
}

function renderTrends(answer) {
  const perMinute = 60 / answer.bucketSeconds;
  const windowText = answer.window === "day" ? "the last day" : "the last hour";
  for (const button of document.querySelectorAll("#trends-windows button")) {
    button.setAttribute("aria-pressed", String(button.dataset.window === answer.window));
  }
  $("trends-note").textContent = `Over ${windowText}, in buckets of ${answer.bucketSeconds / 60} min: a job counts when it `
    + "ended; its wait is its last attempt's, from due to claimed.";
  const box = $("trends-stages");
  box.replaceChildren(...answer.stages.map((stage) => stageTrend(stage, perMinute, windowText)));
  if (!answer.stages.length) box.append(el("p", { class: "empty", text: `No job ended in ${windowText}.` }));

  const totals = Object.fromEntries(STOP_REASON_CLASSES.map((r) => [r, 0]));
  for (const p of answer.runs) for (const r of STOP_REASON_CLASSES) totals[r] += p.counts[r] || 0;
  const runs = Object.values(totals).reduce((a, b) => a + b, 0);
  const summary = `${runs} runs in ${windowText}: ` + STOP_REASON_CLASSES.map((r) => `${totals[r]} ${r}`).join(", ");
  const chart = barChart(answer.runs, STOP_REASON_CLASSES.map((r) => [r, (p) => p.counts[r] || 0]), summary, 1);
  $("trends-runs").replaceChildren(chart.chart,
    el("p", { class: "axis" }, el("span", { text: `runs (top ${chart.top})` }), el("span", { text: span(answer.runs) })),
    legend(...STOP_REASON_CLASSES.map((r) => [r, `${r} ${totals[r]}`])));
  $("trends-runs-caption").textContent = trends.admin
    ? `Runs by why they stopped: ${summary}` : "Runs are the operator's: an admin key shows them.";
}

document.addEventListener("DOMContentLoaded", () => {
  for (const button of document.querySelectorAll("#trends-windows button")) {
    button.addEventListener("click", () => { trends.window = button.dataset.window; readTrends(); });
  }
});

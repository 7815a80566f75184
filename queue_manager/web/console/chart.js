/* The chart of one room's series (uPlot, loaded before this module as a classic script): legend, marks, readout. */
import { $, $$, axisSec, clock, clockSec, compact, el, fmtInt, secs } from "./ui.js";
import { cards, state } from "./state.js";
import { api, download, fail } from "./api.js";

const SERIES = [
  { key: "depth", label: "queue depth", color: "--blue", scale: "n" },
  { key: "joinsPerMin", label: "joins/min", color: "--amber", scale: "rate" },
  { key: "passesPerMin", label: "passes/min", color: "--green", scale: "rate" },
  { key: "estWaitSec", label: "est. wait", color: "--violet", scale: "s", dash: [6, 4] },
  { key: "waitP50Sec", label: "actual wait p50", color: "--teal", scale: "s" },
  { key: "waitP90Sec", label: "actual wait p90", color: "--rose", scale: "s" },
  { key: "marks", label: "events", color: "--mark", scale: null,
    title: "Marks for everything that changed the room: rate moves, state flips, threshold activation, autotune, flushes, purges, ejects, edits, schedule changes, scheduled events, the room re-created and protection blocks" },
];
const css = (name) => getComputedStyle(document.documentElement).getPropertyValue(name).trim();
const WAIT_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 432000];
let chartData = null;
function syncChartRooms() {
  const sel = $("#chart-room");
  const ids = state.order;
  if (!ids.length) {  // also on a first load with no room at all
    if (sel.options.length) sel.replaceChildren();
    if (state.chartRoom || !$("#chart-csv").hidden) clearChart();
    return;
  }
  if (sel.options.length !== ids.length || ids.some((id, i) => sel.options[i].value !== id)) {
    const keep = state.chartRoom;
    sel.replaceChildren(...ids.map((id) => el("option", { value: id, text: (state.rooms.get(id) || {}).name || id })));
    if (!keep || !ids.includes(keep)) { if (ids.length) selectChart(ids[0], false); else clearChart(); }
    else sel.value = keep;
  }
}
function clearChart() {
  state.chartRoom = null; chartData = null;
  if (state.plot) { state.plot.destroy(); state.plot = null; }
  $("#chart-readout").textContent = "";
  const empty = $("#chart-empty");
  empty.hidden = false; empty.textContent = "No rooms to chart yet.";
  chartControls(false);
}
// with no room there is nothing to pick, export or toggle: the controls go, the empty line stays
function chartControls(on) {
  for (const sel of ["#chart-room", "#chart-range", "#chart-csv", "#legend"]) $(sel).hidden = !on;
}
function selectChart(id, focus) {
  chartControls(true);
  state.chartRoom = id;
  $("#chart-room").value = id;
  for (const c of cards.values()) c.node.classList.toggle("selected", c.id === id);
  refreshChart();
  if (focus) $("#chart-h").focus();
}
$("#chart-room").addEventListener("change", (ev) => selectChart(ev.target.value, false));
$("#chart-range").addEventListener("change", () => refreshChart());
$("#chart-csv").addEventListener("click", () => {
  if (!state.chartRoom) return;
  const res = $("#chart-range").value.split(":")[0];
  download(`api/admin/series/${encodeURIComponent(state.chartRoom)}?res=${res}&format=csv`, `${state.chartRoom}-${res}.csv`);
});
async function refreshChart() {
  if (!state.chartRoom || !state.principal) return;
  const [res, span] = $("#chart-range").value.split(":");
  try {
    const data = await api("GET", `api/admin/series/${encodeURIComponent(state.chartRoom)}?res=${res}`);
    const cut = data.now / 1000 - +span;
    data.rows = data.rows.filter((r) => r.t >= cut);
    data.span = +span;
    chartData = data;
    drawChart(false);
  } catch (err) { if (err.status !== 404) fail(err); }
}
function ratesSplit(rows) {
  const j = Math.max(0, ...rows.map((r) => r.joinsPerMin || 0)), p = Math.max(0, ...rows.map((r) => r.passesPerMin || 0));
  const lo = Math.min(j, p), hi = Math.max(j, p);
  return hi > 0 && (lo === 0 ? hi >= 4 : hi / lo > 4);
}
function renderLegend(split) {
  const box = $("#legend");
  box.replaceChildren(...SERIES.map((s) => {
    const scale = s.scale === "rate" ? (split ? " (own scale)" : " (rate scale)") : "";
    return el("button", { type: "button", title: s.title || null, "aria-pressed": state.hidden.has(s.key) ? "false" : "true", onclick: () => {
      if (state.hidden.has(s.key)) state.hidden.delete(s.key); else state.hidden.add(s.key);
      drawChart(true);
    } }, el("span", { class: "sw", style: null }), s.label, scale ? el("span", { class: "scale", text: scale }) : null);
  }));
  $$(".sw", box).forEach((sw, i) => { sw.style.background = css(SERIES[i].color); });
}
function drawChart(rebuild) {
  if (!chartData || typeof uPlot === "undefined") return;
  const rows = chartData.rows;
  const box = $("#chart-box");
  const empty = $("#chart-empty");
  // a line needs two samples: until then say what is coming instead of drawing a lone dot
  empty.hidden = rows.length >= 2;
  empty.textContent = rows.length ? `Recording since ${clock(rows[0].t * 1000)}: the lines start with the next sample (every ${chartData.stepSec || 10} s).`
    : "Waiting for the first samples…";
  const split = ratesSplit(rows);
  if (split !== state.splitRates) { rebuild = true; state.splitRates = split; }
  renderLegend(split);
  const data = [rows.map((r) => r.t), ...SERIES.filter((s) => s.scale).map((s) => rows.map((r) => r[s.key]))];
  if (state.plot && !rebuild && rows.length >= 2) { state.plot.setData(data); return; }
  if (state.plot) { state.plot.destroy(); state.plot = null; }
  if (rows.length < 2) return;
  const grid = { stroke: css("--line"), width: 1 };
  const axisBase = { stroke: css("--muted"), grid, ticks: { stroke: css("--line") }, font: "11px " + css("--mono").split(",")[0] };
  const series = [{}];
  for (const s of SERIES.filter((x) => x.scale)) {
    const scale = s.scale === "rate" && split ? (s.key === "joinsPerMin" ? "joins" : "passes") : s.scale;
    series.push({ label: s.label, scale, stroke: css(s.color), width: s.key === "passesPerMin" ? 2 : 1.5, dash: s.dash, show: !state.hidden.has(s.key), spanGaps: false,
      points: { show: rows.length < 4, size: 5 } });
  }
  const axes = [
    { ...axisBase, grid: { show: false }, space: 80, values: (u, splits) => splits.map((v) => clock(v * 1000)) },
    { ...axisBase, scale: "n", label: "people", size: 56 },
  ];
  if (split) {
    axes.push({ ...axisBase, scale: "joins", side: 3, stroke: css("--amber"), grid: { show: false }, size: 60, values: (u, v) => v.map((x) => x + "/m") });
    axes.push({ ...axisBase, scale: "passes", side: 3, stroke: css("--green"), grid: { show: false }, size: 60, values: (u, v) => v.map((x) => x + "/m") });
  } else {
    axes.push({ ...axisBase, scale: "rate", side: 3, stroke: css("--amber"), grid: { show: false }, size: 60, values: (u, v) => v.map((x) => x + "/m") });
  }
  // whole seconds, minutes and hours on the wait axis: never "4.2m"
  axes.push({ ...axisBase, scale: "s", side: 1, grid: { show: false }, size: 52, values: (u, v) => v.map(axisSec), incrs: WAIT_STEPS });
  const width = Math.max(260, Math.floor($("#chart").clientWidth - 34));
  state.plot = new uPlot({
    width, height: 300, series, axes,
    scales: { x: { time: true, range: () => xRange() }, n: { range: (u, lo, hi) => [0, Math.max(5, hi * 1.1)] }, rate: { range: (u, lo, hi) => [0, Math.max(5, hi * 1.1)] },
      joins: { range: (u, lo, hi) => [0, Math.max(5, hi * 1.1)] }, passes: { range: (u, lo, hi) => [0, Math.max(5, hi * 1.1)] },
      s: { range: (u, lo, hi) => [0, Math.max(60, (hi || 0) * 1.1)] } },
    legend: { show: false },
    cursor: { points: { size: 6 } },
    hooks: { draw: [drawMarks], setCursor: [readout] },
  }, data, box);
  box.querySelector("canvas").setAttribute("aria-label", "Chart of queue depth, joins and passes per minute, and waits");
  box.querySelector("canvas").setAttribute("role", "img");
}
function xRange() {
  const now = chartData.now / 1000, rows = chartData.rows;
  const first = rows.length ? rows[0].t : now;
  return [Math.max(now - chartData.span, Math.min(first, now - 600)), now];
}
function markGroups(u) {
  if (!chartData || state.hidden.has("marks")) return [];
  // marks closer than a hover can tell apart (6 px) are one group: drawn once, listed together on hover
  const groups = [];
  const placed = (chartData.marks || []).map((m) => ({ m, x: Math.round(u.valToPos(m.t, "x")) }))
    .filter((p) => p.x >= 0 && p.x <= u.bbox.width / devicePixelRatio).sort((a, b) => a.x - b.x);
  for (const p of placed) {
    const last = groups[groups.length - 1];
    if (last && p.x - last.x <= 6) last.marks.push(p.m); else groups.push({ x: p.x, marks: [p.m] });
  }
  return groups;
}
// what the machine did on its own is drawn apart from everything else: a solid coloured line under a triangle
// (threshold activation amber, autotune violet); the other marks are grey, dashed, under a square
const MACHINE = { threshold: "--amber", autotune: "--violet" };
const markColor = (kind) => css(MACHINE[kind] || "--mark");
function drawMarks(u) {
  const ctx = u.ctx; const dpr = devicePixelRatio;
  ctx.save();
  for (const g of markGroups(u)) {
    const x = u.bbox.left + g.x * dpr;
    const machine = g.marks.find((m) => MACHINE[m.kind]);
    const color = markColor(machine ? machine.kind : null);
    ctx.strokeStyle = color; ctx.fillStyle = color;
    ctx.setLineDash(machine ? [] : [3, 3]); ctx.lineWidth = machine ? 2 : 1;
    ctx.beginPath(); ctx.moveTo(x, u.bbox.top); ctx.lineTo(x, u.bbox.top + u.bbox.height); ctx.stroke();
    if (machine) {
      ctx.beginPath(); ctx.moveTo(x - 5 * dpr, u.bbox.top); ctx.lineTo(x + 5 * dpr, u.bbox.top); ctx.lineTo(x, u.bbox.top + 7 * dpr); ctx.closePath(); ctx.fill();
    } else ctx.fillRect(x - 3 * dpr, u.bbox.top, 6 * dpr, 4 * dpr);
  }
  ctx.restore();
}
function readout(u) {
  const i = u.cursor.idx; const out = $("#chart-readout"); const tip = $("#mark-tip");
  if (i === null || i === undefined || !chartData) { out.textContent = ""; tip.hidden = true; return; }
  const r = chartData.rows[i];
  if (r) out.textContent = `${clockSec(r.t * 1000)} · depth ${fmtInt(r.depth)} · joins ${r.joinsPerMin}/min · passes ${r.passesPerMin}/min · est. ${r.estWaitSec === null ? "∞" : compact(r.estWaitSec)} · p50 ${secs(r.waitP50Sec)} · p90 ${secs(r.waitP90Sec)}`;
  const left = u.cursor.left;
  const hit = markGroups(u).find((g) => Math.abs(g.x - left) <= 4);
  if (!hit) { tip.hidden = true; return; }
  const rect = u.over.getBoundingClientRect();
  tip.replaceChildren(...hit.marks.map((m) => {
    const sw = el("span", { class: "tip-sw" });
    sw.style.background = markColor(m.kind); // through the CSSOM: the page's CSP allows no style attribute
    return el("div", {}, sw, `${clockSec(m.t * 1000)} · ${m.note}`);
  }));
  tip.style.left = `${Math.min(window.innerWidth - 330, rect.left + left + 10)}px`;
  tip.style.top = `${rect.top + 8}px`;
  tip.hidden = false;
}
new ResizeObserver(() => {
  const w = Math.max(260, Math.floor($("#chart").clientWidth - 34));
  if (state.plot && Math.abs(state.plot.width - w) > 2) state.plot.setSize({ width: w, height: 300 });
}).observe($("#chart"));
window.addEventListener("keydown", (ev) => { if (ev.key === "Escape") $("#mark-tip").hidden = true; });

export { drawChart, refreshChart, selectChart, syncChartRooms };

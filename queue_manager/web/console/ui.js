/* Small helpers every part of the console uses: DOM lookup and building, number and time formats, toasts. */

const $ = (sel, root = document) => root.querySelector(sel);
const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));
const el = (tag, attrs = {}, ...kids) => {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const kid of kids.flat(Infinity)) if (kid !== null && kid !== undefined) node.append(kid.nodeType ? kid : String(kid));
  return node;
};
const fmtInt = (n) => (n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"));
const clock = (ms) => new Date(ms).toLocaleTimeString([], { hour: "numeric", minute: "2-digit" });
const clockSec = (ms) => new Date(ms).toLocaleTimeString([], { hour: "numeric", minute: "2-digit", second: "2-digit" });
function compact(sec) {
  if (sec === null || sec === undefined) return "–";
  sec = Math.max(0, Math.round(sec));
  if (sec < 60) return `${sec}s`;
  if (sec < 3600) return `${Math.round(sec / 60)}m`;
  const h = Math.floor(sec / 3600);
  if (h >= 10) return `${h}h`;
  const m = Math.round((sec - h * 3600) / 60);
  return m ? `${h}h${m}m` : `${h}h`;
}
function axisSec(x) {
  if (x < 120) return `${Math.round(x)}s`;
  if (x < 7200) return `${+(x / 60).toFixed(1)}m`;
  return `${+(x / 3600).toFixed(1)}h`;
}
function countdown(ms) {
  const s = Math.max(0, Math.floor(ms / 1000));
  const d = Math.floor(s / 86400), h = Math.floor((s % 86400) / 3600), m = Math.floor((s % 3600) / 60);
  if (d) return `${d}d ${h}h`;
  if (h) return `${h}h ${m}m`;
  return `${m}m ${s % 60}s`;
}
function toast(text, bad = false) {
  const t = el("div", { class: "toast" + (bad ? " bad" : ""), text });
  $("#toasts").append(t);
  setTimeout(() => t.remove(), bad ? 7000 : 3500);
}

function secs(v) { return v === null || v === undefined ? "–" : compact(v); }
function kv(pairs) {
  return el("dl", { class: "kv" }, pairs.filter(Boolean).map(([k, v]) => [el("dt", { text: k }), el("dd", {}, v)]));
}

export { $, $$, axisSec, clock, clockSec, compact, countdown, el, fmtInt, kv, secs, toast };

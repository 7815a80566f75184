/* Room cards, built once and updated in place, the totals above them, and the controls on each card. */
import { $, clock, compact, countdown, el, fmtInt, toast } from "./ui.js";
import { cards, may, state } from "./state.js";
import { api, fail } from "./api.js";
import { confirmDialog } from "./dialogs.js";
import { settingValue, siteHealth } from "./health.js";
import { consoleMoveText, deleteLeavesConsoleHost, openEditor } from "./editor.js";
import { openVisitor } from "./visitors.js";
import { selectChart, syncChartRooms } from "./chart.js";
import { openVerifier, returnLine } from "./verify.js";
import { openPreview } from "./preview.js";
import { renderLanes } from "./lanes.js";
import { eventLine, openEvents } from "./events.js";

function estimate(r) {
  const st = r.effectiveState;
  if (st === "scheduled") return { text: "–", hint: "opens later", title: "Scheduled: the line forms but does not move until the doors open." };
  if (st === "bypass") return { text: "0s", hint: "bypass", title: "Bypass: no line, everyone is let through." };
  if (!r.waiting) return { text: "0s", hint: "no line", title: "Nobody is waiting." };
  if (st === "paused") return { text: "∞", cls: "inf", inf: true, hint: "paused", title: "Paused with people in the line: nobody is let through until you resume." };
  if (!r.ratePerMinute) return { text: "∞", cls: "inf", inf: true, hint: "rate is 0", title: "Active at 0/min: nobody is let through until you raise the rate." };
  const est = r.estWaitSec === null || r.estWaitSec === undefined ? Math.ceil(r.waiting * 60 / r.ratePerMinute) : r.estWaitSec;
  if (r.capacity !== null && r.occupancy >= r.capacity && !r.passedLastMinute) {
    return { text: "≥" + compact(est), cls: "lb", sec: est, hint: "at capacity", title: "A lower bound: the room is at its ceiling and nobody came out in the last minute, so raising the rate will not help." };
  }
  return { text: compact(est), sec: est, hint: `at ${r.ratePerMinute}/min`, title: `An estimate: ${fmtInt(r.waiting)} waiting at ${r.ratePerMinute}/min.` };
}

function renderTotals(frame) {
  $("#t-waiting").textContent = fmtInt(frame.waiting);
  $("#t-active").textContent = fmtInt(frame.activeSessions);
  $("#t-passes").textContent = fmtInt(frame.passedLastMinute);
  let worst = null, inf = 0, moving = 0;
  for (const r of state.rooms.values()) {
    const e = estimate(r);
    if (e.inf) inf++;
    else if (r.waiting && e.sec !== undefined) { moving++; worst = Math.max(worst || 0, e.sec); }
  }
  const w = $("#t-worst"), note = $("#t-worst-note");
  if (!moving && inf) { w.textContent = "∞"; note.textContent = `${inf} not admitting`; }
  else { w.textContent = worst === null ? "0s" : compact(worst); note.textContent = inf ? `excludes ${inf} at ∞` : ""; }
  $("#room-count").textContent = state.rooms.size ? `· ${state.rooms.size}` : "";
}

function renderRooms() {
  const list = $("#room-list");
  for (const [id, card] of cards) if (!state.rooms.has(id)) { card.node.remove(); cards.delete(id); }
  let prev = null;
  for (const id of state.order) {
    const r = state.rooms.get(id);
    if (!r) continue;
    let card = cards.get(id);
    if (!card) { card = buildCard(r); cards.set(id, card); }
    const want = prev ? prev.nextSibling : list.firstChild;
    if (want !== card.node) list.insertBefore(card.node, want);
    updateCard(card, r);
    prev = card.node;
  }
  $("#no-rooms").hidden = state.rooms.size > 0;
  syncChartRooms();
}

function stat(label, key) {
  const dd = el("dd", { "data-k": key });
  const hint = el("dd", { class: "hint", "data-h": key });
  return el("div", {}, el("dt", { text: label }), dd, hint);
}

function buildCard(r) {
  const id = r.id;
  const hid = `room-h-${cssId(id)}`;
  const node = el("article", { class: "card", "aria-labelledby": hid, "data-room": id });
  const skip = el("a", { class: "skip-room", href: "#", onclick: (ev) => { ev.preventDefault(); skipPast(id); } });
  const title = el("div", { class: "card-title" },
    el("h3", { id: hid, tabindex: "-1" }),
    el("div", { class: "rid", text: id }),
    el("div", { class: "countdown", "data-k": "countdown", hidden: true }));
  const badges = el("div", { class: "card-badges" },
    el("span", { class: "auto-slot", "data-k": "auto" }),
    el("span", { class: "badge", "data-k": "state" }),
    el("span", { class: "badge", "data-k": "method", hidden: true }),
    el("span", { class: "badge", "data-k": "site", hidden: true }));
  const stats = el("dl", { class: "stats" },
    stat("Waiting", "waiting"), stat("Capacity", "capacity"), stat("Est. wait", "est"), stat("Passes/min", "passes"));
  const siteLine = el("p", { class: "site-line", "data-k": "site-line", role: "status", hidden: true });
  // where admitted visitors land, said plainly when a tag or connector origin is not returned to (verify.js)
  const returnLineNode = el("p", { class: "return-line", "data-k": "return-line", hidden: true });
  const eventLineNode = el("p", { class: "event-line", "data-k": "event-line", hidden: true });
  const laneList = el("ul", { class: "lane-list", "data-k": "lanes", "aria-label": "Lanes", hidden: true });
  node.append(skip, el("div", { class: "card-head" }, title, badges), stats, laneList, eventLineNode, siteLine, returnLineNode);
  const card = { node, id, dial: null, num: null, pending: null };
  if (may("write")) {
    const dialId = `rate-${cssId(id)}`;
    const range = el("input", { type: "range", id: dialId, min: "0", max: "1000", step: "1", "aria-valuetext": "" });
    const num = el("input", { type: "number", min: "0", step: "1", "aria-label": `Rate for ${id}, exact figure per minute` });
    range.addEventListener("keydown", (ev) => dialKey(ev, card));
    range.addEventListener("input", () => { num.value = range.value; range.setAttribute("aria-valuetext", `${range.value} per minute`); sendRate(card, +range.value); });
    num.addEventListener("change", () => { const v = Math.max(0, Math.round(+num.value || 0)); setDial(card, v); sendRate(card, v, 0); });
    card.dial = range; card.num = num;
    node.append(el("div", { class: "dial" }, el("label", { for: dialId, text: "Rate/min" }), range, num));
    const pause = el("button", { type: "button", class: "btn small", "data-k": "pause", onclick: () => togglePause(card) });
    node.append(el("div", { class: "actions" },
      pause,
      el("button", { type: "button", class: "btn small", onclick: (ev) => openEditor(id, ev.currentTarget) }, "Edit"),
      may("team") ? el("button", { type: "button", class: "btn small", onclick: (ev) => openVisitor(id, ev.currentTarget) }, "Visitors") : null,
      el("button", { type: "button", class: "btn small", onclick: () => selectChart(id, true) }, "Chart"),
      el("button", { type: "button", class: "btn small", onclick: (ev) => openEvents(id, ev.currentTarget) }, "Events"),
      may("team") ? el("button", { type: "button", class: "btn small", onclick: (ev) => openVerifier(id, ev.currentTarget) }, "Verify install") : null,
      may("team") ? el("button", { type: "button", class: "btn small", onclick: (ev) => openPreview(id, ev.currentTarget) }, "Preview") : null,
      el("span", { class: "spacer" }),
      // the destructive group wraps as one: never a lone Delete under Purge and Flush
      el("span", { class: "destructive" },
        el("button", { type: "button", class: "btn small danger", onclick: (ev) => purge(id, ev.currentTarget) }, "Purge"),
        el("button", { type: "button", class: "btn small danger", onclick: (ev) => flush(id, ev.currentTarget) }, "Flush"),
        may("owner") ? el("button", { type: "button", class: "btn small danger", onclick: (ev) => removeRoom(id, ev.currentTarget) }, "Delete") : null)));
  } else {
    node.append(el("div", { class: "actions" },
      may("team") ? el("button", { type: "button", class: "btn small", onclick: (ev) => openVisitor(id, ev.currentTarget) }, "Visitors") : null,
      el("button", { type: "button", class: "btn small", onclick: () => selectChart(id, true) }, "Chart"),
      el("button", { type: "button", class: "btn small", onclick: (ev) => openEvents(id, ev.currentTarget) }, "Events")));
  }
  return card;
}
const cssId = (id) => id.replace(/[^A-Za-z0-9_-]/g, "_");

function put(card, key, text, title, cls) {
  const dd = $(`[data-k="${key}"]`, card.node);
  if (dd.textContent !== text) dd.textContent = text;
  dd.className = cls || "";
  if (title) dd.title = title; else dd.removeAttribute("title");
}
function hint(card, key, text) { const h = $(`[data-h="${key}"]`, card.node); if (h.textContent !== text) h.textContent = text; }

function updateCard(card, r) {
  const name = r.name || r.id;
  const h3 = $("h3", card.node);
  if (h3.textContent !== name) h3.textContent = name;
  $(".skip-room", card.node).textContent = `Skip past ${name} to the next room`;
  autoBadge($('[data-k="auto"]', card.node), r);
  const st = r.effectiveState;
  const badge = $('[data-k="state"]', card.node);
  badge.textContent = st;
  badge.className = "badge " + ({ active: "badge-ok", paused: "badge-warn", bypass: "badge-info", scheduled: "badge-info" }[st] || "badge-mute");
  methodBadge($('[data-k="method"]', card.node), r.queueing || "fifo");
  if (st === "scheduled") {
    put(card, "waiting", fmtInt(r.preQueue)); hint(card, "waiting", "in pre-queue");
  } else {
    put(card, "waiting", fmtInt(r.waiting)); hint(card, "waiting", r.joinsLastMinute ? `+${fmtInt(r.joinsLastMinute)}/min` : "in line");
  }
  const cap = r.capacity === null || r.capacity === undefined ? "∞" : fmtInt(r.capacity);
  put(card, "capacity", `${fmtInt(r.occupancy)}/${cap}`, "Live sessions plus passes inside their claim window, of the ceiling (∞: no ceiling).");
  hint(card, "capacity", r.holdingPasses ? `+${fmtInt(r.holdingPasses)} holding passes` : `${fmtInt(r.activeSessions)} in session`);
  const e = estimate(r);
  put(card, "est", e.text, e.title, e.cls);
  hint(card, "est", e.hint || "");
  put(card, "passes", fmtInt(r.passedLastMinute), "Passes issued in the last minute (measured outflow).");
  hint(card, "passes", `of ${fmtInt(r.ratePerMinute)}/min`);
  card.node.dataset.opens = r.opensAt ? String(Date.parse(r.opensAt)) : "";
  tickCountdown(card, r);
  renderLanes($('[data-k="lanes"]', card.node), r);
  const line = $('[data-k="event-line"]', card.node), said = eventLine(r);
  if (line.textContent !== said) line.textContent = said;
  line.hidden = !said;
  siteHealth(card);
  returnLine(card, r);
  if (card.dial) {
    const busy = document.activeElement === card.dial || document.activeElement === card.num || card.pending;
    if (!busy) setDial(card, r.ratePerMinute);
    card.dial.setAttribute("aria-label", `Rate for ${name}, per minute`);
    const pause = $('[data-k="pause"]', card.node);
    const paused = r.state === "paused";
    pause.textContent = paused ? "Resume" : "Pause";
    pause.disabled = r.state === "bypass";
  }
  card.node.classList.toggle("selected", state.chartRoom === r.id);
}

// the queueing method when it is not the usual line in order of arrival (fifo)
const METHODS = {
  random: ["random draw", "badge-info", "Each release draws from everyone waiting and present; no places are shown."],
  passthrough: ["passthrough", "badge-info", "No line: every arrival is let through at once, and counted."],
  reject: ["closed", "badge-bad", "Nobody joins: visitors get the room's closed page."],
};
function methodBadge(node, method) {
  const [text, cls, title] = METHODS[method] || ["", "", ""];
  node.hidden = !text;
  if (node.textContent !== text) node.textContent = text;
  node.className = "badge " + cls;
  if (title) node.title = title; else node.removeAttribute("title");
}

// AUTO ≥n/MIN while threshold activation is armed; amber AUTO · SELF for the 15 minutes after it acted on its own
// (the server sends autoSelf for that long), so a queue the machine put up is never taken for an operator's
function autoBadge(node, r) {
  const aa = r.autoActivate && r.autoActivate.enabled ? r.autoActivate : null;
  const self = r.autoSelf || null;
  const text = self ? "AUTO · SELF" : aa ? `AUTO ≥${fmtInt(aa.joinsPerMin)}/MIN` : "";
  const cls = self ? "auto-slot badge badge-warn" : aa ? "auto-slot badge badge-info" : "auto-slot";
  if (node.textContent !== text) node.textContent = text;
  if (node.className !== cls) node.className = cls;
  if (self) {
    const joins = self.joinsPerMin === null || self.joinsPerMin === undefined ? "" : ` at ${fmtInt(self.joinsPerMin)} joins/min`;
    node.title = self.action === "release"
      ? `Threshold activation took this queue down by itself at ${clock(self.at)}${joins}, after a quiet spell with nobody in the line.`
      : `Threshold activation put this queue up by itself at ${clock(self.at)}${joins}.`;
  } else if (aa) node.title = `Threshold activation armed: a queue goes up by itself after ${aa.sustainSec}s above ${aa.joinsPerMin} joins/min.`;
  else node.removeAttribute("title");
}

function tickCountdown(card, r) {
  const line = $('[data-k="countdown"]', card.node);
  const opens = r.opensAt ? Date.parse(r.opensAt) : null;
  if (!opens || r.effectiveState !== "scheduled") { line.hidden = true; return; }
  const left = opens - Date.now();
  line.hidden = false;
  line.textContent = `Doors open in ${countdown(left)} · ${clock(opens)}`;
  line.classList.toggle("soon", left <= 5 * 60 * 1000);
}
function tickCountdowns() {
  for (const card of cards.values()) { const r = state.rooms.get(card.id); if (r) tickCountdown(card, r); }
}

function skipPast(id) {
  const idx = state.order.indexOf(id);
  const next = state.order.slice(idx + 1).map((x) => cards.get(x)).find(Boolean);
  if (next) $("h3", next.node).focus(); else $("#chart-h").focus();
}

// ------------------------------------------------------------------ controls
function setDial(card, v) {
  const max = Math.max(1000, Math.ceil((v + 1) / 1000) * 1000);
  if (+card.dial.max !== max) card.dial.max = String(max);
  if (+card.dial.value !== v) card.dial.value = String(v);
  if (document.activeElement !== card.num) card.num.value = String(v);
  card.dial.setAttribute("aria-valuetext", `${v} per minute`);
}
function dialKey(ev, card) {
  const steps = { ArrowRight: 10, ArrowUp: 10, ArrowLeft: -10, ArrowDown: -10, PageUp: 50, PageDown: -50 };
  let step = steps[ev.key];
  if (step === undefined) return;
  if (ev.shiftKey && Math.abs(step) === 10) step = Math.sign(step);
  ev.preventDefault();
  const v = Math.max(0, +card.dial.value + step);
  setDial(card, v);
  sendRate(card, v);
}
function sendRate(card, v, delay = 350) {
  clearTimeout(card.pending);
  card.pending = setTimeout(async () => {
    try {
      const res = await api("POST", `api/admin/rooms/${encodeURIComponent(card.id)}/rate`, { ratePerMinute: v });
      state.rooms.set(card.id, { ...state.rooms.get(card.id), ...res.room });
    } catch (err) { fail(err); }
    card.pending = null;
    const r = state.rooms.get(card.id);
    if (r) updateCard(card, r);
  }, delay);
}
async function togglePause(card) {
  const r = state.rooms.get(card.id);
  const action = r.state === "paused" ? "resume" : "pause";
  try {
    const res = await api("POST", `api/admin/rooms/${encodeURIComponent(card.id)}/${action}`);
    state.rooms.set(card.id, { ...r, ...res.room, effectiveState: res.room.effectiveState || res.room.state });
    updateCard(card, state.rooms.get(card.id));
    renderTotals(totalsNow());
    toast(`${card.id} ${action === "pause" ? "paused" : "resumed"}.`);
  } catch (err) { fail(err); }
}
function totalsNow() {
  const t = { waiting: 0, activeSessions: 0, passedLastMinute: 0 };
  for (const r of state.rooms.values()) { t.waiting += r.waiting; t.activeSessions += r.activeSessions; t.passedLastMinute += r.passedLastMinute; }
  return t;
}
async function purge(id, opener) {
  const r = state.rooms.get(id);
  const ok = await confirmDialog(`Purge ${id}?`, `Everybody waiting in ${id} (${fmtInt(r ? r.waiting : 0)} people) leaves the line unserved. Passes and live sessions are kept; the room stays.`, "Purge the line", opener);
  if (!ok) return;
  try { const res = await api("POST", `api/admin/rooms/${encodeURIComponent(id)}/purge`); toast(`Purged ${fmtInt(res.purged)} from ${id}.`); } catch (err) { fail(err); }
}
async function flush(id, opener) {
  const r = state.rooms.get(id);
  const on = fmtInt(r ? r.activeSessions : 0); const holding = fmtInt(r ? r.passesOutstanding : 0);
  const ok = await confirmDialog(`Flush ${id}?`, `Everybody admitted to ${id} (${on} on the site, ${holding} holding a pass) is sent back: their pass and session end now, and their next page view puts them at the back of the line. The line and the room stay as they are.`, "Flush the site", opener);
  if (!ok) return;
  try { const res = await api("POST", `api/admin/rooms/${encodeURIComponent(id)}/flush`); toast(`Flushed ${fmtInt(res.flushed)} from ${id}.`); } catch (err) { fail(err); }
}
async function removeRoom(id, opener) {
  const room = state.rooms.get(id);
  // the last inline room on the host this console is used through: its /__qm/* (this console) goes with it
  const leaving = deleteLeavesConsoleHost(room);
  const text = "This cannot be undone: everybody in the line is discarded, and the room, its configuration and its schedule are gone."
    + (leaving ? " " + consoleMoveText(room, leaving, "delete") : "");
  const ok = await confirmDialog(`Delete ${id}?`, text, leaving ? "Delete and move" : "Delete the room", opener);
  if (!ok) return;
  try { await api("DELETE", `api/admin/rooms/${encodeURIComponent(id)}`); } catch (err) { fail(err); return; }
  const where = leaving ? settingValue("PUBLIC_URL") : null;
  if (where) { location.assign(String(where).replace(/\/?$/, "/")); return; }
  toast(leaving ? `Deleted ${id}. This console's host no longer serves /__qm/*: set PUBLIC_URL, or open the console on this server's own address.` : `Deleted ${id}.`);
}

export { renderRooms, renderTotals, tickCountdowns };

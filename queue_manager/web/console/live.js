/* The live stream of room frames (server-sent events) and the desktop alerts it can raise. */
import { $, fmtInt, toast } from "./ui.js";
import { state } from "./state.js";
import { api, signedOut } from "./api.js";
import { renderIncidents, siteState } from "./health.js";
import { renderRooms, renderTotals } from "./cards.js";
import { refreshVisitor } from "./visitors.js";

function stopStream() { if (state.es) { state.es.close(); state.es = null; } }
async function startStream() {
  stopStream();
  let ticket;
  try { ticket = (await api("POST", "api/admin/sse-ticket")).ticket; } catch (err) {
    if (err.status === 401) return;
    return reconnect();
  }
  const es = new EventSource(`api/admin/events?ticket=${encodeURIComponent(ticket)}`);
  state.es = es;
  es.onmessage = (ev) => { state.retry = 0; setLive(true); onFrame(JSON.parse(ev.data)); };
  es.addEventListener("revoked", () => { stopStream(); signedOut(); });
  es.onerror = () => { es.close(); if (state.es === es) { state.es = null; setLive(false); reconnect(); } };
}
function reconnect() {
  const wait = Math.min(15000, 1000 * 2 ** state.retry++);
  setTimeout(() => { if (!state.es && state.principal) startStream(); }, wait);
}
function setLive(on) {
  const live = $("#live");
  live.classList.toggle("on", on); live.classList.toggle("off", !on);
  $("#live-text").textContent = on ? "Live" : "Reconnecting…";
}

// ------------------------------------------------------------------ alerts: desktop notifications in this tab
// Armed by the Alerts button (asks the browser's permission); kept in page memory only, so it dies with the tab.
const alerting = { on: false, raised: new Set(), stalledSince: new Map() };
const STALL_MS = 60000;
function notify(key, title, body) {
  if (!alerting.on || alerting.raised.has(key)) return;
  alerting.raised.add(key);
  try { new Notification(title, { body, tag: key }); } catch (err) { toast(`${title}: ${body}`, true); }
}
function watchAlerts() {
  const now = Date.now();
  for (const [id, r] of state.rooms) {
    const name = r.name || id;
    // surge start: joins running at 4x the rate or more (and at least 20/min)
    const surge = r.effectiveState !== "bypass" && r.joinsLastMinute >= 20 && r.joinsLastMinute >= 4 * Math.max(1, r.ratePerMinute);
    if (surge) notify(`surge:${id}`, `Surge: ${name}`, `${fmtInt(r.joinsLastMinute)} joins/min against ${fmtInt(r.ratePerMinute)}/min let through.`);
    else if (r.joinsLastMinute < 2 * Math.max(1, r.ratePerMinute)) alerting.raised.delete(`surge:${id}`);
    // the site behind an inline room failing
    const site = siteState(id);
    if (site && site.failing) notify(`site:${id}`, `Site not answering: ${name}`, site.errors ? `${fmtInt(site.errors)} visitors got an error page.` : "Its health probe fails.");
    else alerting.raised.delete(`site:${id}`);
    // stalled outflow: people waiting in an active room at a non-zero rate, nobody let through for a minute
    const stalled = r.effectiveState === "active" && r.waiting > 0 && r.ratePerMinute > 0 && !r.passedLastMinute;
    if (!stalled) { alerting.stalledSince.delete(id); alerting.raised.delete(`stall:${id}`); continue; }
    if (!alerting.stalledSince.has(id)) alerting.stalledSince.set(id, now);
    if (now - alerting.stalledSince.get(id) >= STALL_MS) notify(`stall:${id}`, `Outflow stalled: ${name}`, `${fmtInt(r.waiting)} waiting and nobody let through for a minute.`);
  }
}
$("#alerts-btn").addEventListener("click", async (ev) => {
  const btn = ev.currentTarget;
  if (alerting.on) { alerting.on = false; btn.setAttribute("aria-pressed", "false"); btn.textContent = "Alerts"; toast("Alerts off."); return; }
  if (typeof Notification === "undefined") { toast("This browser cannot show desktop notifications.", true); return; }
  const answer = Notification.permission === "granted" ? "granted" : await Notification.requestPermission();
  if (answer !== "granted") { toast("Notifications are blocked for this page in the browser's settings.", true); return; }
  alerting.on = true; alerting.raised.clear();
  btn.setAttribute("aria-pressed", "true"); btn.textContent = "Alerts: on";
  toast("Alerts on: surge start, site not answering and stalled outflow notify this tab while it is open.");
  watchAlerts();
});

function onFrame(frame) {
  state.lastFrameAt = Date.now();
  if (state.startedAt && frame.startedAt && frame.startedAt !== state.startedAt) toast("The server restarted.", true);
  state.startedAt = frame.startedAt;
  if (frame.full) {
    state.rooms = new Map(frame.rooms.map((r) => [r.id, r]));
    state.order = frame.rooms.map((r) => r.id);
  } else {
    // a room this page created is in state.rooms before its first frame: order by the list, not the map
    for (const r of frame.rooms) { if (!state.order.includes(r.id)) state.order.push(r.id); state.rooms.set(r.id, r); }
    for (const id of frame.removed || []) { state.rooms.delete(id); state.order = state.order.filter((x) => x !== id); }
  }
  renderRooms();
  renderTotals(frame);
  renderIncidents();
  watchAlerts();
  refreshVisitor();
}

export { startStream, stopStream };

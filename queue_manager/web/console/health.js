/* Server health: the insecure-config and incident badges, each inline room's site state, Diagnostics and Security
   (with the Alerting section from alerts.js: in Diagnostics, and in Security for a monitor link). */
import { $, clockSec, compact, el, fmtInt, kv } from "./ui.js";
import { cards, may, state } from "./state.js";
import { api, fail } from "./api.js";
import { head, openDialog } from "./dialogs.js";
import { alertingSection } from "./alerts.js";
import { warningList } from "./warnings.js";

let health = null;
// per inline room: its origin-error total as last read, and when that total last grew
const originSeen = new Map();
const SITE_FRESH_MS = 120000;
// a snippet room's site: the leader's target probe of its targetUrl (a refused probe is configuration, and a
// target under a reserved example name is not probed: neither is a verdict on the site)
function targetState(id) {
  const t = health && health.targets && health.targets[id];
  if (!t || t.refused || t.notProbed) return null;
  const probeDown = t.ok === false;
  return { errors: 0, failing: probeDown, probeDown, recent: false, summary: t.summary || "" };
}
function siteState(id) {
  const inline = health && health.inline;
  if (!inline || !(inline.rooms || []).includes(id)) return targetState(id);
  const errors = Object.values((inline.originErrors || {})[id] || {}).reduce((a, b) => a + b, 0);
  const seen = originSeen.get(id);
  const recent = seen && seen.grewAt && Date.now() - seen.grewAt < SITE_FRESH_MS;
  const probe = (inline.origins || {})[id];
  const probeDown = !!probe && probe.ok === false;
  return { errors, failing: !!recent || probeDown, probeDown, recent: !!recent };
}
function siteHealth(card) {
  const chip = $('[data-k="site"]', card.node), line = $('[data-k="site-line"]', card.node);
  const s = siteState(card.id);
  if (!s) { chip.hidden = true; line.hidden = true; return; }
  chip.hidden = false;
  // real pages failing outranks the probe: a HEAD on / can succeed while every page 502s
  chip.textContent = s.failing ? "site · failing" : "site · ok";
  chip.className = "badge " + (s.failing ? "badge-bad" : "badge-ok");
  chip.title = s.recent ? "Visitors let through are getting an error page from the site behind the queue."
    : s.probeDown ? `The health probe to the site behind the queue is failing${s.summary ? ": " + s.summary : ""}.`
      : "The site behind the queue is answering.";
  line.hidden = !s.failing;
  if (s.failing) {
    line.textContent = s.errors
      ? `Site not answering — ${fmtInt(s.errors)} visitor${s.errors === 1 ? "" : "s"} got an error page`
      : `Site not answering — its health probe fails${s.summary ? " (" + s.summary + ")" : ""}`;
  }
}
function renderIncidents() {
  const badge = $("#incident");
  const all = (health && health.incidents) || [];
  const texts = all.map((i) => (typeof i === "string" ? i : i.message || JSON.stringify(i)));
  // an origin down leads, even when another room has a deeper queue: its waiting can honestly read 0
  const failing = state.order.filter((id) => { const s = siteState(id); return s && s.failing; });
  const origin = failing.map((id) => `origin down — ${(state.rooms.get(id) || {}).name || id}`);
  const rest = texts.filter((t) => !t.startsWith("origin down — "));
  const lines = [...origin, ...rest];
  badge.hidden = !lines.length;
  badge.textContent = lines.length ? `⚠ ${lines[0]}${lines.length > 1 ? ` (+${lines.length - 1})` : ""}` : "";
  badge.title = lines.join("\n");
  badge.setAttribute("aria-label", `Incident: ${lines.join("; ")}.${may("team") ? " Open Diagnostics." : ""}`);
}
async function loadHealth() {
  try { health = await api("GET", "api/admin/health"); } catch (err) { return; }
  const inline = health.inline;
  for (const id of (inline && inline.rooms) || []) {
    const n = Object.values((inline.originErrors || {})[id] || {}).reduce((a, b) => a + b, 0);
    const seen = originSeen.get(id);
    if (!seen) originSeen.set(id, { n, grewAt: n ? Date.now() : 0 });
    else if (n > seen.n) { seen.n = n; seen.grewAt = Date.now(); }
    else seen.n = n;
  }
  for (const card of cards.values()) siteHealth(card);
  renderIncidents();
  const reasons = [];
  if (health.keys && health.keys.adminKeyDefault) reasons.push("ADMIN_KEY is the default");
  if (health.keys && health.keys.secretDefault) reasons.push("SECRET is the default");
  if (health.proxy && health.proxy.ok === false) reasons.push("proxy settings incomplete");
  for (const w of health.warnings || []) reasons.push(warnText(w));
  for (const w of health.configWarnings || []) reasons.push(warnText(w));
  const badge = $("#insecure");
  badge.hidden = !reasons.length || !may("team");
  badge.title = reasons.join("\n");
  badge.setAttribute("aria-label", `Insecure config: ${reasons.length} warning${reasons.length === 1 ? "" : "s"}. Open Diagnostics.`);
}
$("#insecure").addEventListener("click", (ev) => openDiagnostics(ev.currentTarget));
$("#incident").addEventListener("click", (ev) => { if (may("team")) openDiagnostics(ev.currentTarget); });

const warnText = (w) => (typeof w === "string" ? w : w.message || JSON.stringify(w));
// Diagnostics' inline rows: gated vs bypassed with the ratio; origin errors per room and failure; disconnects apart
function inlineRows(inline) {
  if (!inline) return [];
  const gated = inline.gatedTotal || 0, bypassed = inline.bypassedTotal || 0, all = gated + bypassed;
  const ratio = all ? ` · ${Math.round((gated / all) * 100)}% gated` : "";
  const per = Object.entries(inline.originErrors || {}).map(([room, phases]) =>
    `${room}: ${Object.entries(phases).map(([phase, n]) => `${phase} ${fmtInt(n)}`).join(", ")}`);
  const gone = Object.entries(inline.visitorDisconnects || {}).map(([k, n]) => `${k} ${fmtInt(n)}`);
  return [
    ["Inline rooms", `${fmtInt((inline.rooms || []).length)} · gated ${fmtInt(gated)} · bypassed ${fmtInt(bypassed)}${ratio}`],
    ["Origin errors", `${fmtInt(inline.originErrorsTotal || 0)}${per.length ? " · " + per.join(" · ") : ""}`],
    ["Visitor disconnects", `${fmtInt(inline.visitorDisconnectsTotal || 0)}${gone.length ? " · " + gone.join(" · ") : ""} (not origin errors)`],
  ];
}
// the value in effect of a setting as health last reported it (undefined: not known to this console yet)
function settingValue(name) {
  const s = ((health && health.settings) || []).find((x) => x.name === name);
  return s ? s.value : undefined;
}
// Diagnostics' settings block: every setting in effect, by group, with its source; a secret only as set or unset
function settingText(s) {
  if (s.sensitive) return s.set ? "set (hidden)" : "unset";
  const v = s.value;
  if (v === null || v === undefined) return "unset";
  if (v === true) return "on";
  if (v === false) return "off";
  if (Array.isArray(v)) return v.length ? v.join(", ") : "none";
  return String(v);
}
function sourceText(s) {
  if (s.source === "environment") return "environment";
  const what = s.source === "derived" ? "derived" : "default";
  return s.set ? `${what} · the value set is not used` : what;
}
function settingsBlock(list) {
  if (!Array.isArray(list) || !list.length) return null;
  const groups = new Map();
  for (const s of list) {
    const g = s.group || "Other";
    if (!groups.has(g)) groups.set(g, []);
    groups.get(g).push(s);
  }
  const fromEnv = list.filter((s) => s.source === "environment").length;
  return el("details", { class: "settings", id: "diag-settings" },
    el("summary", {}, el("span", { class: "settings-title", text: `Settings in effect (${list.length})` }),
      el("span", { class: "muted small", text: ` · ${fromEnv} from the environment` })),
    el("p", { class: "muted small", text: "The values this server runs with, as qm config prints them. Source: "
      + "environment (the value set), default, or derived from other settings. A secret shows only whether it is set." }),
    [...groups].map(([group, items]) => el("section", { class: "settings-group" },
      el("h4", { text: group }),
      el("table", { class: "settings-table" },
        el("thead", {}, el("tr", {}, el("th", { scope: "col", text: "Setting" }), el("th", { scope: "col", text: "Value" }),
          el("th", { scope: "col", text: "Source" }))),
        el("tbody", {}, items.map((s) => el("tr", { "data-setting": s.name, class: s.source === "environment" ? "from-env" : null },
          el("th", { scope: "row" }, el("code", { text: s.name })),
          el("td", { class: s.sensitive ? "secret" : null, text: settingText(s) }),
          el("td", { class: "source", text: sourceText(s) }))))))));
}
const cap = (n) => (n ? fmtInt(n) : "no cap");
const perMin = (n) => (n ? `${fmtInt(n)}/min` : "off");
async function openDiagnostics(opener) {
  const dlg = $("#dlg-diagnostics");
  dlg.replaceChildren(head("Diagnostics", "diagnostics-h"), el("div", { class: "dlg-body" }, el("p", { class: "muted", text: "Loading…" })));
  openDialog("diagnostics", opener);
  try { health = await api("GET", "api/admin/health"); } catch (err) { fail(err); return; }
  const h = health;
  const skew = h.now ? Math.round((Date.now() - h.now) / 1000) : null;
  const proxy = h.proxy || {};
  const proxyText = proxy.ok === false ? `${proxy.trustProxy || 0} hops · INCOMPLETE` : `ok · ${proxy.trustProxy || 0} hops${(proxy.trustProxyIps || []).length ? " · " + proxy.trustProxyIps.join(", ") : ""}`;
  const st = h.storage || {};
  const body = el("div", { class: "dlg-body" },
    alertingSection(),
    (h.configWarnings || []).length ? el("section", { class: "config-warnings", "aria-labelledby": "config-warnings-h" },
      el("h3", { class: "section-h", id: "config-warnings-h", text: "Configuration warnings" }), warningList(h.configWarnings)) : null,
    el("h3", { class: "section-h", text: "Server" }),
    kv([
      ["Status", `${h.status}${h.ready ? " · ready" : " · not ready"}${h.leader ? " · leader" : ""}`],
      ["Version", h.version], ["Instance", h.instance || "–"],
      ["Uptime", `${compact(h.uptimeSec)} · since ${new Date(h.startedAt).toLocaleString()}`],
      ["Clock", skew === null ? "–" : `server ${clockSec(h.now)} · this browser ${skew >= 0 ? "+" : ""}${skew}s`],
      h.fleet ? ["Counters from", `${fmtInt(h.fleet.instances)} instance${h.fleet.instances === 1 ? "" : "s"}${h.fleet.partial ? " · partial: Valkey could not be read, this instance's own plus what it last read" : ""}`] : null,
      ["Rooms", fmtInt(h.rooms)],
      ["Visitors", h.visitors ? `${fmtInt(h.visitors.waiting)} waiting · ${fmtInt(h.visitors.preQueue)} pre-queue · ${fmtInt(h.visitors.activeSessions)} in session · ${fmtInt(h.visitors.passesOutstanding)} passes` : "–"],
      ["SSE streams", h.sse ? `${fmtInt(h.sse.streams)} (per IP ${cap(h.sse.perIp)}, total ${cap(h.sse.maxTotal)})` : "–"],
      ["Rate limits", h.rateLimits ? `join ${perMin(h.rateLimits.joinPerMin)} · check ${perMin(h.rateLimits.checkPerMin)} · waiting page ${perMin(h.rateLimits.waitingPerMin)}` : "–"],
      ["Storage", `${st.kind || h.store}${st.ok === false ? " · FAILING" : " · ok"} · ${fmtInt(st.writeErrors || 0)} write errors${st.lastError ? " · " + st.lastError : ""}`],
      ["Proxy", proxyText + (h.waitingPage && h.waitingPage.enforced === false
        ? ` · an undeclared proxy is in front: the page guard stands down for ${fmtInt(h.waitingPage.standsDownFor)} address${h.waitingPage.standsDownFor === 1 ? "" : "es"}` : "")],
      h.backend ? ["Backend", `${h.backend.store || h.store} · valkey ${h.backend.valkey || "–"} · ${fmtInt(h.backend.recoveringRooms || 0)} rooms recovering`] : null,
      ...inlineRows(h.inline),
      h.memory ? ["Memory", typeof h.memory === "object" ? Object.entries(h.memory).map(([k, v]) => `${k} ${typeof v === "number" ? fmtInt(v) : v}`).join(" · ") : String(h.memory)] : null,
      ["Unknown-room checks", fmtInt(h.counters ? h.counters.unknownRoomChecks : 0)],
      ["Blocked return URLs", fmtInt(h.counters ? h.counters.blockedReturnUrls : 0)],
      ["Rejected tokens", fmtInt(h.counters ? h.counters.rejectedTokens : 0)],
    ]),
    (h.incidents || []).length ? el("div", {}, el("h3", { class: "small", text: "Incidents" }), el("ul", {}, h.incidents.map((i) => el("li", { text: typeof i === "string" ? i : (i.message || JSON.stringify(i)) })))) : null,
    el("div", {}, el("h3", { class: "small", text: "Warnings" }),
      (h.warnings || []).length ? el("ul", {}, h.warnings.map((w) => el("li", { class: "note warn", text: warnText(w) }))) : el("p", { class: "muted", text: may("team") ? "None." : "Not shown to this credential." })),
    (h.hardening || []).length ? el("div", {}, el("h3", { class: "small", text: "Hardening" }), el("ul", {}, h.hardening.map((w) => el("li", { text: warnText(w) })))) : null,
    settingsBlock(h.settings));
  dlg.replaceChildren(head("Diagnostics", "diagnostics-h"), body);
}

async function openSecurity(opener) {
  const dlg = $("#dlg-security");
  dlg.classList.toggle("wide", !may("team")); // room for the Alerting section's delivery table
  dlg.replaceChildren(head("Security", "security-h"), el("div", { class: "dlg-body" }, el("p", { class: "muted", text: "Loading…" })));
  openDialog("security", opener);
  let data;
  try { data = await api("GET", "api/admin/security"); } catch (err) { fail(err); return; }
  const flat = [];
  const walk = (prefix, v) => {
    if (v && typeof v === "object" && !Array.isArray(v)) for (const [k, x] of Object.entries(v)) walk(prefix ? `${prefix}.${k}` : k, x);
    else flat.push([prefix, Array.isArray(v) ? (v.length ? JSON.stringify(v) : "none") : String(v)]);
  };
  walk("", data);
  // a monitor link has no Diagnostics in its bar: the Alerting section is here for it
  dlg.replaceChildren(head("Security", "security-h"), el("div", { class: "dlg-body" },
    may("team") ? null : alertingSection(),
    may("team") ? null : el("h3", { class: "section-h", text: "Bot protection" }),
    el("p", { class: "muted small", text: "Totals are summed over the live instances (fleet); the signals, crawler names and recent decisions are this server's own." }), kv(flat.slice(0, 80))));
}

export { loadHealth, openDiagnostics, openSecurity, renderIncidents, settingValue, siteHealth, siteState };

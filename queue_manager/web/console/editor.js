/* The room editor: the form for a new room or an existing one, URL targeting rules and their dry run, and
   the access rules (gatekeeping.js). */
import { $, $$, el, fmtInt, toast } from "./ui.js";
import { may, state } from "./state.js";
import { api } from "./api.js";
import { confirmDialog, head, openDialog } from "./dialogs.js";
import { brandFieldset, collectBrand, uploadLogo } from "./brand.js";
import { entryFieldset } from "./entry.js";
import { accessFieldset } from "./gatekeeping.js";
import { collectLanes, lanesFieldset } from "./lanes.js";
import { settingValue } from "./health.js";
import { warningList } from "./warnings.js";

const FIELDS = [
  ["name", "Display name", "text", "Shown on the waiting page."],
  ["targetUrl", "Target URL", "url", "The protected site; its origin is always allowed."],
  ["state", "State", ["active", "paused", "bypass"], "Bypass: no line, everyone admitted."],
  ["ratePerMinute", "Rate per minute", "int", "0 lets nobody through."],
  ["maxConcurrent", "Max concurrent", "int?", "Live sessions + unused passes in the claim window. Blank: no ceiling."],
  ["passedTtlSec", "Pass valid (s)", "int", "How long a pass stays valid."],
  ["sessionTtlSec", "Session idle (s)", "int", "A session ends after this long without a door check."],
  ["sessionMaxSec", "Session max (s)", "int?", "Blank: no cap."],
  ["presenceSec", "Presence (s)", "int?", "Holders unseen this long give slots back. Blank: off."],
  ["queueMaxPerIp", "Places per address", "int?", "Blank: no limit."],
  ["preQueueMaxPerIp", "Pre-queue per address", "int?", "Blank: no limit."],
  ["preQueueShards", "Pre-queue shards", "int", "STORE=valkey on a cluster: the hash slots a drop's sign-ups spread over, 1 to 16. 1: the room's own."],
  ["maxWaiting", "Line holds at most", "int?", "People in line; new joins past it are refused. Blank: no limit."],
  ["maxWaitSec", "Line full past wait (s)", "int?", "Estimated wait past which new joins are refused. Blank: no limit."],
  ["queueing", "Queueing method", ["fifo", "random", "passthrough", "reject"], "fifo: in order of arrival. random: drawn at each release. passthrough: no line, everyone let in and counted. reject: closed, nobody joins."],
  ["rejectStatus", "Closed page status", ["503", "200"], "What the page of a closed (reject) room answers; 503 says Retry-After."],
  ["entry", "Who may join", ["open", "token", "code"], "open: anyone. token: invited visitors (a token signed with the room's key). code: visitors with a code, or a token. Key and codes: the Entry section."],
  ["opensAt", "Doors open (your local time)", "datetime", "Blank: no scheduled drop."],
  ["onBackendDown", "When storage is down", ["closed", "open"], "STORE=valkey only."],
  ["protection", "Bot protection", ["", "monitor", "enforce"], "Blank: the server default."],
  ["returnOrigins", "Return origins", "lines", "One per line; https://*.shop.example covers subdomains."],
  ["tagOrigins", "Tag origins", "lines?", "One per line. Blank: same as return origins."],
  ["languages", "Visitor page languages", "tags", "Language tags in the picker's order, e.g. de, fr, en; the first is the page's language when none of the visitor's matches. Blank: all of them, English first."],
];
const AT_DEFAULT = { enabled: false, minRate: 10, maxRate: 600, targetLatencyMs: 1000 };
const DEFAULTS = { ratePerMinute: 60, passedTtlSec: 600, sessionTtlSec: 1800, presenceSec: 30, queueMaxPerIp: 16, preQueueMaxPerIp: 16, preQueueShards: 1 };
function toLocalInput(iso) {
  if (!iso) return "";
  const d = new Date(iso); const p = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}`;
}
function openEditor(roomId, opener) {
  const dlg = $("#dlg-editor");
  const room = roomId ? state.rooms.get(roomId) : null;
  const creating = !room;
  const form = el("form", { novalidate: true });
  const fields = el("div", { class: "grid2" });
  const idField = el("div", { class: "field" }, el("label", { for: "ed-id", text: "Room id" }),
    el("input", { id: "ed-id", name: "id", required: true, value: room ? room.id : "", readonly: room ? true : null, spellcheck: "false", autocomplete: "off" }),
    el("span", { class: "help", text: "Letters, digits, - and _. Cannot change later." }));
  fields.append(idField);
  const inline = room && room.proxyOrigin;
  for (const [key, label, kind, help] of FIELDS) {
    const id = `ed-${key}`;
    let input;
    const v = room ? room[key] : undefined;
    if (Array.isArray(kind)) {
      input = el("select", { id, name: key }, kind.map((o) => el("option", { value: o, text: o || "server default" })));
      input.value = key === "protection" ? (v && v.mode) || "" : v ? String(v) : kind[0];
    } else if (kind === "lines" || kind === "lines?") {
      input = el("textarea", { id, name: key, rows: "3", spellcheck: "false" });
      input.value = (v || []).join("\n");
    } else {
      input = el("input", { id, name: key, type: kind.startsWith("int") ? "number" : kind === "datetime" ? "datetime-local" : "text", spellcheck: "false", autocomplete: "off" });
      if (kind.startsWith("int")) input.min = "0";
      input.value = kind === "datetime" ? toLocalInput(v) : kind === "tags" ? (v || []).join(", ") : v === null || v === undefined ? (creating && key in DEFAULTS ? String(DEFAULTS[key]) : "") : String(v);
    }
    const helpText = key === "targetUrl" && inline && !may("owner")
      ? "An inline room's target URL decides whose traffic this server captures: changing it needs the owner role." : help;
    if (key === "targetUrl" && inline && !may("owner")) input.disabled = true;
    if (!may("team") && ["returnOrigins", "tagOrigins"].includes(key)) continue;
    fields.append(el("div", { class: "field", "data-field": key }, el("label", { for: id, text: label }), input, el("span", { class: "help", id: `${id}-help`, text: helpText })));
    input.setAttribute("aria-describedby", `${id}-help`);
  }
  const inlineSet = may("team") ? inlineFieldset(room, form) : null;
  // threshold activation: the room stays open until joins/min stays above the threshold
  const aa = (room && room.autoActivate) || { enabled: false, joinsPerMin: 120, sustainSec: 60, releaseAfterSec: 300 };
  const num = (id, label, value) => el("div", { class: "field" }, el("label", { for: id, text: label }),
    el("input", { id, type: "number", min: "0", value: String(value) }));
  const autoSet = el("fieldset", { id: "ed-auto" }, el("legend", { text: "Threshold activation" }),
    el("label", { class: "check" }, el("input", { type: "checkbox", id: "ed-aa-enabled", checked: aa.enabled ? true : null }),
      " Put a queue up by itself when joins stay above the threshold"),
    el("div", { class: "grid2" }, num("ed-aa-joins", "Joins per minute", aa.joinsPerMin),
      num("ed-aa-sustain", "Sustained for (s)", aa.sustainSec), num("ed-aa-release", "Release after (s)", aa.releaseAfterSec)));
  // autotune: the leader moves the rate of a queueing room within min–max from the site's latency and errors
  const at = { ...AT_DEFAULT, ...((room && room.autotune) || {}) };
  const tuneSet = el("fieldset", { id: "ed-tune" }, el("legend", { text: "Autotune" }),
    el("label", { class: "check" }, el("input", { type: "checkbox", id: "ed-at-enabled", checked: at.enabled ? true : null }),
      " Adjust the outflow rate by itself from the site's latency and errors"),
    el("p", { class: "muted small", text: "Only while the room is queueing, and only with AUTOTUNE on for the server. Every change is a mark on the chart." }),
    el("div", { class: "grid2" }, num("ed-at-min", "Min rate per minute", at.minRate),
      num("ed-at-max", "Max rate per minute", at.maxRate), num("ed-at-latency", "Target latency (ms)", at.targetLatencyMs)));
  // URL targeting rules
  const rulesBox = el("div", { class: "rules" });
  const addRule = (rule) => {
    const row = el("div", { class: "rule-row" },
      el("input", { "aria-label": "Rule pattern", placeholder: "/checkout*", value: rule.pattern || "", spellcheck: "false" }),
      (() => { const s = el("select", { "aria-label": "Rule action" }, el("option", { value: "queue", text: "queue" }), el("option", { value: "skip", text: "skip" })); s.value = rule.action || "queue"; return s; })(),
      el("button", { type: "button", class: "btn small", onclick: () => row.remove() }, "Remove"));
    if (rule.id) row.dataset.ruleId = rule.id;
    rulesBox.append(row);
    if (rule.pattern && rule.matchCount !== undefined) {
      rulesBox.append(el("p", { class: "muted small rule-stat", text: rule.matchCount
        ? `${fmtInt(rule.matchCount)} door checks matched · last ${new Date(rule.lastMatchAt).toLocaleString()}` : "never matched" }));
    }
  };
  for (const rule of (room && room.rules) || []) addRule(rule);
  const dry = el("input", { id: "ed-dry", placeholder: "https://shop.example/checkout/1", spellcheck: "false" });
  const dryOut = el("p", { class: "result", role: "status", hidden: true });
  const unscoped = room && room.unscopedChecks ? el("p", { class: "note warn", text: `${fmtInt(room.unscopedChecks)} door checks arrived with no page URL (an integration older than qm.js 1.2.0): they cannot be scoped and are queued as if unscoped.` }) : null;
  const rulesSet = may("team") ? el("fieldset", {}, el("legend", { text: "URL targeting" }),
    el("p", { class: "muted small", text: "First match wins; * matches anything; a pattern starting with / matches the path. No rules: every page is protected. Changes apply on the next check." }), unscoped, rulesBox,
    el("div", {}, el("button", { type: "button", class: "btn small", onclick: () => addRule({}) }, "+ Add rule")),
    creating ? null : el("div", { class: "row" }, el("div", { class: "field" }, el("label", { for: "ed-dry", text: "Dry run: which rule wins for a URL?" }), dry),
      el("button", { type: "button", class: "btn", onclick: async () => {
        try {
          const res = await api("POST", `api/admin/rooms/${encodeURIComponent(room.id)}/rules/test`, { url: dry.value });
          dryOut.hidden = false;
          dryOut.textContent = describeMatch(res);
        } catch (err) { dryOut.hidden = false; dryOut.textContent = `${err.message}${err.code ? " (" + err.code + ")" : ""}`; }
        showOriginWarnings();
      } }, "Test")), dryOut) : null;
  // warnings under the dry run: a rule (or the URL tried) naming an origin this room will not return visitors to,
  // worked out from the form as it stands, so they show before anything is saved
  const warnBox = el("ul", { class: "warn-list", "aria-live": "polite", hidden: true });
  const showOriginWarnings = () => {
    const target = ($("#ed-targetUrl", form) || {}).value || (room && room.targetUrl) || "";
    const listed = (($("#ed-returnOrigins", form) || {}).value || "").split("\n").map((x) => x.trim()).filter(Boolean);
    const rules = $$(".rule-row", rulesBox).map((row) => $("input", row).value.trim()).filter(Boolean);
    const tried = dry.value.trim() ? [["URL", dry.value.trim()]] : [];
    const notes = [];
    for (const [what, text] of [...rules.map((r) => ["Rule", r]), ...tried]) {
      const origin = patternOrigin(text);
      if (origin && !returnsTo(origin, target, listed)) {
        notes.push(`${what} ${text} names ${origin}, an origin this room will not return visitors to (not the target URL's origin and not in Return origins): add it to Return origins, or visitors queued there are sent to the target URL instead.`);
      }
    }
    warnBox.replaceChildren(...notes.map((n) => el("li", { text: "⚠ " + n })));
    warnBox.hidden = !notes.length;
  };
  if (rulesSet) {
    rulesSet.append(warnBox);
    form.addEventListener("change", showOriginWarnings);
    showOriginWarnings();
  }
  const err = el("p", { class: "error", role: "alert" });
  const brandSet = brandFieldset(room);
  const entrySet = may("write") ? entryFieldset(room) : null;
  const access = may("team") ? accessFieldset(room, creating) : null;
  const lanesSet = lanesFieldset(room);
  form.append(el("div", { class: "dlg-body" }, fields, inlineSet, autoSet, tuneSet, lanesSet, brandSet, entrySet, rulesSet, access && access.set),
    el("div", { class: "dlg-foot" }, err, el("button", { type: "button", class: "btn", onclick: () => dlg.close() }, "Cancel"),
      el("button", { type: "submit", class: "btn primary" }, creating ? "Create room" : "Save changes")));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    err.textContent = "";
    $$(".field.bad", form).forEach((f) => f.classList.remove("bad"));
    let body;
    try {
      body = collect(form, room, rulesBox);
      if (access) access.collect(body);
    } catch (e) { err.textContent = e.message; return; }
    const brand = collectBrand(form, room);
    if (Object.keys(brand).length) body.brand = brand;
    const lanes = collectLanes(form, room);
    if (lanes !== undefined) body.lanes = lanes;
    // the save that takes this console's own host off the queue: said before it is made (unless the untick just did)
    const leaving = leavesConsoleHost(room, form);
    if (leaving && !form.dataset.moveConfirmed) {
      const ok = await confirmDialog("Move the console?", consoleMoveText(room, leaving), "Save and move", ev.submitter);
      if (!ok) return;
    }
    try {
      const res = await api("POST", "api/admin/rooms", body);
      state.rooms.set(res.room.id, { ...(state.rooms.get(res.room.id) || {}), ...res.room });
      const withLogo = await uploadLogo(form, res.room.id);
      if (withLogo) state.rooms.set(withLogo.id, { ...(state.rooms.get(withLogo.id) || {}), ...withLogo });
      const warnings = res.warnings || [];
      const moved = warnings.find((w) => w.code === "console_moved" && w.consoleUrl);
      if (moved) { location.assign(moved.consoleUrl); return; }
      if (warnings.length) { savedWithWarnings(dlg, res, warnings); return; }
      toast(res.created ? `Created ${res.room.id}.` : `Saved ${res.room.id}.`);
      dlg.close();
    } catch (e) {
      err.textContent = `${e.message}${e.code ? " (" + e.code + ")" : ""}`;
      const f = e.body && e.body.field && $(`[data-field="${e.body.field}"]`, form);
      if (f) { f.classList.add("bad"); $("input, select, textarea", f).focus(); }
    }
  });
  dlg.replaceChildren(head(creating ? "New room" : `Edit ${room.id}`, "editor-h"), form);
  openDialog("editor", opener, roomId);
  (creating ? $("#ed-id") : $("#ed-name")).focus();
}
// The inline switch as the guide draws it: a "Serve this room inline" tick with the internal address beside it.
// Clearing the tick of an inline room asks first; for an operator key both are disabled, and it says why.
function inlineFieldset(room, form) {
  const owner = may("owner");
  const was = !!(room && room.proxyOrigin);
  const tick = el("input", { type: "checkbox", id: "ed-inline-on", checked: was ? true : null, disabled: owner ? null : true,
    "aria-describedby": "ed-inline-why" });
  const address = el("input", { id: "ed-proxyOrigin", name: "proxyOrigin", type: "text", spellcheck: "false", autocomplete: "off",
    placeholder: "http://10.0.0.5:3000", value: (room && room.proxyOrigin) || "", disabled: owner && was ? null : true,
    "aria-describedby": "ed-proxyOrigin-help" });
  const why = el("p", { class: "muted small", id: "ed-inline-why", text: owner
    ? "Inline: this server answers for the target URL's host and forwards admitted visitors to the internal address. "
      + "Clear the tick to return the room to snippet mode."
    : "Inline deployment needs the owner role: an operator key cannot turn it on or off or change the internal address "
      + (was ? "or the target URL of this inline room. Every other setting of the room is yours to change." : "(the room can still be a snippet room).") });
  const note = el("ul", { class: "inline-warn", id: "ed-inline-warn", "aria-live": "polite", hidden: true });
  const showNote = () => {
    const leaving = leavesConsoleHost(room, form);
    note.replaceChildren(...(leaving ? [el("li", { text: "⚠ " + consoleMoveText(room, leaving) })] : []));
    note.hidden = !leaving;
  };
  tick.addEventListener("change", async () => {
    if (tick.checked) {
      address.disabled = false;
      address.focus();
      delete form.dataset.moveConfirmed;
      showNote();
      return;
    }
    if (was) {
      const leaving = leavesConsoleHost(room, form);
      const text = `Clearing Serve this room inline returns ${room.id} to snippet mode: this server stops answering for `
        + `${hostOf(room.targetUrl) || "its target URL's host"} and stops forwarding visitors to ${room.proxyOrigin}. `
        + "The site's own script tag decides who waits again, and if this server is down the pages load unqueued. "
        + "Nothing changes until you save." + (leaving ? " " + consoleMoveText(room, leaving) : "");
      const ok = await confirmDialog("Return to snippet mode?", text, "Return to snippet mode", tick);
      if (!ok) { tick.checked = true; return; }
      if (leaving) form.dataset.moveConfirmed = "1";
    }
    address.disabled = true;
    showNote();
  });
  form.addEventListener("input", (ev) => { if (ev.target && ev.target.id === "ed-targetUrl") { delete form.dataset.moveConfirmed; showNote(); } });
  return el("fieldset", { id: "ed-inline" }, el("legend", { text: "Inline deployment" }),
    el("div", { class: "inline-row" },
      el("label", { class: "check", for: "ed-inline-on" }, tick, " Serve this room inline"),
      el("div", { class: "field", "data-field": "proxyOrigin" },
        el("label", { for: "ed-proxyOrigin", text: "Internal address of the site behind the queue" }), address,
        el("span", { class: "help", id: "ed-proxyOrigin-help", text: "Where the inline proxy forwards this host's traffic: scheme, host and port only, reachable from this server." }))),
    why, note);
}
// "shop.example" (with a port only when it is not the scheme's default), as URL.host has it; "" when not a URL
function hostOf(url) {
  try { return new URL(url).host.toLowerCase(); } catch (e) { return ""; }
}
// the console is used through an inline host (under /__qm/ on the customer's domain): that host, else null
function consoleInlineHost() {
  return location.pathname === "/__qm" || location.pathname.startsWith("/__qm/") ? location.host.toLowerCase() : null;
}
// The host this save takes off the queue while this console is used through it: the room is the last inline one on
// the console's host and the form clears its tick or moves its target URL elsewhere. Null otherwise.
function leavesConsoleHost(room, form) {
  const here = consoleInlineHost();
  if (!here || !room || !room.proxyOrigin || hostOf(room.targetUrl) !== here) return null;
  const tick = $("#ed-inline-on", form);
  const target = $("#ed-targetUrl", form);
  const stays = tick && tick.checked && hostOf(target && !target.disabled ? target.value.trim() : room.targetUrl) === here;
  if (stays) return null;
  const others = [...state.rooms.values()].some((r) => r.id !== room.id && r.proxyOrigin && hostOf(r.targetUrl) === here);
  return others ? null : here;
}
// The host deleting ``room`` takes off the queue while this console is used through it: the last inline room there.
function deleteLeavesConsoleHost(room) {
  const here = consoleInlineHost();
  if (!here || !room || !room.proxyOrigin || hostOf(room.targetUrl) !== here) return null;
  const others = [...state.rooms.values()].some((r) => r.id !== room.id && r.proxyOrigin && hostOf(r.targetUrl) === here);
  return others ? null : here;
}
function consoleMoveText(room, host, act = "save") {
  const where = settingValue("PUBLIC_URL");
  const change = act === "delete" ? "Deleting it" : "Switching it back to snippet mode";
  const base = `${room.id} is the last inline room on ${host}. ${change} takes the queue's own `
    + "/__qm/* surface off that host with it — including this console.";
  return where
    ? `${base} After the ${act} the console moves you to PUBLIC_URL, ${String(where).replace(/\/?$/, "/")}, where you sign in again.`
    : `${base} PUBLIC_URL is not set, so the console cannot name where it went: set PUBLIC_URL, or open the console on this server's own address (an address literal or localhost) before you ${act}.`;
}
// A save the server answered with warnings: the dialog stays open on them until the operator closes it.
function savedWithWarnings(dlg, res, warnings) {
  const id = res.room.id;
  const body = el("div", { class: "dlg-body saved-view", role: "alert" },
    el("p", { text: `${res.created ? "Created" : "Saved"} ${id}, with ${warnings.length === 1 ? "a warning" : `${warnings.length} warnings`} from the server:` }),
    warningList(warnings));
  const done = el("button", { type: "button", class: "btn primary", onclick: () => dlg.close() }, "Close");
  dlg.replaceChildren(head(`${res.created ? "Created" : "Saved"} ${id}`, "editor-h"), body, el("div", { class: "dlg-foot" }, done));
  done.focus();
}
// "https://shop.example" for a rule pattern or URL naming an origin; null for a path pattern ("/checkout*")
function patternOrigin(text) {
  const m = /^(https?):\/\/([^/?#]+)/i.exec(text);
  if (!m) return null;
  return `${m[1].toLowerCase()}://${m[2].toLowerCase()}`;
}
const defaultPort = (scheme) => (scheme === "https" ? "443" : "80");
function splitOrigin(origin) {
  const m = /^(https?):\/\/(.*?)(?::(\d+))?$/.exec(origin);
  return m ? { scheme: m[1], host: m[2], port: m[3] || defaultPort(m[1]) } : null;
}
// whether visitors may be returned to origin: the target URL's own origin, or one listed (https://*.x covers subdomains)
function returnsTo(origin, targetUrl, listed) {
  const o = splitOrigin(origin);
  if (!o) return true;
  const t = patternOrigin(targetUrl || "");
  const all = [t, ...listed.map((x) => patternOrigin(x) || x.toLowerCase())].filter(Boolean).map(splitOrigin).filter(Boolean);
  return all.some((p) => {
    if (p.scheme !== o.scheme || p.port !== o.port) return false;
    if (p.host.startsWith("*.")) {
      const suffix = p.host.slice(1);
      const host = o.host.startsWith("*.") ? o.host.slice(1) : o.host;
      return host.endsWith(suffix) && (o.host.startsWith("*.") ? host.length >= suffix.length : host.length > suffix.length);
    }
    return p.host === o.host;
  });
}
function describeMatch(res) {
  if (!res) return "";
  const verdict = res.protected === false ? "not protected (no queue)" : "protected (queued)";
  if (res.rule) return `Rule ${res.rule.pattern} (${res.rule.action || "queue"}) wins: ${verdict}.`;
  return `No rule wins: ${verdict}${res.why ? ", " + res.why : ""}.`;
}
function collect(form, room, rulesBox) {
  const body = { id: $("#ed-id", form).value.trim() };
  if (!body.id) throw new Error("The room needs an id.");
  for (const [key, label, kind] of FIELDS) {
    const input = $(`#ed-${key}`, form);
    if (!input || input.disabled) continue;
    const raw = input.value.trim();
    let v;
    if (Array.isArray(kind)) v = key === "protection" ? (raw ? { mode: raw } : null) : key === "rejectStatus" ? Number(raw) : raw;
    else if (kind === "int") { if (raw === "") throw new Error(`${label} needs a number.`); v = Number(raw); }
    else if (kind === "int?") v = raw === "" ? null : Number(raw);
    else if (kind === "datetime") v = raw ? new Date(raw).toISOString() : null;
    else if (kind === "lines") v = raw ? raw.split(/\s*\n\s*/).filter(Boolean) : [];
    else if (kind === "lines?") v = raw ? raw.split(/\s*\n\s*/).filter(Boolean) : null;
    else if (kind === "tags") v = raw ? raw.split(/[\s,]+/).filter(Boolean) : [];
    else if (kind === "text?") v = raw || null;
    else v = raw === "" && key === "name" ? null : raw;
    if (room) { const cur = room[key]; if (JSON.stringify(cur === undefined ? null : cur) === JSON.stringify(v)) continue; }
    else if (v === null || (Array.isArray(v) && !v.length) || v === "") continue;
    body[key] = v;
  }
  const tick = $("#ed-inline-on", form);
  if (tick && !tick.disabled) {
    const address = $("#ed-proxyOrigin", form).value.trim();
    if (tick.checked && !address) throw new Error("Fill in Internal address of the site behind the queue, or clear Serve this room inline.");
    const v = tick.checked ? address : null;
    if (room ? (room.proxyOrigin || null) !== v : v !== null) body.proxyOrigin = v;
  }
  const aaNow = { enabled: $("#ed-aa-enabled", form).checked, joinsPerMin: Number($("#ed-aa-joins", form).value),
    sustainSec: Number($("#ed-aa-sustain", form).value), releaseAfterSec: Number($("#ed-aa-release", form).value) };
  const aaBefore = (room && room.autoActivate) || null;
  const aaDefault = JSON.stringify(aaNow) === JSON.stringify({ enabled: false, joinsPerMin: 120, sustainSec: 60, releaseAfterSec: 300 });
  if (aaBefore ? JSON.stringify(aaBefore) !== JSON.stringify(aaNow) : !aaDefault) body.autoActivate = aaNow;
  // sent only when changed: the fields this form does not show (maxErrorRate, stepSec) keep their stored values
  const atBefore = (room && room.autotune) || null;
  const atForm = { enabled: $("#ed-at-enabled", form).checked, minRate: Number($("#ed-at-min", form).value),
    maxRate: Number($("#ed-at-max", form).value), targetLatencyMs: Number($("#ed-at-latency", form).value) };
  const atNow = { ...(atBefore || {}), ...atForm };
  const atSame = Object.keys(atForm).every((k) => atForm[k] === { ...AT_DEFAULT, ...(atBefore || {}) }[k]);
  if (!atSame) {
    if (atForm.minRate > atForm.maxRate) throw new Error("Autotune: the min rate is above the max rate.");
    body.autotune = atNow;
  }
  if (rulesBox.isConnected) {
    const rules = $$(".rule-row", rulesBox).map((row) => {
      const [p, a] = $$("input, select", row);
      if (!p.value.trim()) return null;
      const r = { pattern: p.value.trim(), action: a.value };
      if (row.dataset.ruleId) r.id = row.dataset.ruleId;
      return r;
    }).filter(Boolean);
    const before = ((room && room.rules) || []).map((r) => ({ pattern: r.pattern, action: r.action || "queue" }));
    if (JSON.stringify(before) !== JSON.stringify(rules.map((r) => ({ pattern: r.pattern, action: r.action })))) body.rules = rules;
  }
  return body;
}

export { consoleMoveText, deleteLeavesConsoleHost, openEditor };

/* Scheduled events: a room's windows that override some of its settings for their span. The dialog shows them
   on a timeline and as a table, adds one and deletes one; the card says which is in force or comes next.
   The server applies each boundary (GET/POST /api/admin/rooms/<room>/events, …/events/<id>). */
import { $, clock, el, fmtInt } from "./ui.js";
import { api } from "./api.js";
import { head, openDialog } from "./dialogs.js";
import { may } from "./state.js";

const OVERRIDES = [
  ["ratePerMinute", "Rate/min"],
  ["maxConcurrent", "Max concurrent"],
  ["maxWaiting", "Max waiting"],
  ["sessionTtlSec", "Session idle (s)"],
];
const STATUS = { upcoming: "upcoming", prequeue: "pre-queue open", live: "in force", ended: "over" };
const when = (iso) => new Date(iso).toLocaleString([], { month: "short", day: "numeric", hour: "numeric", minute: "2-digit" });
const label = (e) => e.name || e.id;

/* One line for the room card: the event in force, else the next one; "" when there is none. */
function eventLine(r) {
  const events = r.events || [];
  const now = Date.now();
  const inForce = r.eventInForce ? events.find((e) => e.id === r.eventInForce.id) : null;
  if (inForce) {
    return r.eventInForce.phase === "prequeue"
      ? `Event “${label(inForce)}”: pre-queue open, starts ${clock(Date.parse(inForce.startsAt))}`
      : `Event “${label(inForce)}” in force until ${clock(Date.parse(inForce.endsAt))}`;
  }
  const next = events.filter((e) => Date.parse(e.endsAt) > now).sort((a, b) => Date.parse(a.startsAt) - Date.parse(b.startsAt))[0];
  return next ? `Next event “${label(next)}” ${when(next.preQueueAt || next.startsAt)}` : "";
}

/* The timeline: from now (or the first event) to the last event's end, one bar per event, its pre-queue lighter. */
function timeline(events, now) {
  if (!events.length) return null;
  const starts = events.map((e) => Date.parse(e.preQueueAt || e.startsAt));
  const from = Math.min(now, ...starts), to = Math.max(now + 3600e3, ...events.map((e) => Date.parse(e.endsAt)));
  const pct = (t) => `${(((t - from) / (to - from)) * 100).toFixed(2)}%`;
  const width = (a, b) => `${Math.max(0.6, ((b - a) / (to - from)) * 100).toFixed(2)}%`;
  const bars = events.map((e) => {
    const s = Date.parse(e.startsAt), end = Date.parse(e.endsAt), pre = e.preQueueAt ? Date.parse(e.preQueueAt) : null;
    return el("div", { class: `ev-row ev-${e.status}` },
      el("span", { class: "ev-name", text: label(e) }),
      el("div", { class: "ev-track" },
        pre ? el("span", { class: "ev-pre", style: `left:${pct(pre)};width:${width(pre, s)}`, title: `pre-queue from ${when(e.preQueueAt)}` }) : null,
        el("span", { class: "ev-bar", style: `left:${pct(s)};width:${width(s, end)}`, title: `${when(e.startsAt)} – ${when(e.endsAt)}` })));
  });
  return el("figure", { class: "ev-timeline", "aria-label": "Events on a timeline" },
    el("div", { class: "ev-axis" }, el("span", { text: when(new Date(from).toISOString()) }), el("span", { text: when(new Date(to).toISOString()) })),
    bars,
    el("div", { class: "ev-now", style: `left:calc(8rem + (100% - 8rem) * ${((now - from) / (to - from)).toFixed(4)})`, title: "now" }));
}

function overrides(e) {
  const parts = OVERRIDES.filter(([k]) => k in e).map(([k, name]) => `${name} ${e[k] === null ? "none" : fmtInt(e[k])}`);
  if (e.sessionMaxSec !== undefined) parts.push(`Session max ${e.sessionMaxSec === null ? "none" : `${fmtInt(e.sessionMaxSec)} s`}`);
  if (e.maxWaitSec !== undefined) parts.push(`Max wait ${e.maxWaitSec === null ? "none" : `${fmtInt(e.maxWaitSec)} s`}`);
  if (e.message && Object.keys(e.message).length) parts.push(`message (${Object.keys(e.message).join(", ")})`);
  return parts.join(" · ") || "—";
}

function table(roomId, events) {
  if (!events.length) return el("p", { class: "muted", text: "No events. A room holds up to five; each overrides some settings for its span." });
  return el("div", { class: "tbl-wrap", tabindex: "0", role: "region", "aria-label": "Scheduled events" }, el("table", { class: "tbl" },
    el("thead", {}, el("tr", {}, ["Event", "Pre-queue", "Starts", "Ends", "Overrides", "Status", ""].map((h) => el("th", { scope: "col", text: h })))),
    el("tbody", {}, events.map((e) => el("tr", { "data-event": e.id },
      el("td", { text: label(e) }),
      el("td", { text: e.preQueueAt ? `${when(e.preQueueAt)}${e.shuffle ? " · shuffled" : ""}` : "—" }),
      el("td", { text: when(e.startsAt) }), el("td", { text: when(e.endsAt) }),
      el("td", { text: overrides(e) }),
      el("td", { text: STATUS[e.status] || e.status }),
      el("td", {}, may("write") ? el("button", { type: "button", class: "btn small danger", "aria-label": `Delete event ${label(e)}`,
        onclick: () => remove(roomId, e.id) }, "Delete") : null))))));
}

function field(id, text, input) {
  return el("div", { class: "field" }, el("label", { for: id, text }), input);
}
const local = (ms) => { const d = new Date(ms - new Date(ms).getTimezoneOffset() * 60000); return d.toISOString().slice(0, 16); };

function form(roomId) {
  const hour = 3600e3, start = Math.ceil(Date.now() / hour) * hour + hour;
  const inputs = {
    name: el("input", { id: "ev-name", type: "text", maxlength: "120", placeholder: "Winter sale" }),
    startsAt: el("input", { id: "ev-start", type: "datetime-local", value: local(start), required: true }),
    endsAt: el("input", { id: "ev-end", type: "datetime-local", value: local(start + 2 * hour), required: true }),
    preQueueAt: el("input", { id: "ev-pre", type: "datetime-local" }),
    shuffle: el("input", { id: "ev-shuffle", type: "checkbox" }),
    ratePerMinute: el("input", { id: "ev-rate", type: "number", min: "0", step: "1" }),
    maxConcurrent: el("input", { id: "ev-maxc", type: "number", min: "1", step: "1" }),
    message: el("input", { id: "ev-msg", type: "text", maxlength: "280", placeholder: "The page's message in English" }),
  };
  return el("form", { class: "ev-form", onsubmit: (ev) => { ev.preventDefault(); add(roomId, inputs); } },
    el("h3", { text: "Add an event" }),
    el("div", { class: "row" }, field("ev-name", "Name", inputs.name)),
    el("div", { class: "row" }, field("ev-start", "Starts", inputs.startsAt), field("ev-end", "Ends", inputs.endsAt)),
    el("div", { class: "row" }, field("ev-pre", "Pre-queue opens (optional)", inputs.preQueueAt),
      el("div", { class: "field" }, el("label", { class: "check" }, inputs.shuffle, "Shuffle the pre-queue at the start"))),
    el("div", { class: "row" }, field("ev-rate", "Rate/min", inputs.ratePerMinute), field("ev-maxc", "Max concurrent", inputs.maxConcurrent)),
    el("div", { class: "row" }, field("ev-msg", "Page message", inputs.message)),
    el("p", { class: "help", text: "Times are your browser's. Leave a setting empty to keep the room's own. At the end each setting goes back, unless someone changed it meanwhile." }),
    el("button", { type: "submit", class: "btn primary", id: "ev-add" }, "Add event"));
}

async function add(roomId, inputs) {
  const out = $("#ev-out");
  const body = { startsAt: new Date(inputs.startsAt.value).toISOString(), endsAt: new Date(inputs.endsAt.value).toISOString() };
  if (inputs.name.value.trim()) body.name = inputs.name.value.trim();
  if (inputs.preQueueAt.value) body.preQueueAt = new Date(inputs.preQueueAt.value).toISOString();
  if (inputs.shuffle.checked) body.shuffle = true;
  if (inputs.ratePerMinute.value !== "") body.ratePerMinute = Math.round(+inputs.ratePerMinute.value);
  if (inputs.maxConcurrent.value !== "") body.maxConcurrent = Math.round(+inputs.maxConcurrent.value);
  if (inputs.message.value.trim()) body.message = { en: inputs.message.value.trim() };
  try {
    await api("POST", `api/admin/rooms/${encodeURIComponent(roomId)}/events`, body);
    await render(roomId);
    $("#ev-out").replaceChildren(el("p", { class: "note good", text: "Event added." }));
  } catch (err) {
    out.replaceChildren(el("p", { class: "note warn", text: `${err.message}${err.code ? ` (${err.code})` : ""}` }));
  }
}

async function remove(roomId, eventId) {
  try {
    await api("DELETE", `api/admin/rooms/${encodeURIComponent(roomId)}/events/${encodeURIComponent(eventId)}`);
    await render(roomId);
    $("#ev-out").replaceChildren(el("p", { class: "note good", text: "Event deleted; one in force ends within a second." }));
  } catch (err) {
    $("#ev-out").replaceChildren(el("p", { class: "note warn", text: `${err.message}${err.code ? ` (${err.code})` : ""}` }));
  }
}

async function render(roomId) {
  const dlg = $("#dlg-events");
  const data = await api("GET", `api/admin/rooms/${encodeURIComponent(roomId)}/events`);
  const drop = data.drop ? el("p", { class: "note", text: `The room's own drop opens ${when(data.drop.opensAt)} (Schedule in the editor).` }) : null;
  dlg.replaceChildren(head(`Events · ${roomId}`, "events-h"),
    el("div", { class: "dlg-body" }, drop, timeline(data.events, data.now), table(roomId, data.events),
      may("write") ? form(roomId) : null, el("div", { id: "ev-out", "aria-live": "polite" })));
}

async function openEvents(roomId, opener) {
  const dlg = $("#dlg-events");
  dlg.replaceChildren(head(`Events · ${roomId}`, "events-h"), el("div", { class: "dlg-body" }, el("p", { class: "muted", text: "Loading…" })));
  openDialog("events", opener, roomId);
  try { await render(roomId); } catch (err) {
    dlg.replaceChildren(head(`Events · ${roomId}`, "events-h"), el("div", { class: "dlg-body" }, el("p", { class: "note warn", text: err.message })));
  }
}

export { eventLine, openEvents };

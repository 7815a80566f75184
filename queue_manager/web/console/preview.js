/* The Preview dialog: the room's waiting page as a visitor would see it in one state (waiting at a place, the
   pre-queue countdown, their turn, paused, the line full, the site down, the queue offline), in one of the five
   languages and the room's brand. The server signs a link for an hour; the page it opens takes no place in the
   line and counts nobody. */
import { $, clock, el } from "./ui.js";
import { api } from "./api.js";
import { head, openDialog } from "./dialogs.js";
import { LANGS } from "./languages.js";

// One entry per state the server offers (POST /api/admin/rooms/<room>/preview): its value and what it shows.
const STATES = [
  ["waiting", "Waiting in line"],
  ["random", "Random line (a wait range)"],
  ["prequeue", "Pre-queue countdown"],
  ["turn", "Your turn"],
  ["paused", "Paused"],
  ["full", "Line full"],
  ["closed", "Closed (queueing reject)"],
  ["origin_down", "Site down (origin down)"],
  ["offline", "Queue offline"],
];
// the states the figures mean something in: a place and a wait, or the sign-ups and the time to the doors
const FIGURES = { waiting: ["Position", "Wait (minutes)"], paused: ["Position", "Wait (minutes)"], prequeue: ["Signed up", "Doors open in (minutes)"],
  random: ["People waiting", "Middle wait (minutes)"] };

let previewCtx = null; // {room, busy}
function field(id, label, input, help) {
  return el("div", { class: "field" }, el("label", { for: id, text: label }), input,
    help ? el("span", { class: "help", id: `${id}-help`, text: help }) : null);
}
function openPreview(roomId, opener) {
  const dlg = $("#dlg-preview");
  previewCtx = { room: roomId, busy: false };
  const state = el("select", { id: "preview-state" }, STATES.map(([v, t]) => el("option", { value: v, text: t })));
  const lang = el("select", { id: "preview-lang" }, LANGS.map(([v, t]) => el("option", { value: v, text: t })));
  const position = el("input", { id: "preview-position", type: "number", min: "1", max: "1000000", step: "1", value: "42", required: true });
  const wait = el("input", { id: "preview-wait", type: "number", min: "0", max: "43200", step: "1", value: "15", required: true });
  const posLabel = el("label", { for: "preview-position", text: "Position" });
  const waitLabel = el("label", { for: "preview-wait", text: "Wait (minutes)" });
  const figures = el("div", { class: "row", id: "preview-figures" },
    el("div", { class: "field" }, posLabel, position), el("div", { class: "field" }, waitLabel, wait));
  const sync = () => {
    const names = FIGURES[state.value];
    figures.hidden = !names;
    if (names) { posLabel.textContent = names[0]; waitLabel.textContent = names[1]; }
  };
  state.addEventListener("change", sync);
  const form = el("form", { class: "preview-form", onsubmit: (ev) => { ev.preventDefault(); makeLink(); } },
    el("div", { class: "row" }, field("preview-state", "State", state), field("preview-lang", "Language", lang)),
    figures,
    el("p", { class: "help", id: "preview-help", text: "Opens the room's waiting page in a new tab, in its brand, marked Preview. The link works for an hour without signing in; it takes no place in the line and counts no visitor." }),
    el("button", { type: "submit", class: "btn primary", id: "preview-go" }, "Open preview"));
  dlg.replaceChildren(head(`Preview · ${roomId}`, "preview-h"),
    el("div", { class: "dlg-body" }, form, el("div", { id: "preview-out", "aria-live": "polite" })));
  sync();
  openDialog("preview", opener, roomId);
  state.focus();
}

async function makeLink() {
  if (!previewCtx || previewCtx.busy) return;
  const out = $("#preview-out"), go = $("#preview-go");
  const body = { state: $("#preview-state").value, lang: $("#preview-lang").value };
  if (FIGURES[body.state]) {
    const position = Math.round(+$("#preview-position").value), minutes = +$("#preview-wait").value;
    if (!(position >= 1 && position <= 1000000) || !(minutes >= 0 && minutes <= 43200)) {
      out.replaceChildren(el("p", { class: "note warn", text: "Position is a whole number from 1; the wait is from 0 to 43,200 minutes." }));
      return;
    }
    body.position = position;
    body.waitSec = Math.round(minutes * 60);
  }
  previewCtx.busy = true; go.disabled = true;
  // the tab is opened now, while the click still counts as the operator's: a browser may block one opened later
  const tab = window.open("", "_blank");
  try {
    const res = await api("POST", `api/admin/rooms/${encodeURIComponent(previewCtx.room)}/preview`, body);
    if (tab) { tab.opener = null; tab.location.replace(res.url); }
    out.replaceChildren(el("p", { class: "note good" },
      tab ? "Opened in a new tab. " : "Your browser blocked the new tab. ",
      el("a", { href: res.url, target: "_blank", rel: "noopener noreferrer", id: "preview-link" }, "Open the preview"),
      ` (the link works until ${clock(res.expiresAt)}).`));
  } catch (err) {
    if (tab) tab.close();
    out.replaceChildren(el("p", { class: "note warn", text: `${err.message}${err.code ? ` (${err.code})` : ""}` }));
  } finally {
    previewCtx.busy = false; go.disabled = false;
  }
}

export { openPreview };

/* The visitor drill-down: look a ticket up by number or Ref, and the two-step eject. */
import { $, el, fmtInt, kv, secs, toast } from "./ui.js";
import { may, state } from "./state.js";
import { api, fail } from "./api.js";
import { head, openDialog } from "./dialogs.js";

let visitorCtx = null; // {room, query, data}
function openVisitor(roomId, opener) {
  const dlg = $("#dlg-visitor");
  state.armed = null;
  visitorCtx = { room: roomId, query: "", data: null, error: null };
  const input = el("input", { id: "vis-q", placeholder: "123 or K7Q2MX", spellcheck: "false", autocomplete: "off" });
  const form = el("form", { class: "row", onsubmit: (ev) => { ev.preventDefault(); lookUp(input.value.trim()); } },
    el("div", { class: "field" }, el("label", { for: "vis-q", text: "Ticket number or Ref" }), input),
    el("button", { type: "submit", class: "btn primary" }, "Look up"));
  dlg.replaceChildren(head(`Visitors · ${roomId}`, "visitor-h"), el("div", { class: "dlg-body" }, form, el("div", { id: "vis-out", "aria-live": "polite" })));
  openDialog("visitor", opener, roomId);
  input.focus();
}
async function lookUp(q) {
  if (!visitorCtx || !q) return;
  if (q !== visitorCtx.query) state.armed = null; // looking up somebody else drops the arming
  visitorCtx.query = q;
  try {
    const res = await api("GET", `api/admin/rooms/${encodeURIComponent(visitorCtx.room)}/visitors/${encodeURIComponent(q)}`);
    visitorCtx.data = res.visitor; visitorCtx.error = null;
  } catch (err) { visitorCtx.data = null; visitorCtx.error = err; }
  renderVisitor();
}
function refreshVisitor() {
  if (visitorCtx && visitorCtx.query && $("#dlg-visitor").open && !refreshVisitor.busy) {
    refreshVisitor.busy = true;
    lookUp(visitorCtx.query).finally(() => { refreshVisitor.busy = false; });
  }
}
function renderVisitor() {
  const out = $("#vis-out");
  if (!out) return;
  const v = visitorCtx.data;
  if (!v) {
    const e = visitorCtx.error;
    out.replaceChildren(el("p", { class: "note", text: e ? (e.code === "no_ticket" ? `No ticket ${visitorCtx.query} in this room.` : `${e.message} (${e.code || e.status})`) : "" }));
    return;
  }
  if (v.candidates) {
    out.replaceChildren(el("p", { class: "note", text: `Ref ${v.ref} matches ${v.candidates.length} tickets; pick one by number:` }),
      el("ul", {}, v.candidates.map((c) => el("li", {}, el("button", { type: "button", class: "btn small", onclick: () => lookUp(String(c.ticket)) }, `#${c.ticket} · ${c.state}`)))));
    return;
  }
  if (v.state === "previous_generation") {
    out.replaceChildren(el("p", { class: "note warn", text: v.message || `Ref ${v.ref || visitorCtx.query} was ticket ${(v.tickets || []).join(", ")} of an earlier generation (${v.generation}) of this room. The caller has to join again.` }));
    return;
  }
  const clockRow = v.passExpiresInSec !== undefined ? ["Pass expires in", secs(v.passExpiresInSec)]
    : v.sessionExpiresInSec !== undefined ? ["Session expires in", secs(v.sessionExpiresInSec)] : null;
  const pairs = [
    ["Ticket", `#${v.ticket} · Ref ${v.ref}`], ["State", v.state + (v.reason ? ` (${v.reason})` : "")],
    ["Position", v.position === null || v.position === undefined ? "–" : fmtInt(v.position)],
    v.waiting !== undefined ? ["Waiting", secs(v.waiting) + " (still climbing)"] : ["Waited", v.waited === null || v.waited === undefined ? "–" : secs(v.waited)],
    ["Joined", v.joined ? new Date(v.joined).toLocaleString() : "–"],
    ["Passed", v.passed ? new Date(v.passed).toLocaleString() : v.state === "admitted" ? "unknown" : "–"],
    clockRow,
    ["On the site now", v.onSite ? "yes" : "no"],
    ["Bound to a client", v.bound ? (v.bound.cookie ? "yes, by cookie" : "by fingerprint only") : "–"],
  ];
  const key = `${visitorCtx.room}:${v.ticket}`;
  const armed = state.armed === key;
  let btn = null;
  if (may("write") && v.state !== "expired") {
    btn = el("button", { type: "button", id: "vis-eject", class: "btn danger" + (armed ? " armed" : ""), onclick: () => eject(v.ticket, key) },
      armed ? `Confirm: eject #${v.ticket}` : "Eject…");
  }
  const focused = document.activeElement && document.activeElement.id === "vis-eject";
  out.replaceChildren(kv(pairs), btn ? el("div", { class: "row" }, btn,
    armed ? el("button", { type: "button", class: "btn", onclick: () => { state.armed = null; renderVisitor(); } }, "Cancel") : null,
    el("span", { class: "muted small", text: armed ? "Revokes the pass, ends any session and sends them to the back of the line." : "" })) : null);
  if (focused) $("#vis-eject").focus();
}
async function eject(ticket, key) {
  if (state.armed !== key) { state.armed = key; renderVisitor(); return; }
  state.armed = null;
  try {
    await api("POST", `api/admin/rooms/${encodeURIComponent(visitorCtx.room)}/eject`, { ticket });
    toast(`Ejected #${ticket}: back of the line.`);
  } catch (err) { fail(err); }
  await lookUp(visitorCtx.query);
  const q = $("#vis-q"); if (q) q.focus();
}

export { openVisitor, refreshVisitor };

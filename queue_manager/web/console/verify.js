/* The install verifier: paste a page of the site, the server fetches it and says whether the room's tag is on it,
   whether the page's origin is answered (tagOrigins) and returned to (returnOrigins), and how many refusals were
   counted there; one click adds the origin to tagOrigins only. Also the card's plain words on where admitted
   visitors land (returnOrigins) for rooms used from other origins, through a tag or a connector. */
import { $, el, fmtInt, toast } from "./ui.js";
import { may, state } from "./state.js";
import { api, fail } from "./api.js";
import { head, openDialog } from "./dialogs.js";

const PORTS = { "http:": "80", "https:": "443" };

// "scheme://host[:port]" of a URL, as the server spells an origin (default port left out); null if it is none
function originOf(url) {
  try {
    const u = new URL(url);
    if (!PORTS[u.protocol] || u.username || u.password) return null;
    return `${u.protocol}//${u.hostname}${u.port && u.port !== PORTS[u.protocol] ? ":" + u.port : ""}`;
  } catch (e) { return null; }
}
function parsePattern(p) {
  const m = /^(https?):\/\/(\*\.)?([^/:[\]]+|\[[^\]]+\])(?::(\d+))?$/.exec(p);
  return m ? { scheme: m[1], wild: !!m[2], host: m[3].toLowerCase(), port: m[4] || "" } : null;
}
// does the origin pattern `pattern` (an exact origin or scheme://*.suffix[:port]) cover `origin` (either kind)?
function covers(pattern, origin) {
  const a = parsePattern(pattern), b = parsePattern(origin);
  if (!a || !b || a.scheme !== b.scheme || a.port !== b.port) return false;
  if (!a.wild) return !b.wild && a.host === b.host;
  const suffix = "." + a.host, host = (b.wild ? "." : "") + b.host;
  return host === suffix || (host.endsWith(suffix) && host.length > suffix.length);
}
function returned(room, origin) {
  const target = originOf(room.targetUrl || "");
  return origin === target || (room.returnOrigins || []).some((p) => covers(p, origin));
}

// What the card says about where admitted visitors land, or "" when there is nothing to say. Needs the origin
// lists, which only the team sees; the refused-return count is on every card.
function returnNote(r) {
  const parts = [];
  if (Array.isArray(r.tagOrigins)) {
    const strays = r.tagOrigins.filter((o) => !returned(r, o));
    if (strays.length) {
      parts.push(`Tags on ${strays.join(", ")} are answered, but visitors admitted there are sent to ${r.targetUrl}: ` +
        `${strays.length === 1 ? "it is" : "they are"} not in returnOrigins.`);
    }
  }
  if (r.blockedReturnUrls) {
    parts.push(`${fmtInt(r.blockedReturnUrls)} return URL${r.blockedReturnUrls === 1 ? " was" : "s were"} refused: ` +
      `those visitors landed on ${r.targetUrl || "the targetUrl"} instead of the page they came from. A room used ` +
      "through a connector (Node, Worker, WordPress) or a tag on another origin needs that origin in returnOrigins.");
  }
  return parts.join(" ");
}
function returnLine(card, r) {
  const line = $('[data-k="return-line"]', card.node);
  if (!line) return;
  const text = returnNote(r);
  line.hidden = !text;
  if (line.textContent !== text) line.textContent = text;
}

let verifyCtx = null; // {room, busy}
function openVerifier(roomId, opener) {
  const dlg = $("#dlg-verify");
  const room = state.rooms.get(roomId) || {};
  verifyCtx = { room: roomId, busy: false };
  const input = el("input", {
    id: "verify-url", type: "url", spellcheck: "false", autocomplete: "off", required: true,
    placeholder: "https://www.shop.example/checkout", value: room.targetUrl || "",
    "aria-describedby": "verify-help",
  });
  const form = el("form", { class: "row", onsubmit: (ev) => { ev.preventDefault(); runCheck(input.value.trim()); } },
    el("div", { class: "field" }, el("label", { for: "verify-url", text: "A page of the site" }), input,
      el("span", { class: "help", id: "verify-help", text: "This server fetches the page (as a browser would, without running it) and looks for the room's qm.js tag." })),
    el("button", { type: "submit", class: "btn primary", id: "verify-go" }, "Check page"));
  dlg.replaceChildren(head(`Verify install · ${roomId}`, "verify-h"),
    el("div", { class: "dlg-body" }, form, el("div", { id: "verify-out", "aria-live": "polite" })));
  openDialog("verify", opener, roomId);
  input.focus();
}

async function runCheck(url) {
  if (!verifyCtx || !url || verifyCtx.busy) return;
  const out = $("#verify-out"), go = $("#verify-go");
  verifyCtx.busy = true; go.disabled = true;
  out.replaceChildren(el("p", { class: "note", text: `Fetching ${url}…` }));
  try {
    const res = await api("POST", `api/admin/rooms/${encodeURIComponent(verifyCtx.room)}/install-check`, { url });
    renderAnswer(res);
  } catch (err) {
    out.replaceChildren(el("p", { class: "note warn", text: `${err.message}${err.code ? ` (${err.code})` : ""}` }));
  } finally {
    verifyCtx.busy = false; go.disabled = false;
  }
}

function yes(ok, text) { return el("span", { class: "verdict " + (ok ? "ok" : "bad"), text: (ok ? "✓ " : "✗ ") + text }); }

function renderAnswer(a) {
  const out = $("#verify-out");
  if (!out) return;
  const f = a.fetch;
  const page = f.refused ? yes(false, `not fetched: ${f.refused}`)
    : f.error ? yes(false, `not fetched: ${f.error}`)
      : yes(f.ok, `HTTP ${f.status}${f.finalUrl !== a.url ? ` at ${f.finalUrl}` : ""}` +
        (f.redirects.length ? ` after ${f.redirects.length} redirect${f.redirects.length === 1 ? "" : "s"}` : ""));
  let tag;
  if (!a.tag) tag = el("span", { class: "verdict mute", text: "– not read" });
  else if (a.inline && !a.tag.namesRoom) tag = el("span", { class: "verdict mute", text: "– none needed: the room is served inline" });
  else if (a.tag.namesRoom) tag = yes(true, `present, data-room="${a.roomId}"`);
  else if (a.tag.found) tag = yes(false, `present, but names ${a.tag.tags.map((t) => t.room === null ? "no room" : `"${t.room}"`).join(", ")}`);
  else tag = yes(false, "not on the page");
  const by = { targetUrl: "the room's targetUrl", tagOrigins: "tagOrigins", returnOrigins: "returnOrigins (tagOrigins is blank)" };
  const origin = a.tagAllowed ? yes(true, `answered — ${a.origin} is allowed by ${by[a.tagAllowedBy]}`)
    : yes(false, `refused — ${a.origin} is not in tagOrigins: the tag fails open there`);
  const refusals = a.refusing
    ? (a.refusedChecks ? yes(false, `${fmtInt(a.refusedChecks)} refused checks counted for this origin: a page with the tag is live and unprotected right now`)
      : el("span", { class: "verdict mute", text: "– none counted yet; every check from this origin would be refused and counted" }))
    : el("span", { class: "verdict " + (a.refusedChecks ? "mute" : "ok"), text: a.refusedChecks
      ? `${fmtInt(a.refusedChecks)} counted before it was allowed; new checks are answered`
      : "✓ none: checks from this origin are answered" });
  const back = a.returnAllowed ? yes(true, "admitted visitors are sent back to the page")
    : yes(false, `admitted visitors are sent to ${(state.rooms.get(a.roomId) || {}).targetUrl || "the room's targetUrl"}, not back here`);
  const rows = [["Page", page], ["Tag", tag], ["Origin", origin], ["Refusals", refusals], ["Return", back]];
  const kids = [
    el("p", { class: "note" + (a.ok ? " good" : " warn"), text: a.ok ? "✓ The tag is installed and this origin is answered." : `${a.problems.length} problem${a.problems.length === 1 ? "" : "s"} on this page.` }),
    el("dl", { class: "kv verify-kv" }, rows.map(([k, v]) => [el("dt", { text: k }), el("dd", {}, v)])),
  ];
  if (a.problems.length) kids.push(el("ul", { class: "warn-list", "aria-label": "Problems" }, a.problems.map((p) => el("li", { text: "⚠ " + p }))));
  if (a.notes.length) kids.push(el("ul", { class: "info-list", "aria-label": "Notes" }, a.notes.map((n) => el("li", { text: n }))));
  if (a.fix && a.fix.addTagOrigin && may("write")) {
    const origin = a.fix.addTagOrigin;
    kids.push(el("div", { class: "verify-fix" },
      el("button", { type: "button", class: "btn primary", id: "verify-fix", onclick: (ev) => addTagOrigin(origin, a.url, ev.currentTarget) }, `Allow ${origin} in tagOrigins`),
      el("p", { class: "help", text: "Adds this origin to tagOrigins only: the tag there is answered. Where visitors may be redirected (returnOrigins) is not changed." })));
  }
  out.replaceChildren(...kids);
}

async function addTagOrigin(origin, url, button) {
  if (!verifyCtx) return;
  button.disabled = true;
  try {
    const res = await api("POST", `api/admin/rooms/${encodeURIComponent(verifyCtx.room)}/tag-origins`, { origin });
    const r = state.rooms.get(verifyCtx.room);
    if (r) state.rooms.set(verifyCtx.room, { ...r, tagOrigins: res.tagOrigins });
    toast(res.added ? `${origin} added to tagOrigins of ${verifyCtx.room}.` : `${origin} was already answered.`);
    await runCheck(url);
  } catch (err) { fail(err); button.disabled = false; }
}

export { openVerifier, returnLine, returnNote };

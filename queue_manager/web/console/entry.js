/* The room editor's Entry section: who may join (the entry field is in the editor's fields), the room's
   signing key for invitation tokens (shown once, with a copy button), and its entry codes: generate (shown
   once and downloaded as CSV), upload a CSV, and the counts. */
import { el, fmtInt, toast } from "./ui.js";
import { state } from "./state.js";
import { api, fail } from "./api.js";
import { confirmDialog } from "./dialogs.js";

const LANE_RE = /^[a-z0-9][a-z0-9-]{0,31}$/;

function roomPath(room, tail) {
  return `api/admin/rooms/${encodeURIComponent(room.id)}/${tail}`;
}

// A CSV of codes (code, lane, uses) downloaded from memory: the server keeps their hashes only.
function saveCsv(codes, lane, uses, roomId) {
  const rows = ["code,lane,uses", ...codes.map((c) => `${c},${lane || ""},${uses}`)];
  const url = URL.createObjectURL(new Blob([rows.join("\r\n") + "\r\n"], { type: "text/csv" }));
  const a = el("a", { href: url, download: `codes-${roomId}.csv` });
  document.body.append(a); a.click(); a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 5000);
}

async function copy(text, what) {
  try { await navigator.clipboard.writeText(text); toast(`${what} copied.`); }
  catch (e) { toast(`Select the ${what.toLowerCase()} and copy it yourself: the browser refused.`, true); }
}

function keyPart(room) {
  const out = el("div", { id: "ed-entry-key-out", "aria-live": "polite" });
  const make = el("button", { type: "button", class: "btn", id: "ed-entry-key", onclick: async (ev) => {
    const ok = await confirmDialog("New signing key?",
      "A new key for this room's invitation tokens. Its current key, if it has one, keeps working for the overlap "
      + "(ENTRY_KEY_OVERLAP_SEC, 24 h by default), then stops: move your site's backend to the new key within it.",
      "Make a new key", ev.currentTarget);
    if (!ok) return;
    make.disabled = true;
    try {
      const res = await api("POST", roomPath(room, "entry-key"));
      const keyBox = el("input", { id: "ed-entry-key-value", type: "text", readonly: true, value: res.key, spellcheck: "false",
        "aria-label": "Signing key", class: "mono" });
      const until = res.previousKid
        ? `The previous key (${res.previousKid}) keeps working until ${new Date(res.previousValidUntil).toLocaleString()}.`
        : "This is the room's first key.";
      out.replaceChildren(
        el("p", { class: "note warn", text: "Shown once: copy it into your site's backend now. The server keeps it sealed and never shows it again." }),
        el("p", { class: "small" }, "Key id (kid): ", el("code", { id: "ed-entry-kid", text: res.kid }), " · HS256"),
        el("div", { class: "row" }, keyBox, el("button", { type: "button", class: "btn", onclick: () => copy(res.key, "Signing key") }, "Copy")),
        el("p", { class: "muted small", text: until }));
    } catch (err) { fail(err); } finally { make.disabled = false; }
  } }, "New signing key");
  return el("div", { class: "entry-part" },
    el("h4", { text: "Invitation tokens" }),
    el("p", { class: "muted small", text: "Your backend signs each invitation (HS256, kid in the header) with this key: room, sub (the user), exp (at most 24 h), jti (used once), and optionally lane and ip." }),
    make, out);
}

function countsLine(room) {
  const line = el("p", { class: "muted small", id: "ed-codes-counts", "aria-live": "polite", text: "Codes: …" });
  const refresh = async () => {
    try {
      const c = await api("GET", roomPath(room, "codes"));
      const refused = Object.values(c.refused || {}).reduce((a, b) => a + b, 0);
      line.textContent = `Codes: ${fmtInt(c.issued)} issued · ${fmtInt(c.redeemed)} of ${fmtInt(c.uses)} uses redeemed · ${fmtInt(refused)} refused`;
    } catch (err) { line.textContent = `Codes: ${err.message}`; }
  };
  refresh();
  return [line, refresh];
}

function codesPart(room) {
  const [counts, refresh] = countsLine(room);
  const num = (id, label, value, min, max) => el("div", { class: "field" }, el("label", { for: id, text: label }),
    el("input", { id, type: "number", min, max, value }));
  const count = num("ed-codes-count", "How many", "100", "1", "100000");
  const uses = num("ed-codes-uses", "Uses each", "1", "1", "1000000");
  const laneInput = el("input", { id: "ed-codes-lane", type: "text", spellcheck: "false", autocomplete: "off", placeholder: "none" });
  const lane = el("div", { class: "field" }, el("label", { for: "ed-codes-lane", text: "Lane" }), laneInput);
  const out = el("div", { id: "ed-codes-out", "aria-live": "polite" });
  const generate = el("button", { type: "button", class: "btn", id: "ed-codes-generate", onclick: async () => {
    const body = { count: Number(count.querySelector("input").value), uses: Number(uses.querySelector("input").value) };
    const laneText = laneInput.value.trim();
    if (laneText && !LANE_RE.test(laneText)) { toast("A lane is lower-case letters, digits and - (at most 32).", true); return; }
    if (laneText) body.lane = laneText;
    generate.disabled = true;
    try {
      const res = await api("POST", roomPath(room, "codes"), body);
      const shown = el("textarea", { id: "ed-codes-list", readonly: true, rows: "5", spellcheck: "false", class: "mono", "aria-label": "Generated codes" });
      shown.value = res.codes.join("\n");
      out.replaceChildren(
        el("p", { class: "note warn", text: `${fmtInt(res.count)} codes, shown once: the server keeps only their hashes. Download them now.` }),
        shown,
        el("div", { class: "row" },
          el("button", { type: "button", class: "btn primary", id: "ed-codes-csv", onclick: () => saveCsv(res.codes, res.lane, res.uses, room.id) }, "Download CSV"),
          el("button", { type: "button", class: "btn", onclick: () => copy(res.codes.join("\n"), "Codes") }, "Copy")));
      refresh();
    } catch (err) { fail(err); } finally { generate.disabled = false; }
  } }, "Generate codes");
  const file = el("input", { id: "ed-codes-file", type: "file", accept: ".csv,text/csv", "aria-describedby": "ed-codes-file-help" });
  const upload = el("button", { type: "button", class: "btn", id: "ed-codes-upload", onclick: async () => {
    const picked = file.files && file.files[0];
    if (!picked) { toast("Pick a CSV file with a code column first.", true); return; }
    upload.disabled = true;
    try {
      const res = await fetch(roomPath(room, "codes"), {
        method: "POST", credentials: "same-origin", cache: "no-store",
        headers: { "Content-Type": "text/csv", Accept: "application/json", "X-QM-CSRF": "1",
          ...(state.monitor ? { Authorization: `Bearer ${state.monitor}` } : {}) },
        body: await picked.text(),
      });
      const data = await res.json().catch(() => ({}));
      if (!res.ok) throw Object.assign(new Error(data.error || `HTTP ${res.status}`), { code: data.code });
      const bad = (data.rejected || []).map((r) => el("li", { text: `line ${r.line}: ${r.reason}` }));
      out.replaceChildren(
        el("p", { class: "note", text: `${fmtInt(data.stored)} codes stored · ${fmtInt(data.duplicates)} already held · `
          + `${fmtInt(data.rejectedCount)} ${data.rejectedCount === 1 ? "row" : "rows"} refused.` }),
        bad.length ? el("ul", { class: "warn-list" }, bad) : null);
      refresh();
    } catch (err) { fail(err); } finally { upload.disabled = false; }
  } }, "Upload CSV");
  return el("div", { class: "entry-part" },
    el("h4", { text: "Codes" }),
    el("p", { class: "muted small", text: "Visitors type a code on the waiting page (entry: code). A code admits as many joins as its uses; its lane is the visitor's." }),
    counts,
    el("div", { class: "grid2" }, count, uses, lane),
    el("div", { class: "row" }, generate),
    el("div", { class: "field" }, el("label", { for: "ed-codes-file", text: "Upload codes (CSV: code, optional lane and uses)" }), file,
      el("span", { class: "help", id: "ed-codes-file-help", text: "At most 100,000 rows; codes of 4 to 64 letters, digits and dashes." })),
    el("div", { class: "row" }, upload),
    out);
}

// The fieldset for an existing room (a new room has no key and no codes yet), for a key that may write.
function entryFieldset(room) {
  if (!room) return el("fieldset", { id: "ed-entry-set" }, el("legend", { text: "Entry" }),
    el("p", { class: "muted small", text: "Save the room first: its signing key and codes are made here afterwards." }));
  return el("fieldset", { id: "ed-entry-set" }, el("legend", { text: "Entry" }), keyPart(room), codesPart(room));
}

export { entryFieldset };

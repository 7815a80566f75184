/* The room editor's Brand section: display name, colours (with their contrast), messages, help link, logo. */
import { $, el } from "./ui.js";
import { state } from "./state.js";
import { LANGS, RTL } from "./languages.js";

const AA = 4.5;

function luminance(hex) {
  const c = [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16) / 255)
    .map((v) => (v <= 0.04045 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4));
  return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2];
}
function contrast(a, b) {
  const [hi, lo] = [luminance(a), luminance(b)].sort((x, y) => y - x);
  return (hi + 0.05) / (lo + 0.05);
}
function field(key, label, input, help) {
  const id = input.id;
  input.setAttribute("aria-describedby", `${id}-help`);
  return el("div", { class: "field", "data-field": `brand.${key}` }, el("label", { for: id, text: label }), input,
    el("span", { class: "help", id: `${id}-help`, text: help }));
}

// The fieldset, filled from the room's brand (a room read names the logo by type and hash only).
function brandFieldset(room) {
  const b = (room && room.brand) || {};
  const text = (id, value, extra) => el("input", { id, type: "text", spellcheck: "false", autocomplete: "off", value: value || "", ...extra });
  const coloured = Boolean(b.background && b.accent);
  const bg = el("input", { id: "ed-br-bg", type: "color", value: b.background || "#ffffff" });
  const accent = el("input", { id: "ed-br-accent", type: "color", value: b.accent || "#1d4ed8" });
  const useColours = el("input", { type: "checkbox", id: "ed-br-colours", checked: coloured ? true : null });
  const ratio = el("p", { class: "muted small", id: "ed-br-ratio", "aria-live": "polite" });
  const showRatio = () => {
    const r = contrast(accent.value, bg.value);
    ratio.textContent = useColours.checked
      ? `Accent on background: ${r.toFixed(2)}:1 ${r >= AA ? "(meets WCAG AA)" : `(below ${AA}:1: the server will refuse it)`}`
      : "The page keeps its own colours.";
  };
  for (const i of [bg, accent, useColours]) i.addEventListener("input", showRatio);
  showRatio();
  const message = ([code, name]) => field(`message.${code}`, `Message (${name})`,
    text(`ed-br-msg-${code}`, (b.message || {})[code], { maxlength: "280", lang: code, dir: RTL.includes(code) ? "rtl" : null }),
    "One line, at most 280 characters.");
  // the first five open; the others folded, opened when one of them has a message
  const more = LANGS.slice(5);
  const messages = LANGS.slice(0, 5).map(message);
  const folded = el("details", { class: "more-langs", open: more.some(([code]) => (b.message || {})[code]) ? true : null },
    el("summary", { text: `Message in ${more.length} more languages` }), el("div", { class: "grid2" }, ...more.map(message)));
  const logo = b.logo;
  const preview = logo && room
    ? el("img", { src: `w/${encodeURIComponent(room.id)}/logo-${logo.sha256.slice(0, 16)}.${logo.type === "image/png" ? "png" : "svg"}`, alt: "Current logo", class: "brand-preview" })
    : null;
  const file = el("input", { id: "ed-br-logo", type: "file", accept: "image/png,image/svg+xml" });
  const removeLogo = logo ? el("label", { class: "check" }, el("input", { type: "checkbox", id: "ed-br-nologo" }), " Remove the logo") : null;
  return el("fieldset", { id: "ed-brand" }, el("legend", { text: "Brand" }),
    el("p", { class: "muted small", text: "What the waiting page, the offline page and the origin-down page show of your brand." }),
    el("div", { class: "grid2" },
      field("displayName", "Name visitors see", text("ed-br-name", b.displayName, { maxlength: "80" }), "Blank: the room's display name."),
      field("helpUrl", "Help page (https://)", text("ed-br-help", b.helpUrl, { inputmode: "url" }), "Blank: no help link."),
      field("background", "Background", bg, "The page's text is black or white, whichever reads better."),
      field("accent", "Accent", accent, "Links and the button: at least 4.5:1 on the background.")),
    el("label", { class: "check" }, useColours, " Use these colours"), ratio,
    el("div", { class: "grid2" }, ...messages), folded,
    field("logo", "Logo (PNG or SVG, at most 64 KB)", file, "Uploaded when you save; an SVG is cleaned of anything but drawing."),
    preview, removeLogo);
}

// The brand keys that changed ({} when none), in the merge form the API takes.
function collectBrand(form, room) {
  const before = (room && room.brand) || {};
  const val = (id) => $(id, form).value.trim() || null;
  const coloured = $("#ed-br-colours", form).checked;
  const now = {
    displayName: val("#ed-br-name"),
    helpUrl: val("#ed-br-help"),
    background: coloured ? $("#ed-br-bg", form).value : null,
    accent: coloured ? $("#ed-br-accent", form).value : null,
    message: Object.fromEntries(LANGS.map(([code]) => [code, val(`#ed-br-msg-${code}`)]).filter(([, v]) => v)),
  };
  const out = {};
  for (const [k, v] of Object.entries(now)) {
    const was = k === "message" ? before.message || {} : before[k] ?? null;
    if (JSON.stringify(was) !== JSON.stringify(v)) out[k] = v;
  }
  const noLogo = $("#ed-br-nologo", form);
  if (noLogo && noLogo.checked) out.logo = null;
  return out;
}

// Upload the chosen logo file (after the room is saved): the body is the file itself.
async function uploadLogo(form, roomId) {
  const input = $("#ed-br-logo", form);
  const f = input && input.files && input.files[0];
  if (!f) return null;
  const headers = { Accept: "application/json", "Content-Type": f.type || "application/octet-stream" };
  if (state.monitor) headers.Authorization = `Bearer ${state.monitor}`;
  else headers["X-QM-CSRF"] = "1";
  const res = await fetch(`api/admin/rooms/${encodeURIComponent(roomId)}/logo`, {
    method: "POST", headers, credentials: "same-origin", cache: "no-store", body: f,
  });
  const data = await res.json().catch(() => ({}));
  if (!res.ok) {
    const err = new Error(`Logo: ${data.error || `HTTP ${res.status}`}`);
    err.code = data.code; err.body = { ...data, field: "brand.logo" };
    throw err;
  }
  return data.room;
}

export { brandFieldset, collectBrand, contrast, uploadLogo };

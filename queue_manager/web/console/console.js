/* Queue Manager operator console, the entry module. Same-origin only: every request goes to this server's
   /api/admin/*. Signing in and out, which screen shows, and the Console menu's commands; boot() starts it all. */
import { $, $$ } from "./ui.js";
import { cards, may, state } from "./state.js";
import { api, signIn, whenSignedOut } from "./api.js";
import { applyTheme, closeMenu } from "./menu.js";
import { loadHealth, openDiagnostics, openSecurity } from "./health.js";
import { tickCountdowns } from "./cards.js";
import { openEditor } from "./editor.js";
import { openAccess, openShare } from "./access.js";
import { openReports } from "./reports.js";
import { refreshChart } from "./chart.js";
import { startStream, stopStream } from "./live.js";

function show(which) {
  $("#boot").hidden = true;
  for (const id of ["signin", "dead", "app"]) $("#" + id).hidden = id !== which;
}
function signedOut() {
  stopStream();
  for (const card of cards.values()) card.node.remove(); // the next credential may have other grants
  cards.clear();
  state.rooms = new Map(); state.order = [];
  for (const d of $$("dialog[open]")) d.close();
  if (state.monitor) { show("dead"); return; }
  state.principal = null;
  show("signin");
  $("#signin-key").focus();
}

async function boot() {
  applyTheme(localStorage.getItem("theme") || "system");
  const m = /[#&]monitor=([^&]+)/.exec(location.hash);
  if (m) state.monitor = decodeURIComponent(m[1]);
  // a key left in storage by an older console is taken out, used once to sign in, and dropped
  for (const name of ["admin_key", "qm_admin_key"]) {
    const legacy = localStorage.getItem(name);
    if (legacy) { localStorage.removeItem(name); if (!state.monitor) await signIn(legacy, true); }
  }
  try {
    const who = await api("GET", "api/admin/whoami");
    enter(who.principal);
  } catch (err) {
    if (err.status !== 401) { show("signin"); $("#signin-error").textContent = err.message; }
  }
}

$("#signin-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const input = $("#signin-key");
  const err = $("#signin-error");
  err.textContent = "";
  if (!input.value) { err.textContent = "Paste your key first."; input.focus(); return; }
  try {
    const principal = await signIn(input.value, false);
    input.value = "";
    enter(principal);
  } catch (e) {
    input.value = "";
    err.textContent = e.code === "rate_limited" ? "This key has signed in too often this minute. Wait a minute."
      : e.status === 429 ? "Too many failed attempts from your address. Wait a minute."
      : e.status === 403 ? "A monitor link cannot sign in; open it as a link instead." : "That key is not valid here.";
    input.focus();
  }
});

function enter(principal) {
  state.principal = principal;
  show("app");
  const label = state.monitor ? "Monitor link · read-only"
    : `${principal.who} · ${principal.role}${may("write") ? "" : " · read-only"}`;
  $("#who").textContent = label;
  for (const node of $$("[data-grant]")) {
    const g = node.dataset.grant;
    node.hidden = g === "session" ? !!state.monitor : !may(g);
  }
  $("#readonly-note").hidden = may("write");
  startStream();
  loadHealth();
  if (!state.timers) {
    state.timers = [setInterval(loadHealth, 10000), setInterval(tickCountdowns, 1000), setInterval(refreshChart, 10000)];
  }
}

$("#signout").addEventListener("click", async () => {
  closeMenu(false);
  try { await api("DELETE", "api/admin/session"); } catch (e) { /* the cookie is cleared either way */ }
  signedOut();
});

document.addEventListener("click", (ev) => {
  const b = ev.target.closest("[data-open]");
  if (!b) return;
  closeMenu(false);
  const opener = b.closest("#menu") ? $("#menu-btn") : b;
  const fn = { editor: () => openEditor(null, opener), share: () => openShare(opener), access: () => openAccess(opener),
    diagnostics: () => openDiagnostics(opener), reports: () => openReports(opener), security: () => openSecurity(opener) }[b.dataset.open];
  if (fn) fn();
});

whenSignedOut(signedOut);
boot();

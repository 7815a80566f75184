/* Queue Manager operator console. Same-origin only: every request goes to this server's /api/admin/*. */
(() => {
  "use strict";
  const $ = (sel, root = document) => root.querySelector(sel);
  const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));
  const state = {
    monitor: null,        // the #monitor= token (it is already in the address bar); never a key
    principal: null,
    rooms: new Map(),     // id -> latest summary
    order: [],
    startedAt: null,
    es: null,
    retry: 0,
    chartRoom: null,
    plot: null,
    splitRates: null,
    hidden: new Set(),
    armed: null,          // visitor eject arming: "room:ticket"
    lastFrameAt: 0,
  };

  // ------------------------------------------------------------------ small helpers
  const el = (tag, attrs = {}, ...kids) => {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v === true ? "" : v);
    }
    for (const kid of kids.flat(Infinity)) if (kid !== null && kid !== undefined) node.append(kid.nodeType ? kid : String(kid));
    return node;
  };
  const may = (grant) => !!state.principal && state.principal.grants.includes(grant);
  const fmtInt = (n) => (n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"));
  const clock = (ms) => new Date(ms).toLocaleTimeString([], { hour: "numeric", minute: "2-digit" });
  const clockSec = (ms) => new Date(ms).toLocaleTimeString([], { hour: "numeric", minute: "2-digit", second: "2-digit" });
  function compact(sec) {
    if (sec === null || sec === undefined) return "–";
    sec = Math.max(0, Math.round(sec));
    if (sec < 60) return `${sec}s`;
    if (sec < 3600) return `${Math.round(sec / 60)}m`;
    const h = Math.floor(sec / 3600);
    if (h >= 10) return `${h}h`;
    const m = Math.round((sec - h * 3600) / 60);
    return m ? `${h}h${m}m` : `${h}h`;
  }
  function axisSec(x) {
    if (x < 120) return `${Math.round(x)}s`;
    if (x < 7200) return `${+(x / 60).toFixed(1)}m`;
    return `${+(x / 3600).toFixed(1)}h`;
  }
  function countdown(ms) {
    const s = Math.max(0, Math.floor(ms / 1000));
    const d = Math.floor(s / 86400), h = Math.floor((s % 86400) / 3600), m = Math.floor((s % 3600) / 60);
    if (d) return `${d}d ${h}h`;
    if (h) return `${h}h ${m}m`;
    return `${m}m ${s % 60}s`;
  }
  function toast(text, bad = false) {
    const t = el("div", { class: "toast" + (bad ? " bad" : ""), text });
    $("#toasts").append(t);
    setTimeout(() => t.remove(), bad ? 7000 : 3500);
  }

  // ------------------------------------------------------------------ API
  class ApiError extends Error {
    constructor(status, body) {
      super((body && body.error) || `HTTP ${status}`);
      this.status = status; this.code = body && body.code; this.body = body || {};
    }
  }
  async function api(method, path, body) {
    const headers = { Accept: "application/json" };
    if (state.monitor) headers.Authorization = `Bearer ${state.monitor}`;
    else if (method !== "GET") headers["X-QM-CSRF"] = "1";
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const res = await fetch(path, {
      method, headers, credentials: "same-origin", cache: "no-store",
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const type = res.headers.get("content-type") || "";
    const data = type.includes("json") ? await res.json().catch(() => ({})) : await res.text();
    if (res.status === 401 && !path.endsWith("/session")) { signedOut(); throw new ApiError(401, data); }
    if (!res.ok) throw new ApiError(res.status, data);
    return data;
  }
  async function download(path, filename) {
    const headers = state.monitor ? { Authorization: `Bearer ${state.monitor}` } : {};
    const res = await fetch(path, { headers, credentials: "same-origin", cache: "no-store" });
    if (!res.ok) { toast(`Export failed (${res.status})`, true); return; }
    const url = URL.createObjectURL(await res.blob());
    const a = el("a", { href: url, download: filename });
    document.body.append(a); a.click(); a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 5000);
  }
  const fail = (err) => toast(err.code ? `${err.message} (${err.code})` : String(err.message || err), true);

  // ------------------------------------------------------------------ screens
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

  async function signIn(key, quiet) {
    const res = await fetch("api/admin/session", {
      method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-QM-CSRF": "1" },
      body: JSON.stringify({ key }),
    });
    const data = await res.json().catch(() => ({}));
    if (!res.ok) { if (!quiet) throw new ApiError(res.status, data); return null; }
    return data.principal;
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
      err.textContent = e.status === 429 ? "Too many failed attempts from your address. Wait a minute."
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

  // ------------------------------------------------------------------ live stream
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

  // ------------------------------------------------------------------ est. wait, as the card reads it
  function estimate(r) {
    const st = r.effectiveState;
    if (st === "scheduled") return { text: "–", hint: "opens later", title: "Scheduled: the line forms but does not move until the doors open." };
    if (st === "bypass") return { text: "0s", hint: "bypass", title: "Bypass: no line, everyone is let through." };
    if (!r.waiting) return { text: "0s", hint: "no line", title: "Nobody is waiting." };
    if (st === "paused") return { text: "∞", cls: "inf", inf: true, hint: "paused", title: "Paused with people in the line: nobody is let through until you resume." };
    if (!r.ratePerMinute) return { text: "∞", cls: "inf", inf: true, hint: "rate is 0", title: "Active at 0/min: nobody is let through until you raise the rate." };
    const est = r.estWaitSec === null || r.estWaitSec === undefined ? Math.ceil(r.waiting * 60 / r.ratePerMinute) : r.estWaitSec;
    if (r.capacity !== null && r.occupancy >= r.capacity && !r.passedLastMinute) {
      return { text: "≥" + compact(est), cls: "lb", sec: est, hint: "at capacity", title: "A lower bound: the room is at its ceiling and nobody came out in the last minute, so raising the rate will not help." };
    }
    return { text: compact(est), sec: est, hint: `at ${r.ratePerMinute}/min`, title: `An estimate: ${fmtInt(r.waiting)} waiting at ${r.ratePerMinute}/min.` };
  }

  function renderTotals(frame) {
    $("#t-waiting").textContent = fmtInt(frame.waiting);
    $("#t-active").textContent = fmtInt(frame.activeSessions);
    $("#t-passes").textContent = fmtInt(frame.passedLastMinute);
    let worst = null, inf = 0, moving = 0;
    for (const r of state.rooms.values()) {
      const e = estimate(r);
      if (e.inf) inf++;
      else if (r.waiting && e.sec !== undefined) { moving++; worst = Math.max(worst || 0, e.sec); }
    }
    const w = $("#t-worst"), note = $("#t-worst-note");
    if (!moving && inf) { w.textContent = "∞"; note.textContent = `${inf} not admitting`; }
    else { w.textContent = worst === null ? "0s" : compact(worst); note.textContent = inf ? `excludes ${inf} at ∞` : ""; }
    $("#room-count").textContent = state.rooms.size ? `· ${state.rooms.size}` : "";
  }

  // ------------------------------------------------------------------ room cards (built once, updated in place)
  const cards = new Map();
  function renderRooms() {
    const list = $("#room-list");
    for (const [id, card] of cards) if (!state.rooms.has(id)) { card.node.remove(); cards.delete(id); }
    let prev = null;
    for (const id of state.order) {
      const r = state.rooms.get(id);
      if (!r) continue;
      let card = cards.get(id);
      if (!card) { card = buildCard(r); cards.set(id, card); }
      const want = prev ? prev.nextSibling : list.firstChild;
      if (want !== card.node) list.insertBefore(card.node, want);
      updateCard(card, r);
      prev = card.node;
    }
    $("#no-rooms").hidden = state.rooms.size > 0;
    syncChartRooms();
  }

  function stat(label, key) {
    const dd = el("dd", { "data-k": key });
    const hint = el("dd", { class: "hint", "data-h": key });
    return el("div", {}, el("dt", { text: label }), dd, hint);
  }

  function buildCard(r) {
    const id = r.id;
    const hid = `room-h-${cssId(id)}`;
    const node = el("article", { class: "card", "aria-labelledby": hid, "data-room": id });
    const skip = el("a", { class: "skip-room", href: "#", onclick: (ev) => { ev.preventDefault(); skipPast(id); } });
    const title = el("div", { class: "card-title" },
      el("h3", { id: hid, tabindex: "-1" }),
      el("div", { class: "rid", text: id }),
      el("div", { class: "countdown", "data-k": "countdown", hidden: true }));
    const badges = el("div", { class: "card-badges" },
      el("span", { class: "auto-slot", "data-k": "auto" }),
      el("span", { class: "badge", "data-k": "state" }),
      el("span", { class: "badge", "data-k": "site", hidden: true }));
    const stats = el("dl", { class: "stats" },
      stat("Waiting", "waiting"), stat("Capacity", "capacity"), stat("Est. wait", "est"), stat("Passes/min", "passes"));
    const siteLine = el("p", { class: "site-line", "data-k": "site-line", role: "status", hidden: true });
    node.append(skip, el("div", { class: "card-head" }, title, badges), stats, siteLine);
    const card = { node, id, dial: null, num: null, pending: null };
    if (may("write")) {
      const dialId = `rate-${cssId(id)}`;
      const range = el("input", { type: "range", id: dialId, min: "0", max: "1000", step: "1", "aria-valuetext": "" });
      const num = el("input", { type: "number", min: "0", step: "1", "aria-label": `Rate for ${id}, exact figure per minute` });
      range.addEventListener("keydown", (ev) => dialKey(ev, card));
      range.addEventListener("input", () => { num.value = range.value; range.setAttribute("aria-valuetext", `${range.value} per minute`); sendRate(card, +range.value); });
      num.addEventListener("change", () => { const v = Math.max(0, Math.round(+num.value || 0)); setDial(card, v); sendRate(card, v, 0); });
      card.dial = range; card.num = num;
      node.append(el("div", { class: "dial" }, el("label", { for: dialId, text: "Rate/min" }), range, num));
      const pause = el("button", { type: "button", class: "btn small", "data-k": "pause", onclick: () => togglePause(card) });
      node.append(el("div", { class: "actions" },
        pause,
        el("button", { type: "button", class: "btn small", onclick: (ev) => openEditor(id, ev.currentTarget) }, "Edit"),
        may("team") ? el("button", { type: "button", class: "btn small", onclick: (ev) => openVisitor(id, ev.currentTarget) }, "Visitors") : null,
        el("button", { type: "button", class: "btn small", onclick: () => selectChart(id, true) }, "Chart"),
        el("span", { class: "spacer" }),
        el("button", { type: "button", class: "btn small danger", onclick: (ev) => purge(id, ev.currentTarget) }, "Purge"),
        may("owner") ? el("button", { type: "button", class: "btn small danger", onclick: (ev) => removeRoom(id, ev.currentTarget) }, "Delete") : null));
    } else {
      node.append(el("div", { class: "actions" },
        may("team") ? el("button", { type: "button", class: "btn small", onclick: (ev) => openVisitor(id, ev.currentTarget) }, "Visitors") : null,
        el("button", { type: "button", class: "btn small", onclick: () => selectChart(id, true) }, "Chart")));
    }
    return card;
  }
  const cssId = (id) => id.replace(/[^A-Za-z0-9_-]/g, "_");

  function put(card, key, text, title, cls) {
    const dd = $(`[data-k="${key}"]`, card.node);
    if (dd.textContent !== text) dd.textContent = text;
    dd.className = cls || "";
    if (title) dd.title = title; else dd.removeAttribute("title");
  }
  function hint(card, key, text) { const h = $(`[data-h="${key}"]`, card.node); if (h.textContent !== text) h.textContent = text; }

  function updateCard(card, r) {
    const name = r.name || r.id;
    const h3 = $("h3", card.node);
    if (h3.textContent !== name) h3.textContent = name;
    $(".skip-room", card.node).textContent = `Skip past ${name} to the next room`;
    const auto = $('[data-k="auto"]', card.node);
    const autoText = r.autoActivate && r.autoActivate.enabled ? `AUTO ≥${fmtInt(r.autoActivate.joinsPerMin)}/MIN` : "";
    if (auto.textContent !== autoText) { auto.textContent = autoText; auto.className = autoText ? "auto-slot badge badge-info" : "auto-slot"; }
    if (autoText) auto.title = `Threshold activation armed: a queue goes up by itself after ${r.autoActivate.sustainSec}s above ${r.autoActivate.joinsPerMin} joins/min.`;
    const st = r.effectiveState;
    const badge = $('[data-k="state"]', card.node);
    badge.textContent = st;
    badge.className = "badge " + ({ active: "badge-ok", paused: "badge-warn", bypass: "badge-info", scheduled: "badge-info" }[st] || "badge-mute");
    if (st === "scheduled") {
      put(card, "waiting", fmtInt(r.preQueue)); hint(card, "waiting", "in pre-queue");
    } else {
      put(card, "waiting", fmtInt(r.waiting)); hint(card, "waiting", r.joinsLastMinute ? `+${fmtInt(r.joinsLastMinute)}/min` : "in line");
    }
    const cap = r.capacity === null || r.capacity === undefined ? "∞" : fmtInt(r.capacity);
    put(card, "capacity", `${fmtInt(r.occupancy)}/${cap}`, "Live sessions plus passes inside their claim window, of the ceiling (∞: no ceiling).");
    hint(card, "capacity", r.holdingPasses ? `+${fmtInt(r.holdingPasses)} holding passes` : `${fmtInt(r.activeSessions)} in session`);
    const e = estimate(r);
    put(card, "est", e.text, e.title, e.cls);
    hint(card, "est", e.hint || "");
    put(card, "passes", fmtInt(r.passedLastMinute), "Passes issued in the last minute (measured outflow).");
    hint(card, "passes", `of ${fmtInt(r.ratePerMinute)}/min`);
    card.node.dataset.opens = r.opensAt ? String(Date.parse(r.opensAt)) : "";
    tickCountdown(card, r);
    siteHealth(card);
    if (card.dial) {
      const busy = document.activeElement === card.dial || document.activeElement === card.num || card.pending;
      if (!busy) setDial(card, r.ratePerMinute);
      card.dial.setAttribute("aria-label", `Rate for ${name}, per minute`);
      const pause = $('[data-k="pause"]', card.node);
      const paused = r.state === "paused";
      pause.textContent = paused ? "Resume" : "Pause";
      pause.disabled = r.state === "bypass";
    }
    card.node.classList.toggle("selected", state.chartRoom === r.id);
  }

  function tickCountdown(card, r) {
    const line = $('[data-k="countdown"]', card.node);
    const opens = r.opensAt ? Date.parse(r.opensAt) : null;
    if (!opens || r.effectiveState !== "scheduled") { line.hidden = true; return; }
    const left = opens - Date.now();
    line.hidden = false;
    line.textContent = `Doors open in ${countdown(left)} · ${clock(opens)}`;
    line.classList.toggle("soon", left <= 5 * 60 * 1000);
  }
  function tickCountdowns() {
    for (const card of cards.values()) { const r = state.rooms.get(card.id); if (r) tickCountdown(card, r); }
  }

  function skipPast(id) {
    const idx = state.order.indexOf(id);
    const next = state.order.slice(idx + 1).map((x) => cards.get(x)).find(Boolean);
    if (next) $("h3", next.node).focus(); else $("#chart-h").focus();
  }

  // ------------------------------------------------------------------ controls
  function setDial(card, v) {
    const max = Math.max(1000, Math.ceil((v + 1) / 1000) * 1000);
    if (+card.dial.max !== max) card.dial.max = String(max);
    if (+card.dial.value !== v) card.dial.value = String(v);
    if (document.activeElement !== card.num) card.num.value = String(v);
    card.dial.setAttribute("aria-valuetext", `${v} per minute`);
  }
  function dialKey(ev, card) {
    const steps = { ArrowRight: 10, ArrowUp: 10, ArrowLeft: -10, ArrowDown: -10, PageUp: 50, PageDown: -50 };
    let step = steps[ev.key];
    if (step === undefined) return;
    if (ev.shiftKey && Math.abs(step) === 10) step = Math.sign(step);
    ev.preventDefault();
    const v = Math.max(0, +card.dial.value + step);
    setDial(card, v);
    sendRate(card, v);
  }
  function sendRate(card, v, delay = 350) {
    clearTimeout(card.pending);
    card.pending = setTimeout(async () => {
      try {
        const res = await api("POST", `api/admin/rooms/${encodeURIComponent(card.id)}/rate`, { ratePerMinute: v });
        state.rooms.set(card.id, { ...state.rooms.get(card.id), ...res.room });
      } catch (err) { fail(err); }
      card.pending = null;
      const r = state.rooms.get(card.id);
      if (r) updateCard(card, r);
    }, delay);
  }
  async function togglePause(card) {
    const r = state.rooms.get(card.id);
    const action = r.state === "paused" ? "resume" : "pause";
    try {
      const res = await api("POST", `api/admin/rooms/${encodeURIComponent(card.id)}/${action}`);
      state.rooms.set(card.id, { ...r, ...res.room, effectiveState: res.room.effectiveState || res.room.state });
      updateCard(card, state.rooms.get(card.id));
      renderTotals(totalsNow());
      toast(`${card.id} ${action === "pause" ? "paused" : "resumed"}.`);
    } catch (err) { fail(err); }
  }
  function totalsNow() {
    const t = { waiting: 0, activeSessions: 0, passedLastMinute: 0 };
    for (const r of state.rooms.values()) { t.waiting += r.waiting; t.activeSessions += r.activeSessions; t.passedLastMinute += r.passedLastMinute; }
    return t;
  }
  async function purge(id, opener) {
    const r = state.rooms.get(id);
    const ok = await confirmDialog(`Purge ${id}?`, `Everybody waiting in ${id} (${fmtInt(r ? r.waiting : 0)} people) leaves the line unserved. Passes and live sessions are kept; the room stays.`, "Purge the line", opener);
    if (!ok) return;
    try { const res = await api("POST", `api/admin/rooms/${encodeURIComponent(id)}/purge`); toast(`Purged ${fmtInt(res.purged)} from ${id}.`); } catch (err) { fail(err); }
  }
  async function removeRoom(id, opener) {
    const ok = await confirmDialog(`Delete ${id}?`, `This cannot be undone: everybody in the line is discarded, and the room, its configuration and its schedule are gone.`, "Delete the room", opener);
    if (!ok) return;
    try { await api("DELETE", `api/admin/rooms/${encodeURIComponent(id)}`); toast(`Deleted ${id}.`); } catch (err) { fail(err); }
  }

  // ------------------------------------------------------------------ dialogs: open, close, focus return
  const openers = new Map();
  function openDialog(name, opener, roomId) {
    const dlg = $(`#dlg-${name}`);
    openers.set(dlg, { opener: opener || document.activeElement, roomId });
    if (!dlg.open) dlg.showModal();
    const first = $("[autofocus]", dlg) || $(".dlg-body input, .dlg-body select, .dlg-body textarea, .dlg-body button", dlg) || $("button", dlg);
    if (first) first.focus();
    return dlg;
  }
  for (const dlg of $$("dialog")) {
    dlg.addEventListener("click", (ev) => { if (ev.target === dlg) dlg.close("cancel"); });
    dlg.addEventListener("close", () => {
      const o = openers.get(dlg);
      openers.delete(dlg);
      if (dlg.id === "dlg-visitor") state.armed = null;
      if (!o) return;
      let target = o.opener && o.opener.isConnected && !o.opener.closest("[hidden]") ? o.opener : null;
      const under = $$("dialog[open]").filter((d) => d !== dlg).pop();
      if (!target && under) target = $(".dlg-head h2", under); // the panel a confirm was opened from
      if (!target && o.roomId) { const card = cards.get(o.roomId); target = card ? $("h3", card.node) : $("#rooms-h"); }
      (target || $("#rooms-h")).focus();
    });
  }
  function head(title, id) {
    return el("div", { class: "dlg-head" }, el("h2", { id, text: title, tabindex: "-1" }),
      el("button", { type: "button", class: "btn ghost small", "aria-label": "Close", onclick: (ev) => ev.currentTarget.closest("dialog").close() }, "Close"));
  }
  function confirmDialog(title, text, action, opener) {
    return new Promise((resolve) => {
      const dlg = $("#dlg-confirm");
      let answer = false;
      dlg.replaceChildren(head(title, "confirm-h"), el("div", { class: "dlg-body" }, el("p", { text })),
        el("div", { class: "dlg-foot" },
          el("button", { type: "button", class: "btn", autofocus: true, onclick: () => dlg.close() }, "Cancel"),
          el("button", { type: "button", class: "btn danger armed", onclick: () => { answer = true; dlg.close(); } }, action)));
      dlg.addEventListener("close", () => resolve(answer), { once: true });
      openDialog("confirm", opener);
    });
  }
  document.addEventListener("click", (ev) => {
    const b = ev.target.closest("[data-open]");
    if (!b) return;
    closeMenu(false);
    const opener = b.closest("#menu") ? $("#menu-btn") : b;
    const fn = { editor: () => openEditor(null, opener), share: () => openShare(opener), access: () => openAccess(opener),
      diagnostics: () => openDiagnostics(opener), reports: () => openReports(opener), security: () => openSecurity(opener) }[b.dataset.open];
    if (fn) fn();
  });

  // ------------------------------------------------------------------ the Console menu
  const menu = $("#menu"), menuBtn = $("#menu-btn");
  const items = () => $$('[role="menuitem"]', menu).filter((n) => !n.closest("[hidden]") && !n.hidden && n.offsetParent !== null);
  function openMenu(focusLast) {
    menu.hidden = false; menuBtn.setAttribute("aria-expanded", "true");
    const list = items(); (focusLast ? list[list.length - 1] : list[0]).focus();
  }
  function closeMenu(refocus) {
    if (menu.hidden) return;
    menu.hidden = true; menuBtn.setAttribute("aria-expanded", "false");
    if (refocus) menuBtn.focus();
  }
  menuBtn.addEventListener("click", () => (menu.hidden ? openMenu(false) : closeMenu(true)));
  menuBtn.addEventListener("keydown", (ev) => {
    if (ev.key === "ArrowDown" || ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); openMenu(false); }
    else if (ev.key === "ArrowUp") { ev.preventDefault(); openMenu(true); }
  });
  menu.addEventListener("keydown", (ev) => {
    const list = items(); const i = list.indexOf(document.activeElement);
    if (ev.key === "ArrowDown") { ev.preventDefault(); list[(i + 1) % list.length].focus(); }
    else if (ev.key === "ArrowUp") { ev.preventDefault(); list[(i - 1 + list.length) % list.length].focus(); }
    else if (ev.key === "Home") { ev.preventDefault(); list[0].focus(); }
    else if (ev.key === "End") { ev.preventDefault(); list[list.length - 1].focus(); }
    else if (ev.key === "Escape") { ev.preventDefault(); closeMenu(true); }
    else if (ev.key === "Tab") { closeMenu(false); }
  });
  document.addEventListener("mousedown", (ev) => { if (!ev.target.closest(".menu-wrap")) closeMenu(false); });
  function applyTheme(t) {
    if (t === "system") document.documentElement.removeAttribute("data-theme"); else document.documentElement.dataset.theme = t;
    $("#theme-btn").textContent = `Theme: ${t}`;
    if (state.plot) { drawChart(true); }
  }
  $("#theme-btn").addEventListener("click", () => {
    const next = { system: "light", light: "dark", dark: "system" }[localStorage.getItem("theme") || "system"];
    localStorage.setItem("theme", next); applyTheme(next);
  });

  // ------------------------------------------------------------------ health: insecure-config badge, diagnostics
  let health = null;
  // per inline room: its origin-error total as last read, and when that total last grew
  const originSeen = new Map();
  const SITE_FRESH_MS = 120000;
  function siteState(id) {
    const inline = health && health.inline;
    if (!inline || !(inline.rooms || []).includes(id)) return null;
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
      : s.probeDown ? "The health probe (HEAD /) to the site behind the queue is failing." : "The site behind the queue is answering.";
    line.hidden = !s.failing;
    if (s.failing) {
      line.textContent = s.errors
        ? `Site not answering — ${fmtInt(s.errors)} visitor${s.errors === 1 ? "" : "s"} got an error page`
        : "Site not answering — its health probe fails";
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
    const badge = $("#insecure");
    badge.hidden = !reasons.length || !may("team");
    badge.title = reasons.join("\n");
    badge.setAttribute("aria-label", `Insecure config: ${reasons.length} warning${reasons.length === 1 ? "" : "s"}. Open Diagnostics.`);
  }
  $("#insecure").addEventListener("click", (ev) => openDiagnostics(ev.currentTarget));
  $("#incident").addEventListener("click", (ev) => { if (may("team")) openDiagnostics(ev.currentTarget); });

  const warnText = (w) => (typeof w === "string" ? w : w.message || JSON.stringify(w));
  function kv(pairs) {
    return el("dl", { class: "kv" }, pairs.filter(Boolean).map(([k, v]) => [el("dt", { text: k }), el("dd", {}, v)]));
  }
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
      kv([
        ["Status", `${h.status}${h.ready ? " · ready" : " · not ready"}${h.leader ? " · leader" : ""}`],
        ["Version", h.version], ["Instance", h.instance || "–"],
        ["Uptime", `${compact(h.uptimeSec)} · since ${new Date(h.startedAt).toLocaleString()}`],
        ["Clock", skew === null ? "–" : `server ${clockSec(h.now)} · this browser ${skew >= 0 ? "+" : ""}${skew}s`],
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
      (h.hardening || []).length ? el("div", {}, el("h3", { class: "small", text: "Hardening" }), el("ul", {}, h.hardening.map((w) => el("li", { text: warnText(w) })))) : null);
    dlg.replaceChildren(head("Diagnostics", "diagnostics-h"), body);
  }

  async function openSecurity(opener) {
    const dlg = $("#dlg-security");
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
    dlg.replaceChildren(head("Security", "security-h"), el("div", { class: "dlg-body" },
      el("p", { class: "muted small", text: "Bot protection and blocks, as this server counts them." }), kv(flat.slice(0, 80))));
  }

  // ------------------------------------------------------------------ room editor
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
    ["opensAt", "Doors open (your local time)", "datetime", "Blank: no scheduled drop."],
    ["onBackendDown", "When storage is down", ["closed", "open"], "STORE=valkey only."],
    ["protection", "Bot protection", ["", "monitor", "enforce"], "Blank: the server default."],
    ["returnOrigins", "Return origins", "lines", "One per line; https://*.shop.example covers subdomains."],
    ["tagOrigins", "Tag origins", "lines?", "One per line. Blank: same as return origins."],
    ["proxyOrigin", "Inline: internal address", "text?", "Blank: snippet room. Changing it needs the owner role."],
  ];
  const DEFAULTS = { ratePerMinute: 60, passedTtlSec: 600, sessionTtlSec: 1800, presenceSec: 30, queueMaxPerIp: 16, preQueueMaxPerIp: 16 };
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
        input.value = key === "protection" ? (v && v.mode) || "" : v || kind[0];
      } else if (kind === "lines" || kind === "lines?") {
        input = el("textarea", { id, name: key, rows: "3", spellcheck: "false" });
        input.value = (v || []).join("\n");
      } else {
        input = el("input", { id, name: key, type: kind.startsWith("int") ? "number" : kind === "datetime" ? "datetime-local" : "text", spellcheck: "false", autocomplete: "off" });
        if (kind.startsWith("int")) input.min = "0";
        input.value = kind === "datetime" ? toLocalInput(v) : v === null || v === undefined ? (creating && key in DEFAULTS ? String(DEFAULTS[key]) : "") : String(v);
      }
      const helpText = key === "proxyOrigin" && !may("owner") ? "Inline deployment needs the owner role; ask an owner to change it." : help;
      if (key === "proxyOrigin" && !may("owner")) input.disabled = true;
      if (key === "targetUrl" && inline && !may("owner")) input.disabled = true;
      if (!may("team") && ["returnOrigins", "tagOrigins", "proxyOrigin"].includes(key)) continue;
      fields.append(el("div", { class: "field", "data-field": key }, el("label", { for: id, text: label }), input, el("span", { class: "help", id: `${id}-help`, text: helpText })));
      input.setAttribute("aria-describedby", `${id}-help`);
    }
    // threshold activation: the room stays open until joins/min stays above the threshold
    const aa = (room && room.autoActivate) || { enabled: false, joinsPerMin: 120, sustainSec: 60, releaseAfterSec: 300 };
    const num = (id, label, value) => el("div", { class: "field" }, el("label", { for: id, text: label }),
      el("input", { id, type: "number", min: "0", value: String(value) }));
    const autoSet = el("fieldset", { id: "ed-auto" }, el("legend", { text: "Threshold activation" }),
      el("label", { class: "check" }, el("input", { type: "checkbox", id: "ed-aa-enabled", checked: aa.enabled ? true : null }),
        " Put a queue up by itself when joins stay above the threshold"),
      el("div", { class: "grid2" }, num("ed-aa-joins", "Joins per minute", aa.joinsPerMin),
        num("ed-aa-sustain", "Sustained for (s)", aa.sustainSec), num("ed-aa-release", "Release after (s)", aa.releaseAfterSec)));
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
    form.append(el("div", { class: "dlg-body" }, fields, autoSet, rulesSet),
      el("div", { class: "dlg-foot" }, err, el("button", { type: "button", class: "btn", onclick: () => dlg.close() }, "Cancel"),
        el("button", { type: "submit", class: "btn primary" }, creating ? "Create room" : "Save changes")));
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      err.textContent = "";
      $$(".field.bad", form).forEach((f) => f.classList.remove("bad"));
      let body;
      try { body = collect(form, room, rulesBox); } catch (e) { err.textContent = e.message; return; }
      try {
        const res = await api("POST", "api/admin/rooms", body);
        state.rooms.set(res.room.id, { ...(state.rooms.get(res.room.id) || {}), ...res.room });
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
      if (Array.isArray(kind)) v = key === "protection" ? (raw ? { mode: raw } : null) : raw;
      else if (kind === "int") { if (raw === "") throw new Error(`${label} needs a number.`); v = Number(raw); }
      else if (kind === "int?") v = raw === "" ? null : Number(raw);
      else if (kind === "datetime") v = raw ? new Date(raw).toISOString() : null;
      else if (kind === "lines") v = raw ? raw.split(/\s*\n\s*/).filter(Boolean) : [];
      else if (kind === "lines?") v = raw ? raw.split(/\s*\n\s*/).filter(Boolean) : null;
      else if (kind === "text?") v = raw || null;
      else v = raw === "" && key === "name" ? null : raw;
      if (room) { const cur = room[key]; if (JSON.stringify(cur === undefined ? null : cur) === JSON.stringify(v)) continue; }
      else if (v === null || (Array.isArray(v) && !v.length) || v === "") continue;
      body[key] = v;
    }
    const aaNow = { enabled: $("#ed-aa-enabled", form).checked, joinsPerMin: Number($("#ed-aa-joins", form).value),
      sustainSec: Number($("#ed-aa-sustain", form).value), releaseAfterSec: Number($("#ed-aa-release", form).value) };
    const aaBefore = (room && room.autoActivate) || null;
    const aaDefault = JSON.stringify(aaNow) === JSON.stringify({ enabled: false, joinsPerMin: 120, sustainSec: 60, releaseAfterSec: 300 });
    if (aaBefore ? JSON.stringify(aaBefore) !== JSON.stringify(aaNow) : !aaDefault) body.autoActivate = aaNow;
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

  // ------------------------------------------------------------------ visitor drill-down with the two-step eject
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
  function secs(v) { return v === null || v === undefined ? "–" : compact(v); }
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

  // ------------------------------------------------------------------ share monitor and access
  function linkRows(links, withRevoke, onChange) {
    if (!links.length) return el("p", { class: "muted", text: "No live links." });
    return el("div", { class: "tbl-wrap" }, el("table", { class: "tbl" },
      el("thead", {}, el("tr", {}, ["Link", "Shared by", "Created", "Expires", ""].map((h) => el("th", { scope: "col", text: h })))),
      el("tbody", {}, links.map((l) => el("tr", {},
        el("td", { class: "mono", text: l.id }), el("td", { text: l.createdBy || "–" }),
        el("td", { text: l.createdAt ? new Date(l.createdAt).toLocaleString() : "–" }),
        el("td", { text: l.expiresAt ? new Date(l.expiresAt).toLocaleString() : "–" }),
        el("td", {}, l.live === false || l.revoked ? el("span", { class: "muted", text: l.revoked ? "revoked" : "expired" }) : [
          el("button", { type: "button", class: "btn small", onclick: async () => {
            try { const r = await api("POST", `api/admin/monitor-links/${encodeURIComponent(l.id)}/reveal`); onChange(r.url, l.id); } catch (err) { fail(err); }
          } }, "Copy"),
          withRevoke ? el("button", { type: "button", class: "btn small danger", onclick: async (ev) => {
            if (!(await confirmDialog("Revoke this link?", `Link ${l.id} stops working at once, including any open view.`, "Revoke", ev.currentTarget))) return;
            try { await api("DELETE", `api/admin/monitor-links/${encodeURIComponent(l.id)}`); onChange(null); } catch (err) { fail(err); }
          } }, "Revoke") : null,
        ]))))));
  }
  // Link id -> URL this page has already been shown (minted or revealed): reopening Share monitor puts it back in
  // the field without another monitor_token.reveal. Memory only, never storage; dropped once the link is not live.
  const shownLinks = new Map();
  function linkBox(url) {
    const input = el("input", { id: "share-url", readonly: true, value: url, "aria-label": "Monitor link", onfocus: (ev) => ev.currentTarget.select() });
    return el("div", { class: "linkbox" }, input, el("button", { type: "button", class: "btn", onclick: async () => {
      input.select();
      try { await navigator.clipboard.writeText(url); toast("Link copied."); } catch (e) { toast("Select the field and copy it."); }
    } }, "Copy"));
  }
  async function openShare(opener, shown, shownId) {
    const dlg = $("#dlg-share");
    if (!dlg.open) {
      dlg.replaceChildren(head("Share monitor", "share-h"), el("div", { class: "dlg-body" }, el("p", { class: "muted", text: "Loading…" })));
      openDialog("share", opener);
    }
    let links = [];
    try { links = (await api("GET", "api/admin/monitor-links")).links; } catch (err) { fail(err); return; }
    const live = links.filter((l) => l.live !== false && !l.revoked);
    for (const id of [...shownLinks.keys()]) if (!live.some((l) => l.id === id)) shownLinks.delete(id);
    if (shown && shownId) shownLinks.set(shownId, shown);
    if (!shown && live.length) {
      // never mint on open: put the newest live link in the field (revealed once per page, audited by the server)
      const newest = live.reduce((a, b) => ((b.createdAt || 0) > (a.createdAt || 0) ? b : a));
      shownId = newest.id;
      shown = shownLinks.get(newest.id);
      if (!shown) {
        try {
          shown = (await api("POST", `api/admin/monitor-links/${encodeURIComponent(newest.id)}/reveal`)).url;
          shownLinks.set(newest.id, shown);
        } catch (err) { shown = undefined; }
      }
    }
    const redo = (url, id) => openShare(opener, url || undefined, id);
    const which = live.find((l) => l.id === shownId);
    const body = el("div", { class: "dlg-body" },
      el("p", { text: "A read-only view of this dashboard for stakeholders. The link carries a viewer token in its #fragment, never a key; it can watch but never change anything, and expires on its own." }),
      shown ? linkBox(shown) : el("p", { class: "note", text: "No live link yet." }),
      shown && which ? el("p", { class: "muted small", id: "share-which", text: `Link ${which.id}${which.createdBy ? `, shared by ${which.createdBy}` : ""}${which.expiresAt ? `, expires ${new Date(which.expiresAt).toLocaleString()}` : ""}. Send this one rather than minting another: every live link is one more person who can watch.` }) : null,
      el("div", {}, el("button", { type: "button", class: "btn primary", id: "share-mint", onclick: async () => {
        try { const r = await api("POST", "api/admin/monitor-links"); redo(r.url, r.link && r.link.id); } catch (err) { fail(err); }
      } }, "Mint a new link"), live.length ? el("span", { class: "muted small", text: "  Minting a new link never revokes the others." }) : null),
      el("h3", { class: "small", text: "Live links" }), linkRows(live, true, redo));
    dlg.replaceChildren(head("Share monitor", "share-h"), body);
    const focus = shown ? $("#share-url") : $("#share-mint"); if (focus) focus.focus();
  }

  async function openAccess(opener) {
    const dlg = $("#dlg-access");
    if (!dlg.open) {
      dlg.replaceChildren(head("Access", "access-h"), el("div", { class: "dlg-body" }, el("p", { class: "muted", text: "Loading…" })));
      openDialog("access", opener);
    }
    const parts = [];
    if (may("owner")) {
      let ops = [];
      try { ops = (await api("GET", "api/admin/operators")).operators; } catch (err) { fail(err); }
      const name = el("input", { id: "op-name", spellcheck: "false", autocomplete: "off" });
      const role = el("select", { id: "op-role" }, ["operator", "viewer", "owner"].map((r) => el("option", { value: r, text: r })));
      const keyOut = el("div", { "aria-live": "polite" });
      parts.push(el("h3", { class: "small", text: "Operators" }),
        ops.length ? el("div", { class: "tbl-wrap" }, el("table", { class: "tbl" },
          el("thead", {}, el("tr", {}, ["Name", "Role", "Status", "Live links", ""].map((h) => el("th", { scope: "col", text: h })))),
          el("tbody", {}, ops.map((o) => el("tr", {}, el("td", { text: o.name }), el("td", { text: o.role }),
            el("td", { text: o.revoked || o.revokedAt ? "revoked" : "active" }), el("td", { class: "num", text: fmtInt(o.liveLinks || 0) }),
            el("td", {}, o.revoked || o.revokedAt ? null : el("button", { type: "button", class: "btn small danger", onclick: async (ev) => {
              const n = o.liveLinks || 0;
              if (!(await confirmDialog(`Revoke ${o.name}?`, `Their key stops working on the next request and their console sessions end. ${n} monitor link${n === 1 ? "" : "s"} they shared will close too.`, "Revoke", ev.currentTarget))) return;
              try { const r = await api("DELETE", `api/admin/operators/${encodeURIComponent(o.id)}`); toast(`Revoked ${o.name}; closed ${r.linksRevoked} links.`); openAccess(opener); } catch (err) { fail(err); }
            } }, "Revoke"))))))) : el("p", { class: "muted", text: "No operators yet: everyone shares ADMIN_KEY. Mint one key per person." }),
        el("form", { class: "row", onsubmit: async (ev) => {
          ev.preventDefault();
          try {
            const r = await api("POST", "api/admin/operators", { name: name.value, role: role.value });
            keyOut.replaceChildren(el("p", { class: "note warn", text: `Key for ${r.operator.name} (shown once, copy it now):` }), linkBoxPlain(r.key));
            name.value = "";
          } catch (err) { fail(err); }
        } }, el("div", { class: "field" }, el("label", { for: "op-name", text: "New operator's name" }), name),
          el("div", { class: "field" }, el("label", { for: "op-role", text: "Role" }), role),
          el("button", { type: "submit", class: "btn primary" }, "Mint key")), keyOut);
    }
    let links = [];
    try { links = (await api("GET", "api/admin/monitor-links")).links; } catch (err) { fail(err); }
    parts.push(el("h3", { class: "small", text: "Monitor links" }), linkRows(links, true, () => openAccess(opener)),
      el("div", {}, el("button", { type: "button", class: "btn danger", onclick: async (ev) => {
        if (!(await confirmDialog("Revoke every monitor link?", "Every shared read-only link stops working at once.", "Revoke all", ev.currentTarget))) return;
        try { const r = await api("POST", "api/admin/monitor-links/revoke-all"); toast(`Revoked ${r.revoked} links.`); openAccess(opener); } catch (err) { fail(err); }
      } }, "Revoke all links")));
    if (may("team")) {
      let rows = [];
      try { rows = (await api("GET", "api/admin/audit?limit=50")).audit; } catch (err) { /* not ours to see */ }
      parts.push(el("h3", { class: "small", text: "Audit trail (latest 50)" }), el("div", { class: "tbl-wrap" }, el("table", { class: "tbl" },
        el("thead", {}, el("tr", {}, ["Time", "Actor", "Action", "Target", "Address"].map((h) => el("th", { scope: "col", text: h })))),
        el("tbody", {}, rows.map((a) => el("tr", {}, el("td", { text: new Date(a.ts).toLocaleString() }), el("td", { text: a.actor }),
          el("td", { class: "mono", text: a.action + (a.ok === false ? " ✗" : "") }), el("td", { text: a.target || "" }), el("td", { class: "mono", text: a.ip || "" })))))),
        el("div", {}, el("button", { type: "button", class: "btn", onclick: () => download("api/admin/audit?format=csv", "audit.csv") }, "Download audit CSV")));
    }
    dlg.replaceChildren(head("Access", "access-h"), el("div", { class: "dlg-body" }, parts));
  }
  function linkBoxPlain(text) {
    const input = el("input", { readonly: true, value: text, "aria-label": "New key", onfocus: (ev) => ev.currentTarget.select() });
    return el("div", { class: "linkbox" }, input);
  }

  // ------------------------------------------------------------------ reports
  async function openReports(opener) {
    const dlg = $("#dlg-reports");
    dlg.replaceChildren(head("Reports", "reports-h"), el("div", { class: "dlg-body" }, el("p", { class: "muted", text: "Loading…" })));
    openDialog("reports", opener);
    let data;
    try { data = await api("GET", "api/admin/reports?bucket=hour"); } catch (err) { fail(err); return; }
    const since = data.recordingSince ? new Date(data.recordingSince).toLocaleString() : "–";
    const note = data.store === "memory"
      ? `STORE=memory keeps no history past a restart. This server has been recording since ${since}; hours before that are marked ⚠ partial.`
      : `Rolled up by this instance since ${since} (the last 24 hours).`;
    const plus = (r, v) => (r.partial ? `${fmtInt(v)}+` : fmtInt(v));
    const cols = ["Room", "Hour", "Joins", "Passes", "Net unserved", "Peak depth", "Peak active", "Wait p50", "Wait p90", "Wait max", "Measured waits"];
    const body = el("div", { class: "dlg-body" }, el("p", { class: "note", text: note }),
      data.rows.length ? el("div", { class: "tbl-wrap" }, el("table", { class: "tbl" },
        el("thead", {}, el("tr", {}, cols.map((h, i) => el("th", { scope: "col", class: i > 1 ? "num" : null, text: h })))),
        el("tbody", {}, data.rows.map((r) => el("tr", {},
          el("td", { text: r.roomId }), el("td", { text: (r.partial ? "⚠ " : "") + new Date(r.start).toLocaleString([], { month: "short", day: "numeric", hour: "numeric" }) }),
          el("td", { class: "num", text: plus(r, r.joins) }), el("td", { class: "num", text: plus(r, r.passes) }),
          el("td", { class: "num", text: r.netUnserved === null ? "–" : fmtInt(r.netUnserved) }),
          el("td", { class: "num", text: fmtInt(r.peakDepth) }), el("td", { class: "num", text: fmtInt(r.peakActive) }),
          el("td", { class: "num", text: secs(r.waitP50Sec) }), el("td", { class: "num", text: secs(r.waitP90Sec) }),
          el("td", { class: "num", text: secs(r.waitMaxSec) }), el("td", { class: "num", text: plus(r, r.measuredWaits) })))))) : el("p", { class: "muted", text: "No rows yet." }),
      el("p", { class: "muted small", text: "Wait p50/p90 are estimates from a bounded sample; measured waits count people who finished waiting, not people who entered the site; net unserved is joins minus passes." }),
      el("div", {}, el("button", { type: "button", class: "btn", onclick: () => download("api/admin/reports?bucket=hour&format=csv", "report-hour.csv") }, "Download CSV")));
    dlg.replaceChildren(head("Reports", "reports-h"), body);
  }

  // ------------------------------------------------------------------ chart
  const SERIES = [
    { key: "depth", label: "queue depth", color: "--blue", scale: "n" },
    { key: "joinsPerMin", label: "joins/min", color: "--amber", scale: "rate" },
    { key: "passesPerMin", label: "passes/min", color: "--green", scale: "rate" },
    { key: "estWaitSec", label: "est. wait", color: "--violet", scale: "s", dash: [6, 4] },
    { key: "waitP50Sec", label: "actual wait p50", color: "--teal", scale: "s" },
    { key: "waitP90Sec", label: "actual wait p90", color: "--rose", scale: "s" },
    { key: "marks", label: "events", color: "--mark", scale: null },
  ];
  const css = (name) => getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  const WAIT_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 432000];
  let chartData = null;
  function syncChartRooms() {
    const sel = $("#chart-room");
    const ids = state.order;
    if (!ids.length) {  // also on a first load with no room at all
      if (sel.options.length) sel.replaceChildren();
      if (state.chartRoom || !$("#chart-csv").hidden) clearChart();
      return;
    }
    if (sel.options.length !== ids.length || ids.some((id, i) => sel.options[i].value !== id)) {
      const keep = state.chartRoom;
      sel.replaceChildren(...ids.map((id) => el("option", { value: id, text: (state.rooms.get(id) || {}).name || id })));
      if (!keep || !ids.includes(keep)) { if (ids.length) selectChart(ids[0], false); else clearChart(); }
      else sel.value = keep;
    }
  }
  function clearChart() {
    state.chartRoom = null; chartData = null;
    if (state.plot) { state.plot.destroy(); state.plot = null; }
    $("#chart-readout").textContent = "";
    const empty = $("#chart-empty");
    empty.hidden = false; empty.textContent = "No rooms to chart yet.";
    chartControls(false);
  }
  // with no room there is nothing to pick, export or toggle: the controls go, the empty line stays
  function chartControls(on) {
    for (const sel of ["#chart-room", "#chart-range", "#chart-csv", "#legend"]) $(sel).hidden = !on;
  }
  function selectChart(id, focus) {
    chartControls(true);
    state.chartRoom = id;
    $("#chart-room").value = id;
    for (const c of cards.values()) c.node.classList.toggle("selected", c.id === id);
    refreshChart();
    if (focus) $("#chart-h").focus();
  }
  $("#chart-room").addEventListener("change", (ev) => selectChart(ev.target.value, false));
  $("#chart-range").addEventListener("change", () => refreshChart());
  $("#chart-csv").addEventListener("click", () => {
    if (!state.chartRoom) return;
    const res = $("#chart-range").value.split(":")[0];
    download(`api/admin/series/${encodeURIComponent(state.chartRoom)}?res=${res}&format=csv`, `${state.chartRoom}-${res}.csv`);
  });
  async function refreshChart() {
    if (!state.chartRoom || !state.principal) return;
    const [res, span] = $("#chart-range").value.split(":");
    try {
      const data = await api("GET", `api/admin/series/${encodeURIComponent(state.chartRoom)}?res=${res}`);
      const cut = data.now / 1000 - +span;
      data.rows = data.rows.filter((r) => r.t >= cut);
      data.span = +span;
      chartData = data;
      drawChart(false);
    } catch (err) { if (err.status !== 404) fail(err); }
  }
  function ratesSplit(rows) {
    const j = Math.max(0, ...rows.map((r) => r.joinsPerMin || 0)), p = Math.max(0, ...rows.map((r) => r.passesPerMin || 0));
    const lo = Math.min(j, p), hi = Math.max(j, p);
    return hi > 0 && (lo === 0 ? hi >= 4 : hi / lo > 4);
  }
  function renderLegend(split) {
    const box = $("#legend");
    box.replaceChildren(...SERIES.map((s) => {
      const scale = s.scale === "rate" ? (split ? " (own scale)" : " (rate scale)") : "";
      return el("button", { type: "button", "aria-pressed": state.hidden.has(s.key) ? "false" : "true", onclick: () => {
        if (state.hidden.has(s.key)) state.hidden.delete(s.key); else state.hidden.add(s.key);
        drawChart(true);
      } }, el("span", { class: "sw", style: null }), s.label, scale ? el("span", { class: "scale", text: scale }) : null);
    }));
    $$(".sw", box).forEach((sw, i) => { sw.style.background = css(SERIES[i].color); });
  }
  function drawChart(rebuild) {
    if (!chartData || typeof uPlot === "undefined") return;
    const rows = chartData.rows;
    const box = $("#chart-box");
    const empty = $("#chart-empty");
    // a line needs two samples: until then say what is coming instead of drawing a lone dot
    empty.hidden = rows.length >= 2;
    empty.textContent = rows.length ? `Recording since ${clock(rows[0].t * 1000)}: the lines start with the next sample (every ${chartData.stepSec || 10} s).`
      : "Waiting for the first samples…";
    const split = ratesSplit(rows);
    if (split !== state.splitRates) { rebuild = true; state.splitRates = split; }
    renderLegend(split);
    const data = [rows.map((r) => r.t), ...SERIES.filter((s) => s.scale).map((s) => rows.map((r) => r[s.key]))];
    if (state.plot && !rebuild && rows.length >= 2) { state.plot.setData(data); return; }
    if (state.plot) { state.plot.destroy(); state.plot = null; }
    if (rows.length < 2) return;
    const grid = { stroke: css("--line"), width: 1 };
    const axisBase = { stroke: css("--muted"), grid, ticks: { stroke: css("--line") }, font: "11px " + css("--mono").split(",")[0] };
    const series = [{}];
    for (const s of SERIES.filter((x) => x.scale)) {
      const scale = s.scale === "rate" && split ? (s.key === "joinsPerMin" ? "joins" : "passes") : s.scale;
      series.push({ label: s.label, scale, stroke: css(s.color), width: s.key === "passesPerMin" ? 2 : 1.5, dash: s.dash, show: !state.hidden.has(s.key), spanGaps: false,
        points: { show: rows.length < 4, size: 5 } });
    }
    const axes = [
      { ...axisBase, grid: { show: false }, space: 80, values: (u, splits) => splits.map((v) => clock(v * 1000)) },
      { ...axisBase, scale: "n", label: "people", size: 56 },
    ];
    if (split) {
      axes.push({ ...axisBase, scale: "joins", side: 3, stroke: css("--amber"), grid: { show: false }, size: 60, values: (u, v) => v.map((x) => x + "/m") });
      axes.push({ ...axisBase, scale: "passes", side: 3, stroke: css("--green"), grid: { show: false }, size: 60, values: (u, v) => v.map((x) => x + "/m") });
    } else {
      axes.push({ ...axisBase, scale: "rate", side: 3, stroke: css("--amber"), grid: { show: false }, size: 60, values: (u, v) => v.map((x) => x + "/m") });
    }
    // whole seconds, minutes and hours on the wait axis: never "4.2m"
    axes.push({ ...axisBase, scale: "s", side: 1, grid: { show: false }, size: 52, values: (u, v) => v.map(axisSec), incrs: WAIT_STEPS });
    const width = Math.max(260, Math.floor($("#chart").clientWidth - 34));
    state.plot = new uPlot({
      width, height: 300, series, axes,
      scales: { x: { time: true, range: () => xRange() }, n: { range: (u, lo, hi) => [0, Math.max(5, hi * 1.1)] }, rate: { range: (u, lo, hi) => [0, Math.max(5, hi * 1.1)] },
        joins: { range: (u, lo, hi) => [0, Math.max(5, hi * 1.1)] }, passes: { range: (u, lo, hi) => [0, Math.max(5, hi * 1.1)] },
        s: { range: (u, lo, hi) => [0, Math.max(60, (hi || 0) * 1.1)] } },
      legend: { show: false },
      cursor: { points: { size: 6 } },
      hooks: { draw: [drawMarks], setCursor: [readout] },
    }, data, box);
    box.querySelector("canvas").setAttribute("aria-label", "Chart of queue depth, joins and passes per minute, and waits");
    box.querySelector("canvas").setAttribute("role", "img");
  }
  function xRange() {
    const now = chartData.now / 1000, rows = chartData.rows;
    const first = rows.length ? rows[0].t : now;
    return [Math.max(now - chartData.span, Math.min(first, now - 600)), now];
  }
  function markGroups(u) {
    if (!chartData || state.hidden.has("marks")) return [];
    // marks closer than a hover can tell apart (6 px) are one group: drawn once, listed together on hover
    const groups = [];
    const placed = (chartData.marks || []).map((m) => ({ m, x: Math.round(u.valToPos(m.t, "x")) }))
      .filter((p) => p.x >= 0 && p.x <= u.bbox.width / devicePixelRatio).sort((a, b) => a.x - b.x);
    for (const p of placed) {
      const last = groups[groups.length - 1];
      if (last && p.x - last.x <= 6) last.marks.push(p.m); else groups.push({ x: p.x, marks: [p.m] });
    }
    return groups;
  }
  function drawMarks(u) {
    const ctx = u.ctx; const dpr = devicePixelRatio;
    ctx.save();
    ctx.strokeStyle = css("--mark"); ctx.setLineDash([3, 3]); ctx.lineWidth = 1;
    for (const g of markGroups(u)) {
      const x = u.bbox.left + g.x * dpr;
      ctx.beginPath(); ctx.moveTo(x, u.bbox.top); ctx.lineTo(x, u.bbox.top + u.bbox.height); ctx.stroke();
      ctx.fillStyle = css("--mark"); ctx.fillRect(x - 3 * dpr, u.bbox.top, 6 * dpr, 4 * dpr);
    }
    ctx.restore();
  }
  function readout(u) {
    const i = u.cursor.idx; const out = $("#chart-readout"); const tip = $("#mark-tip");
    if (i === null || i === undefined || !chartData) { out.textContent = ""; tip.hidden = true; return; }
    const r = chartData.rows[i];
    if (r) out.textContent = `${clockSec(r.t * 1000)} · depth ${fmtInt(r.depth)} · joins ${r.joinsPerMin}/min · passes ${r.passesPerMin}/min · est. ${r.estWaitSec === null ? "∞" : compact(r.estWaitSec)} · p50 ${secs(r.waitP50Sec)} · p90 ${secs(r.waitP90Sec)}`;
    const left = u.cursor.left;
    const hit = markGroups(u).find((g) => Math.abs(g.x - left) <= 4);
    if (!hit) { tip.hidden = true; return; }
    const rect = u.over.getBoundingClientRect();
    tip.replaceChildren(...hit.marks.map((m) => el("div", { text: `${clockSec(m.t * 1000)} · ${m.note}` })));
    tip.style.left = `${Math.min(window.innerWidth - 330, rect.left + left + 10)}px`;
    tip.style.top = `${rect.top + 8}px`;
    tip.hidden = false;
  }
  new ResizeObserver(() => {
    const w = Math.max(260, Math.floor($("#chart").clientWidth - 34));
    if (state.plot && Math.abs(state.plot.width - w) > 2) state.plot.setSize({ width: w, height: 300 });
  }).observe($("#chart"));
  window.addEventListener("keydown", (ev) => { if (ev.key === "Escape") $("#mark-tip").hidden = true; });

  boot();
})();

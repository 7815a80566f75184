/* Alerting, as the server's alert frames see it: where pages go, what is firing and holding, the last deliveries,
   and Send test alert. Shown in Diagnostics, and in Security for a monitor link (whose bar has no Diagnostics). */
import { clockSec, compact, el, fmtInt, kv } from "./ui.js";
import { may, state } from "./state.js";
import { api } from "./api.js";

const REFRESH_MS = 5000;
const SEVERITY = { critical: "badge-bad", warning: "badge-warn", info: "badge-info" };
const NOBODY = "No ALERT_WEBHOOK_URL is set, so nobody is being paged. The conditions below are still evaluated on "
  + "the server's clock and listed here: until a webhook is set, this panel is the alerting.";

const roomLabel = (id) => { const r = id && state.rooms.get(id); return r && r.name ? `${r.name} (${id})` : id; };
const every = (ms) => (ms < 1000 ? `${fmtInt(ms)} ms` : compact(ms / 1000));

// why Send test alert cannot be pressed, or null when it can
function blocked(data) {
  if (!may("write")) {
    return state.monitor ? "A monitor link is read-only: it cannot send a test alert."
      : "This credential is read-only: sending a test alert needs an operator or owner key.";
  }
  if (data && !data.configured) {
    return "Inert until ALERT_WEBHOOK_URL is set: there is nowhere to send it. The conditions are evaluated and "
      + "listed here, and nobody is paged until then.";
  }
  return null;
}

function config(data) {
  const delivers = !data.configured ? "nobody: no webhook is set"
    : data.leader ? `this instance (${data.instance}), the leader`
      : `the leader, not this instance (${data.instance}): the leader's delivery log has the pages`;
  const hold = data.holdSec ? `holds ${compact(data.holdSec)} before firing` : "fires at once";
  return kv([
    ["Webhook", !data.configured ? "no webhook set" : data.webhook || "set (the address is not shown to this credential)"],
    ["Timing", `evaluated every ${every(data.everyMs)} · ${hold} · re-pages every ${compact(data.repeatSec)} while true`],
    ["Delivers", delivers],
    data.valkeyAlertAfterMs ? ["Valkey", `each instance sends its own valkey_unreachable after ${every(data.valkeyAlertAfterMs)}`] : null,
    data.configured ? ["Pages", `${fmtInt(data.sent)} sent · ${fmtInt(data.failed)} failed · ${fmtInt(data.outbox)} waiting to send · ${fmtInt(data.dropped)} dropped`] : null,
    ["Last evaluated", data.lastFrameAt ? clockSec(data.lastFrameAt) : "not yet"],
  ]);
}

function conditionRow(a, data, holding) {
  const when = [`since ${clockSec(a.since)}`, `for ${compact(a.forSec)}`];
  if (holding) when.push(`fires at ${clockSec(a.since + data.holdSec * 1000)} if still true`);
  else if (data.configured && a.lastPagedAt) when.push(`paged ${clockSec(a.lastPagedAt)}`);
  return el("li", { class: "alert-row" },
    el("div", { class: "alert-what" },
      el("span", { class: `badge ${SEVERITY[a.severity] || "badge-mute"}`, text: a.severity || "–" }),
      el("code", { text: a.event }), a.roomId ? el("span", { class: "muted", text: `· ${roomLabel(a.roomId)}` }) : null),
    el("div", { text: a.message || "" }),
    el("div", { class: "muted small", text: when.join(" · ") }));
}
function conditions(title, id, rows, data, holding, none) {
  return el("div", { class: "alert-block" }, el("h4", { id, text: title }),
    rows.length ? el("ul", { class: "alert-list", "aria-labelledby": id }, rows.map((a) => conditionRow(a, data, holding)))
      : el("p", { class: "muted", text: none }));
}

function deliveries(data) {
  const rows = data.deliveries || [];
  const none = data.configured ? "No deliveries yet from this instance." : "None: no webhook is set.";
  const result = (d) => {
    const took = d.durationMs !== null && d.durationMs !== undefined ? ` · ${fmtInt(d.durationMs)} ms` : "";
    if (d.ok) return `HTTP ${d.httpStatus}${took}`;
    return [d.httpStatus ? `HTTP ${d.httpStatus}` : null, d.error || "failed"].filter(Boolean).join(" · ") + took;
  };
  return el("div", { class: "alert-block" }, el("h4", { id: "alerting-deliveries-h", text: "Last deliveries" }),
    rows.length ? el("div", { class: "tbl-wrap" }, el("table", { class: "tbl", "aria-labelledby": "alerting-deliveries-h" },
      el("thead", {}, el("tr", {}, ["Time", "Event", "Status", "Result"].map((h) => el("th", { scope: "col", text: h })))),
      el("tbody", {}, rows.map((d) => el("tr", {},
        el("td", { class: "mono nowrap", text: clockSec(d.at) }),
        el("td", {}, d.test ? el("span", { class: "badge badge-info", text: "test alert" })
          : [el("code", { text: d.event }), d.roomId ? ` · ${d.roomId}` : ""]),
        el("td", { text: d.status + (d.attempt > 1 ? ` (attempt ${d.attempt})` : "") }),
        el("td", { class: d.ok ? "ok nowrap" : "bad", text: (d.ok ? "✓ " : "✕ ") + result(d) }))))))
      : el("p", { class: "muted", text: none }));
}

// a target probe's verdict: a refused probe (configuration) and a target not probed (a reserved example name)
// are neither failing nor ok
function targetBadge(t) {
  if (t.notProbed) return ["badge-info", "not probed"];
  if (t.refused) return ["badge-warn", "refused"];
  return t.ok === false ? ["badge-bad", "failing"] : ["badge-ok", "ok"];
}

function targets(data) {
  const rows = Object.entries(data.targets || {});
  if (!rows.length) return null;
  return el("div", { class: "alert-block" }, el("h4", { id: "alerting-targets-h", text: "Target probes" }),
    el("ul", { class: "alert-list", "aria-labelledby": "alerting-targets-h" }, rows.map(([id, t]) => el("li", { class: "alert-row" },
      el("div", { class: "alert-what" },
        el("span", { class: `badge ${targetBadge(t)[0]}`, text: targetBadge(t)[1] }),
        el("span", { text: roomLabel(id) })),
      el("div", { class: "muted small", text: [t.status ? `HTTP ${t.status}` : null, t.latencyMs !== null && t.latencyMs !== undefined ? `${fmtInt(t.latencyMs)} ms` : null,
        t.summary || t.error || null, t.failingSince ? `failing since ${clockSec(t.failingSince)}` : null,
        t.checkedAt ? `checked ${clockSec(t.checkedAt)}` : null].filter(Boolean).join(" · ") })))));
}

function render(box, data) {
  box.replaceChildren(...[
    data.configured ? null : el("p", { class: "note warn", text: NOBODY }),
    config(data),
    conditions("Firing now", "alerting-firing-h", data.firing || [], data, false, "Nothing is firing."),
    conditions(`Holding (true now, not yet held ${compact(data.holdSec)})`, "alerting-holding-h", data.holding || [], data, true, "Nothing is holding."),
    deliveries(data),
    targets(data)].filter(Boolean));
}

function alertingSection() {
  const box = el("div", { class: "alerting-body" }, el("p", { class: "muted", text: "Reading the alert frames…" }));
  const why = el("p", { id: "alert-test-why", class: "muted small", text: blocked(null) || "" });
  const result = el("p", { id: "alert-test-result", class: "test-result", role: "status" });
  const button = el("button", { type: "button", class: "btn", id: "alert-test", "aria-describedby": "alert-test-why", disabled: true }, "Send test alert");
  const section = el("section", { class: "alerting", "aria-labelledby": "alerting-h" },
    el("h3", { id: "alerting-h", text: "Alerting" }), box,
    el("div", { class: "alert-test" }, el("div", { class: "row" }, button, why), result));
  let data = null;
  const settle = () => {
    const reason = blocked(data);
    button.disabled = !!reason || !data;
    why.textContent = reason || "Sends one event \"test\" to the webhook now, from this instance, and lists its delivery below.";
  };
  const load = async () => {
    try { data = await api("GET", "api/admin/alerts"); } catch (err) {
      if (data) return; // keep the last good read on screen
      box.replaceChildren(el("p", { class: "note warn", text: `The alert frames could not be read: ${err.message}${err.code ? ` (${err.code})` : ""}.` }));
      why.textContent = blocked(null) || "Unavailable until the alert frames can be read.";
      return;
    }
    render(box, data);
    if (!button.dataset.busy) settle();
  };
  button.addEventListener("click", async () => {
    button.dataset.busy = "1"; button.disabled = true;
    result.className = "test-result"; result.textContent = "Sending a test alert…";
    try {
      const res = await api("POST", "api/admin/alerts");
      const d = res.delivery || {};
      const took = d.durationMs !== undefined ? ` in ${fmtInt(d.durationMs)} ms` : "";
      result.className = "test-result " + (res.sent ? "ok" : "bad");
      result.textContent = res.sent ? `Test alert delivered at ${clockSec(d.at)}: HTTP ${d.httpStatus}${took}.`
        : `Test alert not delivered: ${[d.httpStatus ? `HTTP ${d.httpStatus}` : null, d.error || "failed"].filter(Boolean).join(" · ")}${took}.`;
    } catch (err) {
      result.className = "test-result bad";
      result.textContent = `Test alert not sent: ${err.message}${err.code ? ` (${err.code})` : ""}`;
    }
    delete button.dataset.busy;
    await load();
    settle();
  });
  load();
  // refreshed while its dialog stays open, so Firing now and the deliveries keep up
  const timer = setInterval(() => {
    if (!section.isConnected || !section.closest("dialog[open]")) { clearInterval(timer); return; }
    load();
  }, REFRESH_MS);
  return section;
}

export { alertingSection };

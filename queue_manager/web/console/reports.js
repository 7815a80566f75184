/* Reports: the hourly roll-up per room, on screen and as CSV. */
import { $, el, fmtInt, secs } from "./ui.js";
import { api, download, fail } from "./api.js";
import { head, openDialog } from "./dialogs.js";

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

export { openReports };

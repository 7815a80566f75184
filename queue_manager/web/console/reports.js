/* Reports: the hourly (or daily) history per room, on screen and as CSV. */
import { $, el, fmtInt, secs } from "./ui.js";
import { api, download, fail } from "./api.js";
import { head, openDialog } from "./dialogs.js";

let bucket = "hour";
let from = "";

function query(fmt) {
  const q = new URLSearchParams({ bucket });
  if (from) q.set("from", from);
  if (fmt) q.set("format", fmt);
  return `api/admin/reports?${q}`;
}

/* A partial row's counters are lower bounds: they read "12+". */
const plus = (r, v) => (r.partial ? `${fmtInt(v)}+` : fmtInt(v));

function when(r) {
  const d = new Date(r.start);
  return bucket === "hour"
    ? d.toLocaleString([], { month: "short", day: "numeric", hour: "numeric" })
    : d.toLocaleDateString([], { month: "short", day: "numeric", timeZone: "UTC" });
}

function table(rows) {
  const cols = ["Room", bucket === "hour" ? "Hour" : "Day (UTC)", "Joins", "Passes", "Net unserved", "Peak depth", "Peak active",
    "Wait p50", "Wait p90", "Wait max", "Measured waits", "Blocked", "Warned", "Line full", "Sessions ended",
    "Invited", "Codes used", "Missing"];
  return el("div", { class: "tbl-wrap", tabindex: "0", role: "region", "aria-label": "Report rows" }, el("table", { class: "tbl" },
    el("thead", {}, el("tr", {}, cols.map((h, i) => el("th", { scope: "col", class: i > 1 ? "num" : null, text: h })))),
    el("tbody", {}, rows.map((r) => el("tr", { class: r.partial ? "partial" : null },
      el("td", { text: r.roomId }),
      el("td", { text: (r.partial ? "⚠ " : "") + when(r), title: r.partial ? `partial: ${fmtInt(r.missingSec)} s not covered` : null }),
      el("td", { class: "num", text: plus(r, r.joins) }), el("td", { class: "num", text: plus(r, r.passes) }),
      el("td", { class: "num", text: r.netUnserved === null ? "—" : fmtInt(r.netUnserved) }),
      el("td", { class: "num", text: fmtInt(r.peakDepth) }), el("td", { class: "num", text: fmtInt(r.peakActive) }),
      el("td", { class: "num", text: secs(r.waitP50Sec) }), el("td", { class: "num", text: secs(r.waitP90Sec) }),
      el("td", { class: "num", text: secs(r.waitMaxSec) }), el("td", { class: "num", text: plus(r, r.measuredWaits) }),
      el("td", { class: "num", text: plus(r, r.blocked) }), el("td", { class: "num", text: plus(r, r.warned) }),
      el("td", { class: "num", text: plus(r, r.refusedFull ?? 0), title: "Joins refused because the line was full" }),
      el("td", { class: "num", text: plus(r, r.sessionsRevoked ?? 0), title: "Sessions the site ended" }),
      el("td", { class: "num", text: plus(r, r.tokensAccepted ?? 0), title: "Invitation tokens accepted" }),
      el("td", { class: "num", text: plus(r, r.codesRedeemed ?? 0), title: "Entry code uses spent at a join" }),
      el("td", { class: "num", text: r.missingSec ? secs(r.missingSec) : "" }))))));
}

function controls(reload) {
  const pick = el("select", { id: "rep-bucket", "aria-label": "Bucket", onchange: (e) => { bucket = e.target.value; reload(); } },
    el("option", { value: "hour", text: "By hour" }), el("option", { value: "day", text: "By day (UTC)" }));
  pick.value = bucket;
  const since = el("input", { id: "rep-from", type: "date", value: from, "aria-label": "From (UTC date)",
    onchange: (e) => { from = e.target.value; reload(); } });
  return el("div", { class: "row" }, el("label", { for: "rep-bucket", text: "Rows " }), pick,
    el("label", { for: "rep-from", text: " from " }), since,
    el("button", { type: "button", class: "btn", onclick: () => download(query("csv"), `report-${bucket}.csv`) }, "Download CSV"));
}

async function render(dlg) {
  let data;
  try { data = await api("GET", query()); } catch (err) { fail(err); return; }
  const note = data.store === "memory"
    ? "STORE=memory keeps no history past a restart: the rows are kept in this process. Hours before it started are marked ⚠ partial."
    : `Kept in Postgres for ${data.retainDays} days, written by the leader for the whole fleet.`;
  const partial = data.rows.some((r) => r.partial);
  const body = el("div", { class: "dlg-body" }, el("p", { class: "note", text: note }), controls(() => render(dlg)),
    data.rows.length ? table(data.rows) : el("p", { class: "muted", text: "No rows in this range." }),
    partial ? el("p", { class: "muted small", text: "⚠ partial: the server was not running for part of the period, so counters marked + are lower bounds and net unserved is not known (—)." }) : null,
    el("p", { class: "muted small", text: "Wait p50/p90 are estimates from up to 256 waits per hour; measured waits count people who finished waiting, not people who entered the site; net unserved is joins minus passes, not observed abandonment." }));
  dlg.replaceChildren(head("Reports", "reports-h"), body);
}

async function openReports(opener) {
  const dlg = $("#dlg-reports");
  dlg.replaceChildren(head("Reports", "reports-h"), el("div", { class: "dlg-body" }, el("p", { class: "muted", text: "Loading…" })));
  openDialog("reports", opener);
  await render(dlg);
}

export { openReports };

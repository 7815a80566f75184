/* Sharing and access: monitor links, operators and their keys, the audit trail. */
import { $, el, fmtInt, toast } from "./ui.js";
import { may } from "./state.js";
import { api, download, fail } from "./api.js";
import { confirmDialog, head, openDialog } from "./dialogs.js";

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

export { openAccess, openShare };

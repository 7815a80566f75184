/* Dialogs: open one, close it, and give focus back to whatever opened it; the confirm dialog. */
import { $, $$, el } from "./ui.js";
import { cards, state } from "./state.js";

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

export { confirmDialog, head, openDialog };

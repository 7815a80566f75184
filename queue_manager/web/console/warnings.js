/* What the server warns about, shown where the operator is looking: the warnings[] of a room save (in the
   editor, until it is closed) and health's configWarnings (in Diagnostics), each with the guide's sentence. */
import { el } from "./ui.js";

// the Operations Guide's words for each warning code a save or health can carry
const GUIDE = {
  console_host_withheld: "With neither ADMIN_HOST nor PUBLIC_URL set, saving an inline room from a console on a "
    + "hostname makes that console, and every monitor link on that host, answer 404 from the next request on. "
    + "The save still succeeds. The fix is to set ADMIN_HOST (or PUBLIC_URL) to that hostname and restart.",
  console_moved: "Switching the last inline room on a host back to snippet mode takes the queue's own /__qm/* "
    + "surface off that host with it — including the console you are probably reading this from. A stale "
    + "/__qm/… address answers 404 not_inline_host naming where the console went. Set PUBLIC_URL so it can name it.",
};
const TITLE = {
  console_host_withheld: "This console's host is withheld",
  console_moved: "The console moved off this host",
};

function guideSentence(code) { return GUIDE[code] || ""; }

// one warning as a list item: its title (or code), the server's own message, the guide's sentence, the code
function warningItem(w) {
  const code = (w && w.code) || "";
  const message = typeof w === "string" ? w : (w && w.message) || "";
  const guide = guideSentence(code);
  return el("li", { class: "server-warn", "data-code": code || null },
    el("strong", { text: `⚠ ${TITLE[code] || "Warning"}` }),
    message ? el("p", { text: message }) : null,
    guide && guide !== message ? el("p", { class: "guide", text: guide }) : null,
    code ? el("p", { class: "code" }, el("code", { text: code })) : null);
}
function warningList(list) {
  return el("ul", { class: "server-warns" }, (list || []).map(warningItem));
}

export { guideSentence, warningItem, warningList };

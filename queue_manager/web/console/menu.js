/* The Console menu (keyboard-operable) and the theme switch. */
import { $, $$ } from "./ui.js";
import { state } from "./state.js";
import { drawChart } from "./chart.js";

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

export { applyTheme, closeMenu };

/* The room editor's Access rules section: the ordered list as JSON (a header's secret shown as "set": true and
   kept when sent back), each rule's matches, and the dry run for a described request (address, path, headers,
   User-Agent, country): which access rule it meets and what it gets. */
import { $, el, fmtInt } from "./ui.js";
import { api } from "./api.js";

const READ_ONLY = ["matchCount", "lastMatchAt"];
const EXAMPLE = '[\n  {"id": "probe", "action": "bypass", "match": {"header": {"name": "X-Probe", "value": "a-long-secret"}}},\n' +
  '  {"id": "office", "action": "bypass", "match": {"cidrs": ["203.0.113.0/24"]}}\n]';

function editable(rules) {
  return (rules || []).map((rule) => Object.fromEntries(Object.entries(rule).filter(([k]) => !READ_ONLY.includes(k))));
}

function statLine(rule) {
  const seen = rule.matchCount ? `${fmtInt(rule.matchCount)} matched · last ${new Date(rule.lastMatchAt).toLocaleString()}` : "never matched";
  return el("li", {}, el("strong", { text: rule.id }), ` ${rule.action} · ${seen}`);
}

function describe(res) {
  const a = res && res.access;
  if (!a) return "";
  const crawler = a.crawler ? ` User-Agent claims ${a.crawler.claimed}: ${a.crawler.verified ? "verified by DNS" : "not verified"}.` : "";
  const gets = { bypass: "let through without queueing", queue: "the normal path (queued)", block: "refused (403 access_blocked)" };
  if (!a.rule) return `No access rule matches: the room's normal path.${crawler}`;
  return `Access rule ${a.index + 1} (${a.rule.id}) matches first: ${gets[a.action] || a.action}.${crawler}`;
}

function headersOf(text) {
  const out = {};
  for (const line of text.split("\n")) {
    const at = line.indexOf(":");
    if (at > 0) out[line.slice(0, at).trim()] = line.slice(at + 1).trim();
  }
  return out;
}

/** The fieldset, and collect(body): adds accessRules to the save when the list changed (throws on bad JSON). */
export function accessFieldset(room, creating) {
  const before = editable(room && room.accessRules);
  const list = el("textarea", { id: "ed-accessRules", rows: "6", spellcheck: "false", placeholder: EXAMPLE,
    "aria-describedby": "ed-access-help" });
  list.value = before.length ? JSON.stringify(before, null, 2) : "";
  const stats = el("ol", { class: "access-stats", hidden: !(room && room.accessRules && room.accessRules.length) },
    ...((room && room.accessRules) || []).map(statLine));
  const field = (id, label, placeholder) => el("div", { class: "field" }, el("label", { for: id, text: label }),
    el("input", { id, placeholder, spellcheck: "false" }));
  const out = el("p", { class: "result", role: "status", id: "ed-access-result", hidden: true });
  const headerBox = el("textarea", { id: "ed-access-headers", rows: "2", spellcheck: "false", placeholder: "X-Probe: a-long-secret" });
  const test = async () => {
    const body = {};
    const value = (id) => $(`#${id}`, set).value.trim();
    if (value("ed-access-address")) body.address = value("ed-access-address");
    if (value("ed-access-path")) body.path = value("ed-access-path");
    if (value("ed-access-agent")) body.userAgent = value("ed-access-agent");
    if (value("ed-access-country")) body.country = value("ed-access-country");
    body.headers = headersOf(headerBox.value);
    try {
      const res = await api("POST", `api/admin/rooms/${encodeURIComponent(room.id)}/rules/test`, body);
      out.textContent = describe(res);
    } catch (err) { out.textContent = `${err.message}${err.code ? " (" + err.code + ")" : ""}`; }
    out.hidden = false;
  };
  const set = el("fieldset", { id: "ed-access" }, el("legend", { text: "Access rules" }),
    el("p", { class: "muted small", id: "ed-access-help", text: "Before the queue is asked, first match wins: bypass lets a request through without queueing, queue takes the normal path, block refuses it. Match on cidrs, header (its value is kept secret), pathPrefix, extensions, countries (from the trusted CDN) and verifiedCrawlers. Blank: none." }),
    el("div", { class: "field" }, el("label", { for: "ed-accessRules", text: "Rules (JSON list, at most 50)" }), list),
    stats,
    creating ? null : el("div", { class: "access-dry" },
      el("p", { class: "muted small", text: "Dry run: which access rule would a request meet? Nothing is counted." }),
      el("div", { class: "grid2" }, field("ed-access-address", "Address", "203.0.113.7"), field("ed-access-path", "Path", "/checkout"),
        field("ed-access-agent", "User-Agent", "Googlebot/2.1"), field("ed-access-country", "Country", "DE")),
      el("div", { class: "field" }, el("label", { for: "ed-access-headers", text: "Headers (one Name: value per line)" }), headerBox),
      el("button", { type: "button", class: "btn", id: "ed-access-test", onclick: test }, "Test request"), out));
  const collect = (body) => {
    const raw = list.value.trim();
    let rules;
    try { rules = raw ? JSON.parse(raw) : []; } catch (e) { throw new Error(`Access rules: not a JSON list (${e.message}).`); }
    if (!Array.isArray(rules)) throw new Error("Access rules: a JSON list of rules, like [{\"action\": \"bypass\", \"match\": {…}}].");
    if (JSON.stringify(rules) !== JSON.stringify(before)) body.accessRules = rules;
  };
  return { set, collect };
}

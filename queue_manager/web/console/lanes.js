/* Priority lanes in the console: the room editor's Lanes table, and each lane's line on the room card. */
import { $, $$, compact, el, fmtInt } from "./ui.js";

const MAX_LANES = 8;

// The editor's fieldset: a row per lane (its id and its priority or share); the kind is one for all lanes.
function lanesFieldset(room) {
  const lanes = (room && room.lanes) || [];
  const kind = el("select", { id: "ed-ln-kind", "aria-describedby": "ed-ln-kind-help" },
    el("option", { value: "share", text: "share of each minute (%)" }),
    el("option", { value: "priority", text: "priority (higher first)" }));
  kind.value = lanes.length && lanes[0].priority !== undefined ? "priority" : "share";
  const box = el("div", { class: "lanes", id: "ed-lanes" });
  const add = el("button", { type: "button", class: "btn small" }, "+ Add lane");
  const total = el("p", { class: "muted small", id: "ed-ln-total", "aria-live": "polite" });
  const refresh = () => {
    const rows = $$(".lane-row", box);
    add.disabled = rows.length >= MAX_LANES;
    $$(".lane-default", box).forEach((tag, i) => { tag.textContent = i === 0 ? "default" : ""; });
    if (kind.value === "share" && rows.length) {
      const sum = rows.reduce((s, row) => s + (Number($(".lane-number", row).value) || 0), 0);
      total.textContent = `Shares add up to ${sum} % ${sum === 100 ? "" : "(they must add up to 100)"}`;
    } else {
      total.textContent = rows.length ? "A lower lane is let through only when no higher lane has anybody waiting." : "No lanes: one line.";
    }
  };
  const addLane = (lane) => {
    const number = lane.share !== undefined ? lane.share : lane.priority;
    const row = el("div", { class: "lane-row" },
      el("input", { class: "lane-id", "aria-label": "Lane id", placeholder: "members", value: lane.id || "", spellcheck: "false", autocomplete: "off" }),
      el("input", { class: "lane-number", type: "number", min: "1", max: "100", "aria-label": "Share or priority", value: number === undefined ? "" : String(number) }),
      el("span", { class: "lane-default muted small" }),
      el("button", { type: "button", class: "btn small", onclick: () => { row.remove(); refresh(); } }, "Remove"));
    box.append(row);
    refresh();
  };
  add.addEventListener("click", () => addLane({}));
  box.addEventListener("input", refresh);
  kind.addEventListener("change", refresh);
  for (const lane of lanes) addLane(lane);
  refresh();
  return el("fieldset", { id: "ed-lanes-set", "data-field": "lanes" }, el("legend", { text: "Lanes" }),
    el("p", { class: "muted small", text: "Split the line into lanes: each release goes to a lane by share or by priority, first come first served within it. The first lane is the default lane: everyone without an invitation joins it. A lane removed sends its people to the default lane in the order they joined." }),
    el("div", { class: "field" }, el("label", { for: "ed-ln-kind", text: "Lanes are set by" }), kind,
      el("span", { class: "help", id: "ed-ln-kind-help", text: "All lanes by share (adding up to 100) or all by priority (1–100)." })),
    box, el("div", {}, add), total);
}

// The lanes the form holds, or undefined when they are what the room already has.
function collectLanes(form, room) {
  const set = $("#ed-lanes-set", form);
  if (!set) return undefined;
  const kind = $("#ed-ln-kind", set).value;
  const lanes = $$(".lane-row", set).map((row) => {
    const id = $(".lane-id", row).value.trim();
    const raw = $(".lane-number", row).value.trim();
    if (!id && !raw) return null;
    return { id, [kind]: raw === "" ? null : Number(raw) };
  }).filter(Boolean);
  const before = ((room && room.lanes) || []);
  if (JSON.stringify(before) === JSON.stringify(lanes) || (!room && !lanes.length)) return undefined;
  return lanes;
}

// The card's lanes: one line per lane with its waiting, share or priority, estimate and last minute's releases.
function renderLanes(list, r) {
  const rows = r.laneStats || [];
  list.hidden = !rows.length;
  const said = rows.map((row) => {
    const weight = row.sharePct !== undefined ? `${row.sharePct} %` : `priority ${row.priority}`;
    const eta = row.waiting ? (row.etaSec === null || row.etaSec === undefined ? "not moving" : `~${compact(row.etaSec)}`) : "no line";
    return [row.id, `${fmtInt(row.waiting)} waiting`, weight, eta, `${fmtInt(row.releasedLastMinute)}/min out`];
  });
  if (list.dataset.said === JSON.stringify(said)) return;
  list.dataset.said = JSON.stringify(said);
  list.replaceChildren(...said.map(([id, waiting, weight, eta, out]) => el("li", { class: "lane-line" },
    el("span", { class: "lane-name", text: id }), el("span", { text: waiting }), el("span", { class: "muted", text: weight }),
    el("span", { text: eta, title: "An estimate for the lane's last place: the lane's share of the rate (others may give it theirs), or under priority, everyone in the lanes released first." }),
    el("span", { class: "muted", text: out }))));
}

export { collectLanes, lanesFieldset, renderLanes };

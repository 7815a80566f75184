"""What crosses the Lua boundary: the config in its stored form, and the raw replies rendered into
the same answers the memory store gives (views, check results, look-ups, stats).

The Lua scripts return integers only. Views and room stats are rendered by the engine's own
renderer (``engine/view.py``) from the numbers a reply carries; the look-up record mirrors
``report.describe``, and every float (``round(...)``) is computed here exactly as the engine computes it.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import orjson

from queue_manager.engine.draw import Drawn, DrawRecord
from queue_manager.engine.lanes import encode_lanes
from queue_manager.engine.model import RoomConfig, apply_fields
from queue_manager.engine.targeting import TargetRule, match
from queue_manager.engine.ticket import Ticket
from queue_manager.engine.view import MintedWaits, VisitorView, render_stats, render_ticket, render_visitor_view
from queue_manager.store.valkey.shards import is_shard

# The config fields the Lua rules read, in the order lua/prelude.lua's CONFIG_FIELDS lists them.
CONFIG_FIELD_NAMES = (
    "c_state",
    "c_rate",
    "c_maxc",
    "c_pttl",
    "c_sttl",
    "c_smax",
    "c_pres",
    "c_qmax",
    "c_pqmax",
    "c_wmax",
    "c_wsec",
    "c_qm",
    "c_opens",
    "c_rules",
    "c_lanes",
    "c_pqsh",
)


def store_form(cfg: RoomConfig) -> dict[str, Any]:
    """The config as stored in Valkey: the public form, ``opensAt`` in epoch ms, no ``rate`` alias."""
    out = cfg.to_public()
    out.pop("rate", None)
    out["opensAt"] = cfg.opens_at_ms
    return out


def from_store(data: dict[str, Any]) -> RoomConfig:
    """Rebuild a RoomConfig from its stored (or public) form, through the same validation."""
    body = {k: v for k, v in data.items() if k != "rate"}
    cfg, _ = apply_fields(None, body)
    return cfg


def lua_fields(cfg: RoomConfig) -> list[str]:
    """CONFIG_FIELDS for the scripts ('' = None)."""

    def s(v: int | str | None) -> str:
        return "" if v is None else str(v)

    return [
        cfg.state,
        s(cfg.rate_per_minute),
        s(cfg.max_concurrent),
        s(cfg.passed_ttl_sec),
        s(cfg.session_ttl_sec),
        s(cfg.session_max_sec),
        s(cfg.presence_sec),
        s(cfg.queue_max_per_ip),
        s(cfg.prequeue_max_per_ip),
        s(cfg.max_waiting),
        s(cfg.max_wait_sec),
        cfg.queueing,
        s(cfg.opens_at_ms),
        s(len(cfg.rules)),
        encode_lanes(cfg.lanes),
        "0" if is_shard(cfg.id) else str(cfg.prequeue_shards),  # 0: this room is a pre-queue shard
    ]


# The fields a stored ticket record leaves out when they hold their default (lua/prelude.lua "Records",
# T_DEFAULT): a record without ``s`` is a waiting ticket's, one without ``pa``/``ss``/``sla``/``st`` holds 0
# there. Its number is never stored either: it is the field of the room's ``t`` hash that holds it.
TICKET_DEFAULTS: dict[str, Any] = {"s": "waiting", "pa": 0, "ss": 0, "sla": 0, "st": 0}


def ticket_record(rec: dict[str, Any], n: int | str | None = None) -> dict[str, Any]:
    """A ticket record as stored or replied (defaults absent, perhaps no ``n``) with every field set:
    the defaults filled in, and ``n`` (the hash field it was read from) when given. A record written
    with its defaults (by an older server) reads the same."""
    out = {**TICKET_DEFAULTS, **rec}
    if n is not None:
        out["n"] = int(n)
    return out


def stored_ticket(rec: dict[str, Any]) -> dict[str, Any]:
    """A ticket record as the scripts store it: without ``n`` and without the fields that hold their default."""
    return {k: v for k, v in rec.items() if k != "n" and (k not in TICKET_DEFAULTS or TICKET_DEFAULTS[k] != v)}


def _bytes(value: Any) -> bytes | None:
    return None if value is None else bytes.fromhex(value)


def ticket_of(raw: dict[str, Any]) -> Ticket:
    """A ticket record as the engine's dataclass (CheckResult.ticket)."""
    rec = ticket_record(raw)
    return Ticket(
        n=rec["n"],
        ident=rec["id"],
        fp=bytes.fromhex(rec["fp"]),
        fp2=_bytes(rec.get("f2")),
        cookie=_bytes(rec.get("ck")),
        joined_ms=rec["j"],
        seen=rec["sn"],
        return_url=rec.get("ru"),
        charged=bool(rec.get("ch")),
        state=rec["s"],
        reason=rec.get("r"),
        passed_ms=rec.get("pm"),
        waited_ms=rec.get("wm"),
        pass_at=rec["pa"],
        slot=bool(rec.get("sl")),
        told=bool(rec.get("tl")),
        bounced_at=rec.get("ba"),
        door=_bytes(rec.get("d")),
        session_start=rec["ss"],
        session_last=rec["sla"],
        session_touched=rec["st"],
        lane=rec.get("ln"),
    )


def visitor_view(
    room_id: str, gen: int, cfg: RoomConfig, r: dict[str, Any], now_wall: int, now_mono: int
) -> VisitorView:
    """A join/status reply's raw numbers, rendered by ``engine.view.render_visitor_view``."""
    render = partial(
        render_visitor_view,
        cfg,
        gen,
        r["eff"],
        now_wall,
        now_mono,
        reason=r.get("reason"),
        new=bool(r.get("new")),
        draw_commitment=r.get("dc") or None,
    )
    pre = r.get("pre")
    if pre is not None:
        return render(handle=pre["h"], pre_count=r["pc"], joined_ms=pre["j"], return_url=pre.get("ru"))
    raw = r.get("t")
    if raw is None:
        fin = r.get("fin")
        return render(n=r.get("n"), finished_joined_ms=None if fin is None else fin["j"])
    t = ticket_record(raw)
    return render(
        n=t["n"],
        ticket_state=t["s"],
        ticket_reason=t.get("r"),
        joined_ms=t["j"],
        return_url=t.get("ru"),
        position=r.get("pos") if t["s"] == "waiting" else None,
        pass_at=t["pa"],
        waiting=r.get("wl"),
        lane=t.get("ln"),
        lane_ahead=int(r.get("la") or 0),
    )


def describe(room_id: str, gen: int, d: dict[str, Any], now_wall: int, now_mono: int) -> dict[str, Any]:
    """A describe record from the scripts, rendered by ``engine.view.render_ticket``."""
    n = d["n"]
    fin = d.get("fin")
    if fin is not None:
        return render_ticket(
            room_id,
            gen,
            n,
            now_wall,
            now_mono,
            state=None,
            reason=fin["r"],
            joined_ms=fin["j"],
            passed_ms=fin.get("pm"),
            waited_ms=fin.get("wm"),
        )
    t = ticket_record(d["t"], n)
    state = t["s"]
    return render_ticket(
        room_id,
        gen,
        n,
        now_wall,
        now_mono,
        state=state,
        reason=t.get("r"),
        joined_ms=t["j"],
        passed_ms=t.get("pm"),
        waited_ms=t.get("wm"),
        position=d.get("pos"),
        has_cookie=t.get("ck") is not None,
        seen_mono=t["sn"],
        pass_deadline_mono=d.get("pd") if state == "passed" else None,
        holds_slot=bool(t.get("sl")),
        session_deadline_mono=d.get("sd") if state == "admitted" else None,
        lane=t.get("ln") if d.get("lanes") else None,
    )


def stats(gen: int, cfg: RoomConfig, r: dict[str, Any], now_wall: int) -> dict[str, Any]:
    """A stats reply's raw numbers, rendered by ``engine.view.render_stats``."""
    rules_raw = r.get("rules") or []
    rule_counts: list[tuple[int, int | None]] = []
    for i in range(len(cfg.rules)):
        counts = rules_raw[i] if i < len(rules_raw) else [0]
        rule_counts.append((counts[0], counts[1] if len(counts) > 1 else None))
    return render_stats(
        cfg,
        gen,
        r["eff"],
        now_wall,
        waiting=r["waiting"],
        pre_queue=r["pq"],
        sessions=r["sessions"],
        passes=r["passes"],
        slot_holders=r["slots"],
        joins_last_minute=r["jlm"],
        passed_last_minute=r["plm"],
        head_joined_ms=r.get("head_joined"),
        joins_total=r["joins"],
        passes_total=r["passes_total"],
        unscoped_checks=r["unscoped"],
        blocked_returns=r["blocked"],
        refused_full=r.get("refused") or 0,
        sessions_revoked=r.get("srev") or 0,
        next_ticket=r["next"],
        rule_counts=rule_counts,
        created_ms=r.get("created"),
        access_counts=access_counts(r.get("ast")),
        lane_counts=[(int(w), int(p)) for w, p in (r.get("lanes") or [])],
    )


def access_counts(ast: Any) -> dict[str, tuple[int, int | None]]:
    """The ``ast`` hash (key -> matches, key@ -> last match ms) as (matches, last) by access rule key."""
    if not isinstance(ast, list):
        return {}
    flat = {_text(ast[i]): _text(ast[i + 1]) for i in range(0, len(ast) - 1, 2)}
    return {
        k: (int(v), int(flat[k + "@"]) if flat.get(k + "@") else None) for k, v in flat.items() if not k.endswith("@")
    }


def minted_waits(gen: int, r: dict[str, Any]) -> MintedWaits | None:
    """A stats reply's waits of the room's latest passes (``wt``, asked with a reader's cursor), or None
    when they were not asked for. ``wt`` is a list of ms, oldest first, the last one pass
    ``passes_total``'s (cjson writes an empty one as ``{}``)."""
    wt = r.get("wt")
    if wt is None:
        return None
    kept = [int(ms) for ms in wt] if isinstance(wt, list) else []
    return MintedWaits(gen, int(r["passes_total"]), int(r.get("wsum") or 0), kept)


def lookup_answer(room_id: str, ref: str, r: dict[str, Any], now_wall: int, now_mono: int) -> dict[str, Any]:
    """A lookup reply that found something: a ticket's record, the candidates a Ref matches, or the
    earlier generation a Ref belonged to (as ``Engine.lookup`` answers it)."""
    kind = r["k"]
    if kind == "previous":
        numbers = [int(n) for n in r["tickets"]]
        pgen = int(r["pgen"])
        return {
            "state": "previous_generation",
            "generation": pgen,
            "tickets": numbers,
            "ref": ref,
            "message": f"Ref {ref} was ticket {', '.join(map(str, numbers))} of an earlier generation "
            f"({pgen}) of this room, which was deleted and created again. The caller has to "
            "join again.",
        }
    gen = int(r["gen"])
    if kind == "candidates":
        return {"candidates": [describe(room_id, gen, c, now_wall, now_mono) for c in r["c"]], "ref": ref}
    return describe(room_id, gen, r["d"], now_wall, now_mono)


def rule_match(rules: tuple[TargetRule, ...], url: str, rst: list[str]) -> dict[str, Any]:
    """Which of ``rules`` ``url`` matches and what that means, with the rule's statistics (``rst``,
    the rule statistics hash): the answer of ``match_rule``."""
    if not rules:
        return {"url": url, "rule": None, "protected": True, "why": "the room has no rules: every page is protected"}
    rule = match(rules, url)
    if rule is None:
        return {"url": url, "rule": None, "protected": False, "why": "no rule matches: the page is not protected"}
    index = next(i for i, r in enumerate(rules) if r is rule)
    matches, last = rule_stats(rst).get(index, (0, None))
    stats = {**rule.to_public(), "matchCount": matches, "lastMatchAt": last}
    return {"url": url, "rule": stats, "protected": rule.action == "queue"}


def rule_stats(rst: list[str]) -> dict[int, tuple[int, int | None]]:
    """The rule statistics hash (flat HGETALL) as {index: (matches, last match ms)}."""
    out: dict[int, tuple[int, int | None]] = {}
    for i in range(0, len(rst), 2):
        matches, _, last = rst[i + 1].partition(":")
        out[int(rst[i])] = (int(matches), int(last) if last else None)
    return out


def draw_record(fields: Any) -> DrawRecord | None:
    """The room's ``draw`` hash (HGETALL: a flat list, or an empty table) as a ``DrawRecord``."""
    if not isinstance(fields, list) or not fields:
        return None
    h = {str(fields[i]): str(fields[i + 1]) for i in range(0, len(fields), 2)}
    previous = []
    for item in filter(None, h.get("prev", "").split(",")):
        com, _, at = item.partition(":")
        previous.append((com, int(at)))
    record = DrawRecord(bytes.fromhex(h["seed"]), int(h["at"]), int(h["opens"]) if h.get("opens") else None, previous)
    res = h.get("res")
    if res:
        doc = orjson.loads(res)
        record.drawn = Drawn(doc["handles"], doc["groups"], doc["order"], int(h["dat"]), int(h["first"]))
    return record


def draw_fields(record: DrawRecord | None) -> list[str]:
    """The ``draw`` hash of ``record`` (what ``draw_record`` reads back), as HSET's field/value list."""
    if record is None:
        return []
    out = [
        "seed",
        record.seed.hex(),
        "com",
        record.commitment,
        "at",
        str(record.committed_ms),
        "opens",
        "" if record.opens_at_ms is None else str(record.opens_at_ms),
        "prev",
        ",".join(f"{com}:{at}" for com, at in record.previous),
    ]
    drawn = record.drawn
    if drawn is not None:
        res = {"order": drawn.order, "handles": drawn.handles, "groups": drawn.groups}
        out += ["res", orjson.dumps(res).decode(), "dat", str(drawn.at_ms), "first", str(drawn.first_ticket)]
    return out


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)

"""What crosses the Lua boundary: the config in its stored form, and the raw replies rendered into
the same answers the memory store gives (views, check results, look-ups, stats).

The rendering mirrors ``engine/view.py`` and ``Room.describe`` / ``Room.stats`` line by line; the
Lua scripts return integers only, and every float (``round(...)``) is computed here exactly as the
engine computes it.
"""

from __future__ import annotations

from typing import Any

from queue_manager.engine.model import RoomConfig, apply_fields
from queue_manager.engine.ticket import Ticket, make_ref
from queue_manager.engine.view import VisitorView

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
    "c_opens",
    "c_rules",
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
        s(cfg.opens_at_ms),
        s(len(cfg.rules)),
    ]


def _bytes(value: Any) -> bytes | None:
    return None if value is None else bytes.fromhex(value)


def ticket_of(rec: dict[str, Any]) -> Ticket:
    """A ticket record as the engine's dataclass (CheckResult.ticket)."""
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
        pass_at=rec.get("pa", 0),
        slot=bool(rec.get("sl")),
        told=bool(rec.get("tl")),
        bounced_at=rec.get("ba"),
        door=_bytes(rec.get("d")),
        session_start=rec.get("ss", 0),
        session_last=rec.get("sla", 0),
        session_touched=rec.get("st", 0),
    )


def eta_sec(position: int | None, effective: str, rate: int) -> int | None:
    if position is None or effective != "active" or rate <= 0:
        return None
    return max(1, -(-position * 60 // rate))


def visitor_view(
    room_id: str, gen: int, cfg: RoomConfig, r: dict[str, Any], now_wall: int, now_mono: int
) -> VisitorView:
    """``engine.view.visitor_view`` over a join/status reply."""
    room_state = r["eff"]
    view = VisitorView(
        room_id=room_id,
        gen=gen,
        state="expired",
        room_state=room_state,
        target_url=cfg.target_url,
        rate_per_minute=cfg.rate_per_minute,
        reason=r.get("reason"),
        new=bool(r.get("new")),
        opens_at_ms=cfg.opens_at_ms,
    )
    pre = r.get("pre")
    if pre is not None:
        view.state = "scheduled"
        view.handle = pre["h"]
        view.joined_ms = pre["j"]
        view.pre_count = r["pc"]
        view.return_url = pre.get("ru")
        return view
    t = r.get("t")
    fin = r.get("fin")
    if t is None:
        if room_state == "bypass" and fin is None and r.get("n") is None:
            view.state = "bypass"
        if fin is not None:
            view.joined_ms = fin["j"]
        return view
    n = t["n"]
    view.ticket = n
    view.ref = make_ref(room_id, gen, n)
    view.joined_ms = t["j"]
    view.return_url = t.get("ru")
    view.reason = t.get("r") if r.get("reason") is None else r["reason"]
    if t["s"] == "waiting":
        view.state = "waiting"
        view.position = r.get("pos")
        view.eta_sec = eta_sec(view.position, room_state, cfg.rate_per_minute)
    else:
        view.state = t["s"]
        if t["s"] == "passed":
            remaining = t["pa"] + cfg.passed_ttl_sec * 1000 - now_mono
            view.pass_expires_ms = now_wall + remaining
    return view


def describe(room_id: str, gen: int, d: dict[str, Any], now_wall: int, now_mono: int) -> dict[str, Any]:
    """``Room.describe`` over a describe record from the scripts."""
    n = d["n"]
    base: dict[str, Any] = {"ticket": n, "ref": make_ref(room_id, gen, n), "generation": gen}
    fin = d.get("fin")
    if fin is not None:
        waited = fin.get("wm")
        return {
            **base,
            "state": "expired",
            "reason": fin["r"],
            "position": None,
            "joined": fin["j"],
            "passed": fin.get("pm"),
            "waited": None if waited is None else waited / 1000.0,
            "onSite": False,
            "bound": None,
        }
    t = d["t"]
    state = t["s"]
    out: dict[str, Any] = {
        **base,
        "state": state,
        "reason": t.get("r"),
        "position": d.get("pos"),
        "joined": t["j"],
        "passed": t.get("pm"),
        "onSite": state == "admitted",
        "bound": {"cookie": t.get("ck") is not None, "fingerprint": True},
        "lastSeenSecAgo": round((now_mono - t["sn"]) / 1000, 1),
    }
    if t.get("pm") is None:
        out["waiting"] = round((now_wall - t["j"]) / 1000.0, 3)
    else:
        out["waited"] = (t.get("wm") or 0) / 1000.0
    if state == "passed":
        out["passExpiresInSec"] = round((d["pd"] - now_mono) / 1000, 1)
        out["holdsSlot"] = bool(t.get("sl"))
    if state == "admitted":
        out["sessionExpiresInSec"] = round((d["sd"] - now_mono) / 1000, 1)
    return out


def stats(gen: int, cfg: RoomConfig, r: dict[str, Any], now_wall: int) -> dict[str, Any]:
    """``Room.stats`` over a stats reply."""
    effective = r["eff"]
    waiting = r["waiting"]
    est = None
    if waiting and effective == "active" and cfg.rate_per_minute > 0:
        est = -(-waiting * 60 // cfg.rate_per_minute)
    head_joined = r.get("head_joined")
    oldest = 0.0 if head_joined is None else max(0.0, (now_wall - head_joined) / 1000.0)
    rules_raw = r.get("rules") or []
    rules = []
    for i, rule in enumerate(cfg.rules):
        counts = rules_raw[i] if i < len(rules_raw) else [0]
        last = counts[1] if len(counts) > 1 else None
        rules.append({**rule.to_public(), "matchCount": counts[0], "lastMatchAt": last})
    passes, slots, sessions = r["passes"], r["slots"], r["sessions"]
    return {
        "effectiveState": effective,
        "generation": gen,
        "waiting": waiting,
        "preQueue": r["pq"],
        "activeSessions": sessions,
        "pendingEntry": passes,
        "passesOutstanding": passes,
        "holdingPasses": passes - slots,
        "occupancy": sessions + slots,
        "capacity": cfg.max_concurrent,
        "joinsLastMinute": r["jlm"],
        "passedLastMinute": r["plm"],
        "oldestWaitSec": round(oldest, 3),
        "estWaitSec": est,
        "joinsTotal": r["joins"],
        "passesTotal": r["passes_total"],
        "unscopedChecks": r["unscoped"],
        "blockedReturnUrls": r["blocked"],
        "nextTicket": r["next"],
        "rules": rules,
    }


def rule_stats(rst: list[str]) -> dict[int, tuple[int, int | None]]:
    """The rule statistics hash (flat HGETALL) as {index: (matches, last match ms)}."""
    out: dict[int, tuple[int, int | None]] = {}
    for i in range(0, len(rst), 2):
        matches, _, last = rst[i + 1].partition(":")
        out[int(rst[i])] = (int(matches), int(last) if last else None)
    return out

"""Checkpoints (docs/events.md, "Checkpoint (snapshot) format v1") to and from the Valkey layout.

``export_document`` writes the document from the export script's raw reply; ``import_payload``
turns a document into everything the import script writes: the records, the clocks rebased onto
this store's monotonic clock (``mono_here = mono_there - refMono + mono_now_here``; an unset
clock, 0, stays 0), every holder marked seen now, and the indexes the document leaves implicit
(per-address counts, pass / session / slot / bounced sets, deadline heaps, Ref indexes).
"""

from __future__ import annotations

from typing import Any

import orjson

import queue_manager.engine.engine as engine_module
from queue_manager.engine.draw import DrawRecord
from queue_manager.engine.lanes import decode_counters, encode_counters
from queue_manager.engine.model import RoomConfig
from queue_manager.engine.snapshot import config_from_public
from queue_manager.engine.ticket import make_ref
from queue_manager.store.valkey import codec

SNAPSHOT_VERSION = 1
LANE_SPAN = 1 << 40  # a lane's places in the ll zset: lane index × LANE_SPAN + line sequence (lua/prelude.lua)


def _pairs(flat: list[Any]) -> dict[str, str]:
    return {str(flat[i]): str(flat[i + 1]) for i in range(0, len(flat), 2)}


def _ticket_doc(t: dict[str, Any]) -> dict[str, Any]:
    """As engine/snapshot.py writes a ticket: fields that mean nothing in its state are unset. ``t``: a
    record with every field set (``codec.ticket_record``)."""
    passed = t["s"] == "passed"
    admitted = t["s"] == "admitted"
    return {
        "n": t["n"],
        "ident": t["id"],
        "fp": t["fp"],
        "fp2": t.get("f2"),
        "ck": t.get("ck"),
        "joined": t["j"],
        "ret": t.get("ru"),
        "state": t["s"],
        "reason": t.get("r"),
        "charged": bool(t.get("ch")),
        "passed": t.get("pm"),
        "waited": t.get("wm"),
        "passAt": t["pa"] if passed else 0,
        "slot": bool(t.get("sl")) if passed else False,
        "told": bool(t.get("tl")) if passed else False,
        "bouncedAt": t.get("ba") if passed else None,
        "door": t.get("d") if admitted else None,
        "sessStart": t["ss"] if admitted else 0,
        "sessLast": t["sla"] if admitted else 0,
        "sessTouched": t["st"] if admitted else 0,
        **({"lane": t["ln"]} if t.get("ln") else {}),
    }


def _pre_doc(e: dict[str, Any]) -> dict[str, Any]:
    return {
        "h": e["h"],
        "ident": e["id"],
        "fp": e["fp"],
        "fp2": e.get("f2"),
        "ck": e.get("ck"),
        "joined": e["j"],
        "ret": e.get("ru"),
        **({"lane": e["ln"]} if e.get("ln") else {}),
    }


def export_document(room_id: str, reply: dict[str, Any]) -> dict[str, Any]:
    st = _pairs(reply["st"])
    cfg = codec.from_store(orjson.loads(reply["cfg"]))
    tickets = sorted(
        (codec.ticket_record(orjson.loads(v), n) for n, v in _pairs(reply["t"]).items()), key=lambda t: t["n"]
    )
    fin = _pairs(reply["fin"])
    finished = []
    for n in reply["fo"] or []:
        f = orjson.loads(fin[str(n)])
        finished.append([int(n), f["j"], f.get("pm"), f.get("wm"), f["r"], f["e"]])
    pq = _pairs(reply["pq"])
    draw = codec.draw_record(reply.get("draw"))

    def num(name: str) -> int:
        value = st.get(name, "")
        return int(value) if value else 0

    return {
        "v": SNAPSHOT_VERSION,
        "room": room_id,
        "gen": num("gen"),
        "seq": num("seq"),
        "createdAt": num("created"),
        "refWall": int(reply["now_wall"]),
        "refMono": int(reply["now_mono"]),
        "config": cfg.to_public(),
        "next": num("next"),
        "credit": num("credit"),
        "lastTick": num("last"),
        "line": [int(n) for n in reply["line"] or []],
        "tickets": [_ticket_doc(t) for t in tickets],
        "finished": finished,
        "prequeue": [_pre_doc(orjson.loads(pq[h])) for h in reply["pqo"] or []],
        "drawn": {h: int(n) for h, n in _pairs(reply["drawn"]).items()},
        "draw": None if draw is None else draw.to_doc(),
        "purgedHandles": list(reply["ph"] or []),
        **({"laneCredit": decode_counters(st["lc"])} if st.get("lc") else {}),
        "counters": {
            "joinsTotal": num("joins"),
            "passesTotal": num("passes"),
            "waitMsTotal": num("wsum"),
            "unscopedChecks": num("unscoped"),
            "blockedReturnUrls": num("blocked"),
            "refusedFull": num("refused"),
            "sessionsRevoked": num("srev"),
            "ejected": num("ejected"),
        },
    }


def _lane(cfg: RoomConfig, lane: Any) -> str | None:
    """A checkpoint's lane as this room has it: the default lane when its own is gone, none without lanes."""
    if not cfg.lanes:
        return None
    return lane if any(spec.id == lane for spec in cfg.lanes) else cfg.lanes[0].id


def _record(**fields: Any) -> dict[str, Any]:
    """A Lua record: None and False are absent."""
    return {k: v for k, v in fields.items() if v is not None and v is not False}


def _heap(deadline: int, n: int) -> list[str]:
    return [str(deadline), f"{n:012d}:{deadline}"]


def import_payload(
    snapshot: dict[str, Any], now_wall: int, now_mono: int, *, full_records: bool = False
) -> tuple[str, dict[str, Any]]:
    if snapshot.get("v") != SNAPSHOT_VERSION:
        raise ValueError(f"unknown checkpoint format {snapshot.get('v')!r}")
    room_id = str(snapshot["room"])
    gen = int(snapshot["gen"])
    ref_mono = int(snapshot["refMono"])

    def rebase(mono: int) -> int:
        return int(mono) - ref_mono + now_mono

    def rebase_set(mono: int | None) -> int:
        return rebase(mono) if mono else 0  # an unset clock (0) is never rebased

    cfg = config_from_public(snapshot["config"])
    ttl = cfg.passed_ttl_sec * 1000
    claim = cfg.claim_window_sec * 1000
    payload: dict[str, list[str]] = {name: [] for name in codec_keys()}
    lane_index = {lane.id: i for i, lane in enumerate(cfg.lanes)}
    lane_of: dict[int, str] = {}
    per_ident: dict[str, int] = {}
    refs: dict[str, list[int]] = {}

    for doc in snapshot.get("tickets") or []:
        n = int(doc["n"])
        state = doc["state"]
        passed, admitted = state == "passed", state == "admitted"
        rec = _record(
            n=n,
            id=doc["ident"],
            fp=doc["fp"],
            f2=doc.get("fp2"),
            ck=doc.get("ck"),
            j=doc["joined"],
            sn=now_mono,
            ru=doc.get("ret"),
            ch=bool(doc.get("charged")),
            s=state,
            r=doc.get("reason"),
            pm=doc.get("passed"),
            wm=doc.get("waited"),
            pa=rebase_set(doc.get("passAt")) if passed else 0,
            sl=passed and bool(doc.get("slot")),
            tl=passed and bool(doc.get("told")),
            ba=rebase(doc["bouncedAt"]) if passed and doc.get("bouncedAt") is not None else None,
            d=doc.get("door") if admitted else None,
            ss=rebase_set(doc.get("sessStart")) if admitted else 0,
            sla=rebase_set(doc.get("sessLast")) if admitted else 0,
            st=rebase_set(doc.get("sessTouched")) if admitted else 0,
            rf=make_ref(room_id, gen, n),
            ln=_lane(cfg, doc.get("lane")),
        )
        stored = codec.ticket_record(rec) if full_records else codec.stored_ticket(rec)  # full: n and every default
        payload["t"] += [str(n), orjson.dumps(stored).decode()]
        if rec.get("ln"):
            lane_of[n] = rec["ln"]
        refs.setdefault(rec["rf"], []).append(n)
        if rec.get("ch"):
            per_ident[rec["id"]] = per_ident.get(rec["id"], 0) + 1
        m = str(n)
        if state == "passed":
            payload["ps"].append(m)
            payload["hp"] += _heap(rec["pa"] + ttl, n)
            if rec.get("sl"):
                payload["sl"].append(m)
                deadline = rec["pa"] + claim
                if not rec.get("tl") and cfg.presence_sec is not None:
                    deadline = min(deadline, now_mono + cfg.presence_sec * 1000)
                payload["hs"] += _heap(deadline, n)
            elif rec.get("ba") is not None:
                payload["bn"].append(m)
        elif state == "admitted":
            payload["ss"].append(m)
            deadline = rec["sla"] + cfg.session_ttl_sec * 1000
            if cfg.session_max_sec is not None:
                deadline = min(deadline, rec["ss"] + cfg.session_max_sec * 1000)
            payload["he"] += _heap(deadline, n)
    for ident, count in per_ident.items():
        payload["pi"] += [ident, str(count)]

    line = [int(n) for n in snapshot.get("line") or []]
    for i, n in enumerate(line, start=1):
        payload["line"] += [str(i), str(n)]
        if lane_of:
            payload["ll"] += [str(lane_index[lane_of.get(n) or cfg.lanes[0].id] * LANE_SPAN + i), str(n)]

    finished = snapshot.get("finished") or []
    for i, item in enumerate(finished, start=1):
        n, joined, passed, waited, reason, ended = item
        ref = make_ref(room_id, gen, int(n))
        rec = _record(j=joined, pm=passed, wm=waited, r=reason, e=ended, rf=ref)
        payload["fin"] += [str(n), orjson.dumps(rec).decode()]
        payload["fo"] += [str(i), str(n)]
        refs.setdefault(ref, []).append(int(n))
    for ref, numbers in refs.items():
        payload["refs"] += [ref, ",".join(str(n) for n in sorted(numbers))]

    next_n = int(snapshot["next"])
    archived: dict[str, list[int]] = {}
    for n in range(1, min(next_n, engine_module.ARCHIVE_TICKETS + 1)):
        archived.setdefault(make_ref(room_id, gen, n), []).append(n)
    for ref, numbers in archived.items():
        payload["aref"] += [ref, ",".join(map(str, numbers))]

    pq_per_ident: dict[str, int] = {}
    prequeue = snapshot.get("prequeue") or []
    for i, doc in enumerate(prequeue, start=1):
        rec = _record(
            h=doc["h"],
            id=doc["ident"],
            fp=doc["fp"],
            f2=doc.get("fp2"),
            ck=doc.get("ck"),
            j=doc["joined"],
            sn=now_mono,
            ru=doc.get("ret"),
            ln=_lane(cfg, doc.get("lane")),
        )
        payload["pq"] += [doc["h"], orjson.dumps(rec).decode()]
        payload["pqo"] += [str(i), doc["h"]]
        pq_per_ident[doc["ident"]] = pq_per_ident.get(doc["ident"], 0) + 1
    for ident, count in pq_per_ident.items():
        payload["ppi"] += [ident, str(count)]
    for handle, n in (snapshot.get("drawn") or {}).items():
        payload["drawn"] += [handle, str(n)]
    draw = snapshot.get("draw")
    payload["draw"] += codec.draw_fields(None if draw is None else DrawRecord.from_doc(draw))
    purged = snapshot.get("purgedHandles") or []
    for i, handle in enumerate(purged, start=1):
        payload["ph"] += [str(i), handle]

    counters = snapshot.get("counters") or {}
    st: dict[str, int] = {
        "gen": gen,
        "next": next_n,
        "credit": int(snapshot.get("credit") or 0),
        "last": rebase(int(snapshot.get("lastTick") or ref_mono)),
        "created": int(snapshot.get("createdAt") or 0),  # 0: a checkpoint written before it was kept
        "seq": int(snapshot.get("seq") or 0),
        "lseq": len(line),
        "joins": int(counters.get("joinsTotal") or 0),
        "passes": int(counters.get("passesTotal") or 0),
        "wsum": int(counters.get("waitMsTotal") or 0),
        "unscoped": int(counters.get("unscopedChecks") or 0),
        "blocked": int(counters.get("blockedReturnUrls") or 0),
        "refused": int(counters.get("refusedFull") or 0),
        "srev": int(counters.get("sessionsRevoked") or 0),
        "ejected": int(counters.get("ejected") or 0),
        "pqver": now_mono,  # a version no draw in flight can carry
        "pqseq": len(prequeue),
        "fseq": len(finished),
        "pseq": 0,
        "phseq": len(purged),
    }
    flat: list[str] = []
    for key, value in st.items():
        flat += [key, str(value)]
    lane_credit = encode_counters(snapshot.get("laneCredit") or {}) if cfg.lanes else ""
    if lane_credit:
        flat += ["lc", lane_credit]
    for key, text in zip(codec.CONFIG_FIELD_NAMES, codec.lua_fields(cfg), strict=True):
        flat += [key, text]
    out: dict[str, Any] = dict(payload)
    out["st"] = flat
    out["gen"] = gen
    out["cfg"] = orjson.dumps(codec.store_form(cfg)).decode()
    return room_id, out


def codec_keys() -> tuple[str, ...]:
    """The room keys an import fills (besides st and cfg)."""
    return (
        "t",
        "pi",
        "fin",
        "refs",
        "aref",
        "pq",
        "ppi",
        "drawn",
        "draw",
        "line",
        "hp",
        "hs",
        "he",
        "fo",
        "pqo",
        "ph",
        "ll",
        "ps",
        "ss",
        "sl",
        "bn",
    )


SINGLES = frozenset({"ps", "ss", "sl", "bn"})  # sets: one element a member (the others: field/value, score/member)


def import_parts(payload: dict[str, Any], size: int) -> list[dict[str, Any]]:
    """``payload`` (``import_payload``'s) cut into parts of about ``size`` list elements, in the order of
    ``codec_keys``; the first carries ``st``, ``cfg`` and ``gen`` too. Pairs (a hash's field and value, a
    sorted set's score and member) are never cut apart. One part when the whole fits."""
    head = {k: v for k, v in payload.items() if k not in codec_keys()}
    parts: list[dict[str, Any]] = [dict(head)]
    room = size
    for name in codec_keys():
        items: list[str] = payload.get(name) or []
        step = 1 if name in SINGLES else 2
        at = 0
        while at < len(items):
            if room < step:
                parts.append({})
                room = size
            take = max(step, room - room % step)
            chunk = items[at : at + take]
            parts[-1].setdefault(name, []).extend(chunk)
            room -= len(chunk)
            at += len(chunk)
    return parts

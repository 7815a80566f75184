"""A room's entry: ``POST /api/admin/rooms/<room>/entry-key`` creates or rotates the key its invitation
tokens are signed with; ``/api/admin/rooms/<room>/codes`` generates or uploads (POST), counts (GET) and
removes (DELETE) its entry codes.

The answer carries the key once (``{kid, key, previousKid, previousValidUntil}``); what is kept is the key
sealed under SECRET (``invitation.seal``), which only the join's verification opens. The key it replaces
stays valid for ENTRY_KEY_OVERLAP_SEC. Audited as ``room.entry_key`` with the kids, never the key.
"""

from __future__ import annotations

from typing import TypeGuard

from queue_manager import entrycode
from queue_manager.context import Context
from queue_manager.http.wire import HttpError, send_json
from queue_manager.invitation import new_key, seal
from queue_manager.routes import csvout
from queue_manager.routes.call import Call
from queue_manager.sidestores.entrybook.base import CODE_ISSUED, entry_counts
from queue_manager.sidestores.entrycodes.base import StoredCode
from queue_manager.sidestores.entrykeys.base import SealedKey


async def entry_key(call: Call) -> None:
    ctx = call.ctx
    room_id = call.req.params["room"]
    if not await ctx.store.room_exists(room_id):
        raise HttpError(404, "no_room", f"No room with id {room_id[:80]!r}.", roomId=room_id[:80])
    kid, key = new_key()
    sealed = SealedKey(kid, seal(ctx.settings.secret, room_id, kid, key), ctx.clock.wall_ms(), None)
    previous = await ctx.entry_keys.rotate(room_id, sealed, ctx.settings.entry_key_overlap_sec * 1000)
    ctx.entry_key_cache.pop(room_id, None)
    previous_kid = None if previous is None else previous.kid
    until = None if previous is None else previous.valid_until_ms
    await call.audit("room.entry_key", target=room_id, room_id=room_id, kid=kid, previousKid=previous_kid)
    await send_json(
        call.send,
        200,
        {"kid": kid, "key": key, "alg": "HS256", "previousKid": previous_kid, "previousValidUntil": until},
    )


# ------------------------------------------------------------------------------------------------ codes

REJECTED_SHOWN = 100  # the refused rows an upload's answer lists (all are counted)


def _bad(message: str) -> HttpError:
    return HttpError(400, "invalid_codes", message)


async def _room_exists(call: Call, room_id: str) -> None:
    if not await call.ctx.store.room_exists(room_id):
        raise HttpError(404, "no_room", f"No room with id {room_id[:80]!r}.", roomId=room_id[:80])


async def _room_lanes(call: Call, room_id: str) -> frozenset[str]:
    """The room's lane ids (none for a room of one line); 404 no_room when there is no such room."""
    await _room_exists(call, room_id)
    room = await call.ctx.store.get_room(room_id)
    return frozenset(str(lane.get("id")) for lane in room.get("lanes") or [] if isinstance(lane, dict))


def _unknown_lane(lane: str, lanes: frozenset[str]) -> HttpError:
    named = ", ".join(sorted(lanes)) if lanes else "none: it has one line"
    return HttpError(
        400,
        "unknown_lane",
        f"The room has no lane {lane!r} (its lanes: {named}); a code for it could never be redeemed.",
        lane=lane,
    )


async def codes_create(call: Call) -> None:
    """Generate codes (JSON ``{count, lane, uses}``: the codes answered once) or upload them (``text/csv``)."""
    room_id = call.req.params["room"]
    kind = (call.req.header(b"content-type") or "").split(";", 1)[0].strip().lower()
    if kind == "text/csv":
        raw = await call.req.body(entrycode.CSV_BODY_MAX)
        await _upload(call, room_id, raw, await _room_lanes(call, room_id))
        return
    body = await call.req.json_object()
    unknown = sorted(set(body) - {"count", "lane", "uses"})
    if unknown:
        raise HttpError(400, "unknown_field", f"Unknown field {unknown[0]!r}.", field=unknown[0])
    count, lane, uses = body.get("count"), body.get("lane"), body.get("uses", 1)
    if not _whole(count) or not 1 <= count <= entrycode.MAX_COUNT:
        raise _bad(f"count must be a whole number from 1 to {entrycode.MAX_COUNT}.")
    if lane is not None and not entrycode.valid_lane(lane):
        raise _bad("lane must match [a-z0-9][a-z0-9-]{0,31}, or be null.")
    if not _whole(uses) or not 1 <= uses <= entrycode.MAX_USES:
        raise _bad(f"uses must be a whole number from 1 to {entrycode.MAX_USES}.")
    lanes = await _room_lanes(call, room_id)
    if lane is not None and lane not in lanes:
        raise _unknown_lane(lane, lanes)
    ctx = call.ctx
    salt = await ctx.entry_codes.salt(room_id)
    codes: list[str] = []
    while len(codes) < count:  # a code the room holds already (50 random bits: next to never) is drawn again
        fresh = entrycode.generate(count - len(codes))
        rows = [StoredCode(entrycode.hashed(salt, _normal(c)), lane, uses) for c in fresh]
        if await ctx.entry_codes.add(room_id, rows) == len(rows):
            codes.extend(fresh)
        else:
            codes.extend(await _kept(ctx, room_id, salt, fresh, lane, uses))
    await ctx.entry_book.tally(room_id, CODE_ISSUED, count)
    await call.audit("room.codes", target=room_id, room_id=room_id, count=count, lane=lane, uses=uses)
    await send_json(call.send, 200, {"codes": codes, "count": count, "lane": lane, "uses": uses})


def _whole(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _normal(code: str) -> str:
    normal = entrycode.normalise(code)
    assert normal is not None
    return normal


async def _kept(ctx: Context, room_id: str, salt: bytes, fresh: list[str], lane: str | None, uses: int) -> list[str]:
    """The codes of a batch that a collision left out, stored one by one: those that were stored."""
    kept = []
    for code in fresh:
        if await ctx.entry_codes.add(room_id, [StoredCode(entrycode.hashed(salt, _normal(code)), lane, uses)]):
            kept.append(code)
    return kept


async def _upload(call: Call, room_id: str, raw: bytes, lanes: frozenset[str]) -> None:
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise _bad("The CSV must be UTF-8 text.") from None
    if "\0" in text:
        raise _bad("The CSV holds a NUL character.")
    rows, rejected = entrycode.parse_rows(*csvout.read(text), lanes=lanes)
    salt = await call.ctx.entry_codes.salt(room_id)
    stored = await call.ctx.entry_codes.add(
        room_id, [StoredCode(entrycode.hashed(salt, r.code), r.lane, r.uses) for r in rows]
    )
    await call.ctx.entry_book.tally(room_id, CODE_ISSUED, stored)
    await call.audit("room.codes_upload", target=room_id, room_id=room_id, stored=stored, rejected=len(rejected))
    await send_json(
        call.send,
        200,
        {
            "stored": stored,
            "duplicates": len(rows) - stored,
            "rejectedCount": len(rejected),
            "rejected": rejected[:REJECTED_SHOWN],
        },
    )


async def codes_read(call: Call) -> None:
    """The room's codes counted: issued, uses, redeemed and refused, and per lane."""
    room_id = call.req.params["room"]
    await _room_exists(call, room_id)
    by_lane = await call.ctx.entry_codes.counts(room_id)
    counts = entry_counts(await call.ctx.entry_book.tallies(room_id))
    await send_json(
        call.send,
        200,
        {
            "roomId": room_id,
            "issued": sum(v["codes"] for v in by_lane.values()),
            "uses": sum(v["uses"] for v in by_lane.values()),
            "redeemed": sum(v["redeemed"] for v in by_lane.values()),
            "refused": counts["codesRefused"],
            "byLane": [{"lane": lane or None, **v} for lane, v in sorted(by_lane.items())],
        },
    )


async def codes_delete(call: Call) -> None:
    """Remove every code of the room (audited)."""
    room_id = call.req.params["room"]
    await _room_exists(call, room_id)
    deleted = await call.ctx.entry_codes.drop(room_id)
    await call.audit("room.codes_delete", target=room_id, room_id=room_id, deleted=deleted)
    await send_json(call.send, 200, {"ok": True, "deleted": deleted})

"""Who may take a new place in a room: its ``entry`` (open, token or code) judged at the join.

A join that presents a live place keeps it (a reload, a poll, a second tab): nothing is asked again. A
join that would take a new place in a ``token`` room needs a valid invitation token (``X-QM-Enqueue-Token``
header, or a JWS as the body's ``token``); in a ``code`` room a code, or a valid token. An open room takes
a token too (its lane and user key apply); a bad one is counted, and the visitor joins as anyone may.

A token's user key (``sub``) holds one place: the visitor's session value (``qms_<room>``, whose hash
owns a ticket) is derived from the room and the user key, so every device of the user owns the same
ticket, and the entry book maps the user key to that place; the first of two racing joins claims the
user key and the other waits for its place (``PLACE_WAIT_SEC`` at most).

The join path holds the answer, a :class:`Grant`: the lane and user key the visitor joins with.
"""

from __future__ import annotations

import asyncio
import hmac
from dataclasses import dataclass
from typing import Final

from queue_manager import entrycode
from queue_manager.context import Context
from queue_manager.engine.policy import RoomPolicy
from queue_manager.engine.visitor import Presented
from queue_manager.http.wire import HttpError, Request
from queue_manager.invitation import Invitation, InvitationError, RefusalCode, claimed_kid, unseal, verify
from queue_manager.services.identity import Identity
from queue_manager.sidestores.entrybook.base import ACCEPTED, CODE_REDEEMED
from queue_manager.tokens import b64url_encode, hkdf_key

ENQUEUE_HEADER: Final = b"x-qm-enqueue-token"
PENDING: Final = "pending"  # a user key claimed by a join that has not taken its place yet
PENDING_MS: Final = 10_000  # how long a claim stands before another join may take over
PLACE_WAIT_SEC: Final = 5.0
_PLACE_POLL_SEC: Final = 0.05
KEY_CACHE_SEC: Final = 5.0  # a room's keys are re-read this often (a rotation elsewhere is seen within it)

_MESSAGES: Final[dict[str, str]] = {
    "token_required": "This room admits invited visitors only: open the invitation link from the site that "
    "invited you.",
}


@dataclass(frozen=True, slots=True)
class Grant:
    """What the entry check lets a join do: the lane and user key it joins with, the place the user key
    already holds (presented instead of the request's), and the session value that owns it."""

    lane: str | None = None
    user_key: str | None = None
    presented: Presented | None = None
    qms: str | None = None
    jti: str | None = None
    code_hash: bytes | None = None  # the code a use was spent of (given back if the join is refused)


def refuse(ctx: Context, code: str, message: str | None = None, status: int = 403) -> HttpError:
    """A refusal of the entry check, counted for ``qm_entry_refused_total``."""
    ctx.counters.entry_refused[code] = ctx.counters.entry_refused.get(code, 0) + 1
    return HttpError(status, code, message or _MESSAGES.get(code, "Entry refused."))


def invitation_of(req: Request, body_token: str | None) -> str | None:
    """The invitation token a join carries: the header first, then a JWS in the body's ``token``."""
    return req.header(ENQUEUE_HEADER) or body_token


async def room_keys(ctx: Context, room_id: str) -> dict[str, str]:
    """The room's keys, unsealed, by kid (re-read at most every ``KEY_CACHE_SEC``)."""
    now = ctx.clock.mono()
    hit = ctx.entry_key_cache.get(room_id)
    if hit is not None and now - hit[0] < KEY_CACHE_SEC:
        return hit[1]
    secrets_in_turn = (ctx.settings.secret, *((ctx.settings.secret_previous,) if ctx.settings.secret_previous else ()))
    keys: dict[str, str] = {}
    for row in await ctx.entry_keys.keys(room_id):
        key = unseal(secrets_in_turn, room_id, row.kid, row.sealed)
        if key is not None:
            keys[row.kid] = key
    ctx.entry_key_cache[room_id] = (now, keys)
    return keys


def session_of(ctx: Context, room_id: str, user_key: str) -> str:
    """The ``qms_<room>`` value of a user key: the same for every device of the user, unguessable without
    SECRET."""
    mac = hmac.new(hkdf_key(ctx.settings.secret, "qm:user-key", 32), f"{room_id}\0{user_key}".encode(), "sha256")
    return "u" + b64url_encode(mac.digest())[:40]


def _place_of(value: str) -> Presented | None:
    gen, _, rest = value.partition(":")
    if not gen.isdigit():
        return None
    if rest.startswith("h:"):
        return Presented(gen=int(gen), handle=rest[2:])
    return Presented(gen=int(gen), n=int(rest)) if rest.isdigit() else None


def place_text(gen: int, ticket: int | None, handle: str | None) -> str | None:
    """How the entry book keeps a place: ``<gen>:<n>`` or ``<gen>:h:<handle>``."""
    if ticket is not None:
        return f"{gen}:{ticket}"
    return None if handle is None else f"{gen}:h:{handle}"


async def check_invitation(
    ctx: Context, room_id: str, ident: Identity, token: str, held: str | None
) -> tuple[Invitation, bool]:
    """The token verified and its id spent, or a counted refusal. Not spent (and not counted again) when the
    visitor holds the user key's own place already (the same link opened again): then the second item is
    False."""
    try:
        keys = await room_keys(ctx, room_id)
        try:
            key = keys.get(claimed_kid(token))
        except InvitationError:
            key = None
        found = verify(token, key, room_id=room_id, now_sec=ctx.clock.wall_ms() // 1000, client_ip=ident.ip)
        if held is not None and await ctx.entry_book.place(room_id, found.sub) == held:
            return found, False
        if not await ctx.entry_book.spend(room_id, found.jti, found.exp * 1000):
            raise InvitationError("token_used", "This invitation has been used already.")
    except InvitationError as err:
        await ctx.entry_book.tally(room_id, err.code)
        raise refuse(ctx, err.code, _what_to_do(err.code, err.message)) from None
    await ctx.entry_book.tally(room_id, ACCEPTED)
    return found, True


def _what_to_do(code: RefusalCode, message: str) -> str:
    return f"{message} Go back to the site that invited you and ask for a fresh link."


async def user_place(ctx: Context, room_id: str, user_key: str) -> Presented | None:
    """The place the user key holds, claiming the user key when it holds none (None: this join takes it).
    A claim another join holds is waited for until that join has its place."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + PLACE_WAIT_SEC
    while True:
        held = await ctx.entry_book.claim_place(room_id, user_key, PENDING, PENDING_MS)
        if held is None:
            return None
        if held != PENDING:
            return _place_of(held)
        if loop.time() >= give_up:
            raise HttpError(
                503,
                "storage_unavailable",
                "Another join of this user is still taking its place; retry.",
                headers=[("Retry-After", "1")],
            )
        await asyncio.sleep(_PLACE_POLL_SEC)


async def admit(
    ctx: Context,
    policy: RoomPolicy | None,
    room_id: str,
    ident: Identity,
    token: str | None,
    code: str | None,
    held: str | None,
) -> Grant | None:
    """The entry check of a join (None: nothing to apply, the join goes on as in an open room). ``held``: the
    live place the join re-presents (``place_text``), if any."""
    mode = policy.entry if policy is not None else "open"
    if token is not None:
        try:
            invitation, spent = await check_invitation(ctx, room_id, ident, token, held)
        except HttpError:
            if mode == "open" or held is not None:  # counted; the visitor keeps a place or joins as anyone may
                return None
            raise
        presented = await user_place(ctx, room_id, invitation.sub)
        return Grant(
            lane=invitation.lane,
            user_key=invitation.sub,
            presented=presented,
            qms=session_of(ctx, room_id, invitation.sub),
            jti=invitation.jti if spent else None,
        )
    if held is not None:  # a place held already is kept: nothing is asked or spent again
        return None
    if mode == "open":
        return None
    if mode == "token":
        await ctx.entry_book.tally(room_id, "token_required")
        raise refuse(ctx, "token_required")
    if code is None:
        await ctx.entry_book.tally(room_id, "code_required")
        raise refuse(ctx, "code_required", "This room admits visitors with a code only: enter your code.")
    return await redeem(ctx, room_id, ident, code)


async def redeem(ctx: Context, room_id: str, ident: Identity, code: str) -> Grant:
    """Spend one use of the code, or a counted refusal. Wrong codes are what is limited (per address and per
    room): a spent budget refuses every try until its minute is over; a code that admits charges nothing."""
    budgets = (("code", ident.ip), ("code_room", room_id))
    for name, key in budgets:
        allowed, headers = ctx.budgets[name].left(key)
        if not allowed:
            await ctx.entry_book.tally(room_id, "code_rate_limited")
            err = refuse(ctx, "code_rate_limited", "Too many wrong codes: wait a minute and try again.", 429)
            err.headers = [(k.decode(), v.decode()) for k, v in headers]
            raise err
    normal = entrycode.normalise(code)
    outcome = "invalid"
    found = None
    if normal is not None:
        code_hash = entrycode.hashed(await ctx.entry_codes.salt(room_id), normal)
        found = await ctx.entry_codes.redeem(room_id, code_hash)
        outcome = found.outcome
    if found is None or found.outcome != "ok":
        reason = "code_used_up" if outcome == "used_up" else "code_invalid"
        for name, key in budgets:
            ctx.budgets[name].take(key)
        await ctx.entry_book.tally(room_id, reason)
        message = (
            "This code has been used as many times as it allows."
            if reason == "code_used_up"
            else "This code is not one of this room's: check it and try again."
        )
        raise refuse(ctx, reason, message)
    await ctx.entry_book.tally(room_id, CODE_REDEEMED)
    return Grant(lane=found.lane, code_hash=code_hash)


async def settle(ctx: Context, room_id: str, grant: Grant, place: str | None) -> None:
    """After the join: the user key's place is the one the join answered (or released when it has none)."""
    if grant.user_key is None:
        return
    if place is None:
        await ctx.entry_book.drop_place(room_id, grant.user_key)
        return
    await ctx.entry_book.set_place(room_id, grant.user_key, place, ctx.settings.queue_cookie_max_age_sec * 1000)


async def release(ctx: Context, room_id: str, grant: Grant) -> None:
    """A join refused after the entry check (the line full, the room closed …): the invitation may be used
    again and the user key's claim is lifted, unless the user key already held a place."""
    if grant.jti is not None:
        await ctx.entry_book.forget(room_id, grant.jti)
        await ctx.entry_book.tally(room_id, ACCEPTED, -1)
    if grant.user_key is not None and grant.presented is None:
        await ctx.entry_book.drop_place(room_id, grant.user_key)
    if grant.code_hash is not None:
        await ctx.entry_codes.give_back(room_id, grant.code_hash)
        await ctx.entry_book.tally(room_id, CODE_REDEEMED, -1)

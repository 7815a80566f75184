"""Edge passes on the wire: the key set, the revocation list, and a pass handed out or checked at the door.

With ``PASS_SIGNING=ed25519`` an admitting ``/api/check`` also answers ``edgePass`` (and the ``qmp_<room>``
cookie): an Ed25519-signed pass (``edgepass.py``) a connector verifies itself against
``GET /.well-known/jwks.json`` and ``GET /api/passes/revoked?roomId=``, asking the queue again only once
it expires. A pass never admits anybody at the queue: ``/api/check`` judges the ticket and the door key as
always, and names a presented pass it would refuse in ``edgePassRefused``.
"""

from __future__ import annotations

from queue_manager.context import Context
from queue_manager.edgepass import PassError, PassReason
from queue_manager.engine.model import ROOM_ID_RE
from queue_manager.engine.visitor import CheckResult, Presented
from queue_manager.http import cookies
from queue_manager.http.negotiate import etag_matches
from queue_manager.http.wire import HttpError, Request, Send, send_json, send_response

#: the key set changes only with SECRET, that is with a restart; five minutes keeps a connector's copy
#: fresh enough for a rotation (an unknown kid makes it fetch again at once) at one request per 5 min
JWKS_MAX_AGE_SEC = 300


def key_set(ctx: Context) -> tuple[bytes, bytes]:
    """The JWK Set body and its ETag, rendered once at start: the keys change only with the settings."""
    return ctx.key_set


async def jwks(ctx: Context, req: Request, send: Send) -> None:
    """GET /.well-known/jwks.json: the edge passes' public keys (empty with PASS_SIGNING=hmac)."""
    body, etag = key_set(ctx)
    headers = [
        (b"cache-control", f"public, max-age={JWKS_MAX_AGE_SEC}".encode()),
        (b"etag", etag),
        (b"access-control-allow-origin", b"*"),
    ]
    if etag_matches(req.headers.get(b"if-none-match"), etag):
        await send_response(send, 304, b"", headers, head=True)
        return
    headers.insert(0, (b"content-type", b"application/jwk-set+json"))
    await send_response(send, 200, body, headers, req.method == "HEAD")


async def revoked(ctx: Context, req: Request, send: Send) -> None:
    """GET /api/passes/revoked?roomId=: the room's generation, its revoked pass ids not yet expired and the
    cutoff of a flush still in force (``revokedBefore``, seconds: a pass issued before it is refused)."""
    room_id = req.query.get("roomId")
    if not room_id:
        raise HttpError(400, "bad_request", "roomId is required.")
    if not ROOM_ID_RE.match(room_id) or await ctx.store.room_policy(room_id) is None:
        # no room: a connector then trusts no pass of it
        raise HttpError(404, "no_room", f"No room with id {room_id[:80]!r}.", roomId=room_id[:80])
    room = await ctx.store.get_room(room_id)
    payload = {
        "roomId": room_id,
        "generation": room["generation"],
        "revoked": await ctx.revocations.revoked(room_id),
        "revokedBefore": await ctx.revocations.revoked_before(room_id),
        "passTtlSec": ctx.settings.edge_pass_ttl_sec,
        "now": ctx.clock.wall_ms(),
    }
    await send_json(send, 200, payload, head=req.method == "HEAD")


def presented(req: Request, room_id: str) -> str | None:
    """The edge pass a check carries: ``?qm_pass=`` or the ``qmp_<room>`` cookie."""
    return req.query.get(cookies.PASS_PARAM) or req.cookies.get(cookies.EDGE_PASS + room_id)


async def refusal(ctx: Context, room_id: str, token: str, door_hash: bytes | None) -> PassReason | None:
    """Why the queue would refuse this pass (None: it would not), read only when a check carries one."""
    if ctx.passes is None:
        return "unknown_kid"
    try:
        claims = ctx.passes.verify(token, room_id, door_hash=door_hash)
    except PassError as err:
        return err.reason
    if door_hash is None:  # no door key beside it: the pass is bound to nothing this request holds
        return "unbound"
    if claims.sub in await ctx.revocations.revoked(room_id):
        return "revoked"
    before = await ctx.revocations.revoked_before(room_id)
    if before is not None and claims.iat < before:
        return "revoked"
    room = await ctx.store.get_room(room_id)
    return "revoked" if claims.gen != room["generation"] else None


def issue(
    ctx: Context, room_id: str, found: Presented | None, result: CheckResult, door_hash: bytes | None
) -> tuple[str, int] | None:
    """A pass for an admitted visitor, and its expiry (wall ms); None when there is nothing to bind.

    It expires halfway to the session's end at the latest, so the check made when it runs out still
    finds the session and slides it; never later than EDGE_PASS_TTL_SEC, the bound on a missed revocation.
    """
    signer = ctx.passes
    ticket = result.ticket
    if signer is None or result.state != "admitted" or ticket is None or found is None or door_hash is None:
        return None
    now = ctx.clock.wall_ms()
    life_ms = ctx.settings.edge_pass_ttl_sec * 1000
    if result.session_expires_ms is not None:
        life_ms = min(life_ms, (result.session_expires_ms - now) // 2)
    exp_sec = (now + life_ms) // 1000
    if exp_sec * 1000 <= now:
        return None
    return signer.sign(room_id, found.gen, ticket.n, door_hash, exp_sec), exp_sec * 1000


async def revoke_ticket(ctx: Context, room_id: str, gen: int, n: int) -> None:
    """Refuse every edge pass of this ticket from now on, for as long as one could still be valid."""
    if ctx.passes is None:
        return
    until = ctx.clock.wall_ms() + ctx.settings.edge_pass_ttl_sec * 1000 + 1000  # + the seconds' rounding
    await ctx.revocations.revoke(room_id, ctx.passes.pass_ids(room_id, gen, n), until)


async def revoke_room(ctx: Context, room_id: str) -> None:
    """A flush: refuse every edge pass of the room issued until now, with one cutoff rather than one id per
    pass. ``iat`` is in whole seconds, so the cutoff is the next whole second: a pass issued in the flush's
    own second is refused too, and its holder's connector asks the queue, which judges the ticket itself."""
    if ctx.passes is None:
        return
    now = ctx.clock.wall_ms()
    until = now + ctx.settings.edge_pass_ttl_sec * 1000 + 1000  # + the seconds' rounding
    await ctx.revocations.revoke_before(room_id, -(-now // 1000), until)


__all__ = [
    "JWKS_MAX_AGE_SEC",
    "issue",
    "jwks",
    "key_set",
    "presented",
    "refusal",
    "revoke_room",
    "revoke_ticket",
    "revoked",
]

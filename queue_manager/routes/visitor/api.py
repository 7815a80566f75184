"""The visitor wire: /api/join, /api/status, /events, /api/check, /w/<roomId>, /qm.js."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import secrets
import sys
from dataclasses import replace
from functools import partial
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import orjson

from queue_manager.access.protection import BLOCKED_CODE, RequestFacts, block_header, room_mode_of
from queue_manager.context import Context
from queue_manager.engine.model import ROOM_ID_RE
from queue_manager.engine.origins import origin_of
from queue_manager.engine.policy import RoomPolicy
from queue_manager.engine.view import VisitorView
from queue_manager.engine.visitor import CheckResult, Presented
from queue_manager.http import cookies
from queue_manager.http.direct import chunked_cycle
from queue_manager.http.wire import (
    JSON_TYPE,
    NO_STORE,
    HttpError,
    Request,
    Send,
    cookie_header,
    send_json,
    send_response,
)
from queue_manager.invitation import looks_like_invitation
from queue_manager.routes import edge_passes as passkeys
from queue_manager.routes.visitor import backend_down, entry
from queue_manager.routes.visitor.door import door_check, door_hash
from queue_manager.services import gated_wait, ratelimit
from queue_manager.services.access_gate import path_of
from queue_manager.services.identity import FORWARDED_HEADERS as FORWARDED
from queue_manager.services.identity import Identity, valid_ip
from queue_manager.services.sse import SEND_TIMEOUT, Stream, hold_stream
from queue_manager.web import asset

MAX_URL = 4096


def room_param(req: Request, value: Any = None) -> str:
    room_id = req.query.get("roomId") if value is None else value
    if not isinstance(room_id, str) or not room_id:
        raise HttpError(400, "bad_request", "roomId is required.")
    if not ROOM_ID_RE.match(room_id):
        raise HttpError(404, "no_room", f"No room with id {room_id[:80]!r}.", roomId=room_id[:80])
    return room_id


def with_token(url: str, token: str) -> str:
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != cookies.TOKEN_PARAM]
    query.append((cookies.TOKEN_PARAM, token))
    return urlunsplit((parts.scheme, parts.netloc, parts.path or "/", urlencode(query), parts.fragment))


def render_view(ctx: Context, view: VisitorView, token: str | None) -> dict[str, Any]:
    redirect = None
    # admission maintenance: the door would hold a pass, so the page is not sent to it yet
    held = view.state == "passed" and ctx.admission.enabled
    if view.state in ("passed", "admitted") and token is not None and not held:
        redirect = with_token(view.return_url or view.target_url, token)
    elif view.state == "bypass":
        redirect = view.return_url or view.target_url
    out = {
        "roomId": view.room_id,
        "state": view.state,
        "roomState": view.room_state,
        "position": view.position,
        "ahead": view.ahead,
        "ticket": view.ticket,
        "ref": view.ref,
        "token": token,
        "etaSec": view.eta_sec,
        "ratePerMinute": view.rate_per_minute,
        "joinedAt": view.joined_ms,
        "now": ctx.clock.wall_ms(),
        "opensAt": view.opens_at_ms,
        "preQueued": view.state == "scheduled",
        "preCount": view.pre_count,
        "handle": view.handle,
        "drawCommitment": view.draw_commitment,
        "queueing": view.queueing,
        "waiting": view.waiting,
        "etaLowSec": view.eta_low_sec,
        "etaHighSec": view.eta_high_sec,
        "nextMinuteOdds": view.odds_pct,
        "passExpiresAt": view.pass_expires_ms,
        "redirectUrl": redirect,
        "reason": view.reason,
    }
    if view.lane is not None:  # only in a room with lanes: a room without answers as it always has
        out["lane"] = view.lane
    return out


def ticket_cookies(
    ctx: Context, room_id: str, token: str | None, qms: str | None, secure: bool
) -> list[tuple[bytes, bytes]]:
    headers = []
    age = ctx.settings.queue_cookie_max_age_sec
    if token is not None:
        headers.append(cookie_header(cookies.TICKET + room_id, token, max_age=age, secure=secure))
    if qms is not None:
        headers.append(cookie_header(cookies.SESSION + room_id, qms, max_age=age, secure=secure))
    return headers


def _limit(ctx: Context, name: str, ident: Identity) -> list[tuple[bytes, bytes]]:
    allowed, headers = ctx.budgets[name].take(ident.ip)
    if not allowed:
        if name == "check":
            ctx.counters.rate_limited_checks += 1
        raise ratelimit.refused(headers)
    return headers


async def _permitted_return(ctx: Context, room_id: str, url: Any) -> str | None:
    if url is None:
        return None
    if not isinstance(url, str) or len(url) > MAX_URL:
        raise HttpError(400, "bad_request", "returnUrl must be a string of at most 4096 characters.")
    policy = await ctx.store.room_policy(room_id)
    if policy is None:
        return None
    if policy.return_allowed(url):
        return url
    ctx.counters.blocked_return_urls += 1
    await ctx.store.note_blocked_return(room_id)
    return None


# ---------------------------------------------------------------------- routes


async def join(ctx: Context, req: Request, send: Send) -> None:
    body = await req.json_object()
    room_id = room_param(req, body.get("roomId"))
    token = body.get("token")
    if token is not None and not isinstance(token, str):
        raise HttpError(400, "bad_request", "token must be a string.")
    invitation = None
    if token is not None and looks_like_invitation(token):  # a JWS: an invitation, not a ticket
        invitation, token = token, None
    invitation = entry.invitation_of(req, invitation)
    code = body.get("code")
    if code is not None and not isinstance(code, str):
        raise HttpError(400, "bad_request", "code must be a string.")
    ident = ctx.identity.resolve(req)
    limit_headers = _limit(ctx, "join", ident)
    if not await ctx.store.room_exists(room_id):
        raise HttpError(404, "no_room", f"No room with id {room_id!r}.", roomId=room_id)
    return_url = await _permitted_return(ctx, room_id, body.get("returnUrl"))
    policy = await ctx.store.room_policy(room_id)
    rule = None
    if policy is not None and policy.access_rules:
        rule = await ctx.access_gate.judge(policy, req, ident, path_of(return_url))
    if rule is not None and rule.action == "block":
        raise access_blocked(room_id)
    if rule is not None and rule.action == "bypass":
        # let through without a place: the answer a room in bypass gives (sent straight on to the page)
        bypassed = await ctx.store.status(room_id, ident.client(None), None)
        bypassed = replace(bypassed, state="bypass", return_url=return_url)
        await send_json(send, 200, {**render_view(ctx, bypassed, None), "accessRule": rule.id}, limit_headers)
        return
    cookie_ticket, _ = ctx.read_ticket(room_id, req.cookies.get(cookies.TICKET + room_id))
    await _protect(ctx, req, ident, room_id, has_cookie=cookie_ticket is not None)
    presented, _ = ctx.read_ticket(room_id, token) if token else (cookie_ticket, None)
    qms = req.cookies.get(cookies.SESSION + room_id)
    new_qms = None
    if not qms or len(qms) > 64:
        qms = new_qms = secrets.token_urlsafe(18)
    grant = None
    if invitation is not None or (policy is not None and policy.entry != "open"):
        held = await _held_place(ctx, room_id, ident, qms, presented)
        grant = await entry.admit(ctx, policy, room_id, ident, invitation, code, held)
    if grant is not None and grant.qms is not None:
        presented = grant.presented
        if grant.qms != qms:
            qms = new_qms = grant.qms
    # the visitor's lane: the one the checked grant names (a token's lane claim, a code's lane), else the default
    lane = None if grant is None else grant.lane
    try:
        view = await ctx.store.join(room_id, ident.client(qms), presented, return_url, lane=lane)
    except Exception:  # a refused join (the line full, the room closed, the store away) spends nothing
        if grant is not None:
            with contextlib.suppress(Exception):
                await entry.release(ctx, room_id, grant)
        raise
    if grant is not None:
        await entry.settle(ctx, room_id, grant, entry.place_text(view.gen, view.ticket, view.handle))
    signed = ctx.sign_ticket(view)
    headers = ticket_cookies(ctx, room_id, signed, new_qms, ctx.identity.secure(ident))
    headers.extend(limit_headers)
    await send_json(send, 200, render_view(ctx, view, signed), headers)


def access_blocked(room_id: str, headers: list[tuple[bytes, bytes]] | None = None) -> HttpError:
    """A room's access rule refuses this request (403 ``access_blocked``)."""
    return HttpError(
        403,
        "access_blocked",
        "This room's access rules do not allow this request.",
        headers=[(k.decode(), v.decode()) for k, v in headers or ()],
        roomId=room_id,
    )


async def _held_place(ctx: Context, room_id: str, ident: Identity, qms: str, presented: Presented | None) -> str | None:
    """The live place the join re-presents (kept without asking for entry again), as the entry book names it."""
    if presented is None:
        return None
    view = await ctx.store.status(room_id, ident.client(qms), presented)
    if view.state not in ("waiting", "passed", "admitted", "scheduled"):
        return None
    return entry.place_text(view.gen, view.ticket, view.handle)


async def _protect(ctx: Context, req: Request, ident: Identity, room_id: str, *, has_cookie: bool) -> None:
    """Bot protection on a request for a place in line (never on the door check, which fails open)."""
    untrusted_forward = not ident.trusted_peer and not ctx.edge.enabled and any(h in req.headers for h in FORWARDED)
    facts = RequestFacts(
        ip=ident.ip,
        user_agent=ident.user_agent,
        accept=req.header(b"accept"),
        accept_language=req.header(b"accept-language"),
        accept_encoding=req.header(b"accept-encoding"),
        sec_fetch_site=req.header(b"sec-fetch-site"),
        sec_fetch_mode=req.header(b"sec-fetch-mode"),
        sec_fetch_dest=req.header(b"sec-fetch-dest"),
        sec_ch_ua=req.header(b"sec-ch-ua"),
        forwarded_from_untrusted=untrusted_forward,
        has_valid_queue_cookie=has_cookie,
        tickets_held_by_ip=await ctx.store.places_held(room_id, ident.ip),
    )
    policy = await ctx.store.room_policy(room_id)
    decision = ctx.protection.assess(facts, room_mode=room_mode_of(policy.protection if policy else None))
    if decision.action == "monitor":
        ctx.history.note(room_id, "warned")
    if decision.action == "block":
        ctx.history.note(room_id, "blocked")
        ctx.series.block(room_id, ctx.clock.wall_ms())  # one chart mark per room per minute, counted
        name, value = block_header(decision)
        raise HttpError(
            403,
            BLOCKED_CODE,
            "This request was refused a place in line.",
            headers=[(name, value)],
            score=decision.score,
        )


def _ticket_token(req: Request, room_id: str) -> str | None:
    return req.query.get("token") or _cookie_ticket(req, room_id)


def _cookie_ticket(req: Request, room_id: str) -> str | None:
    return req.cookies.get(cookies.TICKET + room_id)


async def status(ctx: Context, req: Request, send: Send) -> None:
    room_id = room_param(req)
    ident = ctx.identity.resolve(req)
    if not await ctx.store.room_exists(room_id):
        raise HttpError(404, "no_room", f"No room with id {room_id!r}.", roomId=room_id)
    token = _ticket_token(req, room_id)
    presented, _ = ctx.read_ticket(room_id, token)
    view = await ctx.store.status(room_id, ident.client(req.cookies.get(cookies.SESSION + room_id)), presented)
    live = token if presented is not None and view.state not in ("expired",) else None
    await send_json(send, 200, render_view(ctx, view, live))


async def events(ctx: Context, req: Request, send: Send) -> None:
    receive = req.receive
    room_id = room_param(req)
    ident = ctx.identity.resolve(req)
    if not await ctx.store.room_exists(room_id):
        raise HttpError(404, "no_room", f"No room with id {room_id!r}.", roomId=room_id)
    presented, _ = ctx.read_ticket(room_id, _ticket_token(req, room_id))
    settings = ctx.settings
    b = ctx.broadcaster
    if settings.sse_max_total and b.streams >= settings.sse_max_total:
        raise HttpError(
            429, "too_many_streams", "This server holds as many live streams as it may.", headers=[("Retry-After", "5")]
        )
    if settings.sse_per_ip and b.per_ip.get(ident.ip, 0) >= settings.sse_per_ip:
        raise HttpError(
            429, "too_many_streams", "Too many live streams from your address.", headers=[("Retry-After", "5")]
        )
    client = ident.client(req.cookies.get(cookies.SESSION + room_id))
    view = await ctx.store.status(room_id, client, presented)
    token = ctx.sign_ticket(view) if presented is not None and view.state != "expired" else None
    due_ms = ctx.refresh_due_ms(view, ctx.clock.wall_ms()) if token is not None else None
    headers = [
        (b"content-type", b"text/event-stream; charset=utf-8"),
        NO_STORE,
        (b"x-accel-buffering", b"no"),
        *ticket_cookies(ctx, room_id, token, None, ctx.identity.secure(ident)),
    ]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    loop = asyncio.get_running_loop()
    deadline = None if due_ms is None else loop.time() + (due_ms - ctx.clock.wall_ms()) / 1000.0
    status = ctx.store.status

    async def step() -> bool:
        """The next frame (the body /api/status would answer now), or ``refresh`` at the deadline (ends)."""
        if deadline is not None and loop.time() >= deadline:
            await send({"type": "http.response.body", "body": _REFRESH, "more_body": True})
            return False
        try:
            current = await status(room_id, client, presented)
        except HttpError:
            return False
        await send({"type": "http.response.body", "body": _frame(ctx, current, token), "more_body": True})
        return True

    status_now = ctx.status_now
    compose = None
    if status_now is not None:

        def compose() -> bytes | None:
            """``step``'s frame, composed without a coroutine (a store answering in this process)."""
            try:
                return _frame(ctx, status_now(room_id, client, presented), token)
            except HttpError:
                return None

    task = asyncio.current_task()
    assert task is not None
    stream = Stream(
        room_id,
        send,
        step,
        task,
        compose=compose,
        cycle=chunked_cycle(send),
        client=client,
        presented=presented,
        frame_of=None if compose is not None else partial(_frame, ctx, token=token),
    )
    b.streams += 1
    b.per_ip[ident.ip] = b.per_ip.get(ident.ip, 0) + 1
    try:
        first = b"data: " + orjson.dumps(render_view(ctx, view, token)) + b"\n\n"
        del view, headers  # an open stream keeps only what its frames need
        async with asyncio.timeout(SEND_TIMEOUT):
            await send({"type": "http.response.body", "body": first, "more_body": True})
        del first
        if not b.closing.is_set():
            b.add(stream, deadline)
            await hold_stream(receive, stream)
    except (TimeoutError, OSError):
        pass
    finally:
        stream.ending = True  # from here on nothing cancels this task
        b.remove(stream)
        b.streams -= 1
        left = b.per_ip.get(ident.ip, 1) - 1
        if left:
            b.per_ip[ident.ip] = left
        else:
            b.per_ip.pop(ident.ip, None)
        try:
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except (OSError, RuntimeError):
            pass


_REFRESH = b"event: refresh\ndata: {}\n\n"


def _frame(ctx: Context, current: VisitorView, token: str | None) -> bytes:
    """A stream's frame: the body /api/status would answer now (the token shown unless the place expired)."""
    return b"data: " + orjson.dumps(render_view(ctx, current, token if current.state != "expired" else None)) + b"\n\n"


def _vouching_header(ctx: Context, req: Request) -> str | None:
    """The Authorization a connector vouches with, or None: a plain check costs no coroutine.

    ``?key=`` is refused (credential_in_query).
    """
    if "key" in req.query:
        ctx.counters.refused_key_checks += 1
        print(  # the route called (/api/check or /api/verify), so the caller to fix can be found
            f"WARNING {req.path[:100]}: a Public API key was sent in the URL (?key=); send it as Authorization: Bearer",
            file=sys.stderr,
            flush=True,
        )
        raise HttpError(
            401, "credential_in_query", "Send the Public API key as Authorization: Bearer, never in the URL."
        )
    return req.header(b"authorization") or None


async def _vouched_key(ctx: Context, auth: str, ident: Identity) -> bool:
    """A connector vouching for a visitor: Authorization: Bearer <PUBLIC_API_KEY or ADMIN_KEY>.

    A wrong key spends the address's auth-failure allowance; a locked-out address's key is treated as
    absent (401).
    """
    scheme, _, credential = auth.partition(" ")
    presented = credential.strip().encode()
    settings = ctx.settings
    locked = await ctx.access.failures.locked(ident.ip) is not None
    good = (
        scheme.lower() == "bearer"
        and not locked
        and (
            (settings.public_api_key is not None and hmac.compare_digest(presented, settings.public_api_key.encode()))
            | hmac.compare_digest(presented, settings.admin_key.encode())
        )
    )
    if not good:
        if not locked:
            await ctx.access.failures.fail(ident.ip)
        ctx.counters.refused_key_checks += 1
        raise HttpError(401, "unauthorized", "That key is not valid here.")
    return True


async def check(ctx: Context, req: Request, send: Send) -> None:
    q = req.query
    room_id = room_param(req)
    ident = ctx.identity.resolve(req)
    auth = _vouching_header(ctx, req)
    vouched = auth is not None and await _vouched_key(ctx, auth, ident)
    if vouched:
        vouched_ip = valid_ip(q.get("ip") or "")
        if vouched_ip is None:
            raise HttpError(400, "bad_request", "A vouched check names the visitor: ?ip=<address>&agent=<User-Agent>.")
        ident = Identity(vouched_ip, vouched_ip, ident.scheme, False, "", (q.get("agent") or "")[:512])
        allowed, limit_headers = ctx.budgets["check_vouched"].take(vouched_ip)
        if not allowed:
            ctx.counters.rate_limited_checks += 1
            raise HttpError(
                429,
                "rate_limited",
                "Too many checks for this visitor; slow down.",
                headers=[(k.decode(), v.decode()) for k, v in limit_headers],
            )
    else:
        limit_headers = _limit(ctx, "check", ident)
    down = backend_down.refusal(ctx, req, room_id, lambda: ctx.identity.public_base(req), q.get("url"), limit_headers)
    if down is not None:  # Valkey unreachable: answered at once, per the room's onBackendDown
        raise down
    policy = await ctx.store.room_policy(room_id)  # cached per config version: no store round trip
    if policy is None:
        ctx.counters.unknown_room_checks += 1
        raise HttpError(404, "no_room", f"No room with id {room_id!r}.", roomId=room_id)
    url = q.get("url") or None
    if url is not None and (len(url) > MAX_URL or urlsplit(url).scheme not in ("http", "https")):
        raise HttpError(400, "invalid_url", "url must be the absolute http(s) address of the page.")
    if url is None:
        ctx.counters.unscoped_checks += 1
    wait_param = q.get("wait")
    if wait_param not in (None, "0", "1"):
        raise HttpError(400, "bad_request", "wait must be 1 (describe the wait of a refused visitor) or 0.")
    describe = wait_param == "1"
    cors = _door_cors(ctx, req, policy)
    rule = None  # a room without access rules pays nothing for them on its door check
    if policy.access_rules:
        rule = await ctx.access_gate.judge(policy, req, ident, path_of(url), vouched=vouched)
    if rule is not None and rule.action == "block":
        raise access_blocked(room_id, [*limit_headers, *cors])
    if rule is not None and rule.action == "bypass":  # let through: no place taken, no door key
        bypass = {"admit": True, "roomId": room_id, "state": "bypass", "reason": "access_bypass", "accessRule": rule.id}
        await send_json(send, 200, {**bypass, "doorKey": None, "sessionExpiresAt": None}, [*limit_headers, *cors])
        return
    token = q.get(cookies.TOKEN_PARAM) or _cookie_ticket(req, room_id)
    presented, _ = ctx.read_ticket(room_id, token)
    dk = q.get("dk") or req.cookies.get(cookies.DOOR_KEY + room_id)
    result = await door_check(ctx, req, ident, room_id, presented, dk, url)
    headers = [*limit_headers, *cors]
    if result.admit:
        if result.door_key:
            headers.append(
                cookie_header(
                    cookies.DOOR_KEY + room_id, result.door_key, max_age=None, secure=ctx.identity.secure(ident)
                )
            )
        payload: dict[str, Any] = {
            "admit": True,
            "roomId": room_id,
            "state": result.state,
            "doorKey": result.door_key,
            "sessionExpiresAt": result.session_expires_ms,
        }
    else:
        wait = f"{ctx.identity.public_base(req)}/w/{quote(room_id)}"
        if url is not None:
            wait += "?" + urlencode({"qm_return": url})
        payload = {"admit": False, "roomId": room_id, "reason": result.reason, "waitUrl": wait}
        if describe:  # ?wait=1: the gated wait a connector hands a request that asked for JSON
            view = None
            if presented is not None:
                client = ident.client(req.cookies.get(cookies.SESSION + room_id))
                view = await ctx.store.status(room_id, client, presented)
            payload["wait"] = gated_wait.body(room_id, result.reason, wait, view)
    if ctx.passes is not None:
        await _edge_pass(ctx, req, room_id, presented, result, dk, vouched, payload, headers)
    await send_json(send, 200, payload, headers)


async def _edge_pass(
    ctx: Context,
    req: Request,
    room_id: str,
    presented: Presented | None,
    result: CheckResult,
    dk: str | None,
    vouched: bool,
    payload: dict[str, Any],
    headers: list[tuple[bytes, bytes]],
) -> None:
    """PASS_SIGNING=ed25519: a connector's admitting check gets an edge pass (``edgePass``, ``qmp_<room>``);
    a pass the check carried and the queue would refuse is named (``edgePassRefused``) and cleared."""
    secure = ctx.identity.secure(ctx.identity.resolve(req))
    shown = passkeys.presented(req, room_id)
    if shown:
        why = await passkeys.refusal(ctx, room_id, shown, door_hash(dk))
        if why is not None:
            payload["edgePassRefused"] = why
            ctx.counters.refused_edge_passes += 1
    issued = None
    if vouched and result.admit:
        issued = passkeys.issue(ctx, room_id, presented, result, door_hash(result.door_key or dk))
    if issued is not None:
        token, expires_ms = issued
        payload["edgePass"], payload["edgePassExpiresAt"] = token, expires_ms
        age = max(1, (expires_ms - ctx.clock.wall_ms()) // 1000)
        headers.append(cookie_header(cookies.EDGE_PASS + room_id, token, max_age=age, secure=secure))
    elif shown:
        headers.append(cookie_header(cookies.EDGE_PASS + room_id, "", max_age=0, secure=secure))


def _door_cors(ctx: Context, req: Request, policy: RoomPolicy) -> list[tuple[bytes, bytes]]:
    """The tag calls /api/check cross-origin: answer CORS only for an origin the room lists.

    tagOrigins (null: returnOrigins) plus the target's own origin. Refusals are counted per (room, origin).
    """
    origin = req.header(b"origin")
    if not origin or origin == "null":
        return []
    if not policy.tag_allowed(origin):
        key = (policy.room_id, origin[:200])
        refused = ctx.counters.refused_origin_checks
        if key in refused or len(refused) < 10_000:
            refused[key] = refused.get(key, 0) + 1
        raise HttpError(
            403, "origin_not_allowed", "This page's origin is not in the room's tagOrigins; the tag fails open."
        )
    return [
        (b"access-control-allow-origin", origin.encode("latin-1")),
        (b"access-control-allow-credentials", b"true"),
    ]  # no Vary: the answer is no-store, so no cache keys it


async def verify(ctx: Context, req: Request, send: Send) -> None:
    """GET /api/verify: does this Public API key work here? (what a connector's installer asks)."""
    ident = ctx.identity.resolve(req)
    try:
        auth = _vouching_header(ctx, req)
        vouched = auth is not None and await _vouched_key(ctx, auth, ident)
    except HttpError as err:
        if err.status != 401:  # a query string that cannot be parsed is the caller's 400, not a refused key
            raise
        problem = "Public API key sent in the URL" if err.code == "credential_in_query" else "the key was refused"
        await send_json(
            send,
            401,
            {
                "ok": False,
                "keyAccepted": False,
                "keyInUrl": err.code == "credential_in_query",
                "code": err.code,
                "problems": [problem],
            },
        )
        return
    if not vouched:
        await send_json(
            send,
            401,
            {
                "ok": False,
                "keyAccepted": False,
                "keyInUrl": False,
                "code": "unauthorized",
                "problems": ["No key: send Authorization: Bearer <PUBLIC_API_KEY>"],
            },
        )
        return
    problems = [] if ctx.settings.public_api_key else ["PUBLIC_API_KEY is not set: the ADMIN_KEY was used"]
    out: dict[str, Any] = {"ok": True, "keyAccepted": True, "keyInUrl": False, "version": ctx.version}
    room_id = req.query.get("roomId")
    if room_id:  # ok only when the room is there (and a given origin may call it)
        out["room"] = room = await _verify_room(ctx, room_id[:200], req.query.get("origin"))
        if not room["exists"]:
            out["ok"] = False
            problems.append(f"No room with id {room_id[:80]!r}")
        elif room.get("originAllowed") is False:
            out["ok"] = False
            problems.append(f"{room['origin']} is not in the room's tagOrigins: a tag on it fails open")
    out["problems"] = problems
    await send_json(send, 200, out)


async def _verify_room(ctx: Context, room_id: str, origin: str | None) -> dict[str, Any]:
    """What a connector's installer needs to know of its room: that it exists, whether the queue serves it
    inline, and the origins a tag may call from (tagOrigins, or returnOrigins when that is null, and the
    target's own origin always); given ``origin``, whether a tag on that origin is answered
    (``originAllowed``) and whether the waiting room sends a visitor back to a page on it (``returnAllowed``:
    the target's origin or returnOrigins; a connector's own origin must be, or its admitted visitors land
    on targetUrl instead)."""
    policy = await ctx.store.room_policy(room_id)
    if policy is None:
        return {"id": room_id, "exists": False}
    room = await ctx.store.get_room(room_id)
    target = origin_of(policy.target_url)
    origins = [str(p) for p in policy.tag_origins]
    if target is not None:
        origins.insert(0, _origin_text(*target))
    out: dict[str, Any] = {
        "id": room_id,
        "exists": True,
        "inline": bool(room.get("proxyOrigin")),
        "targetUrl": policy.target_url,
        "tagOrigins": origins,
    }
    if origin:
        out["origin"] = origin[:200]
        out["originAllowed"] = policy.tag_allowed(origin[:200])
        out["returnAllowed"] = policy.return_allowed(origin[:200])
    return out


def _origin_text(scheme: str, host: str, port: int) -> str:
    default = {"http": 80, "https": 443}.get(scheme)
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown}" + ("" if port == default else f":{port}")


async def qm_js(ctx: Context, req: Request, send: Send) -> None:
    await send_response(
        send,
        200,
        asset.qm_js(),
        [
            (b"content-type", b"text/javascript; charset=utf-8"),
            (b"cache-control", b"public, max-age=300"),
            (b"access-control-allow-origin", b"*"),
        ],
        req.method == "HEAD",
    )


__all__ = ["JSON_TYPE", "check", "events", "join", "qm_js", "status"]

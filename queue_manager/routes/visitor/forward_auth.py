"""``GET /api/gate``: the door check for a reverse proxy's forward-auth hook (nginx ``auth_request``,
Caddy ``forward_auth``, HAProxy's Lua action, Traefik ``forwardAuth``).

The proxy asks once per request of the visitor's, carrying the original request's method, host and URI
in headers, the visitor's cookies and address, and the room's Public API key as a Bearer. The answer is
the same door check ``/api/check`` makes (access rules, the door key's replay, the full check), told in
status codes a proxy acts on:

* ``200`` (empty): let the request through. The cookies the visitor must keep come as ``Set-Cookie``
  and again one per header, ``X-QM-Set-Cookie-1`` .. ``-N``, for a proxy that copies only the first
  ``Set-Cookie`` of a forward-auth answer (nginx).
* ``401`` (``?deny=401``, the default, for nginx) or ``302`` (``?deny=302``, for Caddy and Traefik, which
  hand a non-2xx answer to the visitor as it is): send the visitor to ``Location`` (also
  ``X-QM-Redirect``): the room's waiting page, or, when the visitor came back from it with
  ``qm_token``, the same address without it (with the ticket's cookie set).
* ``403``: an access rule blocks the request, or (nginx, ``deny=401``) the store is unreachable and the
  room fails closed; ``X-QM-Decision`` says which. With ``deny=302`` that second case is a ``503`` page.

``X-QM-Decision`` names every answer: ``admit``, ``bypass``, ``static``, ``open`` (the store is
unreachable and the room fails open), ``wait``, ``handoff``, ``blocked``, ``closed``.
"""

from __future__ import annotations

from urllib.parse import quote, urlencode, urlsplit

from queue_manager.context import Context
from queue_manager.http import cookies, static_paths
from queue_manager.http.wire import HttpError, Request, Send, cookie_header
from queue_manager.invitation import looks_like_invitation
from queue_manager.routes.visitor import backend_down
from queue_manager.routes.visitor.api import MAX_URL, _vouched_key, _vouching_header, room_param
from queue_manager.routes.visitor.door import door_check
from queue_manager.services.access_gate import path_of
from queue_manager.services.identity import Identity, valid_host, valid_ip
from queue_manager.store.base import StoreUnavailable

Headers = list[tuple[bytes, bytes]]

#: where each proxy puts the original request (nginx: as its configuration sets them; Caddy, Traefik and the
#: shipped HAProxy Lua: the X-Forwarded-* names), first found wins
METHOD_HEADERS = (b"x-original-method", b"x-forwarded-method")
URI_HEADERS = (b"x-original-uri", b"x-forwarded-uri")
HOST_HEADERS = (b"x-original-host", b"x-forwarded-host")
DENY_STATUSES = {"401": 401, "302": 302}
CLOSED_PAGE = (
    b"<!doctype html><meta charset=utf-8><title>Please come back shortly</title>"
    b"<h1>Please come back shortly</h1><p>The waiting room cannot be reached right now.</p>"
)


def _first(req: Request, names: tuple[bytes, ...]) -> str | None:
    for name in names:
        value = req.headers.get(name)
        if value:
            return value.decode("latin-1").split(",", 1)[0].strip()
    return None


def visitor_address(req: Request) -> str | None:
    """The visitor's address as the proxy saw it: ``X-Real-IP``, else the last ``X-Forwarded-For`` entry
    (the one the proxy itself appended)."""
    real = req.headers.get(b"x-real-ip")
    if real:
        return valid_ip(real.decode("latin-1"))
    chain = req.headers.get(b"x-forwarded-for")
    if chain:
        return valid_ip(chain.decode("latin-1").rsplit(",", 1)[-1])
    return None


def _original(req: Request) -> tuple[str, str, str, str]:
    """The original request: method, scheme, host and URI (path and query), or 400 bad_request."""
    method = (_first(req, METHOD_HEADERS) or "GET").upper()
    uri = _first(req, URI_HEADERS) or ""
    host = valid_host(_first(req, HOST_HEADERS) or "")
    proto = (_first(req, (b"x-forwarded-proto",)) or "http").lower()
    if not uri.startswith("/") or host is None or proto not in ("http", "https") or not method.isalpha():
        raise HttpError(
            400,
            "bad_request",
            "A gate check carries the original request: X-Original-URI or X-Forwarded-Uri (a path), "
            "X-Forwarded-Host (a host) and X-Forwarded-Proto (http or https).",
        )
    return method, proto, host, uri


def _split_token(uri: str) -> tuple[str, str | None, str | None]:
    """The URI without its ``qm_token`` parameters, and what one carried: the waiting page's hand-off (a
    ticket), or an invitation (a JWS), which goes to the waiting page and never to the app."""
    path, _, query = uri.partition("?")
    kept, token = [], None
    for part in query.split("&") if query else ():
        if part.startswith(cookies.TOKEN_PARAM + "="):
            token = token or part[len(cookies.TOKEN_PARAM) + 1 :]
        elif part:
            kept.append(part)
    clean = path + ("?" + "&".join(kept) if kept else "")
    if token is not None and looks_like_invitation(token):
        return clean, None, token
    return clean, token, None


def _cookie_copies(headers: Headers) -> Headers:
    """Each Set-Cookie again in its own numbered header, for nginx's ``auth_request_set``."""
    out = list(headers)
    n = 0
    for name, value in headers:
        if name == b"set-cookie":
            n += 1
            out.append((b"x-qm-set-cookie-%d" % n, value))
    return out


async def _answer(ctx: Context, send: Send, status: int, decision: str, headers: Headers, body: bytes = b"") -> None:
    gate_checks = ctx.counters.gate_checks
    gate_checks[decision] = gate_checks.get(decision, 0) + 1
    head = [
        (b"x-qm-decision", decision.encode()),
        (b"cache-control", b"no-store"),
        (b"content-length", str(len(body)).encode()),
        *_cookie_copies(headers),
    ]
    if body:
        head.append((b"content-type", b"text/html; charset=utf-8"))
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


async def _redirect(ctx: Context, send: Send, deny: int, decision: str, location: str, headers: Headers) -> None:
    to = location.encode("latin-1")
    await _answer(ctx, send, deny, decision, [*headers, (b"location", to), (b"x-qm-redirect", to)])


async def _store_down(ctx: Context, send: Send, deny: int, err: HttpError) -> None:
    """The store cannot answer: let through or refuse, per the room's onBackendDown (closed when unknown)."""
    if err.extra.get("onBackendDown") == "open":
        await _answer(ctx, send, 200, "open", [])
        return
    # when the store is expected back (the breaker's hold), else a few seconds
    retry = next((v for k, v in err.headers if k.lower() == "retry-after"), "5").encode()
    if deny == 401:
        await _answer(ctx, send, 403, "closed", [(b"retry-after", retry)])
    else:
        await _answer(ctx, send, 503, "closed", [(b"retry-after", retry)], CLOSED_PAGE)


async def gate_check(ctx: Context, req: Request, send: Send) -> None:
    """May the request a proxy holds go on to the app? See the module's docstring for the answers."""
    q = req.query
    room_id = room_param(req)
    deny = DENY_STATUSES.get(q.get("deny") or "401")
    if deny is None:
        raise HttpError(400, "bad_request", "deny must be 401 (nginx, HAProxy) or 302 (Caddy, Traefik).")
    auth = _vouching_header(ctx, req)
    if auth is None:
        raise HttpError(401, "unauthorized", "A gate check sends the Public API key as Authorization: Bearer.")
    await _vouched_key(ctx, auth, ctx.identity.resolve(req))
    method, proto, host, uri = _original(req)
    ip = visitor_address(req)
    if ip is None:
        raise HttpError(400, "bad_request", "A gate check names the visitor: X-Real-IP or X-Forwarded-For.")
    agent = (req.header(b"user-agent") or "")[:512]
    ident = Identity(ip, ip, proto, False, "", agent)
    allowed, limits = ctx.budgets["check_vouched"].take(ip)
    if not allowed:
        ctx.counters.rate_limited_checks += 1
        spent = [(k.decode(), v.decode()) for k, v in limits]
        raise HttpError(429, "rate_limited", "Too many checks for this visitor; slow down.", headers=spent)
    path = uri.split("?", 1)[0]
    if static_paths.skips_gate(method, path.encode("latin-1"), req.headers.get(b"sec-fetch-dest")):
        await _answer(ctx, send, 200, "static", [])
        return
    clean, token, invite = _split_token(uri)
    url = f"{proto}://{host}{clean}"
    if len(url) > MAX_URL or urlsplit(url).scheme not in ("http", "https"):
        raise HttpError(400, "invalid_url", "The original request's address is too long.")
    base = ctx.identity.public_base(req)
    down = backend_down.refusal(ctx, req, room_id, lambda: base, url, [])
    if down is not None:
        await _store_down(ctx, send, deny, down)
        return
    try:
        await _check(ctx, req, send, deny, room_id, ident, (method, clean, url, token, invite))
    except StoreUnavailable:
        now_down = backend_down.refusal(ctx, req, room_id, lambda: base, url, [])
        await _store_down(ctx, send, deny, now_down or HttpError(503, "storage_unavailable", "Unreachable storage."))


async def _check(
    ctx: Context,
    req: Request,
    send: Send,
    deny: int,
    room_id: str,
    ident: Identity,
    asked: tuple[str, str, str, str | None, str | None],
) -> None:
    method, clean, url, query_token, invite = asked
    policy = await ctx.store.room_policy(room_id)  # cached per config version: no store round trip
    if policy is None:
        ctx.counters.unknown_room_checks += 1
        raise HttpError(404, "no_room", f"No room with id {room_id!r}.", roomId=room_id)
    rule = await ctx.access_gate.judge(policy, req, ident, path_of(url), vouched=True)
    if rule is not None and rule.action == "block":
        await _answer(ctx, send, 403, "blocked", [])
        return
    if rule is not None and rule.action == "bypass":
        await _answer(ctx, send, 200, "bypass", [])
        return
    token = query_token or req.cookies.get(cookies.TICKET + room_id)
    presented, _ = ctx.read_ticket(room_id, token)
    dk = req.cookies.get(cookies.DOOR_KEY + room_id)
    result = await door_check(ctx, req, ident, room_id, presented, dk, url)
    secure = ctx.identity.secure(ident)
    if not result.admit:
        wait = f"{ctx.identity.public_base(req)}/w/{quote(room_id, safe='')}?" + urlencode({"qm_return": url})
        if invite is not None:  # the invitation goes to the waiting page, which reads it at the join
            wait += "&" + urlencode({cookies.TOKEN_PARAM: invite})
        await _redirect(ctx, send, deny, "wait", wait, [])
        return
    headers: Headers = []
    if result.door_key:
        headers.append(cookie_header(cookies.DOOR_KEY + room_id, result.door_key, max_age=None, secure=secure))
    handoff = query_token is not None and presented is not None
    if (handoff or invite is not None) and method in ("GET", "HEAD"):
        if handoff and query_token is not None:
            # the waiting page's hand-off: the token goes into the cookie and out of the app's URLs and logs
            age = ctx.settings.queue_cookie_max_age_sec
            headers.append(cookie_header(cookies.TICKET + room_id, query_token, max_age=age, secure=secure))
        # (an invitation followed by a visitor already inside: the app never sees it either)
        location = clean if not clean.startswith(("//", "/\\")) else "/" + clean.lstrip("/\\")
        await _redirect(ctx, send, deny, "handoff", location, headers)
        return
    await _answer(ctx, send, 200, "admit", headers)

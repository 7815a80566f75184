"""Who is calling the admin API, judged once per request.

Order: an address locked out by ADMIN_AUTH_FAIL_PER_MIN is answered 429 before any credential is
checked; a request with ``Authorization`` is judged on that header alone; otherwise the
``qm_console`` cookie (and a change made with it needs ``X-QM-CSRF``); otherwise, on the event
stream only, a single-use ``?ticket=``. No credential at all is 401 and is not counted. A wrong
credential that finds the address already locked out on the fleet's count (on an instance that had
not yet learnt of the lockout) is answered the same 429.
"""

from __future__ import annotations

from queue_manager.access.principal import Grant, Principal
from queue_manager.context import Context
from queue_manager.http import cookies
from queue_manager.http.wire import HttpError, Request
from queue_manager.services.identity import Identity

CONSOLE_COOKIE = cookies.CONSOLE
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def console_cookie_path(req: Request) -> str:
    """The path qm_console is scoped to: ``/api/admin``, or ``/__qm/api/admin`` when the console is used under an
    inline host's prefix (the inline front set ``req.prefix``; the browser sends the cookie only to the paths it
    asked under). A clear on another path than the one the cookie was set with would leave it in place."""
    return cookies.console_path(req.prefix)


def clear_console_cookie(path: str = cookies.CONSOLE_PATH) -> tuple[str, str]:
    return "Set-Cookie", f"{CONSOLE_COOKIE}=; Path={path}; Max-Age=0; HttpOnly; SameSite=Strict"


def _unauthorized(message: str, *, clear_cookie: str | None = None) -> HttpError:
    """A 401; ``clear_cookie``: the path of the qm_console cookie that failed, which the answer clears."""
    headers = [("WWW-Authenticate", 'Bearer realm="queue-manager"')]
    if clear_cookie is not None:
        headers.append(clear_console_cookie(clear_cookie))
    return HttpError(401, "unauthorized", message, headers=headers)


def too_many_failures(retry: int) -> HttpError:
    return HttpError(
        429,
        "too_many_auth_failures",
        "Too many failed sign-ins from your address. Try again later.",
        headers=[("Retry-After", str(retry))],
    )


async def failed(ctx: Context, ip: str, refusal: HttpError) -> HttpError:
    """Count a wrong credential: ``refusal``, or the 429 when the address was already locked out."""
    retry = await ctx.access.failures.fail(ip)
    return refusal if retry is None else too_many_failures(retry)


async def authenticate(ctx: Context, req: Request, ident: Identity, *, allow_ticket: bool = False) -> Principal:
    access = ctx.access
    auth = req.header(b"authorization")
    cookie = req.cookies.get(CONSOLE_COOKIE)
    ticket = req.query.get("ticket") if allow_ticket else None
    presented = bool(auth) or bool(cookie) or bool(ticket)
    if presented:
        retry = await access.failures.locked(ident.ip)
        if retry is not None:
            raise too_many_failures(retry)
    if auth:
        scheme, _, credential = auth.partition(" ")
        credential = credential.strip()
        if scheme.lower() != "bearer" or not credential:
            raise await failed(ctx, ident.ip, _unauthorized("Use Authorization: Bearer <key>."))
        principal = await access.from_bearer(credential)
        if principal is None:
            raise await failed(ctx, ident.ip, _unauthorized("That key is not valid here."))
        return principal
    if cookie:
        principal = await access.from_session(cookie)
        if principal is None:
            raise await failed(
                ctx,
                ident.ip,
                _unauthorized("Your console session has ended. Sign in again.", clear_cookie=console_cookie_path(req)),
            )
        if req.method not in SAFE_METHODS:
            site = req.header(b"sec-fetch-site")
            if not req.header(b"x-qm-csrf") or (site is not None and site != "same-origin"):
                raise HttpError(403, "csrf_required", "A change made with the console session needs X-QM-CSRF.")
        return principal
    if ticket:
        principal = await access.spend_ticket(ticket)
        if principal is None:
            raise await failed(ctx, ident.ip, _unauthorized("That stream ticket is spent, expired or revoked."))
        return principal
    raise _unauthorized("This route needs Authorization: Bearer <key> or a console session.")


def require(principal: Principal, grant: Grant) -> None:
    if not principal.may(grant):
        raise HttpError(
            403,
            "insufficient_role",
            f"Your credential ({principal.role}) may not do this; it needs the {grant} grant.",
            role=principal.role,
        )

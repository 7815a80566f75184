"""Turn e-mails, the visitor's side: ``POST``, ``GET`` and ``DELETE /api/notify``.

A visitor waiting in line leaves an address to be e-mailed at when their turn comes (one per ticket: a
new one replaces the old), reads whether one is kept, or takes it back. The ticket is the one the waiting
page's other calls use (``token`` in the body or query, else the ``qm_<room>`` cookie). The address goes
to the address book (``sidestores/mailbook/``: this process or Valkey, never PostgreSQL) with the language
the page spoke and the link the e-mail carries; the leader's job (``jobs/turn_mail.py``) sends it.

The link is the waiting page, ``<public base>/w/<room>`` (``IdentityResolver.public_base``: PUBLIC_URL, a
listed proxy's X-Forwarded-Host, else Host), as ``/api/check`` hands it out. Signed up from an inline
host's page (under ``/__qm/``) it is the room's ``targetUrl`` instead: there the site's own pages are the
waiting page, and ``/w/`` belongs to the app.

Refusals: ``404 email_notify_off`` while the server offers no turn e-mails (EMAIL_NOTIFY off, or no SMTP
settings), ``400 invalid_email`` (``field: "email"``), ``409 not_in_line`` (no ticket waiting in line),
``429 rate_limited`` past NOTIFY_LIMIT_PER_MIN per address (sign-ups and cancellations).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

from queue_manager.context import Context
from queue_manager.engine.visitor import Presented
from queue_manager.http import cookies
from queue_manager.http.language import pick_language
from queue_manager.http.wire import HttpError, Request, Send, send_json
from queue_manager.routes.visitor.api import room_param
from queue_manager.services import ratelimit
from queue_manager.sidestores.mailbook.base import AddressBook, Entry, Place
from queue_manager.web import asset

MAX_ADDRESS = 254
INLINE_PREFIX = "/__qm"  # an inline host's queue surface (inline/surface.py; http sits below inline)
_LOCAL_RE = re.compile(r"^[A-Za-z0-9!#$%&'*+/=?^_`{|}~.-]{1,64}$")
_LABEL_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")


def _bad_address(why: str) -> HttpError:
    return HttpError(
        400, "invalid_email", f"email must be an e-mail address like name@example.com ({why}).", field="email"
    )


def check_address(value: Any) -> str:
    """The address to keep (domain lower-cased, an internationalised domain in its ASCII form), or
    ``400 invalid_email``. A plain address only: no display name, no comments, no quoted local part."""
    if not isinstance(value, str):
        raise _bad_address("a string is required")
    address = value.strip()
    if not address or len(address) > MAX_ADDRESS:
        raise _bad_address(f"1 to {MAX_ADDRESS} characters")
    local, at, domain = address.rpartition("@")
    if not at or not _LOCAL_RE.match(local) or local.startswith(".") or local.endswith(".") or ".." in local:
        raise _bad_address("the part before @ is not a plain mailbox name")
    try:
        ascii_domain = domain.encode("idna").decode("ascii").lower()
    except (UnicodeError, ValueError):
        raise _bad_address("the part after @ is not a domain name") from None
    labels = ascii_domain.split(".")
    if len(labels) < 2 or not all(_LABEL_RE.match(label) for label in labels) or labels[-1].isdigit():
        raise _bad_address("the part after @ is not a domain name")
    address = f"{local}@{ascii_domain}"
    if len(address) > MAX_ADDRESS:
        raise _bad_address(f"1 to {MAX_ADDRESS} characters")
    return address


def masked(address: str) -> str:
    """What the page shows back: ``v•••@example.com`` (never the whole address)."""
    local, _, domain = address.rpartition("@")
    return f"{local[:1]}•••@{domain}"


def _book(ctx: Context) -> AddressBook:
    if not ctx.settings.turn_emails or ctx.addresses is None:
        raise HttpError(404, "email_notify_off", "This server does not offer turn e-mails.")
    return ctx.addresses


def _limit(ctx: Context, req: Request) -> list[tuple[bytes, bytes]]:
    allowed, headers = ctx.budgets["notify"].take(ctx.identity.resolve(req).ip)
    if not allowed:
        raise ratelimit.refused(headers)
    return headers


def _presented(ctx: Context, req: Request, room_id: str, token: Any) -> Presented | None:
    if token is not None and not isinstance(token, str):
        raise HttpError(400, "bad_request", "token must be a string.")
    presented, _ = ctx.read_ticket(room_id, token or req.cookies.get(cookies.TICKET + room_id))
    return presented if presented is not None and presented.n is not None else None


def _answer(room_id: str, place: Place | None, entry: Entry | None) -> dict[str, Any]:
    return {
        "roomId": room_id,
        "ticket": None if place is None else place.n,
        "signedUp": entry is not None,
        "address": None if entry is None else masked(entry.address),
        "lang": None if entry is None else entry.lang,
        "sent": entry is not None and entry.sent,
    }


def _not_in_line(room_id: str, state: str | None) -> HttpError:
    return HttpError(
        409,
        "not_in_line",
        "Only a place waiting in line can be e-mailed when its turn comes.",
        roomId=room_id,
        state=state,
    )


async def _link(ctx: Context, req: Request, room_id: str) -> str:
    """Where the e-mail sends the visitor back to (see the module's notes)."""
    asked: str = req.scope.get("path", req.path)
    if asked.startswith(INLINE_PREFIX + "/"):
        policy = await ctx.store.room_policy(room_id)
        if policy is not None:
            return policy.target_url
    return f"{ctx.identity.public_base(req)}/w/{quote(room_id)}"


async def sign_up(ctx: Context, req: Request, send: Send) -> None:
    """POST /api/notify {roomId, email, token?, lang?}: e-mail this ticket's holder when the turn comes."""
    book = _book(ctx)
    body = await req.json_object()
    room_id = room_param(req, body.get("roomId"))
    headers = _limit(ctx, req)
    address = check_address(body.get("email"))
    presented = _presented(ctx, req, room_id, body.get("token"))
    if not await ctx.store.room_exists(room_id):
        raise HttpError(404, "no_room", f"No room with id {room_id!r}.", roomId=room_id)
    if presented is None or presented.n is None:
        raise _not_in_line(room_id, None)
    ident = ctx.identity.resolve(req)
    view = await ctx.store.status(room_id, ident.client(req.cookies.get(cookies.SESSION + room_id)), presented)
    if view.state != "waiting" or view.ticket != presented.n or view.gen != presented.gen:
        raise _not_in_line(room_id, view.state)
    lang = body.get("lang")
    if lang not in asset.LANGUAGES:
        lang = pick_language(req)
    place = Place(room_id, presented.gen, presented.n)
    entry = Entry(place, address, str(lang), await _link(ctx, req, room_id), ctx.clock.wall_ms())
    s = ctx.settings
    await book.put(entry, s.queue_cookie_max_age_sec * 1000 + s.lapsed_ttl_ms)
    await send_json(send, 200, _answer(room_id, place, entry), headers)


async def read(ctx: Context, req: Request, send: Send) -> None:
    """GET /api/notify?roomId=&token=: whether this ticket has an address kept (shown masked)."""
    book = _book(ctx)
    room_id = room_param(req)
    presented = _presented(ctx, req, room_id, req.query.get("token"))
    if presented is None or presented.n is None:
        await send_json(send, 200, _answer(room_id, None, None))
        return
    place = Place(room_id, presented.gen, presented.n)
    await send_json(send, 200, _answer(room_id, place, await book.get(place)))


async def cancel(ctx: Context, req: Request, send: Send) -> None:
    """DELETE /api/notify?roomId=&token=: forget this ticket's address (no error when there was none)."""
    book = _book(ctx)
    room_id = room_param(req)
    headers = _limit(ctx, req)
    presented = _presented(ctx, req, room_id, req.query.get("token"))
    removed = False
    place = None
    if presented is not None and presented.n is not None:
        place = Place(room_id, presented.gen, presented.n)
        removed = await book.remove(place)
    await send_json(send, 200, {**_answer(room_id, place, None), "removed": removed}, headers)

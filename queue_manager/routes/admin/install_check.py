"""The console's install verifier: is a room's tag on this page, and will the queue answer it there?

``POST /api/admin/rooms/<room>/install-check`` with ``{"url": …}`` fetches the page (``pagefetch.py``: the
private-address rule on every hop, a time limit, a size limit) and answers, for the page's origin:

* whether a ``qm.js`` script tag is on the page and whether it names this room (``data-room``);
* whether the room answers a tag on that origin (its targetUrl's origin, or tagOrigins, which is
  returnOrigins while it is null), and whether refusals for that origin have been counted;
* whether a visitor admitted from that page is sent back to it (returnOrigins, or the targetUrl's origin)
  or lands on the room's targetUrl instead, which is what a connector's visitors meet too.

``POST /api/admin/rooms/<room>/tag-origins`` with ``{"origin": …}`` is the one-click fix: it adds that
origin to tagOrigins and to nothing else (a null tagOrigins becomes returnOrigins plus the origin, so
nothing the room answered before stops being answered), as an audited room update. Unblocking a tag is not
a decision to widen where visitors may be redirected, so returnOrigins is never touched here.
"""

from __future__ import annotations

from html.parser import HTMLParser
from typing import Any
from urllib.parse import urlsplit

from queue_manager.engine.errors import EngineError
from queue_manager.engine.model import ORIGINS_MAX
from queue_manager.engine.origins import origin_allowed, origin_of, parse_origin_pattern, url_host
from queue_manager.http.wire import HttpError, send_json
from queue_manager.routes.admin import pagefetch
from queue_manager.routes.call import Call
from queue_manager.routes.health import fleet_counters

MAX_URL = 2048
MAX_TAGS = 20
_DEFAULT_PORTS = {"http": 80, "https": 443}


def origin_text(origin: tuple[str, str, int]) -> str:
    scheme, host, port = origin
    return f"{scheme}://{url_host(host)}" + ("" if port == _DEFAULT_PORTS.get(scheme) else f":{port}")


class _TagScan(HTMLParser):
    """Every ``<script src=…qm.js>`` on a page, with its ``data-room``; the rest of the page is skipped."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[dict[str, Any]] = []
        self.more = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag != "script":
            return
        values = {k.lower(): (v or "") for k, v in attrs}
        src = values.get("src", "").strip()
        if not src:
            return
        try:
            path = urlsplit(src).path
        except ValueError:
            return
        if not (path == "qm.js" or path.endswith("/qm.js")):
            return
        if len(self.tags) >= MAX_TAGS:
            self.more += 1
            return
        self.tags.append({"src": src[:500], "room": values["data-room"][:200] if "data-room" in values else None})

    handle_startendtag = handle_starttag


def scan_tags(body: bytes, content_type: str) -> list[dict[str, Any]]:
    """The qm.js tags of an HTML page (charset from Content-Type, else UTF-8; bad bytes replaced)."""
    charset = "utf-8"
    for part in content_type.split(";")[1:]:
        key, _, value = part.strip().partition("=")
        if key.lower() == "charset" and value.strip().strip('"'):
            charset = value.strip().strip('"')
    try:
        text = body.decode(charset, errors="replace")
    except LookupError:
        text = body.decode("utf-8", errors="replace")
    scan = _TagScan()
    try:
        scan.feed(text)
        scan.close()
    except (AssertionError, ValueError):  # html.parser gives up on some broken markup: what it read stands
        pass
    return scan.tags


def _page_url(body: dict[str, Any]) -> str:
    url = body.get("url")
    if not isinstance(url, str) or not url.strip():
        raise HttpError(400, "invalid_page_url", "url is required: the address of a page of the site.", field="url")
    url = url.strip()
    if len(url) > MAX_URL or origin_of(url) is None:
        raise HttpError(
            400,
            "invalid_page_url",
            f"url must be an absolute http(s) address of at most {MAX_URL} characters, without a user name "
            "or password (https://www.shop.example/checkout).",
            field="url",
        )
    return url


def _is_html(content_type: str) -> bool:
    kind = content_type.split(";", 1)[0].strip().lower()
    return kind in ("", "text/html", "application/xhtml+xml")


def _only(body: dict[str, Any], name: str) -> dict[str, Any]:
    """A body of the one field ``name`` (or none), else 400 ``unknown_field`` naming the first other."""
    unknown = sorted(k for k in body if k != name)
    if unknown:
        raise HttpError(400, "unknown_field", f"Unknown field {unknown[0]!r}: send only {name}.", field=unknown[0])
    return body


async def install_check(call: Call) -> None:
    ctx = call.ctx
    room_id = call.req.params["room"]
    body = _only(await call.req.json_object(), "url")
    url = _page_url(body)
    policy = await ctx.store.room_policy(room_id)
    if policy is None:
        raise HttpError(404, "no_room", f"No room with id {room_id!r}.")
    room = await ctx.store.get_room(room_id)

    inline = bool(room.get("proxyOrigin"))
    fetched = await pagefetch.fetch(url, allow_private=ctx.settings.proxy_allow_private)
    page = fetched.final_url if fetched.refused is None and fetched.error is None else url
    page_origin = origin_of(page) or origin_of(url)
    assert page_origin is not None  # _page_url and the redirect rule let no other URL through
    origin = origin_text(page_origin)

    problems: list[str] = []
    notes: list[str] = []
    if inline:
        notes.append(
            "This room is served inline: the queue answers for its host itself, so its pages need no tag. "
            "What follows is about a tag or a connector on another origin."
        )
    tag: dict[str, Any] | None = None
    if fetched.refused is not None:
        problems.append(f"The page was not fetched: {fetched.refused}.")
    elif fetched.error is not None:
        problems.append(f"The page was not fetched: {fetched.error}.")
    elif fetched.status is not None and fetched.status >= 300:
        problems.append(f"The page answered HTTP {fetched.status}, so it could not be read for the tag.")
    elif not _is_html(fetched.content_type):
        problems.append(f"The page is {fetched.content_type.split(';', 1)[0]}, not HTML: no tag can be on it.")
    else:
        tags = scan_tags(fetched.body, fetched.content_type)
        mine = [t for t in tags if t["room"] == room_id]
        tag = {"found": bool(tags), "namesRoom": bool(mine), "tags": tags}
        if inline:
            pass  # an inline room's pages need no tag: what was found is reported, not judged
        elif not tags:
            where = " in the first megabyte of the page" if fetched.truncated else ""
            problems.append(
                f'No qm.js script tag{where}. Add <script src="…/qm.js" data-room="{room_id}" async></script> '
                "to the page's <head>; a site behind a connector (Node, Worker, WordPress) has no tag, which is "
                "expected there."
            )
        elif not mine:
            named = ", ".join(sorted({repr(t["room"]) if t["room"] is not None else "no data-room" for t in tags}))
            problems.append(f"The qm.js tag on the page names {named}, not {room_id!r} (room ids are case-sensitive).")

    target = policy.target_origin
    target_text = origin_text(target) if target is not None else None
    tag_allowed = policy.tag_allowed(origin)
    if target is not None and page_origin == target:
        allowed_by = "targetUrl"
    elif tag_allowed:
        allowed_by = "returnOrigins" if room.get("tagOrigins") is None else "tagOrigins"
    else:
        allowed_by = None
    counters, _ = await fleet_counters(ctx)
    # counted under the Origin header a browser writes for the page, which is how origin_text spells it
    refused = counters.refused_origin_checks.get((room_id, origin), 0)
    if not tag_allowed:
        listed = "tagOrigins" if room.get("tagOrigins") is not None else "tagOrigins (returnOrigins while it is blank)"
        counted = f"; {refused} refused so far" if refused else ""
        problems.append(
            f"{origin} is not in the room's {listed}: a tag on this page is refused and fails open, so the page "
            f"is live and unprotected{counted}."
        )
    return_allowed = origin_allowed(page, policy.target_url, policy.return_origins)
    if not return_allowed:
        notes.append(
            f"{origin} is not in returnOrigins: a visitor admitted from this page is sent to the room's targetUrl "
            f"({policy.target_url}), not back to the page. That is also where a connector (Node, Worker, WordPress) "
            f"on {origin} sends everyone it admits. Add {origin} to returnOrigins if visitors should come back here."
        )
    fix = None
    if not tag_allowed and call.who.may("write"):
        fix = {"addTagOrigin": origin}
    out: dict[str, Any] = {
        "ok": not problems,
        "roomId": room_id,
        "inline": inline,
        "url": url,
        "origin": origin,
        "targetOrigin": target_text,
        "fetch": fetched.as_json(),
        "tag": tag,
        "tagAllowed": tag_allowed,
        "tagAllowedBy": allowed_by,
        "tagOrigins": room.get("tagOrigins"),
        "returnOrigins": room.get("returnOrigins") or [],
        "refusedChecks": refused,
        "refusing": not tag_allowed,
        "returnAllowed": return_allowed,
        "problems": problems,
        "notes": notes,
        "fix": fix,
    }
    await send_json(call.send, 200, out)


async def add_tag_origin(call: Call) -> None:
    ctx = call.ctx
    room_id = call.req.params["room"]
    body = _only(await call.req.json_object(), "origin")
    value = body.get("origin")
    pattern = parse_origin_pattern(value) if isinstance(value, str) else None
    if pattern is None or pattern.wildcard or not isinstance(value, str) or origin_of(value) is None:
        raise HttpError(
            400,
            "invalid_origin",
            "origin must be one bare origin, scheme://host[:port] (https://landing.shop.example); a wildcard is "
            "added in the room's editor.",
            field="origin",
        )
    origin = str(pattern)
    policy = await ctx.store.room_policy(room_id)
    if policy is None:
        raise HttpError(404, "no_room", f"No room with id {room_id!r}.")
    room = await ctx.store.get_room(room_id)
    current = room.get("tagOrigins")
    if policy.tag_allowed(origin):
        await send_json(call.send, 200, {"ok": True, "added": False, "origin": origin, "tagOrigins": current})
        return
    base = list(current) if current is not None else list(room.get("returnOrigins") or [])
    if len(base) >= ORIGINS_MAX:
        raise HttpError(
            400,
            "invalid_origin",
            f"tagOrigins already lists {ORIGINS_MAX} origins, the most a room may have; edit the room to make room.",
            field="origin",
        )
    wanted = [*base, origin]
    try:
        saved, _, changed = await ctx.store.upsert_room({"id": room_id, "tagOrigins": wanted})
    except EngineError:
        await call.audit("room.update", target=room_id, room_id=room_id, ok=False, fields=["tagOrigins"])
        raise
    await call.audit(
        "room.update", target=room_id, room_id=room_id, fields=changed, tagOriginAdded=origin, via="install verifier"
    )
    await send_json(
        call.send, 200, {"ok": True, "added": True, "origin": origin, "tagOrigins": saved.get("tagOrigins")}
    )

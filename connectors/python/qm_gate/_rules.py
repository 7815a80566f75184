"""What the gate decides from a request alone: static subresources, navigations, addresses, cookies, tokens.

The same rules as the queue's own inline gate and its other connectors (Operations Guide, "What skips the
gate"), on a framework-neutral view of the request (:class:`Visit`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from urllib.parse import quote, unquote

STATIC_EXTENSIONS = frozenset(
    {
        # scripts, styles, source maps
        "js", "mjs", "cjs", "css", "map",
        # images
        "png", "jpg", "jpeg", "gif", "webp", "avif", "svg", "ico", "bmp", "apng", "tif", "tiff", "jxl",
        # fonts
        "woff", "woff2", "ttf", "otf", "eot",
        # audio and video
        "mp3", "mp4", "m4a", "m4v", "aac", "flac", "oga", "ogg", "ogv", "opus", "wav", "weba", "webm", "mov",
    }
)  # fmt: skip
BROWSING_DESTS = frozenset({"document", "iframe", "frame", "object", "embed"})
EXPOSE = "X-QM-Queued, X-QM-Failover, Retry-After"
VARY = "Accept, X-Requested-With, X-QM-Accept"  # the same address answers a page or JSON
RETRY_AFTER_SEC = 5
PASS_COOKIE_MAX_AGE_SEC = 86400  # the server's QUEUE_COOKIE_MAX_AGE_SEC default
STATE_OF_REASON = {"waiting": "waiting", "paused": "paused", "at_capacity": "passed", "rate_limited": "rate_limited"}
TOKEN_SHAPE = re.compile(r"^[A-Za-z0-9._~-]{1,4096}$")  # a signed token: nothing a cookie could misread
_INVITATION = re.compile(r"^eyJ[\w-]*\.[\w-]+\.[\w-]+$")
_HOST = re.compile(r"^[A-Za-z0-9.\-]+(:\d{1,5})?$|^\[[0-9A-Fa-f:.]+\](:\d{1,5})?$")
_Q = re.compile(r"^\s*q=([0-9.]+)\s*$", re.I)


@dataclass(slots=True)
class Visit:
    """One request as the gate sees it, whichever server interface brought it."""

    method: str
    path: str  # the path as the visitor sent it (percent-encoded)
    query: str  # the query string without "?"
    scheme: str
    headers: dict[str, str]  # lower-case names; repeated headers joined
    peer: str  # the socket's address
    cookies: dict[str, str] = field(default_factory=dict)

    def header(self, name: str) -> str | None:
        return self.headers.get(name)

    @property
    def target(self) -> str:
        return self.path + (f"?{self.query}" if self.query else "")


def join_headers(pairs: list[tuple[str, str]]) -> dict[str, str]:
    """Header pairs as one value per lower-case name (cookies joined with "; ", others with ", ")."""
    out: dict[str, str] = {}
    for name, value in pairs:
        key = name.lower()
        if key in out:
            out[key] += ("; " if key == "cookie" else ", ") + value
        else:
            out[key] = value
    return out


def parse_cookies(header: str | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in (header or "").split(";"):
        name, eq, value = part.partition("=")
        name = name.strip()
        if eq and name and name not in out:
            out[name] = value.strip()
    return out


def skips_gate(method: str, path: str, sec_fetch_dest: str | None) -> bool:
    """A static subresource: GET/HEAD, a known extension, a plain path, not fetched to be shown as a page."""
    if method not in ("GET", "HEAD"):
        return False
    last = path[path.rfind("/") + 1 :]
    dot = last.rfind(".")
    if dot <= 0 or last[dot + 1 :].lower() not in STATIC_EXTENSIONS:
        return False
    if not path.startswith("/") or any(c in path for c in ";%\\"):
        return False
    closed = path + "/"
    if "/./" in closed or "/../" in closed:
        return False
    return sec_fetch_dest is None or sec_fetch_dest.lower() not in BROWSING_DESTS


def _accept_q(accept: str, media: str) -> float:
    q = 0.0
    for part in accept.split(",")[:20]:
        token, *params = part.split(";")
        if token.strip().lower() != media:
            continue
        q = 1.0
        for p in params:
            m = _Q.match(p)
            if m:
                try:
                    q = float(m.group(1))
                except ValueError:
                    q = 0.0
    return q


def wants_json(visit: Visit) -> bool:
    """X-QM-Accept: json, X-Requested-With: XMLHttpRequest, or an Accept preferring JSON to HTML."""
    if (visit.header("x-qm-accept") or "").strip().lower() == "json":
        return True
    if (visit.header("x-requested-with") or "").strip().lower() == "xmlhttprequest":
        return True
    accept = visit.header("accept") or ""
    json_q = _accept_q(accept, "application/json")
    return json_q > 0 and json_q > _accept_q(accept, "text/html")


def is_navigation(visit: Visit) -> bool:
    """Will a browser show the answer to a person? Fetch Metadata first, Accept: text/html without it."""
    if wants_json(visit):
        return False
    mode, dest = visit.header("sec-fetch-mode"), visit.header("sec-fetch-dest")
    if mode is not None or dest is not None:
        return mode == "navigate" or (dest is not None and dest.lower() in BROWSING_DESTS)
    return "text/html" in (visit.header("accept") or "")


def _plain_ip(address: str) -> str:
    a = address.strip()
    return a[7:] if a.startswith("::ffff:") and "." in a else a


def client_ip(visit: Visit, trust_proxy: int) -> str:
    """The socket's address, or with trust_proxy hops the hop-th X-Forwarded-For entry from the right."""
    forwarded = visit.header("x-forwarded-for") if trust_proxy else None
    if forwarded:
        chain = [s.strip() for s in forwarded.split(",") if s.strip()]
        if chain:
            return _plain_ip(chain[max(len(chain) - trust_proxy, 0)])
    return _plain_ip(visit.peer)


def visitor_url(visit: Visit, trust_proxy: int) -> str:
    """The absolute URL the visitor asked for."""
    scheme = visit.scheme
    host = visit.header("host") or "localhost"
    if trust_proxy:
        proto = (visit.header("x-forwarded-proto") or "").split(",")[0].strip().lower()
        if proto in ("http", "https"):
            scheme = proto
        fwd_host = (visit.header("x-forwarded-host") or "").split(",")[0].strip()
        if _HOST.match(fwd_host):
            host = fwd_host
    return f"{scheme}://{host}{visit.target}"


def hand_off(url: str) -> tuple[str | None, str]:
    """The query's qm_token (the waiting page's hand-off) and the URL without it."""
    q = url.find("?")
    if q < 0 or "qm_token=" not in url[q:]:
        return None, url
    token: str | None = None
    kept: list[str] = []
    for part in url[q + 1 :].split("&"):
        if not part.startswith("qm_token="):
            if part:
                kept.append(part)
        elif token is None and len(part) > 9:
            token = unquote(part[9:])
    return token, url[:q] + ("?" + "&".join(kept) if kept else "")


def strip_token(query: str) -> str:
    """A query string without its qm_token: what the app sees once an invitation was taken out."""
    return hand_off("?" + query)[1][1:]


def is_invitation(token: str | None) -> bool:
    """A JWS (three base64url parts, a JSON header): an invitation the site signed, for the waiting page."""
    return token is not None and len(token) <= 4096 and _INVITATION.match(token) is not None


def with_invite(wait_url: str, invite: str | None) -> str:
    if not invite:
        return wait_url
    return f"{wait_url}{'&' if '?' in wait_url else '?'}qm_token={quote(invite, safe='')}"


def pass_cookie(room: str, token: str, secure: bool) -> str:
    cookie = f"qm_{room}={token}; Path=/; SameSite=Lax; Max-Age={PASS_COOKIE_MAX_AGE_SEC}; HttpOnly"
    return cookie + ("; Secure" if secure else "")


def gated_wait(wait: object, wait_url: str, room: str, reason: str) -> bytes:
    """The wait as the queue described it (GET /api/check?wait=1), or the least of it when it did not."""
    if isinstance(wait, dict):
        body = dict(wait)
    else:
        body = {
            "error": "You are in the waiting room for this site; reload the page to see your place.",
            "code": "queued",
            "roomId": room,
            "state": STATE_OF_REASON.get(reason, "not_in_line"),
            "reason": reason,
            "position": None,
            "etaSec": None,
            "roomState": None,
            "opensAt": None,
            "retryAfterSec": RETRY_AFTER_SEC,
            "reload": True,
        }
    retry = body.get("retryAfterSec")
    if not isinstance(retry, int) or isinstance(retry, bool) or retry < 1:
        body["retryAfterSec"] = RETRY_AFTER_SEC
    body["waitingUrl"] = wait_url
    body["waitUrl"] = wait_url  # the name this answer had before it described the wait
    return json.dumps(body, separators=(",", ":")).encode()


def path_of(url: str) -> str:
    """An absolute URL's path and query (what a same-origin Location names)."""
    return re.sub(r"^https?://[^/]*", "", url, flags=re.I) or "/"

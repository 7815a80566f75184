"""Request parsing and response writing on raw ASGI (no framework on the hot path)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from types import MappingProxyType
from typing import Any
from urllib.parse import unquote_plus

import orjson

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

MAX_BODY = 16 * 1024
NO_PARAMS: Mapping[str, str] = MappingProxyType({})
JSON_TYPE = (b"content-type", b"application/json")
NO_STORE = (b"cache-control", b"no-store")


#: Every route under this prefix answers at ``/api/v1/…`` too (the same route, the same rules).
VERSIONED_PREFIX = "/api/"
VERSION_ALIAS = "/api/v1/"


def api_path(path: str) -> str:
    """``/api/v1/...`` is ``/api/...``: the path every rule past the entry speaks of (the router's table
    names each route once; ``Route.aliases`` names the versioned spelling)."""
    return "/api/" + path[8:] if path.startswith("/api/v1/") else path


class HttpError(Exception):
    """An answer with a status and the spec's ``code``; raised anywhere below a route."""

    def __init__(
        self, status: int, code: str, message: str, headers: Iterable[tuple[str, str]] = (), **extra: Any
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = list(headers)
        self.extra = extra


class Request:
    __slots__ = (
        "_cookies",
        "_query",
        "headers",
        "ident",
        "method",
        "params",
        "path",
        "prefix",
        "receive",
        "scope",
        "visitors_only",
    )

    def __init__(self, scope: Scope, receive: Receive, path: str) -> None:
        self.scope = scope
        self.receive = receive
        self.method: str = scope["method"]
        self.path = path
        raw = scope["headers"]
        self.headers: dict[bytes, bytes] = dict(raw)  # C speed; a repeated name needs the loop below
        if len(self.headers) != len(raw):
            self.headers = {}
            for k, v in raw:
                if k in self.headers:
                    self.headers[k] = self.headers[k] + b"," + v if k != b"cookie" else self.headers[k] + b"; " + v
                else:
                    self.headers[k] = v
        self._query: dict[str, str] | None = None
        self._cookies: dict[str, str] | None = None
        self.ident: Any = None  # the resolved Identity, computed once (http.identity)
        self.params: Mapping[str, str] = NO_PARAMS  # the path's parameters, set by the router
        #: where this server's paths live on the request's host: "/__qm" when the inline front stripped that
        #: prefix from the path (an inline host), else "". Whatever names a path back to the browser (a
        #: cookie's Path, a redirect) puts it in front.
        self.prefix = ""
        #: set by the inline front on a host where only the visitor paths answer (an inline host not named in
        #: ADMIN_HOST while ADMIN_HOST is set): the router answers any other route 404
        self.visitors_only = False

    def header(self, name: bytes) -> str | None:
        v = self.headers.get(name)
        return None if v is None else v.decode("latin-1")

    @property
    def query(self) -> dict[str, str]:
        if self._query is None:
            raw = self.scope.get("query_string", b"")
            if not raw:
                self._query = {}
            else:
                # a door check repeats its exact query string on every page of a visit: parse it once
                hit = _QUERY_CACHE.get(raw)
                if hit is None:
                    hit = parse_query(raw)
                    if len(_QUERY_CACHE) >= _QUERY_CACHE_MAX:
                        _QUERY_CACHE.clear()
                    _QUERY_CACHE[raw] = hit
                self._query = hit
        return self._query

    @property
    def cookies(self) -> dict[str, str]:
        if self._cookies is None:
            jar: dict[str, str] = {}
            raw = self.headers.get(b"cookie")
            if raw:
                for part in raw.decode("latin-1").split(";"):
                    name, sep, value = part.strip().partition("=")
                    if sep and name and name not in jar:
                        jar[name] = value.strip().strip('"')
            self._cookies = jar
        return self._cookies

    @property
    def parsed_cookies(self) -> dict[str, str] | None:
        """The cookies if they were read (parsed) already, else None."""
        return self._cookies

    def reuse_cookies(self, jar: dict[str, str]) -> None:
        """Take the cookies parsed from an identical ``Cookie`` header (read-only: the jar is shared)."""
        self._cookies = jar

    async def body(self, limit: int = MAX_BODY) -> bytes:
        declared = self.headers.get(b"content-length")
        if declared is not None:
            try:
                if int(declared) > limit:
                    raise HttpError(413, "payload_too_large", f"The body is over {limit} bytes.")
            except ValueError as exc:
                raise HttpError(400, "bad_request", "Content-Length is not a number.") from exc
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                raise HttpError(400, "bad_request", "The client went away.")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise HttpError(413, "payload_too_large", f"The body is over {limit} bytes.")
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def json_object(self) -> dict[str, Any]:
        raw = await self.body()
        if not raw.strip():
            raise HttpError(400, "bad_request", "The body must be a JSON object.")
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise HttpError(400, "bad_request", "The body is not valid JSON.") from exc
        if not isinstance(data, dict):
            raise HttpError(400, "bad_request", "The body must be a JSON object.")
        refuse_nul(raw, data)
        return data


NUL_REFUSED = "The body holds a NUL character (\\u0000), which no field accepts."


def refuse_nul(raw: bytes, data: Any) -> None:
    """400 when a parsed JSON body holds a NUL in any string: no field takes one, and PostgreSQL's text
    cannot store one (the journal, the audit trail and the shared records would refuse the write). The
    raw bytes are looked at first: a body without the escape costs one search."""
    if b"\\u0000" in raw and _has_nul(data):
        raise HttpError(400, "bad_request", NUL_REFUSED)


def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_nul(v) for v in value)
    return False


MAX_QUERY_FIELDS = 64
# parsed query strings (read-only dicts) and unquoted pieces, bounded; dropped whole when full
_QUERY_CACHE: dict[bytes, dict[str, str]] = {}
_QUERY_CACHE_MAX = 20_000
_UNQUOTED: dict[str, str] = {}


def parse_query(raw: bytes) -> dict[str, str]:
    """``a=1&b=x%20y`` → dict (first value wins). Only pieces with ``%`` or ``+`` are unquoted (the hot path
    mostly carries plain base64url tokens). Bad escapes or non-UTF-8 are 400 bad_request."""
    q: dict[str, str] = {}
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HttpError(400, "bad_request", "The query string could not be parsed.") from exc
    parts = text.split("&")
    if len(parts) > MAX_QUERY_FIELDS:
        raise HttpError(400, "bad_request", "The query string has too many fields.")
    for part in parts:
        if not part:
            continue
        key, _, value = part.partition("=")
        if "%" in key or "+" in key:
            key = _unquote(key)
        if "%" in value or "+" in value:
            value = _unquote(value)
        if key not in q:
            q[key] = value
    return q


def _unquote(text: str) -> str:
    hit = _UNQUOTED.get(text)
    if hit is not None:
        return hit
    try:
        value = unquote_plus(text, encoding="utf-8", errors="strict")
    except UnicodeDecodeError as exc:
        raise HttpError(400, "bad_request", "The query string could not be parsed.") from exc
    if "\x00" in value:  # no parameter takes one, and PostgreSQL's text cannot hold one
        raise HttpError(400, "bad_request", "The query string holds a NUL character (%00).")
    if len(_UNQUOTED) >= _QUERY_CACHE_MAX:
        _UNQUOTED.clear()
    _UNQUOTED[text] = value
    return value


async def send_response(
    send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]], head: bool = False
) -> None:
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": b"" if head else body})


async def send_json(
    send: Send, status: int, payload: Any, headers: list[tuple[bytes, bytes]] | None = None, head: bool = False
) -> None:
    hdrs = [JSON_TYPE, NO_STORE]
    if headers:
        hdrs.extend(headers)
    await send_response(send, status, orjson.dumps(payload), hdrs, head)


async def send_error(send: Send, err: HttpError, head: bool = False) -> None:
    payload = {"error": err.message, "code": err.code, **err.extra}
    await send_json(send, err.status, payload, [(k.encode(), v.encode()) for k, v in err.headers], head)


def cookie_header(
    name: str,
    value: str,
    *,
    max_age: int | None,
    secure: bool,
    http_only: bool = True,
    same_site: str = "Lax",
    path: str = "/",
) -> tuple[bytes, bytes]:
    parts = [f"{name}={value}", f"Path={path}", f"SameSite={same_site}"]
    if max_age is not None:
        parts.append(f"Max-Age={max_age}")
    if http_only:
        parts.append("HttpOnly")
    if secure:
        parts.append("Secure")
    return b"set-cookie", "; ".join(parts).encode("latin-1")

"""The OpenAPI 3.1 document, generated from the router's table and the descriptions beside it.

The generator walks the table of routes it is handed (the server's: :data:`queue_manager.routes.table.TABLE`),
so the document cannot name a route that does not exist; a route without a description is an error here
(and in the tests), never a silent gap. What every route of a kind answers is added once: an admin route's
401, 403 and 429, a body's 400 and 413, a query string's 400, a rate limit's 429, the store's 503. The
``/api/v1/…`` spelling of every ``/api/…`` route is named on its path item (``x-aliases``) rather than repeated.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from queue_manager.routes.apidoc import admin_ops, visitor_ops
from queue_manager.routes.apidoc.components import SCHEMAS, SECURITY_SCHEMES
from queue_manager.routes.apidoc.model import JSON, Answer, Op, err
from queue_manager.routes.router import Route

OPENAPI_PATH = "/api/openapi.json"
#: the same document under the admin API's path, where the console's session cookie reaches (Path=/api/admin):
#: what /docs/api links to, so an operator signed in to the console can open it in the browser
CONSOLE_OPENAPI_PATH = "/api/admin/openapi.json"
SAFE = frozenset({"GET", "HEAD"})
_TAIL = re.compile(r"\{(\w+)\.\.\.\}")

#: every description, by (method, pattern) of the router's table
DESCRIBED: dict[tuple[str, str], Op] = {**visitor_ops.OPS, **admin_ops.OPS}


class Undescribed(LookupError):
    """A route of the table has no description."""


def openapi_path(pattern: str) -> str:
    """``/docs/{page...}`` → ``/docs/{page}`` (OpenAPI has no rest-of-path parameter; the description says so)."""
    return _TAIL.sub(r"{\1}", pattern)


def operation_id(route: Route) -> str:
    words = re.sub(r"[^A-Za-z0-9]+", "_", route.pattern).strip("_") or "root"
    return f"{route.method.lower()}_{words}"


def _tag(route: Route) -> str:
    if route.pattern.startswith(("/api/system/", "/internal/", "/api/status/buffers", "/api/stats/")):
        return "system"
    if route.is_admin or route.pattern.startswith("/api/admin/"):
        return "admin"
    if route.pattern.startswith("/api/") or route.pattern == "/events":
        return "visitor"
    return "pages and files"


def _security(route: Route) -> list[dict[str, list[str]]]:
    if not route.is_admin:
        if route.pattern in ("/api/check", "/api/verify"):
            return [{}, {"publicApiKey": []}]
        if route.pattern in ("/api/sessions/revoke", "/api/gate"):
            return [{"publicApiKey": []}]
        return []
    session: dict[str, list[str]] = (
        {"consoleSession": []} if route.method in SAFE else {"consoleSession": [], "csrfHeader": []}
    )
    out: list[dict[str, list[str]]] = [{"adminKey": []}, session]
    if set(route.grants) <= {"read"}:
        out.append({"monitorLink": []})
    if route.ticket:
        out.append({"streamTicket": []})
    return out


def _common(route: Route, op: Op) -> list[tuple[int, Answer]]:
    """What every route of this kind answers besides its own answers."""
    out: list[tuple[int, Answer]] = []
    if op.body is not None:
        if JSON in op.body_media:
            out.append((400, err("The body is not a JSON object.", "bad_request")))
        out.append((413, err(f"The body is over {op.body_max // 1024} KiB.", "payload_too_large")))
    if route.ticket or any(p.where == "query" for p in op.params):
        out.append((400, err("The query string could not be parsed.", "bad_request")))
    if op.limited:
        out.append((429, err("This address spent its budget; see Retry-After and X-RateLimit-*.", "rate_limited")))
    if route.is_admin:
        out.append((401, err("No credential, or a wrong or ended one.", "unauthorized")))
        forbidden = ["insufficient_role"] if route.grants else []
        if route.method not in SAFE:
            forbidden.append("csrf_required")
        if forbidden:
            out.append((403, err("The credential lacks a grant, or a console change lacks X-QM-CSRF.", *forbidden)))
        out.append((429, err("Too many failed sign-ins from this address.", "too_many_auth_failures")))
    if op.store and route.pattern.startswith(("/api/", "/events", "/internal/")):
        out.append(
            (503, err("The store is unreachable (or a room is being rebuilt); see Retry-After.", "storage_unavailable"))
        )
    return out


def _merge(answers: dict[int, Answer], status: int, extra: Answer) -> None:
    have = answers.get(status)
    if have is None:
        answers[status] = extra
    elif have.codes:  # an error answer: the common codes join its own
        codes = tuple(dict.fromkeys((*have.codes, *extra.codes)))
        answers[status] = Answer(have.description, have.media, codes)
    # a success answer at that status (``/healthz``'s 503) is left as it is


def _response(answer: Answer) -> dict[str, Any]:
    out: dict[str, Any] = {"description": answer.description}
    if answer.codes:
        out["description"] += " Codes: " + ", ".join(f"`{c}`" for c in answer.codes) + "."
        out["x-codes"] = list(answer.codes)
    content: dict[str, Any] = {}
    for media, schema in answer.media.items():
        if media == JSON and answer.codes:
            schema = {"allOf": [schema], "required": ["code"], "properties": {"code": {"enum": list(answer.codes)}}}
        content[media] = {"schema": dict(schema)} if schema is not None else {}
    if content:
        out["content"] = content
    return out


def describe(route: Route, op: Op) -> dict[str, Any]:
    """One operation of the document."""
    answers = dict(op.answers)
    for status, extra in _common(route, op):
        _merge(answers, status, extra)
    doc: dict[str, Any] = {
        "operationId": operation_id(route),
        "summary": route.summary,
        "tags": [_tag(route)],
        "security": _security(route),
        "responses": {str(s): _response(a) for s, a in sorted(answers.items())},
    }
    notes = [op.description] if op.description else []
    if route.is_admin:
        notes.append("Needs the grants: " + (", ".join(route.grants) or "none (any signed-in caller)") + ".")
    if "..." in route.pattern:
        notes.append("The last path parameter is the rest of the path and may hold '/'.")
    if route.method == "GET" and not route.head:
        notes.append("An event stream: no HEAD.")
    if notes:
        doc["description"] = " ".join(notes)
    params = [
        {
            "name": p.name,
            "in": p.where,
            "required": p.required,
            "description": p.description,
            "schema": dict(p.schema),
        }
        for p in op.params
    ]
    if params:
        doc["parameters"] = params
    if op.body is not None:
        content = {media: {"schema": dict(op.body)} for media in op.body_media}
        doc["requestBody"] = {"required": op.body_required, "content": content}
    return doc


def build(table: Iterable[Route], version: str, described: Mapping[tuple[str, str], Op] = DESCRIBED) -> dict[str, Any]:
    """The whole document. Raises :class:`Undescribed` for a route without a description."""
    paths: dict[str, dict[str, Any]] = {}
    for route in table:
        op = described.get((route.method, route.pattern))
        if op is None:
            raise Undescribed(f"{route.method} {route.pattern} has no description in routes/apidoc")
        item = paths.setdefault(openapi_path(route.pattern), {})
        item[route.method.lower()] = describe(route, op)
        if route.aliases:
            item["x-aliases"] = [openapi_path(a) for a in route.aliases]
    return {
        "openapi": "3.1.0",
        "jsonSchemaDialect": "https://spec.openapis.org/oas/3.1/dialect/base",
        "info": {
            "title": "Queue Manager",
            "version": version,
            "description": (
                "Every route this server answers. Each `/api/…` path also answers at `/api/v1/…` (the same "
                "route and rules; listed under `x-aliases`). A GET answers HEAD too unless it is an event "
                'stream. Errors are JSON `{"error": …, "code": …}`; a wrong method is `405 '
                "method_not_allowed` with `Allow`. The guide: /docs/operations and /docs/integration."
            ),
        },
        "paths": paths,
        "components": {"schemas": SCHEMAS, "securitySchemes": SECURITY_SCHEMES},
    }


class Rendered:
    """The document as served: its JSON bytes and strong ETag, built once per process."""

    __slots__ = ("body", "document", "etag")

    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document
        self.body = orjson.dumps(document)
        self.etag = b'"' + hashlib.sha256(self.body).hexdigest()[:32].encode() + b'"'

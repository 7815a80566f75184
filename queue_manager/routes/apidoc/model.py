"""The shape of one operation's description: its parameters, JSON body and every answer it can give."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from queue_manager.http.wire import MAX_BODY

Schema = Mapping[str, Any]

JSON = "application/json"
HTML = "text/html"
TEXT = "text/plain"
CSV = "text/csv"
EVENTS = "text/event-stream"


@dataclass(frozen=True, slots=True)
class Param:
    """A query or path parameter. Path parameters are always required."""

    name: str
    where: str  # "query" or "path"
    description: str
    schema: Schema = field(default_factory=lambda: {"type": "string"})
    required: bool = False


@dataclass(frozen=True, slots=True)
class Answer:
    """One status an operation answers: what it means, its media types and, for an error, its ``code`` values."""

    description: str
    media: Mapping[str, Schema | None] = field(default_factory=dict)
    codes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Op:
    """One (method, pattern) of the router's table, described.

    ``body``: the JSON Schema of a JSON request body (None: the route reads none). ``security``: the
    schemes that sign a caller in; empty on a visitor route (open to anyone). ``limited``: the answer
    can be ``429 rate_limited`` (the caller's address spent its budget). ``body_max``: the largest body
    the handler reads (``413 payload_too_large`` above it): the server's 16 KiB unless the route says more.
    """

    answers: Mapping[int, Answer]
    params: tuple[Param, ...] = ()
    body: Schema | None = None
    body_required: bool = True
    description: str = ""
    limited: bool = False
    store: bool = True  # reads the store: ``503 storage_unavailable`` when it is unreachable
    body_media: tuple[str, ...] = (JSON,)  # the media types the body may be sent as
    body_max: int = MAX_BODY


def ok(description: str, schema: Schema | None = None, media: str = JSON) -> Answer:
    """A success with a body of ``media`` (its schema: any JSON value when None on JSON)."""
    return Answer(description, {media: schema if schema is not None or media != JSON else {}})


def empty(description: str) -> Answer:
    """An answer without a body (a redirect, a 304)."""
    return Answer(description)


def err(description: str, *codes: str) -> Answer:
    """An error answered as the JSON Error body with one of ``codes``."""
    return Answer(description, {JSON: {"$ref": "#/components/schemas/Error"}}, codes)


def page(description: str, media: str = HTML) -> Answer:
    """An answer that is a page (HTML or plain text), not JSON."""
    return Answer(description, {media: {"type": "string"}})


def query(name: str, description: str, schema: Schema | None = None, *, required: bool = False) -> Param:
    return Param(name, "query", description, schema or {"type": "string"}, required)


def path(name: str, description: str, schema: Schema | None = None) -> Param:
    return Param(name, "path", description, schema or {"type": "string", "minLength": 1}, True)


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}

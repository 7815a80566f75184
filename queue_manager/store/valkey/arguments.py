"""How a request's values are written as a script's arguments (every argument is a string).

A visitor is four strings (address, fingerprints, cookie hash, in hex; '' for none), a presented
token three (generation, ticket number, pre-queue handle), a look-up query three (its kind, the
number, the Ref), the way ``report.lookup`` reads it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import orjson

from queue_manager.engine.model import ClientId
from queue_manager.engine.visitor import Presented


def to_json(value: Any) -> str:
    return orjson.dumps(value).decode()


def hex_or_empty(value: bytes | None) -> str:
    return "" if value is None else value.hex()


def text(value: Any) -> str:
    """A string from a reply or a command's answer (bytes decoded)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def client_args(client: ClientId) -> list[str]:
    return [client.ident, client.fp.hex(), hex_or_empty(client.fp2), hex_or_empty(client.cookie)]


def presented_args(presented: Presented | None) -> list[str]:
    if presented is None:
        return ["", "", ""]
    return [str(presented.gen), "" if presented.n is None else str(presented.n), presented.handle or ""]


def always(args: list[str]) -> Callable[[Any], list[str]]:
    """Arguments that do not depend on the config copy the call is made on."""
    return lambda _: args


def asks_args(asks: Sequence[tuple[ClientId, Presented | None]]) -> list[str]:
    """status_many.lua's arguments: each ask's client and presented token, 7 strings per ask."""
    out: list[str] = []
    for client, presented in asks:
        out += client_args(client)
        out += presented_args(presented)
    return out


def query_args(query: str) -> tuple[str, str, str, str]:
    """(stripped, kind, number, Ref) the way report.lookup reads a query."""
    q = query.strip()
    if q.isascii() and q.isdigit():  # "²" is a digit to str.isdigit but no number: a Ref, as in report.lookup
        if len(q) > 15:
            return q, "long", "", q.upper()
        return q, "num", str(int(q)), q.upper()
    return q, "ref", "", q.upper()

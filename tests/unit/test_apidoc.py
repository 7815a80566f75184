"""The API's description: one per route of the table, complete, and a valid OpenAPI 3.1 document."""

from __future__ import annotations

import re

import pytest
from openapi_spec_validator import validate

from queue_manager import __version__
from queue_manager.routes.apidoc.document import DESCRIBED, Undescribed, build, openapi_path, operation_id
from queue_manager.routes.router import admin, visitor
from queue_manager.routes.table import API, TABLE

METHODS = ("get", "post", "put", "patch", "delete")
rendered = API.rendered


async def _h(*_: object) -> None:
    return None


def _operations(doc: dict) -> dict[tuple[str, str], dict]:
    return {
        (method.upper(), path): op
        for path, item in doc["paths"].items()
        for method, op in item.items()
        if method in METHODS
    }


def test_every_route_is_described_and_every_description_names_a_route() -> None:
    routes = {(r.method, r.pattern) for r in TABLE}
    assert routes - set(DESCRIBED) == set(), "routes without a description in http/apidoc"
    assert set(DESCRIBED) - routes == set(), "descriptions of routes the table does not have"


def test_a_route_without_a_description_stops_the_document() -> None:
    extra = visitor("GET", "/api/not-described", _h, "A route nobody described.")
    with pytest.raises(Undescribed, match="GET /api/not-described"):
        build((*TABLE, extra), __version__)


def test_each_413_names_the_body_limit_its_route_reads() -> None:
    """A logo may be 64 KiB (engine/logo.py), a CSV of entry codes 8 MiB (entrycode.py); every other
    body is the server's 16 KiB (http/wire.py)."""
    from queue_manager.engine.logo import LOGO_MAX_BYTES
    from queue_manager.entrycode import CSV_BODY_MAX
    from queue_manager.http.wire import MAX_BODY

    ops = _operations(build(TABLE, __version__))
    limits = {key: op["responses"]["413"]["description"] for key, op in ops.items() if "413" in op["responses"]}
    logo = ("POST", "/api/admin/rooms/{room}/logo")
    assert LOGO_MAX_BYTES == 64 * 1024 and limits.pop(logo).startswith("The body is over 64 KiB.")
    codes = ("POST", "/api/admin/rooms/{room}/codes")
    assert CSV_BODY_MAX == 8 * 1024 * 1024 and limits.pop(codes).startswith("The body is over 8192 KiB.")
    assert limits and all(d.startswith(f"The body is over {MAX_BODY // 1024} KiB.") for d in limits.values()), limits


def test_the_document_is_valid_openapi_3_1() -> None:
    doc = rendered().document
    assert doc["openapi"] == "3.1.0"
    validate(doc)


def test_the_document_names_exactly_the_tables_operations() -> None:
    ops = _operations(rendered().document)
    assert set(ops) == {(r.method, openapi_path(r.pattern)) for r in TABLE}
    ids = [op["operationId"] for op in ops.values()]
    assert len(ids) == len(set(ids)) == len(TABLE)
    assert {operation_id(r) for r in TABLE} == set(ids)


def test_every_operation_has_a_summary_responses_and_its_path_parameters() -> None:
    for route in TABLE:
        op = rendered().document["paths"][openapi_path(route.pattern)][route.method.lower()]
        assert op["summary"] == route.summary and op["summary"].strip()
        assert op["responses"], route
        # a success: a 2xx, or for a route that only sends the browser elsewhere (a former address) its 3xx
        assert any(s[0] in "23" and s != "304" for s in op["responses"]), f"{route.method} {route.pattern}: no success"
        named = set(re.findall(r"\{(\w+)(?:\.\.\.)?\}", route.pattern))
        declared = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
        assert named == declared, f"{route.method} {route.pattern}: path parameters {named} vs {declared}"
        for status, answer in op["responses"].items():
            assert answer["description"].strip(), (route.pattern, status)
            if status.startswith("4") and "application/json" in answer.get("content", {}):
                assert answer["x-codes"], (route.pattern, status)


def test_admin_routes_need_a_sign_in_and_say_what_refusing_it_answers() -> None:
    ops = _operations(rendered().document)
    for route in TABLE:
        op = ops[(route.method, openapi_path(route.pattern))]
        if route.is_admin:
            assert {"adminKey": []} in op["security"]
            assert op["responses"]["401"]["x-codes"] == ["unauthorized"]
            assert "too_many_auth_failures" in op["responses"]["429"]["x-codes"]
            if route.grants:
                assert "insufficient_role" in op["responses"]["403"]["x-codes"]
            assert ({"streamTicket": []} in op["security"]) == route.ticket
        elif route.pattern in ("/api/sessions/revoke", "/api/gate"):  # a backend or a proxy: its Public API key
            assert op["security"] == [{"publicApiKey": []}]
        elif route.pattern not in ("/api/check", "/api/verify", "/api/admin/session"):
            assert op["security"] == [], route.pattern


def test_the_versioned_aliases_are_named_on_their_paths() -> None:
    paths = rendered().document["paths"]
    for route in TABLE:
        item = paths[openapi_path(route.pattern)]
        assert item.get("x-aliases", []) == [openapi_path(a) for a in route.aliases]
    assert paths["/api/join"]["x-aliases"] == ["/api/v1/join"]


def test_an_admin_route_added_to_a_table_is_described_with_its_grants() -> None:
    route = admin("POST", "/api/admin/thing", ("write",), _h, "A thing.")
    from queue_manager.routes.apidoc.model import Op, ok

    doc = build((route,), "0", {("POST", "/api/admin/thing"): Op({200: ok("Done.")})})
    op = doc["paths"]["/api/admin/thing"]["post"]
    assert op["responses"]["403"]["x-codes"] == ["insufficient_role", "csrf_required"]
    assert {"consoleSession": [], "csrfHeader": []} in op["security"]
    assert {"monitorLink": []} not in op["security"]
    validate(doc)

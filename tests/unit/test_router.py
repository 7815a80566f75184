"""The router and its one table: matching, 405 with Allow, aliases, and what the table promises."""

from __future__ import annotations

import inspect

import pytest

from queue_manager.http.wire import HttpError, api_path
from queue_manager.routes.router import Route, Router, admin, admin_area, operator, visitor
from queue_manager.routes.table import TABLE


async def _h(*_: object) -> None:
    return None


def test_literal_paths_win_over_patterns_and_params_are_named() -> None:
    router = Router(
        [
            admin("GET", "/api/admin/rooms/{room}", ("read",), _h, "one"),
            admin("POST", "/api/admin/rooms/{room}/pause", ("write",), _h, "pause"),
            admin("POST", "/api/admin/rooms/all", ("write",), _h, "literal"),
            visitor("GET", "/docs/{page...}", _h, "tail"),
        ]
    )
    found = router.match("/api/admin/rooms/all")
    assert found is not None and found[0].pattern == "/api/admin/rooms/all" and dict(found[1]) == {}
    found = router.match("/api/admin/rooms/r1/pause")
    assert found is not None and dict(found[1]) == {"room": "r1"}
    assert router.match("/api/admin/rooms//pause") is None  # an empty segment is no parameter
    assert router.match("/api/admin/rooms/r1/pause/") is None
    assert router.match("/api/admin/rooms/r1/nope") is None
    found = router.match("/docs/th/integration")
    assert found is not None and dict(found[1]) == {"page": "th/integration"}
    found = router.match("/docs/")
    assert found is not None and dict(found[1]) == {"page": ""}


def test_a_wrong_method_is_one_405_naming_every_method_served() -> None:
    router = Router(
        [
            admin("GET", "/r/{room}", ("read",), _h, "get"),
            admin("DELETE", "/r/{room}", ("owner",), _h, "delete"),
            visitor("GET", "/events", _h, "stream", head=False),
        ]
    )
    found = router.match("/r/x")
    assert found is not None
    resource = found[0]
    assert resource.route_for("HEAD").method == "GET"  # a GET route answers HEAD
    with pytest.raises(HttpError) as err:
        resource.route_for("POST")
    assert err.value.status == 405 and err.value.code == "method_not_allowed"
    assert dict(err.value.headers)["Allow"] == "DELETE, GET, HEAD"
    stream = router.match("/events")
    assert stream is not None
    with pytest.raises(HttpError) as err:
        stream[0].route_for("HEAD")
    assert dict(err.value.headers)["Allow"] == "GET"


def test_two_routes_for_one_method_and_pattern_are_refused() -> None:
    with pytest.raises(ValueError, match="two routes"):
        Router([visitor("GET", "/a", _h, "one"), visitor("GET", "/a", _h, "two")])
    with pytest.raises(ValueError, match="bad route pattern"):
        Router([visitor("GET", "/a/{rest...}/b", _h, "tail not last")])


def test_api_v1_is_an_alias_of_every_api_route() -> None:
    assert api_path("/api/v1/join") == "/api/join"
    assert api_path("/api/join") == "/api/join"
    assert api_path("/healthz") == "/healthz"
    join = next(r for r in TABLE if r.pattern == "/api/join")
    assert join.aliases == ("/api/v1/join",)
    assert next(r for r in TABLE if r.pattern == "/healthz").aliases == ()


def test_the_table_describes_every_route_fully() -> None:
    """What a generated API description needs: a summary, a method, and who may call each route."""
    Router(TABLE)  # builds: no duplicate, no malformed pattern
    for route in TABLE:
        assert isinstance(route, Route)
        assert route.summary and route.summary[-1] in ".?", route
        assert route.method in {"GET", "POST", "PUT", "DELETE"}, route
        assert (route.visitor is None) != (route.admin is None), route
        handler = route.visitor or route.admin
        assert inspect.iscoroutinefunction(handler), route
        if admin_area(route.pattern) and route.admin is None:
            assert (route.method, route.pattern) == ("POST", "/api/admin/session")  # signing in needs no sign-in
        if route.admin is not None:
            assert admin_area(route.pattern), route
    # the admin API never grants by omission: every admin route but sign-out names its grants
    ungranted = {(r.method, r.pattern) for r in TABLE if r.admin is not None and not r.grants}
    assert ungranted == {("DELETE", "/api/admin/session")}


def test_the_system_surface_is_admin_and_needs_the_owner_grant() -> None:
    """Only an owner (or ADMIN_KEY) holds ``owner``; every system route asks for it, versioned or not."""
    system = [r for r in TABLE if r.pattern.startswith(("/api/system/", "/internal/", "/api/stats/", "/api/status/"))]
    assert len(system) == 10
    for route in system:
        assert route.admin is not None and route.grants == ("owner",), route
        assert admin_area(route.pattern), route
    assert admin_area("/internal/api/unknown") and admin_area("/api/stats/refresh")
    assert admin_area("/api/status/buffers")
    assert next(r for r in system if r.pattern == "/api/stats/refresh").aliases == ("/api/v1/stats/refresh",)
    assert {r.aliases for r in system if r.pattern.startswith("/internal/")} == {()}


def test_a_path_is_a_visitor_path_for_every_method_or_for_none() -> None:
    """ADMIN_HOST's rule reads one flag per path: a path that mixed the two would be half withheld."""
    router = Router([visitor("GET", "/n", _h, "read"), visitor("DELETE", "/n", _h, "forget")])
    found = router.match("/n")
    assert found is not None and found[0].visitor_path
    with pytest.raises(ValueError, match="visitor path"):
        Router([visitor("GET", "/n", _h, "read"), operator("POST", "/n", _h, "change")])
    Router([operator("POST", "/s", _h, "open"), admin("DELETE", "/s", (), _h, "close")])  # neither is one
    assert not admin("GET", "/api/admin/x", ("read",), _h, "x").visitor_path
    assert not operator("GET", "/docs", _h, "docs").visitor_path


def test_the_visitor_paths_are_what_a_visitor_and_the_customers_site_use() -> None:
    """What remains on a customer's host that ADMIN_HOST leaves to visitors: no admin route, no console page,
    no guide, no download for operators; everything the waiting page and a probe of the public host need."""
    visitor_paths = {r.pattern for r in TABLE if r.visitor_path}
    assert all(r.admin is None for r in TABLE if r.visitor_path)
    assert visitor_paths == {
        "/api/join",
        "/api/status",
        "/events",
        "/api/rooms/{room}/draw",
        "/api/check",
        "/api/gate",
        "/api/verify",
        "/api/sessions/revoke",
        "/api/notify",
        "/.well-known/jwks.json",
        "/api/passes/revoked",
        "/qm.js",
        "/healthz",
        "/api/version",
        "/w/{room...}",
        "/assets/{file...}",
        "/fonts/{file...}",
        "/offline.html",
        "/origin-down.html",
    }

"""The router: one table of routes, matched once per request.

Every route the server answers — the visitor API, the admin API, the pages and ``/metrics`` — is one
:class:`Route` in :data:`queue_manager.routes.table.TABLE`: a method, a path pattern, the handler, who
may call it (a visitor, or a signed-in caller holding the grants named) and a one-line summary. From
that table come the match, the 405 with ``Allow`` (answered here and nowhere else), the ``/api/v1``
aliases and the API's machine-readable description (``routes/apidoc``: OpenAPI 3.1, one entry per route).

A pattern is a path whose segments are literal or ``{name}`` (one non-empty segment); the last may
be ``{name...}``, the rest of the path (slashes kept; it may be empty: ``/docs/`` matches
``/docs/{page...}``). Literal paths win over patterns, and patterns are tried in table order.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field

from queue_manager.access.principal import Grant
from queue_manager.context import Context
from queue_manager.http.wire import NO_PARAMS, VERSION_ALIAS, VERSIONED_PREFIX, HttpError, Request, Send
from queue_manager.routes.call import Call

VisitorHandler = Callable[[Context, Request, Send], Awaitable[None]]
AdminHandler = Callable[[Call], Awaitable[None]]

#: Paths the admin API owns: a caller is signed in before anything else is said, a 404 included. The
#: system surface (``routes/system.py``) is admin too: ``/api/system/…``, ``/internal/…``, the stats refresh and
#: the spool's status.
ADMIN_PREFIX = "/api/admin/"
ADMIN_PREFIXES = (ADMIN_PREFIX, "/api/system/", "/internal/")
ADMIN_PATHS = frozenset({"/metrics", "/api/stats/refresh", "/api/status/buffers", "/api/openapi.json"})


@dataclass(frozen=True, slots=True)
class Route:
    """One method on one path pattern.

    ``visitor`` routes are open to anyone (each applies its own limits); ``admin`` routes need a
    signed-in caller holding every grant in ``grants`` (none: any signed-in caller). A GET route
    answers HEAD too unless ``head`` is False (event streams).

    ``visitor_path``: the route is one of the visitor paths, which answer on every host (under ``/__qm/`` on
    an inline host, ADMIN_HOST set or not): what a visitor's browser, the customer's site and a probe of
    the public hostname use. Every other route (the admin API, the console's pages and sign-in, the guides,
    the connectors' downloads) is withheld where only the visitor paths remain. Made with :func:`visitor`
    it is one; made with :func:`operator` (open to anyone, but for the people who run the queue) or
    :func:`admin` it is not.
    """

    method: str
    pattern: str
    summary: str
    visitor: VisitorHandler | None = None
    admin: AdminHandler | None = None
    grants: tuple[Grant, ...] = ()
    head: bool = True
    ticket: bool = False  # an admin event stream: a one-time ?ticket= signs the caller in
    visitor_path: bool = False

    @property
    def is_admin(self) -> bool:
        return self.admin is not None

    @property
    def aliases(self) -> tuple[str, ...]:
        """The other paths this route answers at (``/api/v1/…`` for every ``/api/…`` route)."""
        if self.pattern.startswith(VERSIONED_PREFIX):
            return (VERSION_ALIAS + self.pattern[len(VERSIONED_PREFIX) :],)
        return ()


def visitor(method: str, pattern: str, handler: VisitorHandler, summary: str, *, head: bool = True) -> Route:
    """A visitor path: open to anyone, and answering on every host."""
    return Route(method, pattern, summary, visitor=handler, head=head, visitor_path=True)


def operator(method: str, pattern: str, handler: VisitorHandler, summary: str, *, head: bool = True) -> Route:
    """Open to anyone like a visitor route, but for the people who run the queue (the console's pages and
    sign-in, the guides, the connectors' downloads): not a visitor path."""
    return Route(method, pattern, summary, visitor=handler, head=head)


def admin(
    method: str,
    pattern: str,
    grants: tuple[Grant, ...],
    handler: AdminHandler,
    summary: str,
    *,
    head: bool = True,
    ticket: bool = False,
) -> Route:
    return Route(method, pattern, summary, admin=handler, grants=grants, head=head, ticket=ticket)


def admin_area(path: str) -> bool:
    """Does this path belong to the admin API (sign-in first, even for a 404)?"""
    return path.startswith(ADMIN_PREFIXES) or path in ADMIN_PATHS


@dataclass(slots=True)
class Resource:
    """Every route of one path pattern, by method (HEAD mapped to its GET)."""

    pattern: str
    methods: dict[str, Route] = field(default_factory=dict)
    allow: str = ""
    use: str = ""
    ticket: bool = False  # an admin event stream: the sign-in may be a one-time ?ticket=
    admin: bool = False  # on the admin API: the caller signs in before anything else is said
    visitor_path: bool = False  # every method of it is a visitor path (Route.visitor_path)

    def __post_init__(self) -> None:
        self.admin = admin_area(self.pattern)

    def add(self, route: Route) -> None:
        if route.method in self.methods:
            raise ValueError(f"two routes for {route.method} {route.pattern}")
        if self.methods and route.visitor_path != self.visitor_path:
            raise ValueError(f"{route.pattern}: a path is a visitor path for every method or for none")
        self.methods[route.method] = route
        self.visitor_path = route.visitor_path
        self.ticket = self.ticket or route.ticket
        if route.method == "GET" and route.head:
            self.methods["HEAD"] = route
        named = sorted({r.method for r in self.methods.values()})
        allowed = sorted(self.methods)
        self.allow = ", ".join(allowed)
        self.use = f"Use {' or '.join(named)}."

    def route_for(self, method: str) -> Route:
        """The route for ``method``, or the one 405 this server answers (with ``Allow``)."""
        route = self.methods.get(method)
        if route is None:
            raise self.not_allowed()
        return route

    def not_allowed(self) -> HttpError:
        return HttpError(405, "method_not_allowed", self.use, headers=[("Allow", self.allow)])


@dataclass(frozen=True, slots=True)
class _Pattern:
    resource: Resource
    literal: str  # the path up to the first parameter: a cheap first test
    parts: tuple[str, ...]  # the segments after the leading "/"
    tail: bool  # the last part is {name...}

    def match(self, path: str) -> Mapping[str, str] | None:
        if not path.startswith(self.literal):
            return None
        segments = path[1:].split("/")
        parts = self.parts
        last = len(parts) - 1
        if len(segments) < len(parts) or (not self.tail and len(segments) != len(parts)):
            return None
        params: dict[str, str] = {}
        for i, part in enumerate(parts):
            if part[:1] != "{":
                if segments[i] != part:
                    return None
                continue
            if self.tail and i == last:
                params[part[1:-4]] = "/".join(segments[i:])  # may be empty: "/docs/" is the docs' own
            else:
                value = segments[i]
                if not value:
                    return None
                params[part[1:-1]] = value
        return params


class Router:
    def __init__(self, routes: Iterable[Route]) -> None:
        self.routes = tuple(routes)
        #: literal paths, looked up first (the hot routes are all literal: one dict look-up)
        self.exact: dict[str, Resource] = {}
        self._patterns: list[_Pattern] = []
        by_pattern: dict[str, Resource] = {}
        for route in self.routes:
            resource = by_pattern.get(route.pattern)
            if resource is None:
                resource = by_pattern[route.pattern] = Resource(route.pattern)
                if "{" in route.pattern:
                    self._patterns.append(_compile(resource))
                else:
                    self.exact[route.pattern] = resource
            resource.add(route)

    def match(self, path: str) -> tuple[Resource, Mapping[str, str]] | None:
        """The resource serving a canonical path and the path's parameters, or None (404)."""
        resource = self.exact.get(path)
        if resource is not None:
            return resource, NO_PARAMS
        return self.match_pattern(path)

    def match_pattern(self, path: str) -> tuple[Resource, Mapping[str, str]] | None:
        """The first pattern that matches a path no literal route has."""
        for pattern in self._patterns:
            params = pattern.match(path)
            if params is not None:
                return pattern.resource, params
        return None


def _compile(resource: Resource) -> _Pattern:
    pattern = resource.pattern
    parts = tuple(pattern[1:].split("/"))
    for i, part in enumerate(parts):
        if part.startswith("{") and (not part.endswith("}") or (part.endswith("...}") and i != len(parts) - 1)):
            raise ValueError(f"bad route pattern {pattern!r}")
    literal = pattern[: pattern.index("{")]
    return _Pattern(resource, literal, parts, parts[-1].endswith("...}"))

"""``GET /api/openapi.json``: the document of the table handed in, built on first use, with an ETag and no-cache."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from queue_manager import __version__
from queue_manager.http.negotiate import etag_matches
from queue_manager.http.wire import JSON_TYPE, send_response
from queue_manager.routes.apidoc.document import Rendered, build
from queue_manager.routes.call import Call
from queue_manager.routes.router import Route


class Description:
    """One table of routes described: its document, rendered once, and the route handler that serves it.

    ``table`` is read on first use, not when the description is made: the table names this description's own
    handler, so it is handed in as a function that returns it once it exists.
    """

    __slots__ = ("_rendered", "_table", "version")

    def __init__(self, table: Callable[[], Iterable[Route]], version: str = __version__) -> None:
        self._table = table
        self.version = version
        self._rendered: Rendered | None = None

    def rendered(self) -> Rendered:
        """The document of the table, built on first use (a table is fixed once made)."""
        if self._rendered is None:
            self._rendered = Rendered(build(self._table(), self.version))
        return self._rendered

    async def openapi_json(self, call: Call) -> None:
        doc = self.rendered()
        req = call.req
        headers = [(b"cache-control", b"no-cache"), (b"etag", doc.etag)]
        if etag_matches(req.headers.get(b"if-none-match"), doc.etag):
            await send_response(call.send, 304, b"", headers, head=True)
            return
        await send_response(call.send, 200, doc.body, [JSON_TYPE, *headers], req.method == "HEAD")

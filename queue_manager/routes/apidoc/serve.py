"""``GET /api/openapi.json``: the document, generated once per process, with an ETag and no-cache."""

from __future__ import annotations

from queue_manager import __version__
from queue_manager.http.negotiate import etag_matches
from queue_manager.http.wire import JSON_TYPE, send_response
from queue_manager.routes.apidoc.document import Rendered, build
from queue_manager.routes.call import Call

_rendered: list[Rendered] = []  # the one rendering of this process


def rendered() -> Rendered:
    """The document of this process's table, built on first use (the table is fixed once imported)."""
    if not _rendered:
        # the table names this module's handler, so it is read here, once, rather than at import
        from queue_manager.routes.table import TABLE

        _rendered.append(Rendered(build(TABLE, __version__)))
    return _rendered[0]


async def openapi_json(call: Call) -> None:
    doc = rendered()
    req = call.req
    headers = [(b"cache-control", b"no-cache"), (b"etag", doc.etag)]
    if etag_matches(req.headers.get(b"if-none-match"), doc.etag):
        await send_response(call.send, 304, b"", headers, head=True)
        return
    await send_response(call.send, 200, doc.body, [JSON_TYPE, *headers], req.method == "HEAD")

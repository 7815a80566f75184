"""Body chunks written straight to the connection, for the frames of live streams.

A live stream's frame through ASGI costs a message dict and a coroutine of uvicorn's ``send``; with
tens of thousands of streams fed every second that is a visible share of the server's CPU. The
server runs uvicorn's httptools protocol, whose ASGI ``send`` is the bound method of the request's
cycle: when the response is chunked, :func:`direct_writer` returns a function that writes one chunk
on the cycle's transport at once, exactly the bytes ``send`` would have written. Anything it is not
sure of (another server, a HEAD request, a response that is not chunked) gets ``None``, and the
caller keeps using ``send``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from queue_manager.http.wire import Send

__all__ = ["DirectWrite", "direct_writer"]

#: Writes one body chunk now; False when it cannot (the client's reading is behind): use ``send``.
DirectWrite = Callable[[bytes], bool]


def direct_writer(send: Send) -> DirectWrite | None:
    """For ``send`` after a chunked ``http.response.start``, a writer of body chunks; else None."""
    cycle: Any = getattr(send, "__self__", None)
    if cycle is None or getattr(cycle, "send", None) != send:
        return None
    transport = getattr(cycle, "transport", None)
    flow = getattr(cycle, "flow", None)
    scope = getattr(cycle, "scope", None)
    if transport is None or flow is None or not isinstance(scope, dict):
        return None
    if not getattr(cycle, "response_started", False) or getattr(cycle, "chunked_encoding", None) is not True:
        return None
    if scope.get("method") == "HEAD":
        return None
    write = transport.write

    def write_chunk(body: bytes) -> bool:
        if cycle.disconnected:
            return True  # what send does: the stream ends when the disconnect is read
        if flow.write_paused or cycle.response_complete:
            return False
        write(b"%x\r\n%b\r\n" % (len(body), body))
        return True

    return write_chunk

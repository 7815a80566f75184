"""Body chunks written straight to the connection, for the frames of live streams.

A live stream's frame through ASGI costs a message dict and a coroutine of uvicorn's ``send``; with
tens of thousands of streams fed every second that is a visible share of the server's CPU. The
server runs uvicorn's httptools protocol, whose ASGI ``send`` is the bound method of the request's
cycle: when the response is chunked, :func:`chunked_cycle` hands back that cycle and
:func:`write_chunk` writes one chunk on its transport at once, exactly the bytes ``send`` would have
written. Anything it is not sure of (another server, a HEAD request, a response that is not chunked)
gets ``None``, and the caller keeps using ``send``. A stream keeps the cycle, not a closure around
it: tens of thousands of open streams each pay for what they hold.
"""

from __future__ import annotations

from typing import Any

from queue_manager.http.wire import Send

__all__ = ["chunked_cycle", "write_chunk"]


def chunked_cycle(send: Send) -> Any | None:
    """For ``send`` after a chunked ``http.response.start``, the cycle to write chunks on; else None."""
    cycle: Any = getattr(send, "__self__", None)
    if cycle is None or getattr(cycle, "send", None) != send:
        return None
    if getattr(cycle, "transport", None) is None or getattr(cycle, "flow", None) is None:
        return None
    scope = getattr(cycle, "scope", None)
    if not isinstance(scope, dict) or scope.get("method") == "HEAD":
        return None
    if not getattr(cycle, "response_started", False) or getattr(cycle, "chunked_encoding", None) is not True:
        return None
    return cycle


def write_chunk(cycle: Any, body: bytes) -> bool:
    """Write ``body`` as one chunk now; False when it cannot (the client's reading is behind: use ``send``)."""
    if cycle.disconnected:
        return True  # what send does: the stream ends when the disconnect is read
    if cycle.flow.write_paused or cycle.response_complete:
        return False
    cycle.transport.write(b"%x\r\n%b\r\n" % (len(body), body))
    return True

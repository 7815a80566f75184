"""Sending a prepared :class:`~queue_manager.web.static.Payload`: content negotiation, ETags and 304s."""

from __future__ import annotations

from queue_manager.http import negotiate
from queue_manager.http.wire import Request, Send, send_response
from queue_manager.web import static


def coding_for(payload: static.Payload, accept_encoding: str | None) -> str | None:
    """br, gzip or None (uncompressed): the smallest form the payload has that the client accepts; an explicit
    q=0 refuses a coding."""
    for coding in ("br", "gzip"):
        if payload.form(coding) is not None and negotiate.accepts(accept_encoding, coding):
            return coding
    return None


async def serve_payload(
    req: Request,
    send: Send,
    payload: static.Payload,
    headers: list[tuple[bytes, bytes]],
    *,
    status: int = 200,
    conditional: bool = True,
    vary: bytes = b"Accept-Encoding",
) -> None:
    """Answer a GET/HEAD with payload and the caller's headers (cache-control, security headers, …).

    Adds content-type, ``Vary`` (``vary`` names what else the answer depends on; plain Accept-Encoding is only
    sent when there are compressed forms to choose from), the ETag of the form sent and content-encoding. With
    ``conditional`` (the default) an If-None-Match naming any form's ETag is answered 304 with the same headers and
    no body; without it (an error page) no ETag is sent at all."""
    coding = coding_for(payload, req.header(b"accept-encoding"))
    out = [(b"content-type", payload.content_type.encode()), *headers]
    if payload.compressible or vary != b"Accept-Encoding":
        out.append((b"vary", vary))
    if conditional:
        out.append((b"etag", payload.etag(coding)))
        if negotiate.etag_matches(req.headers.get(b"if-none-match"), *payload.etags()):
            await send({"type": "http.response.start", "status": 304, "headers": out})
            await send({"type": "http.response.body", "body": b""})
            return
    body = payload.form(coding)
    assert body is not None  # coding_for only names a form the payload has
    if coding is not None:
        out.append((b"content-encoding", coding.encode()))
    await send_response(send, status, body, out, req.method == "HEAD")

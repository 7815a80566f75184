"""A customer's site with pages, for the install verifier's tests: a real HTTP server on a loopback address,
run in a thread of the test process.

``pages`` maps a path to what it answers: ``(status, headers, body)``. A path not in it answers 404.
``requests`` lists every path asked for, with its Host and User-Agent, so a test can see that a request
never reached the site.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Page = tuple[int, dict[str, str], bytes]


def tag(queue: str, room: str) -> str:
    return f'<script src="{queue}/qm.js" data-room="{room}" async></script>'


def html(head: str = "", body: str = "<h1>Shop</h1>") -> Page:
    text = f"<!doctype html><html><head><meta charset=utf-8><title>Shop</title>{head}</head><body>{body}</body></html>"
    return 200, {"content-type": "text/html; charset=utf-8"}, text.encode()


def redirect(location: str, status: int = 302) -> Page:
    return status, {"location": location}, b""


class PageSite:
    def __init__(self, host: str = "127.0.0.1") -> None:
        self.pages: dict[str, Page] = {}
        self.requests: list[dict[str, str]] = []
        site = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_GET(self) -> None:
                site.requests.append(
                    {
                        "path": self.path,
                        "host": self.headers.get("host") or "",
                        "userAgent": self.headers.get("user-agent") or "",
                    }
                )
                status, headers, body = site.pages.get(self.path.split("?", 1)[0], (404, {}, b"not here"))
                try:
                    self.send_response(status)
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.send_header("content-length", str(len(body)))
                    self.send_header("connection", "close")
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # the verifier stopped reading (a page past its limit)

        self._server = ThreadingHTTPServer((host, 0), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self.origin = f"http://{host}:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, name=f"pages-{self.port}", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

"""A customer's site for the target-health and autotune tests: a real HTTP server on 127.0.0.1, run in a
thread of the test process, whose answers the test changes while the queue probes it.

``status`` is what every request is answered with; ``delay`` is how slow the site is (seconds before
it answers: the site's own latency, which is what the queue measures). ``requests`` lists the method and
User-Agent of each request it got.
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Site:
    def __init__(self) -> None:
        self.status = 200
        self.delay = 0.0
        self.requests: list[tuple[str, str]] = []
        site = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_HEAD(self) -> None:
                site._answer(self)

            def do_GET(self) -> None:
                site._answer(self)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}/"
        self._thread = threading.Thread(target=self._server.serve_forever, name=f"site-{self.port}", daemon=True)
        self._thread.start()

    def _answer(self, handler: BaseHTTPRequestHandler) -> None:
        self.requests.append((handler.command, handler.headers.get("user-agent") or ""))
        status, delay = self.status, self.delay
        if delay:
            time.sleep(delay)  # the site being slow is what the test is about
        try:
            handler.send_response(status)
            handler.send_header("content-length", "0")
            handler.end_headers()
        except OSError:
            pass  # the prober gave up first

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

"""A tiny real web site for browser tests: serves a page carrying the Queue Manager tag."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager

PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Shop</title>
<script src="{queue}/qm.js" data-room="{room}" data-hide="1"></script></head>
<body><h1>Welcome to the shop</h1><p id="status">checking…</p>
<script>
window.addEventListener('load', function () {{
  if (window.QM && window.QM.check) {{
    window.QM.check().then(function (r) {{ document.getElementById('status').textContent =
      'admit=' + (r && r.admit); }});
  }}
}});
</script></body></html>"""


@contextmanager
def serve_site(queue_base: str, room: str) -> Iterator[str]:
    body = PAGE.format(queue=queue_base, room=room).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] not in ("/", "/index.html", "/checkout"):
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()

"""The console's script modules over HTTP: every module the entry reaches is at an immutable hashed URL that
revalidates to 304, and the page's CSP allows them without any inline script."""

from __future__ import annotations

import re

from harness import Server

NAV = {"accept": "text/html", "sec-fetch-mode": "navigate"}
IMPORT = re.compile(r"""\b(?:from|import)\s*["']\./([^"']+)["']""")


def test_the_module_graph_is_served_from_hashed_immutable_urls(server: Server) -> None:
    with server.client() as c:
        page = c.get("/", headers=NAV)
        assert "'unsafe-inline'" not in page.headers["content-security-policy"]
        assert "'unsafe-eval'" not in page.headers["content-security-policy"]
        assert "<script>" not in page.text and "importmap" not in page.text
        entries = re.findall(r'<script type="module" src="assets/([^"]+)"></script>', page.text)
        assert len(entries) == 1, page.text
        seen: set[str] = set()
        todo = list(entries)
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            r = c.get(f"/assets/{name}", headers={"accept-encoding": "br"})
            assert r.status_code == 200, name
            assert re.fullmatch(r"console(-[a-z]+)?-[0-9a-f]{12}\.js", name), name
            assert r.headers["content-type"].startswith("text/javascript")
            assert r.headers["cache-control"] == "public, max-age=31536000, immutable"
            assert r.headers["content-encoding"] == "br"
            again = c.get(f"/assets/{name}", headers={"accept-encoding": "br", "if-none-match": r.headers["etag"]})
            assert again.status_code == 304 and again.content == b""
            todo.extend(IMPORT.findall(r.text))
        assert len(seen) > 2, seen

"""A visitor behind the edge gate Worker (the served latest.js on workerd, in front of a local origin) in a
real browser: the Worker sends them to the waiting page, the operator opens the outflow, and the waiting
page sends them back through the Worker to the origin's page."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness import Server, create_room, start_server, unique_id

from tests.connectors.workerd_runtime import Origin, Workerd, WorkerSpec

KEY = "qm-browser-public-key-" + "5" * 24


@pytest.fixture(scope="module")
def qm() -> Iterator[Server]:
    srv = start_server({"PUBLIC_API_KEY": KEY})
    try:
        yield srv
    finally:
        srv.stop()


def test_visitor_behind_the_edge_worker_waits_then_lands_on_the_origin(
    browser: Any, qm: Server, artifacts: Path
) -> None:
    room = unique_id("edge")
    origin = Origin("Edge shop")
    script = httpx.get(qm.base_url + "/connectors/cloudflare/latest.js").content
    spec = WorkerSpec("edge", script, {"QM_URL": qm.base_url, "QM_ROOM": room, "QM_KEY": KEY, "ORIGIN_URL": origin.url})
    workerd = Workerd([spec])
    site = f"http://localhost:{spec.port}"  # another host than the queue's 127.0.0.1, as in production
    try:
        with qm.admin() as admin:
            create_room(admin, room, targetUrl=site + "/", ratePerMinute=0, name="Edge drop")
            page = browser.new_page(viewport={"width": 1000, "height": 760})
            page.goto(f"{site}/checkout")
            page.wait_for_url(f"{qm.base_url}/w/{room}*", timeout=10_000)
            page.get_by_text("You are number").wait_for(timeout=10_000)
            page.screenshot(path=str(artifacts / "edge-worker-waiting.png"), full_page=True)
            admin.post(f"/api/admin/rooms/{room}/rate", json={"ratePerMinute": 600}).raise_for_status()
            page.wait_for_url(f"{site}/checkout", timeout=20_000)
            page.get_by_text("origin served /checkout").wait_for(timeout=10_000)
            assert "qm_token" not in page.url
            page.screenshot(path=str(artifacts / "edge-worker-admitted.png"), full_page=True)
            # the door key keeps the visitor in on the next page
            page.goto(f"{site}/cart")
            page.get_by_text("origin served /cart").wait_for(timeout=10_000)
            page.close()
        assert any(path == "/checkout" for _m, path, _h in origin.requests)
    finally:
        workerd.stop()
        origin.close()

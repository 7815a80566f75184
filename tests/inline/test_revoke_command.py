"""An inline room's app ends a visitor's session with ``X-QM-Command: revoke`` on its response.

A real app (peer_app.py's ``/thanks``) answers an admitted visitor's request with the header: the visitor
gets the app's answer without it, their session ends (counted in ``sessionsRevoked``), their next page is
the waiting room's, and the next visitor in line is promoted into the freed slot and walks in. On both
proxy paths (fast and ASGI).
"""

from __future__ import annotations

import uuid
from typing import Any

from tests.conformance.harness import Server, wait_until
from tests.inline.conftest import Peer, admitted, inline_room, visitor


def _stats(srv: Server, room_id: str) -> dict[str, Any]:
    with srv.admin() as admin:
        r = admin.get(f"/api/admin/rooms/{room_id}")
    assert r.status_code == 200, r.text
    room: dict[str, Any] = r.json()["room"]
    return room


def test_the_apps_revoke_command_ends_the_session_and_the_next_visitor_gets_in(qm: Server, peer: Peer) -> None:
    host = f"revoke-{uuid.uuid4().hex[:8]}.localhost:{qm.port}"
    room_id, host = inline_room(qm, peer.url, host=host, maxConcurrent=1, presenceSec=None, queueMaxPerIp=None)
    page = {"Accept": "text/html", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}
    with visitor(qm, host) as first, visitor(qm, host) as second:
        admitted(first, room_id)
        r = first.get("/page/cart", headers=page)
        assert r.status_code == 200 and "Peer app page" in r.text, r.text
        assert _stats(qm, room_id)["activeSessions"] == 1
        r = second.post("/__qm/api/join", json={"roomId": room_id})
        assert r.status_code == 200 and r.json()["state"] == "waiting", r.text  # the one slot is taken

        thanks = first.get("/thanks", headers=page)
        assert thanks.status_code == 200 and "Thank you for your order" in thanks.text
        assert "x-qm-command" not in thanks.headers  # the app's command never reaches the visitor

        ended = wait_until(lambda: _stats(qm, room_id)["sessionsRevoked"] == 1 or None, 10, 0.05, "the revoke")
        assert ended
        assert _stats(qm, room_id)["activeSessions"] == 0
        back = first.get("/page/more", headers=page)
        assert back.status_code == 503 and back.headers.get("x-qm-queued"), back.text  # the waiting page

        def promoted() -> bool | None:
            s = second.get("/__qm/api/status", params={"roomId": room_id}).json()
            return True if s["state"] == "passed" else None

        wait_until(promoted, 10, 0.1, "the next visitor promoted")
        r = second.get("/page/cart", headers=page)
        assert r.status_code == 200 and "Peer app page" in r.text, r.text

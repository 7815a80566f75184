"""The inline front's one decision per request: whose it is, as a tagged step (inline/decision.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from queue_manager.config import load_settings
from queue_manager.http.wire import Request
from queue_manager.inline.component import Inline, QueueSide
from queue_manager.inline.decision import QUEUE, SHED, Proxy, Refuse, ServeQueue, decide
from queue_manager.services.room_changes import RoomChanges

ROOM = {"id": "shop", "targetUrl": "https://shop.example", "proxyOrigin": "http://10.0.0.5:3000"}


def _inline(env: dict[str, str] | None = None, rooms: list[dict[str, Any]] | None = None) -> Inline:
    ctx = SimpleNamespace(settings=load_settings(env or {}), counters=SimpleNamespace(), room_changes=RoomChanges())

    async def unused(*args: Any) -> Any:
        raise AssertionError("not called")

    inline = Inline(ctx, QueueSide(door_check=unused, waiting_page=unused))  # type: ignore[arg-type]
    inline.index.rebuild([ROOM] if rooms is None else rooms)
    return inline


def _decide(inline: Inline, path: str, host: str, method: str = "GET") -> Any:
    scope = {"type": "http", "method": method, "path": path, "headers": [(b"host", host.encode())]}
    req = Request(scope, None, path)  # type: ignore[arg-type]
    return decide(inline.ctx, inline, req, inline.index.lookup(host.encode()))


def test_a_host_with_no_inline_room_is_the_queues_as_asked() -> None:
    assert _decide(_inline(rooms=[]), "/api/check", "127.0.0.1:8000") is QUEUE
    assert _decide(_inline(), "/api/join", "qm.example") is QUEUE


def test_an_inline_hosts_paths_are_the_apps_but_its_qm_surface_is_the_queues() -> None:
    inline = _inline()
    step = _decide(inline, "/page", "shop.example")
    assert isinstance(step, Proxy) and step is inline.index.by_room["shop"]  # the index's own entry
    served = _decide(inline, "/__qm/api/v1/join", "shop.example", "POST")
    assert isinstance(served, ServeQueue)
    assert (served.path, served.room.room_id, served.visitors_only) == ("/api/join", "shop", False)


def test_an_admin_path_on_an_address_literal_inline_host_is_the_consoles() -> None:
    literal = {**ROOM, "id": "lit", "targetUrl": "http://127.0.0.1:9000"}
    inline = _inline(rooms=[literal])
    assert _decide(inline, "/api/admin/rooms", "127.0.0.1:9000") is QUEUE
    assert isinstance(_decide(inline, "/page", "127.0.0.1:9000"), Proxy)
    assert isinstance(
        _decide(_inline({"ADMIN_HOST": "admin.example"}, [literal]), "/api/admin/rooms", "127.0.0.1:9000"), Proxy
    )


def test_admin_host_leaves_the_inline_host_the_visitor_paths_alone() -> None:
    served = _decide(_inline({"ADMIN_HOST": "admin.example"}), "/__qm/api/admin/rooms", "shop.example")
    assert isinstance(served, ServeQueue) and served.visitors_only


def test_a_stale_qm_address_and_a_withheld_console_are_refused() -> None:
    stale = _decide(_inline(), "/__qm/api/admin/rooms", "old-shop.example")
    assert isinstance(stale, Refuse) and stale.error.code == "not_inline_host"
    withheld = _decide(_inline(), "/api/admin/rooms", "ops.example")
    assert isinstance(withheld, Refuse) and withheld.error.code == "not_found"
    assert _decide(_inline(), "/api/admin/rooms", "127.0.0.1:8000") is QUEUE  # an address literal keeps it
    none_inline = _decide(_inline(rooms=[]), "/__qm/x", "old-shop.example")
    assert isinstance(none_inline, Refuse) and none_inline.error.code == "not_inline_host"


def test_past_the_connection_ceiling_all_but_the_health_probe_is_shed() -> None:
    inline = _inline({"MAX_CONNECTIONS": "3"})
    inline.connection_count = lambda: 4
    assert _decide(inline, "/page", "shop.example") is SHED
    assert _decide(inline, "/api/check", "127.0.0.1") is SHED
    assert _decide(inline, "/healthz", "shop.example") is not SHED

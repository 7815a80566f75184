"""The inline host index: which room a request's Host belongs to.

Built from the room configs (every room with a ``proxyOrigin``), replaced whole on every room change
and on a periodic re-read, and kept as it was while the store cannot be read, so an outage still
knows which hosts are inline and what each room's ``onBackendDown`` says.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from queue_manager.http.hostname import request_host_key
from queue_manager.inline.client import Origin

# a room read's key for its branded origin-down page (bytes), added by the component's refresh
DOWN_PAGE_KEY = "_originDownPage"


@dataclass(frozen=True, slots=True)
class InlineRoom:
    room_id: str
    host_key: str  # "name" or "name:port" (port only when not the scheme's default)
    target_url: str
    origin: Origin
    on_backend_down: str
    down_page: bytes | None = None  # its origin-down page in the room's brand; None: the plain one
    access_rules: bool = False  # the room has access rules: every request is judged by them first


def origin_of(url: str) -> Origin | None:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    host = parts.hostname
    return Origin(parts.scheme, host, port or (443 if parts.scheme == "https" else 80))


class HostIndex:
    def __init__(self) -> None:
        self.by_host: dict[str, InlineRoom] = {}
        self.by_room: dict[str, InlineRoom] = {}
        self.source = "none"  # where the current index came from: store | none

    def __bool__(self) -> bool:
        return bool(self.by_host)

    def lookup(self, host: bytes | None) -> InlineRoom | None:
        if not host or not self.by_host:
            return None
        text = host.decode("latin-1")
        hit = self.by_host.get(text.lower())
        if hit is not None:
            return hit
        return self.by_host.get(request_host_key(text))

    def rebuild(self, rooms: list[dict[str, Any]], source: str = "store", keep: Iterable[str] = ()) -> None:
        """The index of ``rooms``; the rooms named in ``keep`` that ``rooms`` lacks keep their entries (a room
        being rebuilt from the journal is missing from the store's list, yet its host is still its own)."""
        by_host: dict[str, InlineRoom] = {}
        by_room: dict[str, InlineRoom] = {}
        listed = {str(r.get("id")) for r in rooms}
        for room_id in sorted(set(keep) - listed):
            kept = self.by_room.get(room_id)
            if kept is not None:
                by_host.setdefault(kept.host_key, kept)
                by_room[room_id] = kept
        for room in sorted(rooms, key=lambda r: str(r.get("id"))):
            proxy = room.get("proxyOrigin")
            target = room.get("targetUrl")
            if not proxy or not isinstance(target, str):
                continue
            origin = origin_of(proxy)
            target_parts = urlsplit(target)
            if origin is None or not target_parts.netloc:
                continue
            key = request_host_key(target_parts.netloc.rpartition("@")[2])
            entry = InlineRoom(
                room_id=str(room["id"]),
                host_key=key,
                target_url=target,
                origin=origin,
                on_backend_down=str(room.get("onBackendDown") or "closed"),
                down_page=room.get(DOWN_PAGE_KEY) if isinstance(room.get(DOWN_PAGE_KEY), bytes) else None,
                access_rules=bool(room.get("accessRules")),
            )
            by_host.setdefault(key, entry)  # two rooms on one host: the first id wins (documented)
            by_room[entry.room_id] = entry
        self.by_host = by_host
        self.by_room = by_room
        self.source = source

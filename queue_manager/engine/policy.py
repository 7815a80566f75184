"""What the HTTP layer needs to know about a room on every request, derived once per config version.

The target's origin is parsed once, and the tag-origin decision is cached per origin, so the door
check pays a dictionary look-up instead of URL parsing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from queue_manager.engine.access_rules import AccessRule
from queue_manager.engine.brand import Brand
from queue_manager.engine.languages import LANGUAGES, offered
from queue_manager.engine.model import RoomConfig
from queue_manager.engine.origins import OriginPattern, origin_allowed, origin_of

_ORIGIN_CACHE_MAX = 1024


@dataclass(slots=True)
class RoomPolicy:
    room_id: str
    name: str | None
    target_url: str
    target_origin: tuple[str, str, int] | None
    return_origins: tuple[OriginPattern, ...]
    tag_origins: tuple[OriginPattern, ...]  # tagOrigins, or returnOrigins when it is null
    protection: dict[str, Any] | None
    brand: Brand | None = None
    queueing: str = "fifo"
    reject_status: int = 503
    entry: str = "open"
    access_rules: tuple[AccessRule, ...] = ()
    languages: tuple[str, ...] = LANGUAGES  # what its visitor pages offer, the first the default
    _tag_ok: dict[str, bool] = field(default_factory=dict)

    def return_allowed(self, url: str) -> bool:
        return origin_allowed(url, self.target_url, self.return_origins)

    def tag_allowed(self, origin: str) -> bool:
        hit = self._tag_ok.get(origin)
        if hit is None:
            parsed = origin_of(origin)
            hit = parsed is not None and (
                parsed == self.target_origin or any(p.matches(*parsed) for p in self.tag_origins)
            )
            if len(self._tag_ok) >= _ORIGIN_CACHE_MAX:
                self._tag_ok.clear()
            self._tag_ok[origin] = hit
        return hit


def policy_of(cfg: RoomConfig) -> RoomPolicy:
    return RoomPolicy(
        room_id=cfg.id,
        name=cfg.name,
        target_url=cfg.target_url,
        target_origin=origin_of(cfg.target_url),
        return_origins=cfg.return_origins,
        tag_origins=cfg.tag_origins if cfg.tag_origins is not None else cfg.return_origins,
        protection=cfg.protection,
        brand=cfg.brand,
        queueing=cfg.queueing,
        reject_status=cfg.reject_status,
        entry=cfg.entry,
        access_rules=cfg.access_rules,
        languages=offered(cfg.languages),
    )

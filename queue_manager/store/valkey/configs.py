"""This process's copy of each room's config, kept from the scripts' replies.

Every reply carries the room's config version (``cv``), and the config itself when the version the
call sent was not the current one. A call sends the version of its copy; a strict script changes
nothing on an older one (it answers ``cfg``, and the call runs again on the new copy). room_policy and
room_exists, asked on every request, answer from a copy a script confirmed within
``config_fresh_sec``; while Valkey is unreachable the copy, however old, is what gates the visitors.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import orjson

from queue_manager.engine.model import RoomConfig
from queue_manager.engine.policy import RoomPolicy, policy_of
from queue_manager.engine.targeting import match as match_rule
from queue_manager.store.base import StoreUnavailable
from queue_manager.store.valkey import codec


@dataclass(slots=True)
class ConfigCopy:
    cv: int
    gen: int
    cfg: RoomConfig
    policy: RoomPolicy
    confirmed: float = 0.0  # time.monotonic() when a script last confirmed this is the room's config

    def rule_args(self, url: str | None) -> tuple[str, str, str | None]:
        """(matched rule index, unprotected flag, rule id) for a door check of ``url``, as the engine's door
        prelude finds them (``engine/visitor.py``)."""
        if url is None or not self.cfg.rules:
            return "", "0", None
        rule = match_rule(self.cfg.rules, url)
        if rule is None:
            return "", "1", None
        index = next(i for i, r in enumerate(self.cfg.rules) if r is rule)
        return str(index), "1" if rule.action == "skip" else "0", rule.id


class ConfigCopies(dict[str, ConfigCopy]):
    """Room id -> its config copy (a dict: the hot paths read it with ``get``)."""

    __slots__ = ()

    def absorb(self, room_id: str, reply: dict[str, Any]) -> None:
        """Keep the config a reply carries (a reply carries it when it changed)."""
        cfg = reply.get("cfg")
        if isinstance(cfg, str) and reply.get("cv") is not None:
            config = codec.from_store(orjson.loads(cfg))
            self[room_id] = ConfigCopy(int(reply["cv"]), int(reply["gen"]), config, policy_of(config), time.monotonic())

    def required(self, room_id: str) -> ConfigCopy:
        """The copy a reply that renders has just brought or confirmed."""
        copy = self.get(room_id)
        if copy is None:  # the room was forgotten after its reply (a rebuild imported it meanwhile)
            raise StoreUnavailable(f"room {room_id!r}: no config copy")
        return copy

    def fresh(self, room_id: str, within_sec: float) -> ConfigCopy | None:
        """The copy when a script confirmed it within ``within_sec``, else None."""
        copy = self.get(room_id)
        if copy is not None and time.monotonic() - copy.confirmed < within_sec:
            return copy
        return None

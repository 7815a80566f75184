"""Calling the Lua scripts: each room's KEYS, one EVALSHA (on the lane when there is one, loaded again
on NOSCRIPT, e.g. after a Valkey restart), many rooms in one pipeline, and the driver's errors mapped
once (``errors.translate``, with the breaker's fast answer while Valkey is unreachable).

It also remembers which rooms Valkey lately answered as fenced (being rebuilt), for the fleet's health.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import orjson
from redis import exceptions as rx
from redis.asyncio import Redis

from queue_manager.store.valkey.breaker import Breaker
from queue_manager.store.valkey.cluster_lane import ClusterLanes
from queue_manager.store.valkey.errors import RoomFenced, translate
from queue_manager.store.valkey.keys import script_keys
from queue_manager.store.valkey.lane import ValkeyLane
from queue_manager.store.valkey.scripts import Script, load_all

Reply = dict[str, Any]

KEYS_CACHED = 10_000  # rooms whose encoded KEYS are kept (room ids come from requests: bounded)
FENCED_KEPT = 10_000  # rooms remembered as answered fenced (bounded the same way)


class ScriptCalls:
    """The scripts of one store, called on its client (``redis``) or its ``lane``.

    ``cluster``: the client is a Valkey cluster's (rooms spread over its masters).
    """

    def __init__(
        self, redis: Redis, lane: ValkeyLane | ClusterLanes | None, prefix: str, breaker: Breaker, cluster: bool
    ) -> None:
        self.redis = redis
        self.lane = lane
        self.prefix = prefix
        self.breaker = breaker
        self.cluster = cluster
        self.scripts: dict[str, Script] = load_all()
        self.fenced_seen: dict[str, float] = {}  # room -> time.monotonic() Valkey last answered it fenced
        self._keys: dict[str, list[bytes]] = {}  # each room's KEYS, encoded once

    async def load(self) -> None:
        """SCRIPT LOAD every script (the caller translates the driver's errors)."""
        for script in self.scripts.values():
            await self.redis.script_load(script.source)

    def slot_id(self, room_id: str) -> str:
        """The id a room's keys are named by: ``room_id``, except the empty id on a cluster (never a room,
        but asked about): the tag ``{}`` is empty, so its keys would hash apart (a CROSSSLOT refusal); named
        ``<prefix>{{}}:<name>`` instead (tag ``{``), they share a slot and the scripts answer "no room"."""
        return "{}" if self.cluster and not room_id else room_id

    def room_keys(self, room_id: str) -> list[bytes]:
        keys = self._keys.get(room_id)
        if keys is None:
            if len(self._keys) >= KEYS_CACHED:
                self._keys.clear()
            keys = self._keys[room_id] = [k.encode() for k in script_keys(self.prefix, self.slot_id(room_id))]
        return keys

    async def evalsha(self, script: Script, keys: Sequence[str | bytes], args: Sequence[str]) -> Any:
        lane = self.lane
        try:
            if lane is not None:
                return await lane.execute("EVALSHA", script.sha, len(keys), *keys, *args)
            return await self.redis.evalsha(script.sha, len(keys), *keys, *args)
        except rx.NoScriptError:
            await self.redis.script_load(script.source)
            if lane is not None:
                return await lane.execute("EVALSHA", script.sha, len(keys), *keys, *args)
            return await self.redis.evalsha(script.sha, len(keys), *keys, *args)

    async def eval(self, name: str, room_id: str, args: Sequence[str]) -> Reply:
        """Script ``name`` on ``room_id``'s keys; its JSON reply decoded."""
        try:
            with translate(room_id, self.breaker):
                raw = await self.evalsha(self.scripts[name], self.room_keys(room_id), args)
        except RoomFenced:
            self.saw_fenced(room_id)
            raise
        reply: Reply = orjson.loads(raw)
        return reply

    async def eval_many(self, name: str, calls: list[tuple[str, list[str]]]) -> list[Reply | Exception]:
        """One round trip for many rooms (a pipeline); each script is still atomic on its own."""
        if not calls:
            return []
        script = self.scripts[name]
        with translate(None, self.breaker):
            async with self.redis.pipeline(transaction=False) as pipe:
                for room_id, args in calls:
                    keys = self.room_keys(room_id)
                    # (by name: redis-py's cluster pipeline blocks its evalsha method, not the command)
                    pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
                raw = await pipe.execute(raise_on_error=False)
        out: list[Reply | Exception] = []
        for (room_id, args), item in zip(calls, raw, strict=True):
            if isinstance(item, rx.NoScriptError):
                try:
                    out.append(await self.eval(name, room_id, args))
                except Exception as exc:  # handed back per room
                    out.append(exc)
            elif isinstance(item, Exception):
                try:
                    with translate(room_id):  # an error reply of one room: Valkey answered
                        raise item
                except Exception as exc:  # handed back per room
                    if isinstance(exc, RoomFenced):
                        self.saw_fenced(room_id)
                    out.append(exc)
            else:
                out.append(orjson.loads(item))
        return out

    def saw_fenced(self, room_id: str) -> None:
        if len(self.fenced_seen) >= FENCED_KEPT:
            self.fenced_seen.clear()
        self.fenced_seen[room_id] = time.monotonic()

    def fenced_recently(self, within_sec: float = 30.0) -> set[str]:
        """Rooms Valkey answered as fenced (being rebuilt) within ``within_sec``."""
        now = time.monotonic()
        return {room for room, at in self.fenced_seen.items() if now - at < within_sec}

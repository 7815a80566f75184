"""Changes of a room's config on Valkey: create, update (a compare-and-set) and schedule.

The change is built on the config copy the writing script insists on (strict): when another instance
changed the room in between, the script answers ``cfg`` and changes nothing, and the change is built
again on the new config. A room created or deleted meanwhile by another instance is read again. Each
change's event carries the fields it changed, the config (the logo's bytes only when new) and, when
it schedules a drop, the seed it committed to (``draws.py``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import queue_manager.engine.engine as engine_module
from queue_manager.engine.errors import EngineError, bad_field, no_room
from queue_manager.engine.events import Event
from queue_manager.engine.model import (
    RoomConfig,
    apply_fields,
    check_room_id,
    check_schedule_body,
    normalise_body,
    parse_opens_at,
)
from queue_manager.store.base import StoreUnavailable
from queue_manager.store.valkey import codec
from queue_manager.store.valkey.arguments import to_json
from queue_manager.store.valkey.configs import ConfigCopy
from queue_manager.store.valkey.draws import OneSeed, commits
from queue_manager.store.valkey.registry import RoomRegistry
from queue_manager.store.valkey.runner import MAX_ATTEMPTS, RoomRunner, events_of

Finish = Callable[[list[Event]], Awaitable[None]]


class _Retry(Exception):
    """Another instance created or deleted the room between the read and the write."""


def _with_data(event: Event, type_: str, data: dict[str, Any]) -> Event:
    if event.type == type_:
        event.data = data
    return event


class ConfigWrites:
    """``finish(events)``: commit a change's events and tell the listeners (the store's)."""

    def __init__(self, runner: RoomRunner, registry: RoomRegistry, finish: Finish) -> None:
        self._runner = runner
        self._registry = registry
        self._finish = finish

    async def upsert(
        self, body: dict[str, Any], expect_state: str | None, expect: Mapping[str, Any] | None, system: bool
    ) -> tuple[str, bool, list[str]]:
        """(room id, created, fields changed)."""
        body = normalise_body(body, system=system)
        if "id" not in body:
            raise bad_field("id", "id is required.", "invalid_room_id")
        room_id = body["id"]
        if not isinstance(room_id, str):
            check_room_id(room_id)
        for _ in range(MAX_ATTEMPTS):
            cur, _reply = await self._runner.read_config(room_id)
            try:
                if cur is None:
                    if expect_state is not None or expect:
                        check_room_id(room_id)
                        raise no_room(room_id)
                    return room_id, True, await self._create(room_id, body)
                return room_id, False, await self._update(room_id, body, cur, expect_state, expect)
            except _Retry:
                continue  # created or deleted meanwhile by another instance: read again
        raise StoreUnavailable(f"room {room_id!r}: too much contention, try again")

    async def _create(self, room_id: str, body: dict[str, Any]) -> list[str]:
        check_room_id(room_id)
        cfg, changed = apply_fields(None, body)
        await self._create_with(room_id, cfg, changed)
        return changed

    async def put(self, room_id: str, cfg: RoomConfig) -> None:
        """Give ``room_id`` (a pre-queue shard, shards.py) the config ``cfg`` as a whole, created if it is not
        there; a change journaled as any other, no drop seed committed (a shard never draws)."""
        for _ in range(MAX_ATTEMPTS):
            cur, _reply = await self._runner.read_config(room_id)
            try:
                if cur is None:
                    await self._create_with(room_id, cfg, [], seed=False)
                elif cur.cfg != cfg:
                    await self._replace(room_id, cfg, cur)
                return
            except _Retry:
                continue
        raise StoreUnavailable(f"room {room_id!r}: too much contention, try again")

    async def _replace(self, room_id: str, cfg: RoomConfig, cur: ConfigCopy) -> None:
        held: dict[str, RoomConfig] = {}

        def put_args(cache: ConfigCopy | None) -> list[str]:
            base = held["base"] = cache.cfg if cache is not None else cur.cfg
            old_rules = {(r.id, r.pattern, r.action): i for i, r in enumerate(base.rules)}
            rule_map = [old_rules.get((r.id, r.pattern, r.action), -1) for r in cfg.rules]
            # a shard holds no ticket: rescheduling its clocks and restarting its pacing cost nothing
            args = ["update", room_id, to_json(codec.store_form(cfg)), *codec.lua_fields(cfg), "1", "1"]
            return [*args, to_json(rule_map), "", ""]

        runner = self._runner
        try:
            _, events = await runner.run("upsert", room_id, await runner.now(), put_args, cv="strict")
        except EngineError as err:
            if err.code == "no_room":
                raise _Retry from None
            raise
        data = {"fields": [], "config": cfg.to_event(held["base"])}
        await self._finish([_with_data(e, "room.update", data) for e in events])

    async def _create_with(self, room_id: str, cfg: RoomConfig, changed: list[str], *, seed: bool = True) -> None:
        runner = self._runner
        seeds = OneSeed(runner.rng)
        commit = seed and commits(None, cfg)
        args = [*runner.header(await runner.now(), "*"), "create", room_id, to_json(codec.store_form(cfg))]
        args += [*codec.lua_fields(cfg), "0", "0", "[]", *seeds.args(commit)]
        score = await self._registry.register(room_id)
        reply = await runner.calls.eval("upsert", room_id, args)
        if reply["k"] == "conflict":
            raise _Retry
        await self._registry.register(room_id, score)
        runner.configs.absorb(room_id, reply)
        runner.refs.note(room_id, reply)
        data = {"fields": changed, "config": cfg.to_event(None), **seeds.data(commit)}
        await self._finish([_with_data(e, "room.create", data) for e in events_of(room_id, reply)])

    async def _update(
        self,
        room_id: str,
        body: dict[str, Any],
        cur: ConfigCopy,
        expect_state: str | None,
        expect: Mapping[str, Any] | None,
    ) -> list[str]:
        held: dict[str, Any] = {}
        seed = OneSeed(self._runner.rng)  # drawn once for this request, whatever the attempts

        def update_args(cache: ConfigCopy | None) -> list[str]:
            base = cache.cfg if cache is not None else cur.cfg
            # the compare of a compare-and-set: made on the config this call's script insists on (strict,
            # below: a newer config answers 'cfg', nothing changes, and this runs again on the new one)
            engine_module.check_expected_state(room_id, base.state, expect_state)
            engine_module.check_expected_fields(room_id, base, expect)
            cfg, changed = apply_fields(base, body)
            old_rules = {(r.id, r.pattern, r.action): i for i, r in enumerate(base.rules)}
            rule_map = [old_rules.get((r.id, r.pattern, r.action), -1) for r in cfg.rules]
            clocks = (base.session_ttl_sec, base.session_max_sec, base.passed_ttl_sec, base.presence_sec)
            clocks_changed = clocks != (cfg.session_ttl_sec, cfg.session_max_sec, cfg.passed_ttl_sec, cfg.presence_sec)
            moved = base.state != cfg.state or base.rate_per_minute != cfg.rate_per_minute
            held.update(cfg=cfg, changed=changed, base=base, commit=commits(base.opens_at_ms, cfg))
            return [
                "update",
                room_id,
                to_json(codec.store_form(cfg)),
                *codec.lua_fields(cfg),
                "1" if clocks_changed else "0",
                "1" if moved else "0",
                to_json(rule_map),
                *seed.args(held["commit"]),
            ]

        runner = self._runner
        try:
            _, events = await runner.run("upsert", room_id, await runner.now(), update_args, cv="strict")
        except EngineError as err:
            if err.code == "no_room":
                raise _Retry from None  # deleted meanwhile: this upsert creates it (or, expecting a state, says so)
            raise
        cfg = held["cfg"]
        changed: list[str] = held["changed"]
        # the script wrote this config only over ``base`` (strict): the logo's bytes go once, when new
        data = {"fields": changed, "config": cfg.to_event(held["base"]), **seed.data(held["commit"])}
        await self._finish([_with_data(e, "room.update", data) for e in events])
        return changed

    async def schedule(self, room_id: str, body: Any) -> None:
        runner = self._runner
        cur, _ = await runner.read_config(room_id)
        if cur is None:
            raise no_room(room_id)
        body = check_schedule_body(body)
        held: dict[str, Any] = {}
        seed = OneSeed(runner.rng)  # drawn once for this request, whatever the attempts

        def schedule_args(cache: ConfigCopy | None) -> list[str]:
            base = cache.cfg if cache is not None else cur.cfg
            fields: dict[str, Any] = {}
            if "opensAt" in body:
                fields["opensAt"] = parse_opens_at(body["opensAt"])
            if "preQueueMaxPerIp" in body:
                fields["preQueueMaxPerIp"] = body["preQueueMaxPerIp"]
            cfg, changed = apply_fields(base, {"id": room_id, **fields})
            cancelled = "opensAt" in body and body["opensAt"] is None and base.opens_at_ms is not None
            held.update(cfg=cfg, changed=changed, base=base, commit=commits(base.opens_at_ms, cfg))
            return [
                to_json(codec.store_form(cfg)),
                *codec.lua_fields(cfg),
                "1" if cancelled else "0",
                *seed.args(held["commit"]),
            ]

        try:
            schedule_args(cur)
        except EngineError:
            # the engine advances the room before it reads the values it refuses
            _, events = await runner.run("stats", room_id, await runner.now(), lambda _: ["advance"])
            await self._finish(events)
            raise
        _, events = await runner.run("schedule", room_id, await runner.now(), schedule_args, cv="strict")
        config = held["cfg"].to_event(held["base"])
        data = {"fields": held["changed"], "config": config, **seed.data(held["commit"])}
        await self._finish([_with_data(e, "room.schedule", data) for e in events])

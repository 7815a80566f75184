"""STORE=valkey: admission maintenance (the system surface's "pop maintenance") shared by the fleet.

The flag is the store's ``held`` (``Store.set_held``) on every instance: ``<prefix>popmaint`` in Valkey
holds ``1`` or ``0`` (mirrored in PostgreSQL's ``system_state`` row ``pop_maintenance_mode``, best effort,
and read from there when Valkey holds nothing), a change is announced with a ``popmaint`` hint
(``fleet/hints.py``) so every instance obeys it at once, and every instance re-reads the key on each
tick, so one that missed the hint obeys within about a second anyway.

Example::

    pop = ValkeyAdmissionMaintenance(store, r, "qm:", hints=hints, database=db, instance_id="qm-1")
    await pop.load()
    await pop.set(True)
    await pop.refresh()                              # each tick
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

import orjson

from queue_manager.journal.flags import POP_MAINTENANCE_KEY
from queue_manager.store.base import Store
from queue_manager.store.valkey.keys import pop_maintenance_key

if TYPE_CHECKING:
    from redis.asyncio import Redis

    from queue_manager.fleet.hints import Hints
    from queue_manager.journal.database import Database

log = logging.getLogger("queue_manager.fleet")

HINT = "popmaint"
READ_TIMEOUT_SEC = 0.5  # the tick's re-read gives up after this (the flag stays as last read)


class ValkeyAdmissionMaintenance:
    """Admission maintenance as the fleet's flag in Valkey (the interface: ``base.AdmissionMaintenance``)."""

    def __init__(
        self,
        store: Store,
        redis: Redis,
        prefix: str,
        *,
        hints: Hints | None = None,
        database: Database | None = None,
        instance_id: str = "",
    ) -> None:
        self.store = store
        self.redis = redis
        self.key = pop_maintenance_key(prefix)
        self.hints = hints
        self.database = database
        self.instance_id = instance_id
        if hints is not None:
            hints.on(HINT, self._on_hint)  # a missed one is repaired by the next tick's re-read

    @property
    def enabled(self) -> bool:
        return self.store.held

    @property
    def shared(self) -> bool:
        return True

    def _on_hint(self, data: dict[str, Any]) -> None:
        enabled = data.get("enabled")
        if isinstance(enabled, bool):
            self.store.set_held(enabled)

    async def load(self) -> None:
        if await self.refresh():
            return
        mirrored = await self._read_mirror()
        if mirrored is not None:
            self.store.set_held(mirrored)
            try:
                await self.redis.set(self.key, "1" if mirrored else "0")
            except Exception as exc:
                log.debug("pop maintenance: %s", exc)

    async def refresh(self) -> bool:
        try:  # bounded: the tick waits for this, and a Valkey that does not answer must not hold it up
            raw = await asyncio.wait_for(self.redis.get(self.key), READ_TIMEOUT_SEC)
        except Exception as exc:
            log.debug("pop maintenance: reading the flag failed: %s", exc)
            return False
        if raw is None:
            return False
        held = raw in (b"1", "1")
        if held != self.store.held:
            self.store.set_held(held)
        return True

    async def set(self, enabled: bool) -> None:
        self.store.set_held(enabled)
        try:
            await self.redis.set(self.key, "1" if enabled else "0")
        except Exception as exc:  # the others learn it when Valkey answers again, from the mirror at start
            log.warning("pop maintenance: the flag could not be written to Valkey: %s", exc)
        if self.hints is not None:
            await self.hints.publish(HINT, enabled=enabled)
        await self._write_mirror(enabled)

    async def _read_mirror(self) -> bool | None:
        if self.database is None:
            return None
        try:
            async with self.database.acquire() as conn:
                value = await conn.fetchval(
                    f"SELECT value FROM {self.database.sql_schema}.system_state WHERE key = $1", POP_MAINTENANCE_KEY
                )
        except Exception as exc:
            log.debug("pop maintenance: reading the mirror failed: %s", exc)
            return None
        if value is None:
            return None
        enabled = orjson.loads(value).get("enabled")
        return enabled if isinstance(enabled, bool) else None

    async def _write_mirror(self, enabled: bool) -> None:
        if self.database is None:
            return
        try:
            async with self.database.acquire() as conn:
                await conn.execute(
                    f"""INSERT INTO {self.database.sql_schema}.system_state (key, value, updated_at, updated_by)
                        VALUES ($1, $2::text::jsonb, now(), $3)
                        ON CONFLICT (key) DO UPDATE
                        SET value = EXCLUDED.value, updated_at = now(), updated_by = EXCLUDED.updated_by""",
                    POP_MAINTENANCE_KEY,
                    orjson.dumps({"enabled": enabled}).decode(),
                    self.instance_id,
                    timeout=5.0,
                )
        except Exception as exc:
            log.warning("pop maintenance: mirroring the flag into system_state failed: %s", exc)

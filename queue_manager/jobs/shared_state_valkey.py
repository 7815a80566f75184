"""The fleet's shared state in Valkey (STORE=valkey): the leader's fenced documents and every
instance's reports. The :class:`~queue_manager.jobs.shared_state.Shared` protocol and this process's copy
(:class:`~queue_manager.jobs.shared_state.MemoryShared`) live in ``shared.py``, which a memory server
imports without the Valkey client.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import orjson
from redis.exceptions import RedisError

from queue_manager.jobs.shared_state import Doc, Leadership
from queue_manager.store.valkey import keys

if TYPE_CHECKING:
    from redis.asyncio import Redis


# KEYS: leader:epoch, the document's hash. ARGV: the writer's epoch, the JSON.
_FENCED_SAVE = """
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
local mine = tonumber(ARGV[1])
if current ~= mine then return 0 end
local saved = tonumber(redis.call('HGET', KEYS[2], 'epoch') or '0')
if saved > mine then return -1 end
redis.call('HSET', KEYS[2], 'epoch', ARGV[1], 'state', ARGV[2])
return 1
"""

_FENCED = {"alerts:state": keys.alerts_state_key, "autopilot": keys.autopilot_key}
_REPORTS = {"alerts:storage": keys.alerts_storage_key, "targets": keys.targets_key}


class ValkeyShared:
    """The fleet's copy, in Valkey. A save or a report that cannot reach Valkey is not made (False, or
    nothing); a read raises the driver's error, which the alert frame takes as Valkey being away."""

    errors: tuple[type[Exception], ...] = (RedisError,)

    def __init__(self, client: Redis, prefix: str, leadership: Leadership) -> None:
        self.client = client
        self.prefix = prefix
        self.leadership = leadership
        self.epoch_key = keys.leader_epoch_key(prefix)
        self._save = client.register_script(_FENCED_SAVE)
        self.refused_stale = 0  # saves refused because the stored state carries a newer epoch

    def _key(self, name: str) -> str:
        make = _FENCED.get(name) or _REPORTS.get(name)
        if make is None:
            raise KeyError(name)
        return make(self.prefix)

    async def load(self, name: str) -> Doc | None:
        raw = await self.client.hget(self._key(name), "state")
        if raw is None:
            return None
        doc = orjson.loads(raw)
        return doc if isinstance(doc, dict) else None

    async def save(self, name: str, doc: Doc) -> bool:
        lead = self.leadership
        if not lead.leader:
            return False
        try:
            done = int(await self._save(keys=[self.epoch_key, self._key(name)], args=[lead.epoch, orjson.dumps(doc)]))
        except (RedisError, OSError):
            return False
        if done < 0:
            self.refused_stale += 1
        return done > 0

    async def report(self, name: str, field: str, doc: Doc | None) -> None:
        key = self._key(name)
        with contextlib.suppress(RedisError, OSError):
            if doc is None:
                await self.client.hdel(key, field)
            else:
                await self.client.hset(key, field, orjson.dumps(doc))

    async def reports(self, name: str) -> dict[str, Doc]:
        raw = await self.client.hgetall(self._key(name))
        out: dict[str, Doc] = {}
        for field, value in raw.items():
            with contextlib.suppress(ValueError):
                doc = orjson.loads(value)
                if isinstance(doc, dict):
                    out[field.decode() if isinstance(field, bytes) else str(field)] = doc
        return out

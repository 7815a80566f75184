"""State the fleet shares: what the leader decided, and what each instance reports.

Two kinds of document:

* **fenced** (``alerts:state``, ``autopilot``): written by the leader only, stored with the leader
  epoch that wrote it. A save is refused unless the writer's epoch is the fleet's current one and is
  not older than the epoch saved with the document, so a leader that paused past its lease can never
  overwrite its successor's state, and a reset of ``leader:epoch`` alone cannot roll the state back;
* **reports** (``alerts:storage``, ``targets``): one field per instance or room, JSON.

``MemoryShared`` keeps both in this process (``STORE=memory``: the one process is the leader);
``ValkeyShared`` keeps them in Valkey under ``VALKEY_PREFIX``.
"""

from __future__ import annotations

import contextlib
from typing import Any, Protocol

import orjson
from redis.asyncio import Redis
from redis.exceptions import RedisError

from queue_manager.store.valkey import keys

Doc = dict[str, Any]


class Leadership(Protocol):
    """Whether this instance runs the fleet's jobs, and under which epoch."""

    @property
    def leader(self) -> bool: ...

    @property
    def epoch(self) -> int: ...


class Solo:
    """STORE=memory: the one process is always the leader."""

    leader = True
    epoch = 1


class Shared(Protocol):
    leadership: Leadership

    async def load(self, name: str) -> Doc | None:
        """A fenced document (``alerts:state`` or ``autopilot``); None when there is none yet."""

    async def save(self, name: str, doc: Doc) -> bool:
        """Write a fenced document; False when this instance is not (or no longer) the leader."""

    async def report(self, name: str, field: str, doc: Doc | None) -> None:
        """Set (or, with None, remove) one field of a report hash."""

    async def reports(self, name: str) -> dict[str, Doc]:
        """Every field of a report hash."""


class MemoryShared:
    def __init__(self) -> None:
        self.leadership: Leadership = Solo()
        self._docs: dict[str, Doc] = {}
        self._reports: dict[str, dict[str, Doc]] = {}

    async def load(self, name: str) -> Doc | None:
        doc = self._docs.get(name)
        return None if doc is None else orjson.loads(orjson.dumps(doc))

    async def save(self, name: str, doc: Doc) -> bool:
        self._docs[name] = orjson.loads(orjson.dumps(doc))
        return True

    async def report(self, name: str, field: str, doc: Doc | None) -> None:
        hash_ = self._reports.setdefault(name, {})
        if doc is None:
            hash_.pop(field, None)
        else:
            hash_[field] = doc

    async def reports(self, name: str) -> dict[str, Doc]:
        return dict(self._reports.get(name, {}))


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

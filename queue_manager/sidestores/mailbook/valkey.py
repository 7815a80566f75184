"""STORE=valkey: the turn-e-mail address book in the shared Valkey (the interface: ``base.AddressBook``).

One hash per ticket, ``<prefix>mail:<room>:<gen>:<n>`` (``to``, ``lang``, ``link``, ``at``, and ``sent`` /
``lapsed`` once set), with a key TTL: the backstop at sign-up, ``LAPSED_TTL_MS`` once the entry window
lapsed. Two sorted sets index them: ``<prefix>mails`` (every entry) and ``<prefix>mails:unsent`` (not yet
claimed), score = sign-up wall ms. An index member whose hash expired is dropped by the next scan.

``claim`` is one script: it sets ``sent`` only if the hash exists and has none, so two leaders (a paused
one and its successor) can never both send.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from redis.asyncio import Redis
from redis.exceptions import RedisError

from queue_manager.clock import Clock
from queue_manager.sidestores.mailbook.base import Entry, Place
from queue_manager.store.base import StoreUnavailable
from queue_manager.store.valkey import keys

T = TypeVar("T")

# KEYS: the entry's hash, mails:unsent. ARGV: the index member, now (wall ms).
_CLAIM = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if redis.call('HSETNX', KEYS[1], 'sent', ARGV[2]) == 0 then return 0 end
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
"""

# KEYS: the entry's hash, mails:unsent. ARGV: the index member, ttl ms.
_LAPSE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if redis.call('HSETNX', KEYS[1], 'lapsed', '1') == 0 then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
"""


def _text(value: bytes | str | None) -> str:
    return value.decode() if isinstance(value, bytes) else (value or "")


class ValkeyAddressBook:
    """STORE=valkey: the entries in Valkey, one hash per ticket, shared by the fleet."""

    kind = "valkey"

    def __init__(self, client: Redis, prefix: str, clock: Clock) -> None:
        self.client = client
        self.clock = clock
        self.prefix = prefix
        self.index = keys.mail_index_key(prefix)
        self.unsent = keys.mail_unsent_key(prefix)
        self._claim = client.register_script(_CLAIM)
        self._lapse = client.register_script(_LAPSE)

    def _key(self, place: Place) -> str:
        return keys.mail_key(self.prefix, place.room_id, place.gen, place.n)

    async def _call(self, op: Callable[[], Awaitable[T]]) -> T:
        try:
            return await op()
        except (RedisError, OSError) as exc:
            raise StoreUnavailable(f"valkey: {type(exc).__name__}") from exc

    async def put(self, entry: Entry, ttl_ms: int) -> None:
        key, member = self._key(entry.place), entry.place.member
        fields: dict[str | bytes | bytearray | memoryview[int] | int | float, Any] = {
            "to": entry.address,
            "lang": entry.lang,
            "link": entry.link,
            "at": str(entry.signed_ms),
        }

        async def run() -> None:
            async with self.client.pipeline(transaction=True) as pipe:
                pipe.delete(key)
                pipe.hset(key, mapping=fields)
                pipe.pexpire(key, ttl_ms)
                pipe.zadd(self.index, {member: entry.signed_ms})
                pipe.zadd(self.unsent, {member: entry.signed_ms})
                await pipe.execute()

        await self._call(run)

    def _entry(self, place: Place, raw: Any) -> Entry | None:
        if not raw:
            return None
        at = _text(raw.get(b"at"))
        return Entry(
            place=place,
            address=_text(raw.get(b"to")),
            lang=_text(raw.get(b"lang")) or "en",
            link=_text(raw.get(b"link")),
            signed_ms=int(at) if at.isascii() and at.isdigit() else 0,
            sent=b"sent" in raw,
            lapsed=b"lapsed" in raw,
        )

    async def get(self, place: Place) -> Entry | None:
        raw = await self._call(lambda: self.client.hgetall(self._key(place)))
        return self._entry(place, raw)

    async def remove(self, place: Place) -> bool:
        key, member = self._key(place), place.member

        async def run() -> bool:
            async with self.client.pipeline(transaction=True) as pipe:
                pipe.delete(key)
                pipe.zrem(self.index, member)
                pipe.zrem(self.unsent, member)
                deleted, _, _ = await pipe.execute()
            return bool(deleted)

        return await self._call(run)

    async def entries(self) -> list[Entry]:
        async def run() -> list[Entry]:
            members = [_text(m) for m in await self.client.zrange(self.index, 0, -1) if isinstance(m, bytes | str)]
            places = [(m, Place.parse(m)) for m in members]
            async with self.client.pipeline(transaction=False) as pipe:
                for _, place in places:
                    if place is not None:
                        pipe.hgetall(self._key(place))
                replies = iter(await pipe.execute())
            out: list[Entry] = []
            gone: list[str] = []
            for member, place in places:
                entry = None if place is None else self._entry(place, next(replies))
                if entry is None:
                    gone.append(member)  # expired (its TTL) or never readable: drop it from the index
                else:
                    out.append(entry)
            if gone:
                async with self.client.pipeline(transaction=False) as pipe:
                    pipe.zrem(self.index, *gone)
                    pipe.zrem(self.unsent, *gone)
                    await pipe.execute()
            return out

        return await self._call(run)

    async def claim(self, place: Place) -> bool:
        now = self.clock.wall_ms()
        done = await self._call(lambda: self._claim(keys=[self._key(place), self.unsent], args=[place.member, now]))
        return int(done) == 1

    async def lapse(self, place: Place, ttl_ms: int) -> None:
        await self._call(lambda: self._lapse(keys=[self._key(place), self.unsent], args=[place.member, ttl_ms]))

    async def counts(self) -> tuple[int, int]:
        async def run() -> tuple[int, int]:
            async with self.client.pipeline(transaction=False) as pipe:
                pipe.zcard(self.index)
                pipe.zcard(self.unsent)
                total, unsent = await pipe.execute()
            return int(total), int(unsent)

        return await self._call(run)

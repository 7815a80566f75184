"""A room's logo is journaled once: room changes that keep the logo name it by reference (type, sha256,
bytes), the change that sets or replaces it carries the bytes, and a rebuild from those events gives the
room the same logo — on both stores."""

from __future__ import annotations

import base64
import hashlib
import random
import struct
import zlib
from typing import Any

import orjson

from queue_manager.engine.events import Event
from queue_manager.engine.replay import replay
from queue_manager.engine.snapshot import dump
from tests.store.conftest import Env, drop_prefix

REFERENCE_KEYS = {"type", "sha256", "bytes"}


def noisy_png(seed: int, side: int = 140) -> bytes:
    """A PNG of random pixels (it does not compress): 140 px a side is about 59 KB, near the 64 KiB cap."""
    rng = random.Random(seed)

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    raw = b"".join(b"\x00" + rng.randbytes(side * 3) for _ in range(side))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw, 9))
        + chunk(b"IEND", b"")
    )


def logo_body(data: bytes) -> dict[str, Any]:
    return {"logo": {"type": "image/png", "data": base64.b64encode(data).decode()}}


def logo_in(event: Event) -> dict[str, Any] | None:
    brand = event.data["config"]["brand"]
    return None if brand is None else brand["logo"]  # type: ignore[no-any-return]


def changes(events: list[Event]) -> list[Event]:
    return [e for e in events if e.type in ("room.create", "room.update", "room.schedule")]


async def rebuilt_logo(env: Env, events: list[Event]) -> bytes:
    """The room rebuilt from ``events`` alone: its logo's bytes. On Valkey the rebuilt room is put back
    after the room's keys are gone (as a fleet rebuild does) and the bytes are read from Valkey's export."""
    room = replay(events, env.clock)
    assert room.cfg.brand is not None and room.cfg.brand.logo is not None
    if env.kind == "memory":
        return bytes(room.cfg.brand.logo.data)
    assert env.redis is not None
    await drop_prefix(env.redis, env.prefix)
    await env.store.import_room(dump(room))
    exported = await env.store.export_room("r")
    return base64.b64decode(exported["config"]["brand"]["logo"]["data"])


async def test_a_logo_kept_through_twenty_rate_changes_is_journaled_once(stores: Env) -> None:
    env = stores
    png = noisy_png(1)
    room = await env.room("r", ratePerMinute=60, brand=logo_body(png))
    sha = room["brand"]["logo"]["sha256"]
    assert sha == hashlib.sha256(png).hexdigest() and len(png) > 55_000
    for i in range(20):  # what autotune does every stepSec: the rate only
        await env.store.upsert_room({"id": "r", "ratePerMinute": 61 + i}, expect_state="active")
    events = env.events()
    made = changes(events)
    assert [e.type for e in made] == ["room.create"] + ["room.update"] * 20
    first = logo_in(made[0])
    assert first is not None and base64.b64decode(first["data"]) == png
    for e in made[1:]:
        assert logo_in(e) == {"type": "image/png", "sha256": sha, "bytes": len(png)}
        assert len(orjson.dumps(e.as_dict())) < 3_000  # no logo in it: the config alone
    assert await rebuilt_logo(env, events) == png


async def test_replacing_the_logo_journals_the_new_bytes_once(stores: Env) -> None:
    env = stores
    old, new = noisy_png(2, side=40), noisy_png(3, side=60)
    await env.room("r", brand={**logo_body(old), "displayName": "Shop"})
    await env.store.upsert_room({"id": "r", "ratePerMinute": 10})
    await env.store.upsert_room({"id": "r", "brand": logo_body(new)})
    for rate in (11, 12):
        await env.store.upsert_room({"id": "r", "ratePerMinute": rate})
    await env.store.schedule("r", {"preQueueMaxPerIp": 2})
    await env.store.upsert_room({"id": "r", "brand": {"displayName": "Shop 2"}})
    events = env.events()
    made = changes(events)
    carried = [
        (e.type, hashlib.sha256(base64.b64decode(logo["data"])).hexdigest())
        for e in made
        if "data" in (logo := logo_in(e) or {})
    ]
    assert carried == [
        ("room.create", hashlib.sha256(old).hexdigest()),
        ("room.update", hashlib.sha256(new).hexdigest()),
    ]
    assert [set(logo_in(e) or {}) for e in made[3:]] == [REFERENCE_KEYS] * 4  # rates, schedule, display name
    assert made[-2].type == "room.schedule"
    assert await rebuilt_logo(env, events) == new


async def test_a_logo_removed_and_set_again_carries_its_bytes_again(stores: Env) -> None:
    env = stores
    png = noisy_png(4, side=30)
    await env.room("r", brand=logo_body(png))
    await env.store.upsert_room({"id": "r", "brand": {"logo": None, "displayName": "Shop"}})
    await env.store.upsert_room({"id": "r", "brand": logo_body(png)})  # the same file, back after none
    events = env.events()
    made = changes(events)
    assert logo_in(made[1]) is None
    again = logo_in(made[2])
    assert again is not None and base64.b64decode(again["data"]) == png
    assert await rebuilt_logo(env, events) == png

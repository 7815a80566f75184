"""The logo in PostgreSQL: the journal's rows carry its bytes once per logo, the ``rooms`` table always
holds the whole config (bytes included), and a rebuild or a checkpoint folded from the journal has the
logo; a reference the journal cannot resolve leaves the room without a logo, counted, never fenced."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import orjson
import pytest

from queue_manager.clock import FakeClock
from queue_manager.engine.engine import Engine
from queue_manager.engine.events import Event
from queue_manager.engine.replay import ReplayFenced, fold, replay
from queue_manager.engine.snapshot import dump
from tests.store.test_logo_journal import logo_body, noisy_png

TARGET = "https://shop.example"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def journal_rows(pg: Any, schema: str) -> list[tuple[int, str, int, bool]]:
    """(seq, type, size of the row's data in bytes, whether it carries a logo's bytes) of room r."""
    rows = await pg.fetch(
        f"""SELECT seq, type, octet_length(data::text) AS size,
                   coalesce((data #> '{{config,brand,logo}}') ? 'data', false) AS bytes
            FROM "{schema}".events WHERE room = 'r' ORDER BY seq"""
    )
    return [(r["seq"], r["type"], r["size"], r["bytes"]) for r in rows]


async def stored_logo(pg: Any, schema: str) -> bytes | None:
    """The logo's bytes in the rooms table's config of room r."""
    config = orjson.loads(await pg.fetchval(f"""SELECT config FROM "{schema}".rooms WHERE id = 'r'"""))
    logo = (config.get("brand") or {}).get("logo")
    return None if logo is None or "data" not in logo else base64.b64decode(logo["data"])


async def test_twenty_rate_changes_journal_the_logo_once_and_the_rooms_table_keeps_it(journal, pg, schema):
    clock = FakeClock()
    engine = Engine(clock)
    png = noisy_png(7)
    engine.upsert({"id": "r", "targetUrl": TARGET, "ratePerMinute": 60, "brand": logo_body(png)})
    engine.upsert({"id": "r", "ratePerMinute": 61})
    await journal.commit(engine.drain_events())  # the create and a reference in one batch
    for i in range(19):  # then one commit per change, as autotune's steps are
        clock.advance(10)
        engine.upsert({"id": "r", "ratePerMinute": 62 + i}, expect_state="active")
        await journal.commit(engine.drain_events())
    rows = await journal_rows(pg, schema)
    assert [(seq, type_, carries) for seq, type_, _, carries in rows] == [(1, "room.create", True)] + [
        (seq, "room.update", False) for seq in range(2, 22)
    ]
    assert rows[0][2] > len(png)  # the bytes, base64, once
    assert max(size for _, _, size, _ in rows[1:]) < 3_000
    total = sum(size for _, _, size, _ in rows)
    print(f"\nlogo of {len(png)} bytes, 21 room changes: {total} bytes of journal data ({rows[0][2]} the first)")
    assert await stored_logo(pg, schema) == png
    # rebuilt from the journal alone, and folded into a checkpoint: the same logo
    rebuilt = replay(await journal.read_events("r", 1), FakeClock())
    assert rebuilt.cfg.brand is not None and rebuilt.cfg.brand.logo is not None
    assert rebuilt.cfg.brand.logo.sha256 == sha(png) and rebuilt.cfg.rate_per_minute == 80
    checkpoint = await journal.checkpoint("r")
    assert checkpoint is not None and checkpoint["seq"] == 21
    assert base64.b64decode(checkpoint["config"]["brand"]["logo"]["data"]) == png


async def test_a_replaced_logo_is_journaled_once_and_the_rooms_table_follows(journal, pg, schema):
    clock = FakeClock()
    engine = Engine(clock)
    old, new = noisy_png(8, side=50), noisy_png(9, side=70)
    engine.upsert({"id": "r", "targetUrl": TARGET, "brand": logo_body(old)})
    await journal.commit(engine.drain_events())
    engine.upsert({"id": "r", "ratePerMinute": 5})
    await journal.commit(engine.drain_events())
    assert await stored_logo(pg, schema) == old  # kept from the row (the SQL)
    # the new logo and two references to it in one batch: the table takes the bytes from the batch
    engine.upsert({"id": "r", "brand": logo_body(new)})
    engine.upsert({"id": "r", "ratePerMinute": 6})
    engine.schedule("r", {"preQueueMaxPerIp": 3})
    await journal.commit(engine.drain_events())
    assert await stored_logo(pg, schema) == new
    engine.upsert({"id": "r", "ratePerMinute": 7})
    await journal.commit(engine.drain_events())
    assert await stored_logo(pg, schema) == new
    rows = await journal_rows(pg, schema)
    assert [(seq, carries) for seq, _, _, carries in rows] == [
        (1, True),
        (2, False),
        (3, True),
        (4, False),
        (5, False),
        (6, False),
    ]
    data = await pg.fetchval(f"""SELECT data::text FROM "{schema}".events WHERE room = 'r' AND seq = 3""")
    assert base64.b64decode(orjson.loads(data)["config"]["brand"]["logo"]["data"]) == new
    rebuilt = replay(await journal.read_events("r", 1), FakeClock())
    assert rebuilt.cfg.brand is not None and rebuilt.cfg.brand.logo is not None
    assert rebuilt.cfg.brand.logo.sha256 == sha(new)
    # a logo cleared: the table's config has none
    engine.upsert({"id": "r", "brand": {"logo": None}})
    await journal.commit(engine.drain_events())
    config = orjson.loads(await pg.fetchval(f"""SELECT config FROM "{schema}".rooms WHERE id = 'r'"""))
    assert config["brand"] is None


def test_a_reference_the_journal_cannot_resolve_leaves_no_logo_and_is_told() -> None:
    clock = FakeClock()
    engine = Engine(clock)
    png = noisy_png(10, side=20)
    engine.upsert({"id": "r", "targetUrl": TARGET, "brand": logo_body(png)})
    engine.upsert({"id": "r", "ratePerMinute": 9})
    events = engine.drain_events()
    # a checkpoint of the room without its logo, then the journal after it: the reference matches nothing
    plain = Engine(FakeClock())
    plain.upsert({"id": "r", "targetUrl": TARGET})
    base = dump(plain.rooms["r"])
    assert base["seq"] == 1 and events[1].data["config"]["brand"]["logo"].keys() == {"type", "sha256", "bytes"}
    lost: list[tuple[str, int, int]] = []
    rebuilt = replay(events, FakeClock(), base, lost_logo=lambda *where: lost.append(where))
    assert rebuilt.cfg.brand is None and rebuilt.cfg.rate_per_minute == 9 and rebuilt.event_seq == 2
    assert lost == [("r", 1, 2)]
    assert fold(events, base)["config"]["brand"] is None  # without a listener: the same, quietly


def test_events_journaled_before_references_still_replay() -> None:
    """A journal written while every room change carried the logo's bytes replays as it did."""
    clock = FakeClock()
    engine = Engine(clock)
    png = noisy_png(11, side=20)
    engine.upsert({"id": "r", "targetUrl": TARGET, "brand": logo_body(png)})
    engine.upsert({"id": "r", "ratePerMinute": 9})
    events = engine.drain_events()
    whole = events[0].data["config"]["brand"]["logo"]
    older = [events[0], Event(**{**_fields(events[1]), "data": _with_logo(events[1].data, whole)})]
    rebuilt = replay(older, FakeClock())
    assert rebuilt.cfg.brand is not None and rebuilt.cfg.brand.logo is not None
    assert rebuilt.cfg.brand.logo.data == png


def _fields(e: Event) -> dict[str, Any]:
    return {"type": e.type, "room": e.room, "gen": e.gen, "ts": e.ts, "seq": e.seq, "lv": e.lv}


def _with_logo(data: dict[str, Any], logo: dict[str, Any]) -> dict[str, Any]:
    config = data["config"]
    return {**data, "config": {**config, "brand": {**config["brand"], "logo": logo}}}


def test_a_config_the_rules_refuse_fences_the_room_instead_of_failing_the_rebuild() -> None:
    engine = Engine(FakeClock())
    engine.upsert({"id": "r", "targetUrl": TARGET})
    engine.upsert({"id": "r", "ratePerMinute": 9})
    create, update = engine.drain_events()
    bad = {**update.data["config"], "brand": {"logo": {"type": "image/png", "data": "not base64!"}}}
    broken = Event(**{**_fields(update), "data": {**update.data, "config": bad}})
    with pytest.raises(ReplayFenced) as fenced:
        replay([create, broken], FakeClock())
    assert fenced.value.kind == "inconsistent" and fenced.value.seq == 2 and "base64" in fenced.value.reason

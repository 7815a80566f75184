"""Events as journal rows, and the one statement that writes them.

A commit, a spool drain and the health probe all write with ``insert_sql``: an ``INSERT … SELECT
FROM unnest(arrays)`` into ``events`` (ON CONFLICT DO NOTHING on (room, gen, seq)) and, in the same
statement, the ``rooms`` upsert for any room.* event. One statement is one implicit transaction and
one round trip; ``rooms`` only moves forward in (gen, seq), so a late batch never overwrites a newer
definition.

A room change carries its logo's bytes only when the logo is new; otherwise the logo is a reference
(type, sha256, bytes). The ``rooms`` row keeps the bytes it holds when a config names the same logo
by reference: from an earlier room change in the same batch, else from the row itself (the SQL), so
the table always holds the whole config while the journal holds the bytes once per logo.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from queue_manager.engine.events import Event

ROOM_EVENTS = ("room.create", "room.update", "room.schedule", "room.delete")

# (room, gen, seq, type, lv, ts, data JSON text, instance, ident)
Row = tuple[str, int, int, str, int, int, str, str, str | None]


def event_row(event: Event | Mapping[str, Any], instance: str) -> Row:
    """An event as the journal stores it (``Event`` or its ``as_dict()``; a spooled row keeps its instance)."""
    d = event.as_dict() if isinstance(event, Event) else event
    data = d.get("data") or {}
    ident = data.get("ident") if d["type"] in ("join", "prequeue.join") else None
    return (
        str(d["room"]),
        int(d["gen"]),
        int(d["seq"]),
        str(d["type"]),
        int(d.get("lv") or 1),
        int(d["ts"]),
        orjson.dumps(data).decode(),
        str(d.get("instance") or instance),
        None if ident is None else str(ident),
    )


def row_dict(row: Row) -> dict[str, Any]:
    """A row as the maintenance spool records it (``event_row`` reads it back)."""
    room, gen, seq, type_, lv, ts, data, instance, _ = row
    return {
        "type": type_,
        "room": room,
        "gen": gen,
        "seq": seq,
        "ts": ts,
        "lv": lv,
        "data": orjson.loads(data),
        "instance": instance,
    }


def insert_sql(s: str) -> str:
    """The insert statement for the quoted schema ``s`` (parameters: ``insert_args``)."""
    return f"""
WITH ev AS (
    INSERT INTO {s}.events (room, gen, seq, type, lv, ts, data, instance, ident)
    SELECT u.room, u.gen, u.seq, u.type, u.lv, u.ts, u.data::jsonb, u.instance, u.ident
    FROM unnest($1::text[], $2::int[], $3::bigint[], $4::text[], $5::smallint[], $6::bigint[],
                $7::text[], $8::text[], $9::text[])
         AS u(room, gen, seq, type, lv, ts, data, instance, ident)
    ON CONFLICT (room, gen, seq) DO NOTHING
    RETURNING 1
), rm AS (
    INSERT INTO {s}.rooms AS r (id, gen, seq, config, deleted, updated_at)
    SELECT v.id, v.gen, v.seq, v.config::jsonb, v.deleted, now()
    FROM unnest($10::text[], $11::int[], $12::bigint[], $13::text[], $14::bool[])
         AS v(id, gen, seq, config, deleted)
    ON CONFLICT (id) DO UPDATE
       SET gen = EXCLUDED.gen, seq = EXCLUDED.seq,
           config = CASE
               WHEN EXCLUDED.config IS NULL THEN r.config
               WHEN ((EXCLUDED.config #> '{{brand,logo}}') ? 'sha256')
                    AND NOT ((EXCLUDED.config #> '{{brand,logo}}') ? 'data')
                    AND ((r.config #> '{{brand,logo}}') ? 'data')
                    AND (r.config #>> '{{brand,logo,sha256}}') = (EXCLUDED.config #>> '{{brand,logo,sha256}}')
               THEN jsonb_set(EXCLUDED.config, '{{brand,logo}}', r.config #> '{{brand,logo}}')
               ELSE EXCLUDED.config
           END,
           deleted = EXCLUDED.deleted, updated_at = now()
       WHERE (r.gen, r.seq) < (EXCLUDED.gen, EXCLUDED.seq)
    RETURNING 1
)
SELECT (SELECT count(*) FROM ev) AS inserted, (SELECT count(*) FROM rm) AS rooms
"""


def taken_sql(s: str) -> str:
    """Which of the given rows the journal holds for a *different* event at the same (room, gen, seq)
    (parameters: ``taken_args``): such an event was not journaled. An identical row is a re-send."""
    return f"""SELECT u.room, u.gen, u.seq
        FROM unnest($1::text[], $2::int[], $3::bigint[], $4::text[], $5::bigint[], $6::text[], $7::text[])
             AS u(room, gen, seq, type, ts, data, instance)
        JOIN {s}.events e ON e.room = u.room AND e.gen = u.gen AND e.seq = u.seq
        WHERE e.type <> u.type OR e.ts <> u.ts OR e.instance <> u.instance OR e.data <> u.data::jsonb"""


def taken_args(rows: list[Row]) -> list[Any]:
    """The 7 array parameters of ``taken_sql`` for ``rows``."""
    return [
        [r[0] for r in rows],
        [r[1] for r in rows],
        [r[2] for r in rows],
        [r[3] for r in rows],
        [r[5] for r in rows],
        [r[6] for r in rows],
        [r[7] for r in rows],
    ]


def insert_args(rows: list[Row]) -> list[Any]:
    """The 14 array parameters of the insert statement for ``rows``."""
    columns: list[list[Any]] = [list(col) for col in zip(*rows, strict=True)] if rows else [[] for _ in range(9)]
    latest: dict[str, Row] = {}
    for row in rows:
        if row[3] in ROOM_EVENTS:
            kept = latest.get(row[0])
            if kept is None or (row[1], row[2]) > (kept[1], kept[2]):
                latest[row[0]] = row
    rooms = list(latest.values())
    configs: list[str | None] = []
    for row in rooms:
        config = orjson.loads(row[6]).get("config") if row[3] != "room.delete" else None
        if config is not None:
            config = _with_batch_logo(config, row, rows)
        configs.append(None if config is None else orjson.dumps(config).decode())
    return [
        *columns,
        [r[0] for r in rooms],
        [r[1] for r in rooms],
        [r[2] for r in rooms],
        configs,
        [r[3] == "room.delete" for r in rooms],
    ]


def _logo_of(config: Any) -> dict[str, Any] | None:
    brand = config.get("brand") if isinstance(config, dict) else None
    logo = brand.get("logo") if isinstance(brand, dict) else None
    return logo if isinstance(logo, dict) else None


def _with_batch_logo(config: dict[str, Any], latest: Row, rows: list[Row]) -> dict[str, Any]:
    """``config`` (the room's newest in this batch) with its logo reference made whole from an earlier
    room change of the same batch that carried the bytes; the row written before this batch is the
    SQL's to consult. Without a reference, or without such a change, ``config`` as it is."""
    logo = _logo_of(config)
    if logo is None or "data" in logo:
        return config
    room, at = latest[0], (latest[1], latest[2])
    earlier_changes = [r for r in rows if r[0] == room and r[3] in ROOM_EVENTS and (r[1], r[2]) < at]
    for row in sorted(earlier_changes, key=lambda r: (r[1], r[2]), reverse=True):
        if row[3] == "room.delete":
            break  # an earlier generation's logo is no logo of this one
        earlier = _logo_of(orjson.loads(row[6]).get("config"))
        if earlier is not None and "data" in earlier and earlier.get("sha256") == logo.get("sha256"):
            return {**config, "brand": {**config["brand"], "logo": earlier}}
    return config


def audit_insert_sql(s: str) -> str:
    """One audit row (parameters: ``audit_args``); a row whose ``uid`` is there already is not added again."""
    return f"""INSERT INTO {s}.audit (at, actor_id, actor_name, action, target, room, ok, ip, detail, instance, uid)
        VALUES (to_timestamp($1::double precision / 1000), $2, $3, $4, $5, $6, $7, $8, $9::text::jsonb, $10, $11)
        ON CONFLICT (uid) DO NOTHING"""


def audit_args(record: Mapping[str, Any]) -> list[Any]:
    """The parameters of ``audit_insert_sql`` for an audit record as the spool keeps it."""
    return [
        int(record["ts"]),
        record.get("actorId"),
        str(record["actor"]),
        str(record["action"]),
        record.get("target"),
        record.get("roomId"),
        bool(record.get("ok", True)),
        record.get("ip"),
        orjson.dumps(record.get("detail") or {}).decode(),
        record.get("instance"),
        record.get("uid"),
    ]

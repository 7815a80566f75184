"""The PostgreSQL schema, as versioned migrations applied at boot (idempotent, safe to race).

``migrate(conn, schema)`` creates the schema if needed, takes a transaction-scoped advisory lock
(two instances booting at once apply each step once), and applies every step newer than the
schema's ``schema_migrations`` rows, each recorded in the same transaction. A step is never edited
once released: a change is a new step.

Tables (all in ``schema``, default ``qm``):

``events``          the journal: one row per event, primary key (room, gen, seq), so a replay or a
                    spool drain never applies one twice (inserts use ON CONFLICT DO NOTHING).
                    ``ident`` is the client address of a join (the guide: the journal records it).
``room_snapshots``  checkpoints (format v1 of docs/events.md), primary key (room, gen, seq); ``packed``
                    holds the document's JSON zlib-compressed (``snapshot``, jsonb, the older ones).
``rooms``           the current definition of every room id, kept in step by the room.* events in
                    the same statement that journals them; read to build the inline host index
                    while Valkey is down. ``seq`` orders updates, so an older event never
                    overwrites a newer definition (a spool drained late, a replayed batch).
``system_state``    key -> jsonb (``maintenance_mode``, ``pop_maintenance_mode``: {"enabled": bool}).
``operators``       named keys: role, HMAC verifier (never the key), disabled_at for a revoke.
``monitor_links``   share links: author by id (created_by_id) and by name, the link's token, expiry,
                    revocation.
``timeline_notes``  the chart's marks per room, kept 24 h (``timeline.py`` writes and prunes them);
                    ``count`` is how many refusals a coalesced ``block`` mark stands for; one row per
                    (room, at, kind, note).
``audit``           the audit trail: actor, action, target, room, ok, caller's address, detail.
``history_hourly``  one row per room and hour (the report columns, the wait reservoir, coverage;
                    ``depth_sum`` and ``state``, the counter baselines a writer continues from; ``tallies``,
                    the hour's counts of the room's other counters by report column name).
``instance_runs``   one row per QM_INSTANCE_ID: when its newest run started and stopped, and whether
                    that stop was clean (``runs.py``); the next start reads it for ``server.start``.
"""

from __future__ import annotations

import re
from typing import Any

SCHEMA_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def check_schema(schema: str) -> str:
    """A schema name we are willing to splice into SQL (lower-case identifier), quoted."""
    if not SCHEMA_RE.match(schema):
        raise ValueError(f"schema name {schema!r} must match {SCHEMA_RE.pattern}")
    return f'"{schema}"'


# (version, name, statements). {s} is the quoted schema name.
MIGRATIONS: list[tuple[int, str, list[str]]] = [
    (
        1,
        "journal: events, room_snapshots, rooms, system_state",
        [
            """CREATE TABLE IF NOT EXISTS {s}.events (
                room         text        NOT NULL,
                gen          integer     NOT NULL,
                seq          bigint      NOT NULL,
                type         text        NOT NULL,
                lv           smallint    NOT NULL DEFAULT 1,
                ts           bigint      NOT NULL,
                data         jsonb       NOT NULL DEFAULT '{{}}'::jsonb,
                instance     text,
                ident        text,
                committed_at timestamptz NOT NULL DEFAULT now(),
                PRIMARY KEY (room, gen, seq)
            )""",
            "CREATE INDEX IF NOT EXISTS events_committed_at ON {s}.events (committed_at)",
            """CREATE TABLE IF NOT EXISTS {s}.room_snapshots (
                room       text        NOT NULL,
                gen        integer     NOT NULL,
                seq        bigint      NOT NULL,
                snapshot   jsonb       NOT NULL,
                created_at timestamptz NOT NULL DEFAULT now(),
                PRIMARY KEY (room, gen, seq)
            )""",
            """CREATE TABLE IF NOT EXISTS {s}.rooms (
                id         text        PRIMARY KEY,
                gen        integer     NOT NULL,
                seq        bigint      NOT NULL,
                config     jsonb,
                deleted    boolean     NOT NULL DEFAULT false,
                updated_at timestamptz NOT NULL DEFAULT now()
            )""",
            """CREATE TABLE IF NOT EXISTS {s}.system_state (
                key        text        PRIMARY KEY,
                value      jsonb       NOT NULL,
                updated_at timestamptz NOT NULL DEFAULT now(),
                updated_by text
            )""",
        ],
    ),
    (
        2,
        "shared tables: operators, monitor_links, timeline_notes, audit, history_hourly",
        [
            """CREATE TABLE IF NOT EXISTS {s}.operators (
                id           text        PRIMARY KEY,
                name         text        NOT NULL,
                role         text        NOT NULL CHECK (role IN ('owner', 'operator', 'viewer')),
                verifier     text        NOT NULL,
                kid          text,
                created_at   timestamptz NOT NULL DEFAULT now(),
                created_by   text,
                disabled_at  timestamptz,
                disabled_by  text,
                last_used_at timestamptz,
                updated_at   timestamptz NOT NULL DEFAULT now()
            )""",
            """CREATE TABLE IF NOT EXISTS {s}.monitor_links (
                id              text        PRIMARY KEY,
                label           text,
                created_by_id   text,
                created_by_name text,
                created_at      timestamptz NOT NULL DEFAULT now(),
                expires_at      timestamptz NOT NULL,
                revoked_at      timestamptz,
                revoked_by      text
            )""",
            "CREATE INDEX IF NOT EXISTS monitor_links_author ON {s}.monitor_links (created_by_id)",
            """CREATE TABLE IF NOT EXISTS {s}.timeline_notes (
                id         bigserial   PRIMARY KEY,
                room       text        NOT NULL,
                at         timestamptz NOT NULL,
                kind       text        NOT NULL,
                note       text        NOT NULL,
                actor      text,
                created_at timestamptz NOT NULL DEFAULT now()
            )""",
            "CREATE INDEX IF NOT EXISTS timeline_notes_room_at ON {s}.timeline_notes (room, at)",
            """CREATE TABLE IF NOT EXISTS {s}.audit (
                id         bigserial   PRIMARY KEY,
                at         timestamptz NOT NULL DEFAULT now(),
                actor_id   text,
                actor_name text        NOT NULL,
                action     text        NOT NULL,
                target     text,
                room       text,
                ok         boolean     NOT NULL DEFAULT true,
                ip         text,
                detail     jsonb       NOT NULL DEFAULT '{{}}'::jsonb,
                instance   text
            )""",
            "CREATE INDEX IF NOT EXISTS audit_at ON {s}.audit (at)",
            "CREATE INDEX IF NOT EXISTS audit_room_at ON {s}.audit (room, at)",
            """CREATE TABLE IF NOT EXISTS {s}.history_hourly (
                room           text             NOT NULL,
                hour           timestamptz      NOT NULL,
                joins          bigint           NOT NULL DEFAULT 0,
                passes         bigint           NOT NULL DEFAULT 0,
                peak_depth     integer          NOT NULL DEFAULT 0,
                avg_depth      double precision NOT NULL DEFAULT 0,
                peak_active    integer          NOT NULL DEFAULT 0,
                wait_p50_sec   double precision,
                wait_p90_sec   double precision,
                wait_max_sec   double precision,
                wait_avg_sec   double precision,
                measured_waits bigint           NOT NULL DEFAULT 0,
                wait_sum_sec   double precision NOT NULL DEFAULT 0,
                reservoir      jsonb            NOT NULL DEFAULT '[]'::jsonb,
                blocked        bigint           NOT NULL DEFAULT 0,
                warned         bigint           NOT NULL DEFAULT 0,
                samples        integer          NOT NULL DEFAULT 0,
                covered_sec    integer          NOT NULL DEFAULT 0,
                missing_sec    integer          NOT NULL DEFAULT 0,
                partial        boolean          NOT NULL DEFAULT false,
                updated_at     timestamptz      NOT NULL DEFAULT now(),
                PRIMARY KEY (room, hour)
            )""",
            "CREATE INDEX IF NOT EXISTS history_hourly_hour ON {s}.history_hourly (hour)",
        ],
    ),
    (
        3,
        "monitor_links.token",
        [
            # IF NOT EXISTS: a schema from an earlier version may have the column already
            "ALTER TABLE {s}.monitor_links ADD COLUMN IF NOT EXISTS token text",
        ],
    ),
    (
        4,
        "instance_runs",
        [
            # stopped_at NULL: the run never recorded a stop (it is running, or it was killed)
            """CREATE TABLE IF NOT EXISTS {s}.instance_runs (
                instance_id text        PRIMARY KEY,
                started_at  timestamptz NOT NULL,
                stopped_at  timestamptz,
                clean       boolean
            )""",
        ],
    ),
    (
        5,
        "timeline_notes: count, one row per mark",
        [
            "ALTER TABLE {s}.timeline_notes ADD COLUMN IF NOT EXISTS count integer NOT NULL DEFAULT 1",
            # nothing wrote the table before this step, so no duplicate can stand in the index's way
            "CREATE UNIQUE INDEX IF NOT EXISTS timeline_notes_mark ON {s}.timeline_notes (room, at, kind, note)",
            "CREATE INDEX IF NOT EXISTS timeline_notes_at ON {s}.timeline_notes (at)",
        ],
    ),
    (
        6,
        "history_hourly: depth_sum, state",
        [
            # state: the counter baselines, covered milliseconds and last sample a writer continues from
            "ALTER TABLE {s}.history_hourly ADD COLUMN IF NOT EXISTS depth_sum double precision NOT NULL DEFAULT 0",
            "ALTER TABLE {s}.history_hourly ADD COLUMN IF NOT EXISTS state jsonb NOT NULL DEFAULT '{{}}'::jsonb",
        ],
    ),
    (
        7,
        "audit.uid",
        [
            # a row that went through the disk spool carries its own id, so a second drain adds nothing
            "ALTER TABLE {s}.audit ADD COLUMN IF NOT EXISTS uid text",
            "CREATE UNIQUE INDEX IF NOT EXISTS audit_uid ON {s}.audit (uid)",
        ],
    ),
    (
        8,
        "history_hourly.tallies",
        [
            # the hour's counts of the room's other counters, by report column name ({"refusedFull": 3})
            "ALTER TABLE {s}.history_hourly ADD COLUMN IF NOT EXISTS tallies jsonb NOT NULL DEFAULT '{{}}'::jsonb",
        ],
    ),
    (
        9,
        "entry_keys, entry_codes",
        [
            # a room's invitation keys, sealed under SECRET (invitation.seal); valid_until NULL: the current one
            """CREATE TABLE IF NOT EXISTS {s}.entry_keys (
                room        text    NOT NULL,
                kid         text    NOT NULL,
                sealed      bytea   NOT NULL,
                created_at  bigint  NOT NULL,
                valid_until bigint,
                PRIMARY KEY (room, kid)
            )""",
            # a room's codes, by their salted SHA-256 only, with the lane and the uses allowed and spent
            """CREATE TABLE IF NOT EXISTS {s}.entry_codes (
                room        text    NOT NULL,
                hash        bytea   NOT NULL,
                lane        text,
                uses        integer NOT NULL,
                spent       integer NOT NULL DEFAULT 0,
                PRIMARY KEY (room, hash)
            )""",
            # each room's salt for its codes' hashes
            """CREATE TABLE IF NOT EXISTS {s}.entry_code_salts (
                room        text    PRIMARY KEY,
                salt        bytea   NOT NULL
            )""",
        ],
    ),
    (
        10,
        "room_snapshots.packed, room_snapshots.entries",
        [
            # a checkpoint's JSON, zlib-compressed: a room of a million waiting tickets is a 319 MB document,
            # past jsonb's 256 MB limit, and 16 MB packed; ``snapshot`` stays for checkpoints written before
            "ALTER TABLE {s}.room_snapshots ADD COLUMN IF NOT EXISTS packed bytea",
            # the tickets, pre-queue entries and finished records it holds: how much a checkpoint costs
            "ALTER TABLE {s}.room_snapshots ADD COLUMN IF NOT EXISTS entries integer",
            "ALTER TABLE {s}.room_snapshots ALTER COLUMN snapshot DROP NOT NULL",
        ],
    ),
]

LATEST = MIGRATIONS[-1][0]


async def migrate(conn: Any, schema: str) -> list[int]:
    """Bring ``schema`` up to ``LATEST`` on an asyncpg connection; returns the versions applied now."""
    s = check_schema(schema)
    applied: list[int] = []
    async with conn.transaction():
        # one migrator per schema at a time; the lock ends with the transaction
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext($1))", f"qm.migrate:{schema}")
        await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {s}")
        await conn.execute(
            f"""CREATE TABLE IF NOT EXISTS {s}.schema_migrations (
                version    integer     PRIMARY KEY,
                name       text        NOT NULL,
                applied_at timestamptz NOT NULL DEFAULT now()
            )"""
        )
        done = {row["version"] for row in await conn.fetch(f"SELECT version FROM {s}.schema_migrations")}
        for version, name, statements in MIGRATIONS:
            if version in done:
                continue
            for statement in statements:
                await conn.execute(statement.format(s=s))
            await conn.execute(f"INSERT INTO {s}.schema_migrations (version, name) VALUES ($1, $2)", version, name)
            applied.append(version)
    return applied

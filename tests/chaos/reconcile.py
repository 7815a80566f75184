"""What the fault drill and its short test share: the joins they make, and the reconciliation of every
acknowledged one against the live line and the events journal, before and after a rebuild.

Black-box, the way an operator checks a fleet: HTTP to the instances (``POST /api/join``,
``GET /api/status`` with the visitor's token, ``/healthz``, ``/api/admin/health``,
``/api/v1/status/buffers``), SQL on the journal (``<PG_SCHEMA>.events``), and deleting the fleet's
keys in Valkey to make it rebuild every room from the journal. Nothing here imports the server.

What is checked, per room (the product's promises, docs/INTEGRATION.md and docs/events.md):

* every acknowledged join (``200`` with a ticket and a token) holds its place: ``/api/status`` with its
  token answers its ticket in line, before and after the rebuild;
* it is in the journal once: one ``join`` event with its ticket number ``n``, not taken back by a
  ``join.revoke``;
* no ticket is handed out twice, and order holds: a join acknowledged before another was sent has the
  smaller ticket number and the better place (ticket numbers may have gaps: a join taken back keeps
  its number used);
* the journal has no gap: each (room, generation) holds every ``seq`` from 1 to its highest;
* every room comes back after the rebuild (a room that stays ``503`` is unrebuildable).
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import httpx

#: a visitor's states that hold a place (with ratePerMinute 0 everybody stays ``waiting``)
HELD = ("waiting", "passed", "admitted")
_SCHEMA = re.compile(r"^[a-z_][a-z0-9_]*$")


# ---------------------------------------------------------------------- joins


@dataclass
class Join:
    """One ``POST /api/join`` as the client saw it. ``code`` is ``ok`` for an acknowledgement (200 with a
    ticket and a token), the error's ``code`` for a refusal, or what went wrong on the wire
    (``connect_error``, ``timeout``, ``disconnected``): a join that got no answer was never acknowledged."""

    index: int
    room: str
    instance: str
    sent: float  # time.monotonic() when the request left
    done: float  # … when its answer (or failure) came back
    code: str
    ticket: int | None = None
    token: str | None = None
    cookie: str | None = None  # the qms_<roomId> value binding the ticket to this "browser"
    detail: str = ""  # a refusal's error text, or the wire failure's message

    @property
    def acknowledged(self) -> bool:
        return self.code == "ok"


class Clients:
    """One httpx client per thread and base URL, with an empty cookie jar before every request (each join
    is a new visitor). Idle connections are dropped after 2 s, before the server's 5 s keep-alive closes
    them, so a request never races that close (it would read as a failure the fault did not cause)."""

    def __init__(self, timeout: float = 10.0) -> None:
        self.timeout = timeout
        self._local = threading.local()
        self._all: list[httpx.Client] = []
        self._lock = threading.Lock()

    def get(self, base_url: str) -> httpx.Client:
        mine: dict[str, httpx.Client] | None = getattr(self._local, "clients", None)
        if mine is None:
            mine = self._local.clients = {}
        client = mine.get(base_url)
        if client is None:
            client = httpx.Client(base_url=base_url, timeout=self.timeout, limits=httpx.Limits(keepalive_expiry=2.0))
            mine[base_url] = client
            with self._lock:
                self._all.append(client)
        client.cookies.clear()
        return client

    def close(self) -> None:
        with self._lock:
            clients, self._all = self._all, []
        for client in clients:
            client.close()


def _wire_failure(err: httpx.HTTPError) -> str:
    if isinstance(err, httpx.ConnectError):
        return "connect_error"
    if isinstance(err, httpx.TimeoutException):
        return "timeout"
    if isinstance(err, httpx.RemoteProtocolError | httpx.ReadError | httpx.WriteError):
        return "disconnected"
    return type(err).__name__


def error_code(response: httpx.Response) -> tuple[str, str]:
    """The error's ``code`` (``http_<status>`` when the body names none) and its text."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        return f"http_{response.status_code}", response.text[:200]
    code = body.get("code")
    return (str(code) if code else f"http_{response.status_code}"), str(body.get("error") or "")[:200]


def join(clients: Clients, index: int, base_url: str, room: str, instance: str) -> Join:
    """One join, recorded whatever happens to it."""
    client = clients.get(base_url)
    sent = time.monotonic()
    try:
        r = client.post("/api/join", json={"roomId": room})
    except httpx.HTTPError as err:
        return Join(index, room, instance, sent, time.monotonic(), _wire_failure(err), detail=str(err)[:200])
    done = time.monotonic()
    if r.status_code != 200:
        code, text = error_code(r)
        return Join(index, room, instance, sent, done, code, detail=text)
    body = r.json()
    ticket, token = body.get("ticket"), body.get("token")
    if not isinstance(ticket, int) or not isinstance(token, str):
        return Join(index, room, instance, sent, done, "no_ticket_in_answer")
    return Join(index, room, instance, sent, done, "ok", ticket, token, r.cookies.get(f"qms_{room}"))


class Ledger:
    """Every join of a run, in the order they were sent (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._joins: list[Join] = []
        self._next = 0

    def number(self) -> int:
        with self._lock:
            self._next += 1
            return self._next

    def add(self, j: Join) -> Join:
        with self._lock:
            self._joins.append(j)
        return j

    def join(self, clients: Clients, base_url: str, room: str, instance: str) -> Join:
        return self.add(join(clients, self.number(), base_url, room, instance))

    @property
    def joins(self) -> list[Join]:
        with self._lock:
            return sorted(self._joins, key=lambda j: j.index)

    def acknowledged(self) -> list[Join]:
        return [j for j in self.joins if j.acknowledged]

    def first_ack(self, instance: str, sent_after: float) -> Join | None:
        """The first join acknowledged by ``instance`` among those sent after ``sent_after``."""
        with self._lock:
            found = [j for j in self._joins if j.instance == instance and j.acknowledged and j.sent >= sent_after]
        return min(found, key=lambda j: j.done) if found else None


# ---------------------------------------------------------------------- the live line


@dataclass(frozen=True)
class Seen:
    """What ``GET /api/status`` said about an acknowledged join's token (``http`` 0: no answer)."""

    http: int
    state: str | None = None
    ticket: int | None = None
    position: int | None = None
    code: str | None = None  # the error's code when http is not 200

    def holds(self, ticket: int | None) -> bool:
        return self.http == 200 and self.state in HELD and ticket is not None and self.ticket == ticket


def status_of(clients: Clients, base_url: str, j: Join, patience: float = 10.0) -> Seen:
    """The place the join's token names, asked with its token and its browser cookie. A 503 or a wire
    failure is asked again, every 0.25 s for up to ``patience`` seconds: a refusal is not yet a lost place
    (an instance that has just met a fault answers 503 for a few seconds)."""
    deadline = time.monotonic() + patience
    while True:
        client = clients.get(base_url)
        headers = {"Cookie": f"qms_{j.room}={j.cookie}"} if j.cookie else {}
        try:
            r = client.get("/api/status", params={"roomId": j.room, "token": j.token or ""}, headers=headers)
        except httpx.HTTPError:
            seen = Seen(0)
        else:
            if r.status_code == 200:
                body = r.json()
                return Seen(200, body.get("state"), body.get("ticket"), body.get("position"))
            seen = Seen(r.status_code, code=error_code(r)[0])
            if r.status_code != 503:
                return seen
        if time.monotonic() >= deadline:
            return seen
        time.sleep(0.25)


def look_up(
    clients: Clients, urls: Sequence[str], joins: Sequence[Join], workers: int = 12, patience: float = 10.0
) -> dict[int, Seen]:
    """Every join's place, asked of the instances in turn (any instance answers for any place)."""
    with ThreadPoolExecutor(workers) as pool:
        seen = pool.map(lambda ij: status_of(clients, urls[ij[0] % len(urls)], ij[1], patience), enumerate(joins))
        return {j.index: s for j, s in zip(joins, seen, strict=True)}


def wait_for_rooms(
    clients: Clients, urls: Sequence[str], probes: Mapping[str, Join], timeout: float
) -> dict[str, bool]:
    """Poll until every room answers its probe join's token with 200 on every instance (a rebuilt room),
    or ``timeout`` passes. room -> whether it answered."""
    back = dict.fromkeys(probes, False)
    deadline = time.monotonic() + timeout
    while True:
        for room, probe in probes.items():
            if not back[room]:
                back[room] = all(status_of(clients, url, probe, patience=0).http == 200 for url in urls)
        if all(back.values()) or time.monotonic() >= deadline:
            return back
        time.sleep(0.25)


def get_json(clients: Clients, url: str, path: str, admin_key: str | None = None) -> tuple[int, Any]:
    """(status, JSON body) of a GET; (0, None) when nothing answered."""
    headers = {"Authorization": f"Bearer {admin_key}"} if admin_key else {}
    try:
        r = clients.get(url).get(path, headers=headers)
    except httpx.HTTPError:
        return 0, None
    try:
        return r.status_code, r.json()
    except ValueError:
        return r.status_code, None


def settled(clients: Clients, url: str, admin_key: str) -> str | None:
    """None when this instance is in rotation with Valkey up, no room recovering and its disk spool
    drained; else what it is still waiting for."""
    code, health = get_json(clients, url, "/healthz")
    if code != 200 or not isinstance(health, dict) or health.get("ready") is not True:
        return f"{url}: /healthz {code or 'no answer'}"
    backend = health.get("backend") or {}
    if backend.get("valkey") != "up":
        return f"{url}: valkey {backend.get('valkey')}"
    if backend.get("recoveringRooms"):
        return f"{url}: {backend.get('recoveringRooms')} rooms recovering"
    code, buffers = get_json(clients, url, "/api/v1/status/buffers", admin_key)
    if code != 200 or not isinstance(buffers, dict):
        return f"{url}: buffers {code or 'no answer'}"
    failover = buffers.get("failover") or {}
    if buffers.get("spooling") or buffers.get("files") or failover.get("pending") or failover.get("failed"):
        return f"{url}: spool not drained ({failover}, files {buffers.get('files')})"
    return None


def unrebuildable(clients: Clients, urls: Sequence[str], admin_key: str) -> dict[str, str]:
    """room -> why, as the instances report it (``backend.recovery.unrebuildable`` of /api/admin/health)."""
    out: dict[str, str] = {}
    for url in urls:
        code, health = get_json(clients, url, "/api/admin/health", admin_key)
        if code == 200 and isinstance(health, dict):
            found = ((health.get("backend") or {}).get("recovery") or {}).get("unrebuildable") or {}
            out.update({str(k): str(v) for k, v in found.items()})
    return out


# ---------------------------------------------------------------------- Valkey and the journal


def forget_valkey(client: Any, prefix: str) -> int:
    """Delete every key under the fleet's ``VALKEY_PREFIX`` (and nothing else): Valkey has lost the fleet's
    state, as after a flush, and every room must be rebuilt from the journal. How many keys went."""
    if not prefix:
        raise ValueError("refusing to delete keys without a prefix")
    keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
    for i in range(0, len(keys), 500):
        client.delete(*keys[i : i + 500])
    return len(keys)


def _checked(schema: str) -> str:
    if not _SCHEMA.match(schema):
        raise ValueError(f"not a schema name: {schema!r}")
    return schema


def sql(database_url: str, statement: str, *args: Any) -> list[asyncpg.Record]:
    async def run() -> list[asyncpg.Record]:
        conn = await asyncpg.connect(database_url, timeout=10)
        try:
            return list(await conn.fetch(statement, *args))
        finally:
            await conn.close()

    return asyncio.run(run())


def drop_schema(database_url: str, schema: str) -> None:
    """Drop the drill's schema. A session of a killed instance can outlive it (its relay gone mid-query) and
    hold a lock there for good: after a 10 s wait for the lock, such sessions are ended and the drop retried."""

    async def run() -> None:
        conn = await asyncpg.connect(database_url, timeout=10)
        try:
            await conn.execute("SET lock_timeout = '10s'")
            try:
                await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            except asyncpg.LockNotAvailableError:
                await conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
                    "AND datname = current_database() AND query LIKE $1",
                    f'%"{schema}"%',
                )
                await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            await conn.close()

    asyncio.run(run())


@dataclass
class JournalRoom:
    """A room's newest generation as the journal holds it."""

    gen: int
    joins: Counter[int] = field(default_factory=Counter)  # ticket -> join events
    revoked: set[int] = field(default_factory=set)  # tickets taken back (join.revoke)

    def holds(self, ticket: int | None) -> bool:
        """Journaled and not taken back (more than one join event is counted as a duplicate instead)."""
        return ticket is not None and self.joins[ticket] >= 1 and ticket not in self.revoked


def read_journal(database_url: str, schema: str, rooms: Iterable[str]) -> dict[str, JournalRoom]:
    s = _checked(schema)
    rows = sql(
        database_url,
        f"""SELECT e.room, e.gen, e.type, (e.data->>'n')::bigint AS n FROM "{s}".events e
            WHERE e.room = ANY($1::text[]) AND e.type IN ('join', 'join.revoke')
              AND e.gen = (SELECT max(g.gen) FROM "{s}".events g WHERE g.room = e.room)""",
        sorted(set(rooms)),
    )
    out: dict[str, JournalRoom] = {}
    for row in rows:
        jr = out.setdefault(row["room"], JournalRoom(int(row["gen"])))
        if row["n"] is None:
            continue
        if row["type"] == "join":
            jr.joins[int(row["n"])] += 1
        else:
            jr.revoked.add(int(row["n"]))
    return out


@dataclass(frozen=True)
class Gap:
    room: str
    gen: int
    top: int  # the highest seq journaled
    missing: tuple[int, ...]

    def __str__(self) -> str:
        return f"{self.room} gen {self.gen}: seq {spans(self.missing)} missing (of 1–{self.top})"


def journal_gaps(database_url: str, schema: str) -> list[Gap]:
    """Every (room, generation) whose seqs between 1 and its highest are not all journaled."""
    s = _checked(schema)
    rows = sql(
        database_url,
        f"""SELECT h.room, h.gen, h.top, array_agg(m ORDER BY m) AS missing
            FROM (SELECT room, gen, max(seq) AS top FROM "{s}".events GROUP BY room, gen) h
            CROSS JOIN LATERAL generate_series(1::bigint, h.top) AS m
            WHERE NOT EXISTS (SELECT 1 FROM "{s}".events e WHERE e.room = h.room AND e.gen = h.gen AND e.seq = m)
            GROUP BY h.room, h.gen, h.top ORDER BY h.room, h.gen""",
    )
    return [Gap(r["room"], int(r["gen"]), int(r["top"]), tuple(int(m) for m in r["missing"])) for r in rows]


def spans(numbers: Iterable[int]) -> str:
    """1, 2, 3, 7 -> '1–3, 7'."""
    out: list[str] = []
    run: list[int] = []
    for n in sorted(numbers):
        if run and n == run[-1] + 1:
            run.append(n)
            continue
        if run:
            out.append(f"{run[0]}–{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [n]
    if run:
        out.append(f"{run[0]}–{run[-1]}" if len(run) > 1 else str(run[0]))
    return ", ".join(out)


def wait_for_no_gaps(database_url: str, schema: str, timeout: float) -> list[Gap]:
    """Poll the journal until no (room, generation) has a gap, or ``timeout`` passes: the gaps left."""
    deadline = time.monotonic() + timeout
    while True:
        gaps = journal_gaps(database_url, schema)
        if not gaps or time.monotonic() >= deadline:
            return gaps
        time.sleep(0.5)


# ---------------------------------------------------------------------- the reconciliation


def inversions(items: Sequence[tuple[Join, int]], *, ties: bool) -> list[tuple[Join, Join]]:
    """(a, b) for each join b sent after some join a was acknowledged, where a's value (its ticket, or its
    place) is above b's — or equal too, with ``ties``. One pair per b: a is the earlier join with the
    highest value."""
    by_done = sorted(items, key=lambda x: x[0].done)
    best: tuple[int, Join] | None = None
    out: list[tuple[Join, Join]] = []
    k = 0
    for j, value in sorted(items, key=lambda x: x[0].sent):
        while k < len(by_done) and by_done[k][0].done < j.sent:
            if best is None or by_done[k][1] > best[0]:
                best = (by_done[k][1], by_done[k][0])
            k += 1
        if best is not None and (best[0] > value or (ties and best[0] == value)):
            out.append((best[1], j))
    return out


@dataclass
class RoomCount:
    acknowledged: int = 0
    in_line: int = 0
    in_journal: int = 0
    after_rebuild: int = 0
    unanswered: int = 0  # after the rebuild, in a room that never came back
    lost: int = 0
    duplicated: int = 0
    inversions: int = 0


@dataclass
class Reconciliation:
    rooms: dict[str, RoomCount]
    lost: list[str]
    duplicated: list[str]
    inversions: list[str]
    gaps: list[Gap]
    unrebuildable: dict[str, str]  # room -> why (the instances' word, or "no answer")

    @property
    def total(self) -> RoomCount:
        t = RoomCount()
        for c in self.rooms.values():
            for name in vars(t):
                setattr(t, name, getattr(t, name) + getattr(c, name))
        return t

    def problems(self) -> list[str]:
        t = self.total
        out = []
        if t.lost:
            out.append(f"{t.lost} acknowledged joins lost")
        if t.duplicated:
            out.append(f"{t.duplicated} duplicated")
        if t.inversions:
            out.append(f"{t.inversions} order inversions")
        if self.gaps:
            out.append(f"journal gaps left in {len(self.gaps)} room generations")
        if self.unrebuildable:
            out.append(f"{len(self.unrebuildable)} rooms could not be rebuilt")
        return out

    @property
    def ok(self) -> bool:
        return not self.problems()

    def render(self, examples: int = 5) -> str:
        head = ["room", "acknowledged", "in line", "in journal", "after rebuild", "lost", "duplicated", "inversions"]
        rows = [
            [room, c.acknowledged, c.in_line, c.in_journal, _rebuilt(c), c.lost, c.duplicated, c.inversions]
            for room, c in sorted(self.rooms.items())
        ]
        t = self.total
        rows.append(["all", t.acknowledged, t.in_line, t.in_journal, _rebuilt(t), t.lost, t.duplicated, t.inversions])
        lines = [table(head, rows)]
        for title, items in (("lost", self.lost), ("duplicated", self.duplicated), ("inversions", self.inversions)):
            if items:
                more = f" (and {len(items) - examples} more)" if len(items) > examples else ""
                lines.append(f"{title}{more}:")
                lines += [f"  {item}" for item in items[:examples]]
        lines.append("journal gaps at the end:" + (" none" if not self.gaps else ""))
        lines += [f"  {g}" for g in self.gaps]
        lines.append("rooms that could not be rebuilt:" + (" none" if not self.unrebuildable else ""))
        lines += [f"  {room}: {why}" for room, why in sorted(self.unrebuildable.items())]
        problems = self.problems()
        lines.append("RESULT: " + ("PASS" if not problems else "FAIL — " + "; ".join(problems)))
        return "\n".join(lines)


def _rebuilt(c: RoomCount) -> str:
    return f"{c.after_rebuild}" + (f" ({c.unanswered} unanswered: 503)" if c.unanswered else "")


def table(head: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table, numbers right-aligned."""
    cells = [[str(c) for c in head], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(head))]

    def fmt(row: Sequence[str], source: Sequence[Any]) -> str:
        return "  ".join(
            c.rjust(w) if isinstance(s, int) else c.ljust(w) for c, w, s in zip(row, widths, source, strict=True)
        ).rstrip()

    out = [fmt(cells[0], head), "  ".join("-" * w for w in widths)]
    out += [fmt(c, r) for c, r in zip(cells[1:], rows, strict=True)]
    return "\n".join(out)


def reconcile(
    acknowledged: Sequence[Join],
    live: Mapping[int, Seen],
    journal: Mapping[str, JournalRoom],
    rebuilt: Mapping[int, Seen],
    back: Mapping[str, bool],
    gaps: Sequence[Gap],
    why_unrebuildable: Mapping[str, str] | None = None,
) -> Reconciliation:
    """Every acknowledged join against the line before the rebuild (``live``), the journal, and the line
    after it (``rebuilt``; ``back``: which rooms answered again)."""
    rooms: dict[str, RoomCount] = defaultdict(RoomCount)
    lost: list[str] = []
    duplicated: list[str] = []
    inverted: list[str] = []
    by_room: dict[str, list[Join]] = defaultdict(list)
    for j in acknowledged:
        by_room[j.room].append(j)
    for room, joins in sorted(by_room.items()):
        c = rooms[room]
        jr = journal.get(room)
        for j in joins:
            c.acknowledged += 1
            before, after = live.get(j.index, Seen(0)), rebuilt.get(j.index, Seen(0))
            in_journal = jr is not None and jr.holds(j.ticket)
            c.in_line += before.holds(j.ticket)
            c.in_journal += in_journal
            missing = []
            if not before.holds(j.ticket):
                missing.append(f"not in line ({_said(before)})")
            if not in_journal:
                n = jr.joins[j.ticket or 0] if jr is not None else 0
                revoked = jr is not None and j.ticket in jr.revoked
                missing.append(f"journal: {n} join events" + (", taken back by join.revoke" if revoked else ""))
            if after.holds(j.ticket):
                c.after_rebuild += 1
            elif not back.get(room, False):
                c.unanswered += 1
            else:
                missing.append(f"not in line after the rebuild ({_said(after)})")
            if missing:
                c.lost += 1
                lost.append(f"{room} ticket {j.ticket} (join #{j.index} via {j.instance}): " + "; ".join(missing))
        tickets = Counter(j.ticket for j in joins)
        for ticket, times in sorted(tickets.items(), key=lambda x: x[0] or 0):
            if times > 1:
                c.duplicated += times - 1
                duplicated.append(f"{room} ticket {ticket} acknowledged {times} times")
        if jr is not None:
            for ticket, times in sorted(jr.joins.items()):
                if times > 1:
                    c.duplicated += times - 1
                    duplicated.append(f"{room} ticket {ticket} journaled {times} times (join events)")
        checks: list[tuple[str, list[tuple[Join, int]], bool]] = [
            ("ticket", [(j, j.ticket) for j in joins if j.ticket is not None], False),
            ("place", _places(joins, live), True),
            ("place after the rebuild", _places(joins, rebuilt), True),
        ]
        for what, items, ties in checks:
            for a, b in inversions(items, ties=ties):
                c.inversions += 1
                inverted.append(
                    f"{room}: join #{a.index} (ticket {a.ticket}) was acknowledged before join #{b.index} "
                    f"(ticket {b.ticket}) was sent, yet has the later {what}"
                )
    unrebuilt = {room: (why_unrebuildable or {}).get(room, "no answer") for room, ok in back.items() if not ok}
    return Reconciliation(dict(rooms), lost, duplicated, inverted, list(gaps), unrebuilt)


def _places(joins: Sequence[Join], seen: Mapping[int, Seen]) -> list[tuple[Join, int]]:
    out = []
    for j in joins:
        s = seen.get(j.index)
        if s is not None and s.holds(j.ticket) and s.state == "waiting" and s.position is not None:
            out.append((j, s.position))
    return out


def _said(s: Seen) -> str:
    if s.http == 0:
        return "no answer"
    if s.http != 200:
        return f"HTTP {s.http}" + (f" {s.code}" if s.code else "")
    return f"state {s.state}, ticket {s.ticket}"


def refusals(joins: Iterable[Join]) -> str:
    """'storage_unavailable ×312, connect_error ×4' for the joins that were not acknowledged."""
    counts = Counter(j.code for j in joins if not j.acknowledged)
    return ", ".join(f"{code} ×{n}" for code, n in counts.most_common()) or "—"


def by_room(joins: Iterable[Join]) -> dict[str, Join]:
    """The first acknowledged join of each room: the probe whose token tells whether the room answers."""
    out: dict[str, Join] = {}
    for j in joins:
        if j.acknowledged:
            out.setdefault(j.room, j)
    return out

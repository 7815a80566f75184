"""Fixtures for the store tests: the same test against MemoryStore and ValkeyStore.

``stores`` is parametrised over ``memory`` and ``valkey``; each runs on its own FakeClock (advance in
whole milliseconds). The Valkey one talks to ``TEST_VALKEY_URL`` (default
``redis://127.0.0.1:6379/15``; database 0 is refused), under a prefix unique to the test, and
deletes its keys afterwards. When Valkey cannot be reached the Valkey cases are skipped with one
warning — unless ``QM_REQUIRE_VALKEY=1`` (or ``CI=true``), which makes them fail instead.

With ``TEST_VALKEY_CLUSTER_URL`` set (``redis+cluster://host:port``, e.g. from
``scripts/valkey-cluster.sh start DIR``; ``make test-cluster`` sets it) ``stores`` also runs each test
on a ``cluster``: a ValkeyStore opened from that URL (a cluster client, and a lane per master for the
visitor commands).
"""

from __future__ import annotations

import itertools
import os
import uuid
import warnings
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import orjson
import pytest
from redis.asyncio import Redis

from queue_manager.clock import FakeClock
from queue_manager.engine.events import Event
from queue_manager.engine.model import ClientId
from queue_manager.engine.view import VisitorView
from queue_manager.engine.visitor import CheckResult, Presented
from queue_manager.store.memory import MemoryStore
from queue_manager.store.valkey import ValkeyStore
from queue_manager.store.valkey.codec import TICKET_DEFAULTS
from queue_manager.store.valkey.keys import room_key

TARGET = "https://shop.example"
VALKEY_URL = os.environ.get("TEST_VALKEY_URL", "redis://127.0.0.1:6379/15")
CLUSTER_URL = os.environ.get("TEST_VALKEY_CLUSTER_URL", "")
STORE_KINDS = ["memory", "valkey", *(["cluster"] if CLUSTER_URL else [])]
_state: dict[str, Any] = {}


def _db_of(url: str) -> int:
    path = urlsplit(url).path.strip("/")
    return int(path) if path.isdigit() else 0


def valkey_required() -> bool:
    return os.environ.get("QM_REQUIRE_VALKEY") == "1" or os.environ.get("CI", "").lower() == "true"


async def valkey_client() -> Redis:
    """A client on the test database, or skip (fail when Valkey is required)."""
    if _db_of(VALKEY_URL) == 0:
        pytest.fail(f"TEST_VALKEY_URL {VALKEY_URL!r} names database 0; the store tests refuse it (use /15)")
    if _state.get("down"):
        if valkey_required():
            pytest.fail(f"Valkey at {VALKEY_URL} is unreachable and QM_REQUIRE_VALKEY/CI is set")
        pytest.skip("Valkey unreachable")
    client = Redis.from_url(VALKEY_URL, decode_responses=False, socket_connect_timeout=2)
    try:
        await client.ping()
    except Exception as exc:  # any failure to reach it is "down"
        await client.aclose()
        _state["down"] = True
        if valkey_required():
            pytest.fail(f"Valkey at {VALKEY_URL} is unreachable ({exc}) and QM_REQUIRE_VALKEY/CI is set")
        warnings.warn(
            f"Valkey at {VALKEY_URL} is unreachable ({exc}): the valkey store tests are skipped", stacklevel=1
        )
        pytest.skip("Valkey unreachable")
    return client


class RecordingJournal:
    """A journal that keeps what it is given and can be told to fail."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.fail_next = 0

    async def commit(self, events: list[Event]) -> None:
        from queue_manager.store.base import StoreUnavailable

        if self.fail_next:
            self.fail_next -= 1
            raise StoreUnavailable("journal down (test)")
        self.events.extend(events)


@dataclass
class Env:
    """One store on its own clock, and ways to act like the HTTP layer does."""

    kind: str
    store: Any
    clock: FakeClock
    journal: RecordingJournal | None = None
    prefix: str = ""
    redis: Redis | None = None
    _counter: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    async def room(self, room_id: str = "r", **fields: Any) -> dict[str, Any]:
        room, created, _ = await self.store.upsert_room({"id": room_id, "targetUrl": TARGET, **fields})
        assert created
        return room

    def visitor(self, room_id: str = "r", *, ident: str | None = None, cookie: bool = True) -> Visitor:
        i = next(self._counter)
        client = ClientId(
            ident=ident or f"10.0.{(i >> 8) & 255}.{i & 255}",
            fp=f"fp-{i}".encode(),
            cookie=f"cookie-{i}".encode() if cookie else None,
        )
        return Visitor(self, room_id, client)

    async def run(self, seconds: float, step: float = 1.0) -> None:
        elapsed = 0.0
        while elapsed < seconds - 1e-9:
            dt = min(step, seconds - elapsed)
            self.clock.advance(dt)
            elapsed += dt
            await self.store.tick()

    async def stats(self, room_id: str = "r") -> dict[str, Any]:
        return dict(await self.store.get_room(room_id))

    def events(self) -> list[Event]:
        """Every event since the last call (the memory store's are drained first)."""
        assert self.journal is not None
        if self.kind == "memory":
            self.store.engine.drain_events()
        out = list(self.journal.events)
        self.journal.events.clear()
        return out

    def types(self) -> list[str]:
        return [e.type for e in self.events()]

    async def describe(self, v: Visitor | int, room_id: str = "r") -> dict[str, Any]:
        n = v if isinstance(v, int) else v.n
        return dict(await self.store.lookup(room_id, str(n)))

    async def state(self, v: Visitor | int, room_id: str = "r") -> str | None:
        """The ticket's state as the drill-down reports it (None once it is finished)."""
        d = await self.describe(v, room_id)
        return None if d["state"] == "expired" else str(d["state"])


_door_keys = itertools.count(1)


class Visitor:
    def __init__(self, env: Env, room_id: str, client: ClientId) -> None:
        self.env = env
        self.room_id = room_id
        self.client = client
        self.token: Presented | None = None
        self.door: bytes | None = None

    async def join(self, return_url: str | None = None) -> VisitorView:
        view: VisitorView = await self.env.store.join(self.room_id, self.client, self.token, return_url)
        if view.ticket is not None:
            self.token = Presented(gen=view.gen, n=view.ticket)
        elif view.handle is not None:
            self.token = Presented(gen=view.gen, handle=view.handle)
        return view

    async def status(self) -> VisitorView:
        view: VisitorView = await self.env.store.status(self.room_id, self.client, self.token)
        return view

    async def check(self, url: str | None = None, *, door: Any = ...) -> CheckResult:
        import hashlib

        raw = f"door-key-{next(_door_keys)}"
        digest = hashlib.sha256(raw.encode()).digest()[:16]
        sent = self.door if door is ... else door
        result: CheckResult = await self.env.store.check(
            self.room_id, self.client, self.token, sent, url, (raw, digest)
        )
        if result.door_key is not None:
            self.door = digest
        return result

    @property
    def n(self) -> int:
        assert self.token is not None and self.token.n is not None
        return self.token.n


async def make_valkey(
    client: Redis, prefix: str, clock: FakeClock | None = None, journal: Any = None, **kw: Any
) -> ValkeyStore:
    store = ValkeyStore(client, prefix=prefix, clock=clock or FakeClock(), journal=journal, **kw)
    await store.start()
    return store


async def stored_tickets(client: Redis, prefix: str, room_id: str) -> dict[int, dict[str, Any]]:
    """The room's live ticket records as Valkey holds them (the ``t`` hash), by number."""
    raw = await client.hgetall(room_key(prefix, room_id, "t"))
    return {int(n): orjson.loads(v) for n, v in raw.items()}


async def store_as_before(client: Redis, prefix: str, room_id: str) -> int:
    """Rewrite every live ticket record of the room as a server stored it before records left out their
    defaults: with ``n`` and every default field written (``s`` waiting, ``pa``/``ss``/``sla``/``st`` 0)
    unless set. What a rolling upgrade finds; returns how many records were rewritten."""
    records = await stored_tickets(client, prefix, room_id)
    if records:
        older = {str(n): orjson.dumps({"n": n, **TICKET_DEFAULTS, **rec}) for n, rec in records.items()}
        await client.hset(room_key(prefix, room_id, "t"), mapping=older)  # type: ignore[arg-type]
    return len(records)


async def drop_prefix(client: Redis, prefix: str) -> None:
    from queue_manager.store.valkey.client import is_cluster

    keys = [k async for k in client.scan_iter(match=f"{prefix}*", count=1000)]  # every master of a cluster
    if keys and is_cluster(client):
        for key in keys:  # one by one: on a cluster they lie in many slots
            await client.delete(key)
    elif keys:
        await client.delete(*keys)


async def prefixed(client: Redis) -> AsyncIterator[tuple[Redis, str]]:
    """``client`` with a fresh key prefix; the prefix's keys deleted and the client closed afterwards."""
    prefix = f"qmtest:{uuid.uuid4().hex[:12]}:"
    try:
        yield client, prefix
    finally:
        await drop_prefix(client, prefix)
        await client.aclose()


@pytest.fixture
async def valkey() -> AsyncIterator[tuple[Redis, str]]:
    """A client on the test database and a fresh key prefix (deleted afterwards)."""
    async for pair in prefixed(await valkey_client()):
        yield pair


async def cluster_client() -> Redis:
    """A cluster client on ``TEST_VALKEY_CLUSTER_URL`` (typed as Redis: the same commands)."""
    from queue_manager.store.valkey.client import open_client

    client = open_client(CLUSTER_URL)
    try:
        await client.ping()
    except Exception as exc:  # a cluster named and not reachable is a failure, never a skip
        await client.aclose()
        pytest.fail(f"the Valkey cluster at {CLUSTER_URL} is unreachable: {exc}")
    return client


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without a cluster the tests that need one (the ``cluster`` fixture) are deselected, not skipped:
    the default suite has no cluster, and CI turns every skip into a failure."""
    if CLUSTER_URL:
        return
    here = os.path.dirname(__file__)
    drop = [i for i in items if "cluster" in getattr(i, "fixturenames", ()) and str(i.path).startswith(here)]
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = [i for i in items if i not in drop]


@pytest.fixture
async def cluster() -> AsyncIterator[tuple[Redis, str]]:
    """A cluster client and a fresh key prefix (deleted afterwards); only with TEST_VALKEY_CLUSTER_URL."""
    async for pair in prefixed(await cluster_client()):
        yield pair


@pytest.fixture(params=STORE_KINDS)
async def stores(request: pytest.FixtureRequest) -> AsyncIterator[Env]:
    clock = FakeClock()
    if request.param == "memory":
        memory = MemoryStore(clock)
        recorder = RecordingJournal()
        drain = memory.engine.drain_events

        def recording_drain() -> list[Event]:
            events = drain()
            recorder.events.extend(events)
            return events

        memory.engine.drain_events = recording_drain  # type: ignore[method-assign]
        yield Env("memory", memory, clock, recorder)
        return
    prefix = f"qmtest:{uuid.uuid4().hex[:12]}:"
    journal = RecordingJournal()
    if request.param == "cluster":
        # opened from the URL, as a server opens it: the visitor commands take the per-master lanes
        await (await cluster_client()).aclose()  # fails (never skips) when the cluster is unreachable
        store = ValkeyStore(CLUSTER_URL, prefix=prefix, clock=clock, journal=journal)
        await store.start()
        try:
            yield Env("valkey", store, clock, journal, prefix, store.redis)
        finally:
            await drop_prefix(store.redis, prefix)
            await store.close()
        return
    client = await valkey_client()
    store = await make_valkey(client, prefix, clock, journal)
    try:
        yield Env("valkey", store, clock, journal, prefix, client)
    finally:
        await store.close()
        await drop_prefix(client, prefix)
        await client.aclose()

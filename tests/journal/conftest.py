"""Fixtures for the journal tests against a real PostgreSQL.

``TEST_DATABASE_URL`` (default ``postgresql://postgres@127.0.0.1:5432/qm_test``) names the database;
its name must end in ``_test`` or the tests refuse to run. The database is created when missing.
Each test gets its own schema (random name), dropped afterwards. When PostgreSQL cannot be reached
the tests that need it are skipped with one warning — unless ``QM_REQUIRE_VALKEY=1`` (or
``CI=true``), which makes them fail instead. The replay and snapshot tests need no database.
"""

from __future__ import annotations

import os
import uuid
import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from queue_manager.journal import PgJournal
from queue_manager.journal.database import Database

PG_URL = os.environ.get("TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/qm_test")
_state: dict[str, Any] = {}


def pg_required() -> bool:
    return os.environ.get("QM_REQUIRE_VALKEY") == "1" or os.environ.get("CI", "").lower() == "true"


def _dbname(url: str) -> str:
    return urlsplit(url).path.strip("/")


def _unavailable(reason: str) -> None:
    _state["down"] = reason
    if pg_required():
        pytest.fail(f"PostgreSQL at {PG_URL} is unreachable ({reason}) and QM_REQUIRE_VALKEY/CI is set")
    if not _state.get("warned"):
        _state["warned"] = True
        warnings.warn(f"PostgreSQL at {PG_URL} is unreachable ({reason}): the journal tests are skipped", stacklevel=1)
    pytest.skip("PostgreSQL unreachable")


async def pg_available() -> None:
    """Skip (or fail) unless the test database answers; refuse one whose name does not end in _test."""
    name = _dbname(PG_URL)
    if not name.endswith("_test"):
        pytest.fail(f"TEST_DATABASE_URL names database {name!r}: the journal tests only use a *_test database")
    if _state.get("down"):
        _unavailable(str(_state["down"]))
    if _state.get("up"):
        return
    try:
        conn = await asyncpg.connect(PG_URL, timeout=3)
    except asyncpg.InvalidCatalogNameError:
        await _create_database(name)
        conn = await asyncpg.connect(PG_URL, timeout=3)
    except Exception as exc:  # any failure to reach it is "down"
        _unavailable(f"{type(exc).__name__}: {exc}")
        return
    await conn.close()
    _state["up"] = True


async def _create_database(name: str) -> None:
    parts = urlsplit(PG_URL)
    admin = await asyncpg.connect(urlunsplit(parts._replace(path="/postgres")), timeout=3)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    except asyncpg.DuplicateDatabaseError:
        pass
    finally:
        await admin.close()


@pytest.fixture
async def schema() -> AsyncIterator[str]:
    """A fresh schema name for this test (the journal creates it; dropped afterwards)."""
    await pg_available()
    name = f"qm_t_{uuid.uuid4().hex[:12]}"
    try:
        yield name
    finally:
        conn = await asyncpg.connect(PG_URL, timeout=5)
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        finally:
            await conn.close()


@pytest.fixture
async def db(schema: str) -> AsyncIterator[Database]:
    """The one Database (pool) a server would build, on this test's schema."""
    database = Database(PG_URL, schema)
    await database.open()
    try:
        yield database
    finally:
        await database.close()


@pytest.fixture
async def pg(schema: str) -> AsyncIterator[Any]:
    """A plain connection to the test database, for looking behind the journal's back."""
    conn = await asyncpg.connect(PG_URL, timeout=5)
    try:
        yield conn
    finally:
        await conn.close()


def make_journal(schema: str, spool: Path, instance: str = "test-1", **kw: Any) -> PgJournal:
    return PgJournal(PG_URL, schema=schema, instance_id=instance, spool_dir=spool, **kw)


@pytest.fixture
async def journal(schema: str, tmp_path: Path) -> AsyncIterator[PgJournal]:
    """A started journal on a fresh schema; its spool drains only when a test calls ``drain()``."""
    j = make_journal(schema, tmp_path / "spool", auto_drain=False)
    await j.start()
    try:
        yield j
    finally:
        await j.close()

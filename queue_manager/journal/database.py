"""The PostgreSQL database of an instance: one asyncpg pool on one schema, opened once, closed once.

Whoever builds the server builds one ``Database`` and hands it to everything that talks to
PostgreSQL: the journal's writer, reader, checkpoints and maintenance spool, and the shared access
records. Nothing else opens a pool. The tables come from ``migrations.py`` alone:
``ensure_migrated()`` applies them once per process (at the journal's start, or at the first use
after a start without PostgreSQL).

Example::

    db = Database.from_settings(settings)        # or Database("postgresql://qm@db/qm", "qm")
    await db.open()
    async with db.acquire() as conn:
        await conn.fetch(f"SELECT id FROM {db.sql_schema}.rooms")
    await db.close()

TLS: with ``ca_file`` (``PG_CA_FILE``) every connection, the pool's and the writer's own, uses one
``ssl.SSLContext`` built from that CA with the host name checked (``sslmode=verify-full``); it
overrides whatever ``sslmode`` the URL names. Without it the URL's ``sslmode`` applies as asyncpg
reads it. A certificate that does not verify is ``is_tls_verify_failure`` (the boot refuses on it).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import asyncpg  # type: ignore[import-untyped]

from queue_manager.journal.migrations import check_schema, migrate
from queue_manager.store.base import StoreUnavailable

if TYPE_CHECKING:
    from queue_manager.config import Settings


def default_instance_id() -> str:
    """The instance id when none is configured: host name and process id."""
    return f"{socket.gethostname()}-{os.getpid()}"


def tls_context(ca_file: str | None) -> ssl.SSLContext | None:
    """The TLS context of every PostgreSQL connection: the system defaults (TLS 1.2 or later, the
    certificate verified, the host name checked) with ``ca_file`` as the only trust anchor; None without
    ``ca_file`` (the URL's ``sslmode`` then decides)."""
    if not ca_file:
        return None
    return ssl.create_default_context(cafile=ca_file)


def is_tls_verify_failure(err: BaseException) -> bool:
    """Whether ``err`` (or what caused it) is a server certificate that does not verify."""
    cur: BaseException | None = err
    for _ in range(8):
        if cur is None:
            return False
        if isinstance(cur, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in str(cur):
            return True
        cur = cur.__cause__ or cur.__context__
    return False


#: SQLSTATE classes and codes of a fault that passes by itself: a connection lost or refused (08), too
#: little memory, disk or connections (53), an operator's shutdown or restart (57P), a statement cancelled
#: by its timeout (57014), a serialization failure or deadlock (40001, 40P01), a lock not available
#: (55P03), an I/O error (58030)
_TRANSIENT_CLASSES = ("08", "53", "57P")
_TRANSIENT_CODES = frozenset({"57014", "40001", "40P01", "55P03", "58030"})


def is_transient(err: BaseException) -> bool:
    """Whether ``err`` (or what caused it) is a fault of the link or the server that passes by itself
    (PostgreSQL down, restarting, unreachable, overloaded, a timeout), rather than something the same
    statement would meet again (a permission, a missing table, a value PostgreSQL refuses)."""
    cur: BaseException | None = err
    for _ in range(8):
        if cur is None:
            return False
        if isinstance(cur, (OSError, TimeoutError, asyncpg.InterfaceError)):
            return True
        state = getattr(cur, "sqlstate", None)
        if isinstance(state, str) and (state.startswith(_TRANSIENT_CLASSES) or state in _TRANSIENT_CODES):
            return True
        if isinstance(cur, asyncpg.PostgresError):
            return False
        cur = cur.__cause__ or cur.__context__
    return False


class Database:
    """One asyncpg pool on one schema (see the module docstring)."""

    def __init__(
        self,
        dsn: str,
        schema: str = "qm",
        *,
        instance_id: str | None = None,
        pool_size: int = 4,
        timeout_sec: float = 5.0,
        ca_file: str | None = None,
    ) -> None:
        self.dsn = dsn
        self.schema = schema
        self.sql_schema = check_schema(schema)  # quoted, for SQL: "qm"
        self.instance_id = instance_id or default_instance_id()
        self.pool_size = pool_size
        self.timeout = timeout_sec
        self.ca_file = ca_file
        self.ssl = tls_context(ca_file)  # one context for the pool and the writer's own connection
        self._pool: Any = None
        self._migrated = False

    @classmethod
    def from_settings(cls, settings: Settings) -> Database:
        """The database of ``DATABASE_URL`` and ``PG_SCHEMA``."""
        if not settings.database_url:
            raise ValueError("DATABASE_URL is not set")
        return cls(
            settings.database_url, settings.pg_schema, instance_id=settings.instance_id, ca_file=settings.pg_ca_file
        )

    @property
    def pool(self) -> Any:
        """The asyncpg pool; None before ``open`` and after ``close``."""
        return self._pool

    async def open(self) -> None:
        """Create the pool (its connections are made on demand, so this does not need PostgreSQL up).
        Opening an open database does nothing."""
        if self._pool is not None:
            return
        self._pool = await asyncpg.create_pool(
            self.dsn,
            min_size=0,
            max_size=self.pool_size,
            command_timeout=self.timeout,
            server_settings={"application_name": f"qm-journal {self.instance_id}"[:63]},
            **self._tls(),
        )

    async def close(self) -> None:
        """Close the pool; closing a closed database does nothing. A connection that does not close within
        the timeout (its server went away mid-conversation) is terminated."""
        pool, self._pool = self._pool, None
        if pool is not None:
            try:
                await asyncio.wait_for(pool.close(), self.timeout)
            except (TimeoutError, OSError, asyncpg.InterfaceError):
                pool.terminate()

    @contextlib.asynccontextmanager
    async def acquire(self) -> AsyncIterator[Any]:
        """A connection of the pool; StoreUnavailable when the database is not open."""
        if self._pool is None:
            raise StoreUnavailable("the PostgreSQL pool is not open")
        async with self._pool.acquire(timeout=self.timeout) as conn:
            yield conn

    async def connect(self, application_name: str) -> Any:
        """A connection of its own, outside the pool (the journal's writer keeps one)."""
        return await asyncpg.connect(
            self.dsn,
            timeout=self.timeout,
            command_timeout=self.timeout,
            server_settings={"application_name": application_name[:63]},
            **self._tls(),
        )

    def _tls(self) -> dict[str, Any]:
        """``ssl=`` for asyncpg when PG_CA_FILE is set (it wins over the URL's sslmode), else nothing."""
        return {} if self.ssl is None else {"ssl": self.ssl}

    @property
    def migrated(self) -> bool:
        return self._migrated

    async def ensure_migrated(self) -> None:
        """Apply the migrations once per process (``migrate`` is safe when instances race)."""
        if self._migrated:
            return
        async with self.acquire() as conn:
            await migrate(conn, self.schema)
        self._migrated = True

"""The Valkey client a store opens from a URL: redis-py's asyncio client with a pool that waits for a
free connection instead of failing, and commands packed by hiredis.

redis-py's asyncio ``ConnectionPool`` raises ``MaxConnectionsError`` at once when every connection is
in use (100 by default): under a burst of more concurrent requests than that, requests failed as if
Valkey were unreachable. Its ``BlockingConnectionPool`` waits, but costs ~11 us more CPU per command
(condition, timeout and lock per checkout). ``WaitingConnectionPool`` keeps the plain pool's checkout
and only queues (FIFO, bounded by ``wait_sec``) when the pool is full.

redis-py's asyncio connection packs each command in Python, re-joining a growing buffer per argument
(~28 us for a join's 50 arguments); its sync client packs with hiredis' C packer, as ``PackedConnection``
does here (the same bytes, ~10 us).

A Valkey cluster is named by the scheme: ``redis+cluster://host:port`` (``rediss+cluster://`` with
TLS; ``valkey+cluster://`` and ``valkeys+cluster://`` are the same), any one node of it. The client is
then redis-py's ``RedisCluster``: it learns the slot map from that node, sends each command to the
master of its key's slot (following MOVED and ASK), loads scripts on every master (SCRIPT LOAD goes
to all of them) and splits a non-transactional pipeline by node. It offers the commands the rest of
the code calls on a ``Redis``, so it is handed around typed as one; ``is_cluster`` tells them apart
where they differ (MGET across slots, pub/sub).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from typing import Any, cast
from urllib.parse import urlsplit, urlunsplit

import hiredis
from redis.asyncio import ConnectionPool, Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import AbstractConnection, Connection
from redis.exceptions import MaxConnectionsError

POOL_CONNECTIONS = 100  # connections to Valkey per process (redis-py's default ceiling)
POOL_WAIT_SEC = 5.0  # how long a command waits for a free connection before it is StoreUnavailable


class PackedConnection(Connection):
    """A plain TCP connection whose commands are packed by hiredis."""

    def pack_command(self, *args: Any) -> list[bytes]:
        first = args[0]
        if isinstance(first, str):
            if " " in first:  # "SCRIPT LOAD": the server wants the words as separate arguments
                args = (*first.encode().split(), *args[1:])
        elif b" " in first:
            args = (*first.split(), *args[1:])
        try:
            return [hiredis.pack_command(args)]
        except TypeError:  # bytearray and the like: the library's own packing converts or explains
            packed: list[bytes] = super().pack_command(*args)
            return packed


class WaitingConnectionPool(ConnectionPool):
    """A ConnectionPool that, when full, waits (first come, first served) for a released connection."""

    def __init__(self, *args: Any, wait_sec: float = POOL_WAIT_SEC, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.wait_sec = wait_sec
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    async def get_connection(self, *args: Any, **options: Any) -> AbstractConnection:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_sec
        while True:
            try:
                connection: AbstractConnection = await super().get_connection()  # type: ignore[no-untyped-call]
                return connection
            except MaxConnectionsError:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise MaxConnectionsError(
                        f"no free Valkey connection within {self.wait_sec:g} s ({self.max_connections} in use)"
                    ) from None
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters.append(waiter)
            try:
                await asyncio.wait_for(waiter, remaining)
            except TimeoutError:
                pass  # one last try above, then the error
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    self._wake_next()  # handed a connection we will not take: pass it on
                raise
            finally:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)

    async def release(self, connection: AbstractConnection) -> None:
        await super().release(connection)
        self._wake_next()

    def _wake_next(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return


CLUSTER_SCHEMES = {
    "redis+cluster": "redis",
    "valkey+cluster": "redis",
    "rediss+cluster": "rediss",
    "valkeys+cluster": "rediss",
}


def cluster_url(url: str) -> str | None:
    """The plain ``redis://`` (``rediss://``) URL of a cluster URL's seed node; None: not a cluster URL."""
    parts = urlsplit(url)
    plain = CLUSTER_SCHEMES.get(parts.scheme.lower())
    return None if plain is None else urlunsplit(parts._replace(scheme=plain))


def is_cluster(client: object) -> bool:
    """Whether ``client`` speaks the cluster protocol (``open_client`` of a cluster URL)."""
    return isinstance(client, RedisCluster)


async def ready(client: Redis) -> None:
    """Learn a cluster client's slot map now, if it has not yet (a no-op otherwise): its pub/sub picks a
    node from that map without asking for it first."""
    if isinstance(client, RedisCluster):
        await client.initialize()


def open_client(url: str) -> Redis:
    """A client for ``url`` (``decode_responses=False``); closing it closes its pool.

    For a cluster URL, a ``RedisCluster`` (typed as ``Redis``: the same commands) with up to
    ``POOL_CONNECTIONS`` connections per node."""
    seed = cluster_url(url)
    if seed is not None:
        cluster = RedisCluster.from_url(seed, decode_responses=False, max_connections=POOL_CONNECTIONS)
        return cast(Redis, cluster)
    pool = WaitingConnectionPool.from_url(url, max_connections=POOL_CONNECTIONS, decode_responses=False)
    if pool.connection_class is Connection:  # plain TCP; TLS and unix sockets keep their own class
        pool.connection_class = PackedConnection
    return Redis.from_pool(pool)

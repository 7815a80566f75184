"""Joins straight through the store: ``count`` new visitors into one room of a valkey+pg server's store.

    python bench/million_joins.py --valkey URL --prefix P --database URL --schema S --room R --count N
        [--first K] [--concurrency C]

A ValkeyStore on the server's prefix (the room's join script, as the server runs it) with a PgJournal on
the server's schema (group commit, as the server journals): each join returns once its events are
committed to PostgreSQL, exactly as a 200 to ``/api/join`` does, without the HTTP layer. Visitor ``K``
has an address of its own (198.18.0.0/15) and a cookie of its own. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import tempfile
import time

import orjson

from queue_manager.clock import SystemClock
from queue_manager.engine.model import ClientId
from queue_manager.journal.pg import PgJournal
from queue_manager.store.valkey import ValkeyStore


def client(k: int) -> ClientId:
    digest = hashlib.blake2b(k.to_bytes(8, "big"), digest_size=28).digest()
    return ClientId(ident=f"198.{18 + (k >> 16) % 2}.{(k >> 8) & 255}.{k & 255}", fp=digest[:12], cookie=digest[12:])


async def main(a: argparse.Namespace) -> dict[str, object]:
    clock = SystemClock()
    journal = PgJournal(
        a.database, a.schema, instance_id=f"million-{a.first}", clock=clock, spool_dir=tempfile.mkdtemp()
    )
    await journal.start()
    store = ValkeyStore(a.valkey, a.prefix, clock, journal=journal, writer=f"million-{a.first}")
    await store.start()
    next_k = a.first
    end = a.first + a.count
    failed = 0

    async def worker() -> None:
        nonlocal next_k, failed
        while next_k < end:
            k = next_k
            next_k += 1
            try:
                await store.join(a.room, client(k), None, None)
            except Exception:  # counted: the report says how many joins were refused
                failed += 1

    t0 = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(a.concurrency)))
    seconds = time.monotonic() - t0
    await store.close()
    await journal.close()
    return {"joins": a.count - failed, "failed": failed, "seconds": round(seconds, 2)}


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    for name in ("--valkey", "--prefix", "--database", "--schema", "--room"):
        ap.add_argument(name, required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--first", type=int, default=0)
    ap.add_argument("--concurrency", type=int, default=64)
    print(orjson.dumps(asyncio.run(main(ap.parse_args()))).decode(), flush=True)

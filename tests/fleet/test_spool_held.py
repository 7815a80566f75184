"""What each instance's disk spool holds, as the fleet sees it (``StorageWatch.spool_held``), against a
real Valkey: the reconciler rebuilds no room while any instance's spool holds events the journal lacks."""

from __future__ import annotations

from pathlib import Path

from redis.asyncio import Redis

from queue_manager.clock import SystemClock
from queue_manager.fleet.storage_watch import StorageWatch
from queue_manager.journal import PgJournal
from queue_manager.store.valkey.keys import spool_held_key


def _watch(redis: Redis, prefix: str, instance: str, spool: Path) -> StorageWatch:
    # the journal is never started: only its spool and health are read
    journal = PgJournal("postgresql://unused@127.0.0.1:1/unused_test", "qm", instance, spool_dir=spool)
    return StorageWatch(journal, redis, prefix, instance, 1000, SystemClock(), report_every_ms=1000)


async def test_an_instance_holding_spooled_events_holds_the_fleet_back_until_it_drains(
    client: Redis, prefix: str, tmp_path: Path
) -> None:
    a = _watch(client, prefix, "a", tmp_path / "a")
    b = _watch(client, prefix, "b", tmp_path / "b")
    try:
        await a.report()
        await b.report()
        assert await a.spool_held() == {} and await b.spool_held() == {}
        b.journal.spool.append([{"type": "join", "room": "r", "gen": 1, "seq": 1, "ts": 1, "data": {}}], 1)
        await b.report()
        assert await a.spool_held() == {"b": 1}
        assert await b.spool_held() == {"b": 1}  # its own, as it is now
        final = b.journal.spool.finalize()  # finished, not yet drained: still held
        assert final is not None
        await b.report()
        assert await a.spool_held() == {"b": 1}
        b.journal.spool.quarantine(final, "refused")  # quarantined files need a person, not a wait
        await b.report()
        assert await a.spool_held() == {}
        # a report older than 3 x its window is not believed (the instance stopped with a full spool)
        await client.hset(spool_held_key(prefix), "c", f"{SystemClock().wall_ms() - 10_000}:5")
        assert await a.spool_held() == {}
    finally:
        keys = [k async for k in client.scan_iter(match=f"{prefix}*")]
        if keys:
            await client.delete(*keys)

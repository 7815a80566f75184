"""The fault drill's short form, on every ``make test``: kill -9 with joins in flight, then a rebuild.

Two instances share one Valkey prefix and one schema (a fleet). Five times, a burst of joins is fired at
both from threads and instance ``a`` is killed (SIGKILL) while some of its joins are in flight, then
started again on the same settings. Once the fleet has settled, Valkey loses the fleet's keys, so every
room must be rebuilt from the journal alone. Then, with the drill's own reconciliation
(``tests/chaos/reconcile.py``, the same as ``make chaos``):

* every acknowledged join is in the journal once and in the line once, before and after the rebuild;
* no ticket twice, no order inversion;
* no gap in the journal's seqs once the fleet has settled: a join minted in Valkey whose commit died
  with the process must not leave a hole that fences the room at its next rebuild;
* every room answers again after the rebuild (no permanent 503).

Time: about 20 s when it passes (five process restarts and one rebuild, with ``RESYNC_MS=500`` and
``LEADER_LEASE_MS=2000``). Two waits are conditions with generous bounds: up to 30 s for the journal's
gaps to close and up to 30 s for the rooms to answer after the rebuild; a build that cannot close the
gaps spends both before failing.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from harness import Server, create_room, start_server, sync_valkey, wait_until

from tests.chaos.reconcile import (
    Clients,
    Ledger,
    by_room,
    forget_valkey,
    journal_gaps,
    look_up,
    read_journal,
    reconcile,
    settled,
    unrebuildable,
    wait_for_no_gaps,
    wait_for_rooms,
)

pytestmark = pytest.mark.stores("valkey")  # a kill and a rebuild from the journal: nothing to keep on memory

KILLS = 5
BURST = 64  # joins per burst, three in four to the instance that is killed
FLEET = {"RESYNC_MS": "500", "LEADER_LEASE_MS": "2000"}
SHARED = ("VALKEY_PREFIX", "PG_SCHEMA", "SECRET", "ADMIN_KEY")
SAME_SETTINGS = (*SHARED, "SPOOL_DIR", "QM_INSTANCE_ID", *FLEET)


def test_kill_9_with_joins_in_flight_loses_nothing_leaves_no_gap_and_every_room_rebuilds() -> None:
    runs: list[Server] = []  # stopped at the end only: a stop deletes the fleet's prefix and schema
    clients = Clients()
    try:
        a = start_server({**FLEET, "QM_INSTANCE_ID": "crash-a"})
        runs.append(a)
        b_env = {k: a.env[k] for k in SHARED}
        b = start_server({**b_env, **FLEET, "QM_INSTANCE_ID": "crash-b", "SPOOL_DIR": a.env["SPOOL_DIR"] + "-b"})
        runs.append(b)
        with a.admin() as admin:
            rooms = [create_room(admin, ratePerMinute=0, queueMaxPerIp=None, presenceSec=None)["id"] for _ in "ab"]
        ledger = Ledger()

        for _ in range(KILLS):
            target = a
            with ThreadPoolExecutor(16) as pool:
                burst = [
                    (
                        i % 4 != 0,
                        pool.submit(
                            ledger.join,
                            clients,
                            (target if i % 4 else b).base_url,
                            rooms[i % 2],
                            "a" if i % 4 else "b",
                        ),
                    )
                    for i in range(BURST)
                ]
                on_a = [f for to_a, f in burst if to_a]
                wait_until(
                    lambda on_a=on_a: sum(f.done() and f.result().acknowledged for f in on_a) >= 10,
                    timeout=30,
                    interval=0.005,
                    what="10 joins acknowledged by a",
                )
                target.kill()  # SIGKILL with the rest of the burst in flight on it
            a = start_server({k: target.env[k] for k in SAME_SETTINGS})  # the same fleet, the same spool
            runs.append(a)
        for i in range(8):  # and on, past whatever the last kill left behind
            ledger.join(clients, (a, b)[i % 2].base_url, rooms[i % 2], "ab"[i % 2])

        urls, key = [a.base_url, b.base_url], a.admin_key
        database, schema = a.env["DATABASE_URL"], a.env["PG_SCHEMA"]
        wait_until(
            lambda: all(settled(clients, url, key) is None for url in urls),
            timeout=60,
            interval=0.25,
            what="both instances in rotation, Valkey up, spools drained",
        )
        gaps_settled = wait_for_no_gaps(database, schema, timeout=30)
        acked = ledger.acknowledged()
        assert len(acked) >= KILLS * 10, len(acked)
        live = look_up(clients, urls, acked)
        journal = read_journal(database, schema, rooms)

        valkey = sync_valkey(a.env["VALKEY_URL"])
        try:
            forget_valkey(valkey, a.env["VALKEY_PREFIX"])  # Valkey lost the fleet: rebuild from the journal
        finally:
            valkey.close()
        back = wait_for_rooms(clients, urls, by_room(acked), timeout=30)
        rebuilt = look_up(clients, urls, [j for j in acked if back.get(j.room)])
        result = reconcile(
            acked, live, journal, rebuilt, back, journal_gaps(database, schema), unrebuildable(clients, urls, key)
        )
        settled_text = "none" if not gaps_settled else "; ".join(str(g) for g in gaps_settled)
        assert result.ok, (
            f"after {KILLS} kill -9 with joins in flight ({len(acked)} acknowledged joins); journal gaps once "
            f"settled: {settled_text}\n{result.render()}"
        )
    finally:
        clients.close()
        for srv in sorted(runs, key=lambda s: s.returncode is not None):  # the live ones first
            srv.stop()

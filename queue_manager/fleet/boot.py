"""The fleet's parts started and stopped in order.

A PostgreSQL certificate that does not verify (PG_CA_FILE) refuses the boot, like Valkey's three connect
errors (``connection.py``); PostgreSQL or Valkey unreachable boots degraded and keeps reconnecting.
"""

from __future__ import annotations

import contextlib

from queue_manager.config import ConfigRefusal, Settings
from queue_manager.fleet.parts import FleetParts
from queue_manager.journal.database import is_tls_verify_failure
from queue_manager.store.base import StoreUnavailable


def pg_tls_refusal(settings: Settings) -> ConfigRefusal:
    """PostgreSQL's certificate does not verify: named by the setting that chose the trust anchor."""
    if settings.pg_ca_file:
        return ConfigRefusal(
            "PG_CA_FILE",
            "PostgreSQL's TLS certificate does not verify against the CA in PG_CA_FILE (or does not name the "
            "host in DATABASE_URL). Point PG_CA_FILE at the CA that signed the server's certificate.",
        )
    return ConfigRefusal(
        "DATABASE_URL",
        "PostgreSQL's TLS certificate does not verify against the system trust store (sslmode in DATABASE_URL). "
        "Set PG_CA_FILE to the CA that signed the server's certificate.",
    )


async def start(fleet: FleetParts) -> None:
    """The journal, then Valkey, then the lease, the hints, the storage report, the counters and the round."""
    try:
        await fleet.journal.start(require=False)  # degraded when PostgreSQL is down; refused on TLS
    except StoreUnavailable as exc:
        if is_tls_verify_failure(exc):
            raise pg_tls_refusal(fleet.settings) from None
        raise
    connection = fleet.connection
    await connection.connect()
    connection.lease.start()
    connection.hints.on("rooms", fleet.rooms.on_hint)
    connection.hints.start()
    fleet.storage.start()
    fleet.counters.start()
    fleet.loop.start()


async def stop(fleet: FleetParts) -> None:
    """The round and the reconnects first, the journal's marks as this instance leaves them, the lease handed
    back, then the Valkey connection and the journal closed (each best effort)."""
    connection = fleet.connection
    await fleet.loop.stop()
    await connection.stop_reconnecting()
    with contextlib.suppress(Exception):  # the journal as this instance leaves it (best effort)
        await fleet.recovery.mark_journal()
    await connection.lease.stop()
    await connection.hints.stop()
    await fleet.storage.stop()
    await fleet.counters.stop()
    with contextlib.suppress(Exception):
        await connection.store.close()
    with contextlib.suppress(Exception):
        await fleet.journal.close()

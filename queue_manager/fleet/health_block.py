"""The fleet's block of the health reports (``backend`` in /healthz and /api/admin/health)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the fleet's modules load the Valkey client: imported only where the fleet runs
    from queue_manager.fleet.parts import FleetParts


def fleet_health(fleet: FleetParts, *, full: bool) -> dict[str, Any]:
    connection, recovery, gaps = fleet.connection, fleet.recovery, fleet.gaps
    out: dict[str, Any] = {
        "store": "valkey",
        # down also while the store answers at once after a failure (breaker.py)
        "valkey": "up" if connection.answering else "down",
        "valkeyEverConnected": connection.ever_connected,
        # marked here, or answered as fenced by Valkey in the last 30 s (the guide's /healthz)
        "recoveringRooms": len(recovery.recovering_rooms()),
        # PostgreSQL restored under a Valkey that holds newer state (journal_marks.py): reported, not rebuilt
        "roomsAheadOfJournal": len(recovery.ahead),
        # rooms whose journal misses seqs past the commit deadline (gapwatch.py, the leader's report)
        "journalGapRooms": len(gaps.fleet),
        "ok": connection.answering,
    }
    if full:
        out["maxmemoryPolicy"] = connection.store.maxmemory_policy
        out["recovering"] = sorted(recovery.recovering_rooms())
        out["aheadOfJournal"] = recovery.ahead_report()
        out["recovery"] = {
            "rebuilt": recovery.rebuilt_total,
            "rollbacks": recovery.rollbacks_total,
            "logosLost": recovery.logos_lost_total,
            "conflicts": fleet.journal.conflicts,
            "lastRebuild": recovery.last_rebuild,
            "unrebuildable": dict(sorted(recovery.unrebuildable.items())),
            "checkpointsSaved": fleet.checkpoints.saved,
            "lastCheckpoint": fleet.checkpoints.last,
            "rolledForward": gaps.rolled_forward_total,
            "voided": gaps.voided_total,
        }
        out["journalGaps"] = gaps.fleet
        out["hints"] = connection.hints.health()
    return out

"""Admin routes the operator console needs beyond the core admin API (series, reports, diagnostics)."""

from __future__ import annotations

from queue_manager.http.call import Call


async def dispatch(call: Call) -> bool:
    """Serve call's path if it is one of ours and return True; False leaves it to the 404."""
    return False

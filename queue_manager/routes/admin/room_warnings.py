"""What a room save tells the operator beside its answer (``warnings[]``): where the console answers now.

Judged after the save, once the inline proxy's host index has it (the save announces its room on
``Context.room_changes`` and the index re-reads before the answer):

* ``console_host_withheld`` — the saved room is inline, neither ADMIN_HOST nor PUBLIC_URL is set, and the
  host the save came through is none the console keeps while rooms are inline (``Context.attached.inline.console_host``:
  an address literal, localhost) and fronts no inline room: from the next request on the console answers
  404 there;
* ``console_moved`` — the save came through the console under ``/__qm/`` on an inline host, and that host
  fronts no inline room any more: its ``/__qm/*``, this console included, answers ``404 not_inline_host``
  from the next request on; the warning names where the console is now (PUBLIC_URL).
"""

from __future__ import annotations

from typing import Any

from queue_manager.context import Context
from queue_manager.http.hostname import host_key
from queue_manager.http.wire import Request


def console_warnings(ctx: Context, req: Request, room: dict[str, Any]) -> list[dict[str, Any]]:
    """The warnings of a save of ``room`` (as the answer shows it) made by ``req``; none without an inline proxy."""
    inline = ctx.attached.inline
    if inline is None:
        return []
    host = req.headers.get(b"host")
    fronted = inline.index.lookup(host) is not None
    warnings = []
    settings = ctx.settings
    if room.get("proxyOrigin") and not settings.admin_hosts and not settings.public_url:
        if not inline.console_host(host) and not fronted:
            warnings.append(_withheld(host_key(host)))
    if req.prefix and not fronted:  # under /__qm/: the host fronted an inline room until this save
        warnings.append(_moved(ctx, host_key(host)))
    return warnings


def _withheld(name: str) -> dict[str, Any]:
    return {
        "code": "console_host_withheld",
        "host": name,
        "message": (
            f"With an inline room and neither ADMIN_HOST nor PUBLIC_URL set, the console on {name} answers 404 "
            f"from the next request on. Set ADMIN_HOST={name} (or PUBLIC_URL) and restart."
        ),
    }


def _moved(ctx: Context, name: str) -> dict[str, Any]:
    public = ctx.settings.public_url
    where = public.rstrip("/") + "/" if public else None  # where the console lives off the customer's hosts
    message = (
        f"{name} no longer fronts an inline room, so the queue's own /__qm/* surface is off that host, "
        "including this console."
    )
    message += f" The console is at {where}." if where else " Set PUBLIC_URL so the console can name where it went."
    return {"code": "console_moved", "host": name, "consoleUrl": where, "message": message}

"""The system surface: admission ("pop") maintenance, the shared-state summary, the stats refresh and the
fleet's internal routes. Every route needs the owner role (the ``owner`` grant: an owner operator or
ADMIN_KEY); the writes are audited. Paths, bodies and ``message`` strings follow the adopted page of
system routes (``docs/OPERATIONS.md``, "The system surface"): tooling greps for the strings, so they
never change.

* ``GET/POST /api/v1/system/maintenance``: journal maintenance, the disk spool (``sidestores/maintenance/``).
* ``GET /api/v1/status/buffers``: this instance's disk spool in full.
* ``GET/POST /api/v1/system/maintenance/pop``: admission maintenance (``sidestores/maintenance/``).
* ``GET /api/v1/system/shared-state``: does this instance share its state with live peers?
* ``POST /api/v1/stats/refresh``: recount every room and fold the open hour of the reports now.
* ``POST /internal/api/notify``: wake this instance's live streams of a room, and the fleet's.
* ``GET /internal/api/shared-state/stats`` (alias ``/internal/api/inter-instance/stats``): the transport.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson

from queue_manager.http.wire import HttpError, refuse_nul, send_json
from queue_manager.routes.call import Call
from queue_manager.store.base import StoreUnavailable

log = logging.getLogger("queue_manager.http")

MAINTENANCE_ON = "Maintenance mode ENABLED. All PUSHes routing to file buffer."
MAINTENANCE_OFF = "Maintenance mode DISABLED. Background processor will drain buffer to DB."
POP_ON = "Pop maintenance mode ENABLED. All POP operations will return empty arrays."
POP_OFF = "Pop maintenance mode is OFF. Normal operation."
ENABLED_REQUIRED = "enabled (boolean) is required"
QUEUE_REQUIRED = "queue (string) is required"
TRANSPORT = "valkey-pubsub"
MAX_QUEUE = 200


def _pop_body(enabled: bool) -> dict[str, Any]:
    return {"popMaintenanceMode": enabled, "message": POP_ON if enabled else POP_OFF}


async def _body(call: Call, refusal: str) -> dict[str, Any]:
    """The JSON object sent; an empty, unreadable or non-object body is the route's own 400."""
    raw = await call.req.body()
    try:
        data = orjson.loads(raw) if raw.strip() else None
    except orjson.JSONDecodeError:
        data = None
    if not isinstance(data, dict):
        raise HttpError(400, "bad_request", refusal)
    refuse_nul(raw, data)
    return data


async def _audit_switch(call: Call, action: str, **detail: Any) -> bool:
    """Audit a maintenance switch. The switch has taken effect whatever happens here: when PostgreSQL cannot
    take the audit row (it is what the maintenance is for), the row goes to the server log as an ``audit``
    line instead and the answer says ``audited: false``."""
    try:
        await call.audit(action, **detail)
    except StoreUnavailable as err:
        row = {"action": action, "actor": call.who.who, "ip": call.ident.ip, **detail}
        log.warning("audit (not stored: %s): %s", err, orjson.dumps(row).decode())
        return False
    return True


async def maintenance_get(call: Call) -> None:
    """GET /api/v1/system/maintenance: both flags, journal maintenance re-read from ``system_state``; never 500."""
    maint = call.ctx.journal_maintenance
    try:
        status = await maint.status()
    except Exception as err:  # the spool directory unreadable: the flag as this process holds it
        log.warning("maintenance status: %s", err)
        status = {
            "maintenanceMode": maint.enabled,
            "bufferedMessages": 0,
            "bufferHealthy": False,
            "bufferStats": {
                "pendingCount": 0,
                "failedCount": 0,
                "dbHealthy": False,
                "failedFiles": {"count": 0, "totalBytes": 0, "totalMB": 0.0, "failoverCount": 0, "qos0Count": 0},
            },
        }
    body = {"maintenanceMode": status["maintenanceMode"], "popMaintenanceMode": call.ctx.admission.enabled}
    await send_json(call.send, 200, body | status)


async def maintenance_set(call: Call) -> None:
    """POST /api/v1/system/maintenance {"enabled": bool}: journal maintenance on or off, fleet-wide."""
    enabled = (await _body(call, ENABLED_REQUIRED)).get("enabled")
    if not isinstance(enabled, bool):
        raise HttpError(400, "bad_request", ENABLED_REQUIRED, field="enabled")
    maint = call.ctx.journal_maintenance
    mirrored = await maint.set(enabled)
    audited = await _audit_switch(call, "system.maintenance", enabled=enabled, mirrored=mirrored)
    try:
        status = await maint.status()
        buffered, healthy = status["bufferedMessages"], status["bufferHealthy"]
    except Exception as err:
        log.warning("maintenance status: %s", err)
        buffered, healthy = 0, False
    await send_json(
        call.send,
        200,
        {
            "maintenanceMode": enabled,
            "bufferedMessages": buffered,
            "bufferHealthy": healthy,
            "message": MAINTENANCE_ON if enabled else MAINTENANCE_OFF,
        }
        | ({} if audited else {"audited": False}),
    )


async def buffers(call: Call) -> None:
    """GET /api/v1/status/buffers: this instance's disk spool (``docs/OPERATIONS.md``, the system surface)."""
    body = await asyncio.to_thread(call.ctx.journal_maintenance.buffers)
    await send_json(call.send, 200, {"instance": call.ctx.settings.instance_id, "store": call.ctx.store.kind} | body)


async def pop_get(call: Call) -> None:
    """GET /api/v1/system/maintenance/pop: this instance's flag (on Valkey, the fleet's as last read)."""
    await send_json(call.send, 200, _pop_body(call.ctx.admission.enabled))


async def pop_set(call: Call) -> None:
    """POST /api/v1/system/maintenance/pop {"enabled": bool}: admission maintenance on or off, fleet-wide."""
    enabled = (await _body(call, ENABLED_REQUIRED)).get("enabled")
    if not isinstance(enabled, bool):
        raise HttpError(400, "bad_request", ENABLED_REQUIRED, field="enabled")
    await call.ctx.admission.set(enabled)
    audited = await _audit_switch(call, "system.pop_maintenance", enabled=enabled, shared=call.ctx.admission.shared)
    await send_json(call.send, 200, _pop_body(enabled) | ({} if audited else {"audited": False}))


#: Why no state is shared, as the adopted page words it ("no peers configured, or no transport"); the
#: ``detail`` beside it says which: STORE=memory, Valkey unreachable, or no other live instance.
NO_PEERS = "no_peers"
SINGLE_INSTANCE = "single_instance"


async def _peers(call: Call) -> tuple[list[str] | None, str | None]:
    """The other live instances (the fleet counters' index), or None and why they are not known."""
    fleet = call.ctx.fleet
    if fleet is None:
        return None, "store_memory"
    try:
        live = await fleet.counters.live_instances()
    except Exception:
        return None, "valkey_unreachable"
    return [w for w in live if w != call.ctx.settings.instance_id], None


def _no_peers(detail: str | None) -> dict[str, Any]:
    return {"enabled": False, "reason": NO_PEERS, "detail": detail or SINGLE_INSTANCE}


async def shared_state(call: Call) -> None:
    """GET /api/v1/system/shared-state: enabled only with STORE=valkey and at least one live peer."""
    peers, detail = await _peers(call)
    out: dict[str, Any] = {"enabled": True} if peers else _no_peers(detail)
    out["maintenance_mode"] = call.ctx.journal_maintenance.enabled
    out["pop_maintenance_mode"] = call.ctx.admission.enabled
    await send_json(call.send, 200, out)


async def stats_refresh(call: Call) -> None:
    """POST /api/v1/stats/refresh: recount every room now and fold the reading into the open hour."""
    await call.req.body()
    ctx = call.ctx
    rooms = await ctx.store.list_rooms()
    now_ms = ctx.clock.wall_ms()
    ctx.history.offer(rooms, {}, now_ms)
    rows = await ctx.history.fold_open_hour()
    folded = bool(ctx.history.leads())
    await call.audit("system.stats_refresh", rooms=len(rooms), folded=folded)
    await send_json(
        call.send,
        200,
        {
            "engine": ctx.store.kind,
            "segPartitions": len(rooms),
            "rooms": len(rooms),
            "waiting": sum(int(r.get("waiting") or 0) for r in rooms),
            "folded": folded,
            "historyRows": len(rows),
            "rows": rows,
            "at": now_ms,
        },
    )


async def notify(call: Call) -> None:
    """POST /internal/api/notify {"queue": roomId, "partition"?}: wake the room's live streams, fleet-wide."""
    room_id = (await _body(call, QUEUE_REQUIRED)).get("queue")
    if not isinstance(room_id, str) or not room_id.strip() or len(room_id) > MAX_QUEUE:
        raise HttpError(400, "bad_request", QUEUE_REQUIRED, field="queue")
    call.ctx.broadcaster.notify({room_id})
    fleet = call.ctx.fleet
    if fleet is not None:
        await fleet.connection.hints.publish("wake", room=room_id)
    await call.audit("system.notify", target=room_id, room_id=room_id)
    await send_json(call.send, 200, {"status": "ok"})


async def transport_stats(call: Call) -> None:
    """GET /internal/api/shared-state/stats (and /internal/api/inter-instance/stats): the fleet transport."""
    ctx = call.ctx
    flags = {"maintenance_mode": call.ctx.journal_maintenance.enabled, "pop_maintenance_mode": ctx.admission.enabled}
    peers, detail = await _peers(call)
    fleet = ctx.fleet
    if fleet is None or peers is None:
        await send_json(call.send, 200, {**_no_peers(detail), "server_id": ctx.settings.instance_id, **flags})
        return
    hints = fleet.connection.hints
    out: dict[str, Any] = {
        "server_id": ctx.settings.instance_id,
        "transport": TRANSPORT,
        "peer_count": len(peers),
        "peers": [{"server_id": p, "connected": True} for p in peers],
        "servers_alive": len(peers),
        "messages_sent": hints.published,
        "messages_received": hints.received,
        "messages_dropped": hints.dropped,
        "enabled": bool(peers),
        "running": hints.subscribed,
    }
    if not peers:
        out.update(reason=NO_PEERS, detail=SINGLE_INSTANCE)
    await send_json(call.send, 200, out | flags)

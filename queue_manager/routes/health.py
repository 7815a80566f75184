"""Health (/healthz, /api/version, /api/admin/health) and /metrics."""

from __future__ import annotations

import asyncio
import dataclasses
import resource
from pathlib import Path
from typing import Any

from queue_manager.config import effective_settings
from queue_manager.context import Context
from queue_manager.engine.errors import EngineError
from queue_manager.fleet.health_block import fleet_health
from queue_manager.http.wire import HttpError, Request, Send, send_json, send_response
from queue_manager.metrics import Counters
from queue_manager.metrics import render as render_metrics
from queue_manager.services import peers

#: An approximate size of one ticket held by a waiting line (its record, its place in the line and its
#: indexes): the ``memory`` block's estimate of the lines' share is the tickets held times this.
BYTES_PER_TICKET = 1024


def health_status(ctx: Context) -> tuple[str, bool]:
    run = ctx.run
    incidents = run.recent_clock_incidents(ctx.clock.wall_ms())
    if run.shutting_down:
        return "shutting_down", False
    status = "degraded" if incidents else "ok"
    inline = ctx.attached.inline
    if inline is not None and inline.probe.failing():  # an origin down is an incident, never unready
        status = "degraded"
    if _failing_targets(_targets(ctx, full=False)):  # so is a snippet room's site not answering
        status = "degraded"
    if inline is not None and inline.at_ceiling():  # new requests are being shed: take this one out
        return status, False
    fleet = ctx.fleet
    if fleet is not None:
        block = fleet_health(fleet, full=False)
        if (  # never unready
            block["valkey"] == "down"
            or block["recoveringRooms"]
            or block["roomsAheadOfJournal"]
            or block["journalGapRooms"]
        ):
            status = "degraded"
        if not _storage_ok(ctx):
            status = "degraded"
            if fleet.storage.out_of_rotation:  # this instance's journal only: another instance's is ok
                return status, False
    return status, run.ready


def _targets(ctx: Context, *, full: bool) -> dict[str, dict[str, Any]]:
    """The target probe's last result per snippet room, as every instance reads it (jobs/targets.py)."""
    alerts = ctx.attached.alerts
    targets = alerts.view(full=full).get("targets") if alerts is not None else None
    return targets if isinstance(targets, dict) else {}


def _failing_targets(targets: dict[str, dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """A probe that got no answer below 500 in time; a refused one (a private address) is configuration."""
    return [(room_id, r) for room_id, r in sorted(targets.items()) if r.get("ok") is False and not r.get("refused")]


def _storage_ok(ctx: Context) -> bool:
    fleet = ctx.fleet
    return fleet is None or fleet.journal.storage_ok(ctx.clock.wall_ms(), 3 * ctx.settings.alert_every_ms)


def _public_health(ctx: Context) -> dict[str, Any]:
    status, ready = health_status(ctx)
    fleet = ctx.fleet
    out = {
        "status": status,
        "ready": ready,
        "leader": True if fleet is None else fleet.connection.lease.leader and fleet.connection.up,
        "version": ctx.version,
        "store": ctx.store.kind,
        "uptimeSec": int(ctx.uptime()),
    }
    if fleet is not None:
        block = out["backend"] = fleet_health(fleet, full=False)
        if (
            block["valkey"] == "down"
            or block["recoveringRooms"]
            or block["roomsAheadOfJournal"]
            or block["journalGapRooms"]
        ) and out["status"] == "ok":
            out["status"] = "degraded"
    return out


def _storage(ctx: Context) -> dict[str, Any]:
    fleet = ctx.fleet
    if fleet is None:
        return {"kind": ctx.store.kind, "ok": True, "writeErrors": 0, "lastError": None}
    journal = fleet.journal.health()
    window = 3 * ctx.settings.alert_every_ms
    ahead = sorted(fleet.recovery.ahead)
    return {
        "kind": "valkey+pg",
        # not ok either when rooms are ahead of the journal (PostgreSQL restored under a newer Valkey)
        "ok": fleet.journal.storage_ok(ctx.clock.wall_ms(), window) and not ahead,
        "roomsAheadOfJournal": ahead,
        "writeErrors": journal["writeErrors"],
        "lastError": journal["lastError"],
        "journal": journal,
        # the chart's marks: held for the next write, written, failed writes, dropped, pruned
        **({"timeline": ctx.timeline.stats()} if ctx.timeline is not None else {}),
        # the reports' hourly rows: rows written (by the leader), failed writes, rows pruned, the last error
        "history": ctx.history.stats(),
    }


def local_counters(ctx: Context) -> Counters:
    """This process's counters as they are now, the protection's counts included (what the fleet view writes)."""
    p = ctx.protection
    protection = {
        "assessed": p.assessed,
        "blocked": p.blocked,
        "warned": p.warned,
        "allowlisted": p.allowlisted,
        "crawlers": p.crawlers,
    }
    return dataclasses.replace(ctx.counters, protection=protection)


async def fleet_counters(ctx: Context) -> tuple[Counters, dict[str, Any]]:
    """The counters health shows: the sum over the live instances (STORE=valkey), or this process's own."""
    fleet = ctx.fleet
    if fleet is None:
        return local_counters(ctx), {"instances": 1, "partial": False}
    return await fleet.counters.view()


def _rss_bytes() -> tuple[int, str]:
    """This process's resident memory now (VmRSS), or its peak where /proc is not there."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024, "VmRSS"
    except (OSError, ValueError, IndexError):
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak * 1024, "peak"


def _memory(ctx: Context, tickets: int) -> dict[str, Any]:
    rss, source = _rss_bytes()
    return {
        "rssBytes": rss,
        "rssFrom": source,
        "ticketsHeld": tickets,
        "bytesPerTicket": BYTES_PER_TICKET,
        "linesEstimateBytes": tickets * BYTES_PER_TICKET,
        # where the lines live: this process (STORE=memory) or the shared Valkey
        "linesIn": "valkey" if ctx.fleet is not None else "process",
    }


async def _turn_emails(ctx: Context, c: Counters) -> dict[str, Any]:
    """The turn-e-mail block: whether the waiting page offers them, and sent / failed / pending."""
    s = ctx.settings
    out: dict[str, Any] = {
        "enabled": s.email_notify,
        "offered": s.turn_emails and ctx.addresses is not None,
        "sent": c.turn_emails_sent,
        "failed": c.turn_emails_failed,
        "retried": c.turn_emails_retried,
        "pending": None,
        "addresses": None,
    }
    if s.email_notify and not s.turn_emails:
        out["problem"] = "EMAIL_NOTIFY is on but SMTP_URL or SMTP_FROM is missing or unusable: nothing is offered"
    turn_mail = ctx.attached.turn_mail
    if turn_mail is not None:
        out |= await turn_mail.health()
    return out


async def healthz(ctx: Context, req: Request, send: Send) -> None:
    payload = _public_health(ctx)
    await send_json(send, 200 if payload["ready"] else 503, payload, head=req.method == "HEAD")


async def version(ctx: Context, req: Request, send: Send) -> None:
    await send_json(send, 200, _public_health(ctx), head=req.method == "HEAD")


async def admin_health(ctx: Context, req: Request, send: Send, *, full: bool = True) -> None:
    """``full`` False is what a share link sees: nothing that names an address, a key or a misconfiguration."""
    s = ctx.settings
    rooms = await ctx.store.list_rooms()
    status, ready = health_status(ctx)
    incidents = [f"clock stepped by {i['stepMs']} ms" for i in ctx.run.clock_incidents]
    c, fleet = await fleet_counters(ctx)
    visitors = {
        "waiting": sum(r["waiting"] for r in rooms),
        "preQueue": sum(r["preQueue"] for r in rooms),
        "activeSessions": sum(r["activeSessions"] for r in rooms),
        "passesOutstanding": sum(r["passesOutstanding"] for r in rooms),
    }
    payload = {
        **_public_health(ctx),
        "status": status,
        "ready": ready,
        "instance": s.instance_id,
        "pid": ctx.pid,
        "now": ctx.clock.wall_ms(),
        "startedAt": ctx.started_ms,
        "fleet": fleet,
        "rooms": len(rooms),
        "visitors": visitors,
        "memory": _memory(ctx, sum(visitors.values())),
        "sse": {"streams": ctx.broadcaster.streams, "perIp": s.sse_per_ip, "maxTotal": s.sse_max_total},
        "rateLimits": {
            "joinPerMin": s.join_limit_per_min,
            "checkPerMin": s.check_limit_per_min,
            "waitingPerMin": s.waiting_limit_per_min,
            "maxKeys": s.rate_limit_max_keys,
        },
        "storage": _storage(ctx),
        "counters": {
            "unknownRoomChecks": c.unknown_room_checks,
            "blockedReturnUrls": c.blocked_return_urls,
            "rejectedTokens": c.rejected_tokens,
            "rejectedTokensByReason": c.rejected_tokens_by_reason,
            "unscopedChecks": c.unscoped_checks,
            "rateLimitedChecks": c.rate_limited_checks,
            "refusedKeyChecks": c.refused_key_checks,
            "protection": c.protection,
            "refusedOriginChecks": [
                {"roomId": r, "origin": o, "count": n} for (r, o), n in c.refused_origin_checks.items()
            ],
        },
        "blockedReturnUrlsByRoom": {r["id"]: r["blockedReturnUrls"] for r in rooms if r["blockedReturnUrls"]},
        "incidents": incidents,
        "warnings": [w.as_json() for w in s.warnings],
        "hardening": list(s.hardening),
        # every setting's value in effect and its source, secrets only as set or unset (what qm config prints)
        "settings": [setting.as_json() for setting in effective_settings(s)],
        "keys": {
            "adminKeyDefault": s.admin_key_is_default,
            "secretDefault": s.secret_is_default,
            "tokenSignV2": s.token_sign_v2,
            "kid": ctx.signer.kid,
            "secretPrevious": s.secret_previous is not None,
            "publicApiKey": s.public_api_key is not None,
            "edgeSecret": bool(s.edge_secrets),
        },
        "access": {"sso": False},
        "proxy": ctx.proxywatch.health(full=full),
        "waitingPage": {"enforced": not ctx.proxywatch.exempt, "standsDownFor": len(ctx.proxywatch.exempt)},
        "edge": {
            "refusedTotal": c.edge_refused,
            "clientIpFallbackTotal": c.edge_client_ip_fallback,
            **({"enforced": bool(s.edge_secrets)} if full else {}),
        },
    }
    payload["turnEmails"] = await _turn_emails(ctx, c)
    payload["warnings"].extend(
        {"variable": "TRUST_PROXY_IPS", "set": None, "effective": None, "message": m} for m in ctx.proxywatch.warnings()
    )
    inline = ctx.attached.inline
    if inline is not None and inline.index:
        payload["inline"] = inline.health(c)
        incidents.extend(f"origin down — {room}" for room in inline.probe.failing())
        # an inline room without ADMIN_HOST or PUBLIC_URL: the console answers only on address literals and localhost
        if full and not s.admin_hosts and not s.public_url:
            payload["configWarnings"] = [
                {
                    "code": "console_host_withheld",
                    "message": "An inline room exists and neither ADMIN_HOST nor PUBLIC_URL is set: the console "
                    "answers only on address literals and localhost (and under /__qm/ on inline hosts). Set "
                    "ADMIN_HOST (or PUBLIC_URL) to the name you run the console on.",
                }
            ]
    live = {str(r["id"]) for r in rooms}
    targets = payload["targets"] = {k: v for k, v in _targets(ctx, full=full).items() if k in live}
    for room_id, result in _failing_targets(targets):
        answer = str(result.get("summary") or "").rpartition(" → ")[2] or "no answer"
        incidents.append(
            f"target {result.get('url')} not answering (room {room_id}): {result.get('method') or 'HEAD'} → {answer}"
        )
    on_fleet = ctx.fleet
    if on_fleet is not None:
        payload["backend"] = fleet_health(on_fleet, full=full)
        policy = on_fleet.connection.store.maxmemory_policy
        if policy is not None and policy != "noeviction":
            incidents.append(
                f"valkey maxmemory-policy is {policy}, not noeviction"
                if full
                else "valkey maxmemory-policy is not noeviction"
            )
        if payload["backend"]["valkey"] == "down":
            incidents.append("valkey is unreachable from this instance")
        if payload["backend"]["recoveringRooms"]:
            names = ", ".join(payload["backend"]["recovering"]) if full else str(payload["backend"]["recoveringRooms"])
            incidents.append(f"rooms being rebuilt from the journal: {names}")
        ahead = on_fleet.recovery.ahead
        if ahead:
            names = ", ".join(sorted(ahead)) if full else f"{len(ahead)} rooms"
            incidents.append(
                f"rooms ahead of the events journal: {names}. Their journal in PostgreSQL holds less than it was "
                "seen holding, most likely because PostgreSQL was restored from a backup under a Valkey that still "
                "holds newer state; they are not rebuilt from the older journal. Start the instances on a new "
                "VALKEY_PREFIX (or flush this prefix) to rebuild every room from the restored journal"
            )
        incidents.extend(on_fleet.gaps.incidents(full=full))
        if not _storage_ok(ctx):
            last = on_fleet.journal.last_error or "unknown error"
            failed = f"storage is degraded: events journal commit failed: {last}"
            incidents.append(failed if full else "storage is degraded")
            if on_fleet.storage.out_of_rotation:
                incidents.append("storage is degraded on this instance only")
    if not full:
        _trim_for_share_link(payload)
    await send_json(send, 200, payload, head=req.method == "HEAD")


def _trim_for_share_link(payload: dict[str, Any]) -> None:
    """What a monitor link may not see of the full report: warnings, hardening, settings, keys, and any error
    text (a PostgreSQL error, an inline origin's connect error), which can name a host or an address."""
    for key in ("warnings", "hardening", "settings", "keys", "blockedReturnUrlsByRoom"):
        payload.pop(key, None)
    storage = {k: v for k, v in payload["storage"].items() if k != "lastError"}
    for part in ("journal", "history"):  # each has a lastError of its own
        if isinstance(storage.get(part), dict):
            storage[part] = {k: v for k, v in storage[part].items() if k != "lastError"}
    payload["storage"] = storage
    payload["counters"] = {k: v for k, v in payload["counters"].items() if k != "refusedOriginChecks"}
    payload["turnEmails"] = {k: v for k, v in payload["turnEmails"].items() if k not in ("smtp", "from")}
    inline = payload.get("inline")
    if isinstance(inline, dict) and isinstance(inline.get("origins"), dict):
        # whether each origin answers, and in which phase it failed: yes; the error, which names it: no
        inline["origins"] = {room: {**probe, "error": None} for room, probe in inline["origins"].items()}


async def local_exposition(ctx: Context) -> bytes:
    """This process's own metrics: the Prometheus text ``/metrics`` answers (``?scope=local`` with WORKERS>1)."""
    rooms = await ctx.store.list_rooms()
    return render_metrics(
        rooms,
        ctx.counters,
        uptime=ctx.uptime(),
        start_time=ctx.started_ms / 1000.0,
        sse_subscribers=ctx.broadcaster.streams,
        shutting_down=ctx.run.shutting_down,
        instance=ctx.settings.instance_id if ctx.settings.store == "valkey" else None,
        spool=await asyncio.to_thread(ctx.journal_maintenance.gauges),
        journal=_journal_figures(ctx),
    )


def _journal_figures(ctx: Context) -> tuple[int, int, dict[str, int]]:
    """(events rolled forward by this instance, seqs voided through it, missing seqs per room: the fleet's view)."""
    fleet = ctx.fleet
    if fleet is None:
        return 0, 0, {}
    gaps = fleet.gaps
    missing = {room: int(gap.get("missing") or 0) for room, gap in gaps.fleet.items()}
    return gaps.rolled_forward_total, gaps.voided_total, missing


#: ``/metrics?scope=``: ``all`` (the default: with WORKERS>1 every worker) or ``local`` (this process only).
METRICS_SCOPES = ("all", "local")


async def metrics(ctx: Context, req: Request, send: Send) -> None:
    scope = req.query.get("scope", "all")
    if scope not in METRICS_SCOPES:
        raise HttpError(400, "bad_request", "scope is all (every worker, the default) or local (this worker only).")
    if ctx.peers is not None and scope == "all":
        body = await peers.merged(ctx.peers, local_exposition(ctx))
    else:
        body = await local_exposition(ctx)
    await send_response(
        send,
        200,
        body,
        [(b"content-type", b"text/plain; version=0.0.4; charset=utf-8"), (b"cache-control", b"no-store")],
        req.method == "HEAD",
    )


def engine_error(err: EngineError) -> HttpError:
    return HttpError(err.status, err.code, err.message, headers=list(err.headers.items()), **err.extra)

"""The admin API and the system surface, described (one entry per route of the table).

Every admin route also answers 401 (no or a wrong credential), 403 (a missing grant; a change made
with the console cookie but no X-QM-CSRF) and 429 (too many failed sign-ins): ``document`` adds those.
"""

from __future__ import annotations

from typing import Any

from queue_manager import entrycode
from queue_manager.engine.logo import LOGO_MAX_BYTES
from queue_manager.routes import preview
from queue_manager.routes.apidoc.components import ROOM_ID
from queue_manager.routes.apidoc.model import CSV, EVENTS, JSON, Answer, Op, err, ok, path, query, ref
from queue_manager.web.asset import LANGUAGES

_OBJ: dict[str, Any] = {"type": "object"}
_ROOM_P = path("room", "The room's id.")
_NO_ROOM = err("No such room.", "no_room")
_FORMAT = query("format", "json (the default) or csv.", {"enum": ["json", "csv"]})
_JSON_OR_CSV = "Rows as JSON, or CSV with format=csv."
_ROOM_CODES = (
    "bad_request",
    "unknown_field",
    "conflicting_field",
    "invalid_field",
    "invalid_room_id",
    "invalid_target_url",
    "invalid_rate",
    "invalid_state",
    "invalid_rules",
    "invalid_opens_at",
    "invalid_origin",
    "invalid_proxy_origin",
    "invalid_on_backend_down",
    "invalid_protection",
    "invalid_auto_activate",
    "invalid_autotune",
    "invalid_queueing",
    "invalid_reject_status",
    "invalid_event",
    "invalid_brand",
    "invalid_color",
    "invalid_help_url",
    "invalid_access_rules",
    "invalid_entry",
    "invalid_lanes",
    "invalid_languages",
    "proxy_origin_private",
)
_INSTANT: dict[str, Any] = {
    "anyOf": [
        {"type": "integer", "minimum": 0, "maximum": 253_402_300_799_999},
        {"type": "string", "format": "date"},
        {"type": "string", "format": "date-time"},
    ]
}
_ENABLED = {"type": "object", "required": ["enabled"], "properties": {"enabled": {"type": "boolean"}}}
_ROOM_OK = ok(
    "Done; the room as it is now.", {"type": "object", "properties": {"ok": {"const": True}, "room": ref("Room")}}
)
_INSTALL_CHECK: dict[str, Any] = {
    "type": "object",
    "properties": {
        "ok": {"type": "boolean"},
        "url": {"type": "string"},
        "origin": {"type": "string"},
        "fetch": _OBJ,
        "tag": {"type": ["object", "null"]},
        "tagAllowed": {"type": "boolean"},
        "tagAllowedBy": {"enum": ["targetUrl", "tagOrigins", "returnOrigins", None]},
        "refusedChecks": {"type": "integer"},
        "returnAllowed": {"type": "boolean"},
        "problems": {"type": "array", "items": {"type": "string"}},
        "notes": {"type": "array", "items": {"type": "string"}},
        "fix": {"type": ["object", "null"]},
    },
}
_STATE_CHANGED = err("The room changed state meanwhile.", "state_changed")
_EVENT_P = path("event", "The event's id.")
_EVENT_CODES = ("bad_request", "invalid_event", "event_overlap")
_EVENT_CONFLICTS = ("event_exists", "too_many_events", "config_changed")
_EVENT_OK: dict[str, Any] = {
    "type": "object",
    "properties": {"ok": {"const": True}, "event": ref("RoomEvent")},
}


_HEALTH: dict[str, Any] = {
    "type": "object",
    "description": "docs/OPERATIONS.md (Health and metrics) names every field. A monitor link sees no "
    "`warnings`, `hardening`, `settings` or `keys`, and no error text (`lastError` under `storage`, an inline "
    "origin's `error`).",
    "properties": {
        "settings": {
            "type": "array",
            "description": "Every setting, in the order they are read: its value in effect and its source.",
            "items": ref("EffectiveSetting"),
        }
    },
}


_SIGNED_OUT: dict[str, Any] = {
    "type": "object",
    "required": ["ok", "closed"],
    "properties": {"ok": {"const": True}, "closed": {"type": "boolean"}},
}


def _rows(description: str) -> Answer:
    return Answer(description, {JSON: _OBJ, CSV: {"type": "string"}})


OPS: dict[tuple[str, str], Op] = {
    ("DELETE", "/api/admin/session"): Op(
        {
            200: ok(
                "`closed: true`: the console session of this cookie ended and its cookie is cleared. "
                "`closed: false`: a key or a monitor link has no console session; nothing changed and "
                "nothing was audited.",
                _SIGNED_OUT,
            )
        }
    ),
    ("GET", "/api/admin/whoami"): Op({200: ok("The caller's name, role and grants.", _OBJ)}),
    ("GET", "/api/admin/health"): Op({200: ok("This instance's health, in full.", _HEALTH)}),
    ("GET", "/metrics"): Op(
        {
            200: ok("Prometheus text exposition.", {"type": "string"}, "text/plain"),
            400: err("scope is all or local.", "bad_request"),
        },
        (query("scope", "all (every worker, the default) or local (this worker).", {"enum": ["all", "local"]}),),
    ),
    ("GET", "/api/admin/security"): Op(
        {
            200: ok(
                "What bot protection has seen (docs/protection.md, The Security panel). Each of `recent` has "
                "`client`, a tag of its address keyed with SECRET; `ip` is null for a monitor link.",
                _OBJ,
            )
        }
    ),
    ("GET", "/api/admin/alerts"): Op(
        {200: ok("What is firing and the last deliveries.", _OBJ), 404: err("Alerts are off here.", "not_found")}
    ),
    ("POST", "/api/admin/alerts"): Op(
        {
            200: ok("The test alert's delivery.", _OBJ),
            404: err("Alerts are off here.", "not_found"),
            409: err("No ALERT_WEBHOOK_URL is set.", "webhook_not_configured"),
        }
    ),
    ("GET", "/api/admin/events"): Op(
        {200: ok("Server-sent events: the rooms' live numbers.", None, EVENTS)},
        description="A browser's EventSource cannot send a header: sign in with a one-time `?ticket=`.",
    ),
    ("POST", "/api/admin/sse-ticket"): Op({200: ok("A ticket valid once, for 30 s.", _OBJ)}),
    ("POST", "/api/admin/shutdown"): Op({200: ok("Stopping.", ref("Ok"))}),
    ("GET", "/api/admin/audit"): Op(
        {200: _rows(_JSON_OR_CSV), 400: err("limit is not a whole number.", "bad_request")},
        (
            query("roomId", "Only this room's rows."),
            query("limit", "At most this many rows (1-10000, 1000 by default).", {"type": "integer"}),
            query("format", "csv for CSV; JSON otherwise."),
        ),
    ),
    ("GET", "/api/openapi.json"): Op(
        {
            200: ok("This document (OpenAPI 3.1), with an ETag; `Cache-Control: no-cache`.", _OBJ),
            304: Answer("Not modified (If-None-Match)."),
        },
        store=False,
    ),
    ("GET", "/api/admin/openapi.json"): Op(
        {
            200: ok(
                "The same document as `/api/openapi.json`, under the admin API's path, where the console's "
                "session cookie is sent: what `/docs/api` links to.",
                _OBJ,
            ),
            304: Answer("Not modified (If-None-Match)."),
        },
        store=False,
    ),
    # -- rooms
    ("GET", "/api/admin/rooms"): Op({200: ok("Every room with its live numbers.", _OBJ)}),
    ("POST", "/api/admin/rooms"): Op(
        {
            200: ok(
                "Changed. `warnings[]` when the save has a consequence to tell: `console_host_withheld` (the console's "
                "host is withheld from the next request on), `console_moved` (the last inline room left the host the "
                "console was used through; `consoleUrl` is PUBLIC_URL, or null).",
                _OBJ,
            ),
            201: ok("Created. `warnings[]` as for a change.", _OBJ),
            400: err("A field is unknown or invalid (`field` names it).", *_ROOM_CODES),
            403: err("Serving a room inline (proxyOrigin) needs the owner role.", "inline_requires_owner"),
        },
        body=ref("RoomWrite"),
    ),
    ("GET", "/api/admin/rooms/{room}"): Op({200: ok("The room.", _OBJ), 404: _NO_ROOM}, (_ROOM_P,)),
    ("DELETE", "/api/admin/rooms/{room}"): Op({200: ok("Deleted.", ref("Ok")), 404: _NO_ROOM}, (_ROOM_P,)),
    ("POST", "/api/admin/rooms/{room}/pause"): Op(
        {200: _ROOM_OK, 404: _NO_ROOM, 409: _STATE_CHANGED}, (_ROOM_P,), body_required=False, body=_OBJ
    ),
    ("POST", "/api/admin/rooms/{room}/resume"): Op(
        {200: _ROOM_OK, 404: _NO_ROOM, 409: _STATE_CHANGED}, (_ROOM_P,), body_required=False, body=_OBJ
    ),
    ("POST", "/api/admin/rooms/{room}/rate"): Op(
        {
            200: _ROOM_OK,
            400: err(
                "Not a rate.",
                "bad_request",
                "unknown_field",
                "nothing_to_change",
                "conflicting_field",
                "invalid_rate",
                "invalid_field",
            ),
            404: _NO_ROOM,
        },
        (_ROOM_P,),
        body={
            "type": "object",
            "properties": {"ratePerMinute": {"type": "number", "minimum": 0}, "rate": {"type": "number", "minimum": 0}},
        },
    ),
    ("POST", "/api/admin/rooms/{room}/schedule"): Op(
        {
            200: _ROOM_OK,
            400: err(
                "Not a schedule.",
                "bad_request",
                "unknown_field",
                "nothing_to_change",
                "invalid_opens_at",
                "invalid_field",
            ),
            404: _NO_ROOM,
        },
        (_ROOM_P,),
        body={
            "type": "object",
            "properties": {
                "opensAt": {"type": ["string", "integer", "null"], "description": "null cancels the drop."},
                "preQueueMaxPerIp": {"type": ["integer", "null"], "minimum": 1},
            },
        },
    ),
    ("POST", "/api/admin/rooms/{room}/logo"): Op(
        {
            200: ok("The logo as kept (checked, or an SVG rebuilt) and the room.", _OBJ),
            400: err("Not a PNG or an SVG this server keeps (`field` names brand.logo).", "bad_logo"),
            404: _NO_ROOM,
            415: err("The Content-Type is not image/png or image/svg+xml.", "bad_logo"),
        },
        (_ROOM_P,),
        body={"type": "string", "contentMediaType": "application/octet-stream"},
        body_media=("image/png", "image/svg+xml"),
        body_max=LOGO_MAX_BYTES,
        description=f"The body is the image itself, at most {LOGO_MAX_BYTES // 1024} KiB (docs/OPERATIONS.md).",
    ),
    ("DELETE", "/api/admin/rooms/{room}/logo"): Op(
        {200: ok("The room, without a logo.", _OBJ), 404: _NO_ROOM}, (_ROOM_P,)
    ),
    ("POST", "/api/admin/rooms/{room}/purge"): Op(
        {200: ok("The line is empty.", _OBJ), 404: _NO_ROOM}, (_ROOM_P,), body_required=False, body=_OBJ
    ),
    ("POST", "/api/admin/rooms/{room}/flush"): Op(
        {
            200: ok(
                "Every pass and live session of the room is released (flushed: the number released); the line "
                "and the room stay.",
                _OBJ,
            ),
            404: _NO_ROOM,
        },
        (_ROOM_P,),
        body_required=False,
        body=_OBJ,
        description="Every admitted visitor (a live session, or a pass not used yet) is sent back: their next "
        "page view finds the ticket ended (reason flushed) and they join the line again at the back. Edge passes "
        "issued until now are refused (revokedBefore on GET /api/passes/revoked). Answers only once the flush "
        "is committed to the journal; retrying is safe.",
    ),
    ("POST", "/api/admin/rooms/{room}/journal/void"): Op(
        {
            200: ok("The seqs are closed with seq.void events; the room is being rebuilt from the journal.", _OBJ),
            400: err("Not 1 to 1,000 seq numbers.", "bad_request"),
            404: err("The journal holds no such room.", "no_room"),
            409: err(
                "A seq is no gap, or could still be committed: the journal holds it, it was never minted, Valkey's "
                "outbox holds it, a spool holds events the journal lacks, journal maintenance is on, or this server "
                "keeps no journal.",
                "not_missing",
                "in_outbox",
                "spool_pending",
                "journal_maintenance",
                "no_journal",
            ),
        },
        (_ROOM_P,),
        body={
            "type": "object",
            "required": ["seqs"],
            "properties": {
                "seqs": {"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 1, "maxItems": 1000}
            },
            "additionalProperties": False,
        },
    ),
    ("POST", "/api/admin/rooms/{room}/eject"): Op(
        {
            200: ok("The visitor is out.", _OBJ),
            400: err("Neither a ticket number nor a Ref.", "bad_request"),
            404: err("No such room or ticket.", "no_room", "no_ticket"),
        },
        (_ROOM_P,),
        body={
            "type": "object",
            "properties": {"ticket": {"type": "integer", "minimum": 1}, "ref": {"type": "string", "maxLength": 16}},
        },
    ),
    ("GET", "/api/admin/rooms/{room}/visitors/{visitor}"): Op(
        {200: ok("The visitor.", _OBJ), 404: err("No such room or ticket.", "no_room", "no_ticket")},
        (_ROOM_P, path("visitor", "A ticket number or a Ref.")),
    ),
    ("POST", "/api/admin/rooms/{room}/install-check"): Op(
        {
            200: ok(
                "What the page and the room say: whether the fetch reached the page (`fetch`: its status, "
                "redirects, and `refused` when a hop named a private address), the qm.js tags on it and whether "
                "one names this room (`tag`, null when the page could not be read), whether the room answers a tag "
                "on the page's `origin` (`tagAllowed`, `tagAllowedBy`), the refusals counted for that origin "
                "(`refusedChecks`), whether an admitted visitor is sent back there (`returnAllowed`), `problems`, "
                "`notes`, and `fix` (`addTagOrigin`) when adding the origin to tagOrigins would unblock the tag.",
                _INSTALL_CHECK,
            ),
            400: err("url is missing or not an absolute http(s) address.", "invalid_page_url", "unknown_field"),
            404: _NO_ROOM,
        },
        (_ROOM_P,),
        body={
            "type": "object",
            "required": ["url"],
            "properties": {"url": {"type": "string", "maxLength": 2048, "description": "A page of the site."}},
            "additionalProperties": False,
        },
        description="The page is fetched by this server with GET (8 s for the whole exchange, at most 5 "
        "redirects, the first megabyte of the body), every hop held to the private-address rule "
        "(PROXY_ALLOW_PRIVATE=1 lifts it). A page that cannot be fetched is still answered 200: the origin "
        "questions do not need it.",
    ),
    ("POST", "/api/admin/rooms/{room}/preview"): Op(
        {
            200: ok(
                "`url`: the page in that state, open without a credential until `expiresAt` (ms since the epoch, "
                "an hour from now); `state` and `lang` as asked.",
                {
                    "type": "object",
                    "required": ["url", "expiresAt", "state", "lang"],
                    "properties": {
                        "url": {"type": "string"},
                        "expiresAt": {"type": "integer"},
                        "state": {"type": "string"},
                        "lang": {"type": "string"},
                    },
                },
            ),
            400: err(
                "state or lang is not one of the listed values, or position or waitSec is not a whole number in "
                "range (`field` names it).",
                "invalid_preview_state",
                "invalid_preview_lang",
                "invalid_preview_value",
                "unknown_field",
            ),
            404: _NO_ROOM,
        },
        (_ROOM_P,),
        body={
            "type": "object",
            "required": ["state"],
            "properties": {
                "state": {
                    "type": "string",
                    "enum": list(preview.STATES),
                    "description": "The state the page shows.",
                },
                "lang": {"type": "string", "enum": list(LANGUAGES), "default": "en"},
                "position": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": preview.POSITION_MAX,
                    "default": preview.DEFAULT_POSITION,
                    "description": "The place shown (waiting, paused); pre-queue: how many have signed up.",
                },
                "waitSec": {
                    "type": "integer",
                    "minimum": 0,
                    "maximum": preview.WAIT_MAX_SEC,
                    "default": preview.DEFAULT_WAIT_SEC,
                    "description": "The wait shown (waiting, paused); pre-queue: the time left until the doors open.",
                },
            },
            "additionalProperties": False,
        },
        description="Signed with the server's SECRET for one hour. Opening the link creates no ticket and "
        "changes none of the room's numbers. Making one is audited as `room.preview`.",
    ),
    ("POST", "/api/admin/rooms/{room}/entry-key"): Op(
        {
            200: ok(
                "The room's new entry key, answered this once: sign invitation tokens with `key` (HS256, its "
                "UTF-8 bytes as the HMAC key) and put `kid` in their header. The key it replaced (`previousKid`, "
                "null for a room's first key) stays valid until `previousValidUntil` (ms since the epoch).",
                {
                    "type": "object",
                    "required": ["kid", "key", "alg", "previousKid", "previousValidUntil"],
                    "properties": {
                        "kid": {"type": "string"},
                        "key": {"type": "string", "description": "256 random bits, base64url; never readable again."},
                        "alg": {"type": "string", "enum": ["HS256"]},
                        "previousKid": {"type": ["string", "null"]},
                        "previousValidUntil": {"type": ["integer", "null"]},
                    },
                },
            ),
            404: _NO_ROOM,
        },
        (_ROOM_P,),
        description="Creates the room's first key, or rotates it: the key it replaces keeps verifying for "
        "ENTRY_KEY_OVERLAP_SEC (24 h by default). The server keeps the key sealed under SECRET only. "
        "Audited as `room.entry_key` (the kids, never the key). docs/INTEGRATION.md, Invitation tokens.",
    ),
    ("GET", "/api/admin/rooms/{room}/codes"): Op(
        {
            200: ok(
                "`issued`: codes the room holds; `uses`: the uses they allow; `redeemed`: uses spent; `refused`: "
                "joins refused by code (code_invalid, code_used_up, code_rate_limited, code_required); `byLane`: "
                "the same per lane (`lane` null: codes without one).",
                {
                    "type": "object",
                    "required": ["roomId", "issued", "uses", "redeemed", "refused", "byLane"],
                    "properties": {
                        "roomId": {"type": "string"},
                        "issued": {"type": "integer"},
                        "uses": {"type": "integer"},
                        "redeemed": {"type": "integer"},
                        "refused": {"type": "object", "additionalProperties": {"type": "integer"}},
                        "byLane": {"type": "array", "items": {"type": "object"}},
                    },
                },
            ),
            404: _NO_ROOM,
        },
        (_ROOM_P,),
    ),
    ("POST", "/api/admin/rooms/{room}/codes"): Op(
        {
            200: ok(
                "JSON: `codes` (answered this once: the server keeps their hashes only), `count`, `lane`, `uses`. "
                "CSV: `stored`, `duplicates` (codes the room held already), `rejectedCount` and the first 100 "
                "`rejected` rows (`line`, `reason`).",
                _OBJ,
            ),
            400: err(
                "count, lane or uses out of range, or the CSV is not UTF-8 text with a `code` column; "
                "`unknown_lane`: the room has no such lane.",
                "invalid_codes",
                "unknown_field",
                "unknown_lane",
            ),
            404: _NO_ROOM,
        },
        (_ROOM_P,),
        body={
            "type": "object",
            "required": ["count"],
            "properties": {
                "count": {"type": "integer", "minimum": 1, "maximum": 100000},
                "lane": {"type": ["string", "null"], "pattern": "^[a-z0-9][a-z0-9-]{0,31}$"},
                "uses": {"type": "integer", "minimum": 1, "maximum": 1000000, "default": 1},
            },
            "additionalProperties": False,
        },
        body_media=("application/json", "text/csv"),
        body_max=entrycode.CSV_BODY_MAX,
        description="Generated codes are 10 characters of Crockford's base32 as `XXXXX-XXXXX`. A CSV upload "
        "(Content-Type: text/csv) has a `code` column (4 to 64 letters, digits, dashes) and optional `lane` and "
        "`uses` (1 by default). Codes are kept as salted SHA-256 hashes. Audited as `room.codes` or "
        "`room.codes_upload`. docs/OPERATIONS.md, Entry codes.",
    ),
    ("DELETE", "/api/admin/rooms/{room}/codes"): Op(
        {
            200: ok("`deleted`: how many codes were removed.", _OBJ),
            404: _NO_ROOM,
        },
        (_ROOM_P,),
        description="Every code of the room, used or not. Audited as `room.codes_delete`.",
    ),
    ("POST", "/api/admin/rooms/{room}/tag-origins"): Op(
        {
            200: ok(
                "The origin was added to tagOrigins (`added`: true), or a tag on it was already answered "
                "(`added`: false); `tagOrigins` as it is now. returnOrigins is never changed.",
                _OBJ,
            ),
            400: err(
                "origin is not one bare http(s) origin, or tagOrigins is full.", "invalid_origin", "unknown_field"
            ),
            404: _NO_ROOM,
        },
        (_ROOM_P,),
        body={
            "type": "object",
            "required": ["origin"],
            "properties": {"origin": {"type": "string", "description": "scheme://host[:port], no wildcard."}},
            "additionalProperties": False,
        },
        description="The install verifier's one-click fix, audited as room.update. A blank tagOrigins (which "
        "means returnOrigins) becomes returnOrigins plus the origin, so nothing answered before stops being "
        "answered.",
    ),
    ("GET", "/api/admin/rooms/{room}/events"): Op(
        {200: ok("The room's scheduled events, what is in force and its own drop.", ref("RoomEvents")), 404: _NO_ROOM},
        (_ROOM_P,),
    ),
    ("POST", "/api/admin/rooms/{room}/events"): Op(
        {
            201: ok("Scheduled; the event as kept.", _EVENT_OK),
            400: err("Not an event, or one that overlaps another or is already over.", *_EVENT_CODES),
            404: _NO_ROOM,
            409: err("The id is taken, five events are not over yet, or the list kept changing.", *_EVENT_CONFLICTS),
        },
        (_ROOM_P,),
        body=ref("RoomEventWrite"),
    ),
    ("GET", "/api/admin/rooms/{room}/events/{event}"): Op(
        {200: ok("The event, with its status.", _EVENT_OK), 404: err("No such room or event.", "no_room", "no_event")},
        (_ROOM_P, _EVENT_P),
    ),
    ("PUT", "/api/admin/rooms/{room}/events/{event}"): Op(
        {
            200: ok("Changed; the event as kept.", _EVENT_OK),
            400: err("Not an event, or one that overlaps another or is already over.", *_EVENT_CODES),
            404: err("No such room or event.", "no_room", "no_event"),
            409: err("The list kept changing.", "config_changed"),
        },
        (_ROOM_P, _EVENT_P),
        body=ref("RoomEventWrite"),
    ),
    ("DELETE", "/api/admin/rooms/{room}/events/{event}"): Op(
        {
            200: ok(
                "Deleted (an event in force ends within a second).",
                {"type": "object", "properties": {"ok": {"const": True}, "deleted": {"type": "string"}}},
            ),
            404: err("No such room or event.", "no_room", "no_event"),
            409: err("The list kept changing.", "config_changed"),
        },
        (_ROOM_P, _EVENT_P),
    ),
    ("GET", "/api/admin/rooms/{room}/rules"): Op({200: ok("The room's URL rules.", _OBJ), 404: _NO_ROOM}, (_ROOM_P,)),
    ("POST", "/api/admin/rooms/{room}/rules/test"): Op(
        {
            200: ok(
                "The URL rule the url matches, if any, and with a described request (address, path, headers, "
                "userAgent, country) the access rule it meets as access: {rule, index, action, crawler, why}.",
                _OBJ,
            ),
            400: err("Neither a url nor a request, or a malformed one.", "bad_request"),
            404: _NO_ROOM,
        },
        (_ROOM_P,),
        body={
            "type": "object",
            "properties": {
                "url": {"type": "string"},
                "address": {"type": "string", "description": "The client's address (IPv4 or IPv6)."},
                "path": {"type": "string"},
                "headers": {"type": "object", "additionalProperties": {"type": "string"}},
                "userAgent": {"type": "string"},
                "country": {"type": "string", "description": "ISO 3166 alpha-2, as the trusted CDN would name it."},
            },
        },
    ),
    ("GET", "/api/admin/series/{room...}"): Op(
        {
            200: _rows("The series as JSON, or CSV with format=csv."),
            400: err("res or format is not one of its values.", "bad_request"),
            404: _NO_ROOM,
        },
        (
            path("room", "The room's id."),
            query("res", "10s (the default) or 1m.", {"enum": ["10s", "1m"]}),
            _FORMAT,
        ),
    ),
    ("GET", "/api/admin/reports"): Op(
        {
            200: _rows(_JSON_OR_CSV),
            400: err("bucket, format, from or to is not one of its forms.", "bad_request"),
            404: _NO_ROOM,
        },
        (
            query("bucket", "hour (the default) or day.", {"enum": ["hour", "day"]}),
            _FORMAT,
            query(
                "from", "YYYY-MM-DD, ISO 8601 or epoch milliseconds (24 h or the retention ago by default).", _INSTANT
            ),
            query("to", "YYYY-MM-DD, ISO 8601 or epoch milliseconds, exclusive (now by default).", _INSTANT),
            query("roomId", "Only this room.", ROOM_ID),
        ),
    ),
    # -- people
    ("GET", "/api/admin/operators"): Op({200: ok("Every operator.", _OBJ)}),
    ("POST", "/api/admin/operators"): Op(
        {
            201: ok("The operator and their key, shown once.", _OBJ),
            400: err("A field is unknown or invalid.", "bad_request", "unknown_field", "invalid_role"),
        },
        body={
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": {"type": "string", "minLength": 1, "maxLength": 80},
                "role": {"enum": ["owner", "operator", "viewer"]},
            },
        },
    ),
    ("DELETE", "/api/admin/operators/{operator...}"): Op(
        {200: ok("Revoked.", _OBJ), 404: err("No such operator.", "no_operator")},
        (path("operator", "The operator's id."), query("purge", "1 or true: forget the record too.")),
    ),
    ("GET", "/api/admin/monitor-links"): Op({200: ok("Every monitor link.", _OBJ)}),
    ("POST", "/api/admin/monitor-links"): Op(
        {201: ok("The link, its token and URL.", _OBJ)},
        body=_OBJ,
        body_required=False,
    ),
    ("POST", "/api/admin/monitor-links/revoke-all"): Op({200: ok("Revoked.", _OBJ)}, body=_OBJ, body_required=False),
    ("POST", "/api/admin/monitor-links/{link}/reveal"): Op(
        {200: ok("The link's token and URL.", _OBJ), 404: err("No live link with that id.", "no_link")},
        (path("link", "The link's id."),),
        body=_OBJ,
        body_required=False,
    ),
    ("DELETE", "/api/admin/monitor-links/{link}"): Op(
        {200: ok("Revoked.", ref("Ok")), 404: err("No live link with that id.", "no_link")},
        (path("link", "The link's id."),),
    ),
    # -- the system surface
    ("GET", "/api/system/maintenance"): Op({200: ok("Both flags and the disk spool.", _OBJ)}),
    ("POST", "/api/system/maintenance"): Op(
        {200: ok("Journal maintenance is as asked.", _OBJ), 400: err("No boolean enabled.", "bad_request")},
        body=_ENABLED,
    ),
    ("GET", "/api/status/buffers"): Op({200: ok("The disk spool in full.", _OBJ)}),
    ("GET", "/api/system/maintenance/pop"): Op({200: ok("Whether admission maintenance is on.", _OBJ)}),
    ("POST", "/api/system/maintenance/pop"): Op(
        {200: ok("Admission maintenance is as asked.", _OBJ), 400: err("No boolean enabled.", "bad_request")},
        body=_ENABLED,
    ),
    ("GET", "/api/system/shared-state"): Op({200: ok("Whether this instance shares state.", _OBJ)}),
    ("POST", "/api/stats/refresh"): Op({200: ok("Recounted.", _OBJ)}, body=_OBJ, body_required=False),
    ("POST", "/internal/api/notify"): Op(
        {200: ok("The room's streams are woken.", _OBJ), 400: err("No queue named.", "bad_request")},
        body={"type": "object", "required": ["queue"], "properties": {"queue": ROOM_ID}},
    ),
    ("GET", "/internal/api/shared-state/stats"): Op({200: ok("The fleet transport.", _OBJ)}),
    ("GET", "/internal/api/inter-instance/stats"): Op({200: ok("The fleet transport.", _OBJ)}),
}

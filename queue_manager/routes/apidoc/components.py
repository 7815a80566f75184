"""The schemas several operations share and the ways a caller signs in (OpenAPI ``components``)."""

from __future__ import annotations

from typing import Any

from queue_manager.engine.languages import LANGUAGES
from queue_manager.http.cookies import CONSOLE

_INT_OR_NULL: dict[str, Any] = {"type": ["integer", "null"]}
_STR_OR_NULL: dict[str, Any] = {"type": ["string", "null"]}

ROOM_ID: dict[str, Any] = {
    "type": "string",
    "pattern": "^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$",
    "description": "A room id: 1-64 letters, digits, '-' and '_', starting with a letter or digit.",
}

ERROR: dict[str, Any] = {
    "type": "object",
    "description": "Every refusal: a message for people, a stable machine `code`, and the fields the code names.",
    "required": ["error", "code"],
    "properties": {
        "error": {"type": "string", "description": "What went wrong, in plain English."},
        "code": {"type": "string", "description": "The stable machine code (see each answer's codes)."},
    },
    "additionalProperties": True,
}

VISITOR_STATUS: dict[str, Any] = {
    "type": "object",
    "description": "A visitor's place in one room: what the waiting page and the snippet show.",
    "required": ["roomId", "state", "roomState", "now"],
    "properties": {
        "roomId": {"type": "string"},
        "state": {
            "type": "string",
            "description": "waiting, passed, admitted, expired, scheduled, bypass, paused, none, …",
        },
        "roomState": {"type": "string", "description": "active, paused, bypass or scheduled."},
        "position": _INT_OR_NULL,
        "ahead": _INT_OR_NULL,
        "ticket": _INT_OR_NULL,
        "ref": _STR_OR_NULL,
        "token": {"type": ["string", "null"], "description": "The signed ticket to present again."},
        "etaSec": _INT_OR_NULL,
        "ratePerMinute": {"type": ["number", "null"]},
        "joinedAt": _INT_OR_NULL,
        "now": {"type": "integer", "description": "The server's clock, epoch milliseconds."},
        "opensAt": _INT_OR_NULL,
        "preQueued": {"type": "boolean"},
        "preCount": _INT_OR_NULL,
        "handle": _STR_OR_NULL,
        "drawCommitment": _STR_OR_NULL,
        "queueing": {
            "type": "string",
            "enum": ["fifo", "random", "passthrough", "reject"],
            "description": "The room's queueing method. reject: the room is closed (show its closed page).",
        },
        "waiting": {
            "type": ["integer", "null"],
            "description": "A random line only (instead of position): how many people are in line.",
        },
        "etaLowSec": {
            "type": ["integer", "null"],
            "description": "A random line only (instead of etaSec): the 25th percentile of the wait, seconds.",
        },
        "etaHighSec": {
            "type": ["integer", "null"],
            "description": "A random line only (instead of etaSec): the 75th percentile of the wait, seconds.",
        },
        "nextMinuteOdds": {
            "type": ["integer", "null"],
            "description": "A random line only: the chance (whole percent) of being let through within a minute.",
        },
        "passExpiresAt": _INT_OR_NULL,
        "redirectUrl": {"type": ["string", "null"], "description": "Where to send the visitor now, if anywhere."},
        "reason": _STR_OR_NULL,
        "lane": {
            "type": "string",
            "description": "Only in a room with lanes: the visitor's lane. position, ahead and etaSec are within it.",
        },
    },
}

_RANGE: dict[str, Any] = {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2}

GATED_WAIT: dict[str, Any] = {
    "type": "object",
    "description": (
        "The wait, as a gated address answers it instead of the waiting page to a request that is not shown as a "
        "page: one asking for JSON (`Accept` preferring `application/json` to `text/html`, `X-Requested-With: "
        "XMLHttpRequest` or `X-QM-Accept: json`) or any other request that is not a navigation. Answered by an "
        "inline room's host, the edge gate Worker and the Node connector, 503 with `X-QM-Queued: 1`, `Retry-After` "
        "(= `retryAfterSec`), `Cache-Control: no-store` and `Vary: Accept, X-Requested-With, X-QM-Accept`; the door "
        "check returns it as `wait` when asked with `wait=1`."
    ),
    "required": ["roomId", "state", "position", "etaSec", "retryAfterSec", "waitingUrl", "code", "reason"],
    "properties": {
        "roomId": {"type": "string"},
        "state": {
            "enum": [
                "waiting",
                "scheduled",
                "passed",
                "paused",
                "not_in_line",
                "backend_down",
                "rate_limited",
                "full",
                "closed",
            ],
            "description": (
                "waiting: a place in line; scheduled: in the pre-queue before the room opens; passed: the turn "
                "came but the site is at capacity this moment; paused: the room is paused, the place kept; "
                "not_in_line: no place (none yet, or it lapsed), take one at waitingUrl; backend_down: the queue "
                "cannot reach its storage and the room fails closed; rate_limited: the queue shed this check; full: "
                "the line is full (the state the join's queue_full refusal names)."
            ),
        },
        "position": {"type": ["integer", "null"], "description": "The place in line (1 is next), while waiting."},
        "etaSec": {
            "type": ["integer", "null"],
            "description": "Seconds until the turn at the room's rate; null when the line does not move.",
        },
        "positionRange": {
            **_RANGE,
            "description": "Only for a room whose queueing shows no position: the places the visitor may hold.",
        },
        "etaRange": {
            **_RANGE,
            "description": "Only for a room whose queueing shows no position: the wait's range in seconds.",
        },
        "roomState": {"type": ["string", "null"], "description": "active, paused, bypass or scheduled."},
        "opensAt": {"type": ["integer", "null"], "description": "While scheduled: when the room opens (epoch ms)."},
        "retryAfterSec": {"type": "integer", "minimum": 1, "description": "When to ask again (the Retry-After)."},
        "waitingUrl": {
            "type": ["string", "null"],
            "description": "The room's waiting page, returning to the address asked (`qm_return`).",
        },
        "waitUrl": {"type": "string", "description": "The connectors' earlier name for waitingUrl."},
        "reason": {"type": "string", "description": "Why the door said no: no_ticket, waiting, paused, …"},
        "code": {"enum": ["queued", "storage_unavailable"]},
        "error": {"type": "string"},
        "reload": {"const": True},
    },
}

DOOR_CHECK: dict[str, Any] = {
    "type": "object",
    "description": "The door check's verdict: admit, or where the visitor waits.",
    "required": ["admit", "roomId"],
    "properties": {
        "admit": {"type": "boolean"},
        "roomId": {"type": "string"},
        "state": {"type": "string"},
        "doorKey": _STR_OR_NULL,
        "sessionExpiresAt": _INT_OR_NULL,
        "reason": {
            "type": ["string", "null"],
            "description": "Why not: waiting, paused, at_capacity, no_ticket, … and room_closed for a closed "
            "(queueing reject) room, whose waitUrl is its closed page. access_bypass on an admit an access "
            "rule decided (accessRule names it).",
        },
        "accessRule": {"type": "string", "description": "The id of the access rule that let this visitor through."},
        "waitUrl": {"type": "string"},
        "edgePass": {"type": "string"},
        "edgePassExpiresAt": {"type": "integer"},
        "edgePassRefused": {"type": "string"},
        "wait": {**{"$ref": "#/components/schemas/GatedWait"}, "description": "With wait=1, on a refusal."},
    },
}

ACCESS_RULE: dict[str, Any] = {
    "type": "object",
    "description": "One access rule (docs/OPERATIONS.md, Access rules).",
    "required": ["action", "match"],
    "properties": {
        "id": {"type": "string", "pattern": "^[A-Za-z0-9_.-]{1,40}$"},
        "action": {"enum": ["bypass", "queue", "block"]},
        "note": {"type": "string", "maxLength": 200},
        "match": {
            "type": "object",
            "properties": {
                "cidrs": {"type": "array", "items": {"type": "string"}, "maxItems": 100},
                "header": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string"},
                        "value": {"type": "string", "writeOnly": True, "minLength": 8, "maxLength": 256},
                        "set": {"type": "boolean", "readOnly": True},
                    },
                },
                "pathPrefix": {"type": "string"},
                "extensions": {"type": "array", "items": {"type": "string"}},
                "countries": {"type": "array", "items": {"type": "string", "pattern": "^[A-Za-z]{2}$"}},
                "verifiedCrawlers": {
                    "type": "array",
                    "items": {"enum": ["googlebot", "bingbot", "applebot", "yandex", "baiduspider"]},
                },
            },
        },
        "matchCount": {"type": "integer", "readOnly": True},
        "lastMatchAt": {"type": ["integer", "null"], "readOnly": True},
    },
}

NOTIFY: dict[str, Any] = {
    "type": "object",
    "description": "Whether this ticket's holder is e-mailed when the turn comes (the address masked).",
    "required": ["roomId", "signedUp"],
    "properties": {
        "roomId": {"type": "string"},
        "ticket": _INT_OR_NULL,
        "signedUp": {"type": "boolean"},
        "address": _STR_OR_NULL,
        "lang": _STR_OR_NULL,
        "sent": {"type": "boolean"},
        "removed": {"type": "boolean"},
    },
}

ROOM: dict[str, Any] = {
    "type": "object",
    "description": "A room's settings with its live figures (docs/OPERATIONS.md lists every field).",
    "required": ["id"],
    "properties": {
        "id": {"type": "string"},
        "name": {"type": ["string", "null"]},
        "targetUrl": {"type": "string"},
        "state": {"type": "string"},
        "ratePerMinute": {"type": ["number", "null"]},
    },
    "additionalProperties": True,
}

ROOM_WRITE: dict[str, Any] = {
    "type": "object",
    "description": "A room's settings to create or change: `id` and any of the room fields (unknown ones refused).",
    "required": ["id"],
    "properties": {
        "id": ROOM_ID,
        "name": {"type": "string", "maxLength": 200},
        "targetUrl": {"type": "string", "format": "uri"},
        "state": {"enum": ["active", "paused", "bypass"]},
        "ratePerMinute": {"type": "number", "minimum": 0},
        "rate": {"type": "number", "minimum": 0, "description": "An alias of ratePerMinute."},
        "maxConcurrent": {"type": ["integer", "null"], "minimum": 0},
        "passedTtlSec": {"type": "integer", "minimum": 1},
        "sessionTtlSec": {"type": "integer", "minimum": 1},
        "sessionMaxSec": {"type": ["integer", "null"], "minimum": 1},
        "presenceSec": {"type": ["integer", "null"], "minimum": 1},
        "queueMaxPerIp": {"type": ["integer", "null"], "minimum": 1},
        "preQueueMaxPerIp": {"type": ["integer", "null"], "minimum": 1},
        "preQueueShards": {
            "type": "integer",
            "minimum": 1,
            "maximum": 16,
            "description": "Valkey: the hash slots a scheduled drop's pre-queue takes its sign-ups in.",
        },
        "maxWaiting": {"type": ["integer", "null"], "minimum": 1, "description": "People the line may hold."},
        "maxWaitSec": {
            "type": ["integer", "null"],
            "minimum": 1,
            "description": "The estimated wait past which the line is full.",
        },
        "queueing": {
            "type": "string",
            "enum": ["fifo", "random", "passthrough", "reject"],
            "description": "How visitors are let in: fifo (in order of arrival), random (drawn at each release), "
            "passthrough (no line: everyone let through at once, counted), reject (closed: nobody joins).",
        },
        "rejectStatus": {
            "type": "integer",
            "enum": [200, 503],
            "description": "The HTTP status of a closed (reject) room's page; 503 carries Retry-After.",
        },
        "entry": {
            "type": "string",
            "enum": ["open", "token", "code"],
            "description": "Who may take a new place: anyone (open), the holder of an invitation token signed "
            "with the room's entry key (token), or of a code the operator issued, or a token (code).",
        },
        "opensAt": {"type": ["string", "integer", "null"], "description": "ISO 8601 or epoch milliseconds."},
        "returnOrigins": {"type": ["array", "null"], "items": {"type": "string"}},
        "tagOrigins": {"type": ["array", "null"], "items": {"type": "string"}},
        "rules": {"type": "array", "items": {"type": "object"}},
        "accessRules": {
            "type": "array",
            "maxItems": 50,
            "description": "Access rules, first match wins: {id?, action: bypass|queue|block, match: {cidrs, "
            "header: {name, value}, pathPrefix, extensions, countries, verifiedCrawlers}, note?}. A read "
            "shows a header's value as set: true, and each rule's matchCount and lastMatchAt.",
            "items": {"$ref": "#/components/schemas/AccessRule"},
        },
        "proxyOrigin": {"type": ["string", "null"], "description": "Serve the room inline (owner only)."},
        "onBackendDown": {"enum": ["open", "closed"]},
        "protection": {"type": ["object", "null"]},
        "autoActivate": {"type": ["object", "null"]},
        "autotune": {"type": ["object", "null"]},
        "events": {"type": "array", "maxItems": 5, "items": {"$ref": "#/components/schemas/RoomEventWrite"}},
        "languages": {
            "type": ["array", "null"],
            "maxItems": len(LANGUAGES),
            "uniqueItems": True,
            "description": "The languages the room's visitor pages offer, in the picker's order; the first is the "
            "page's language when none of the visitor's matches. [] or null: all of them, English first.",
            "items": {"enum": list(LANGUAGES)},
        },
        "lanes": {
            "type": ["array", "null"],
            "maxItems": 8,
            "description": "Priority lanes: all by priority (1-100, higher released first) or all by share "
            "(percent, adding up to 100). The first lane is the default lane. [] or null: one line.",
            "items": {
                "type": "object",
                "required": ["id"],
                "additionalProperties": False,
                "properties": {
                    "id": {"type": "string", "pattern": "^[a-z0-9][a-z0-9-]{0,31}$"},
                    "priority": {"type": "integer", "minimum": 1, "maximum": 100},
                    "share": {"type": "integer", "minimum": 1, "maximum": 100},
                },
            },
        },
        "laneStats": {
            "type": "array",
            "readOnly": True,
            "description": "A room read with lanes: each lane's waiting, sharePct or priority, etaSec (its last "
            "place's wait estimate) and releasedLastMinute. Ignored when sent back.",
            "items": {"type": "object"},
        },
    },
}

_EVENT_INSTANT: dict[str, Any] = {"type": ["string", "integer"], "description": "ISO 8601 or epoch milliseconds."}
_EVENT_FIELDS: dict[str, Any] = {
    "id": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"},
    "name": {"type": ["string", "null"], "maxLength": 120},
    "startsAt": _EVENT_INSTANT,
    "endsAt": _EVENT_INSTANT,
    "preQueueAt": {**_EVENT_INSTANT, "type": ["string", "integer", "null"]},
    "shuffle": {"type": "boolean", "description": "Draw the pre-queue at the start (needs preQueueAt)."},
    "ratePerMinute": {"type": "integer", "minimum": 0},
    "maxConcurrent": {"type": ["integer", "null"], "minimum": 1},
    "sessionTtlSec": {"type": "integer", "minimum": 10},
    "sessionMaxSec": {"type": ["integer", "null"], "minimum": 10},
    "maxWaiting": {"type": ["integer", "null"], "minimum": 1},
    "maxWaitSec": {"type": ["integer", "null"], "minimum": 1},
    "queueing": {"enum": ["fifo", "random", "passthrough", "reject"]},
    "rejectStatus": {"enum": [200, 503]},
    "message": {"type": ["object", "null"], "description": "The page message by language, as brand.message."},
}
ROOM_EVENT_WRITE: dict[str, Any] = {
    "type": "object",
    "description": "A scheduled event: its span and the room fields it overrides (docs/OPERATIONS.md, Scheduled "
    "events). The id comes from the path on PUT and is made by the server on POST when left out.",
    "required": ["startsAt", "endsAt"],
    "properties": _EVENT_FIELDS,
    "additionalProperties": False,
}
ROOM_EVENT: dict[str, Any] = {
    "type": "object",
    "required": ["id", "startsAt", "endsAt", "status"],
    "properties": {
        **_EVENT_FIELDS,
        "startsAt": {"type": "string", "format": "date-time"},
        "endsAt": {"type": "string", "format": "date-time"},
        "preQueueAt": {"type": ["string", "null"], "format": "date-time"},
        "status": {"enum": ["upcoming", "prequeue", "live", "ended"]},
    },
}
ROOM_EVENTS: dict[str, Any] = {
    "type": "object",
    "required": ["roomId", "events", "eventInForce", "drop", "max", "now"],
    "properties": {
        "roomId": {"type": "string"},
        "events": {"type": "array", "items": {"$ref": "#/components/schemas/RoomEvent"}},
        "eventInForce": {
            "type": ["object", "null"],
            "description": "The event the room follows now: id, phase (prequeue or live), since (epoch ms), "
            "applied (the fields it set) and restore (what they replaced).",
        },
        "drop": {"type": ["object", "null"], "description": "The room's own opensAt drop: opensAt, preQueue."},
        "max": {"type": "integer"},
        "now": {"type": "integer"},
    },
}

EFFECTIVE_SETTING: dict[str, Any] = {
    "type": "object",
    "description": "One setting as it is in effect (docs/configuration.md); a secret never shows its value.",
    "required": ["name", "value", "source", "sensitive", "set", "group"],
    "properties": {
        "name": {"type": "string", "description": "The environment variable."},
        "value": {
            "type": ["boolean", "integer", "string", "array", "null"],
            "items": {"type": "string"},
            "description": "The value in effect; null for a secret, and when nothing is in effect.",
        },
        "source": {
            "enum": ["environment", "default", "derived"],
            "description": "environment: the value set is in effect; default: the variable is unset (or set but "
            "not usable, a warning says why) and the default is in effect; derived: likewise, with a default "
            "computed from other settings.",
        },
        "sensitive": {"type": "boolean", "description": "A secret: only `set` is shown."},
        "set": {"type": "boolean", "description": "Whether the environment holds a value for it."},
        "group": {
            "type": "string",
            "description": "The part of the configuration it belongs to (`Core and storage`, `Trust and access`, "
            "`Keys and signing`, `Several instances`, `Rate limits`, `Connections, inline proxy and shutdown`, "
            "`Bot protection`, `Operations jobs`).",
        },
    },
}

OK: dict[str, Any] = {
    "type": "object",
    "required": ["ok"],
    "properties": {"ok": {"const": True}},
    "additionalProperties": True,
}

SCHEMAS: dict[str, Any] = {
    "Error": ERROR,
    "VisitorStatus": VISITOR_STATUS,
    "DoorCheck": DOOR_CHECK,
    "AccessRule": ACCESS_RULE,
    "GatedWait": GATED_WAIT,
    "Notify": NOTIFY,
    "Room": ROOM,
    "RoomWrite": ROOM_WRITE,
    "RoomEvent": ROOM_EVENT,
    "RoomEventWrite": ROOM_EVENT_WRITE,
    "RoomEvents": ROOM_EVENTS,
    "EffectiveSetting": EFFECTIVE_SETTING,
    "Ok": OK,
}

#: The ways a caller signs in. An admin route takes a key, a console session or (read-only routes)
#: a monitor link; the admin event stream also a one-time ticket; the door check a Public API key.
SECURITY_SCHEMES: dict[str, Any] = {
    "adminKey": {
        "type": "http",
        "scheme": "bearer",
        "description": "`Authorization: Bearer <ADMIN_KEY>` (the owner) or an operator's key (`qmo_…`, its role).",
    },
    "monitorLink": {
        "type": "http",
        "scheme": "bearer",
        "description": "A monitor link's token as `Authorization: Bearer <token>`: the read grant only.",
    },
    "consoleSession": {
        "type": "apiKey",
        "in": "cookie",
        "name": CONSOLE,
        "description": (
            "The console's session cookie, from `POST /api/admin/session`. Its path is `/api/admin` (`/__qm/api/admin` "
            "on an inline host), so a browser sends it to the routes under that path only; another client may "
            "present it anywhere this scheme is listed."
        ),
    },
    "csrfHeader": {
        "type": "apiKey",
        "in": "header",
        "name": "X-QM-CSRF",
        "description": "Sent beside the console cookie on every change (any value; a same-origin request).",
    },
    "streamTicket": {
        "type": "apiKey",
        "in": "query",
        "name": "ticket",
        "description": "A one-time ticket from `POST /api/admin/sse-ticket`, for `GET /api/admin/events` only.",
    },
    "publicApiKey": {
        "type": "http",
        "scheme": "bearer",
        "description": "`Authorization: Bearer <PUBLIC_API_KEY>`: a connector vouching for a visitor.",
    },
}

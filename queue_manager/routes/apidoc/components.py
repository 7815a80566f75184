"""The schemas several operations share and the ways a caller signs in (OpenAPI ``components``)."""

from __future__ import annotations

from typing import Any

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
            "(queueing reject) room, whose waitUrl is its closed page.",
        },
        "waitUrl": {"type": "string"},
        "edgePass": {"type": "string"},
        "edgePassExpiresAt": {"type": "integer"},
        "edgePassRefused": {"type": "string"},
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
        "opensAt": {"type": ["string", "integer", "null"], "description": "ISO 8601 or epoch milliseconds."},
        "returnOrigins": {"type": ["array", "null"], "items": {"type": "string"}},
        "tagOrigins": {"type": ["array", "null"], "items": {"type": "string"}},
        "rules": {"type": "array", "items": {"type": "object"}},
        "proxyOrigin": {"type": ["string", "null"], "description": "Serve the room inline (owner only)."},
        "onBackendDown": {"enum": ["open", "closed"]},
        "protection": {"type": ["object", "null"]},
        "autoActivate": {"type": ["object", "null"]},
        "autotune": {"type": ["object", "null"]},
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
    "Notify": NOTIFY,
    "Room": ROOM,
    "RoomWrite": ROOM_WRITE,
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

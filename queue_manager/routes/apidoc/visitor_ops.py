"""The visitor API, the public files and the pages, described (one entry per route of the table)."""

from __future__ import annotations

from typing import Any

from queue_manager.access.protection import BLOCKED_CODE
from queue_manager.invitation import REFUSAL_CODES as ENTRY_TOKEN_CODES
from queue_manager.routes.apidoc.components import ROOM_ID
from queue_manager.routes.apidoc.model import (
    EVENTS,
    HTML,
    JSON,
    TEXT,
    Answer,
    Op,
    empty,
    err,
    ok,
    page,
    path,
    query,
    ref,
)

_ROOM_Q = query("roomId", "The room.", ROOM_ID, required=True)
_TOKEN_Q = query("token", "The visitor's signed ticket (else the room's `qm_<roomId>` cookie).")
_NO_ROOM = err("No such room, or no roomId given that could name one.", "no_room")
_BAD = err("A required parameter is missing or malformed.", "bad_request")
_PAGE_LIMIT = Answer(
    "Too many page loads from this address: a small page that reloads itself after Retry-After "
    "(plain text to a script).",
    {HTML: {"type": "string"}, TEXT: {"type": "string"}},
)
_FILE = {"type": "string", "contentMediaType": "application/octet-stream"}

_JOIN_BODY: dict[str, Any] = {
    "type": "object",
    "required": ["roomId"],
    "properties": {
        "roomId": ROOM_ID,
        "token": {
            "type": "string",
            "description": "A ticket held already (join again keeps its place), or an invitation token (a JWS: "
            "three dot-separated base64url parts, the first `eyJ…`; the X-QM-Enqueue-Token header carries one too).",
        },
        "returnUrl": {"type": "string", "maxLength": 4096, "description": "Where to go back to once admitted."},
        "code": {
            "type": "string",
            "description": "An entry code, for a room whose entry is `code` (case, dashes and spaces do not matter).",
        },
    },
}

_NOTIFY_BODY: dict[str, Any] = {
    "type": "object",
    "required": ["roomId", "email"],
    "properties": {
        "roomId": ROOM_ID,
        "email": {"type": "string", "format": "email", "maxLength": 254},
        "token": {"type": "string"},
        "lang": {"type": "string", "description": "The e-mail's language (en, th)."},
    },
}

_REVOKE_BODY: dict[str, Any] = {
    "type": "object",
    "required": ["roomId"],
    "properties": {
        "roomId": ROOM_ID,
        "doorKey": {
            "type": "string",
            "maxLength": 64,
            "description": "The visitor's door key (the `qm_dk_<roomId>` cookie).",
        },
        "token": {
            "type": "string",
            "description": "With doorKey: the visitor's signed ticket (the `qm_<roomId>` cookie).",
        },
        "pass": {"type": "string", "description": "Instead of doorKey: the visitor's edge pass (`qmp_<roomId>`)."},
    },
}

_NOTIFY_OFF = "This server offers no turn e-mails (EMAIL_NOTIFY off)"

OPS: dict[tuple[str, str], Op] = {
    ("POST", "/api/join"): Op(
        {
            200: ok("The visitor's place; sets the `qm_<roomId>` ticket cookie.", ref("VisitorStatus")),
            400: err("The body is not a JSON object with a roomId, or a field is malformed.", "bad_request"),
            403: err(
                "Bot protection refused this request a place in line (the bot code), the room is closed "
                "(queueing reject: room_closed; nobody joins, show the room's page), one of the room's access "
                "rules blocks this request (access_blocked), or the room's entry refused a new place: no "
                "invitation token (token_required), a token malformed, tampered with or signed with a key the "
                "room does not have (token_invalid), expired (token_expired), used already (token_used), for "
                "another room (token_wrong_room) or bound to another address (token_ip_mismatch); no code given "
                "to a code room (code_required), a code the room does not hold (code_invalid) or one whose uses "
                "are spent (code_used_up). A place already held is never refused by the room's entry.",
                BLOCKED_CODE,
                "room_closed",
                "access_blocked",
                *ENTRY_TOKEN_CODES,
                "code_required",
                "code_invalid",
                "code_used_up",
            ),
            404: _NO_ROOM,
            429: err(
                "Too many places in this line are held from this address (queueMaxPerIp), or too many codes were "
                "tried from this address or in this room (code_rate_limited, with Retry-After).",
                "queue_identity_limit",
                "code_rate_limited",
            ),
            503: err(
                "The line is full (maxWaiting, maxWaitSec): no new place for now; Retry-After says when to try "
                "again. A place already held is never refused this way.",
                "queue_full",
            ),
        },
        body=_JOIN_BODY,
        limited=True,
        description="An invitation token may come as the X-QM-Enqueue-Token header (a server-side join) or "
        "as a JWS in `token`. docs/INTEGRATION.md, Invitation tokens.",
    ),
    ("GET", "/api/status"): Op(
        {200: ok("The visitor's place, ETA and state.", ref("VisitorStatus")), 400: _BAD, 404: _NO_ROOM},
        (_ROOM_Q, _TOKEN_Q),
    ),
    ("GET", "/events"): Op(
        {
            200: ok("Server-sent events, each a VisitorStatus as JSON, until the visitor leaves.", None, EVENTS),
            400: _BAD,
            404: _NO_ROOM,
            429: err("This server, or this address, holds as many live streams as it may.", "too_many_streams"),
        },
        (_ROOM_Q, _TOKEN_Q),
    ),
    ("GET", "/api/rooms/{room}/draw"): Op(
        {
            200: ok("The drop's commitment; after the draw, its seed and proof.", {"type": "object"}),
            404: err("No such room, or it has no drop draw.", "no_room", "no_draw"),
        },
        (path("room", "The room."),),
        limited=True,
    ),
    ("GET", "/api/check"): Op(
        {
            200: ok("Admit or not, and where the visitor waits.", ref("DoorCheck")),
            400: err(
                "A vouched check without ip, url not an absolute http(s) address, or wait not 0 or 1.",
                "bad_request",
                "invalid_url",
            ),
            401: err("A wrong Public API key, or a key sent in the URL.", "unauthorized", "credential_in_query"),
            403: err(
                "The calling page's origin is not in the room's tagOrigins, or one of the room's access rules "
                "blocks this request (access_blocked).",
                "origin_not_allowed",
                "access_blocked",
            ),
            404: _NO_ROOM,
            503: err("The store is unreachable and the room fails closed.", "storage_unavailable"),
        },
        (
            _ROOM_Q,
            query("url", "The page the visitor asked for (absolute http(s))."),
            _TOKEN_Q,
            query("dk", "The door key of an admitted visit (else its cookie)."),
            query("ip", "A vouched check: the visitor's address."),
            query("agent", "A vouched check: the visitor's User-Agent."),
            query(
                "wait",
                "1: a refusal also describes the wait (`wait`, a GatedWait), for a request that asked for JSON.",
                {"enum": ["0", "1"]},
            ),
        ),
        limited=True,
        description="Open to anyone; a connector vouching for a visitor sends its Public API key as a Bearer.",
    ),
    ("GET", "/api/gate"): Op(
        {
            200: Answer("Let the request through; copy the Set-Cookie (or X-QM-Set-Cookie-N) headers onto the answer."),
            302: Answer("deny=302: send the visitor to Location (the waiting page, or the address without qm_token)."),
            400: err(
                "The original request is not described (X-Original-URI or X-Forwarded-Uri, X-Forwarded-Host, "
                "X-Forwarded-Proto, X-Real-IP or X-Forwarded-For), or deny is not 401 or 302.",
                "bad_request",
                "invalid_url",
            ),
            401: Answer(
                "deny=401: send the visitor to Location (also X-QM-Redirect); or, as JSON, no key, a wrong key or a "
                "key in the URL.",
                {JSON: ref("Error")},
                ("unauthorized", "credential_in_query"),
            ),
            403: Answer("An access rule blocks it, or (deny=401) the store is down and the room fails closed."),
            404: _NO_ROOM,
            503: Answer("deny=302: the store is unreachable and the room fails closed (a short page).", {TEXT: None}),
        },
        (
            _ROOM_Q,
            query(
                "deny",
                "How a refusal is told: 401 (nginx, HAProxy; the default) or 302 (Caddy, Traefik).",
                {"enum": ["401", "302"]},
            ),
        ),
        limited=True,
        store=False,
        description=(
            "Called by a reverse proxy for each request of a visitor's, with the original request in "
            "X-Original-URI/X-Forwarded-Uri, X-Original-Method/X-Forwarded-Method, X-Forwarded-Host, "
            "X-Forwarded-Proto, the visitor's Cookie and address (X-Real-IP or X-Forwarded-For), and the "
            "Public API key as a Bearer. X-QM-Decision names the answer."
        ),
    ),
    ("GET", "/api/verify"): Op(
        {
            200: ok("The key works here (and the room, when named, may be checked).", {"type": "object"}),
            401: Answer(
                "No key, a wrong key, or a key in the URL (`ok: false` with `code` and `problems`).",
                {JSON: {"type": "object"}},
                ("unauthorized", "credential_in_query"),
            ),
        },
        (
            query("roomId", "A room to check the key against.", ROOM_ID),
            query(
                "origin",
                "With roomId: an origin to judge. The room block then says whether a tag there is answered "
                "(`originAllowed`) and whether the waiting room sends visitors back to it (`returnAllowed`); "
                "a connector asks this about its own origin when it starts.",
            ),
        ),
    ),
    ("POST", "/api/sessions/revoke"): Op(
        {
            200: ok(
                "`revoked`: true when a live session ended; false when none held the credential (a no-op).",
                {
                    "type": "object",
                    "required": ["roomId", "revoked"],
                    "properties": {"roomId": ROOM_ID, "revoked": {"type": "boolean"}},
                },
            ),
            400: err("The body is malformed: roomId with doorKey (and token) or with pass.", "bad_request"),
            401: err("No key, a wrong key, or a key sent in the URL.", "unauthorized", "credential_in_query"),
            403: err(
                "A forged pass or ticket token, or one of another room.",
                "invalid_pass",
                "invalid_token",
            ),
            404: _NO_ROOM,
        },
        body=_REVOKE_BODY,
        description="The customer's backend ends a visitor's session, with its Public API key as a Bearer.",
    ),
    ("POST", "/api/notify"): Op(
        {
            200: ok("The address is kept; it is shown masked.", ref("Notify")),
            400: err("The body is malformed or the address is not one.", "bad_request", "invalid_email"),
            404: err(f"No such room, or {_NOTIFY_OFF}.", "no_room", "email_notify_off"),
            409: err("The ticket is not waiting in line.", "not_in_line"),
        },
        body=_NOTIFY_BODY,
        limited=True,
    ),
    ("GET", "/api/notify"): Op(
        {
            200: ok("Whether an address is kept (masked).", ref("Notify")),
            400: _BAD,
            404: err(_NOTIFY_OFF, "email_notify_off", "no_room"),
        },
        (_ROOM_Q, _TOKEN_Q),
    ),
    ("DELETE", "/api/notify"): Op(
        {
            200: ok("The address is forgotten (no error when none was kept).", ref("Notify")),
            400: _BAD,
            404: err(_NOTIFY_OFF, "email_notify_off", "no_room"),
        },
        (_ROOM_Q, _TOKEN_Q),
        limited=True,
    ),
    ("GET", "/.well-known/jwks.json"): Op(
        {
            200: ok("A JWK Set (empty with PASS_SIGNING=hmac).", {"type": "object"}, "application/jwk-set+json"),
            304: empty("Not modified (If-None-Match)."),
        },
        store=False,
    ),
    ("GET", "/api/passes/revoked"): Op(
        {
            200: ok(
                "The room's revoked edge passes not yet expired, and a flush's cutoff still in force (revokedBefore).",
                {"type": "object"},
            ),
            400: _BAD,
            404: _NO_ROOM,
        },
        (_ROOM_Q,),
    ),
    ("GET", "/qm.js"): Op({200: page("The snippet.", "text/javascript"), 304: empty("Not modified.")}, store=False),
    ("GET", "/connectors/manifest.json"): Op({200: ok("Every connector.", {"type": "object"})}, store=False),
    ("GET", "/connectors/wordpress/update.json"): Op(
        {200: ok("The plugin's update feed.", {"type": "object"}), 404: err("No plugin is shipped.", "not_found")},
        store=False,
    ),
    ("GET", "/connectors/{file...}"): Op(
        {
            200: Answer(
                "A connector's manifest entry (JSON), README or file.",
                {JSON: {"type": "object"}, "application/octet-stream": _FILE},
            ),
            304: empty("Not modified."),
            404: err("No such connector or file.", "not_found"),
        },
        (path("file", "`<name>` or `<name>/<file>`."),),
        store=False,
    ),
    ("GET", "/healthz"): Op(
        {200: ok("Live and ready.", {"type": "object"}), 503: ok("Live but not ready.", {"type": "object"})},
        store=False,
    ),
    ("GET", "/api/version"): Op({200: ok("Version and health.", {"type": "object"})}, store=False),
    # -- pages
    ("GET", "/"): Op({200: page("The console."), 304: empty("Not modified."), 429: _PAGE_LIMIT}, store=False),
    ("GET", "/index.html"): Op({200: page("The console."), 304: empty("Not modified."), 429: _PAGE_LIMIT}, store=False),
    ("GET", "/progress"): Op(
        {302: empty("The console (Location: `/`, or `/__qm/` on an inline host)."), 429: _PAGE_LIMIT}, store=False
    ),
    ("GET", "/public/admin.html"): Op(
        {302: empty("The console (Location: `/`, or `/__qm/` on an inline host)."), 429: _PAGE_LIMIT}, store=False
    ),
    ("GET", "/w/{room...}"): Op(
        {
            200: page("The waiting page."),
            304: empty("Not modified."),
            404: page("No such room (a page)."),
            429: _PAGE_LIMIT,
        },
        (path("room", "The room.", {"type": "string"}), query("qm_return", "Where to go back to once admitted.")),
    ),
    ("GET", "/assets/{file...}"): Op(
        {
            200: page("The asset.", "application/octet-stream"),
            304: empty("Not modified."),
            404: Answer("No such asset.", {TEXT: {"type": "string"}, JSON: ref("Error")}, ("not_found",)),
        },
        (path("file", "The content-hashed name.", {"type": "string"}),),
        store=False,
    ),
    ("GET", "/fonts/{file...}"): Op(
        {
            200: page("The font (woff2) or its licence.", "font/woff2"),
            304: empty("Not modified."),
            404: page("No such font.", TEXT),
        },
        (path("file", "The font's name.", {"type": "string"}),),
        store=False,
    ),
    ("GET", "/preview/{token}"): Op(
        {
            200: page(
                "The room's waiting page in the link's state and language, marked Preview, in the room's brand "
                "(the origin-down and offline states: that outage page). It asks the server for nothing: no "
                "ticket, no place, nothing counted."
            ),
            403: err(
                "Not a preview link this server made (tampered, another secret, another kind of token).",
                "invalid_preview_link",
            ),
            404: err("The link's room no longer exists.", "no_room"),
            410: err("The link is over an hour old: make a new one.", "preview_expired"),
            429: _PAGE_LIMIT,
        },
        (path("token", "The signed preview, as POST /api/admin/rooms/{room}/preview made it.", {"type": "string"}),),
        description="Open to anyone holding the link, for an hour from when it was made.",
    ),
    ("GET", "/offline.html"): Op({200: page("The outage page.")}, store=False),
    ("GET", "/origin-down.html"): Op({200: page("The outage page.")}, store=False),
    ("GET", "/docs"): Op({200: page("The guides' index."), 304: empty("Not modified."), 429: _PAGE_LIMIT}, store=False),
    ("GET", "/docs/{page...}"): Op(
        {
            200: page("The guide."),
            301: empty("The guide's canonical address (Location)."),
            304: empty("Not modified."),
            404: page("No such guide (a page)."),
            429: _PAGE_LIMIT,
        },
        (path("page", "`<guide>`, `th/<guide>`, `api`.", {"type": "string"}),),
        store=False,
    ),
    # -- the console's sign-in
    ("POST", "/api/admin/session"): Op(
        {
            200: ok("Signed in: the `qm_console` cookie is set.", {"type": "object"}),
            400: err("No key in the body.", "bad_request"),
            401: err("That key is not valid here.", "unauthorized"),
            403: err(
                "Without X-QM-CSRF, from another origin, or a monitor link.", "csrf_required", "insufficient_role"
            ),
            429: err(
                "Too many failed sign-ins from this address, or a viewer key's 10 sign-ins this minute "
                "(see Retry-After).",
                "too_many_auth_failures",
                "rate_limited",
            ),
        },
        body={"type": "object", "required": ["key"], "properties": {"key": {"type": "string", "minLength": 1}}},
        description="Needs `X-QM-CSRF` and a same-origin request; the key is the ADMIN_KEY or an operator's. "
        "A key without the write grant (a viewer's) opens at most 10 sessions a minute on an instance.",
    ),
}

"""Every route the server answers, in one table (see :mod:`queue_manager.routes.router` for the rules).

A new route is one line here: its method, path pattern, handler, the grants it needs (admin routes)
and a one-line summary. Handlers never check the method or the caller's grants themselves. ``v`` makes a
visitor path (answers on every host, the customer's included), ``o`` a route open to anyone but meant for
the people running the queue, ``a`` an admin route; only ``v`` routes remain on a host that ADMIN_HOST
leaves to the visitors.

The table is described by :data:`API` (``/api/openapi.json`` and ``/docs/api``), which is handed the table
itself: the description's routes are in the table they describe.
"""

from __future__ import annotations

from queue_manager.context import Context
from queue_manager.http.wire import HttpError, Request, Send
from queue_manager.routes import edge_passes as passkeys
from queue_manager.routes import health, system
from queue_manager.routes.admin import alerts as admin_alerts
from queue_manager.routes.admin import entry as admin_entry
from queue_manager.routes.admin import install_check
from queue_manager.routes.admin import preview as admin_preview
from queue_manager.routes.admin import reports as admin_console
from queue_manager.routes.admin import room_events as admin_events
from queue_manager.routes.admin import rooms as admin_rooms
from queue_manager.routes.admin import server_state as admin
from queue_manager.routes.admin import stream as admin_stream
from queue_manager.routes.admin import team as admin_team
from queue_manager.routes.apidoc.serve import Description
from queue_manager.routes.pages import connectors, waiting
from queue_manager.routes.pages import console as pages_console
from queue_manager.routes.pages import docs as pages_docs
from queue_manager.routes.pages import preview as pages_preview
from queue_manager.routes.pages import visitor as pages_visitor
from queue_manager.routes.router import Route, Router
from queue_manager.routes.router import admin as a
from queue_manager.routes.router import operator as o
from queue_manager.routes.router import visitor as v
from queue_manager.routes.visitor import api as visitor
from queue_manager.routes.visitor import draw, forward_auth, notify, revoke


async def _asset(ctx: Context, req: Request, send: Send) -> None:
    """A content-hashed asset: the waiting page's or the console's."""
    if req.path.startswith("/assets/waiting-"):
        await waiting.waiting_asset(ctx, req, send)
    elif not await pages_console.console_asset(ctx, req, send):
        raise HttpError(404, "not_found", "No such route.")


ROOM = "/api/admin/rooms/{room}"
EVENT = ROOM + "/events/{event}"
MAINT = "/api/system/maintenance"
POP = f"{MAINT}/pop"
LINK = "/api/admin/monitor-links"

#: the description of :data:`TABLE`, built from it on first use (the table names its handlers, so it is
#: handed over as a function that returns it once defined)
API = Description(lambda: TABLE)
GUIDES = pages_docs.Guides(API)

TABLE: tuple[Route, ...] = (
    # -- the visitor API
    v("POST", "/api/join", visitor.join, "Join a room's line; answers the visitor's place and token."),
    v("GET", "/api/status", visitor.status, "A visitor's place, ETA and state."),
    v("GET", "/events", visitor.events, "A visitor's live place as server-sent events.", head=False),
    v("GET", "/api/rooms/{room}/draw", draw.room_draw, "A scheduled drop's commitment; after the draw, its proof."),
    v("GET", "/api/check", visitor.check, "The door check: may this visitor in now?"),
    v("GET", "/api/gate", forward_auth.gate_check, "A reverse proxy's forward-auth door check (Public API key)."),
    v("GET", "/api/verify", visitor.verify, "Verify a pass token server-to-server."),
    v("POST", "/api/sessions/revoke", revoke.revoke, "The site ends a visitor's session (Public API key)."),
    v("POST", "/api/notify", notify.sign_up, "E-mail this ticket's holder when the turn comes (EMAIL_NOTIFY)."),
    v("GET", "/api/notify", notify.read, "Whether this ticket has a turn e-mail address kept."),
    v("DELETE", "/api/notify", notify.cancel, "Forget this ticket's turn e-mail address."),
    v("GET", "/.well-known/jwks.json", passkeys.jwks, "The edge passes' public keys (a JWK Set)."),
    v("GET", "/api/passes/revoked", passkeys.revoked, "A room's revoked edge passes not yet expired."),
    v("GET", "/qm.js", visitor.qm_js, "The snippet a site includes beside its pages."),
    o("GET", "/connectors/manifest.json", connectors.manifest_json, "Every connector: version, downloads, SHA-256."),
    o("GET", "/connectors/wordpress/update.json", connectors.wordpress_update, "The WordPress plugin's update feed."),
    o("GET", "/connectors/{file...}", connectors.download, "A connector's download, README or manifest entry."),
    v("GET", "/healthz", health.healthz, "Liveness and readiness of this instance."),
    v("GET", "/api/version", health.version, "Version and health of this instance."),
    # -- pages
    o("GET", "/", pages_console.console_page, "The operator console."),
    o("GET", "/index.html", pages_console.console_page, "The operator console."),
    o("GET", "/progress", pages_console.to_console, "The console's former address: a redirect to the console."),
    o("GET", "/public/admin.html", pages_console.to_console, "The console's former address: a redirect to it."),
    v("GET", "/w/{room...}", pages_visitor.waiting_page, "A room's waiting page."),
    v("GET", "/assets/{file...}", _asset, "A content-hashed page asset (immutable)."),
    v("GET", "/fonts/{file...}", waiting.font_file, "A font of the waiting page."),
    v("GET", "/offline.html", pages_visitor.offline_page, "The self-contained page shown while the queue is away."),
    v("GET", "/origin-down.html", pages_visitor.origin_down_page, "The page shown while an inline app is down."),
    o("GET", "/preview/{token}", pages_preview.preview_page, "A room's page in one state, by a signed preview link."),
    o("GET", "/docs", GUIDES.docs_page, "The guides, in the reader's language."),
    o("GET", "/docs/{page...}", GUIDES.docs_page, "One guide page."),
    # -- the admin API: the console's sign-in and this server
    o("POST", "/api/admin/session", admin.session_open, "Trade a key once for a console session cookie."),
    a("DELETE", "/api/admin/session", (), admin_team.session_close, "Sign the console out."),
    a("GET", "/api/admin/whoami", ("read",), admin_team.whoami, "Who the caller is and what they may do."),
    a("GET", "/api/admin/health", ("read",), admin.admin_health, "This instance's health, in full."),
    a("GET", "/metrics", ("read",), admin.metrics, "Prometheus metrics of this instance (WORKERS>1: of every worker)."),
    a("GET", "/api/admin/security", ("read",), admin.security, "What bot protection has seen."),
    a("GET", "/api/admin/alerts", ("read",), admin_alerts.alerts_get, "What is firing and the last deliveries."),
    a("POST", "/api/admin/alerts", ("write",), admin_alerts.alerts_test, "Send a test alert to the webhook."),
    a(
        "GET",
        "/api/admin/events",
        ("read",),
        admin_stream.events,
        "Live room numbers as server-sent events.",
        head=False,
        ticket=True,
    ),
    a("POST", "/api/admin/sse-ticket", ("read",), admin_team.sse_ticket, "A one-time ticket for the event stream."),
    a("POST", "/api/admin/shutdown", ("owner",), admin_team.shutdown, "Stop this instance gracefully."),
    a("GET", "/api/admin/audit", ("team",), admin_team.audit, "The audit log (JSON or CSV)."),
    a("GET", "/api/openapi.json", ("read",), API.openapi_json, "This API described (OpenAPI 3.1)."),
    a(
        "GET",
        "/api/admin/openapi.json",
        ("read",),
        API.openapi_json,
        "This API described (OpenAPI 3.1), where the console's session reaches.",
    ),
    # -- rooms
    a("GET", "/api/admin/rooms", ("read",), admin_rooms.rooms_list, "Every room with its live numbers."),
    a("POST", "/api/admin/rooms", ("write",), admin_rooms.rooms_upsert, "Create or change a room."),
    a("GET", ROOM, ("read",), admin_rooms.room_get, "One room with its live numbers."),
    a("DELETE", ROOM, ("owner",), admin_rooms.room_delete, "Delete a room and its line."),
    a("POST", ROOM + "/pause", ("write",), admin_rooms.room_pause, "Stop letting visitors in."),
    a("POST", ROOM + "/resume", ("write",), admin_rooms.room_resume, "Let visitors in again."),
    a("POST", ROOM + "/rate", ("write",), admin_rooms.room_rate, "Set the outflow rate."),
    a("POST", ROOM + "/logo", ("write",), admin_rooms.room_logo_put, "Upload the room's logo (PNG or SVG)."),
    a("DELETE", ROOM + "/logo", ("write",), admin_rooms.room_logo_delete, "Remove the room's logo."),
    a("POST", ROOM + "/schedule", ("write",), admin_rooms.room_schedule, "Schedule the room's opening or draw."),
    a("POST", ROOM + "/purge", ("write",), admin_rooms.room_purge, "Empty the line."),
    a("POST", ROOM + "/flush", ("write",), admin_rooms.room_flush, "Release every pass and session at once."),
    a("POST", ROOM + "/eject", ("write", "team"), admin_rooms.room_eject, "Remove one visitor."),
    a(
        "POST",
        ROOM + "/journal/void",
        ("owner",),
        admin_rooms.room_journal_void,
        "Close journal seqs nobody can recover, then rebuild the room.",
    ),
    a("GET", ROOM + "/visitors/{visitor}", ("team",), admin_rooms.room_visitor, "One visitor, by ticket or Ref."),
    a(
        "POST",
        ROOM + "/install-check",
        ("write", "team"),
        install_check.install_check,
        "Fetch a page of the site: is the room's tag on it, and is its origin answered?",
    ),
    a(
        "POST",
        ROOM + "/preview",
        ("write", "team"),
        admin_preview.preview_link,
        "A signed link to the room's page forced into one state (an hour, no ticket).",
    ),
    a(
        "POST",
        ROOM + "/entry-key",
        ("write",),
        admin_entry.entry_key,
        "Create or rotate the room's invitation key; the key is answered once.",
    ),
    a("GET", ROOM + "/codes", ("read",), admin_entry.codes_read, "The room's entry codes counted."),
    a(
        "POST",
        ROOM + "/codes",
        ("write",),
        admin_entry.codes_create,
        "Generate entry codes (answered once) or upload them as CSV.",
    ),
    a("DELETE", ROOM + "/codes", ("write",), admin_entry.codes_delete, "Remove every entry code of the room."),
    a("POST", ROOM + "/tag-origins", ("write", "team"), install_check.add_tag_origin, "Add one origin to tagOrigins."),
    a("GET", ROOM + "/events", ("read",), admin_events.events_list, "The room's scheduled events."),
    a("POST", ROOM + "/events", ("write",), admin_events.event_create, "Schedule an event in the room."),
    a("GET", EVENT, ("read",), admin_events.event_get, "One scheduled event."),
    a("PUT", EVENT, ("write",), admin_events.event_put, "Change a scheduled event."),
    a("DELETE", EVENT, ("write",), admin_events.event_delete, "Delete a scheduled event (one in force ends)."),
    a("GET", ROOM + "/rules", ("team",), admin_rooms.room_rules, "The room's URL rules."),
    a("POST", ROOM + "/rules/test", ("team",), admin_rooms.room_rules_test, "Which rule a URL matches."),
    a("GET", "/api/admin/series/{room...}", ("read",), admin_console.series, "A room's chart series (JSON or CSV)."),
    a("GET", "/api/admin/reports", ("read",), admin_console.reports, "Hourly or daily rows per room."),
    # -- people
    a("GET", "/api/admin/operators", ("owner",), admin_team.operators_list, "Every operator."),
    a("POST", "/api/admin/operators", ("owner",), admin_team.operator_create, "Add an operator; their key once."),
    a("DELETE", "/api/admin/operators/{operator...}", ("owner",), admin_team.operator_delete, "Revoke an operator."),
    a("GET", LINK, ("write",), admin_team.links_list, "Every monitor link."),
    a("POST", LINK, ("write",), admin_team.link_mint, "Mint a read-only monitor link."),
    a("POST", LINK + "/revoke-all", ("write",), admin_team.links_revoke_all, "Revoke every monitor link."),
    a("POST", LINK + "/{link}/reveal", ("write",), admin_team.link_reveal, "Show a live link's URL again."),
    a("DELETE", LINK + "/{link}", ("write",), admin_team.link_revoke, "Revoke one monitor link."),
    # -- the system surface (the owner role only; /api/... is also /api/v1/...)
    a("GET", MAINT, ("owner",), system.maintenance_get, "Journal maintenance: both flags and the disk spool."),
    a("POST", MAINT, ("owner",), system.maintenance_set, "Turn journal maintenance on or off, fleet-wide."),
    a("GET", "/api/status/buffers", ("owner",), system.buffers, "This instance's disk spool in full."),
    a("GET", POP, ("owner",), system.pop_get, "Whether admission maintenance is on."),
    a("POST", POP, ("owner",), system.pop_set, "Turn admission maintenance on or off, fleet-wide."),
    a("GET", "/api/system/shared-state", ("owner",), system.shared_state, "Whether this instance shares state."),
    a("POST", "/api/stats/refresh", ("owner",), system.stats_refresh, "Recount the rooms; fold the open hour."),
    a("POST", "/internal/api/notify", ("owner",), system.notify, "Wake a room's live streams, fleet-wide."),
    a("GET", "/internal/api/shared-state/stats", ("owner",), system.transport_stats, "The fleet transport."),
    a("GET", "/internal/api/inter-instance/stats", ("owner",), system.transport_stats, "The fleet transport."),
)

ROUTER = Router(TABLE)

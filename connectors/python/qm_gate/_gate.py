"""The gate's decisions, the same for ASGI and WSGI: what to ask the queue, and what its answer means.

Per request: a static subresource skips the check; a valid edge pass is admitted here; anything else is a
vouched door check (``GET {queue_url}/api/check?roomId=&url=&ip=&agent=`` with ``Authorization: Bearer
<key>``). A pass continues to the app; the queue sends a navigation to the waiting room (302) and answers
anything else 503 + ``X-QM-Queued`` with the gated wait in JSON; a queue that cannot answer fails open (the
app answers, marked ``X-QM-Failover: <reason>``); an access rule's refusal is a 403.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from qm_gate import _rules
from qm_gate._fetch import Fetched, Unanswered, fetch
from qm_gate._passes import EdgePasses
from qm_gate._rules import Visit

VERSION = "__QM_CONNECTOR_VERSION__"
DEFAULT_TIMEOUT = 2.0
DEFAULT_REVOKED_REFRESH = 5.0
RETURN_CHECK_ORIGINS_MAX = 32  # origins asked about per gate: the Host header is the visitor's to choose
RETURN_CHECK_RETRY = 60.0  # a start-up question the queue could not answer is asked again after this
BLOCKED_HTML = (
    b'<!doctype html><html lang="en"><meta charset="utf-8"><meta name="robots" content="noindex">'
    b"<title>Access not allowed</title><h1>Access not allowed</h1><p>This site does not accept requests "
    b"like yours here. If you think this is a mistake, contact the site's owner.</p>"
)
log = logging.getLogger("qm_gate")
Headers = list[tuple[str, str]]


@dataclass(frozen=True, slots=True)
class Continue:
    """On to the app, with these response headers added (Set-Cookie lines, X-QM-Failover)."""

    headers: Headers = field(default_factory=list)
    strip_token: bool = False  # the query's invitation is taken out before the app sees it


@dataclass(frozen=True, slots=True)
class Answer:
    """The gate answers itself: the waiting room, the queued JSON, a refusal."""

    status: int
    headers: Headers
    body: bytes = b""


@dataclass(frozen=True, slots=True)
class Check:
    """The door check to make: the queue's answer goes to :meth:`Gate.conclude`."""

    url: str
    headers: dict[str, str]
    clean: str  # the visitor's URL without qm_token
    invite: str | None
    query_token: str | None


Outcome = Continue | Answer


class Gate:
    """One room's gate (the options of QueueGateASGI and QueueGateWSGI); thread-safe."""

    def __init__(
        self,
        *,
        queue_url: str,
        room: str,
        key: str,
        timeout: float = DEFAULT_TIMEOUT,
        trust_proxy: int | bool = 0,
        on_fail_open: Callable[[str, str], object] | None = None,
        revoked_refresh: float = DEFAULT_REVOKED_REFRESH,
    ) -> None:
        self.queue_url = (queue_url or "").rstrip("/")
        self.room = room or ""
        self.key = key or ""
        self.timeout = timeout if timeout > 0 else DEFAULT_TIMEOUT
        self.trust_proxy = 1 if trust_proxy is True else max(int(trust_proxy or 0), 0)
        self.on_fail_open = on_fail_open
        self.configured = bool(self.queue_url and self.room and self.key)
        self.agent = {"User-Agent": f"qm-python-connector/{VERSION}", "X-QM-Connector": f"python/{VERSION}"}
        self.passes = EdgePasses(self.queue_url, self.room, self.timeout, revoked_refresh, self.agent)
        #: what the gate did: passes admitted here, checks asked of the queue, local refusals by reason, blocks
        self.stats: dict[str, Any] = {"local": 0, "checks": 0, "refused": {}, "blocked": 0}
        self._return_checks: dict[str, float | bool] = {}
        self._warned: set[str] = set()
        self._lock = threading.Lock()

    def _warn_once(self, what: str, message: str) -> None:
        if what not in self._warned:
            self._warned.add(what)
            log.warning(message)

    # ---- the request

    def begin(self, visit: Visit) -> Outcome | Check:
        """What this request needs: on to the app, the gate's own answer, or a door check."""
        if not self.configured:
            self._warn_once(
                "unconfigured",
                "[qm] the Queue Manager gate is not configured (queue_url, room and key are all needed): "
                "requests go to the app unqueued",
            )
            return Continue()
        if _rules.skips_gate(visit.method, visit.path, visit.header("sec-fetch-dest")):
            return Continue()
        asked = _rules.visitor_url(visit, self.trust_proxy)
        self._check_return_origin(asked)
        given, clean = _rules.hand_off(asked)
        invite = given if _rules.is_invitation(given) else None
        query_token = None if invite else given
        cookies = visit.cookies
        edge_pass = cookies.get(f"qmp_{self.room}")
        if edge_pass and not query_token:
            why = self.passes.refusal(edge_pass, cookies.get(f"qm_dk_{self.room}"))
            if why is None:
                with self._lock:
                    self.stats["local"] += 1
                return self._inside(visit, [], clean) if invite else Continue()
            with self._lock:
                self.stats["refused"][why] = self.stats["refused"].get(why, 0) + 1
        with self._lock:
            self.stats["checks"] += 1
        params = {
            "roomId": self.room,
            "url": clean,
            "ip": _rules.client_ip(visit, self.trust_proxy),
            "agent": (visit.header("user-agent") or "")[:512],
        }
        if query_token:
            params["qm_token"] = query_token
        if not _rules.is_navigation(visit):
            params["wait"] = "1"  # answered in JSON: the queue describes the wait
        headers = {"Authorization": f"Bearer {self.key}", "Accept": "application/json", **self.agent}
        names = (f"qm_{self.room}", f"qm_dk_{self.room}", f"qms_{self.room}", f"qmp_{self.room}")
        forward = [f"{n}={cookies[n]}" for n in names if cookies.get(n)]
        if forward:
            headers["Cookie"] = "; ".join(forward)
        return Check(f"{self.queue_url}/api/check?{urlencode(params)}", headers, clean, invite, query_token)

    def ask(self, check: Check) -> Fetched | Unanswered:
        """The door check, made (blocking: the ASGI gate runs it in a worker thread)."""
        try:
            return fetch(check.url, check.headers, self.timeout)
        except Unanswered as err:
            return err

    def conclude(self, visit: Visit, check: Check, answer: Fetched | Unanswered) -> Outcome:
        """The queue's answer as the gate's outcome."""
        if isinstance(answer, Unanswered):
            return self._fail_open(answer.reason)
        payload: Any = None
        if answer.status in (200, 403):
            try:
                payload = json.loads(answer.body)
            except ValueError:
                payload = None
        if answer.status == 429:
            self._warn_once(
                "rate_limited",
                f"[qm] {self.room}: the queue answered 429 (CHECK_LIMIT_PER_MIN spent): "
                "visitors go to the waiting room, not the app",
            )
            wait_url = f"{self.queue_url}/w/{quote(self.room, safe='')}?qm_return={quote(check.clean, safe='')}"
            return self._queued(visit, _rules.with_invite(wait_url, check.invite), "rate_limited", None)
        if answer.status == 403 and isinstance(payload, dict) and payload.get("code") == "access_blocked":
            return self._blocked(visit)
        if not 200 <= answer.status <= 299:
            return self._fail_open(f"http-{answer.status}")
        if not isinstance(payload, dict):
            return self._fail_open("invalid-response")
        if payload.get("admit") is True:
            if isinstance(payload.get("edgePass"), str):
                self.passes.watch()
            relay = [("Set-Cookie", line) for line in answer.set_cookies()]
            token = check.query_token if check.query_token and _rules.TOKEN_SHAPE.match(check.query_token) else None
            if token and payload.get("state") == "admitted" and visit.method == "GET" and _rules.is_navigation(visit):
                # the waiting page's hand-off: keep the pass in a cookie, not in the app's URLs and logs
                relay.append(("Set-Cookie", _rules.pass_cookie(self.room, token, check.clean.startswith("https:"))))
                return self._see_other(check.clean, relay)
            if check.invite:
                return self._inside(visit, relay, check.clean)
            return Continue(relay)
        waiting = payload.get("waitUrl")
        if (
            payload.get("admit") is False
            and isinstance(waiting, str)
            and waiting.lower().startswith(("http://", "https://"))
        ):
            reason = payload.get("reason") if isinstance(payload.get("reason"), str) else "waiting"
            return self._queued(visit, _rules.with_invite(waiting, check.invite), str(reason), payload.get("wait"))
        return self._fail_open("invalid-response")

    # ---- the outcomes

    def _see_other(self, clean: str, relay: Headers) -> Answer:
        headers = [("Location", _rules.path_of(clean)), ("Cache-Control", "no-store"), ("Content-Length", "0")]
        return Answer(303, headers + relay)

    def _inside(self, visit: Visit, relay: Headers, clean: str) -> Outcome:
        """A visitor inside already who followed an invitation: a page goes on to its address without it."""
        if visit.method == "GET" and _rules.is_navigation(visit):
            return self._see_other(clean, relay)
        return Continue(relay, strip_token=True)

    def _fail_open(self, reason: str) -> Continue:
        if self.on_fail_open is not None:
            try:
                self.on_fail_open(reason, self.room)
            except Exception:  # a broken callback never turns a fail-open into an outage
                log.exception("[qm] the on_fail_open callback failed")
        return Continue([("X-QM-Failover", reason)])

    def _queued(self, visit: Visit, wait_url: str, reason: str, wait: object) -> Answer:
        common = [("Cache-Control", "no-store"), ("Vary", _rules.VARY)]
        if _rules.is_navigation(visit):
            return Answer(302, [*common, ("Location", wait_url), ("Content-Length", "0")])
        body = _rules.gated_wait(wait, wait_url, self.room, reason)
        retry = json.loads(body)["retryAfterSec"]
        headers = [
            *common,
            ("Content-Type", "application/json"),
            ("X-QM-Queued", "1"),
            ("Retry-After", str(retry)),
            ("Access-Control-Expose-Headers", _rules.EXPOSE),
            ("Content-Length", str(len(body))),
        ]
        return Answer(503, headers, b"" if visit.method == "HEAD" else body)

    def _blocked(self, visit: Visit) -> Answer:
        """One of the room's access rules refuses this request: never the app, never a fail-open."""
        with self._lock:
            self.stats["blocked"] += 1
        common = [("Cache-Control", "no-store"), ("Vary", "Accept")]
        if _rules.is_navigation(visit):
            return Answer(403, [*common, ("Content-Type", "text/html; charset=utf-8")], BLOCKED_HTML)
        body = json.dumps(
            {
                "error": "This room's access rules do not allow this request.",
                "code": "access_blocked",
                "roomId": self.room,
            }
        ).encode()
        return Answer(403, [*common, ("Content-Type", "application/json")], body)

    # ---- may the waiting room send visitors back here?

    def _check_return_origin(self, asked: str) -> None:
        """Once per origin, in the background: warn when the room's targetUrl and returnOrigins leave it out."""
        parts = urlsplit(asked)
        origin = f"{parts.scheme}://{parts.netloc}"
        with self._lock:
            seen = self._return_checks.get(origin)
            if seen is True or (isinstance(seen, float) and time.monotonic() < seen):
                return
            if seen is None and len(self._return_checks) >= RETURN_CHECK_ORIGINS_MAX:
                return
            self._return_checks[origin] = True
        threading.Thread(target=self._verify_origin, args=(origin,), name="qm-gate-verify", daemon=True).start()

    def _verify_origin(self, origin: str) -> None:
        url = f"{self.queue_url}/api/verify?{urlencode({'roomId': self.room, 'origin': origin})}"
        headers = {"Authorization": f"Bearer {self.key}", "Accept": "application/json", **self.agent}
        room: Any = None
        try:
            answer = fetch(url, headers, self.timeout)
            if answer.status == 200:
                body = json.loads(answer.body)
                room = body.get("room") if isinstance(body, dict) else None
        except (Unanswered, ValueError):
            room = None
        if not isinstance(room, dict):
            with self._lock:
                self._return_checks[origin] = time.monotonic() + RETURN_CHECK_RETRY
            return
        if room.get("exists") is True and room.get("returnAllowed") is False:
            target = room.get("targetUrl")
            log.warning(
                "[qm] %s: the queue does not send visitors back to %s: the room's targetUrl (%s) and returnOrigins "
                "do not cover it, so everyone the waiting room admits lands on %s instead of this app. Add %s to "
                "the room's returnOrigins, or make it the targetUrl.",
                self.room, origin, target, target, origin,
            )  # fmt: skip

    # ---- ending a session

    def revoke_request(self, cookies: dict[str, str]) -> tuple[str, dict[str, str], bytes] | None:
        """The ``POST /api/sessions/revoke`` that ends this visitor's session, or None when there is none."""
        if not self.configured:
            return None
        door_key, token = cookies.get(f"qm_dk_{self.room}"), cookies.get(f"qm_{self.room}")
        edge_pass = cookies.get(f"qmp_{self.room}")
        body: dict[str, str]
        if door_key and _rules.TOKEN_SHAPE.match(door_key):
            body = {"roomId": self.room, "doorKey": door_key}
            if token and _rules.TOKEN_SHAPE.match(token):
                body["token"] = token
        elif edge_pass and _rules.TOKEN_SHAPE.match(edge_pass):
            body = {"roomId": self.room, "pass": edge_pass}
        else:
            return None
        if edge_pass:
            self.passes.forget(edge_pass)
        headers = {
            "Authorization": f"Bearer {self.key}",
            "Accept": "application/json",
            "Content-Type": "application/json",
            **self.agent,
        }
        return f"{self.queue_url}/api/sessions/revoke", headers, json.dumps(body).encode()

    def revoke(self, cookies: dict[str, str]) -> bool:
        """End the session (blocking); True when a live session ended. Never raises."""
        request = self.revoke_request(cookies)
        if request is None:
            return False
        url, headers, data = request
        try:
            answer = fetch(url, headers, self.timeout, method="POST", data=data)
        except Unanswered as err:
            log.warning("[qm] %s: could not end a session at the queue: %s", self.room, err.reason)
            return False
        try:
            payload = json.loads(answer.body)
        except ValueError:
            payload = None
        if answer.status != 200:
            code = payload.get("code") if isinstance(payload, dict) else None
            log.warning("[qm] %s: the queue refused to end a session (%s %s)", self.room, answer.status, code)
            return False
        return isinstance(payload, dict) and payload.get("revoked") is True

    def close(self) -> None:
        """Stop refreshing the revocation list (its thread never keeps the process alive anyway)."""
        self.passes.close()

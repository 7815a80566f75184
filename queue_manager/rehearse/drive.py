"""``qm rehearse``: a synthetic surge driven against a running server over its public API.

Each synthetic visitor does what a browser on the waiting page and a connector do: ``POST /api/join``
(with a ``qms_<room>`` cookie of its own, so its place is bound to it), then either polls
``GET /api/status`` every ``poll_every`` seconds or holds ``GET /events`` open; once its page shows
the pass it asks the door (``GET /api/check``, as a connector would) and, admitted, fetches the
protected site (``target``) when one is named. A no-show joins and never comes back. Meanwhile the
server's health is sampled (``/api/admin/health``, ``/healthz`` without an admin key), and the room's
own counters are read before and after, so the report can set the server's count beside ours.

One process drives thousands of visitors: one keep-alive connection pool for the requests (visitors
wait their turn for a connection, never for a timer), one connection per open stream.
"""

from __future__ import annotations

import asyncio
import random
import secrets
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from queue_manager.rehearse.client import Answer, Pool, WireError
from queue_manager.rehearse.ramp import Ramp

UA = "Mozilla/5.0 (X11; Linux x86_64) qm-rehearse"
BROWSER_HEADERS = {
    "User-Agent": UA,
    "Accept": "application/json, text/plain, */*",
    "Accept-Language": "en-GB,en;q=0.9",
    "Accept-Encoding": "gzip, deflate",
    "Sec-Fetch-Site": "same-origin",
    "Sec-Fetch-Mode": "cors",
    "Sec-Fetch-Dest": "empty",
}


class RehearseError(Exception):
    """The rehearsal cannot start (no such room, the admin key refused, the server unreachable)."""


@dataclass(frozen=True, slots=True)
class Plan:
    server: str
    room: str
    ramp: Ramp
    visitors: int
    admin_key: str | None = None
    no_show: float = 0.0
    stream: float = 0.0
    poll_every: float = 5.0
    stay: float = 0.0
    target: str | None = None
    duration: float | None = None
    connections: int = 200
    health_every: float = 5.0
    forwarded_for: bool = False
    seed: int | None = None
    share: tuple[int, int] = (0, 1)  # (i, n): this process drives the visitors k with k % n == i
    start_at: float | None = None  # the wall-clock instant (time.time()) every process starts the curve at


@dataclass(slots=True)
class Tally:
    """What the run has seen so far (read by the progress display while it runs)."""

    start: float = field(default_factory=time.monotonic)
    arrived: int = 0
    joined: list[float] = field(default_factory=list)  # seconds from the start each join was answered
    join_latency: list[float] = field(default_factory=list)  # seconds from sending each join to its answer
    join_failed: int = 0
    no_shows: int = 0
    passes: list[float] = field(default_factory=list)  # when each visitor's page first showed its pass
    waits: list[float] = field(default_factory=list)
    eta_pairs: list[tuple[float, float]] = field(default_factory=list)
    admitted: list[float] = field(default_factory=list)
    bounced: int = 0
    expired: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    target: Counter[str] = field(default_factory=Counter)
    health: list[dict[str, Any]] = field(default_factory=list)
    requests: int = 0

    def now(self) -> float:
        return time.monotonic() - self.start

    @property
    def waiting(self) -> int:
        return len(self.joined) - self.no_shows - len(self.passes) - self.expired


def _code(response: httpx.Response | Answer) -> str:
    """``429 rate_limited``: the status and the guide's JSON code (the status alone when there is none)."""
    status = response.status if isinstance(response, Answer) else response.status_code
    raw = response.body if isinstance(response, Answer) else response.content
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        body = None
    code = body.get("code") if isinstance(body, dict) else None
    return f"{status} {code}" if isinstance(code, str) else f"{status}"


def _json(answer: Answer) -> dict[str, Any]:
    body = orjson.loads(answer.body)
    if not isinstance(body, dict):
        raise ValueError("the answer is not a JSON object")
    return body


class _Run:
    def __init__(self, plan: Plan, tally: Tally) -> None:
        self.plan = plan
        self.tally = tally
        limits = httpx.Limits(max_connections=plan.connections, max_keepalive_connections=plan.connections)
        timeout = httpx.Timeout(30.0, pool=None)
        self.http = httpx.AsyncClient(base_url=plan.server, limits=limits, timeout=timeout)  # admin and health
        self.pool = Pool(plan.server, plan.connections)  # the visitors' own requests
        self.streams = httpx.AsyncClient(
            base_url=plan.server, limits=httpx.Limits(max_connections=None), timeout=httpx.Timeout(30.0, read=None)
        )
        self.site = httpx.AsyncClient(limits=limits, timeout=timeout, follow_redirects=True)
        self.admin = {"Authorization": f"Bearer {plan.admin_key}"} if plan.admin_key else {}
        self.salt = secrets.token_hex(4)

    async def close(self) -> None:
        await self.http.aclose()
        await self.streams.aclose()
        await self.site.aclose()
        self.pool.close()

    async def request(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        params: dict[str, str] | None = None,
        body: dict[str, Any] | None = None,
    ) -> Answer | None:
        """One visitor request; a transport failure is counted and answered None."""
        self.tally.requests += 1
        try:
            raw = None if body is None else orjson.dumps(body)
            return await self.pool.request(method, path, params=params, headers=headers, body=raw)
        except WireError as exc:
            self.tally.errors[f"transport {exc}"] += 1
            return None

    async def room(self) -> dict[str, Any]:
        """The room as the admin API reads it (its settings and counters)."""
        try:
            r = await self.http.get(f"/api/admin/rooms/{self.plan.room}", headers=self.admin)
        except httpx.HTTPError as exc:
            raise RehearseError(f"cannot reach {self.plan.server}: {exc}") from exc
        if r.status_code in (401, 403):
            raise RehearseError(f"the admin API refused the key ({_code(r)}): pass --admin-key or set ADMIN_KEY")
        if r.status_code == 404:
            raise RehearseError(f"no room {self.plan.room!r} on {self.plan.server}: create it first")
        if r.status_code != 200:
            raise RehearseError(f"reading room {self.plan.room!r} answered {_code(r)}")
        room: dict[str, Any] = r.json()["room"]
        return room

    async def sample_health(self) -> None:
        while True:
            sample: dict[str, Any] = {"t": round(self.tally.now(), 1)}
            path = "/api/admin/health" if self.admin else "/healthz"
            try:
                r = await self.http.get(path, headers=self.admin)
                body = r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
                sample.update(
                    http=r.status_code,
                    status=body.get("status"),
                    ready=body.get("ready"),
                    warnings=[w.get("message", "") for w in body.get("warnings", []) if isinstance(w, dict)],
                    incidents=[str(i) for i in body.get("incidents", []) or []],
                )
            except (httpx.HTTPError, ValueError) as exc:
                sample.update(http=None, status="unreachable", ready=False, warnings=[], incidents=[str(exc)])
            self.tally.health.append(sample)
            await asyncio.sleep(self.plan.health_every)

    # ------------------------------------------------------------------ one visitor

    async def visitor(self, k: int, no_show: bool, stream: bool) -> None:
        try:
            await self._visitor(k, no_show, stream)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:  # an answer that is not what the API says
            self.tally.errors[f"unexpected answer {type(exc).__name__}"] += 1

    async def _visitor(self, k: int, no_show: bool, stream: bool) -> None:
        plan, tally = self.plan, self.tally
        headers = dict(BROWSER_HEADERS)
        headers["Cookie"] = f"qms_{plan.room}=rh{self.salt}{k:x}{secrets.token_hex(6)}"
        if plan.forwarded_for:
            headers["X-Forwarded-For"] = f"198.{18 + (k >> 16) % 2}.{(k >> 8) & 255}.{k & 255}"
        tally.arrived += 1
        sent = tally.now()
        r = await self.request("POST", "/api/join", headers, body={"roomId": plan.room})
        if r is None or r.status != 200:
            tally.join_failed += 1
            if r is not None:
                tally.errors[f"join {_code(r)}"] += 1
            return
        joined_at = tally.now()
        tally.joined.append(joined_at)
        tally.join_latency.append(joined_at - sent)
        view = _json(r)
        token, eta = view.get("token"), view.get("etaSec")
        if no_show:
            tally.no_shows += 1
            return
        if not isinstance(token, str):
            tally.errors["join answered no token"] += 1
            return
        me = _Visitor(k, headers, token, joined_at, eta if isinstance(eta, int | float) else None)
        if view.get("state") in ("passed", "admitted") and await self.door(me):
            return
        if stream and await self.follow_stream(me):
            return
        await self.poll(me)

    async def poll(self, me: _Visitor) -> None:
        params = {"roomId": self.plan.room, "token": me.token}
        while True:
            await asyncio.sleep(self.plan.poll_every)
            r = await self.request("GET", "/api/status", me.headers, params)
            if r is None:
                continue
            if r.status != 200:
                self.tally.errors[f"status {_code(r)}"] += 1
                continue
            state = _json(r).get("state")
            if state == "expired":
                self.tally.expired += 1
                return
            if state in ("passed", "admitted") and await self.door(me):
                return

    async def follow_stream(self, me: _Visitor) -> bool:
        """Hold /events until the pass shows (then the door); False: carry on by polling."""
        params = {"roomId": self.plan.room, "token": me.token}
        while True:
            self.tally.requests += 1
            try:
                async with self.streams.stream("GET", "/events", params=params, headers=me.headers) as r:
                    if r.status_code != 200:
                        await r.aread()
                        self.tally.errors[f"events {_code(r)}"] += 1
                        return False
                    state = None
                    async for line in r.aiter_lines():
                        if not line.startswith("data: ") or '"state":"waiting"' in line:
                            continue  # (the frames of a waiting place are most of them: not parsed)
                        state = orjson.loads(line[6:]).get("state")
                        if state in ("passed", "admitted", "expired"):
                            break
            except httpx.HTTPError as exc:
                self.tally.errors[f"transport {type(exc).__name__}"] += 1
                return False
            if state == "expired":
                self.tally.expired += 1
                return True
            if state in ("passed", "admitted"):
                return await self.door(me)
            # the stream ended (a refresh, or the server closing it): open it again

    async def door(self, me: _Visitor) -> bool:
        """The page shows the pass: ask the door. True once admitted (or the place is gone)."""
        tally = self.tally
        if me.saw_pass is None:
            me.saw_pass = tally.now()
            tally.passes.append(me.saw_pass)
            wait = me.saw_pass - me.joined_at
            tally.waits.append(wait)
            if me.eta is not None:
                tally.eta_pairs.append((wait, float(me.eta)))
        params = {"roomId": self.plan.room, "qm_token": me.token}
        if self.plan.target:
            params["url"] = self.plan.target
        r = await self.request("GET", "/api/check", me.headers, params)
        if r is None:
            return False
        if r.status != 200:
            tally.errors[f"check {_code(r)}"] += 1
            return False
        answer = _json(r)
        if not answer.get("admit"):
            reason = answer.get("reason")
            if reason == "at_capacity":
                tally.bounced += 1
                return False
            if reason == "expired":
                tally.expired += 1
                return True
            tally.errors[f"check refused {reason}"] += 1
            return reason not in ("waiting", "paused")
        tally.admitted.append(tally.now())
        await self.visit(me, answer.get("doorKey"))
        return True

    async def visit(self, me: _Visitor, door_key: Any) -> None:
        """Admitted: fetch the protected site, and keep browsing for ``stay`` seconds (a door check a poll)."""
        await self.hit_target()
        until = self.tally.now() + self.plan.stay
        params = {"roomId": self.plan.room, "qm_token": me.token}
        if isinstance(door_key, str):
            params["dk"] = door_key
        while self.tally.now() + self.plan.poll_every <= until:
            await asyncio.sleep(self.plan.poll_every)
            r = await self.request("GET", "/api/check", me.headers, params)
            if r is not None and r.status != 200:
                self.tally.errors[f"check {_code(r)}"] += 1
            await self.hit_target()

    async def hit_target(self) -> None:
        if not self.plan.target:
            return
        try:
            r = await self.site.get(self.plan.target, headers={"User-Agent": UA})
            self.tally.target[str(r.status_code)] += 1
        except httpx.HTTPError as exc:
            self.tally.target[type(exc).__name__] += 1


@dataclass(slots=True)
class _Visitor:
    k: int
    headers: dict[str, str]
    token: str
    joined_at: float
    eta: float | None
    saw_pass: float | None = None


@dataclass(slots=True)
class Outcome:
    """A finished run: what the visitors saw, and the room before and after as the server counts it."""

    plan: Plan
    tally: Tally
    before: dict[str, Any]
    after: dict[str, Any]
    elapsed: float
    finished: bool


async def read_room(plan: Plan) -> dict[str, Any]:
    """The room as the admin API reads it, for a caller that drives no visitors itself."""
    run = _Run(plan, Tally())
    try:
        return await run.room()
    finally:
        await run.close()


async def rehearse(plan: Plan, tally: Tally, *, on_start: Callable[[dict[str, Any]], None] | None = None) -> Outcome:
    """Run the surge ``plan`` describes; ``tally`` fills in as it goes."""
    run = _Run(plan, tally)
    try:
        before = await run.room()
        if on_start is not None:
            on_start(before)
        pick = random.Random(plan.seed)
        mine, processes = plan.share
        if plan.start_at is not None:  # one instant for every process: their times add up on one axis
            await asyncio.sleep(max(0.0, plan.start_at - time.time()))
        health = asyncio.create_task(run.sample_health()) if mine == 0 else None
        tally.start = time.monotonic()
        visitors: set[asyncio.Task[None]] = set()

        async def arrive() -> None:
            for k, at in enumerate(plan.ramp.arrival_times(plan.visitors)):
                no_show = pick.random() < plan.no_show
                stream = not no_show and pick.random() < plan.stream
                if k % processes != mine:  # another process's visitor (drawn all the same: one crowd)
                    continue
                delay = at - tally.now()
                if delay > 0:
                    await asyncio.sleep(delay)
                task = asyncio.create_task(run.visitor(k, no_show, stream))
                visitors.add(task)

        arrivals = asyncio.create_task(arrive())
        finished = True
        try:
            async with asyncio.timeout(plan.duration):
                await arrivals
                while visitors:
                    done, _ = await asyncio.wait(visitors)
                    visitors.difference_update(done)
        except TimeoutError:
            finished = False
        elapsed = tally.now()
        arrivals.cancel()
        for task in visitors:
            task.cancel()
        await asyncio.gather(arrivals, *visitors, return_exceptions=True)
        if health is not None:
            health.cancel()
            await asyncio.gather(health, return_exceptions=True)
        after = await run.room()
        return Outcome(plan, tally, before, after, elapsed, finished)
    finally:
        await run.close()

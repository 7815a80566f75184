"""The origin health probe: is each inline room's ``proxyOrigin`` answering?

Every ``PROBE_EVERY_SEC`` each inline room's origin gets a ``HEAD /`` (with the room's public Host)
over a fresh connection from the same pool rules, so the SSRF rule applies to the probe exactly as to
visitors' requests: a private origin without ``PROXY_ALLOW_PRIVATE=1`` is never contacted. A failing
origin is an incident (status ``degraded``), never a reason to go unready. An answer records how long
it took (``latencyMs``: connect and the answer's head), which autotune reads as the origin's latency.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from queue_manager.inline.client import Pool, UpstreamError
from queue_manager.inline.forward import request_head
from queue_manager.inline.hosts import HostIndex, InlineRoom
from queue_manager.ssrf import OriginRefused

PROBE_EVERY_SEC = 10.0


@dataclass(slots=True)
class ProbeResult:
    ok: bool
    status: int | None
    phase: str | None
    error: str | None
    at: float  # monotonic
    latency_ms: int | None = None  # connect to the answer's head, when the origin answered

    def as_json(self, wall_now_ms: int) -> dict[str, object]:
        return {
            "ok": self.ok,
            "status": self.status,
            "phase": self.phase,
            "error": self.error,
            "latencyMs": self.latency_ms,
            "checkedAgoSec": round(time.monotonic() - self.at, 1),
        }


class OriginProbe:
    def __init__(self, pool: Pool, index: HostIndex, timeout: float) -> None:
        self.pool = pool
        self.index = index
        self.timeout = timeout
        self.results: dict[str, ProbeResult] = {}

    def failing(self) -> list[str]:
        return sorted(r for r, res in self.results.items() if not res.ok and r in self.index.by_room)

    async def run(self) -> None:
        while True:
            now = time.monotonic()
            due = [
                room
                for room in list(self.index.by_room.values())
                if (last := self.results.get(room.room_id)) is None or now - last.at >= PROBE_EVERY_SEC
            ]
            for room in due:
                self.results[room.room_id] = await self.probe(room)
            for gone in set(self.results) - set(self.index.by_room):
                del self.results[gone]
            await asyncio.sleep(1.0)

    async def probe(self, room: InlineRoom) -> ProbeResult:
        host = urlsplit(room.target_url).netloc.rpartition("@")[2]
        started = time.monotonic()
        try:
            conn = await self.pool.connect(room.origin)
        except OriginRefused as err:
            return ProbeResult(False, None, "refused", str(err), time.monotonic())
        except UpstreamError as err:
            return ProbeResult(False, None, err.phase, str(err), time.monotonic())
        try:
            head = request_head("HEAD", b"/", [(b"host", host.encode()), (b"user-agent", b"queue-manager-probe")])
            conn.begin(head, head_only=True)
            await asyncio.wait_for(conn.response_head(), self.timeout)
            status = conn.status
            now = time.monotonic()
            latency = int((now - started) * 1000)
            return ProbeResult(status < 500, status, None if status < 500 else "status", None, now, latency)
        except TimeoutError:
            return ProbeResult(False, None, "timeout", "no answer in time", time.monotonic())
        except UpstreamError as err:
            return ProbeResult(False, None, err.phase, str(err), time.monotonic())
        finally:
            conn.close()

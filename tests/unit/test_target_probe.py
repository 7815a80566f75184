"""Target health for snippet rooms (jobs/targets.py) against a real HTTP app on 127.0.0.1.

The app is an ``asyncio`` server in the test's own loop that answers what the test tells it to: a
status, a 405 to HEAD, a redirect, or nothing at all (a hanging site). Waits are for a condition with
a deadline, never a fixed sleep.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from queue_manager.clock import FakeClock
from queue_manager.config import load_settings
from queue_manager.jobs.autotune import Signals, measurement
from queue_manager.jobs.shared_state import MemoryShared
from queue_manager.jobs.targets import REFUSED_PRIVATE, USER_AGENT, TargetProbe, failing, reserved_name

DEADLINE_SEC = 10.0


class App:
    """A site: ``mode`` decides the answer (``200``, ``503``, ``head405``, ``302``, ``hang``)."""

    def __init__(self) -> None:
        self.mode = "200"
        self.requests: list[tuple[str, dict[str, str]]] = []  # (method, headers) of every request head
        self.connections = 0
        self.release = asyncio.Event()
        self.server: asyncio.Server | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        self.release.set()
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method = lines[0].split(" ", 1)[0]
                headers = {
                    k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)
                }
                self.requests.append((method, headers))
                if self.mode == "hang":
                    await self.release.wait()
                    return
                if self.mode == "head405" and method == "HEAD":
                    writer.write(b"HTTP/1.1 405 Method Not Allowed\r\nallow: GET\r\ncontent-length: 0\r\n\r\n")
                elif self.mode == "head405":  # a big body the probe never reads
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 10000000\r\n\r\n" + b"x" * 65536)
                elif self.mode == "302":
                    writer.write(b"HTTP/1.1 302 Found\r\nlocation: /elsewhere\r\ncontent-length: 0\r\n\r\n")
                else:
                    status = int(self.mode)
                    writer.write(f"HTTP/1.1 {status} X\r\ncontent-length: 0\r\n\r\n".encode())
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def app() -> AsyncIterator[App]:
    a = App()
    await a.start()
    try:
        yield a
    finally:
        await a.stop()


def probe_for(*, allow_private: bool = True, timeout: float = 5.0) -> tuple[TargetProbe, MemoryShared, FakeClock]:
    settings = load_settings({"PROXY_ALLOW_PRIVATE": "1" if allow_private else "0", "TARGET_PROBE_EVERY_MS": "1000"})
    shared, clock = MemoryShared(), FakeClock()
    return TargetProbe(settings, shared, clock, timeout=timeout), shared, clock


def snippet(room_id: str, url: str, **extra: Any) -> dict[str, Any]:
    return {"id": room_id, "targetUrl": url, "proxyOrigin": None, **extra}


async def until(check: Callable[[], Awaitable[Any]], what: str) -> Any:
    deadline = time.monotonic() + DEADLINE_SEC
    while True:
        value = await check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


async def result_of(shared: MemoryShared, room_id: str, *, after: int | None = None) -> dict[str, Any]:
    """The report's result for the room, once there is one (checked after ``after``, when given)."""

    async def ready() -> dict[str, Any] | None:
        r = (await shared.reports("targets")).get(room_id)
        return r if r is not None and (after is None or r["checkedAt"] > after) else None

    result: dict[str, Any] = await until(ready, f"a probe result for {room_id}")
    return result


async def test_a_site_that_answers_200_is_ok_with_its_latency(app: App) -> None:
    probe, shared, clock = probe_for()
    try:
        await probe.round([snippet("shop", app.url)], clock.wall_ms())
        r = await result_of(shared, "shop")
        assert r["ok"] is True and r["status"] == 200 and r["method"] == "HEAD"
        assert isinstance(r["latencyMs"], int) and r["latencyMs"] >= 0
        assert r["summary"] == f"HEAD {app.url} → 200"
        assert r["error"] is None and r["refused"] is None and r["failingSince"] is None
        assert r["url"] == app.url and r["checkedAt"] == clock.wall_ms()
        method, headers = app.requests[0]
        assert method == "HEAD" and headers["user-agent"] == USER_AGENT
        assert USER_AGENT.startswith("queue-manager-probe/")
        assert headers["host"] == f"127.0.0.1:{app.port}"
    finally:
        await probe.close()


async def test_a_503_fails_and_keeps_its_failing_since_until_the_site_answers(app: App) -> None:
    probe, shared, clock = probe_for()
    rooms = [snippet("shop", app.url)]
    try:
        app.mode = "503"
        await probe.round(rooms, clock.wall_ms())
        first = await result_of(shared, "shop")
        assert first["ok"] is False and first["status"] == 503 and first["error"] == "HTTP 503"
        assert first["summary"] == f"HEAD {app.url} → 503"
        assert first["failingSince"] == first["checkedAt"]
        assert first["refused"] is None
        clock.advance(1)  # TARGET_PROBE_EVERY_MS later: due again
        await probe.round(rooms, clock.wall_ms())
        second = await result_of(shared, "shop", after=first["checkedAt"])
        assert second["ok"] is False and second["failingSince"] == first["checkedAt"]
        app.mode = "200"
        clock.advance(1)
        await probe.round(rooms, clock.wall_ms())
        back = await result_of(shared, "shop", after=second["checkedAt"])
        assert back["ok"] is True and back["failingSince"] is None
    finally:
        await probe.close()


async def test_a_room_is_probed_at_most_every_target_probe_every_ms(app: App) -> None:
    probe, shared, clock = probe_for()
    rooms = [snippet("shop", app.url)]
    try:
        await probe.round(rooms, clock.wall_ms())
        first = await result_of(shared, "shop")
        clock.advance(0.999)
        await probe.round(rooms, clock.wall_ms())  # not due: nothing starts
        assert "shop" not in probe._running or probe._running["shop"].done()
        assert len(app.requests) == 1
        clock.advance(0.001)
        await probe.round(rooms, clock.wall_ms())
        await result_of(shared, "shop", after=first["checkedAt"])
        assert len(app.requests) == 2
    finally:
        await probe.close()


async def test_a_site_that_refuses_head_gets_a_get_whose_body_is_not_read(app: App) -> None:
    probe, shared, clock = probe_for()
    try:
        app.mode = "head405"
        await probe.round([snippet("shop", app.url)], clock.wall_ms())
        r = await result_of(shared, "shop")
        assert [m for m, _ in app.requests] == ["HEAD", "GET"]
        assert r["ok"] is True and r["status"] == 200 and r["method"] == "GET"
        assert r["summary"] == f"GET {app.url} → 200"
    finally:
        await probe.close()


async def test_a_redirect_is_an_answer_and_is_not_followed(app: App) -> None:
    probe, shared, clock = probe_for()
    try:
        app.mode = "302"
        await probe.round([snippet("shop", app.url)], clock.wall_ms())
        r = await result_of(shared, "shop")
        assert r["ok"] is True and r["status"] == 302
        assert len(app.requests) == 1
    finally:
        await probe.close()


async def test_a_hanging_site_times_out_and_is_not_probed_again_while_in_flight(app: App) -> None:
    probe, shared, clock = probe_for(timeout=0.5)
    rooms = [snippet("shop", app.url)]
    try:
        app.mode = "hang"
        await probe.round(rooms, clock.wall_ms())  # returns at once: the probe runs beside the frame

        async def hanging() -> bool:
            return len(app.requests) == 1

        await until(hanging, "the probe's request to reach the site")
        assert "shop" not in await shared.reports("targets")
        task = probe._running["shop"]
        clock.advance(5)  # due again, but its probe is still in flight
        await probe.round(rooms, clock.wall_ms())
        assert probe._running["shop"] is task
        r = await result_of(shared, "shop")
        assert r["ok"] is False and r["status"] is None and r["latencyMs"] is None
        assert r["error"] == "timed out after 0.5 s"
        assert r["summary"] == f"HEAD {app.url} → timed out after 0.5 s"
        assert r["failingSince"] == r["checkedAt"]
        assert app.connections == 1
    finally:
        await probe.close()


async def test_a_site_with_nothing_listening_fails(app: App) -> None:
    probe, shared, clock = probe_for()
    url = app.url
    await app.stop()  # the port is closed now: connection refused
    try:
        await probe.round([snippet("shop", url)], clock.wall_ms())
        r = await result_of(shared, "shop")
        assert r["ok"] is False and r["refused"] is None
        assert r["summary"] == f"HEAD {url} → connection failed"
        assert r["error"]
    finally:
        await probe.close()


async def test_a_private_address_is_refused_not_failing_and_never_contacted(app: App) -> None:
    probe, shared, clock = probe_for(allow_private=False)
    try:
        await probe.round([snippet("shop", app.url)], clock.wall_ms())
        r = await result_of(shared, "shop")
        assert app.connections == 0
        assert r["ok"] is False and r["status"] is None
        assert "127.0.0.1" in r["refused"] and "PROXY_ALLOW_PRIVATE=1" in r["refused"]
        assert r["failingSince"] is None  # a configuration matter, not a failing site
        probe.seen = await shared.reports("targets")  # what the alert frame does on every instance
        full = probe.view(full=True)["shop"]
        assert full["refused"] == r["refused"]
        shared_view = probe.view(full=False)["shop"]
        assert shared_view["refused"] is True and shared_view["error"] is None
        assert shared_view["summary"] == f"HEAD {app.url} → {REFUSED_PRIVATE}"
        # the summary itself says what to do: the setting that allows it, and how to stop probing
        assert "set PROXY_ALLOW_PRIVATE=1" in shared_view["summary"] and "TARGET_PROBE=0" in shared_view["summary"]
    finally:
        await probe.close()


async def test_the_view_without_full_drops_the_error_text(app: App) -> None:
    probe, shared, clock = probe_for()
    url = app.url
    await app.stop()
    try:
        await probe.round([snippet("shop", url)], clock.wall_ms())
        await result_of(shared, "shop")
        probe.seen = await shared.reports("targets")
        assert probe.view(full=True)["shop"]["error"]
        row = probe.view(full=False)["shop"]
        assert row["error"] is None and row["refused"] is None and row["ok"] is False
    finally:
        await probe.close()


async def test_rooms_that_are_gone_or_inline_leave_the_report(app: App) -> None:
    probe, shared, clock = probe_for()
    try:
        await probe.round([snippet("a", app.url), snippet("b", app.url), snippet("c", app.url)], clock.wall_ms())
        for room_id in ("a", "b", "c"):
            await result_of(shared, room_id)
        probe.seen = await shared.reports("targets")
        # b became inline, c was deleted; an inline room is never probed here
        rooms = [snippet("a", app.url), snippet("b", app.url, proxyOrigin="http://127.0.0.1:9")]
        await probe.round(rooms, clock.wall_ms())
        assert set(await shared.reports("targets")) == {"a"}
    finally:
        await probe.close()


async def test_target_probe_off_probes_nothing_and_reports_nothing() -> None:
    from queue_manager.clock import FakeClock
    from queue_manager.config import load_settings
    from queue_manager.jobs.shared_state import MemoryShared
    from queue_manager.jobs.targets import TargetProbe

    settings = load_settings({"TARGET_PROBE": "0"})
    shared = MemoryShared()
    await shared.report("targets", "gone", {"ok": False})
    probe = TargetProbe(settings, shared, FakeClock())
    probe.seen = await shared.reports("targets")
    await probe.round([{"id": "shop", "targetUrl": "http://127.0.0.1:9/", "proxyOrigin": None}], 0)
    assert probe._running == {} and await shared.reports("targets") == {}


def test_reserved_names_are_the_ones_that_never_resolve() -> None:
    for host in ("shop.example", "EXAMPLE", "a.b.invalid", "shop.test", "shop.test.", "example.com", "www.example.org"):
        assert reserved_name(host), host
    for host in ("shop.com", "localhost", "app.localhost", "example.co", "myexample.com", "127.0.0.1", "testing"):
        assert not reserved_name(host), host


async def test_a_target_under_a_reserved_name_is_not_probed_nor_failing() -> None:
    """The README's first room: targetUrl https://shop.example, a name reserved never to resolve."""
    probe, shared, clock = probe_for(allow_private=False)
    try:
        await probe.round([snippet("shop", "https://shop.example")], clock.wall_ms())
        r = await result_of(shared, "shop")
        assert r["ok"] is None and r["status"] is None and r["method"] is None and r["error"] is None
        assert r["notProbed"] == "reserved name" and r["refused"] is None and r["failingSince"] is None
        assert r["summary"] == (
            "https://shop.example → not probed: shop.example is a name reserved for examples, which never resolves"
        )
        assert not failing(r)
        # autotune reads no signal from it (neither a failing nor a healthy site)
        signals = Signals(targets={"shop": r}, origins={}, origin_errors={}, instance="i", target_every_ms=1000)
        room = snippet("shop", "https://shop.example", autotune={"enabled": True})
        assert measurement(room, signals, clock.wall_ms()) is None
    finally:
        await probe.close()

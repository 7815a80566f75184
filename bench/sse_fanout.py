"""SSE fan-out: hold N /events streams open and measure what the server delivers.

    python bench/sse_fanout.py --base http://127.0.0.1:PORT --room line --streams 2000 [--server-pid PID]

Each stream gets its own waiting ticket (joined first, over a few keep-alive connections), then
opens ``GET /events?roomId=…&token=…`` on its own socket (raw asyncio, chunked decoding by hand).
Once every stream has its first frame, a measurement window of ``--measure`` seconds counts the
``data:`` frames the server composed in it (by their ``now``; the client keeps reading ``--grace``
seconds longer for the last ones) and, for each, the delay between the frame's ``now`` (server wall clock,
ms, set when the frame is composed) and its receipt (this process's wall clock: same machine, same
clock). Frames are grouped into tick bursts (a gap of more than 250 ms in ``now`` starts a new one);
``fanout`` is receipt minus the first ``now`` of the burst, i.e. how long after the tick started
composing this stream's frame arrived; ``tickDelay`` is receipt minus the tick the frame belongs to
(see below). With ``--server-pid``: the server's CPU time (user, system) over the window and its VmRSS
before and after the streams open; with ``--store-pid`` (a Valkey server's; given again for each master of a cluster),
their CPU time over the same window, summed. Prints one JSON object. Loopback only; bounded in time.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from typing import Any, cast

import orjson

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from httpc import UA, fan_out, run, split_url


def pct(values: list[float], p: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    k = min(len(values) - 1, max(0, round(p / 100.0 * len(values) + 0.5) - 1))
    return round(values[k], 2)


def rss_kb(pid: int | None) -> int | None:
    if not pid:
        return None
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def cpu_ticks(pid: int | None) -> int | None:
    split = cpu_split(pid)
    return None if split is None else split[0] + split[1]


def stores_cpu(pids: list[int] | None) -> int | None:
    """The CPU ticks of the Valkey servers (one, or every master of a cluster), summed."""
    ticks = [cpu_ticks(pid) for pid in pids or ()]
    return None if not ticks or None in ticks else sum(t for t in ticks if t is not None)


def cpu_split(pid: int | None) -> tuple[int, int] | None:
    """(utime, stime) in clock ticks."""
    if not pid:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]), int(fields[12])
    except OSError:
        return None


class Stream(asyncio.Protocol):
    """One /events stream. data_received only timestamps and keeps the bytes: parsing waits until the
    measurement is over, so a slow client cannot pass for a slow server."""

    def __init__(self, request: bytes, opened: list[int], n: int, all_open: asyncio.Event) -> None:
        self.request = request
        self.chunks: list[tuple[float, bytes]] = []
        self.got_frame = False
        self.opened, self.n, self.all_open = opened, n, all_open
        self.transport: asyncio.Transport | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        self.chunks.append((time.time() * 1000.0, data))
        if not self.got_frame and b"data: " in data:
            self.got_frame = True
            self.opened[0] += 1
            if self.opened[0] >= self.n:
                self.all_open.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True

    def frames(self) -> tuple[int, list[tuple[float, int]]]:
        """(HTTP status, [(receipt ms, server now ms)]) from the stored bytes."""
        buf = b""
        status = 0
        body = False
        raw = b""
        text = b""
        out: list[tuple[float, int]] = []
        for recv_ms, data in self.chunks:
            if not body:
                buf += data
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    continue
                status = int(buf.split(b" ", 2)[1])
                if status != 200 or b"chunked" not in buf[:end].lower():
                    return status, out
                body = True
                data = buf[end + 4 :]
            raw += data
            while True:  # de-chunk
                eol = raw.find(b"\r\n")
                if eol < 0:
                    break
                size = int(raw[:eol].split(b";")[0], 16)
                if size == 0:
                    return status, out
                stop = eol + 2 + size + 2
                if len(raw) < stop:
                    break
                text += raw[eol + 2 : stop - 2]
                raw = raw[stop:]
            while True:  # events
                sep = text.find(b"\n\n")
                if sep < 0:
                    break
                event, text = text[:sep], text[sep + 2 :]
                for line in event.split(b"\n"):
                    if line.startswith(b"data: "):
                        now = orjson.loads(line[6:]).get("now")
                        if isinstance(now, int):
                            out.append((recv_ms, now))
        return status, out


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    host, port = split_url(args.base)
    n = args.streams
    t0 = time.monotonic()
    # joined from the address the streams come from: a stream is its visitor's only when it is
    joined = await fan_out(
        host, port, [("POST", "/api/join", {"roomId": args.room})] * n, concurrency=16, source=args.source
    )
    tokens = [body["token"] for status, body in joined if status == 200 and body and body.get("token")]
    join_s = time.monotonic() - t0
    if len(tokens) < n:
        return {"error": f"only {len(tokens)} of {n} joins succeeded", "joinSeconds": join_s}

    await asyncio.sleep(args.settle)
    rss0 = rss_kb(args.server_pid)  # the tickets are in; no stream is open yet
    loop = asyncio.get_running_loop()
    opened = [0]
    all_open = asyncio.Event()
    streams = [
        Stream(
            f"GET /events?roomId={args.room}&token={tok} HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"User-Agent: {UA}\r\nAccept: text/event-stream\r\n\r\n".encode(),
            opened,
            n,
            all_open,
        )
        for tok in tokens
    ]
    gate = asyncio.Semaphore(args.connect_concurrency)

    async def connect(st: Stream) -> None:
        async with gate:
            local = (args.source, 0) if args.source else None
            await asyncio.wait_for(loop.create_connection(lambda: st, host, port, local_addr=local), 10)

    t1 = time.monotonic()
    result: dict[str, Any] = {"streamsRequested": n, "joinSeconds": round(join_s, 2)}
    connected = await asyncio.gather(*(connect(st) for st in streams), return_exceptions=True)
    result["connectErrors"] = sum(1 for c in connected if isinstance(c, BaseException))
    try:
        try:
            await asyncio.wait_for(all_open.wait(), args.open_timeout)
        except TimeoutError:
            pass
        result["streamsOpen"] = opened[0]
        result["openSeconds"] = round(time.monotonic() - t1, 2)
        await asyncio.sleep(args.settle)
        rss1 = rss_kb(args.server_pid)
        if rss0 is not None and rss1 is not None:
            result["rssKb"] = {"before": rss0, "open": rss1}
            result["rssPerStreamKb"] = round((rss1 - rss0) / max(1, opened[0]), 2)
        split0 = cpu_split(args.server_pid)
        cpu0 = cpu_ticks(args.server_pid)
        store0 = stores_cpu(args.store_pid)
        m0 = time.monotonic()
        w0 = time.time() * 1000.0
        await asyncio.sleep(args.measure)
        elapsed = time.monotonic() - m0
        w1 = w0 + elapsed * 1000.0
        cpu1 = cpu_ticks(args.server_pid)
        split1 = cpu_split(args.server_pid)
        store1 = stores_cpu(args.store_pid)
        still_open = sum(1 for st in streams if not st.closed)
        await asyncio.sleep(args.grace)  # frames composed in the window but still on their way
    finally:
        for st in streams:
            if st.transport is not None:
                st.transport.close()
    sink: list[tuple[float, int]] = []
    statuses: set[int] = set()
    per_stream: list[int] = []
    for st in streams:
        status, frames = st.frames()
        statuses.add(status)
        # the frames the server composed in the window (its clock, ``now``): the ones its CPU time paid for,
        # even those a busy client read late; frames from before the window that arrive in it do not count
        mine = [f for f in frames if w0 <= f[1] <= w1]
        per_stream.append(len(mine))
        sink.extend(mine)
    result["statuses"] = sorted(statuses)
    result["framesPerStreamMin"] = min(per_stream) if per_stream else 0
    opened_n = opened[0]
    delays = [r - now for r, now in sink]
    # tick bursts: sort by the server's now; a gap over 250 ms starts a new burst
    fanout: list[float] = []
    spreads: list[int] = []
    ordered = sorted(sink, key=lambda x: x[1])
    start = None
    prev = None
    burst_first = 0
    for r, now in ordered:
        if prev is None or now - prev > 250:
            if start is not None and prev is not None:
                spreads.append(prev - burst_first)
            start = now
            burst_first = now
        prev = now
        fanout.append(r - burst_first)
    if prev is not None:
        spreads.append(prev - burst_first)
    # the room ticks once a second at a steady phase: the phase is where the frames' server clocks (mod 1 s)
    # start after their widest gap; a frame's tick is the last tick instant at or before its ``now``, and its
    # tick delay is its receipt minus that instant (a round longer than 1 s shows as frames/s below streams)
    tick_delays: list[float] = []
    if sink:
        marks = sorted({now % 1000 for _, now in sink})
        gaps = [
            ((marks[(i + 1) % len(marks)] - m) % 1000 or 1000, marks[(i + 1) % len(marks)]) for i, m in enumerate(marks)
        ]
        phase = max(gaps)[1]
        tick_delays = [r - (now - (now - phase) % 1000) for r, now in sink]
    hz = os.sysconf("SC_CLK_TCK")
    result.update(
        {
            "measureSeconds": round(elapsed, 3),
            "framesInWindow": len(sink),
            "framesPerSec": round(len(sink) / elapsed, 1),
            "expectedPerSec": opened_n,  # one frame a second per stream (the tick)
            "streamsStillOpen": still_open,
            "delayMs": {
                "p50": pct(delays, 50),
                "p90": pct(delays, 90),
                "p99": pct(delays, 99),
                "max": round(max(delays), 2) if delays else None,
            },
            "tickDelayMs": {
                "p50": pct(tick_delays, 50),
                "p99": pct(tick_delays, 99),
                "max": round(max(tick_delays), 2) if tick_delays else None,
            },
            "fanoutMs": {
                "p50": pct(fanout, 50),
                "p99": pct(fanout, 99),
                "max": round(max(fanout), 2) if fanout else None,
            },
            "burstSpreadMs": {
                "median": pct([float(s) for s in spreads], 50),
                "max": max(spreads) if spreads else None,
                "bursts": len(spreads),
            },
            "serverUserSystemSeconds": (
                None if split0 is None or split1 is None else [(split1[i] - split0[i]) / hz for i in (0, 1)]
            ),
            "serverCpuSeconds": None if cpu0 is None or cpu1 is None else round((cpu1 - cpu0) / hz, 2),
            "serverCpuPct": (None if cpu0 is None or cpu1 is None else round(100.0 * (cpu1 - cpu0) / hz / elapsed, 1)),
            "storeCpuSeconds": None if store0 is None or store1 is None else round((store1 - store0) / hz, 2),
        }
    )
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True)
    ap.add_argument("--room", default="line")
    ap.add_argument("--streams", type=int, default=2000)
    ap.add_argument("--measure", type=float, default=10.0)
    ap.add_argument(
        "--store-pid", type=int, action="append", help="a Valkey server's pid (again for each master): its CPU"
    )
    ap.add_argument("--settle", type=float, default=1.5)
    ap.add_argument("--grace", type=float, default=2.0)
    ap.add_argument("--open-timeout", type=float, default=60.0)
    ap.add_argument("--connect-concurrency", type=int, default=200)
    ap.add_argument("--server-pid", type=int, default=0)
    ap.add_argument(
        "--source", default="", help="the streams' local address (127.0.0.k: ~28,000 more ephemeral ports each)"
    )
    args = ap.parse_args()
    host, _ = split_url(args.base)
    if not (host.startswith("127.") or host in ("localhost", "::1")):
        sys.exit("sse_fanout: loopback addresses only")
    total_limit = args.open_timeout + 2 * args.settle + args.measure + args.grace + 240  # joins included
    result = run(asyncio.wait_for(main_async(args), total_limit))
    print(orjson.dumps(result).decode(), flush=True)


if __name__ == "__main__":
    main()

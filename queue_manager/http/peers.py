"""WORKERS>1: each worker's own metrics on a private unix socket, and the scrape of its siblings.

The supervisor (``queue_manager/workers.py``) makes one private directory (mode 0700) and hands its
path to every worker; worker ``k`` listens on ``<dir>/w<k>.sock`` beside the shared port. What it
serves there is one thing: ``GET /metrics`` in HTTP/1.0, answered with this worker's own exposition
(``/metrics?scope=local``) and the connection closed. No credential is asked for: only a process of
the same user can reach a socket in that directory, and such a process can read the worker's memory
as well.

The worker that answers ``/metrics`` on the shared port asks every sibling at once, each within
:data:`PEER_TIMEOUT_SEC`; a sibling that does not answer in time, or answers with something other
than an exposition, is left out of that scrape (a worker being restarted is simply missing).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from queue_manager.metrics_merge import merge, parse

log = logging.getLogger("queue_manager.peers")

__all__ = ["PEER_TIMEOUT_SEC", "PeerListener", "Peers", "fetch", "merged", "merged_text"]

#: How long the answering worker waits for each sibling's exposition.
PEER_TIMEOUT_SEC = 1.0
#: The most a sibling's answer may be (headers and body).
MAX_ANSWER_BYTES = 64 * 1024 * 1024
#: How long a connection to this worker's socket may take to send its request line.
REQUEST_TIMEOUT_SEC = 5.0
_REQUEST = b"GET /metrics HTTP/1.0\r\nHost: qm-worker\r\n\r\n"
_HEAD_LIMIT = 8192


@dataclass(frozen=True)
class Peers:
    """Where the workers of one supervisor listen for each other: ``directory``, this worker's
    ``index`` (from 1), how many workers there are and the supervisor's own QM_INSTANCE_ID."""

    directory: str
    index: int
    count: int
    group: str

    def path(self, index: int) -> str:
        return os.path.join(self.directory, f"w{index}.sock")

    def siblings(self) -> list[int]:
        return [k for k in range(1, self.count + 1) if k != self.index]


async def fetch(path: str, within_sec: float = PEER_TIMEOUT_SEC) -> bytes | None:
    """The exposition the worker listening on ``path`` answers, or None (no answer in time, refused, not 200)."""
    chunks: list[bytes] = []
    try:
        async with asyncio.timeout(within_sec):
            reader, writer = await asyncio.open_unix_connection(path)
            try:
                writer.write(_REQUEST)
                size = 0
                while chunk := await reader.read(65536):
                    size += len(chunk)
                    if size > MAX_ANSWER_BYTES:
                        return None
                    chunks.append(chunk)
            finally:
                writer.close()
                with contextlib.suppress(Exception):
                    await writer.wait_closed()
    except (OSError, TimeoutError, EOFError):
        return None
    head, sep, body = b"".join(chunks).partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].split()
    if not sep or len(status) < 2 or status[1] != b"200":
        return None
    return body


async def merged(peers: Peers, own: bytes) -> bytes:
    """The scrape on the shared port: ``own`` (this worker's exposition) and every sibling's that answers in
    time, merged (parsed and written off the event loop)."""
    siblings = peers.siblings()
    answers = await asyncio.gather(*(fetch(peers.path(k)) for k in siblings))
    texts = {peers.index: own} | {k: a for k, a in zip(siblings, answers, strict=True) if a is not None}
    return await asyncio.to_thread(merged_text, peers, texts)


def merged_text(peers: Peers, texts: dict[int, bytes]) -> bytes:
    """The workers' expositions (worker index → text) as one, in worker order, with ``qm_workers`` and
    ``qm_workers_scraped`` labelled with the supervisor's QM_INSTANCE_ID. A text that does not parse is
    left out like a worker that did not answer."""
    parts: list[list[Metric]] = []
    for k in sorted(texts):
        try:
            parts.append(parse(texts[k]))
        except ValueError as exc:
            log.warning("worker %d: its metrics are not an exposition (%s); left out", k, exc)
    workers = GaugeMetricFamily("qm_workers", "Worker processes this server runs (WORKERS)", labels=["instance"])
    workers.add_metric([peers.group], peers.count)
    scraped = GaugeMetricFamily(
        "qm_workers_scraped",
        "Workers whose metrics are in this scrape (the others did not answer in time)",
        labels=["instance"],
    )
    scraped.add_metric([peers.group], len(parts))
    return merge(parts, [workers, scraped])


class PeerListener:
    """This worker's socket: answers ``GET /metrics`` with ``local()``, this worker's own exposition."""

    def __init__(self, peers: Peers, local: Callable[[], Awaitable[bytes]]) -> None:
        self.peers = peers
        self.path = peers.path(peers.index)
        self.local = local
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        """Listen (a socket file left by this worker's previous process is replaced). A socket that cannot be
        made is logged: this worker still serves, and the others' scrapes go without its metrics."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        try:
            self._server = await asyncio.start_unix_server(self._answer, self.path, limit=_HEAD_LIMIT)
        except OSError as exc:
            log.warning(
                "worker %d: cannot listen on %s (%s); /metrics goes without it", self.peers.index, self.path, exc
            )

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 1.0)
        with contextlib.suppress(OSError):
            os.unlink(self.path)

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT_SEC):
                head = await reader.readuntil(b"\r\n\r\n")
            if head.split(b"\r\n", 1)[0].split()[:2] != [b"GET", b"/metrics"]:
                writer.write(b"HTTP/1.0 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            else:
                try:
                    body = await self.local()
                except Exception as exc:  # the store unreachable, for one: this worker is left out of the scrape
                    log.warning("worker %d: its metrics could not be rendered: %s", self.peers.index, exc)
                    writer.write(b"HTTP/1.0 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                else:
                    writer.write(
                        b"HTTP/1.0 200 OK\r\ncontent-type: text/plain; version=0.0.4; charset=utf-8\r\n"
                        b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body)
                    )
                    writer.write(body)
            await writer.drain()
        except (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

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

from queue_manager.metrics import workers_exposition
from queue_manager.metrics_merge import Family, merge, split

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
    lines = head.split(b"\r\n")
    status = lines[0].split()
    if not sep or len(status) < 2 or status[1] != b"200":
        return None
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length" and value.strip() != str(len(body)).encode():
            return None  # cut short
    return body


async def merged(peers: Peers, own: Awaitable[bytes]) -> bytes:
    """The scrape on the shared port: ``own`` (this worker's exposition, rendered while the siblings are
    asked) and every sibling's that answers in time, merged off the event loop."""
    siblings = peers.siblings()
    mine, *answers = await asyncio.gather(own, *(fetch(peers.path(k)) for k in siblings))
    assert mine is not None
    texts = {peers.index: mine} | {k: a for k, a in zip(siblings, answers, strict=True) if a is not None}
    return await asyncio.to_thread(merged_text, peers, texts)


def merged_text(peers: Peers, texts: dict[int, bytes]) -> bytes:
    """The workers' expositions (worker index → text) as one, in worker order, then ``qm_workers`` and
    ``qm_workers_scraped`` under the supervisor's QM_INSTANCE_ID. A text that is not an exposition this
    server wrote is left out like a worker that did not answer."""
    parts: list[list[Family]] = []
    for k in sorted(texts):
        try:
            parts.append(split(texts[k]))
        except ValueError as exc:
            log.warning("worker %d: its metrics are left out of this scrape: %s", k, exc)
    parts.append(split(workers_exposition(peers.group, peers.count, len(parts))))
    return merge(parts)


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

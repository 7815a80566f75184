"""The broadcaster's batched rounds (a store over the network): one store call per STATUS_BATCH streams.

The store here is a real MemoryStore read through its ``status_many``; the gate in front of it only holds a
batch "on its way" for as long as a test needs, and counts the calls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from queue_manager.clock import FakeClock
from queue_manager.engine.model import ClientId
from queue_manager.engine.view import VisitorView
from queue_manager.engine.visitor import Presented
from queue_manager.services.sse import Broadcaster, Stream
from queue_manager.store.base import STATUS_BATCH
from queue_manager.store.memory import MemoryStore


class _Task:
    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class _Gate:
    """``status_many`` of a real store, held until ``open`` is set; every call's size recorded."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.calls: list[int] = []
        self.open = asyncio.Event()
        self.open.set()

    async def __call__(self, room_id: str, asks: Sequence[tuple[ClientId, Presented | None]]) -> list[VisitorView]:
        self.calls.append(len(asks))
        await self.open.wait()
        return await self.store.status_many(room_id, asks)


class _Viewer:
    """One stream's connection: what it was written, and whether it takes a write at once."""

    def __init__(self, b: Broadcaster, client: ClientId, presented: Presented | None) -> None:
        self.written: list[bytes] = []
        self.sent: list[bytes] = []
        self.stepped = 0
        self.accept = True
        self.task: Any = _Task()
        self.stream = Stream(
            "r",
            self.send,
            self.step,
            self.task,
            cycle=self,  # the connection, as http/direct.write_chunk uses uvicorn's cycle
            client=client,
            presented=presented,
            frame_of=lambda v: f"{v.ticket}:{v.position}".encode(),
        )
        b.add(self.stream, None)

    async def send(self, message: Any) -> None:
        self.sent.append(message["body"])

    async def step(self) -> bool:
        self.stepped += 1
        return False  # what a step past the refresh deadline does: refresh, then the stream ends

    # what write_chunk reads of uvicorn's cycle: the flags, the flow control and the transport
    disconnected = False
    response_complete = False

    @property
    def flow(self) -> _Viewer:
        return self

    @property
    def write_paused(self) -> bool:
        return not self.accept

    @property
    def transport(self) -> _Viewer:
        return self

    def write(self, chunk: bytes) -> None:
        size, _, rest = chunk.partition(b"\r\n")
        assert rest[int(size, 16) :] == b"\r\n", chunk  # one whole chunk per frame
        self.written.append(rest[: int(size, 16)])


async def _setup(count: int) -> tuple[Broadcaster, _Gate, list[_Viewer], list[int]]:
    store = MemoryStore(FakeClock())
    await store.upsert_room({"id": "r", "targetUrl": "https://shop.example", "ratePerMinute": 0, "presenceSec": None})
    b = Broadcaster()
    gate = _Gate(store)
    b.status_many = gate
    viewers, tickets = [], []
    for i in range(count):
        client = ClientId(ident=f"10.1.{i >> 8}.{i & 255}", fp=f"fp{i}".encode(), cookie=f"c{i}".encode())
        view = await store.join("r", client, None, None)
        assert view.ticket is not None
        tickets.append(view.ticket)
        viewers.append(_Viewer(b, client, Presented(gen=view.gen, n=view.ticket)))
    return b, gate, viewers, tickets


async def _until(done: Callable[[], bool]) -> None:
    """Let the loop run until ``done()``: the tasks under test never sleep, each pass moves them one step."""
    while not done():  # noqa: ASYNC110 - the broadcaster's state has no event to wait on
        await asyncio.sleep(0)


async def _settled(viewers: list[_Viewer]) -> None:
    await _until(lambda: all(v.stream.pending is None for v in viewers))


async def _round(b: Broadcaster, viewers: list[_Viewer]) -> None:
    b.notify({"r"})
    await _until(lambda: not b._rooms["r"].running)
    await _settled(viewers)


async def test_a_round_reads_the_room_in_batches_and_each_stream_gets_its_own_frame() -> None:
    b, gate, viewers, tickets = await _setup(2 * STATUS_BATCH + 44)
    await _round(b, viewers)
    assert gate.calls == [STATUS_BATCH, STATUS_BATCH, 44]
    for position, (v, n) in enumerate(zip(viewers, tickets, strict=True), 1):
        assert v.written == [f"{n}:{position}".encode()]
        assert not v.sent and not v.stepped and not v.task.cancelled


async def test_a_wake_during_the_batch_gets_one_more_frame_read_in_a_batch_again() -> None:
    b, gate, viewers, tickets = await _setup(3)
    gate.open.clear()
    b.notify({"r"})
    await _until(lambda: len(gate.calls) == 1)
    b.notify({"r"})  # the batch is on its way: every stream is told "again"
    b.notify({"r"})  # ... once
    await _until(lambda: not b._rooms["r"].running)
    assert all(v.stream.again for v in viewers) and gate.calls == [3]
    gate.open.set()
    await _settled(viewers)
    assert gate.calls == [3, 3]  # the second frames were read together, not a call per stream
    for position, (v, n) in enumerate(zip(viewers, tickets, strict=True), 1):
        assert v.written == [f"{n}:{position}".encode()] * 2
        assert not v.stream.again


async def test_a_declined_write_goes_through_send_and_a_stream_past_its_deadline_steps() -> None:
    b, gate, viewers, tickets = await _setup(3)
    viewers[0].accept = False
    viewers[2].stream.deadline = asyncio.get_running_loop().time() - 1  # its refresh is due
    await _round(b, viewers)
    assert gate.calls == [2]
    assert viewers[0].sent == [f"{tickets[0]}:1".encode()] and not viewers[0].written
    assert viewers[1].written == [f"{tickets[1]}:2".encode()]
    assert viewers[2].stepped == 1 and not viewers[2].written and viewers[2].task.cancelled


async def test_a_failed_batch_ends_its_streams() -> None:
    b, gate, viewers, _ = await _setup(4)
    await gate.store.delete_room("r")  # the store answers no_room for the whole batch
    await _round(b, viewers)
    assert gate.calls == [4]
    assert all(v.task.cancelled and v.stream.ending and not v.written for v in viewers)


async def test_shutdown_ends_the_streams_of_a_batch_on_its_way_without_writing() -> None:
    b, gate, viewers, _ = await _setup(2)
    gate.open.clear()
    b.notify({"r"})
    await _until(lambda: len(gate.calls) == 1)
    b.close_all()
    gate.open.set()
    await _settled(viewers)
    assert all(v.stream.ending and not v.written for v in viewers)

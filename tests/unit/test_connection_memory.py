"""What every connection costs the server in memory: the protocol's own state in slots, so the instance
dict of uvicorn's attributes stays small enough for CPython to share its keys between connections; the
write flow control's event made only when writing pauses, and the pipelined requests in a list, each
with uvicorn's behaviour (http/lean.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.config import Config
from uvicorn.server import ServerState

from queue_manager.http.lean import LeanFlow, Pipeline
from queue_manager.inline.fastpath import InlineProtocol


class Transport:
    def __init__(self) -> None:
        self.reading = True

    def get_extra_info(self, name: str) -> Any:
        return ("127.0.0.1", 1) if name in ("peername", "sockname") else None

    def is_closing(self) -> bool:
        return False

    def set_write_buffer_limits(self, *args: Any, **kwargs: Any) -> None:
        pass

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def close(self) -> None:
        pass


async def _app(scope: Any, receive: Any, send: Any) -> None:
    pass


async def test_a_connections_own_state_is_in_slots_and_its_dict_stays_shared() -> None:
    config = Config(_app, http="httptools")
    config.load()
    proto = InlineProtocol(config, ServerState(), {}, asyncio.get_running_loop())
    proto.connection_made(Transport())  # type: ignore[arg-type]
    try:
        own = set(InlineProtocol.__slots__)
        assert not own & set(proto.__dict__), "the protocol's own attributes belong in its slots"
        # CPython shares an instance dict's keys only up to 30 of them; uvicorn's set this many
        assert len(proto.__dict__) < 30, sorted(proto.__dict__)
        assert isinstance(proto.flow, LeanFlow)
        assert isinstance(proto.pipeline, Pipeline)
    finally:
        proto.connection_lost(None)


async def test_the_flow_waits_only_while_writing_is_paused() -> None:
    transport = Transport()
    flow = LeanFlow(transport)  # type: ignore[arg-type]
    await asyncio.wait_for(flow.drain(), 1)  # never paused: nothing to wait for, no event made
    assert flow._event is None
    flow.pause_writing()
    assert flow.write_paused
    waiter = asyncio.ensure_future(flow.drain())
    await asyncio.sleep(0.01)
    assert not waiter.done()
    flow.resume_writing()
    await asyncio.wait_for(waiter, 1)
    assert not flow.write_paused
    await asyncio.wait_for(flow.drain(), 1)
    flow.pause_reading()
    assert flow.read_paused and not transport.reading
    flow.resume_reading()
    assert not flow.read_paused and transport.reading


def test_the_pipeline_answers_its_requests_in_order() -> None:
    pipeline = Pipeline()
    for request in ("first", "second", "third"):
        pipeline.appendleft(request)  # as uvicorn queues a pipelined request
    assert [pipeline.pop() for _ in range(3)] == ["first", "second", "third"]  # as it starts the next
    assert not pipeline

"""Live streams on a Valkey store answered from the instance's replica of the line: as those ahead leave,
each waiting visitor's stream shows the position ``/api/status`` answers, and a visitor whose own place
changed (sent to the back) is read from the store again.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import httpx
import pytest
from harness import Server, create_room, iter_sse, join, status

pytestmark = pytest.mark.stores("valkey")  # the replica is the Valkey store's; memory answers in-process


def _frames(r: httpx.Response) -> Iterator[dict[str, Any]]:
    for frame in iter_sse(r):
        if "data" in frame and frame.get("event") == "message":
            yield json.loads(frame["data"])


def _until(frames: Iterator[dict[str, Any]], position: int) -> dict[str, Any]:
    """The stream's next frame showing ``position`` (earlier rounds may still show the last one)."""
    frame = next(frames)
    while frame["position"] != position:
        frame = next(frames)
    return frame


def _same(frame: dict[str, Any], answer: dict[str, Any]) -> None:
    """A frame is the body ``/api/status`` answers (its token re-signed, its ``now`` its own, the rest equal)."""
    own = ("token", "now")
    assert {k: v for k, v in frame.items() if k not in own} == {k: v for k, v in answer.items() if k not in own}


def test_stream_positions_follow_the_line_as_others_leave(server: Server, admin: httpx.Client) -> None:
    rid = create_room(admin, ratePerMinute=0, queueMaxPerIp=None)["id"]
    count = 6
    with ExitStack() as stack:
        visitors = [stack.enter_context(server.client()) for _ in range(count)]
        tickets = [join(v, rid).json() for v in visitors]
        assert [t["position"] for t in tickets] == list(range(1, count + 1))
        streams: list[Iterator[dict[str, Any]]] = []
        for v, t in zip(visitors[2:], tickets[2:], strict=True):
            request = v.build_request(
                "GET", "/events", params={"roomId": rid, "token": t["token"]}, timeout=httpx.Timeout(5.0, read=5.0)
            )
            r = v.send(request, stream=True)
            stack.callback(r.close)
            assert r.status_code == 200
            streams.append(_frames(r))
        for s, t in zip(streams, tickets[2:], strict=True):
            assert next(s)["position"] == t["position"]
        # the two ahead are sent to the back, one after the other: everyone streaming moves up
        for left in (1, 2):
            r = admin.post(f"/api/admin/rooms/{rid}/eject", json={"ticket": tickets[left - 1]["ticket"]})
            assert r.status_code == 200, r.text
            for s, v, t in zip(streams, visitors[2:], tickets[2:], strict=True):
                frame = _until(s, t["position"] - left)
                _same(frame, status(v, rid, t["token"]))
        # a streaming visitor sent to the back: its next frames are the store's (its place changed)
        r = admin.post(f"/api/admin/rooms/{rid}/eject", json={"ticket": tickets[2]["ticket"]})
        assert r.status_code == 200, r.text
        frame = _until(streams[0], count)
        assert frame["reason"] == "ejected"
        _same(frame, status(visitors[2], rid, tickets[2]["token"]))
        for s, v, t in zip(streams[1:], visitors[3:], tickets[3:], strict=True):
            frame = _until(s, t["position"] - 3)
            _same(frame, status(v, rid, t["token"]))

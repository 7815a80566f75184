"""Several live streams of one room: each frame of a round is its own visitor's, on every store.

On a store over the network the room's streams are read together (one batched status read per round);
each stream must still get the body ``/api/status`` would answer it, in its own place.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack

import httpx
from harness import Server, create_room, iter_sse, join


def _frames(r: httpx.Response) -> Iterator[dict[str, object]]:
    for frame in iter_sse(r):
        if "data" in frame and frame.get("event") == "message":
            yield json.loads(frame["data"])


def test_every_stream_of_a_room_gets_its_own_frame_each_round(server: Server, admin: httpx.Client) -> None:
    rid = create_room(admin, ratePerMinute=0)["id"]
    count = 6
    with ExitStack() as stack:
        visitors = [stack.enter_context(server.client()) for _ in range(count)]
        tickets = [join(v, rid).json() for v in visitors]
        streams = []
        for v, p in zip(visitors, tickets, strict=True):
            request = v.build_request(
                "GET", "/events", params={"roomId": rid, "token": p["token"]}, timeout=httpx.Timeout(5.0, read=5.0)
            )
            r = v.send(request, stream=True)
            stack.callback(r.close)
            assert r.status_code == 200
            streams.append(_frames(r))
        firsts = [next(s) for s in streams]
        # a change of the room: every stream gets a frame in the next round, the newcomer is last in line
        late = stack.enter_context(server.client())
        assert join(late, rid).status_code == 200
        seconds = [next(s) for s in streams]
        for p, first, second in zip(tickets, firsts, seconds, strict=True):
            for frame in (first, second):
                assert (frame["ticket"], frame["position"], frame["state"]) == (p["ticket"], p["position"], "waiting")
        assert [p["position"] for p in tickets] == list(range(1, count + 1))

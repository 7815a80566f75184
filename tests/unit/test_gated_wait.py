"""Whether a request asks for JSON (negotiate.wants_json), and the gated wait's state from a refusal."""

from __future__ import annotations

import pytest

from queue_manager.engine.view import VisitorView
from queue_manager.http.negotiate import wants_json
from queue_manager.services import gated_wait

BROWSER = b"text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({b"accept": b"application/json"}, True),
        ({b"accept": b"application/json, text/plain, */*"}, True),  # what axios sends
        ({b"accept": b"text/html;q=0.5, application/json"}, True),
        ({b"accept": b"application/json, text/html"}, False),  # a tie goes to the page
        ({b"accept": b"application/json;q=0"}, False),
        ({b"accept": BROWSER}, False),
        ({b"accept": b"*/*"}, False),
        ({}, False),
        ({b"x-requested-with": b"XMLHttpRequest", b"accept": BROWSER}, True),
        ({b"x-requested-with": b"com.example.app"}, False),  # Android's WebView names the app here
        ({b"x-qm-accept": b"JSON", b"accept": BROWSER}, True),
        ({b"x-qm-accept": b"html"}, False),
    ],
)
def test_wants_json(headers: dict[bytes, bytes], expected: bool) -> None:
    assert wants_json(headers) is expected


def _view(state: str, room_state: str = "active", position: int | None = None) -> VisitorView:
    return VisitorView(
        room_id="r",
        gen=1,
        state=state,  # type: ignore[arg-type]
        room_state=room_state,  # type: ignore[arg-type]
        target_url="https://shop.example/",
        rate_per_minute=60,
        position=position,
        eta_sec=None if position is None else position,
    )


@pytest.mark.parametrize(
    ("reason", "view", "state"),
    [
        ("no_ticket", None, "not_in_line"),
        ("expired", _view("expired"), "not_in_line"),
        ("waiting", _view("waiting", position=3), "waiting"),
        ("waiting", _view("scheduled"), "scheduled"),
        ("paused", _view("waiting", "paused", 3), "paused"),
        ("paused", _view("passed"), "paused"),
        ("at_capacity", _view("passed"), "passed"),
        ("at_capacity", None, "passed"),
        ("backend_down", None, "backend_down"),
        ("rate_limited", None, "rate_limited"),
    ],
)
def test_state_of(reason: str, view: VisitorView | None, state: str) -> None:
    assert gated_wait.state_of(reason, view) == state
    assert state in gated_wait.STATES


def test_the_body_gives_a_position_only_while_waiting() -> None:
    body = gated_wait.body("r", "waiting", "https://q.example/w/r", _view("waiting", position=3))
    assert (body["state"], body["position"], body["etaSec"], body["retryAfterSec"]) == ("waiting", 3, 3, 5)
    passed = gated_wait.body("r", "at_capacity", None, _view("passed"))
    assert (passed["state"], passed["position"], passed["etaSec"]) == ("passed", None, None)
    down = gated_wait.body("r", "backend_down", None)
    assert (down["code"], down["state"]) == ("storage_unavailable", "backend_down")

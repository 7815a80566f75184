"""Every preview state's synthetic answer is shaped as /api/status answers, so the waiting page renders it as it
renders a real one; the figures asked for are the ones shown."""

from __future__ import annotations

import jsonschema
import pytest

from queue_manager.http.wire import HttpError
from queue_manager.routes import preview
from queue_manager.routes.apidoc.components import VISITOR_STATUS
from queue_manager.web.asset import LANGUAGES

SHOWN = preview.Shown(position=7, wait_sec=420, now_ms=1_767_225_600_000, passed_ttl_sec=300)


@pytest.mark.parametrize("name", [n for n, s in preview.STATES.items() if s.status is not None])
def test_each_synthetic_status_is_a_visitor_status(name: str) -> None:
    status = preview.status_of("shop", preview.STATES[name], SHOWN)
    assert status is not None
    jsonschema.validate(status, VISITOR_STATUS)
    assert status["roomId"] == "shop" and status["now"] == SHOWN.now_ms


def test_the_figures_are_the_ones_shown() -> None:
    waiting = preview.status_of("shop", preview.STATES["waiting"], SHOWN)
    paused = preview.status_of("shop", preview.STATES["paused"], SHOWN)
    scheduled = preview.status_of("shop", preview.STATES["prequeue"], SHOWN)
    turn = preview.status_of("shop", preview.STATES["turn"], SHOWN)
    assert waiting and paused and scheduled and turn
    assert (waiting["position"], waiting["ahead"], waiting["etaSec"], waiting["roomState"]) == (7, 6, 420, "active")
    assert paused["roomState"] == "paused" and paused["state"] == "waiting"
    assert scheduled["opensAt"] == SHOWN.now_ms + 420_000 and scheduled["preCount"] == 7
    assert turn["passExpiresAt"] == SHOWN.now_ms + 300_000 and turn["redirectUrl"] == "#"
    assert preview.status_of("shop", preview.STATES["full"], SHOWN) is None


def test_the_outage_states_are_their_pages() -> None:
    assert {n: s.page for n, s in preview.STATES.items() if s.page != "waiting"} == {
        "origin_down": "origin_down",
        "offline": "offline",
    }


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"state": "nope"}, "invalid_preview_state"),
        ({"state": "waiting", "lang": "xx"}, "invalid_preview_lang"),
        ({"state": "waiting", "position": 0}, "invalid_preview_value"),
        ({"state": "waiting", "waitSec": preview.WAIT_MAX_SEC + 1}, "invalid_preview_value"),
        ({"state": "waiting", "extra": 1}, "unknown_field"),
    ],
)
def test_a_bad_body_names_its_code(body: dict[str, object], code: str) -> None:
    with pytest.raises(HttpError) as caught:
        preview.parse("shop", body)
    assert caught.value.status == 400 and caught.value.code == code


def test_every_language_and_the_defaults() -> None:
    for lang in LANGUAGES:
        assert preview.parse("shop", {"state": "turn", "lang": lang}).lang == lang
    got = preview.parse("shop", {"state": "waiting"})
    assert (got.lang, got.position, got.wait_sec) == ("en", preview.DEFAULT_POSITION, preview.DEFAULT_WAIT_SEC)


def test_a_random_line_shows_its_range_and_odds_at_the_rate_that_clears_it_in_twice_the_wait() -> None:
    shown = preview.Shown(position=120, wait_sec=600, now_ms=1_000, passed_ttl_sec=600)
    status = preview.status_of("shop", preview.STATES["random"], shown)
    assert status is not None and status["queueing"] == "random" and status["waiting"] == 120
    # 120 people cleared in 1,200 s: 6 a minute; the quartile turns 30 and 90 are 300 s and 900 s away
    assert (status["etaLowSec"], status["etaHighSec"], status["nextMinuteOdds"]) == (300, 900, 5)
    closed = preview.status_of("shop", preview.STATES["closed"], shown)
    assert closed is not None and closed["queueing"] == "reject"

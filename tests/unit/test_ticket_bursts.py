"""A burst of refused visitor tickets: one warning per room per minute, with the count and the likely cause."""

from __future__ import annotations

import logging

import pytest

from queue_manager.clock import FakeClock
from queue_manager.services.ticket_bursts import BURST, TicketBursts, likely_cause


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "queue_manager.tickets"]


def test_a_trickle_is_not_a_burst(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    bursts = TicketBursts(clock)
    with caplog.at_level(logging.WARNING):
        for _ in range(BURST * 3):  # one every 20 s: never BURST within a minute
            bursts.note("shop", "expired")
            clock.advance(20.0)
    assert _lines(caplog) == [] and bursts.logged == 0


def test_a_burst_is_logged_once_a_minute_per_room_with_the_count_and_the_cause(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    bursts = TicketBursts(clock)
    with caplog.at_level(logging.WARNING):
        for i in range(BURST - 1):
            bursts.note("shop", "bad_signature" if i else "malformed")
        assert _lines(caplog) == []
        bursts.note("shop", "bad_signature")  # the BURST-th within the minute
        lines = _lines(caplog)
        assert len(lines) == 1
        assert lines[0].startswith(
            f"room shop: {BURST} visitor tickets refused in the last minute (bad_signature {BURST - 1}, malformed 1): "
        )
        assert "SECRET was likely changed without SECRET_PREVIOUS" in lines[0]
        for _ in range(100):  # it goes on: nothing more within the minute
            bursts.note("shop", "bad_signature")
            clock.advance(0.5)
        assert len(_lines(caplog)) == 1
        bursts.note("drop", "future")  # another room is its own
        assert len(_lines(caplog)) == 1  # one refusal there is no burst
        clock.advance(10.0)
        bursts.note("shop", "bad_signature")  # a minute after the first line, still bursting: the next line
        lines = _lines(caplog)
        assert len(lines) == 2 and lines[1].startswith("room shop: ")
        count = int(lines[1].split(": ")[1].split(" ")[0])
        assert count > BURST  # the whole last minute's refusals
    assert bursts.logged == 2


def test_the_window_forgets_refusals_older_than_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    bursts = TicketBursts(clock)
    with caplog.at_level(logging.WARNING):
        for _ in range(BURST - 1):
            bursts.note("shop", "unknown_kid")
        clock.advance(61.0)
        bursts.note("shop", "unknown_kid")
    assert _lines(caplog) == []


def test_each_reason_names_its_likely_cause() -> None:
    assert "SECRET_PREVIOUS" in likely_cause("bad_signature") and "kid" in likely_cause("unknown_kid")
    assert "clock" in likely_cause("future") and "clock" in likely_cause("expired")
    assert "another room" in likely_cause("wrong_room")
    assert "damaged token" in likely_cause("malformed")
    assert likely_cause("wrong_purpose") == likely_cause("malformed")

"""Previews of a room's waiting page: the states a page can be forced into, and the signed link that carries one.

A preview link is a token of its own purpose (``preview``; see tokens.py) holding the room, the state, the language
and the figures to show. It is valid for :data:`LINK_TTL_SEC` from the moment it is made and needs no credential:
whoever holds it sees the page, and nothing else. Opening it reads the room's settings and brand only: no ticket,
no place, no counter, no history row.

:data:`STATES` is the table of states: one entry each, naming the page it is shown on (the waiting page, or one of
the two outage pages) and how the waiting page's synthetic status is built. A new state is one more entry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from queue_manager.engine import release
from queue_manager.engine.model import MAX_RATE_PER_MINUTE
from queue_manager.http.wire import HttpError
from queue_manager.tokens import TokenError, TokenSigner
from queue_manager.web.asset import LANGUAGES

#: how long a preview link opens the page, from the moment it is made
LINK_TTL_SEC: Final = 3600
POSITION_MAX: Final = 1_000_000
WAIT_MAX_SEC: Final = 30 * 86_400
DEFAULT_POSITION: Final = 42
DEFAULT_WAIT_SEC: Final = 900
_FIELDS: Final = frozenset({"state", "lang", "position", "waitSec"})

Page = Literal["waiting", "offline", "origin_down"]


@dataclass(frozen=True, slots=True)
class Shown:
    """What one preview shows: the chosen figures, the server's clock and the room's pass window."""

    position: int
    wait_sec: int
    now_ms: int
    passed_ttl_sec: int


@dataclass(frozen=True, slots=True)
class State:
    """One state a preview can show: the page it is on, and (on the waiting page) the status the page renders;
    ``status`` None on the waiting page means the line-is-full answer, which carries no status."""

    page: Page
    status: Callable[[Shown], dict[str, Any]] | None = None


def _waiting(room_state: str) -> Callable[[Shown], dict[str, Any]]:
    def build(s: Shown) -> dict[str, Any]:
        return {
            "state": "waiting",
            "roomState": room_state,
            "position": s.position,
            "ahead": s.position - 1,
            "etaSec": s.wait_sec,
            "now": s.now_ms,
        }

    return build


def _scheduled(s: Shown) -> dict[str, Any]:
    return {
        "state": "scheduled",
        "roomState": "scheduled",
        "opensAt": s.now_ms + s.wait_sec * 1000,
        "preCount": s.position,
        "now": s.now_ms,
    }


def _random(s: Shown) -> dict[str, Any]:
    """A random line of ``position`` people whose middle wait is ``waitSec``: the rate that clears it in twice
    that, and the range and odds the page shows at that rate (engine/release.py)."""
    rate = max(1, round(s.position * 30 / s.wait_sec)) if s.wait_sec > 0 else MAX_RATE_PER_MINUTE
    span = release.wait_range(s.position, "active", rate)
    return {
        "state": "waiting",
        "roomState": "active",
        "queueing": "random",
        "waiting": s.position,
        "etaLowSec": None if span is None else span[0],
        "etaHighSec": None if span is None else span[1],
        "nextMinuteOdds": release.next_minute_odds(s.position, "active", rate),
        "now": s.now_ms,
    }


def _closed(s: Shown) -> dict[str, Any]:
    # a closed room (queueing reject): the page shows its closed state whatever the figures
    return {"state": "waiting", "roomState": "active", "queueing": "reject", "now": s.now_ms}


def _turn(s: Shown) -> dict[str, Any]:
    # "#" keeps the page's Continue button: a preview never leads anywhere
    return {
        "state": "passed",
        "roomState": "active",
        "passExpiresAt": s.now_ms + s.passed_ttl_sec * 1000,
        "redirectUrl": "#",
        "now": s.now_ms,
    }


#: every state a preview can show, by the name the API takes
STATES: Final[Mapping[str, State]] = {
    "waiting": State("waiting", _waiting("active")),
    "random": State("waiting", _random),
    "prequeue": State("waiting", _scheduled),
    "turn": State("waiting", _turn),
    "paused": State("waiting", _waiting("paused")),
    "full": State("waiting", None),
    "closed": State("waiting", _closed),
    "origin_down": State("origin_down"),
    "offline": State("offline"),
}


def status_of(room_id: str, state: State, shown: Shown) -> dict[str, Any] | None:
    """The answer the waiting page renders for ``state``, shaped as /api/status answers (None: the line is full)."""
    return None if state.status is None else {"roomId": room_id, **state.status(shown)}


@dataclass(frozen=True, slots=True)
class Preview:
    room_id: str
    state: str
    lang: str
    position: int
    wait_sec: int


def _whole(body: Mapping[str, Any], name: str, default: int, low: int, high: int) -> int:
    value = body.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise HttpError(
            400,
            "invalid_preview_value",
            f"{name} must be a whole number from {low:,} to {high:,}.",
            field=name,
        )
    return value


def parse(room_id: str, body: Mapping[str, Any]) -> Preview:
    """The preview a request body asks for, or a 400 naming what is wrong."""
    unknown = sorted(set(body) - _FIELDS)
    if unknown:
        raise HttpError(400, "unknown_field", "A preview takes state, lang, position and waitSec.", fields=unknown[:20])
    state = body.get("state")
    if not isinstance(state, str) or state not in STATES:
        raise HttpError(400, "invalid_preview_state", f"state must be one of {', '.join(STATES)}.", field="state")
    lang = body.get("lang", "en")
    if not isinstance(lang, str) or lang not in LANGUAGES:
        raise HttpError(400, "invalid_preview_lang", f"lang must be one of {', '.join(LANGUAGES)}.", field="lang")
    position = _whole(body, "position", DEFAULT_POSITION, 1, POSITION_MAX)
    wait_sec = _whole(body, "waitSec", DEFAULT_WAIT_SEC, 0, WAIT_MAX_SEC)
    return Preview(room_id, state, lang, position, wait_sec)


def sign(signer: TokenSigner, preview: Preview) -> tuple[str, int]:
    """The link's token and the instant it stops opening the page (ms since the epoch)."""
    token = signer.sign(
        {
            "t": "pv",
            "r": preview.room_id,
            "s": preview.state,
            "l": preview.lang,
            "p": preview.position,
            "w": preview.wait_sec,
        },
        "preview",
    )
    iat = signer.verify(token, "preview", max_age_sec=LINK_TTL_SEC)["iat"]
    return token, int(iat) + LINK_TTL_SEC * 1000


def read(signer: TokenSigner, token: str) -> Preview:
    """The preview a link's token carries; 410 ``preview_expired`` past its hour, 403 ``invalid_preview_link``
    for anything not made by this server as a preview link."""
    try:
        data = signer.verify(token, "preview", max_age_sec=LINK_TTL_SEC)
    except TokenError as err:
        if err.reason == "expired":
            raise HttpError(410, "preview_expired", "This preview link has expired: make a new one.") from None
        raise HttpError(403, "invalid_preview_link", "This is not a valid preview link.") from None
    room, state, lang, position, wait = (data.get(k) for k in ("r", "s", "l", "p", "w"))
    if (
        data.get("t") != "pv"
        or not isinstance(room, str)
        or not isinstance(state, str)
        or state not in STATES
        or not isinstance(lang, str)
        or lang not in LANGUAGES
        or not isinstance(position, int)
        or isinstance(position, bool)
        or not isinstance(wait, int)
        or isinstance(wait, bool)
    ):
        raise HttpError(403, "invalid_preview_link", "This is not a valid preview link.")
    return Preview(room, state, lang, position, wait)

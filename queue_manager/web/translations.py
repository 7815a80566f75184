"""The visitor pages' text in every language: one file per language, web/i18n/<tag>.json.

Each file has the same sections (the waiting page, the two outage pages, the throttled navigation's page, the
access refusal, the turn e-mail) and the same keys in each; tests/unit/test_translations.py fails on a missing or
extra key or a changed placeholder. The order below is the picker's when a room does not set its own
(engine/languages.py keeps the same list for the room's ``languages`` field)."""

from __future__ import annotations

from functools import cache
from importlib import resources

import orjson

LANGUAGES = (
    "en",
    "th",
    "es",
    "ja",
    "de",
    "fr",
    "it",
    "pt-BR",
    "nl",
    "sv",
    "pl",
    "tr",
    "ru",
    "uk",
    "ar",
    "he",
    "hi",
    "id",
    "vi",
    "zh-Hans",
    "zh-Hant",
    "ko",
)

#: the languages written right to left: their pages carry dir="rtl"
RTL = frozenset({"ar", "he"})

SECTIONS = ("waiting", "offline", "originDown", "refusal", "blocked", "letter")


def direction(tag: str) -> str:
    """``rtl`` or ``ltr``: the value of the page's dir attribute."""
    return "rtl" if tag in RTL else "ltr"


@cache
def language_file(tag: str) -> dict[str, dict[str, str]]:
    """web/i18n/<tag>.json: every section of one language."""
    raw = resources.files("queue_manager.web").joinpath("i18n", f"{tag}.json").read_bytes()
    data: dict[str, dict[str, str]] = orjson.loads(raw)
    return data


@cache
def section(name: str) -> dict[str, dict[str, str]]:
    """One section in every language, keyed by language tag (in LANGUAGES order)."""
    return {tag: language_file(tag)[name] for tag in LANGUAGES}

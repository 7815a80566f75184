"""Which of the pages' languages a visitor's tag means, and the pick from an Accept-Language list (pure)."""

from __future__ import annotations

import pytest

from queue_manager.engine import languages
from queue_manager.engine.errors import EngineError
from queue_manager.http.negotiate import weighted


@pytest.mark.parametrize(
    ("tag", "found"),
    [
        ("en", "en"),
        ("EN-gb", "en"),
        ("pt-PT", "pt-BR"),
        ("pt", "pt-BR"),
        ("pt_br", "pt-BR"),
        ("zh-TW", "zh-Hant"),
        ("zh-HK", "zh-Hant"),
        ("zh-Hant-CN", "zh-Hant"),
        ("zh-CN", "zh-Hans"),
        ("zh-Hans-TW", "zh-Hans"),
        ("zh", "zh-Hans"),
        ("iw", "he"),
        ("in-ID", "id"),
        ("de-CH", "de"),
        ("xx", None),
        ("*", None),
        ("", None),
    ],
)
def test_a_tag_finds_its_language(tag: str, found: str | None) -> None:
    assert languages.match(tag) == found


def test_a_chinese_visitor_gets_the_other_script_rather_than_none() -> None:
    assert languages.match("zh-TW", ("en", "zh-Hans")) == "zh-Hans"
    assert languages.match("zh-CN", ("zh-Hant", "en")) == "zh-Hant"


@pytest.mark.parametrize(
    ("header", "offered", "lang"),
    [
        ("fr-CH, fr;q=0.9, en;q=0.8", languages.LANGUAGES, "fr"),
        ("xx, de;q=0.5, ja;q=0.7", languages.LANGUAGES, "ja"),
        ("de;q=0.5, ja;q=0.5", languages.LANGUAGES, "de"),
        ("xx, yy", languages.LANGUAGES, "en"),
        ("ar;q=0, he", languages.LANGUAGES, "he"),
        ("ja, ko", ("de", "fr"), "de"),
        ("ja, fr-BE;q=0.3", ("de", "fr"), "fr"),
        (None, ("ko", "en"), "ko"),
    ],
)
def test_the_pick_from_accept_language(header: str | None, offered: tuple[str, ...], lang: str) -> None:
    assert languages.pick(weighted(header), offered) == lang


def test_a_rooms_languages_are_checked() -> None:
    assert languages.parse_languages(["DE", "zh-hant", "ar"]) == ("de", "zh-Hant", "ar")
    assert languages.parse_languages(None) == () and languages.parse_languages([]) == ()
    for bad in (["xx"], ["de", "DE"], "de", [None], {"de": 1}, ["en"] * 23):
        with pytest.raises(EngineError) as err:
            languages.parse_languages(bad)
        assert err.value.code == "invalid_languages"

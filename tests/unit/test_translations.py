"""Every language of the visitor pages says every thing: web/i18n/<tag>.json has the sections and keys of
en.json, no other, each a non-empty string with the same {placeholders}; and the language lists agree."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from queue_manager.engine import languages
from queue_manager.web import translations

PLACEHOLDER = re.compile(r"\{(\w+)\}")
#: the words around the place number: a language that says it all before the number leaves the after-part empty
MAY_BE_EMPTY = frozenset({"posBefore", "posAfter"})
ENGLISH = translations.language_file("en")


def test_the_engine_and_the_pages_list_the_same_languages() -> None:
    assert languages.LANGUAGES == translations.LANGUAGES
    assert len(translations.LANGUAGES) >= 20
    assert translations.RTL <= set(translations.LANGUAGES)


def test_every_file_is_listed_and_every_listed_language_has_a_file() -> None:
    folder = resources.files("queue_manager.web").joinpath("i18n")
    files = {p.name.removesuffix(".json") for p in folder.iterdir() if p.name.endswith(".json")}
    assert files == set(translations.LANGUAGES)


def test_english_has_every_section() -> None:
    assert tuple(ENGLISH) == translations.SECTIONS


@pytest.mark.parametrize("tag", translations.LANGUAGES)
def test_a_language_has_every_key_and_no_other(tag: str) -> None:
    table = translations.language_file(tag)
    assert set(table) == set(ENGLISH), f"{tag}.json: sections differ from en.json"
    for section, english in ENGLISH.items():
        missing = sorted(set(english) - set(table[section]))
        extra = sorted(set(table[section]) - set(english))
        assert not missing, f"{tag}.json [{section}] misses {missing}"
        assert not extra, f"{tag}.json [{section}] has keys English lacks: {extra}"


@pytest.mark.parametrize("tag", translations.LANGUAGES)
def test_a_language_keeps_every_placeholder(tag: str) -> None:
    table = translations.language_file(tag)
    for section, english in ENGLISH.items():
        for key, text in english.items():
            said = table[section][key]
            assert isinstance(said, str), f"{tag}.json [{section}] {key} is not text"
            assert said.strip() or key in MAY_BE_EMPTY, f"{tag}.json [{section}] {key} is empty"
            assert sorted(PLACEHOLDER.findall(said)) == sorted(PLACEHOLDER.findall(text)), (
                f"{tag}.json [{section}] {key}: placeholders {PLACEHOLDER.findall(said)} "
                f"where English has {PLACEHOLDER.findall(text)}"
            )
            assert "<" not in said or "<" in text, f"{tag}.json [{section}] {key} adds markup"


def test_each_language_is_named_in_its_own_words() -> None:
    names = [translations.language_file(tag)["waiting"]["langName"] for tag in translations.LANGUAGES]
    assert len(set(names)) == len(names)
    assert translations.language_file("ar")["waiting"]["langName"] == "العربية"


def test_the_check_catches_a_missing_key(monkeypatch: pytest.MonkeyPatch) -> None:
    broken = {s: dict(v) for s, v in translations.language_file("fr").items()}
    del broken["waiting"]["lead"]
    monkeypatch.setattr(translations, "language_file", lambda tag: broken if tag == "fr" else ENGLISH)
    with pytest.raises(AssertionError, match="misses"):
        test_a_language_has_every_key_and_no_other("fr")

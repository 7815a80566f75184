"""The languages the visitor pages speak, and which of them a visitor's language tag means (pure).

The list is the same as web/translations.py's (a unit test holds the two equal): the engine checks a room's
``languages`` field and a brand message's keys against it; the HTTP layer picks a page's language with
``match`` and ``pick``."""

from __future__ import annotations

from typing import Any

from queue_manager.engine.errors import bad_field

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

_CANONICAL = {tag.lower(): tag for tag in LANGUAGES}
#: Chinese regions written in traditional characters; every other Chinese tag without a script means simplified
_TRADITIONAL_REGIONS = frozenset({"tw", "hk", "mo"})
#: retired primary subtags browsers still send
_RETIRED = {"iw": "he", "in": "id"}


def canonical(tag: str) -> str | None:
    """One of LANGUAGES spelt as listed when ``tag`` names it exactly (any case), else None."""
    return _CANONICAL.get(tag.strip().lower())


def _preferred(tag: str) -> str:
    """The tag a visitor's tag stands for among ours, before checking what a room offers."""
    parts = tag.strip().lower().replace("_", "-").split("-")
    primary = _RETIRED.get(parts[0], parts[0])
    if primary == "zh":
        if "hant" in parts[1:] or (("hans" not in parts[1:]) and _TRADITIONAL_REGIONS & set(parts[1:])):
            return "zh-hant"
        return "zh-hans"
    return "-".join([primary, *parts[1:]])


def match(tag: str, offered: tuple[str, ...] = LANGUAGES) -> str | None:
    """The language of ``offered`` a visitor's tag asks for: the same tag, else the same language in another
    region or script (pt-PT → pt-BR, zh-TW → zh-Hant, zh-CN → zh-Hans, de-AT → de), else None."""
    wanted = _preferred(tag)
    by_lower = {o.lower(): o for o in offered}
    if wanted in by_lower:
        return by_lower[wanted]
    primary = wanted.split("-")[0]
    if not primary or primary == "*":
        return None
    return next((o for o in offered if o.lower().split("-")[0] == primary), None)


def pick(weighted: list[tuple[str, float]], offered: tuple[str, ...] = LANGUAGES) -> str:
    """The page's language from Accept-Language's (tag, q) list: the best-weighted tag that ``match``es, the first
    listed among equal weights; else the first of ``offered`` (the room's default)."""
    best: str | None = None
    best_q = 0.0
    for position, (tag, q) in enumerate(weighted):
        found = match(tag, offered)
        weight = q - position * 1e-6  # equal weights: the first listed wins
        if found is not None and q > 0 and weight > best_q:
            best, best_q = found, weight
    return best if best is not None else offered[0]


def parse_languages(value: Any) -> tuple[str, ...]:
    """A room's ``languages``: a list of our language tags, each once (any case; kept as listed here), in the
    room's order; an empty list (or null) offers them all. 400 ``invalid_languages`` otherwise."""
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > len(LANGUAGES):
        raise bad_field(
            "languages", f"languages must be a list of at most {len(LANGUAGES)} language tags.", "invalid_languages"
        )
    tags: list[str] = []
    for item in value:
        tag = canonical(item) if isinstance(item, str) else None
        if tag is None:
            raise bad_field(
                "languages",
                f"languages has {item!r}, which the visitor pages do not speak; they speak {', '.join(LANGUAGES)}.",
                "invalid_languages",
            )
        if tag in tags:
            raise bad_field("languages", f"languages lists {tag} twice.", "invalid_languages")
        tags.append(tag)
    return tuple(tags)


def offered(languages: tuple[str, ...]) -> tuple[str, ...]:
    """The languages a room's pages offer, in its order: its ``languages``, or all of them when it sets none."""
    return languages or LANGUAGES

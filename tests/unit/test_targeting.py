"""URL targeting: the ``*`` glob, anchoring, case, path vs full-URL patterns, and patterns that would
make a backtracking matcher run for minutes."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from queue_manager.engine.targeting import glob_match, match, parse_rules

# The attack: each extra pair of characters in the URL multiplied a regex's work by about 2.2.
ATTACK = "/*a*a*a*a*a*a*a*a*a*a*a*a*b"


def regex_oracle(pattern: str) -> re.Pattern[str]:
    """The matcher this module used to be: one ``.*`` per ``*``, anchored at both ends."""
    return re.compile("^" + ".*".join(re.escape(part) for part in pattern.split("*")) + "$")


def oracle_match(patterns: list[str], url: str) -> int | None:
    """The index of the first pattern the regex matcher accepted for ``url``, as ``match`` used to."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    path = parts.path or "/"
    full = f"{parts.scheme}://{parts.netloc.lower()}{path}"
    for i, pattern in enumerate(patterns):
        if regex_oracle(pattern).match(path if pattern.startswith("/") else full):
            return i
    return None


def pieces(pattern: str) -> tuple[str, ...]:
    return tuple(pattern.split("*"))


@pytest.mark.parametrize(
    ("pattern", "text", "expected"),
    [
        ("abc", "abc", True),
        ("abc", "abcd", False),  # anchored at the end
        ("abc", "xabc", False),  # and at the start
        ("ABC", "abc", False),  # case counts
        ("*", "", True),
        ("*", "anything/at?all", True),
        ("**", "", True),
        ("a*", "a", True),
        ("*a", "a", True),
        ("a*a", "a", False),  # the prefix and the suffix may not overlap
        ("a*a", "aa", True),
        ("a*b*c", "abc", True),
        ("a*b*c", "axxbyyc", True),
        ("a*b*c", "acb", False),
        ("a*ab*b", "aabb", True),
        ("a*ab*b", "aab", False),
        ("/checkout*", "/checkout/1", True),
        ("/static/*", "/static", False),
        ("/a.b", "/axb", False),  # every character but * is literal
        ("/a?b", "/a?b", True),
        ("/a*", "/a*", True),
    ],
)
def test_glob_match(pattern: str, text: str, expected: bool) -> None:
    assert glob_match(pieces(pattern), text) is expected
    assert bool(regex_oracle(pattern).match(text)) is expected


_PATTERN_CHARS = st.sampled_from(["a", "b", "*", "/", ".", "?", "\\", "A", "é"])
_TEXT_CHARS = st.sampled_from(["a", "b", "*", "/", ".", "?", "\\", "A", "é"])


@settings(max_examples=2000, deadline=None)
@given(pattern=st.text(_PATTERN_CHARS, max_size=10), text=st.text(_TEXT_CHARS, max_size=14))
def test_glob_match_agrees_with_the_regex(pattern: str, text: str) -> None:
    assert glob_match(pieces(pattern), text) is bool(regex_oracle(pattern).match(text))


_URL = st.builds(
    lambda scheme, host, path: f"{scheme}://{host}{path}",
    st.sampled_from(["https", "http", "HTTPS"]),
    st.sampled_from(["shop.example", "Shop.Example", "shop.example:8443", "a.b"]),
    st.text(st.sampled_from(["/", "a", "b", "*", "?", "#", ".", "\n", "\t", "%", "A"]), max_size=12),
)
_RULE_PATTERN = st.one_of(
    st.text(st.sampled_from(["/", "a", "b", "*", "A", "?", "."]), min_size=1, max_size=8),
    st.builds(
        lambda host, tail: f"https://{host}{tail}",
        st.sampled_from(["shop.example", "Shop.Example", "*", "shop.example:8443"]),
        st.text(st.sampled_from(["/", "a", "b", "*", "A"]), max_size=6),
    ),
)


@settings(max_examples=1000, deadline=None)
@given(patterns=st.lists(_RULE_PATTERN, min_size=1, max_size=4), url=_URL)
def test_match_agrees_with_the_regex_matcher(patterns: list[str], url: str) -> None:
    rules = parse_rules([{"pattern": p, "id": f"r{i}"} for i, p in enumerate(patterns)])
    got = match(rules, url)
    want = oracle_match(patterns, url)
    assert (None if got is None else int(got.id[1:])) == want


def test_path_and_full_url_patterns() -> None:
    rules = parse_rules(
        [
            {"pattern": "/static/*", "action": "skip", "id": "static"},
            {"pattern": "https://shop.example/checkout*", "id": "checkout"},
        ]
    )
    assert (r := match(rules, "https://shop.example/static/app.js")) is not None and r.id == "static"
    assert (r := match(rules, "https://SHOP.example/checkout/1?x=1#y")) is not None and r.id == "checkout"
    assert match(rules, "http://shop.example/checkout/1") is None
    assert match(rules, "https://shop.example/Checkout/1") is None
    assert match(rules, "https://other.example/checkout") is None


@pytest.mark.parametrize("pattern", [ATTACK, "https://shop.example" + ATTACK, "/" + "*a" * 249 + "b"])
def test_a_pattern_built_to_backtrack_finishes_on_a_long_url(pattern: str) -> None:
    rules = parse_rules([{"pattern": pattern}] * 100)
    assert match(rules, "https://shop.example/" + "a" * 10_000) is None
    assert match(rules, "https://shop.example/" + "a" * 10_000 + "b") is rules[0]

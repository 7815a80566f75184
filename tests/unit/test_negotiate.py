"""Accept-Encoding / Accept-Language lists, read one way for every page."""

from __future__ import annotations

from queue_manager.http.negotiate import MAX_ITEMS, accepts, weighted


def test_weighted_keeps_order_lowercases_and_defaults_q() -> None:
    assert weighted("BR;q=1, gzip;Q=0.5 , *;q=0") == [("br", 1.0), ("gzip", 0.5), ("*", 0.0)]
    assert weighted("th-TH,en;q=0.8") == [("th-th", 1.0), ("en", 0.8)]
    assert weighted(None) == [] and weighted("") == []


def test_an_unreadable_q_refuses() -> None:
    assert weighted("gzip;q=lots") == [("gzip", 0.0)]
    assert not accepts("gzip;q=lots", "gzip")


def test_accepts_by_name_then_by_star() -> None:
    assert accepts("gzip, deflate", "gzip")
    assert not accepts("gzip;q=0, *", "gzip")  # named refusal beats the wildcard
    assert accepts("*;q=0, gzip", "gzip")  # named acceptance beats a wildcard refusal
    assert accepts("*", "br")
    assert not accepts("identity", "gzip")
    assert not accepts(None, "gzip")


def test_a_fuzzer_length_header_is_cut() -> None:
    assert len(weighted(",".join(f"x{i}" for i in range(1000)))) == MAX_ITEMS


def test_if_none_match_weak_strong_star_and_lists() -> None:
    from queue_manager.http.negotiate import etag_matches

    assert etag_matches(b'"a"', b'"a"')
    assert etag_matches(b'W/"a"', b'"a"')
    assert etag_matches(b'"x", W/"b"', b'"a"', b'"b"')
    assert etag_matches(b"*", b'"a"')
    assert not etag_matches(b'"x"', b'"a"')
    assert not etag_matches(None, b'"a"') and not etag_matches(b"", b'"a"')

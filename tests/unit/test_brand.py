"""A room's brand, in the engine: WCAG contrast figures, the text colour it picks, the merge, and the
logo rebuild (what it keeps, and that a rebuilt SVG rebuilds to itself)."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from queue_manager.engine.brand import LANGUAGES, Brand, apply_brand, best_text, contrast
from queue_manager.engine.errors import EngineError
from queue_manager.engine.logo import SVG_TYPE, sanitise
from queue_manager.web import asset

colours = st.integers(0, 0xFFFFFF).map(lambda n: f"#{n:06x}")


@pytest.mark.parametrize(
    ("a", "b", "ratio"),
    [
        ("#000000", "#ffffff", 21.0),
        ("#ffffff", "#ffffff", 1.0),
        ("#777777", "#ffffff", 4.48),  # the classic grey that just misses AA
        ("#767676", "#ffffff", 4.54),  # and the one that just makes it
        ("#1d4ed8", "#ffffff", 6.70),
    ],
)
def test_contrast_ratios_match_the_wcag_figures(a: str, b: str, ratio: float) -> None:
    assert round(contrast(a, b), 2) == ratio
    assert contrast(a, b) == contrast(b, a)


@given(colours)
def test_the_text_colour_picked_always_reads_at_aa(background: str) -> None:
    assert contrast(best_text(background), background) >= 4.58


@given(colours, colours)
def test_a_brand_with_colours_is_accepted_exactly_when_its_accent_reads_at_aa(bg: str, accent: str) -> None:
    try:
        brand = apply_brand(None, {"background": bg, "accent": accent})
    except EngineError as err:
        assert err.code == "low_contrast" and err.extra["ratio"] < 4.5
        return
    assert brand is not None and brand.palette is not None
    assert contrast(accent, bg) >= 4.5 and contrast(accent, brand.palette["card"]) >= 4.5


def test_an_accent_just_under_aa_is_never_reported_as_reaching_it() -> None:
    """A ratio of 4.4996 rounds to 4.50: the refusal shows it rounded down, so it never reads as the minimum."""
    with pytest.raises(EngineError) as caught:
        apply_brand(None, {"background": "#000000", "accent": "#bb5635"})
    assert caught.value.code == "low_contrast" and caught.value.extra["ratio"] == 4.49
    assert "4.49:1" in str(caught.value)


def test_the_engine_speaks_the_waiting_pages_languages() -> None:
    assert asset.LANGUAGES == LANGUAGES


def test_a_change_merges_and_null_clears() -> None:
    first = apply_brand(None, {"displayName": "Acme", "message": {"en": "Hi", "th": "สวัสดี"}})
    assert first == Brand(display_name="Acme", message=(("en", "Hi"), ("th", "สวัสดี")))
    second = apply_brand(first, {"helpUrl": "https://acme.example/help"})
    assert second is not None and second.display_name == "Acme" and second.help_url == "https://acme.example/help"
    assert second.fingerprint != first.fingerprint  # type: ignore[union-attr]
    third = apply_brand(second, {"displayName": None, "message": None, "helpUrl": None})
    assert third is None  # nothing left: no brand


SVG = (
    b'<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" '
    b'xmlns:sodipodi="http://sodipodi.sourceforge.net/DTD/sodipodi-0.dtd" width="10" height="10" foo="bar">'
    b"<metadata><x/></metadata><sodipodi:namedview/><style>.a{fill:url(#g)}</style>"
    b'<g class="a" transform="scale(2)"><text x="1" xml:space="preserve">A &amp; <tspan>B</tspan> C</text>'
    b'<use xlink:href="#g"/></g></svg>'
)


def test_an_svg_is_rebuilt_from_the_allow_list_and_the_rebuild_is_a_fixed_point() -> None:
    clean = sanitise(SVG_TYPE, SVG)
    assert clean == (
        b'<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><style>.a{fill:url(#g)}</style>'
        b'<g class="a" transform="scale(2)"><text x="1" xml:space="preserve">A &amp; <tspan>B</tspan> C</text>'
        b'<use href="#g"></use></g></svg>'
    )
    assert sanitise(SVG_TYPE, clean) == clean
    stored = apply_brand(None, {"logo": {"type": SVG_TYPE, "data": base64.b64encode(SVG).decode()}})
    assert stored is not None and stored.logo is not None and stored.logo.data == clean


@pytest.mark.parametrize(
    "body",
    [
        b'<svg xmlns="http://www.w3.org/2000/svg"><a href="#x"><rect/></a></svg>',
        b'<svg xmlns="http://www.w3.org/2000/svg"><set attributeName="href" to="https://e.example"/></svg>',
        b'<svg xmlns="http://www.w3.org/2000/svg"><image href="data:image/png;base64,AAAA"/></svg>',
        b'<svg xmlns="http://www.w3.org/2000/svg"><rect ONCLICK="x()"/></svg>',
        b'<svg xmlns="http://www.w3.org/2000/svg"><style>.a{background:u\\72l(https://e.example)}</style></svg>',
        b'<svg xmlns="http://www.w3.org/2000/svg"><rect fill="url( \'https://e.example/#a\' )"/></svg>',
        b'<svg xmlns="http://www.w3.org/2000/svg">'
        b'<style>g{background:image-set("https://e.example/a.png" 1x)}</style></svg>',
        b'<?xml-stylesheet href="https://e.example/a.css"?><svg xmlns="http://www.w3.org/2000/svg">'
        b'<use href=" javascript:alert(1)"/></svg>',
    ],
)
def test_what_could_run_or_load_something_is_refused(body: bytes) -> None:
    with pytest.raises(EngineError) as info:
        sanitise(SVG_TYPE, body)
    assert info.value.code == "bad_logo"

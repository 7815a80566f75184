"""The Thai guides keep up with the English ones, and every link inside the rendered docs lands somewhere.

A section added to docs/OPERATIONS.md or docs/INTEGRATION.md fails this test until docs/th/ has it too.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

from queue_manager.web.docs import render

DOCS = Path(__file__).resolve().parents[2] / "docs"
TRANSLATED = ("OPERATIONS.md", "INTEGRATION.md")
_HREF = re.compile(r'href="([^"]*)"')


def _rendered(folder: str, file: str) -> render.Rendered:
    path = DOCS / folder / file if folder else DOCS / file
    return render.render_markdown(path.read_text(encoding="utf-8"), folder, "th" if folder else "en")


def _outline(doc: render.Rendered) -> list[int]:
    return [h.level for h in doc.headings]


@pytest.mark.parametrize("file", TRANSLATED)
def test_thai_guide_has_every_english_section(file: str) -> None:
    english, thai = _rendered("", file), _rendered("th", file)
    for level in (2, 3):
        en = [h.text for h in english.headings if h.level == level]
        th = [h.text for h in thai.headings if h.level == level]
        assert len(th) == len(en), (
            f"docs/th/{file} has {len(th)} level-{level} sections and docs/{file} has {len(en)}: translate the "
            f"English sections it lacks (English: {en}; Thai: {th})"
        )
    assert _outline(thai) == _outline(english), f"docs/th/{file} has its sections in another order or nesting"


@pytest.mark.parametrize("file", TRANSLATED)
def test_thai_guide_has_as_many_tables_and_code_blocks(file: str) -> None:
    """Code is kept as it is and every table translated: a block added to an English section shows here."""
    english, thai = _rendered("", file).body, _rendered("th", file).body
    for mark, what in (('<div class="table-wrap"', "tables"), ("<pre ", "code blocks")):
        assert thai.count(mark) == english.count(mark), f"docs/th/{file} and docs/{file} differ in {what}"


@pytest.mark.parametrize("file", TRANSLATED)
def test_thai_guide_names_the_english_revision_it_follows(file: str) -> None:
    head = (DOCS / "th" / file).read_text(encoding="utf-8")[:600]
    assert re.search(rf"`docs/{re.escape(file)}`.*revision `[0-9a-f]{{7,40}}`", head), head


def _targets() -> list[tuple[str, str]]:
    pairs = [("", file) for file in render.GUIDES.values() if (DOCS / file).exists()]
    return pairs + [("th", file) for file in TRANSLATED]


@pytest.mark.parametrize(("folder", "file"), _targets())
def test_every_link_in_a_rendered_guide_resolves(folder: str, file: str) -> None:
    """In-page anchors name a heading; links to other guides name a served page and one of its headings."""
    doc = _rendered(folder, file)
    for href in _HREF.findall(doc.body):
        href = unquote(href.replace("&amp;", "&"))
        if href.startswith(("http://", "https://", "mailto:")):
            continue
        page, _, frag = href.partition("#")
        if not page:
            target = doc
        else:
            m = re.fullmatch(r"/docs(/th)?/([a-z]+)", page)
            assert m, f"{folder}/{file}: link {href!r} goes nowhere on the docs site"
            name = m.group(2)
            assert name in render.GUIDES, f"{folder}/{file}: {href!r} names no guide"
            th = m.group(1) is not None and (DOCS / "th" / render.GUIDES[name]).exists()
            target = _rendered("th" if th else "", render.GUIDES[name])
        if frag:
            assert frag in {h.slug for h in target.headings}, f"{folder}/{file}: anchor {href!r} names no heading"


def test_links_between_guides_are_rewritten_to_site_urls() -> None:
    assert render.site_href("INTEGRATION.md#staying-present", "") == "/docs/integration#staying-present"
    assert render.site_href("./configuration.md", "") == "/docs/configuration"
    assert render.site_href("OPERATIONS.md", "th") == "/docs/th/operations"
    assert render.site_href("../configuration.md", "th") == "/docs/configuration"
    assert render.site_href("th/INTEGRATION.md", "") == "/docs/th/integration"
    assert render.site_href("adr/0001-valkey.md", "") is None
    assert render.site_href("https://example.com/x.md", "") is None


def test_slugs_follow_github_including_thai_marks() -> None:
    assert render.slugify("1. Choosing how to deploy") == "1-choosing-how-to-deploy"
    assert render.slugify("Why a 429 is not a fail-open") == "why-a-429-is-not-a-fail-open"
    assert render.slugify("GET /w/<roomId>?qm_return=<url>") == "get-wroomidqm_returnurl"
    assert render.slugify("5. การผูกสิทธิ์: ทำไม") == "5-การผูกสิทธิ์-ทำไม"


def test_raw_html_in_a_guide_is_text_not_markup() -> None:
    doc = render.render_markdown(
        '# T\n\n<script>alert(1)</script>\n\n<img src=x onerror="alert(1)">\n\n[x](javascript:alert(1))\n', "", "en"
    )
    assert "<script" not in doc.body and "<img" not in doc.body
    assert 'href="javascript:' not in doc.body

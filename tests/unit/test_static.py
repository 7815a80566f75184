"""web/static.py: content hashes, compressed forms and their ETags, and hashed script modules whose imports point at
hashed names."""

from __future__ import annotations

import re

import pytest

from queue_manager.http.sendfile import coding_for
from queue_manager.routes.pages import console as pages_console
from queue_manager.web import static

JS = "text/javascript; charset=utf-8"
IMPORT = re.compile(r"""\b(?:from|import)\s*["']\./([^"']+)["']""")


def _mod(name: str, text: str) -> static.Source:
    return static.Source(name, "m-" + name.removesuffix(".js"), text.encode(), JS, module=True)


def test_a_payload_has_one_etag_per_form_and_picks_the_smallest_form_accepted() -> None:
    body = b"queue " * 400
    p = static.Payload.of(body, "text/plain")
    assert p.digest == static.content_hash(body) and len(p.digest) == 22
    assert p.etag() == f'"{p.digest}"'.encode()
    assert p.etags() == (p.etag(), p.etag("br"), p.etag("gzip"))
    assert coding_for(p, "gzip, br") == "br"
    assert coding_for(p, "gzip") == "gzip"
    assert coding_for(p, "br;q=0, gzip") == "gzip"
    assert coding_for(p, "br;q=0, gzip;q=0") is None and coding_for(p, None) is None
    tiny = static.Payload.of(b"x", "text/plain")  # compressing would make it bigger: only the body is kept
    assert tiny.gzip is None and tiny.br is None and tiny.etags() == (tiny.etag(),)
    assert coding_for(tiny, "br, gzip") is None
    plain = static.Payload.of(body, "font/woff2", compress=False)
    assert not plain.compressible and coding_for(plain, "br") is None


def test_imports_are_rewritten_to_hashed_names_and_a_change_renames_every_importer() -> None:
    sources = [
        _mod("main.js", 'import { a } from "./a.js";\nimport "./b.js";\na();\n'),
        _mod("a.js", "import { b } from './b.js';\nexport const a = () => b;\n"),
        _mod("b.js", "export const b = 1;\n"),
    ]
    built = static.hashed_assets(sources, spell=static.short_hash)
    for asset in built.values():
        found = re.fullmatch(r"m-\w+-([0-9a-f]{12})\.js", asset.name)
        assert found is not None, asset.name
        assert found.group(1) == static.short_hash(asset.body), "the name is not the hash of the served bytes"
    main = built["main.js"].body.decode()
    assert IMPORT.findall(main) == [built["a.js"].name, built["b.js"].name]
    assert IMPORT.findall(built["a.js"].body.decode()) == [built["b.js"].name]

    changed = static.hashed_assets([*sources[:2], _mod("b.js", "export const b = 2;\n")], spell=static.short_hash)
    assert all(changed[n].name != built[n].name for n in ("main.js", "a.js", "b.js"))


@pytest.mark.parametrize(
    ("sources", "why"),
    [
        ([_mod("a.js", 'import "./b.js";'), _mod("b.js", 'import "./a.js";')], "cycle"),
        ([_mod("a.js", 'import { x } from "./missing.js";')], "not in the asset set"),
        ([_mod("a.js", 'const m = await import("./b.js");'), _mod("b.js", "")], "dynamic import"),
    ],
)
def test_a_module_set_that_cannot_be_hashed_is_refused_when_built(sources: list[static.Source], why: str) -> None:
    with pytest.raises(ValueError, match=why):
        static.hashed_assets(sources)


def test_every_console_module_import_resolves_to_a_served_hashed_asset() -> None:
    assets = pages_console.assets()
    modules = [
        a for name, a in assets.items() if not name.startswith("/") and name.endswith(".js") and name != "uplot.js"
    ]
    served = {a.name for a in assets.values()}
    assert len(modules) > 2, "the console is a set of modules"
    reached: set[str] = set()
    todo = [assets[pages_console.ENTRY].name]
    while todo:  # walk the graph from the page's entry, as a browser does
        name = todo.pop()
        if name in reached:
            continue
        reached.add(name)
        body = assets["/assets/" + name].body.decode()
        for target in IMPORT.findall(body):
            assert target in served, f"{name} imports {target}, which is not served"
            todo.append(target)
    assert reached == {a.name for a in modules}, "a module in web/console is not reached from the entry"

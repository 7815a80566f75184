"""The import rules docs/architecture.md draws, checked against the code.

The layer and purity contracts live in pyproject.toml (``[tool.importlinter]``) and are run here with
import-linter; the inline proxy's narrower rule — it may use the HTTP primitives, the context and the
request identity, never the queue's routes or its other services — is an allow-list checked on the same
import graph.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import grimp
from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parents[2]

#: What the inline proxy may import above the access layer: the HTTP primitives (requests and responses,
#: cookies, the Host header, the eager-await helper), the context and the request's identity. The gate and
#: the waiting page reach it as callables; no route module is ever imported.
INLINE_MAY_USE = frozenset(
    {
        "queue_manager.http",
        "queue_manager.http.wire",
        "queue_manager.http.cookies",
        "queue_manager.http.hostname",
        "queue_manager.http.eager",
        "queue_manager.context",
        "queue_manager.services.identity",
    }
)
ABOVE_ACCESS = ("queue_manager.http", "queue_manager.services", "queue_manager.context", "queue_manager.routes")


def test_the_import_contracts_hold() -> None:
    out = io.StringIO()
    with contextlib.chdir(ROOT), contextlib.redirect_stdout(out):
        code = lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True)
    assert code == 0, out.getvalue()[-4000:]


def test_inline_uses_only_the_http_primitives() -> None:
    graph = grimp.build_graph("queue_manager")
    wrong = sorted(
        f"{module} imports {imported}"
        for module in graph.find_descendants("queue_manager.inline")
        for imported in graph.find_modules_directly_imported_by(module)
        if imported.startswith(ABOVE_ACCESS) and imported not in INLINE_MAY_USE
    )
    assert not wrong, wrong


def test_nothing_imports_the_composition_root() -> None:
    graph = grimp.build_graph("queue_manager")
    importers = graph.find_modules_that_directly_import("queue_manager.server")
    assert importers <= graph.find_descendants("queue_manager.cli"), importers

"""The import rules docs/architecture.md draws, checked against the code.

The layer and purity contracts live in pyproject.toml (``[tool.importlinter]``) and are run here with
import-linter; the inline proxy's narrower rule — it may use only the HTTP primitives, never the queue's
routes — is an allow-list checked on the same import graph.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import grimp
from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parents[2]

#: What the inline proxy may import of http/: requests and responses, cookies, identity, the context
#: routes receive, and the eager-await helper. The gate and the waiting page reach it as callables.
INLINE_MAY_USE = frozenset(
    {
        "queue_manager.http",
        "queue_manager.http.wire",
        "queue_manager.http.cookies",
        "queue_manager.http.context",
        "queue_manager.http.identity",
        "queue_manager.http.eager",
    }
)


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
        if imported.startswith("queue_manager.http") and imported not in INLINE_MAY_USE
    )
    assert not wrong, wrong


def test_nothing_imports_the_composition_root() -> None:
    graph = grimp.build_graph("queue_manager")
    importers = graph.find_modules_that_directly_import("queue_manager.server")
    assert importers <= graph.find_descendants("queue_manager.cli"), importers

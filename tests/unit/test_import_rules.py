"""The import rules docs/architecture.md draws, checked against the code.

The layer and purity contracts live in pyproject.toml (``[tool.importlinter]``) and are run here with
import-linter; the inline proxy's narrower rule — it may use the HTTP primitives, the context and the
request identity, never the queue's routes or its other services — is an allow-list checked on the same
import graph.
"""

from __future__ import annotations

import ast
import contextlib
import io
import logging
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
        "queue_manager.http.lean",
        "queue_manager.http.negotiate",
        "queue_manager.http.static_paths",
        "queue_manager.context",
        "queue_manager.services.identity",
        "queue_manager.services.gated_wait",
    }
)
ABOVE_ACCESS = (
    "queue_manager.http",
    "queue_manager.services",
    "queue_manager.assembly",
    "queue_manager.context",
    "queue_manager.routes",
)


def test_the_import_contracts_hold() -> None:
    out = io.StringIO()
    # import-linter configures logging with dictConfig, which disables every logger that exists already;
    # the tests that run after this one in the same worker listen to the package's loggers
    loggers = [logger for logger in logging.root.manager.loggerDict.values() if isinstance(logger, logging.Logger)]
    disabled = {logger.name: logger.disabled for logger in loggers}
    try:
        with contextlib.chdir(ROOT), contextlib.redirect_stdout(out):
            code = lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True)
    finally:
        for logger in loggers:
            logger.disabled = disabled[logger.name]
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


def test_no_module_imports_itself_back() -> None:
    """No import cycle among the package's modules, an import inside a function included: a module that needs
    what imports it is handed it instead (``routes/table.py`` hands its table to the API's description).
    Imports made only for type checking are left out: they never run."""
    graph = grimp.build_graph("queue_manager", exclude_type_checking_imports=True, cache_dir=None)
    cycles = sorted(
        f"{module} -> {imported} -> … -> {module}"
        for module in graph.modules
        for imported in graph.find_modules_directly_imported_by(module)
        if graph.chain_exists(imported, module, as_packages=False)
    )
    assert not cycles, cycles


TABLE_MODULE = "queue_manager.routes.table"


def _names_table(node: ast.Import | ast.ImportFrom) -> bool:
    if isinstance(node, ast.Import):
        return any(alias.name == TABLE_MODULE for alias in node.names)
    if node.module == TABLE_MODULE:
        return True
    return node.module == "queue_manager.routes" and any(alias.name == "table" for alias in node.names)


def test_only_the_app_reads_the_table_from_inside_a_function() -> None:
    """An import of the routes' table hidden in a function is how a cycle through it would be papered over:
    only the app (which owns the table) may do that."""
    package = ROOT / "queue_manager"
    allowed = package / "routes" / "app.py"
    found = []
    for file in sorted(package.rglob("*.py")):
        tree = ast.parse(file.read_text(encoding="utf-8"))
        for func in ast.walk(tree):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(func):
                if isinstance(node, (ast.Import, ast.ImportFrom)) and _names_table(node) and file != allowed:
                    found.append(f"{file.relative_to(ROOT)}:{node.lineno}")
    assert not found, found

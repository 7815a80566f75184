"""The context is built once and never changed: it refuses assignment, and no module assigns to one.

What changes while a server runs (ready, stopping, the clock's steps, the attached inline proxy and jobs)
lives in the objects the context holds, each changed through its own methods.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from queue_manager.assembly.build import memory_parts
from queue_manager.clock import SystemClock
from queue_manager.config import load_settings
from queue_manager.context import Context
from queue_manager.services.attached import AlreadyAttached

ROOT = Path(__file__).resolve().parents[2] / "queue_manager"
GOOD = {"ADMIN_KEY": "k" * 40, "SECRET": "s" * 48, "PUBLIC_API_KEY": "p" * 40}


def _context() -> Context:
    settings = load_settings(GOOD)
    clock = SystemClock()
    return Context.build(settings, memory_parts(settings, clock), clock)


def test_a_context_refuses_assignment() -> None:
    ctx = _context()
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.store = ctx.store  # type: ignore[misc]
    # a name that is no field: refused too (TypeError from the slotted class on Python 3.11)
    with pytest.raises((dataclasses.FrozenInstanceError, AttributeError, TypeError)):
        ctx.anything_new = 1  # type: ignore[attr-defined]


def test_the_run_state_changes_through_its_methods() -> None:
    run = _context().run
    assert not run.ready and not run.shutting_down
    run.started()
    assert run.ready
    run.stopping()
    assert run.shutting_down and not run.ready
    assert run.request_stop() is False  # nothing around an in-process server can stop it
    stopped: list[bool] = []
    run.stop_through(lambda: stopped.append(True))
    assert run.request_stop() is True and stopped == [True]


def test_what_is_built_over_the_context_is_attached_once() -> None:
    ctx = _context()
    inline, alerts = object(), object()
    ctx.attached.attach(inline=inline, alerts=alerts, turn_mail=None)  # type: ignore[arg-type]
    assert ctx.attached.inline is inline and ctx.attached.alerts is alerts
    with pytest.raises(AlreadyAttached):
        ctx.attached.attach(inline=inline, alerts=alerts, turn_mail=None)  # type: ignore[arg-type]


def _assigned_context_fields(tree: ast.AST) -> list[int]:
    """Lines assigning to ``ctx.<field>`` (or ``<anything>.ctx.<field>``)."""
    lines = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            if not isinstance(target, ast.Attribute):
                continue
            owner = target.value
            if (isinstance(owner, ast.Name) and owner.id == "ctx") or (
                isinstance(owner, ast.Attribute) and owner.attr == "ctx"
            ):
                lines.append(node.lineno)
    return lines


def test_no_module_assigns_to_a_context() -> None:
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        if path.is_relative_to(ROOT / "engine"):  # the engine's replay names its own fold state ``ctx``
            continue
        for line in _assigned_context_fields(ast.parse(path.read_text(), str(path))):
            found.append(f"{path.relative_to(ROOT.parent)}:{line}")
    assert not found, found


def test_the_memory_parts_say_how_live_streams_read() -> None:
    ctx = _context()
    assert ctx.fleet is None and ctx.status_now is not None
    assert ctx.broadcaster.inline_steps and ctx.broadcaster.status_many is None

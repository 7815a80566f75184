"""Running a coroutine that never suspends, in place: no task, no turn of the event loop.

The inline fast path (inline/fastpath.py) answers from inside the parser's callbacks. Where what it
calls is written as a coroutine but cannot suspend — the embedded store (``Store.immediate``), a page
rendered into a collecting ``send`` — it is stepped once here and its result taken at once.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class Suspended(RuntimeError):
    """The coroutine waited on something: it was not one that finishes in place."""


def run_now(coro: Coroutine[Any, Any, T]) -> T:
    """The coroutine's result (or its exception), provided it finishes without suspending."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coro.close()
    raise Suspended(f"{getattr(coro, '__qualname__', coro)!s} suspended; run it as a task instead")

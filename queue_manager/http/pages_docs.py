"""Page routes (docs): path -> handler, consulted by the app after the fixed API routes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from queue_manager.http.context import Context
from queue_manager.http.wire import Request, Send

PageHandler = Callable[[Context, Request, Send], Awaitable[None]]


def route(path: str) -> PageHandler | None:
    """The handler for a GET/HEAD page path this module serves, or None."""
    return None

"""How an error reads in one line on the console and in the audit trail.

In a module of its own, free of the PostgreSQL driver, so the composition root can name a failure
without loading the driver on a memory server.
"""

from __future__ import annotations


def describe(err: BaseException) -> str:
    """An error in one line: its class and the first line of its message (never a URL's password)."""
    text = str(err).strip().splitlines()[0] if str(err).strip() else ""
    name = type(err).__name__
    return f"{name}: {text}" if text else name

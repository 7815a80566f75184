"""A long-running background job: started once, stopped by cancelling it and waiting for it to end.

Every loop the server keeps beside the requests (the ticker, the inline index refresher, the lease,
the hint listener, the journal writer …) is one :class:`Job`. ``start`` is idempotent; ``stop`` cancels
and awaits the task, so nothing still runs once it returns, and is safe to call when never started.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine, Iterable
from typing import Any


class Job:
    __slots__ = ("_run", "name", "task")

    def __init__(self, name: str, run: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self.name = name
        self._run = run
        self.task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self.task is not None and not self.task.done()

    def start(self) -> None:
        """Start the job on the running loop, unless it already runs."""
        if not self.running:
            self.task = asyncio.create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        """Cancel the job and wait until it has ended (its own clean-up included)."""
        task, self.task = self.task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def stop_all(*jobs: Job) -> None:
    """Stop several jobs, in the order given."""
    for job in jobs:
        await job.stop()


async def cancel_all(tasks: Iterable[asyncio.Task[Any]]) -> None:
    """Cancel every task of a set a job spawned beside itself, and wait until each has ended (whatever it
    raised on the way out)."""
    pending = list(tasks)
    for task in pending:
        task.cancel()
    for task in pending:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


def stop_if_cancelled() -> None:
    """Raise CancelledError when this task was asked to stop. For a loop whose step may swallow the cancel:
    a database driver can take a cancel that reaches it mid-call for its own and return normally, and the
    loop would then go on waiting while its Job's stop waits for it."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError

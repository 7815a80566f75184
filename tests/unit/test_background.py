"""Jobs whose step may swallow a cancel still stop (background.stop_if_cancelled)."""

from __future__ import annotations

import asyncio

from queue_manager.background import Job, stop_if_cancelled


def test_a_job_whose_step_swallows_the_cancel_still_stops() -> None:
    async def go() -> None:
        entered = asyncio.Event()

        async def swallowing_write() -> None:  # a driver taking a cancel that reaches it for its own
            entered.set()
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                return

        async def loop() -> None:
            while True:
                await swallowing_write()
                stop_if_cancelled()
                await asyncio.sleep(0.01)

        job = Job("test-loop", loop)
        job.start()
        await entered.wait()
        stopping = asyncio.ensure_future(job.stop())
        done, _ = await asyncio.wait({stopping}, timeout=30)  # the test's own bound; the stop takes no time
        assert done, "the job went on after its stop"

    asyncio.run(go())


def test_outside_a_cancel_nothing_is_raised() -> None:
    async def go() -> None:
        stop_if_cancelled()

    asyncio.run(go())

"""Turn e-mails, the sending side: the leader looks at every signed-up ticket once a second.

Only tickets with an address are looked at (the address book's entries; a lapsed one is left to expire),
one store look-up each (``Store.lookup``, what the console's drill-down reads), and each is judged:

=====================================  ================================================================
the ticket                             what happens to its address
=====================================  ================================================================
waiting (not yet e-mailed)             kept
passed, not yet e-mailed               claimed (``AddressBook.claim``: once for the fleet) and e-mailed
admitted (the pass was used)           deleted
finished: its pass lapsed unused       kept ``LAPSED_TTL_MS`` more (the key's TTL), then gone
finished otherwise (purged), gone      deleted
  (ejected from a pass, no such
  ticket, no such room, a newer
  generation of the room)
=====================================  ================================================================

A claimed e-mail is sent beside the scan (never holding it up) and tried ``ATTEMPTS`` times, waiting
``BACKOFF_SEC`` between tries; after the last failure it is given up and counted. The claim comes first,
so a leader change mid-send never sends twice: a turn is e-mailed at most once. Counters (this process's,
summed over the fleet by health): ``turn_emails_sent``, ``turn_emails_failed`` (given up),
``turn_emails_retried``.

Nothing here writes an address anywhere but the SMTP conversation: log lines name the room and ticket.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from email.message import EmailMessage
from typing import TYPE_CHECKING, Any

from queue_manager.background import Job, cancel_all, stop_if_cancelled
from queue_manager.context import Context
from queue_manager.engine.errors import EngineError
from queue_manager.jobs import smtp, turn_letter
from queue_manager.jobs.shared_state import Leadership
from queue_manager.sidestores.mailbook.base import AddressBook, Entry
from queue_manager.store.base import StoreUnavailable

if TYPE_CHECKING:
    from queue_manager.fleet.parts import FleetParts

log = logging.getLogger("queue_manager.turn_mail")

SCAN_EVERY_SEC = 1.0
ATTEMPTS = 3
BACKOFF_SEC = (2.0, 6.0)  # before the second and the third try
LOOKUPS_AT_ONCE = 32

Sender = Callable[[EmailMessage], Awaitable[None]]


class TurnMail:
    def __init__(
        self,
        ctx: Context,
        book: AddressBook,
        leadership: Leadership,
        fleet: FleetParts | None = None,
        sender: Sender | None = None,
    ) -> None:
        self.ctx = ctx
        self.book = book
        self.leadership = leadership
        self.fleet = fleet
        settings = ctx.settings
        self.server = smtp.parse(settings.smtp_url, settings.smtp_ca_file) if settings.smtp_url else None
        self.sender = sender or self._smtp_send
        self.scans = 0
        self.last_scan_at: int | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._gate = asyncio.Semaphore(LOOKUPS_AT_ONCE)
        self.job = Job("qm-turn-mail", self._run)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self.job.start()

    async def stop(self) -> None:
        """The scan ends; a send still being tried is abandoned (its turn was claimed: never sent twice)."""
        await self.job.stop()
        await cancel_all(self._tasks)

    @property
    def leader(self) -> bool:
        return self.leadership.leader and (self.fleet is None or self.fleet.connection.up)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while True:
            next_at += SCAN_EVERY_SEC
            await asyncio.sleep(max(0.0, next_at - loop.time()))
            if not self.leader:
                continue
            try:
                await self.scan()
            except StoreUnavailable as exc:
                log.warning("turn e-mails: store unavailable: %s", exc)
            except Exception:
                log.exception("turn e-mail scan failed")
            stop_if_cancelled()  # a driver mid-call may take the stop's cancel for its own: the loop ends anyway
            if loop.time() - next_at > 5.0:
                next_at = loop.time()

    # ------------------------------------------------------------------ one scan

    async def scan(self) -> None:
        """Judge every signed-up ticket once (what the leader does each second)."""
        self.scans += 1
        self.last_scan_at = self.ctx.clock.wall_ms()
        entries = [e for e in await self.book.entries() if not e.lapsed]
        results = await asyncio.gather(*(self._judge(e) for e in entries), return_exceptions=True)
        # one room being rebuilt or one bad answer never stops the other tickets' e-mails
        unavailable = [r for r in results if isinstance(r, StoreUnavailable)]
        broken = [r for r in results if isinstance(r, BaseException) and not isinstance(r, StoreUnavailable)]
        if unavailable:
            log.warning("turn e-mail scan: store unavailable for %d tickets", len(unavailable))
        if broken:
            log.error("turn e-mail scan: %d tickets could not be judged", len(broken), exc_info=broken[0])

    async def _judge(self, entry: Entry) -> None:
        place = entry.place
        async with self._gate:
            try:
                found = await self.ctx.store.lookup(place.room_id, str(place.n))
            except EngineError as err:
                if err.status == 404:  # no such room, or no such ticket any more
                    await self.book.remove(place)
                return
        if found.get("generation") != place.gen or found.get("ticket") != place.n:
            await self.book.remove(place)  # the room was deleted (and made again): this ticket is gone
            return
        state = found.get("state")
        if state == "waiting":
            if entry.sent:  # its pass was taken back (ejected): that turn ended
                await self.book.remove(place)
        elif state == "passed":
            if not entry.sent and await self.book.claim(place):
                self._spawn(entry, found.get("passExpiresInSec"))
        elif state == "expired" and found.get("reason") == "expired" and found.get("passed") is not None:
            await self.book.lapse(place, self.ctx.settings.lapsed_ttl_ms)
        else:  # admitted (the pass was used), purged, or anything else: the ticket has ended
            await self.book.remove(place)

    # ------------------------------------------------------------------ sending

    def _spawn(self, entry: Entry, held_sec: Any) -> None:
        task = asyncio.create_task(self._deliver(entry, held_sec if isinstance(held_sec, int | float) else None))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _deliver(self, entry: Entry, held_sec: float | None) -> None:
        place = entry.place
        counters = self.ctx.counters
        try:
            policy = await self.ctx.store.room_policy(place.room_id)
        except StoreUnavailable:
            policy = None
        message = turn_letter.compose(
            sender=self.ctx.settings.smtp_from or "",
            to=entry.address,
            lang=entry.lang,
            room_name=(policy.name if policy is not None else None) or place.room_id,
            link=entry.link,
            held_sec=held_sec,
        )
        for attempt in range(ATTEMPTS):
            try:
                await self.sender(message)
            except Exception as exc:  # the SMTP server refused, or could not be reached
                why = _why(exc)
                if attempt + 1 == ATTEMPTS:
                    counters.turn_emails_failed += 1
                    log.warning(
                        "turn e-mail for room %s ticket %d given up after %d tries: %s",
                        place.room_id,
                        place.n,
                        ATTEMPTS,
                        why,
                    )
                    return
                counters.turn_emails_retried += 1
                await asyncio.sleep(BACKOFF_SEC[min(attempt, len(BACKOFF_SEC) - 1)])
            else:
                counters.turn_emails_sent += 1
                return

    async def _smtp_send(self, message: EmailMessage) -> None:
        if self.server is None:
            raise RuntimeError("SMTP_URL is not set")
        await smtp.send(self.server, message)

    # ------------------------------------------------------------------ health

    async def health(self) -> dict[str, Any]:
        """This instance's view: the address book's counts (the fleet's), the job's own state."""
        s = self.ctx.settings
        total: int | None
        unsent: int | None
        try:
            total, unsent = await self.book.counts()
        except StoreUnavailable:
            total = unsent = None
        return {
            "smtp": None if self.server is None else self.server.describe(),
            "from": s.smtp_from,
            "addresses": total,
            "pending": unsent,
            "sending": len(self._tasks),
            "leader": self.leader,
            "lastScanAt": self.last_scan_at,
        }


def _why(exc: BaseException) -> str:
    """The failure, without anything the server echoed back (it may quote the address)."""
    code = getattr(exc, "code", None)
    return f"{type(exc).__name__}" + (f" {code}" if isinstance(code, int) else "")

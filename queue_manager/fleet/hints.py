"""Change hints between the instances of a fleet: Valkey pub/sub on ``<prefix>ctl``.

An instance that changes a shared record (an operator, a monitor link) publishes a hint; every
other instance drops its copy and reads the records again on next use. Pub/sub is lossy (a
subscriber that is disconnected, or slow, misses messages), so a hint only makes the catch-up
immediate: every copy is re-read at least every ``RESYNC_MS`` anyway, and each (re)subscription
counts as a ``resync`` hint, since whatever was published while it was away is lost.

A message is JSON: ``{"k": kind, "from": instance id, ...data}``. Kinds: ``access`` (operators,
monitor links), ``rooms`` (``created``, ``deleted``, ``changed``: room ids), ``authlock`` (``ip``,
``minute``: the address has spent the fleet's ADMIN_AUTH_FAIL_PER_MIN allowance and is locked out
until that wall-clock minute ends; an instance that misses it learns the lockout from its own count
of the address's next wrong credential, see access/authfail/valkey.py), ``popmaint`` (``enabled``:
admission maintenance, sidestores/maintenance/valkey.py), ``wake`` (``room``: wake that room's live streams,
``POST /internal/api/notify``), ``resync`` (local only: re-read everything).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from queue_manager.background import Job, stop_if_cancelled
from queue_manager.store.valkey.client import ready
from queue_manager.store.valkey.keys import control_channel

if TYPE_CHECKING:
    from redis.asyncio import Redis

log = logging.getLogger("queue_manager.hints")

Handler = Callable[[dict[str, Any]], None]


class Hints:
    def __init__(
        self,
        redis: Redis,
        prefix: str,
        instance_id: str,
        *,
        enabled: bool = True,
        reached: Callable[[], None] | None = None,
    ) -> None:
        self.redis = redis
        self.reached = reached  # told when Valkey answers the subscription (the store's breaker.heard)
        self.channel = control_channel(prefix)
        self.instance_id = instance_id
        self.enabled = enabled
        self.subscribed = False
        self.published = 0
        self.received = 0
        self.dropped = 0  # not published (Valkey failed), or received but unreadable
        self._handlers: dict[str, list[Handler]] = {}
        self.job = Job("qm-hints", self._listen_forever)

    def on(self, kind: str, handler: Handler) -> None:
        self._handlers.setdefault(kind, []).append(handler)

    def _dispatch(self, kind: str, data: dict[str, Any]) -> None:
        for handler in self._handlers.get(kind, ()):
            try:
                handler(data)
            except Exception:  # one bad handler does not stop the others
                log.exception("hint %s: handler failed", kind)

    async def publish(self, kind: str, **data: Any) -> None:
        """Best effort: a hint that cannot be sent is repaired by the RESYNC_MS re-read."""
        if not self.enabled:
            return
        try:
            await self.redis.publish(self.channel, orjson.dumps({"k": kind, "from": self.instance_id, **data}))
            self.published += 1
        except Exception as exc:
            self.dropped += 1
            log.warning("hint %s not published (%s); other instances catch up within RESYNC_MS", kind, exc)

    def start(self) -> None:
        if self.enabled:
            self.job.start()

    async def stop(self) -> None:
        await self.job.stop()

    async def _listen_forever(self) -> None:
        delay = 0.5
        while True:
            try:
                await self._listen()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if self.subscribed:
                    log.warning("hints: subscription to %s lost (%s); resubscribing", self.channel, exc)
                delay = min(5.0, delay * 2)
            else:
                delay = 0.5
            self.subscribed = False
            stop_if_cancelled()  # a driver mid-call may take the stop's cancel for its own: the loop ends anyway
            await asyncio.sleep(delay)

    async def _listen(self) -> None:
        await ready(self.redis)  # on a cluster: any node relays every publish, so the channel's is as good
        pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
        try:
            await pubsub.subscribe(self.channel)
            self.subscribed = True
            if self.reached is not None:  # Valkey answered: the store need not wait out its fast answers
                self.reached()
            self._dispatch("resync", {})  # anything published while unsubscribed was lost
            while True:
                # a bounded wait (not listen()): the client's socket timeout must not read as a lost link
                message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                if message is None or message.get("type") != "message":
                    continue
                try:
                    data = orjson.loads(message["data"])
                except orjson.JSONDecodeError:
                    self.dropped += 1
                    continue
                if not isinstance(data, dict):
                    self.dropped += 1
                    continue
                if data.get("from") == self.instance_id:
                    continue  # our own change is already in our copy
                self.received += 1
                self._dispatch(str(data.get("k")), data)
        finally:
            with contextlib.suppress(Exception):
                await pubsub.aclose()

    def health(self) -> dict[str, Any]:
        return {
            "enabled": self.enabled,
            "subscribed": self.subscribed,
            "published": self.published,
            "received": self.received,
            "dropped": self.dropped,
        }

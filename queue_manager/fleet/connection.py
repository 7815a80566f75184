"""This instance's link to the fleet's Valkey: the rooms' store, the fleet's own keys, the lease and the hints.

Boot follows the guide: three kinds of connect error refuse to start (credentials Valkey refuses, a host
name that does not resolve, a TLS certificate that does not verify), each named without the URL; every
other error boots degraded and keeps reconnecting. ``valkeyEverConnected`` turns true at the first contact
and stays true.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import sys
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from redis import exceptions as rx

from queue_manager.background import Job
from queue_manager.config import ConfigRefusal, Settings
from queue_manager.fleet.hints import Hints
from queue_manager.fleet.leader import LeaderLease
from queue_manager.fleet.room_watch import RoomWatch
from queue_manager.store.base import StoreUnavailable
from queue_manager.store.valkey import ValkeyStore
from queue_manager.store.valkey.clock import SharedClock
from queue_manager.store.valkey.keys import fleet_prefix

log = logging.getLogger("queue_manager.backend")

COMMAND_TIMEOUT_SEC = 2.0  # a Valkey command (or connect) that takes longer counts as Valkey unreachable


def with_timeouts(url: str) -> str:
    """``url`` with redis-py's socket timeouts unless it sets its own: without them a Valkey that stops
    answering (a black-holed network) holds each request until TCP gives up."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    names = {k for k, _ in query}
    for name in ("socket_timeout", "socket_connect_timeout"):
        if name not in names:
            query.append((name, str(COMMAND_TIMEOUT_SEC)))
    return urlunsplit(parts._replace(query=urlencode(query)))


def connect_refusal(exc: BaseException) -> ConfigRefusal | None:
    """The three connect errors that must stop the boot (named without printing the URL)."""
    chain: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and len(chain) < 8:
        chain.append(cur)
        cur = cur.__cause__ or cur.__context__
    for e in chain:
        text = str(e)
        if isinstance(e, rx.AuthenticationError) or any(
            word in text for word in ("WRONGPASS", "NOAUTH", "NOPERM", "invalid password", "invalid username")
        ):
            return ConfigRefusal(
                "VALKEY_URL",
                "Valkey refused the credentials in VALKEY_URL (WRONGPASS/NOAUTH/ACL). "
                "Fix the user or password in VALKEY_URL.",
            )
        if isinstance(e, socket.gaierror) or "Name or service not known" in text or "ENOTFOUND" in text:
            return ConfigRefusal(
                "VALKEY_URL", "The host name in VALKEY_URL does not resolve (ENOTFOUND). Check the host in VALKEY_URL."
            )
        if isinstance(e, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in text:
            return ConfigRefusal(
                "VALKEY_URL",
                "Valkey's TLS certificate does not verify. Fix the certificate or the CA this server trusts.",
            )
    return None


def first_words(exc: BaseException) -> str:
    return " ".join(str(exc).split()[:8]) or type(exc).__name__


class FleetConnection:
    """The Valkey store the rooms live in, the fleet's own keys (``prefix``), the leader lease and the hints,
    and whether Valkey answers this instance (``up``, ``ever_connected``)."""

    def __init__(self, settings: Settings, rooms: RoomWatch) -> None:
        assert settings.valkey_url
        self.clock = SharedClock()
        # every change the store makes is committed through the room watch (the journal, then a hint)
        self.store = ValkeyStore(
            with_timeouts(settings.valkey_url),
            settings.valkey_prefix,
            self.clock,
            journal=rooms,
            writer=settings.instance_id,
            presence_mark_sec=settings.presence_mark_sec,
            full_records=settings.ticket_records == "full",
            local_polls=True,  # a waiting visitor's polls from this instance's replica of the line
        )
        self.redis = self.store.redis
        # the fleet's own keys: one hash tag on a cluster (keys.fleet_prefix), the rooms spread by theirs
        self.prefix = fleet_prefix(settings.valkey_prefix, self.store.cluster)
        # an answer from Valkey to either ends the store's fast answers at once (breaker.py)
        heard = self.store.breaker.heard
        self.lease = LeaderLease(self.redis, self.prefix, settings.instance_id, settings.leader_lease_ms, reached=heard)
        self.hints = Hints(self.redis, self.prefix, settings.instance_id, enabled=settings.ctl_hints, reached=heard)
        rooms.announce_through(self.store, self.hints)
        self.ever_connected = False
        self.up = False
        self._reconnect = Job("qm-valkey-reconnect", self._keep_trying)

    @property
    def answering(self) -> bool:
        """Valkey answered the last call, and the store is not answering at once after a failure (breaker.py)."""
        return self.up and not self.store.breaker.down

    async def connect(self) -> None:
        """Reach Valkey, or refuse the boot on the three errors that say the settings are wrong; on any other,
        start degraded and keep reconnecting."""
        try:
            await self.store.start()
            self.ever_connected = self.up = True
        except StoreUnavailable as exc:
            refusal = connect_refusal(exc)
            if refusal is not None:
                raise refusal from None
            print(
                f"valkey: unreachable at boot ({first_words(exc)}); starting degraded and reconnecting",
                file=sys.stderr,
                flush=True,
            )
            self._reconnect.start()

    async def _keep_trying(self) -> None:
        delay = 1.0
        while True:
            await asyncio.sleep(delay)
            try:
                await self.store.start()
            except StoreUnavailable:
                delay = min(30.0, delay * 2)
                continue
            self.ever_connected = self.up = True
            log.warning("valkey: connected")
            return

    async def stop_reconnecting(self) -> None:
        await self._reconnect.stop()

    def note_store_result(self, ok: bool) -> None:
        self.up = ok
        if ok:
            self.ever_connected = True

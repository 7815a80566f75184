"""The one contract every store implements.

The HTTP layer calls only these coroutines. A store applies the engine's rules to its state
atomically (the memory store in-process, the Valkey store in Lua) and acknowledges a change only
once it is durable (the Valkey store: committed to the PostgreSQL journal). Driver errors are mapped
here, once, to ``StoreUnavailable``; the HTTP layer answers it ``503 storage_unavailable``.

Example::

    store = MemoryStore(clock)
    await store.start()
    room, created, fields = await store.upsert_room({"id": "shop", "targetUrl": "https://shop.example"})
    view = await store.join("shop", client, presented=None, return_url=None)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from queue_manager.engine.draw import DrawState
from queue_manager.engine.model import ClientId
from queue_manager.engine.policy import RoomPolicy
from queue_manager.engine.view import MintedWaits, VisitorView
from queue_manager.engine.visitor import CheckResult, NewDoor, Presented


class StoreUnavailable(Exception):
    """The store cannot serve or persist this request now; answered 503 storage_unavailable."""

    def __init__(self, message: str, retry_after: int = 5) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class JournalCommitFailed(StoreUnavailable):
    """The events journal did not take a commit (PostgreSQL failing, the journal closed, or a seq it
    already holds): the live state answered, the durable record did not. Answered 503 like any
    ``StoreUnavailable``; health reports it as the journal's failure, never as Valkey's."""


ChangeListener = Callable[[set[str]], None]

#: The most asks one ``status_many`` call sends to the store at once; a longer list is split into parts of
#: this size (each part one script call on Valkey, all of them at the same instant).
STATUS_BATCH = 128


class Store(Protocol):
    kind: str
    # True when no coroutine of this store ever suspends (the embedded store): a caller on a hot path may
    # then run one to its end in place (http/eager.py) instead of scheduling a task for it
    immediate: bool

    @property
    def held(self) -> bool:
        """Admission maintenance is on (``set_held``)."""

    async def start(self) -> None: ...

    def set_held(self, held: bool) -> None:
        """Admission maintenance on or off: while on, no room promotes anybody and the door admits
        nobody new (an active room reads as paused; a pass already handed out waits, unspent)."""

    async def close(self) -> None: ...

    def on_change(self, listener: ChangeListener) -> None:
        """``listener(room_ids)`` after every change and every tick that moved a room."""

    # rooms
    async def list_rooms(self) -> list[dict[str, Any]]: ...

    async def sample_rooms(
        self, after: Mapping[str, tuple[int, int]]
    ) -> tuple[list[dict[str, Any]], dict[str, MintedWaits]]:
        """``list_rooms`` and, read at the same instant, each room's waits of its latest passes minted from
        the line (pass minted − joined, ms), numbered by pass (the generation's k-th pass is k on every
        instance): those past ``after[room]`` (generation, ordinal: what this reader has read), every one
        the room keeps (``view.WAITS_KEPT``) for a room not in ``after`` or of another generation."""

    async def get_room(self, room_id: str) -> dict[str, Any]: ...

    async def upsert_room(
        self,
        body: dict[str, Any],
        *,
        expect_state: str | None = None,
        expect: Mapping[str, Any] | None = None,
        system: bool = False,
    ) -> tuple[dict[str, Any], bool, list[str]]:
        """Create the room ``body["id"]`` or change the fields sent: (summary, created, fields changed).

        With ``expect_state`` this is a compare-and-set: the change applies only if the room exists
        and its configured state (active, paused or bypass) is ``expect_state`` at the instant it is
        applied; otherwise 409 ``state_changed`` (the current state in ``extra["state"]``) or 404
        ``no_room``, and nothing changes. ``expect`` does the same for room fields by their public
        names (409 ``config_changed``). ``system``: automation's change, which may write the fields
        only automation writes (``eventInForce``).
        """

    async def delete_room(self, room_id: str) -> None: ...

    async def schedule(self, room_id: str, body: Any) -> dict[str, Any]: ...

    async def room_exists(self, room_id: str) -> bool: ...

    async def draw_state(self, room_id: str) -> DrawState:
        """The room's drop draw (after any draw that is due), for ``GET /api/rooms/<id>/draw``."""

    async def room_policy(self, room_id: str) -> RoomPolicy | None:
        """What the HTTP layer needs per request: target, origin lists, name, protection (None: no room)."""

    # visitors
    async def join(
        self,
        room_id: str,
        client: ClientId,
        presented: Presented | None,
        return_url: str | None,
        *,
        lane: str | None = None,
    ) -> VisitorView:
        """A place in line (or the place ``presented`` already holds, in its own lane). ``lane``: the
        room's lane a new place joins (None: its default lane; one the room has not: ``400
        unknown_lane``). Only a grant names a lane: the visitor API never passes one of its own."""
        ...

    async def status(self, room_id: str, client: ClientId, presented: Presented | None) -> VisitorView: ...

    async def status_many(self, room_id: str, asks: Sequence[tuple[ClientId, Presented | None]]) -> list[VisitorView]:
        """``status`` for each ``(client, presented)`` in turn, at one instant: the same views in the same
        order, the same marks (seen, told) and the same events. What a room's live streams read on a tick;
        the whole list fails as ``status`` would (``no_room``, a fenced room)."""

    async def check(
        self,
        room_id: str,
        client: ClientId,
        presented: Presented | None,
        door_hash: bytes | None,
        url: str | None,
        new_door: NewDoor,
    ) -> CheckResult: ...

    async def door_replay(
        self, room_id: str, presented: Presented, door_hash: bytes, url: str | None
    ) -> CheckResult | None:
        """The hot path: a live session's own door key. None means "run the full check"."""

    async def revoke_session(
        self, room_id: str, gen: int | None, n: int | None, door_hash: bytes
    ) -> tuple[int, int] | None:
        """The site ends a live session: the one whose door key hashes to ``door_hash`` (ticket ``n`` when
        known), in generation ``gen`` (None: the room's own). Finished ``revoked``, its slot free at once,
        journaled; answers (generation, ticket number) once committed, or None when no live session holds
        the key (nothing changes)."""

    async def note_blocked_return(self, room_id: str) -> None: ...

    async def note_access_match(self, room_id: str, rule_key: str) -> None:
        """Count a match of the room's access rule ``rule_key`` (its ``AccessRule.key``) and when it was;
        the room's read shows them as the rule's ``matchCount`` and ``lastMatchAt``."""

    async def places_held(self, room_id: str, ident: str) -> int:
        """Places ``ident`` holds in the room's waiting line (what queueMaxPerIp counts)."""

    # operators
    async def eject(self, room_id: str, query: str) -> dict[str, Any]: ...

    async def purge(self, room_id: str) -> int: ...

    async def flush(self, room_id: str) -> int:
        """Release every pass and live session of the room at once (each ticket finished, ``flushed``);
        the line, the pre-queue and the room stay. Returns how many were released; answers only once
        the change is committed, like ``purge``."""

    async def lookup(self, room_id: str, query: str) -> dict[str, Any]: ...

    async def match_rule(self, room_id: str, url: str) -> dict[str, Any]: ...

    # time
    async def tick(self) -> set[str]:
        """Credit elapsed time and promote; returns the ids of rooms that changed."""

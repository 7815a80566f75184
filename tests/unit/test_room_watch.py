"""The rooms an instance knows exist: a refresh that read the journal before a change never undoes it,
and a room whose deletion the journal has not shown yet is neither known nor rebuilt."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from queue_manager.engine.events import Event
from queue_manager.fleet.room_watch import RoomWatch


def _watch(journal: Any = None) -> RoomWatch:
    return RoomWatch(cast(Any, journal))


def _alive(*rooms: str, gen: int = 1) -> dict[str, tuple[int, int, bool]]:
    return {room: (gen, 5, False) for room in rooms}


def test_a_deletion_during_a_refresh_stays_deleted() -> None:
    watch = _watch()
    watch.committed({"a", "b"}, set())
    mark = watch.mark()  # the refresh starts reading the journal: it still holds "a"
    watch.committed(set(), {"a"})  # "a" is deleted here meanwhile
    watch.refresh(_alive("a", "b"), mark)
    assert watch.known == {"b"}


def test_a_creation_during_a_refresh_stays_known() -> None:
    async def run() -> None:
        watch = _watch()  # no store handed to it: the config re-read the hint starts does nothing
        mark = watch.mark()
        watch.on_hint({"created": ["c"], "deleted": [], "changed": []})  # another instance made it meanwhile
        watch.refresh({}, mark)
        assert watch.known == {"c"}
        await asyncio.sleep(0)

    asyncio.run(run())


def test_a_refresh_replaces_what_was_known_before_it() -> None:
    watch = _watch()
    watch.committed({"gone", "kept"}, set())
    watch.refresh(_alive("kept", "found"), watch.mark())  # the journal is the truth for everything before
    assert watch.known == {"kept", "found"}
    watch.refresh({**_alive("kept"), "found": (1, 9, True)}, watch.mark())
    assert watch.known == {"kept"}


def test_a_deleted_room_stays_unknown_until_the_journal_shows_the_deletion() -> None:
    watch = _watch()
    watch.committed({"a"}, set())
    watch.committed(set(), {"a"})
    watch.refresh(_alive("a"), watch.mark())  # read after the deletion, but the journal still shows it alive
    assert watch.known == set() and "a" in watch.deleting
    watch.refresh({"a": (1, 6, True)}, watch.mark())  # now it shows the deletion: nothing left to hold
    assert watch.known == set() and watch.deleting == {}
    watch.refresh(_alive("a", gen=2), watch.mark())  # made again elsewhere, hint lost: the journal says so
    assert watch.known == {"a"}


def test_a_newer_generation_ends_the_hold_and_a_creation_here_too() -> None:
    class Journal:
        async def commit(self, events: list[Event]) -> None:
            assert all(e.room in watch.deleting for e in events if e.type == "room.delete"), "held before the commit"

    watch = _watch(Journal())
    asyncio.run(watch.commit([Event("room.delete", "a", 3, 0, {}, seq=7)]))
    assert watch.deleting == {"a": 3}
    watch.refresh(_alive("a", gen=3), watch.mark())
    assert "a" not in watch.known
    watch.refresh(_alive("a", gen=4), watch.mark())
    assert watch.known == {"a"} and watch.deleting == {}
    asyncio.run(watch.commit([Event("room.delete", "b", 1, 0, {}, seq=2)]))
    asyncio.run(watch.commit([Event("room.create", "b", 2, 0, {}, seq=1)]))
    assert "b" in watch.known and "b" not in watch.deleting


def test_changes_older_than_a_refresh_are_forgotten() -> None:
    watch = _watch()
    for i in range(50):
        watch.committed({f"r{i}"}, set())
    watch.refresh(_alive("x"), watch.mark())
    assert watch._recent == []

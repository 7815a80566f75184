"""The rooms an instance knows exist: a refresh that read the journal before a change never undoes it."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from queue_manager.fleet.room_watch import RoomWatch


def _watch() -> RoomWatch:
    return RoomWatch(cast(Any, None))  # only the set is exercised: no journal is read


def test_a_deletion_during_a_refresh_stays_deleted() -> None:
    watch = _watch()
    watch.committed({"a", "b"}, set())
    mark = watch.mark()  # the refresh starts reading the journal: it still holds "a"
    watch.committed(set(), {"a"})  # "a" is deleted here meanwhile
    watch.refresh({"a", "b"}, mark)
    assert watch.known == {"b"}


def test_a_creation_during_a_refresh_stays_known() -> None:
    async def run() -> None:
        watch = _watch()  # no store handed to it: the config re-read the hint starts does nothing
        mark = watch.mark()
        watch.on_hint({"created": ["c"], "deleted": [], "changed": []})  # another instance made it meanwhile
        watch.refresh(set(), mark)
        assert watch.known == {"c"}
        await asyncio.sleep(0)

    asyncio.run(run())


def test_a_refresh_replaces_what_was_known_before_it() -> None:
    watch = _watch()
    watch.committed({"gone", "kept"}, set())
    mark = watch.mark()
    watch.refresh({"kept", "found"}, mark)  # the journal is the truth for everything before the mark
    assert watch.known == {"kept", "found"}
    watch.refresh({"kept"}, watch.mark())
    assert watch.known == {"kept"}


def test_changes_older_than_a_refresh_are_forgotten() -> None:
    watch = _watch()
    for i in range(50):
        watch.committed({f"r{i}"}, set())
    watch.refresh({"x"}, watch.mark())
    watch.committed(set(), {"x"})
    watch.refresh({"x"}, watch.mark() - 1)
    assert watch.known == set()
    watch.refresh({"x"}, watch.mark())
    assert watch.known == {"x"}

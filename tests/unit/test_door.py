"""The door check's key handling (queue_manager/routes/visitor/door.py); the check itself is covered over HTTP."""

from __future__ import annotations

from queue_manager.routes.visitor.door import MAX_DOOR_KEY, door_hash, new_door


def test_a_new_door_key_is_known_by_the_hash_the_store_keeps() -> None:
    raw, hashed = new_door()
    assert len(hashed) == 16 and door_hash(raw) == hashed
    assert new_door()[0] != raw  # every door key is fresh


def test_no_key_or_one_too_long_to_be_ours_has_no_hash() -> None:
    assert door_hash(None) is None and door_hash("") is None
    assert door_hash("k" * MAX_DOOR_KEY) is not None
    assert door_hash("k" * (MAX_DOOR_KEY + 1)) is None

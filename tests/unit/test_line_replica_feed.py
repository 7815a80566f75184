"""A replica of the line applies its room's feed in order (store/valkey/replica.py): a gap, another
generation or a replaced room takes it out of sync; what arrives while a snapshot is on its way is applied
after it, minus what the snapshot already holds."""

from __future__ import annotations

from queue_manager.store.valkey.replica import LineReplica


def loaded(gen: int = 1, lf: int = 5, cv: int = 2, seqs: tuple[int, ...] = (3, 4, 7)) -> LineReplica:
    replica = LineReplica()
    replica.load(gen, lf, cv, list(seqs))
    return replica


def test_messages_in_order_move_the_positions() -> None:
    replica = loaded()
    assert replica.position(1, 5, 2, 7) == 3
    assert replica.apply(b"1 6 2 -3 +8")
    assert replica.position(1, 5, 2, 7) == 2 and replica.position(1, 6, 2, 8) == 3
    assert replica.position(1, 5, 2, 3) is None  # left the line
    assert replica.apply(b"1 7 2 c +9")
    assert replica.position(1, 7, 2, 9) == 1 and replica.position(1, 5, 2, 7) is None


def test_a_read_ahead_of_the_replica_or_of_another_config_is_not_answered() -> None:
    replica = loaded()
    assert replica.position(1, 6, 2, 7) is None and replica.wanted == 6
    assert replica.apply(b"1 6 3")  # a config change: the reads before it are the store's again
    assert replica.position(1, 5, 2, 7) is None and replica.position(1, 6, 3, 7) == 3
    assert replica.position(2, 6, 3, 7) is None  # another generation


def test_a_gap_another_generation_or_a_replaced_room_unsyncs() -> None:
    for message in (b"1 7 2 +9", b"2 6 1 +1", b"x"):
        replica = loaded()
        assert replica.apply(b"1 5 2 +99")  # already in the snapshot: skipped
        assert 99 not in replica.index
        assert not replica.apply(message)
        assert not replica.synced and replica.stale
        assert replica.position(1, 5, 2, 7) is None


def test_messages_during_a_snapshot_are_applied_after_it() -> None:
    replica = LineReplica()
    replica.stale = False  # the snapshot is on its way
    assert replica.apply(b"1 5 2 +7")  # the snapshot holds it already
    assert replica.apply(b"1 6 2 -3")
    replica.load(1, 5, 2, [3, 4, 7])
    assert replica.synced and replica.lf == 6
    assert replica.position(1, 6, 2, 7) == 2

"""The fast answer while Valkey is unreachable (store/valkey/breaker.py), on a fake clock."""

from __future__ import annotations

import pytest

from queue_manager.store.valkey.breaker import HOLD_SEC, Breaker, ValkeyUnreachable


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_after_a_failure_every_call_answers_at_once_until_the_hold_ends_then_one_probes() -> None:
    clock = Clock()
    b = Breaker(clock=clock)
    assert b.enter() is False and not b.down  # healthy: nothing held
    b.failed(False)
    assert b.down
    for _ in range(3):
        with pytest.raises(ValkeyUnreachable) as err:
            b.enter()
        assert 1 <= err.value.retry_after <= HOLD_SEC
    clock.now += HOLD_SEC
    assert b.enter() is True  # the probe
    with pytest.raises(ValkeyUnreachable):
        b.enter()  # one probe at a time: the others still answer at once
    b.failed(True)  # the probe failed too: held again
    clock.now += HOLD_SEC - 0.1
    with pytest.raises(ValkeyUnreachable):
        b.enter()
    clock.now += 0.1
    assert b.enter() is True
    b.answered(True)
    assert not b.down and b.enter() is False
    assert b.fast_answers == 5 and b.trips == 1


def test_a_cancelled_probe_lets_the_next_call_probe() -> None:
    clock = Clock()
    b = Breaker(clock=clock)
    b.failed(False)
    clock.now += HOLD_SEC
    assert b.enter() is True
    b.abandoned(True)
    assert b.enter() is True


def test_translate_tells_the_breaker_what_became_of_each_call() -> None:
    import asyncio

    from redis import exceptions as rx

    from queue_manager.store.valkey.errors import RoomFenced, translate

    clock = Clock()
    b = Breaker(clock=clock)
    with pytest.raises(ValkeyUnreachable), translate("r", b):
        raise rx.ConnectionError("Connection refused")  # unreachable: trips the breaker
    assert b.down and b.trips == 1
    with pytest.raises(ValkeyUnreachable), translate("r", b):
        raise AssertionError("not reached: the breaker answers at once")  # pragma: no cover
    assert b.fast_answers == 1
    clock.now += HOLD_SEC
    with pytest.raises(asyncio.CancelledError), translate("r", b):
        raise asyncio.CancelledError  # the probe was cancelled: no verdict, the next call probes
    assert b.down and not b.probing
    with pytest.raises(RoomFenced), translate("r", b):
        raise rx.ResponseError("QM fenced")  # an error reply is an answer: Valkey is back
    assert not b.down
    unchanged = rx.ResponseError("ERR wrong number of arguments")
    with pytest.raises(rx.ResponseError) as info, translate("r", b):
        raise unchanged
    assert info.value is unchanged and not b.down
    with translate("r", b):
        pass
    assert not b.down and b.trips == 1


def test_a_probe_can_be_claimed_before_the_hold_ends_one_at_a_time() -> None:
    clock = Clock()
    b = Breaker(clock=clock)
    assert b.claim_probe() is False  # nothing held: nothing to probe
    b.failed(False)
    assert b.claim_probe() is True  # at once, not after HOLD_SEC
    assert b.claim_probe() is False  # one probe at a time
    with pytest.raises(ValkeyUnreachable):
        b.enter()  # the others still answer at once
    b.answered(True)
    assert not b.down and not b.probing and b.enter() is False


def test_valkey_heard_elsewhere_ends_the_hold_at_once() -> None:
    clock = Clock()
    b = Breaker(clock=clock)
    b.failed(False)
    assert b.claim_probe() is True
    b.heard()  # the leader lease or the pub/sub subscription got an answer
    assert not b.down and b.enter() is False
    b.failed(True)  # the probe claimed before still reports: its failure holds again
    assert b.down and not b.probing and b.trips == 2

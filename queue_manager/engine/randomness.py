"""Where the engine's randomness comes from: pre-queue handles and the drop's committed seed.

A ``RandomSource`` is passed where an engine (or a store) is built; the default is the operating
system's secure source. The draw itself is a function of the seed (``engine/draw.py``), so a seeded
source makes a whole drop repeatable, so a test can replay one::

    rng = SeededRandom(7)
    seed = rng.draw_seed()   # the same seed for every SeededRandom(7)
"""

from __future__ import annotations

import random
import secrets
from typing import Protocol

from queue_manager.engine.draw import SEED_BYTES


class RandomSource(Protocol):
    def token_hex(self, nbytes: int) -> str:
        """``nbytes`` random bytes as hex (a pre-queue handle)."""

    def draw_seed(self) -> bytes:
        """A drop's secret seed: 32 random bytes, drawn once when the drop is scheduled."""


class SystemRandomSource:
    """The operating system's secure source (``secrets``): what every room uses unless told otherwise.

    It holds no state, so every room (and every copy of one) shares the one instance.
    """

    __slots__ = ()

    def token_hex(self, nbytes: int) -> str:
        return secrets.token_hex(nbytes)

    def draw_seed(self) -> bytes:
        return secrets.token_bytes(SEED_BYTES)

    def __copy__(self) -> SystemRandomSource:
        return self

    def __deepcopy__(self, memo: dict[int, object]) -> SystemRandomSource:
        return self


class SeededRandom:
    """A repeatable source: the same seed gives the same handles and the same draws, in the same order.

    Never for a live room (it is predictable); for tests and for replaying a draw.
    """

    __slots__ = ("_rng",)

    def __init__(self, seed: int | str) -> None:
        self._rng = random.Random(seed)

    def token_hex(self, nbytes: int) -> str:
        return self._rng.randbytes(nbytes).hex()

    def draw_seed(self) -> bytes:
        return self._rng.randbytes(SEED_BYTES)


SYSTEM_RANDOM: RandomSource = SystemRandomSource()

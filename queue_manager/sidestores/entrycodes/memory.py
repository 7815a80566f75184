"""STORE=memory: the entry codes in this process (the interface: ``base.EntryCodes``). Gone on restart,
like the rooms themselves."""

from __future__ import annotations

import secrets
from collections.abc import Sequence

from queue_manager.sidestores.entrycodes.base import NO_LANE, Redemption, StoredCode


class MemoryEntryCodes:
    """Every room's codes, in this process: room -> hash -> [lane, uses, spent]."""

    def __init__(self) -> None:
        self._rooms: dict[str, dict[bytes, list[object]]] = {}
        self._salts: dict[str, bytes] = {}

    async def salt(self, room_id: str) -> bytes:
        return self._salts.setdefault(room_id, secrets.token_bytes(16))

    async def add(self, room_id: str, codes: Sequence[StoredCode]) -> int:
        room = self._rooms.setdefault(room_id, {})
        stored = 0
        for code in codes:
            if code.hash not in room:
                room[code.hash] = [code.lane, code.uses, 0]
                stored += 1
        return stored

    async def redeem(self, room_id: str, code_hash: bytes) -> Redemption:
        row = self._rooms.get(room_id, {}).get(code_hash)
        if row is None:
            return Redemption("invalid")
        lane, uses, spent = row
        assert isinstance(uses, int) and isinstance(spent, int)
        if spent >= uses:
            return Redemption("used_up")
        row[2] = spent + 1
        return Redemption("ok", lane if isinstance(lane, str) else None)

    async def give_back(self, room_id: str, code_hash: bytes) -> None:
        row = self._rooms.get(room_id, {}).get(code_hash)
        if row is not None and isinstance(row[2], int) and row[2] > 0:
            row[2] -= 1

    async def counts(self, room_id: str) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for lane, uses, spent in self._rooms.get(room_id, {}).values():
            assert isinstance(uses, int) and isinstance(spent, int)
            entry = out.setdefault(lane if isinstance(lane, str) else NO_LANE, {"codes": 0, "uses": 0, "redeemed": 0})
            entry["codes"] += 1
            entry["uses"] += uses
            entry["redeemed"] += spent
        return out

    async def drop(self, room_id: str) -> int:
        self._salts.pop(room_id, None)
        return len(self._rooms.pop(room_id, {}))

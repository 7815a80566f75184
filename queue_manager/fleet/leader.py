"""The leader lease (LEADER_LEASE_MS) with a fencing epoch.

Fleet-wide jobs (target probes, autotune, threshold activation, alert delivery, the hourly history
rows) run only on the instance holding ``<prefix>leader``. Acquiring it increments
``<prefix>leader:epoch``; every write a leader-only job makes to shared state carries that epoch and
is refused when a newer leader exists (``fenced_set``), so a leader that paused past its lease can
never overwrite its successor's work. A clean stop hands the lease back at once; while Valkey is
unreachable nobody leads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from queue_manager.background import Job, stop_if_cancelled
from queue_manager.store.valkey.keys import leader_epoch_key, leader_key

log = logging.getLogger("queue_manager.leader")

_ACQUIRE = """
local holder = redis.call('GET', KEYS[1])
if holder == false then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return redis.call('INCR', KEYS[2])
elseif holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  local epoch = redis.call('GET', KEYS[2])
  if epoch == false then return redis.call('INCR', KEYS[2]) end
  return tonumber(epoch)
end
return 0
"""

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

# Write KEYS[2] only while ARGV[1] is still the current epoch (KEYS[1]).
_FENCED_SET = """
local epoch = tonumber(redis.call('GET', KEYS[1]) or '0')
if epoch ~= tonumber(ARGV[1]) then return 0 end
redis.call('SET', KEYS[2], ARGV[2])
return 1
"""


class LeaderLease:
    def __init__(
        self, client: Redis, prefix: str, instance_id: str, lease_ms: int, *, reached: Callable[[], None] | None = None
    ) -> None:
        self.client = client
        self.reached = reached  # told when Valkey answers a take or renewal (the store's breaker.heard)
        self.key = leader_key(prefix)
        self.epoch_key = leader_epoch_key(prefix)
        self.instance_id = instance_id
        self.lease_ms = max(1000, lease_ms)
        self.epoch = 0
        self.leader = False
        self.job = Job("qm-leader-lease", self.run)
        self._acquire = client.register_script(_ACQUIRE)
        self._release = client.register_script(_RELEASE)
        self._fenced_set = client.register_script(_FENCED_SET)

    async def try_acquire(self) -> bool:
        """Take or renew the lease; False (and not leader) on any Valkey failure."""
        try:
            epoch = int(await self._acquire(keys=[self.key, self.epoch_key], args=[self.instance_id, self.lease_ms]))
        except (RedisError, OSError) as exc:
            if self.leader:
                log.warning("leader: lost the lease (Valkey unreachable: %s)", type(exc).__name__)
            self.leader = False
            return False
        if self.reached is not None:  # Valkey answered: the store need not wait out its fast answers
            self.reached()
        was = self.leader
        self.leader = epoch > 0
        if self.leader:
            self.epoch = epoch
            if not was:
                log.info("leader: this instance leads (epoch %d)", epoch)
        return self.leader

    async def release(self) -> None:
        """Hand the lease back at once (a clean stop)."""
        if self.leader:
            with contextlib.suppress(RedisError, OSError):
                await self._release(keys=[self.key], args=[self.instance_id])
        self.leader = False

    async def fenced_set(self, key: str, value: str | bytes) -> bool:
        """Write ``key`` only while this instance's epoch is still the fleet's."""
        if not self.leader:
            return False
        try:
            return bool(await self._fenced_set(keys=[self.epoch_key, key], args=[self.epoch, value]))
        except (RedisError, OSError):
            return False

    async def run(self) -> None:
        interval = self.lease_ms / 3000
        while True:
            await self.try_acquire()
            stop_if_cancelled()  # a driver mid-call may take the stop's cancel for its own: the loop ends anyway
            await asyncio.sleep(interval)

    def start(self) -> None:
        self.job.start()

    async def stop(self) -> None:
        await self.job.stop()
        await self.release()

    def health(self) -> dict[str, Any]:
        return {"leader": self.leader, "epoch": self.epoch if self.leader else None}

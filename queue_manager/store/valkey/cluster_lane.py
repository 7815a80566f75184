"""The hot lane on a Valkey cluster: one ``ValkeyLane`` per master, each command sent to the master
that owns its key's slot.

A room's keys share one hash slot, so each visitor command (a room script by EVALSHA, the protection's
HGET) belongs to one master. ``ClusterLanes.execute`` computes the slot of the command's key, reads
the owner from the cluster client's slot map (``RedisCluster.nodes_manager``: the map the client keeps
up to date as it follows MOVED) and writes the command on that master's lane, made on first use with
the URL's credentials and timeouts. Only a plain ``redis+cluster://`` (``valkey+cluster://``) URL whose
options the lane understands gets lanes; with TLS everything keeps going through redis-py.

The cluster client stays in charge of the cluster's shape. A command goes to it instead of a lane when:

* its slot is not in the map yet (before the client first learned the map), or the command has no key;
* the master answered ``MOVED``, ``ASK``, ``TRYAGAIN`` or ``CLUSTERDOWN``: it did not run the command
  (the slot moved or is moving); the client follows the redirection and updates its map, so the next
  command of that slot takes the new owner's lane;
* the lane could not connect to the master (a removed or stopped node): nothing was written; the
  client reaches the cluster its own way and learns the map again; that lane is dropped.

A command that was written and then lost its connection, or timed out, is never sent again (a room
script may have run): it fails with ``ConnectionError`` or ``TimeoutError``, as on one Valkey. So the
errors the store, ``errors.translate`` and the breaker see are those of a lane or of the cluster
client, the same classes either way. ``NOSCRIPT`` from a master is the store's to handle, as on one
Valkey: it loads the scripts (on every master, through the cluster client) and calls again.
"""

from __future__ import annotations

import collections
from typing import Any

from redis import exceptions as rx
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot

from queue_manager.store.valkey.client import cluster_url
from queue_manager.store.valkey.lane import ValkeyLane

# where a command's key is, for the commands the store sends on its lane (others: the cluster client)
_KEY_AT = {"EVALSHA": 3, "EVAL": 3, "HGET": 1, "HMGET": 1, "EXISTS": 1}
# error replies that mean "not here, not now": the command did not run, the cluster client follows them
_REDIRECTS = (rx.MovedError, rx.AskError, rx.TryAgainError, rx.ClusterDownError)


class ClusterLanes:
    """``execute(*args)`` answers what ``RedisCluster.execute_command(*args)`` would, through the lane
    of the master that owns the command's key."""

    def __init__(self, cluster: RedisCluster, template: ValkeyLane) -> None:
        self.cluster = cluster
        self._template = template  # the URL's credentials and timeouts; never connected itself
        self._lanes: dict[str, ValkeyLane] = {}
        self.sent: collections.Counter[str] = collections.Counter()  # commands written per master host:port
        self.handed_on = 0  # commands passed to the cluster client (no slot owner known, redirected, unreachable)

    @classmethod
    def for_url(cls, url: str, client: object) -> ClusterLanes | None:
        """Lanes for a plain cluster URL opened as ``client`` (``open_client``), else None."""
        seed = cluster_url(url)
        if seed is None or not isinstance(client, RedisCluster):
            return None
        template = ValkeyLane.for_url(seed)  # None for rediss:// and options only redis-py knows
        return None if template is None else cls(client, template)

    async def execute(self, *args: Any) -> Any:
        lane = self._lane_for(args)
        if lane is not None:
            try:
                reply = await lane.submit(*args)
            except (rx.ConnectionError, rx.TimeoutError):
                # the master could not be reached and nothing was written: the client finds the cluster
                await self._drop(lane)
            else:
                self.sent[lane.name] += 1
                try:
                    return await reply
                except _REDIRECTS:
                    pass  # answered without running it: the client follows and updates its map
        self.handed_on += 1
        return await self.cluster.execute_command(*args)

    @property
    def masters(self) -> list[str]:
        """The masters (host:port) a lane is open or opening to."""
        return sorted(self._lanes)

    async def close(self) -> None:
        lanes, self._lanes = list(self._lanes.values()), {}
        for lane in lanes:
            await lane.close()

    # ------------------------------------------------------------------ internals

    def _lane_for(self, args: tuple[Any, ...]) -> ValkeyLane | None:
        at = _KEY_AT.get(args[0]) if args else None
        if at is None or len(args) <= at or (at == 3 and int(args[2]) < 1):
            return None
        key = args[at]
        owners = self.cluster.nodes_manager.slots_cache.get(key_slot(key if isinstance(key, bytes) else key.encode()))
        if not owners:
            return None
        master = owners[0]
        lane = self._lanes.get(master.name)
        if lane is None:
            t = self._template
            lane = self._lanes[master.name] = ValkeyLane(
                master.host,
                int(master.port),
                username=t.username,
                password=t.password,
                socket_timeout=t.socket_timeout,
                connect_timeout=t.connect_timeout,
            )
        return lane

    async def _drop(self, lane: ValkeyLane) -> None:
        if self._lanes.get(lane.name) is lane:
            del self._lanes[lane.name]  # a new lane is made if the map names that master again
        await lane.close()

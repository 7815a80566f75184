"""Fixtures for the fleet tests against a real Valkey (``TEST_VALKEY_URL``, never database 0).

With ``TEST_VALKEY_CLUSTER_URL`` set, ``client`` is also a cluster client (the ``cluster`` case) and
``prefix`` then carries the fleet hash tag, as the server names the fleet keys on a cluster."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from queue_manager.store.valkey.client import is_cluster, open_client
from queue_manager.store.valkey.keys import fleet_prefix

URL = os.environ.get("TEST_VALKEY_URL", "redis://127.0.0.1:6379/15")
CLUSTER_URL = os.environ.get("TEST_VALKEY_CLUSTER_URL", "")


@pytest.fixture(params=["valkey", *(["cluster"] if CLUSTER_URL else [])])
async def client(request: pytest.FixtureRequest) -> AsyncIterator[Redis]:
    if request.param == "cluster":
        cluster = open_client(CLUSTER_URL)
        await cluster.ping()
        yield cluster
        await cluster.aclose()
        return
    if URL.rstrip("/").endswith("/0") or URL.count("/") < 3:
        pytest.fail("TEST_VALKEY_URL must name a database other than 0")
    c = Redis.from_url(URL, socket_connect_timeout=2)
    try:
        await c.ping()
    except Exception:
        await c.aclose()
        if os.environ.get("QM_REQUIRE_VALKEY") == "1" or os.environ.get("CI"):
            pytest.fail(f"Valkey at {URL} is required and unreachable")
        pytest.skip("Valkey unreachable")
    yield c
    await c.aclose()


@pytest.fixture
def prefix(client: Redis) -> str:
    return fleet_prefix(f"qmtest:{uuid.uuid4().hex[:8]}:", is_cluster(client))

"""Fixtures for the fleet tests against a real Valkey (``TEST_VALKEY_URL``, never database 0)."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

URL = os.environ.get("TEST_VALKEY_URL", "redis://127.0.0.1:6379/15")


@pytest.fixture
async def client() -> AsyncIterator[Redis]:
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
def prefix() -> str:
    return f"qmtest:{uuid.uuid4().hex[:8]}:"

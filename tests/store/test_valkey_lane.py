"""The hot lane (store/valkey/lane.py) against a real Valkey: the answers and errors redis-py gives,
replies matched in order under concurrency and cancellation, a killed connection replaced, a silent
server timed out, ``submit`` raising only for a command that was not written, and only plain redis://
URLs get a lane."""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import AsyncIterator

import pytest
from redis import exceptions as rx
from redis.asyncio import Redis

from queue_manager.store.valkey.lane import ValkeyLane

from .conftest import VALKEY_URL, drop_prefix, valkey_client


@pytest.fixture
async def env() -> AsyncIterator[tuple[ValkeyLane, Redis, str]]:
    client = await valkey_client()  # skips (or fails under QM_REQUIRE_VALKEY) when Valkey is down
    lane = ValkeyLane.for_url(VALKEY_URL)
    assert lane is not None
    prefix = f"qmtest:{uuid.uuid4().hex[:12]}:"
    try:
        yield lane, client, prefix
    finally:
        await lane.close()
        await drop_prefix(client, prefix)
        await client.aclose()


async def test_answers_as_redis_py_does(env: tuple[ValkeyLane, Redis, str]) -> None:
    lane, client, prefix = env
    key = f"{prefix}h"
    await client.hset(key, "a", "1")
    assert await lane.execute("HGET", key, "a") == await client.hget(key, "a") == b"1"
    assert await lane.execute("HGET", key, "nobody") is None
    sha = await client.script_load("return cjson.encode({k = 'ok', n = tonumber(ARGV[1])})")
    assert await lane.execute("EVALSHA", sha, 1, key, "7") == await client.evalsha(sha, 1, key, "7")
    assert await lane.execute("HSET", key, "b", "2") == 1  # the lane's database is the URL's
    assert await client.hget(key, "b") == b"2"


async def test_error_replies_are_redis_pys_exceptions(env: tuple[ValkeyLane, Redis, str]) -> None:
    lane, _, prefix = env
    with pytest.raises(rx.NoScriptError):
        await lane.execute("EVALSHA", "0" * 40, 0)
    with pytest.raises(rx.ResponseError) as info:
        await lane.execute("HGET", f"{prefix}only-one-arg")
    assert not isinstance(info.value, rx.NoScriptError)
    assert await lane.execute("PING") == b"PONG"  # an error reply leaves the connection usable


async def test_replies_go_to_their_callers_even_when_some_give_up(env: tuple[ValkeyLane, Redis, str]) -> None:
    lane, client, prefix = env
    key = f"{prefix}many"
    await client.hset(key, mapping={f"f{i}": f"v{i}" for i in range(300)})
    tasks = [asyncio.ensure_future(lane.execute("HGET", key, f"f{i}")) for i in range(300)]
    await asyncio.sleep(0)
    for task in tasks[::7]:
        task.cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    for i, result in enumerate(results):
        if i % 7 == 0:
            assert isinstance(result, asyncio.CancelledError)
        else:
            assert result == f"v{i}".encode()


async def test_a_killed_connection_is_replaced_on_the_next_command(env: tuple[ValkeyLane, Redis, str]) -> None:
    lane, client, prefix = env
    key = f"{prefix}k"
    await client.hset(key, "a", "1")
    lane_id = await lane.execute("CLIENT", "ID")
    assert await client.execute_command("CLIENT", "KILL", "ID", lane_id) == 1
    for _ in range(500):  # the close reaches the lane's socket a moment after the kill's reply
        if not lane.connected:
            break
        await asyncio.sleep(0.01)
    assert not lane.connected
    assert await lane.execute("HGET", key, "a") == b"1"
    assert await lane.execute("CLIENT", "ID") != lane_id


async def test_a_command_whose_connection_drops_after_it_was_written_is_not_sent_again() -> None:
    received: list[bytes] = []

    async def drop_after_reading(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received.append(await reader.read(1024))  # the command arrives; no reply, the connection closes
        writer.close()

    server = await asyncio.start_server(drop_after_reading, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    lane = ValkeyLane.for_url(f"redis://127.0.0.1:{port}/0?socket_timeout=5")
    assert lane is not None
    try:
        with pytest.raises(rx.ConnectionError):
            await lane.execute("EVALSHA", "a" * 40, 0)
        assert len(received) == 1 and b"EVALSHA" in received[0]  # one connection, one attempt
    finally:
        await lane.close()
        server.close()
        await server.wait_closed()


async def test_submit_raises_only_when_nothing_was_written() -> None:
    """A connection that cannot be made fails ``submit`` itself (the command can go elsewhere); once
    written, a lost connection fails the reply's future instead (it may have run)."""
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    lane = ValkeyLane.for_url(f"redis://127.0.0.1:{port}/0?socket_connect_timeout=1")
    assert lane is not None
    try:
        with pytest.raises(rx.ConnectionError):
            await lane.submit("PING")
    finally:
        await lane.close()

    received: list[bytes] = []

    async def drop_after_reading(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received.append(await reader.read(1024))
        writer.close()

    server = await asyncio.start_server(drop_after_reading, "127.0.0.1", 0)
    lane = ValkeyLane.for_url(f"redis://127.0.0.1:{server.sockets[0].getsockname()[1]}/0?socket_timeout=5")
    assert lane is not None
    try:
        reply = await lane.submit("PING")  # written: no error here
        with pytest.raises(rx.ConnectionError):
            await reply
        assert len(received) == 1 and b"PING" in received[0]
    finally:
        await lane.close()
        server.close()
        await server.wait_closed()


async def test_a_silent_server_times_out_and_a_closed_port_is_a_connection_error() -> None:
    silent = socket.create_server(("127.0.0.1", 0))  # accepts (backlog) and never answers
    port = silent.getsockname()[1]
    lane = ValkeyLane.for_url(f"redis://127.0.0.1:{port}/0?socket_timeout=0.3&socket_connect_timeout=1")
    assert lane is not None
    try:
        with pytest.raises(rx.TimeoutError):
            await lane.execute("PING")
    finally:
        await lane.close()
        silent.close()
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    lane = ValkeyLane.for_url(f"redis://127.0.0.1:{port}/0?socket_connect_timeout=1")
    assert lane is not None
    try:
        with pytest.raises(rx.ConnectionError):
            await lane.execute("PING")
    finally:
        await lane.close()


def test_only_plain_redis_urls_get_a_lane() -> None:
    lane = ValkeyLane.for_url("redis://u:secret@10.0.0.5:6380/3?socket_timeout=2&socket_connect_timeout=1.5")
    assert lane is not None
    assert (lane.host, lane.port, lane.db, lane.username, lane.password) == ("10.0.0.5", 6380, 3, "u", "secret")
    assert (lane.socket_timeout, lane.connect_timeout) == (2.0, 1.5)
    assert ValkeyLane.for_url("rediss://10.0.0.5:6380/3") is None
    assert ValkeyLane.for_url("unix:///run/valkey.sock") is None
    assert ValkeyLane.for_url("redis://10.0.0.5/3?health_check_interval=5") is None


def test_the_lane_runs_on_uvloop_as_the_server_does() -> None:
    import uvloop

    async def scenario() -> list[object]:
        probe = await valkey_client()
        await probe.aclose()
        lane = ValkeyLane.for_url(VALKEY_URL)
        assert lane is not None
        try:
            return [await lane.execute("PING"), await lane.execute("HGET", f"qmtest:{uuid.uuid4().hex}", "f")]
        finally:
            await lane.close()

    assert uvloop.run(scenario()) == [b"PONG", None]

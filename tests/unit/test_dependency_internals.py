"""The names the server takes from its dependencies that are not their documented API, each checked here.

Every such name is listed below with the module that relies on it. When a new release of a dependency
moves or changes one of them, this file fails first, naming the name, the release and the module to fix,
instead of the server failing at run time (`make test-latest` runs it against the newest releases):

* uvicorn: ``protocols.http.httptools_impl.HttpToolsProtocol`` (subclassed by ``inline/fastpath.py``, which
  reads and sets its request state, feeds its ``data_received`` a request head's room at a time and counts
  the ``headers`` it collects), ``RequestResponseCycle`` (built there for a held request), ``STATUS_LINE``
  (``inline/relay.py``, and the 431 and 408 of ``inline/fastpath.py``) and ``server.ServerState`` (its
  ``connections``, which ``inline/heads.py`` closes connections waiting for a head out of, to make room);
  pyproject.toml also caps uvicorn below
  its next minor release, so a new minor is taken only after this file and ``tests/inline`` pass on it;
* redis-py: ``_parsers.base.BaseParser.parse_error`` (``store/valkey/lane.py``: an error reply read by
  hiredis becomes redis-py's exception class), ``crc.key_slot`` and ``RedisCluster.nodes_manager.slots_cache``
  (``store/valkey/cluster_lane.py``: which master owns a key), and ``Connection.pack_command`` as the
  fallback of ``store/valkey/client.py``'s ``PackedConnection``.
"""

from __future__ import annotations

import asyncio
import inspect
import socket
from importlib.metadata import version
from typing import Any

import hiredis
import pytest
from redis import exceptions as rx
from redis.asyncio.cluster import RedisCluster

from queue_manager.store.valkey.client import PackedConnection


def _where(dist: str, name: str, user: str) -> str:
    return (
        f"{dist} {version(dist)} no longer has {name} as {user} uses it; fix {user} (or cap {dist} in pyproject.toml)"
    )


# ------------------------------------------------------------------------------------------------ uvicorn

# what inline/fastpath.py calls or overrides on uvicorn's protocol
PROTOCOL_METHODS = (
    "data_received",
    "connection_made",
    "connection_lost",
    "pause_writing",
    "resume_writing",
    "on_headers_complete",
    "on_body",
    "on_message_complete",
    "on_response_complete",
    "handle_websocket_upgrade",
    "_start_asgi_task",
)
# what it reads or sets on a protocol instance once a connection is made
PROTOCOL_STATE = (
    "app",
    "cycle",
    "parser",
    "pipeline",
    "flow",
    "transport",
    "loop",
    "logger",
    "access_logger",
    "access_log",
    "server_state",
    "connections",
    "tasks",
    "limit_concurrency",
    "timeout_keep_alive",
    "headers",
)
CYCLE_PARAMETERS = {
    "scope",
    "transport",
    "flow",
    "logger",
    "access_logger",
    "access_log",
    "default_headers",
    "message_event",
    "expect_100_continue",
    "keep_alive",
    "on_response",
}


def test_uvicorn_httptools_protocol_has_what_the_fast_path_subclasses() -> None:
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError as exc:  # pragma: no cover - only on a release that moved it
        pytest.fail(
            _where("uvicorn", "protocols.http.httptools_impl.HttpToolsProtocol", "inline/fastpath.py") + f": {exc}"
        )
    params = list(inspect.signature(HttpToolsProtocol.__init__).parameters)
    assert params[:5] == ["self", "config", "server_state", "app_state", "_loop"], _where(
        "uvicorn",
        f"HttpToolsProtocol.__init__(config, server_state, app_state, _loop) (it takes {params})",
        "inline/fastpath.py InlineProtocol.__init__",
    )
    missing = [m for m in PROTOCOL_METHODS if not callable(getattr(HttpToolsProtocol, m, None))]
    assert not missing, _where("uvicorn", f"HttpToolsProtocol methods {missing}", "inline/fastpath.py")


async def test_uvicorn_protocol_state_after_a_connection() -> None:
    from uvicorn.config import Config
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    from uvicorn.server import ServerState

    async def app(scope: Any, receive: Any, send: Any) -> None:  # pragma: no cover - never called
        return None

    config = Config(app, http="httptools", log_level="warning", limit_concurrency=10)
    config.load()
    state = ServerState()
    for attr in ("default_headers", "total_requests", "connections", "tasks"):
        assert hasattr(state, attr), _where("uvicorn", f"ServerState.{attr}", "inline/fastpath.py")
    protocol = HttpToolsProtocol(config, state, {})
    ours, theirs = socket.socketpair()
    try:
        loop = asyncio.get_running_loop()
        transport, _ = await loop.connect_accepted_socket(lambda: protocol, ours)
        missing = [attr for attr in PROTOCOL_STATE if not hasattr(protocol, attr)]
        assert not missing, _where("uvicorn", f"HttpToolsProtocol instance attributes {missing}", "inline/fastpath.py")
        assert protocol.cycle is None and protocol.limit_concurrency == 10
        assert callable(protocol.parser.should_upgrade), _where("uvicorn", "parser.should_upgrade()", "fastpath.py")
        # a head fed in parts, as memoryview slices: the fields seen so far are in ``headers``
        protocol.data_received(memoryview(b"GET / HTTP/1.1\r\nHost: x\r\nA: b\r\n")[:30])  # type: ignore[arg-type]
        assert protocol.headers == [(b"host", b"x")], _where(
            "uvicorn", "data_received(memoryview) filling headers", "inline/fastpath.py"
        )
        transport.close()
    finally:
        theirs.close()


def test_uvicorn_request_response_cycle_takes_what_the_fast_path_passes() -> None:
    from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

    params = set(inspect.signature(RequestResponseCycle.__init__).parameters) - {"self"}
    assert params == CYCLE_PARAMETERS, _where(
        "uvicorn",
        f"RequestResponseCycle({sorted(CYCLE_PARAMETERS)}) (it takes {sorted(params)})",
        "inline/fastpath.py _to_asgi",
    )


def test_uvicorn_status_lines() -> None:
    from uvicorn.protocols.http.httptools_impl import STATUS_LINE

    assert STATUS_LINE[200] == b"HTTP/1.1 200 OK\r\n", _where("uvicorn", "STATUS_LINE[status]", "inline/relay.py")
    assert STATUS_LINE[503].startswith(b"HTTP/1.1 503 "), _where("uvicorn", "STATUS_LINE[status]", "inline/relay.py")
    for status in (408, 431):
        assert STATUS_LINE[status].startswith(b"HTTP/1.1 %d " % status), _where(
            "uvicorn", "STATUS_LINE[status]", "inline/fastpath.py"
        )


# ------------------------------------------------------------------------------------------------ redis-py


@pytest.mark.parametrize(
    ("reply", "kind"),
    [
        ("NOSCRIPT No matching script. Please use EVAL.", rx.NoScriptError),
        ("OOM command not allowed when used memory > 'maxmemory'.", rx.OutOfMemoryError),
        ("READONLY You can't write against a read only replica.", rx.ReadOnlyError),
        ("ERR unknown command 'NOPE'", rx.ResponseError),
        ("LOADING Redis is loading the dataset in memory", rx.BusyLoadingError),
        ("MOVED 3999 127.0.0.1:6381", rx.MovedError),
        ("TRYAGAIN Multiple keys request during rehashing of slot", rx.TryAgainError),
        ("CLUSTERDOWN The cluster is down", rx.ClusterDownError),
    ],
)
def test_redis_parse_error_maps_error_replies_to_its_exceptions(reply: str, kind: type[Exception]) -> None:
    try:
        from redis._parsers.base import BaseParser
    except ImportError as exc:  # pragma: no cover - only on a release that moved it
        pytest.fail(_where("redis", "redis._parsers.base.BaseParser", "store/valkey/lane.py") + f": {exc}")
    error = BaseParser.parse_error(reply)  # type: ignore[no-untyped-call]
    assert isinstance(error, kind), _where(
        "redis", f"BaseParser.parse_error giving {kind.__name__}", "store/valkey/lane.py"
    )


def test_redis_key_slot_is_the_cluster_hash_slot() -> None:
    try:
        from redis.crc import key_slot
    except ImportError as exc:  # pragma: no cover - only on a release that moved it
        pytest.fail(_where("redis", "redis.crc.key_slot", "store/valkey/cluster_lane.py") + f": {exc}")
    # CLUSTER KEYSLOT foo is 12182; a hash tag hashes only what is between the braces
    assert key_slot(b"foo") == 12182, _where("redis", "crc.key_slot (CRC16 mod 16384)", "store/valkey/cluster_lane.py")
    assert key_slot(b"{foo}:bar") == 12182, _where("redis", "crc.key_slot hash tags", "store/valkey/cluster_lane.py")


def test_redis_cluster_keeps_its_slot_owners_in_slots_cache() -> None:
    cluster = RedisCluster(host="127.0.0.1", port=7000)  # not connected: the attribute is made by the constructor
    cache = getattr(getattr(cluster, "nodes_manager", None), "slots_cache", None)
    assert isinstance(cache, dict), _where(
        "redis", "RedisCluster.nodes_manager.slots_cache (slot -> [master, replicas…])", "store/valkey/cluster_lane.py"
    )


def test_packed_connection_falls_back_to_redis_py_packing() -> None:
    conn = PackedConnection(host="127.0.0.1", port=6379)
    assert conn.pack_command("SET", b"k", b"v") == [hiredis.pack_command(("SET", b"k", b"v"))]
    # hiredis refuses a bytearray; redis-py's own packing takes it and gives the same RESP bytes
    fallback = b"".join(conn.pack_command("SET", bytearray(b"k"), b"v"))
    assert fallback == hiredis.pack_command(("SET", b"k", b"v")), _where(
        "redis", "Connection.pack_command as a fallback", "store/valkey/client.py"
    )

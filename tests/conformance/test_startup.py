"""Start-up: the listening line, /healthz, /api/version, refusals, and QM_SERVER_CMD."""

from __future__ import annotations

import importlib.util
import signal
import subprocess
import sys
from collections.abc import Callable

import httpx
import pytest
from harness import Server, ServerStartError, server_command, spawn_server, start_server

ServerFactory = Callable[..., Server]


def test_listening_line_names_the_url(server: Server) -> None:
    assert server.listening_line is not None
    assert "listening" in server.listening_line
    assert f":{server.port}" in server.listening_line
    assert server.base_url.startswith("http://127.0.0.1:")


def test_ctrl_c_stops_gracefully_without_a_traceback(make_server: ServerFactory) -> None:
    """Ctrl-C in a terminal (SIGINT) is the everyday way to stop ``make run``: a clean stop, exit 0, no traceback."""
    srv = make_server()
    with srv.client() as c:
        assert c.get("/healthz").status_code == 200
    srv.proc.send_signal(signal.SIGINT)
    assert srv.wait() == 0, srv.stderr
    assert "Traceback" not in srv.stderr, srv.stderr
    assert "Queue Manager stopped." in srv.stderr


def test_sigterm_stops_gracefully_and_exits_0(make_server: ServerFactory) -> None:
    """SIGTERM is how a service manager stops the server: a clean stop exits 0, not as killed by the signal."""
    srv = make_server()
    with srv.client() as c:
        assert c.get("/healthz").status_code == 200
    srv.proc.send_signal(signal.SIGTERM)
    assert srv.wait() == 0, srv.stderr
    assert "Traceback" not in srv.stderr, srv.stderr
    assert "Queue Manager stopped." in srv.stderr


def test_healthz_ok_and_ready(server: Server) -> None:
    r = httpx.get(server.base_url + "/healthz", timeout=5)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert body["status"] == "ok"
    assert body["ready"] is True


def test_healthz_head_matches_get(server: Server) -> None:
    with server.client() as c:
        h = c.head("/healthz")
        assert h.status_code == 200
        assert h.content == b""
        assert int(h.headers["content-length"]) > 0
        # The body carries an uptime whose printed length may change between two requests, so
        # compare HEAD with GETs on either side of it and accept a round where the GETs agree.
        for _ in range(10):
            g1 = c.get("/healthz")
            h = c.head("/healthz")
            g2 = c.get("/healthz")
            assert h.status_code == g1.status_code == 200
            assert h.content == b""
            if g1.headers["content-length"] == g2.headers["content-length"]:
                assert h.headers["content-length"] == g1.headers["content-length"]
                assert int(g1.headers["content-length"]) == len(g1.content)
                break
        else:
            pytest.fail("GET /healthz never gave the same Content-Length twice in a row")


def test_version_always_200(server: Server) -> None:
    with server.client() as c:
        for path in ("/api/version", "/api/v1/version"):
            r = c.get(path)
            assert r.status_code == 200, r.text
            assert isinstance(r.json(), dict)
        assert c.head("/api/version").status_code == 200


# ---------------------------------------------------------------------- refusals (exit code + stderr)


def _refused(env: dict[str, str]) -> Server:
    srv = spawn_server(env)
    try:
        code = srv.wait(15)
    except subprocess.TimeoutExpired:
        srv.stop()
        pytest.fail(f"the server did not refuse {env}; it is still running\n{srv.stdout}")
    srv.stop()
    assert code != 0, f"{env} exited 0"
    assert srv.listening_line is None, f"{env} printed a listening line before refusing"
    return srv


def test_refuses_unknown_store() -> None:
    srv = _refused({"STORE": "bogus"})
    assert "STORE" in srv.stderr


def test_refuses_bad_trust_proxy_range() -> None:
    srv = _refused({"TRUST_PROXY_IPS": "10.0.0.0/33", "TRUST_PROXY": "1"})
    assert "TRUST_PROXY_IPS" in srv.stderr
    assert "10.0.0.0/33" in srv.stderr  # the refusal names the entry


def test_refuses_short_edge_secret() -> None:
    srv = _refused({"EDGE_SECRET": "abcde"})
    assert "EDGE_SECRET" in srv.stderr
    assert "abcde" not in srv.stderr  # a secret is never echoed


def test_start_failure_reports_stderr() -> None:
    with pytest.raises(ServerStartError) as info:
        start_server({"STORE": "bogus"}, timeout=15)
    assert info.value.returncode not in (None, 0)
    assert "STORE" in str(info.value)


def test_start_timeout_reports_and_kills() -> None:
    cmd = [
        sys.executable,
        "-c",
        "import sys, time; print('warming up', flush=True); "
        "sys.stderr.write('still starting'); sys.stderr.flush(); time.sleep(60)",
    ]
    with pytest.raises(ServerStartError) as info:
        start_server(cmd=cmd, timeout=1.5)
    assert info.value.returncode is None  # it was still running: the harness stopped it
    assert "still starting" in info.value.stderr


# ---------------------------------------------------------------------- QM_SERVER_CMD

# These run this repository's server under an explicit QM_SERVER_CMD, to prove the harness honours it.
needs_this_server = pytest.mark.skipif(
    importlib.util.find_spec("queue_manager") is None, reason="this repository's server is not installed"
)


def test_server_command_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("QM_SERVER_CMD", raising=False)
    assert server_command() == [sys.executable, "-m", "queue_manager"]


def test_server_command_splitting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QM_SERVER_CMD", '"/opt/my server/bin/python" -m  queue_manager "a b"')
    assert server_command() == ["/opt/my server/bin/python", "-m", "queue_manager", "a b"]


@needs_this_server
def test_qm_server_cmd_is_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QM_SERVER_CMD", f'"{sys.executable}" -m queue_manager')
    srv = start_server()
    try:
        assert srv.argv == [sys.executable, "-m", "queue_manager"]
        assert httpx.get(srv.base_url + "/healthz", timeout=5).json()["ready"] is True
    finally:
        srv.stop()


@needs_this_server
def test_qm_server_cmd_runs_that_command(monkeypatch: pytest.MonkeyPatch) -> None:
    # A command observably different from the default: it fixes the admin key before the server
    # reads its environment, and the double quotes keep the whole program one argument.
    code = (
        "import os, runpy; os.environ['ADMIN_KEY'] = 'set-by-qm-server-cmd'; "
        "runpy.run_module('queue_manager', run_name='__main__')"
    )
    monkeypatch.setenv("QM_SERVER_CMD", f'"{sys.executable}" -c "{code}"')
    srv = start_server()
    try:
        r = httpx.get(
            srv.base_url + "/api/admin/rooms", timeout=5, headers={"Authorization": "Bearer set-by-qm-server-cmd"}
        )
        assert r.status_code == 200, r.text
        r = httpx.get(srv.base_url + "/api/admin/rooms", timeout=5, headers=srv.admin_headers)
        assert r.status_code == 401
    finally:
        srv.stop()


def test_qm_server_cmd_failure_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "QM_SERVER_CMD", f'"{sys.executable}" -c "import sys; sys.stderr.write(\'boom here\'); sys.exit(3)"'
    )
    with pytest.raises(ServerStartError) as info:
        start_server()
    assert info.value.returncode == 3
    assert "boom here" in info.value.stderr


# ---------------------------------------------------------------------- the EDGE_SECRET line at start

EDGE_LINE = "EDGE_SECRET is not set: requests that bypass Cloudflare are accepted"


def test_edge_secret_line_printed_at_start_exactly_when_the_guide_says(make_server: ServerFactory, store: str) -> None:
    """Unset with STORE=valkey (or NODE_ENV=production, which needs valkey): printed once, before serving."""
    srv = make_server()
    assert srv.stderr.count(EDGE_LINE) == (1 if store == "valkey" else 0), srv.stderr
    if store == "valkey":
        prod = make_server({"NODE_ENV": "production"})
        assert prod.stderr.count(EDGE_LINE) == 1, prod.stderr
    guarded = make_server({"EDGE_SECRET": "a-long-random-edge-value-0123456789"})
    assert EDGE_LINE not in guarded.stderr, guarded.stderr

"""Black-box HTTP harness: start the server as its own process and talk to it over HTTP only.

The Python counterpart of the Operations Guide's "Running the HTTP tests":

* every server gets a temporary directory of its own (``data_dir``), a free port (found by binding
  port 0 first), ``HOST=127.0.0.1``, a random ``ADMIN_KEY`` and a random 48-character ``SECRET``,
  every limit knob set to ``"0"`` (off), plus whatever the test adds (a value of ``None`` unsets a
  variable);
* the command is ``QM_SERVER_CMD`` when set (split with :func:`shlex.split`, double quotes group a
  token, spawned with no shell), else ``[sys.executable, "-m", "queue_manager"]``, which is forked from a
  program that has imported the package (``warm_start.py``; ``QM_TEST_WARM_START=0`` turns it off);
* the server is ready once it prints a line containing ``listening`` to stdout (15 s at most); on a
  timeout or an early exit the start fails with the process's stderr;
* on the ``valkey`` store (the test's store, see :func:`use_store`, or ``STORE=valkey``) it also gets
  ``STORE=valkey SIDESTORE=pg``, a Valkey key prefix and a PostgreSQL schema of its own, deleted
  when it stops.

Black-box rule: nothing here imports the server package or reads its internals. Tests assert on
HTTP answers only (the refusal tests alone read the exit code and stderr: that is the contract).
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import json
import os
import random
import re
import secrets
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx
import warm_spawn

START_TIMEOUT_SEC = 15.0
STOP_TIMEOUT_SEC = 10.0
HTTP_TIMEOUT_SEC = 5.0

# The rate limits and stream caps: all off unless a test turns one on.
LIMIT_KNOBS = (
    "JOIN_LIMIT_PER_MIN",
    "CHECK_LIMIT_PER_MIN",
    "WAITING_LIMIT_PER_MIN",
    "NOTIFY_LIMIT_PER_MIN",
    "ADMIN_AUTH_FAIL_PER_MIN",
    "SSE_PER_IP",
    "SSE_MAX_TOTAL",
)

# Every documented server setting and the test-only variables: never inherited from the shell that
# runs pytest, so a developer's exported STORE or TRUST_PROXY cannot change what a test sees.
SERVER_VARIABLES = (
    "PORT HOST STORE SIDESTORE NODE_ENV ADMIN_KEY SECRET SECRET_PREVIOUS TOKEN_SIGN_V2 TOKEN_MAX_AGE_SEC "
    "QUEUE_COOKIE_MAX_AGE_SEC TOKEN_REFRESH_AFTER_MS MONITOR_TOKEN_TTL_SEC QM_INSTANCE_ID VALKEY_URL "
    "VALKEY_PREFIX DATABASE_URL PG_CA_FILE RESYNC_MS LEADER_LEASE_MS VALKEY_ALERT_AFTER_MS TRUST_PROXY "
    "TRUST_PROXY_IPS COOKIE_SECURE EDGE_SECRET PUBLIC_API_KEY PUBLIC_URL ADMIN_HOST JOIN_LIMIT_PER_MIN "
    "CHECK_LIMIT_PER_MIN WAITING_LIMIT_PER_MIN NOTIFY_LIMIT_PER_MIN ADMIN_AUTH_FAIL_PER_MIN SSE_PER_IP "
    "SSE_MAX_TOTAL RATE_LIMIT_MAX_KEYS MAX_CONNECTIONS CONNECTION_RESERVE PROXY_TIMEOUT_MS PROXY_ALLOW_PRIVATE "
    "SHUTDOWN_GRACE_MS SHUTDOWN_DRAIN_MS PROTECTION_MODE PROTECTION_BLOCK_AT PROTECTION_ALLOW_IPS "
    "ALERT_WEBHOOK_URL ALERT_EVERY_MS ALERT_HOLD_SEC ALERT_REPEAT_SEC HISTORY_RETAIN_DAYS LAPSED_TTL_MS "
    "EMAIL_NOTIFY AUTOTUNE QM_SERVER_CMD TEST_VALKEY_URL TEST_VALKEY_CLUSTER_URL TEST_DATABASE_URL QM_REQUIRE_VALKEY "
    "QM_TEST_STORES"
).split()


def _documented_variables() -> list[str]:
    """Every setting in docs/configuration.md's table (read as a document, not from the package), so a new
    setting is scrubbed from the inherited environment as soon as it is documented."""
    table = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "configuration.md")
    try:
        with open(table, encoding="utf-8") as fh:
            return re.findall(r"^\| `([A-Z][A-Z0-9_]+)`", fh.read(), re.M)
    except OSError:
        return []


SERVER_VARIABLES = sorted(set(SERVER_VARIABLES) | set(_documented_variables()))

_TLS = ssl.create_default_context()
_URL_RE = re.compile(r"https?://[^\s)\"'>]+")
_LIVE: set[Server] = set()
_LIVE_LOCK = threading.Lock()


class ServerStartError(AssertionError):
    """The server did not print ``listening`` in time, or exited first; carries its stderr."""

    def __init__(self, message: str, returncode: int | None, stderr: str) -> None:
        super().__init__(f"{message}\n--- server stderr ---\n{stderr[-8000:]}")
        self.returncode = returncode
        self.stderr = stderr


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


_RESERVED: set[int] = set()  # ports this test process has handed out: never twice


def reserved_port(host: str = "127.0.0.1") -> int:
    """A free port below the kernel's ephemeral range, for a listener that binds it a while after it is
    chosen: a port from ``free_port`` can meanwhile be given to some outgoing connection of another test
    (the kernel draws those from the same range), one below the range only to a listener that asks for it.
    Each pytest-xdist worker draws from a slice of its own and never hands out a port twice, so two
    tests (or two sites of one rig) that bind later never get the same one."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    start, end = 10_000, max(10_001, low)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    try:
        workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    except ValueError:
        workers = 1
    if worker.startswith("gw") and worker[2:].isdigit() and workers > 1 and int(worker[2:]) < workers:
        span = (end - start) // workers
        start += int(worker[2:]) * span
        end = start + span
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for _ in range(200):
        port = random.randrange(start, end)
        if port in _RESERVED:
            continue
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
        _RESERVED.add(port)
        return port
    return free_port(host)


def peer_env(server: Server) -> dict[str, str]:
    """The environment of a second instance of ``server``'s fleet: the same Valkey prefix, PostgreSQL
    schema, SECRET and ADMIN_KEY, and a spool directory of its own."""
    env = {k: server.env[k] for k in ("VALKEY_PREFIX", "PG_SCHEMA", "SECRET", "ADMIN_KEY")}
    env["SPOOL_DIR"] = server.env["SPOOL_DIR"] + "-b"
    return env


def server_command(environ: Mapping[str, str] | None = None) -> list[str]:
    """``QM_SERVER_CMD`` split shell-style (no shell is ever run), or this repository's server."""
    source = os.environ if environ is None else environ
    raw = (source.get("QM_SERVER_CMD") or "").strip()
    if raw:
        argv = shlex.split(raw, posix=True)
        if not argv:
            raise ValueError("QM_SERVER_CMD is set but names no command")
        return argv
    return [sys.executable, "-m", "queue_manager"]


def random_secret(length: int = 48) -> str:
    return secrets.token_urlsafe(length)[:length]


class Server:
    """One server process. ``stop()`` is idempotent and always leaves no process behind."""

    def __init__(self, argv: list[str], env: dict[str, str], port: int, data_dir: str) -> None:
        self.argv = argv
        self.env = env
        self.port = port
        self.data_dir = data_dir
        self.admin_key = env.get("ADMIN_KEY", "")
        self.secret = env.get("SECRET", "")
        self.base_url = f"http://127.0.0.1:{port}"
        self.listening_line: str | None = None
        self.stdout_lines: list[str] = []
        self._listening = threading.Event()
        self._stderr_path = os.path.join(data_dir, "server.stderr")
        self._stderr_file = open(self._stderr_path, "wb")
        # this repository's server is forked from a pre-imported one (warm_start.py); any other command,
        # or a warm start that is off or failed, gets a fresh interpreter
        self.proc: Any = warm_spawn.spawn(argv, env, data_dir, self._stderr_file)
        if self.proc is None:
            self.proc = subprocess.Popen(
                argv,
                env=env,
                cwd=data_dir,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=self._stderr_file,
                shell=False,
            )
        self._reader = threading.Thread(target=self._read_stdout, name=f"qm-stdout-{port}", daemon=True)
        self._reader.start()
        self._stopped = False
        self._stderr_text = ""
        with _LIVE_LOCK:
            _LIVE.add(self)

    # ------------------------------------------------------------------ process

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            self.stdout_lines.append(line)
            if self.listening_line is None and "listening" in line:
                self.listening_line = line
                match = _URL_RE.search(line)
                if match:
                    url = match.group(0).rstrip(".,;")
                    if "://0.0.0.0" not in url and "://[::]" not in url:
                        self.base_url = url.rstrip("/")
                self._listening.set()
        self._listening.set()  # stdout closed: the process is gone (or closed it); wake the waiter

    def wait_listening(self, timeout: float = START_TIMEOUT_SEC) -> None:
        self._listening.wait(timeout)
        if self.listening_line is not None:
            return
        deadline = time.monotonic() + 2.0
        while self.proc.poll() is None and time.monotonic() < deadline and self._listening.is_set():
            time.sleep(0.02)
        code = self.proc.poll()
        self.stop()
        what = (
            f"the server exited with code {code} before printing a 'listening' line"
            if code is not None
            else f"the server printed no 'listening' line within {timeout:g} s"
        )
        raise ServerStartError(f"{what} (command: {self.argv})", code, self.stderr)

    @property
    def returncode(self) -> int | None:
        return self.proc.poll()

    @property
    def stderr(self) -> str:
        try:
            self._stderr_file.flush()
        except ValueError:
            pass
        try:
            with open(self._stderr_path, "rb") as fh:
                return fh.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return self._stderr_text

    @property
    def stdout(self) -> str:
        return "\n".join(self.stdout_lines)

    def wait(self, timeout: float = STOP_TIMEOUT_SEC) -> int:
        return self.proc.wait(timeout)

    def kill(self) -> None:
        """SIGKILL, no grace."""
        if self.proc.poll() is None:
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(STOP_TIMEOUT_SEC)

    def stop(self, timeout: float = STOP_TIMEOUT_SEC) -> int | None:
        """SIGTERM, wait up to ``timeout``, then SIGKILL. Removes the temporary directory."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        if not self._stopped:
            self._stopped = True
            self._reader.join(2.0)
            if self.proc.stdout is not None:
                self.proc.stdout.close()
            self._stderr_text = self.stderr
            self._stderr_file.close()
            shutil.rmtree(self.data_dir, ignore_errors=True)
            with _LIVE_LOCK:
                _LIVE.discard(self)
            _drop_valkey_state(self.env)
        return self.proc.returncode

    # ------------------------------------------------------------------ HTTP

    @property
    def admin_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.admin_key}"}

    def client(self, **kwargs: Any) -> httpx.Client:
        """A fresh client with a cookie jar of its own: one browser.

        An idle connection is dropped after 2 s, well before the server closes it (uvicorn's 5 s keep-alive):
        with both at 5 s, a request sent on a connection the server is closing at that moment fails with
        "Server disconnected without sending a response" (seen on a loaded machine)."""
        kwargs.setdefault("timeout", HTTP_TIMEOUT_SEC)
        kwargs.setdefault("limits", httpx.Limits(keepalive_expiry=2.0))
        # one TLS context for every client (the servers speak plain HTTP): building one per client costs
        # about 30 ms of CPU (the CA bundle read again), thousands of times a run
        kwargs.setdefault("verify", _TLS)
        return httpx.Client(base_url=self.base_url, **kwargs)

    def admin(self, **kwargs: Any) -> httpx.Client:
        headers = {**self.admin_headers, **kwargs.pop("headers", {})}
        return self.client(headers=headers, **kwargs)

    def __repr__(self) -> str:
        return f"<Server {self.base_url} pid={self.proc.pid} rc={self.proc.poll()}>"


STORES = ("memory", "valkey")
_current_store: str | None = None


def stores_under_test(environ: Mapping[str, str] | None = None) -> list[str]:
    """The stores the HTTP suite runs on: ``QM_TEST_STORES`` (``memory``, ``valkey`` or both, comma
    separated); without it ``valkey`` when ``STORE=valkey``, else ``memory``."""
    source = os.environ if environ is None else environ
    raw = (source.get("QM_TEST_STORES") or "").strip()
    if not raw:
        return ["valkey"] if source.get("STORE") == "valkey" else ["memory"]
    kinds = [part.strip() for part in raw.split(",") if part.strip()]
    unknown = [k for k in kinds if k not in STORES]
    if unknown or not kinds:
        raise RuntimeError(f"QM_TEST_STORES={raw!r}: name memory, valkey or both (comma separated)")
    return list(dict.fromkeys(kinds))


def use_store(kind: str | None) -> None:
    """Set the store the servers started from now on run on (``None``: back to the environment's)."""
    global _current_store
    if kind is not None and kind not in STORES:
        raise ValueError(f"unknown store {kind!r}")
    _current_store = kind


def current_store() -> str:
    if _current_store is not None:
        return _current_store
    return "valkey" if os.environ.get("STORE") == "valkey" else "memory"


def valkey_mode(store: str | None = None) -> dict[str, str] | None:
    """The Valkey and PostgreSQL a valkey-mode server uses, or None on the memory store.

    Uses TEST_VALKEY_URL and TEST_DATABASE_URL only (never VALKEY_URL/DATABASE_URL), refuses Valkey
    database 0 and a database whose name does not end in ``_test``.
    """
    if (store or current_store()) != "valkey":
        return None
    valkey, database = os.environ.get("TEST_VALKEY_URL"), os.environ.get("TEST_DATABASE_URL")
    cluster = valkey_cluster()
    if cluster:  # a Valkey cluster has database 0 only: the servers' key prefixes keep them apart
        valkey = cluster
    if not valkey or not database:
        raise RuntimeError("the valkey store needs TEST_VALKEY_URL and TEST_DATABASE_URL for the HTTP suites")
    db_path = urlsplit(valkey).path.strip("/")
    if not cluster and (not db_path.isdigit() or int(db_path) == 0):
        raise RuntimeError(f"TEST_VALKEY_URL must name a Valkey database other than 0 (got {valkey!r})")
    if not urlsplit(database).path.strip("/").endswith("_test"):
        raise RuntimeError("TEST_DATABASE_URL must name a database whose name ends in _test")
    return {"valkey": valkey, "database": database}


def valkey_cluster() -> str:
    """``TEST_VALKEY_CLUSTER_URL`` (``redis+cluster://host:port``, ``make test-cluster`` starts one): when
    set, every valkey-mode server is handed it as VALKEY_URL instead of TEST_VALKEY_URL."""
    return os.environ.get("TEST_VALKEY_CLUSTER_URL", "").strip()


def sync_valkey(url: str, **kwargs: Any) -> Any:
    """A synchronous client for a server's VALKEY_URL: ``redis.Redis``, or ``redis.cluster.RedisCluster``
    for a cluster URL (its ``delete`` of keys in many slots is split by slot)."""
    import redis
    from redis.cluster import RedisCluster

    from queue_manager.store.valkey.client import cluster_url

    seed = cluster_url(url)
    if seed is not None:
        return RedisCluster.from_url(seed, **kwargs)
    return redis.Redis.from_url(url, **kwargs)


def fleet_keys(env: Mapping[str, str]) -> str:
    """Where a valkey-mode server's fleet keys (``mail:…``, ``leader``, …) start: its VALKEY_PREFIX, and
    on a cluster the fleet hash tag after it (``queue_manager/store/valkey/keys.py``)."""
    from queue_manager.store.valkey.client import cluster_url
    from queue_manager.store.valkey.keys import fleet_prefix

    return fleet_prefix(env.get("VALKEY_PREFIX", ""), cluster_url(env.get("VALKEY_URL", "")) is not None)


def valkey_services() -> dict[str, str]:
    """The Valkey and PostgreSQL URLs a valkey-mode server uses (``valkey``, ``database``)."""
    mode = valkey_mode("valkey")
    assert mode is not None
    return mode


def build_env(
    extra: Mapping[str, str | None] | None, port: int, data_dir: str = "", store: str | None = None
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SERVER_VARIABLES}
    mode = valkey_mode(store)
    if mode is not None:  # a key prefix and a schema of its own per server (per dataDir), deleted after
        tag = uuid.uuid4().hex[:10]
        env.update(
            {
                "STORE": "valkey",
                "SIDESTORE": "pg",
                "VALKEY_URL": mode["valkey"],
                "DATABASE_URL": mode["database"],
                "VALKEY_PREFIX": f"qmt{tag}:",
                "PG_SCHEMA": f"qmt_{tag}",
                "SPOOL_DIR": os.path.join(data_dir or tempfile.gettempdir(), "spool"),
            }
        )
    env.update(
        {
            "PORT": str(port),
            "HOST": "127.0.0.1",
            "ADMIN_KEY": "qm-test-admin-" + secrets.token_hex(12),
            "SECRET": random_secret(48),
            "PYTHONUNBUFFERED": "1",
        }
    )
    for knob in LIMIT_KNOBS:
        env[knob] = "0"
    for key, value in (extra or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = str(value)
    return env


def _drop_valkey_state(env: Mapping[str, str]) -> None:
    """Delete a valkey-mode server's keys and schema (infrastructure cleanup, not the server's API)."""
    prefix, schema = env.get("VALKEY_PREFIX"), env.get("PG_SCHEMA")
    if env.get("STORE") != "valkey" or not prefix or not schema or not prefix.startswith("qmt"):
        return
    with contextlib.suppress(Exception):
        client = sync_valkey(env["VALKEY_URL"], socket_connect_timeout=2)
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        for i in range(0, len(keys), 500):
            client.delete(*keys[i : i + 500])
        client.close()
    with contextlib.suppress(Exception):
        subprocess.run(
            ["psql", env["DATABASE_URL"], "-q", "-c", f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'],
            capture_output=True,
            timeout=20,
            check=False,
        )


def spawn_server(
    env: Mapping[str, str | None] | None = None, *, cmd: list[str] | None = None, store: str | None = None
) -> Server:
    """Start the process and return at once (the refusal tests wait for it to exit instead).

    ``store`` (``memory`` or ``valkey``) overrides the test's current store (:func:`use_store`)."""
    port = free_port()
    data_dir = tempfile.mkdtemp(prefix="qm-conformance-")
    full_env = build_env(env, port, data_dir, store)
    argv = list(cmd) if cmd is not None else server_command()
    starts = os.environ.get("QM_TEST_START_LOG")  # where the suite's time goes: one line per server started
    if starts:
        with open(starts, "a") as log:
            log.write(f"{os.environ.get('PYTEST_CURRENT_TEST', '?')}\t{full_env.get('STORE', 'memory')}\n")
    try:
        return Server(argv, full_env, port, data_dir)
    except OSError:
        shutil.rmtree(data_dir, ignore_errors=True)
        raise


def start_server(
    env: Mapping[str, str | None] | None = None,
    *,
    cmd: list[str] | None = None,
    timeout: float = START_TIMEOUT_SEC,
    store: str | None = None,
) -> Server:
    """Start a server and return once it prints ``listening``; raises :class:`ServerStartError`."""
    last: ServerStartError | None = None
    for _attempt in range(2):  # a free port can be taken between probing and binding: retry once
        srv = spawn_server(env, cmd=cmd, store=store)
        try:
            srv.wait_listening(timeout)
            return srv
        except ServerStartError as err:
            last = err
            if "address already in use" not in err.stderr.lower():
                raise
    assert last is not None
    raise last


@atexit.register
def _stop_all() -> None:
    with _LIVE_LOCK:
        live = list(_LIVE)
    for srv in live:
        with contextlib.suppress(Exception):
            srv.kill()


# ---------------------------------------------------------------------- helpers tests share

T = TypeVar("T")


def unique_id(prefix: str = "r") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def wait_until(fn: Callable[[], T | None], timeout: float = 8.0, interval: float = 0.1, what: str = "") -> T:
    """Poll ``fn`` until it returns something truthy; fail after ``timeout`` (a generous upper bound)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        last = fn()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what or fn!r}; last value: {last!r}")
        time.sleep(interval)


def clear_of_the_minute_turn(need_sec: float = 20.0) -> None:
    """On the valkey store ADMIN_AUTH_FAIL_PER_MIN counts per wall-clock minute (the servers run on this
    host's clock): before a test spends the allowance, wait until ``need_sec`` are left in the current
    minute, so its failures and the lockout they earn fall in one window. No wait on the memory store,
    whose window starts at the address's first failure."""
    if current_store() != "valkey":
        return
    wait_until(
        lambda: 60.0 - time.time() % 60.0 >= need_sec,
        timeout=need_sec + 5.0,
        interval=0.2,
        what=f"{need_sec:g} s left in the wall-clock minute",
    )


def create_room(admin: httpx.Client, room_id: str | None = None, **fields: Any) -> dict[str, Any]:
    body = {"id": room_id or unique_id(), "targetUrl": "https://shop.example/", **fields}
    r = admin.post("/api/admin/rooms", json=body)
    assert r.status_code == 201, r.text
    room: dict[str, Any] = r.json()["room"]
    return room


def join(client: httpx.Client, room_id: str, **body: Any) -> httpx.Response:
    return client.post("/api/join", json={"roomId": room_id, **body})


def status(client: httpx.Client, room_id: str, token: str | None = None) -> dict[str, Any]:
    params = {"roomId": room_id}
    if token is not None:
        params["token"] = token
    r = client.get("/api/status", params=params)
    assert r.status_code == 200, r.text
    payload: dict[str, Any] = r.json()
    return payload


def wait_for_state(
    client: httpx.Client, room_id: str, token: str | None, states: tuple[str, ...], timeout: float = 8.0
) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        payload = status(client, room_id, token)
        return payload if payload["state"] in states else None

    return wait_until(probe, timeout, 0.1, f"state in {states}")


def set_cookies(response: httpx.Response) -> dict[str, str]:
    """name -> the whole Set-Cookie line."""
    out = {}
    for line in response.headers.get_list("set-cookie"):
        name = line.split("=", 1)[0].strip()
        out[name] = line
    return out


def cookie_attributes(line: str) -> set[str]:
    return {part.strip().split("=", 1)[0].lower() for part in line.split(";")[1:]}


def token_payload(token: str) -> dict[str, Any]:
    """The JSON before the dot (base64url, unpadded). Used only for fields the contract names (kid)."""
    head = token.split(".", 1)[0]
    data: dict[str, Any] = json.loads(base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)))
    return data


def tamper_signature(token: str) -> str:
    """Flip one character in the middle of the signature (keeps it valid base64url)."""
    body, _, sig = token.rpartition(".")
    assert body and sig, token
    i = len(sig) // 2
    repl = "A" if sig[i] != "A" else "B"
    return f"{body}.{sig[:i]}{repl}{sig[i + 1 :]}"


# ---------------------------------------------------------------------- metrics

_SAMPLE_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text: str) -> list[tuple[str, dict[str, str], float]]:
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE_RE.match(line)
        if not m:
            continue
        labels = {k: v.encode().decode("unicode_escape") for k, v in _LABEL_RE.findall(m.group(2) or "")}
        samples.append((m.group(1), labels, float(m.group(3))))
    return samples


def scrape(srv: Server) -> list[tuple[str, dict[str, str], float]]:
    r = httpx.get(srv.base_url + "/metrics", headers=srv.admin_headers, timeout=HTTP_TIMEOUT_SEC)
    assert r.status_code == 200, r.text
    return parse_metrics(r.text)


def metric(srv: Server, name: str, **labels: str) -> float | None:
    """Sum of the samples named ``name`` carrying ``labels``; None when there is no such sample."""
    found = [v for n, lab, v in scrape(srv) if n == name and all(lab.get(k) == x for k, x in labels.items())]
    return sum(found) if found else None


# ---------------------------------------------------------------------- server-sent events


def iter_sse(response: httpx.Response) -> Iterator[dict[str, str]]:
    """Frames of a text/event-stream: {"event": …, "data": …} (comments are yielded as {"comment": …})."""
    event: dict[str, str] = {}
    data: list[str] = []
    for line in response.iter_lines():
        if line == "":
            if data or event:
                if data:
                    event["data"] = "\n".join(data)
                event.setdefault("event", "message")
                yield event
            event, data = {}, []
            continue
        if line.startswith(":"):
            yield {"comment": line[1:].strip()}
            continue
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "data":
            data.append(value)
        elif field in ("event", "id", "retry"):
            event[field] = value
    if data or event:
        if data:
            event["data"] = "\n".join(data)
        event.setdefault("event", "message")
        yield event

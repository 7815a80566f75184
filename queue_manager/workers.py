"""WORKERS=N: N server processes on one port, started and supervised by the process ``qm`` runs as.

The supervisor binds the listening socket once and starts each worker as ``python -m queue_manager``
with that socket inherited (``--listen-fd``), a pipe to say it is ready (``--ready-fd``) and its own
instance id, ``<QM_INSTANCE_ID>-w<k>``. Every worker is a whole instance on the shared Valkey and
PostgreSQL (STORE=valkey: config refuses WORKERS>1 on the memory store); the kernel hands each new
connection to whichever worker accepts it first. The supervisor serves nothing itself:

* it prints the one ``listening`` line once every worker is ready (a worker that exits first ends
  the start, with that worker's exit code);
* a worker that exits while the supervisor is not stopping is logged on stderr (one line: the worker,
  its instance id, its pid and how it ended) and started again after a pause that doubles from 1 s
  to 30 s while it keeps dying young (a worker that ran 30 s or more starts the next pause at 1 s);
* it makes one private directory (mode 0700, under the system's temporary directory) and tells each
  worker its path and the number of workers (``--peer-dir``, ``--worker-count``): each worker serves
  its own metrics on a unix socket there, so the one answering ``/metrics`` on the shared port can
  add its siblings' (``services/peers.py``). The directory is removed when the supervisor ends;
* SIGTERM or SIGINT stops every worker with SIGTERM (each runs the usual graceful stop,
  SHUTDOWN_GRACE_MS then SHUTDOWN_DRAIN_MS); one still running past its drain bound plus
  :data:`STOP_SLACK_SEC` is killed. A clean stop exits 0: every worker exited 0 (each stop clean).
  Otherwise, a worker killed past its bound or ending with another status (its stop WITH STORAGE
  FAILING exits :data:`STOPPED_UNCLEAN`), the supervisor names it on stderr and exits
  :data:`STOPPED_UNCLEAN`. A worker that stops on its own (exit 0, or :data:`STOPPED_UNCLEAN`) was
  asked to stop (``POST /api/admin/shutdown``, or a SIGTERM sent to it alone): that stops them all
  the same way.

Each worker asks the kernel to send it SIGTERM if the supervisor dies (Linux ``PR_SET_PDEATHSIG``),
so a supervisor killed with SIGKILL leaves no worker holding the port.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType

from queue_manager.config import INLINE_SHUTDOWN_DRAIN_FLOOR_MS, Settings

__all__ = [
    "BACKOFF_MAX_SEC",
    "BACKOFF_START_SEC",
    "STOPPED_UNCLEAN",
    "STOP_SLACK_SEC",
    "WorkerRole",
    "bind_listener",
    "die_with_parent",
    "make_peer_dir",
    "supervise",
    "worker_instance_id",
]

BACKOFF_START_SEC = 1.0
BACKOFF_MAX_SEC = 30.0
#: A worker that ran at least this long before it died is restarted after BACKOFF_START_SEC again.
HEALTHY_RUN_SEC = 30.0
#: Time a worker gets past its drain bound (for the lifespan's own stop: the journal's last commit).
STOP_SLACK_SEC = 10.0
#: The exit status of a stop that was not clean: a worker stopped WITH STORAGE FAILING (its own status,
#: the same number), or did not stop in time and was killed (``qm serve``'s, cli/serve.py).
STOPPED_UNCLEAN = 4
_POLL_SEC = 0.2
_PR_SET_PDEATHSIG = 1
#: The longest temporary directory the peer directory goes under: a unix socket's path is at most 107
#: bytes, and ``<base>/qm-workers-<8 characters>/w<k>.sock`` adds about 30.
_MAX_PEER_DIR_LEN = 70


@dataclass(frozen=True)
class WorkerRole:
    """What a worker process was told on its command line by the supervisor."""

    index: int
    listen_fd: int
    ready_fd: int
    parent_pid: int
    #: the private directory the workers serve their own metrics in (``w<index>.sock``), and how many there are
    peer_dir: str | None = None
    count: int = 1


def worker_instance_id(base: str, index: int) -> str:
    """The instance id of worker ``index`` (from 1): ``<base>-w<index>``."""
    return f"{base}-w{index}"


def bind_listener(host: str, port: int) -> socket.socket:
    """The listening TCP socket every worker accepts on (SO_REUSEADDR, as uvicorn binds). Raises OSError."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, _type, _proto, _name, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6 and host in ("::", ""):
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(address)
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    return sock


def make_peer_dir() -> str:
    """A new private directory (0700) for the workers' metrics sockets. Under the temporary directory, or
    /tmp when that path is too long for a unix socket's name. Raises OSError."""
    base = tempfile.gettempdir()
    if len(base) > _MAX_PEER_DIR_LEN:
        base = "/tmp"
    return tempfile.mkdtemp(prefix="qm-workers-", dir=base)


def die_with_parent(parent_pid: int) -> None:
    """In a worker: be sent SIGTERM when the supervisor goes; exit at once if it is already gone."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    if os.getppid() != parent_pid:
        sys.exit(1)


def _how_it_ended(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    return f"exited with code {code}"


def _log(line: str) -> None:
    print(f"queue-manager: {line}", file=sys.stderr, flush=True)


@dataclass
class _Worker:
    index: int
    instance_id: str
    proc: subprocess.Popen[bytes] | None = None
    ready_fd: int | None = None
    ready: bool = False
    started_at: float = 0.0
    backoff_sec: float = BACKOFF_START_SEC
    restart_at: float | None = None
    env: dict[str, str] = field(default_factory=dict)


class _Supervisor:
    def __init__(self, settings: Settings, count: int, listener: socket.socket, peer_dir: str) -> None:
        self.settings = settings
        self.listener = listener
        self.peer_dir = peer_dir
        self.count = count
        self.selector = selectors.DefaultSelector()
        self.signals: list[int] = []
        self.clean = True  # every worker that stopped since the stop began stopped cleanly
        spool_root = settings.spool_dir or os.path.join("data", "spool")
        self.workers = []
        for k in range(1, count + 1):
            worker = _Worker(k, worker_instance_id(settings.instance_id, k))
            # the worker's own settings: its instance id, its own spool directory, one process
            worker.env = {
                **os.environ,
                "QM_INSTANCE_ID": worker.instance_id,
                "SPOOL_DIR": os.path.join(spool_root, f"w{k}"),
                "WORKERS": "1",
            }
            self.workers.append(worker)

    # -------------------------------------------------------------------- processes

    def start(self, worker: _Worker) -> None:
        read_end, write_end = os.pipe()
        argv = [
            sys.executable,
            "-m",
            "queue_manager",
            "--worker-index",
            str(worker.index),
            "--listen-fd",
            str(self.listener.fileno()),
            "--ready-fd",
            str(write_end),
            "--parent-pid",
            str(os.getpid()),
            "--peer-dir",
            self.peer_dir,
            "--worker-count",
            str(self.count),
        ]
        try:
            worker.proc = subprocess.Popen(
                argv, env=worker.env, stdin=subprocess.DEVNULL, pass_fds=(self.listener.fileno(), write_end)
            )
        finally:
            os.close(write_end)
        worker.ready = False
        worker.ready_fd = read_end
        worker.started_at = time.monotonic()
        worker.restart_at = None
        self.selector.register(read_end, selectors.EVENT_READ, worker)

    def _forget_ready_pipe(self, worker: _Worker) -> None:
        if worker.ready_fd is not None:
            self.selector.unregister(worker.ready_fd)
            os.close(worker.ready_fd)
            worker.ready_fd = None

    def _read_ready(self, worker: _Worker) -> None:
        assert worker.ready_fd is not None
        try:
            data = os.read(worker.ready_fd, 64)
        except OSError:
            data = b""
        if data:
            worker.ready = True
        self._forget_ready_pipe(worker)

    def wait_events(self, timeout: float) -> None:
        for key, _mask in self.selector.select(timeout):
            if isinstance(key.data, _Worker):
                self._read_ready(key.data)

    def exited(self) -> list[tuple[_Worker, int, int]]:
        """Workers whose process ended since the last call, with the exit code and the pid it had."""
        gone = []
        for worker in self.workers:
            if worker.proc is not None:
                code = worker.proc.poll()
                if code is not None:
                    gone.append((worker, code, worker.proc.pid))
                    worker.proc = None
                    self._forget_ready_pipe(worker)
        return gone

    # ------------------------------------------------------------------------ phases

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.signals.append(signum)

    def start_all(self) -> int | None:
        """Start every worker and wait until all are ready: None, or the exit code to stop with."""
        for worker in self.workers:
            self.start(worker)
        while not all(w.ready for w in self.workers):
            if self.signals:
                return 0
            self.wait_events(_POLL_SEC)
            for worker, code, _pid in self.exited():
                _log(f"worker {worker.index} ({worker.instance_id}) {_how_it_ended(code)} before it was ready")
                return code if code > 0 else 1
        return None

    def supervise(self) -> None:
        """Restart a worker that ends, with backoff, until a stop signal arrives."""
        while not self.signals:
            self.wait_events(_POLL_SEC)
            now = time.monotonic()
            for worker, code, pid in self.exited():
                if self.signals:  # stopping anyway (a Ctrl-C reaches the workers too): how it ended still counts
                    self._note_stop(worker, code)
                    continue
                if code in (0, STOPPED_UNCLEAN):  # it stopped on its own: POST /api/admin/shutdown stops the server
                    how = "stopped cleanly" if code == 0 else "stopped, not cleanly"
                    _log(f"worker {worker.index} ({worker.instance_id}, pid {pid}) {how}; stopping them all")
                    self.clean = self.clean and code == 0
                    self.signals.append(signal.SIGTERM)
                    continue
                if now - worker.started_at >= HEALTHY_RUN_SEC:
                    worker.backoff_sec = BACKOFF_START_SEC
                delay = worker.backoff_sec
                worker.backoff_sec = min(BACKOFF_MAX_SEC, worker.backoff_sec * 2)
                worker.restart_at = now + delay
                _log(
                    f"worker {worker.index} ({worker.instance_id}, pid {pid}) {_how_it_ended(code)}; "
                    f"restarting it in {delay:g} s"
                )
            for worker in self.workers:
                if worker.proc is None and worker.restart_at is not None and now >= worker.restart_at:
                    if self.signals:
                        break
                    self.start(worker)

    def _note_stop(self, worker: _Worker, code: int) -> None:
        """A worker ended while the server stops: a stop that was not clean is named, and counts."""
        if code != 0:
            self.clean = False
            _log(f"worker {worker.index} ({worker.instance_id}) did not stop cleanly: it {_how_it_ended(code)}")

    def stop_all(self) -> bool:
        """SIGTERM to every worker; kill what is still running past the drain bound. True when every
        worker stopped cleanly (exit 0) since the stop began; each that did not is named on stderr."""
        drain_ms = self.settings.shutdown_drain_ms
        if drain_ms is None:
            drain_ms = INLINE_SHUTDOWN_DRAIN_FLOOR_MS  # the most a worker with an inline room waits
        bound = max(drain_ms, self.settings.shutdown_grace_ms) / 1000 + STOP_SLACK_SEC
        running = [w for w in self.workers if w.proc is not None]
        for worker in running:
            assert worker.proc is not None
            with contextlib.suppress(ProcessLookupError):
                worker.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + bound
        for worker in running:
            assert worker.proc is not None
            try:
                code = worker.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _log(f"worker {worker.index} ({worker.instance_id}) did not stop within {bound:g} s; killing it")
                worker.proc.kill()
                code = worker.proc.wait()
            self._note_stop(worker, code)
            self._forget_ready_pipe(worker)
            worker.proc = None
        return self.clean


def supervise(settings: Settings, count: int, announce: Callable[[int], None]) -> int:
    """Run ``count`` workers until SIGTERM or SIGINT; return the exit code. ``announce(port)`` prints
    the listening lines once every worker is ready."""
    try:
        listener = bind_listener(settings.host, settings.port)
    except OSError as err:
        _log(f"cannot listen on {settings.host}:{settings.port}: {err.strerror or err} ({err})")
        return 1
    try:
        peer_dir = make_peer_dir()
    except OSError as err:
        _log(f"cannot make the workers' private directory: {err.strerror or err} ({err})")
        listener.close()
        return 1
    supervisor = _Supervisor(settings, count, listener, peer_dir)
    previous = {sig: signal.signal(sig, supervisor.on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        code = supervisor.start_all()
        if code is None:
            announce(int(listener.getsockname()[1]))
            supervisor.supervise()
            code = 0 if supervisor.stop_all() else STOPPED_UNCLEAN
        else:  # stopped before every worker was ready (or one failed to start): how they end says nothing more
            supervisor.stop_all()
        if code == 0:
            print(f"Queue Manager stopped ({count} workers).", file=sys.stderr, flush=True)
        elif code == STOPPED_UNCLEAN:
            print(f"Queue Manager stopped ({count} workers), not cleanly.", file=sys.stderr, flush=True)
        return code
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        listener.close()
        shutil.rmtree(peer_dir, ignore_errors=True)

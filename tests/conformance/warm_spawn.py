"""The harness's side of ``warm_start.py``: server processes forked from a pre-imported one.

:func:`spawn` returns a :class:`ForkedProcess` (the part of ``subprocess.Popen`` the suite uses: ``pid``,
``stdout``, ``poll``, ``wait``, ``send_signal``, ``terminate``, ``kill``, ``returncode``) for a command that
is this repository's server (``python -m queue_manager …`` with this interpreter), or ``None`` when the
command is another build or the warm start is off or broken; the caller then starts a fresh interpreter.
One warm-start program runs per test process, started on first use and ended when the socket closes.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

PROGRAM = Path(__file__).with_name("warm_start.py")
START_TIMEOUT_SEC = 60.0  # the program's own imports, once per test process, on a loaded machine


def enabled(argv: list[str], env: Mapping[str, str]) -> bool:
    """This repository's server, started with the interpreter flags and ``PYTHON*`` variables this process
    has (the forked child inherits the interpreter as it is), and the warm start not turned off."""
    if os.environ.get("QM_TEST_WARM_START", "1") == "0":
        return False
    if argv[:3] != [sys.executable, "-m", "queue_manager"]:
        return False
    ours = {k: v for k, v in os.environ.items() if k.startswith("PYTHON")}
    theirs = {k: v for k, v in env.items() if k.startswith("PYTHON")}
    return ours == theirs


class ForkedProcess:
    """A server forked by the warm-start program; its exit status arrives over that program's socket."""

    def __init__(self, pid: int, stdout: IO[bytes]) -> None:
        self.pid = pid
        self.stdout: IO[bytes] | None = stdout
        self.returncode: int | None = None
        self._exited = threading.Event()

    def _set_exit(self, code: int) -> None:
        self.returncode = code
        self._exited.set()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._exited.wait(timeout):
            raise subprocess.TimeoutExpired([str(self.pid)], timeout or 0.0)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:  # never signal a pid the program has reaped (it may be reused)
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class _Program:
    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock = ours
        self.proc = subprocess.Popen(
            [sys.executable, str(PROGRAM), str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            start_new_session=False,
        )
        theirs.close()
        self.lock = threading.Lock()  # one request at a time: its "started" answer is the next one
        self.started: list[int] = []
        self.started_cond = threading.Condition()
        self.children: dict[int, ForkedProcess] = {}
        self.early: dict[int, int] = {}  # exits read before their process was registered
        self.alive = True
        self.reader = threading.Thread(target=self._read, name="qm-warm-start", daemon=True)
        self.reader.start()

    def _read(self) -> None:
        with self.sock.makefile("rb") as lines:
            for line in lines:
                answer = json.loads(line)
                if "started" in answer:
                    with self.started_cond:
                        self.started.append(int(answer["started"]))
                        self.started_cond.notify_all()
                else:
                    pid, code = int(answer["exited"]), int(answer["code"])
                    with self.started_cond:
                        child = self.children.pop(pid, None)
                        if child is None:
                            self.early[pid] = code
                    if child is not None:
                        child._set_exit(code)
        with self.started_cond:
            self.alive = False
            self.started_cond.notify_all()
            orphans = list(self.children.values())
            self.children.clear()
        for child in orphans:  # the program is gone: its children are no longer reaped for us
            child._set_exit(-signal.SIGKILL)

    def spawn(self, args: list[str], env: Mapping[str, str], cwd: str, stderr: IO[bytes]) -> ForkedProcess | None:
        body = json.dumps({"args": args, "env": dict(env), "cwd": cwd}).encode()
        read_end, write_end = os.pipe()
        devnull = os.open(os.devnull, os.O_RDONLY)
        try:
            with self.lock:
                if not self.alive:
                    return None
                fds = [devnull, write_end, stderr.fileno()]
                self.sock.sendmsg(
                    [struct.pack("!I", len(body))], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("3i", *fds))]
                )
                self.sock.sendall(body)
                deadline = time.monotonic() + START_TIMEOUT_SEC
                with self.started_cond:
                    while not self.started and self.alive and time.monotonic() < deadline:
                        self.started_cond.wait(0.5)
                    if not self.started:
                        self.alive = False
                        return None
                    pid = self.started.pop(0)
                    child = ForkedProcess(pid, os.fdopen(read_end, "rb"))
                    read_end = -1
                    code = self.early.pop(pid, None)
                    if code is None:
                        self.children[pid] = child
                if code is not None:
                    child._set_exit(code)
                return child
        except OSError:
            self.alive = False
            return None
        finally:
            os.close(write_end)
            os.close(devnull)
            if read_end >= 0:
                os.close(read_end)


_program: _Program | None = None
_program_pid = -1
_program_lock = threading.Lock()


def spawn(argv: list[str], env: Mapping[str, str], cwd: str, stderr: IO[bytes]) -> Any:
    """A :class:`ForkedProcess` running ``argv``, or ``None`` (start it with ``subprocess`` instead)."""
    global _program, _program_pid
    if not enabled(argv, env):
        return None
    with _program_lock:
        if _program is None or _program_pid != os.getpid():  # one per test process, never a parent's
            _program, _program_pid = _Program(), os.getpid()
        program = _program
    return program.spawn(argv[3:], env, cwd, stderr)

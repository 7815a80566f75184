"""A server process with the package already imported, that forks each server the harness starts.

The suite starts about a thousand servers, and most of what one start costs is Python importing the
server package and its libraries (about 0.4 s of CPU each). This program imports them once, then waits
on a Unix socket; for each request it forks a child that becomes ``python -m queue_manager <args>``
exactly as a fresh interpreter would run it: its own environment, working directory, ``sys.argv``,
standard streams (the descriptors the harness sent), default signal handlers, then ``runpy`` runs the
package's ``__main__`` and the interpreter exits the usual way (``atexit`` handlers, threads joined,
streams flushed). The child is a real server process: the harness talks to it over HTTP only and
signals it by its pid.

The black-box rule holds: the harness never imports the server package; this program runs beside it.
It is used only for this repository's own server (``QM_SERVER_CMD`` unset) and can be turned off with
``QM_TEST_WARM_START=0``.

Protocol on the socket: a request is a 4-byte length, a JSON body ``{"args", "env", "cwd"}`` and three
descriptors (stdin, stdout, stderr) sent with ``SCM_RIGHTS`` alongside the length; each answer is one
JSON line, ``{"started": pid}`` right after the fork, and ``{"exited": pid, "code": returncode}`` when
the child is reaped (a negative code is the signal that ended it, as in ``subprocess``).
"""

from __future__ import annotations

import array
import importlib
import json
import os
import select
import signal
import socket
import struct
import sys
import threading
from typing import Any

#: What a server on either store imports before it listens; anything left out is imported by the child.
PRELOAD = (
    "queue_manager.cli.main",
    "queue_manager.cli.serve",
    "queue_manager.cli.config",
    "queue_manager.server",
    "queue_manager.store.memory",
    "queue_manager.store.valkey",
    "queue_manager.journal.pg",
    "queue_manager.fleet.boot",
    "uvicorn.protocols.http.httptools_impl",
    "uvicorn.lifespan.on",
    "uvicorn.loops.uvloop",
    "uvloop",
)


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def _receive(sock: socket.socket) -> tuple[dict[str, Any], list[int]]:
    fds = array.array("i")
    msg, ancdata, _flags, _addr = sock.recvmsg(4, socket.CMSG_SPACE(3 * fds.itemsize))
    if not msg:
        raise EOFError
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
    msg += _recv_exact(sock, 4 - len(msg))
    (size,) = struct.unpack("!I", msg)
    return json.loads(_recv_exact(sock, size)), list(fds)


def _send(sock: socket.socket, answer: dict[str, Any]) -> None:
    sock.sendall(json.dumps(answer).encode() + b"\n")


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _send(sock, {"exited": pid, "code": os.waitstatus_to_exitcode(status)})


def _become(request: dict[str, Any], fds: list[int], keep_closed: list[int]) -> None:
    """In the child: turn into a fresh ``python -m queue_manager`` process."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    for fd in keep_closed:
        os.close(fd)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in set(fds):
        if fd > 2:
            os.close(fd)
    cwd = request["cwd"]
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(request["env"])
    encoding = sys.stdout.encoding
    sys.stdin = sys.__stdin__ = open(0, encoding=encoding, closefd=False)
    sys.stdout = sys.__stdout__ = open(1, "w", encoding=encoding, closefd=False)
    sys.stderr = sys.__stderr__ = open(2, "w", encoding=encoding, errors="backslashreplace", buffering=1, closefd=False)
    sys.path.insert(0, cwd)  # what ``-m`` puts first
    sys.argv = ["-m", *request["args"]]  # runpy replaces argv[0] with the module's file


def serve(sock: socket.socket) -> dict[str, Any] | None:
    """Answer requests until the harness closes the socket; in a forked child, return its request."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the harness ends this program by closing the socket
    while True:
        try:
            ready, _, _ = select.select([sock, wake_r], [], [])
        except InterruptedError:
            continue
        if wake_r in ready:
            os.read(wake_r, 4096)
            _reap(sock)
        if sock not in ready:
            continue
        try:
            request, fds = _receive(sock)
        except EOFError:
            return None
        pid = os.fork()
        if pid == 0:
            _become(request, fds, [sock.fileno(), wake_r, wake_w])
            sock.detach()
            return request
        for fd in fds:
            os.close(fd)
        _send(sock, {"started": pid})


def main() -> None:
    sys.path.pop(0)  # this file's folder: the child finds the package where ``-m`` would
    os.chdir("/")
    for name in PRELOAD:
        importlib.import_module(name)
    if threading.active_count() != 1:  # a fork would copy a thread's locks in whatever state they were
        raise SystemExit("warm start: an import started a thread; start servers with a fresh interpreter")
    sock = socket.socket(fileno=int(sys.argv[1]))
    request = serve(sock)
    if request is None:
        return
    import runpy

    runpy.run_module("queue_manager", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()

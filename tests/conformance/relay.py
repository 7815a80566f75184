"""A TCP relay a test owns, for cutting or black-holing a server's link to Valkey or PostgreSQL."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit


class Relay:
    """A TCP relay 127.0.0.1:<port> → target; ``cut()`` drops every connection and refuses new ones;
    ``stall()`` black-holes it (connections stay open, nothing gets through: a command timeout)."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.open = True
        self.stalled = False
        self.conns: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if not self.open:
                client.close()
                continue
            if self.stalled:  # accepted, never answered
                with self.lock:
                    self.conns.append(client)
                threading.Thread(target=self._swallow, args=(client,), daemon=True).start()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)  # 5 s was for the connect: an idle link stays open, as without the relay
            with self.lock:
                self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _swallow(src: socket.socket) -> None:
        try:
            while src.recv(65536):
                pass
        except OSError:
            pass

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                if not self.stalled:
                    dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.close()
                except OSError:
                    pass

    def cut(self) -> None:
        self.open = False
        with self.lock:
            for s in self.conns:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                    s.close()
                except OSError:
                    pass
            self.conns.clear()

    def stall(self) -> None:
        self.stalled = True

    def restore(self) -> None:
        if self.stalled:  # what was swallowed is lost: drop those connections, the client reconnects
            self.cut()
            self.stalled = False
        self.open = True

    def close(self) -> None:
        self.cut()
        self.listener.close()


def through(relay: Relay, url: str) -> str:
    """``url`` (a Valkey or PostgreSQL URL) rewritten to reach its service through ``relay``, credentials kept."""
    parts = urlsplit(url)
    userinfo, at, _ = parts.netloc.rpartition("@")
    return urlunsplit(parts._replace(netloc=f"{userinfo}{at}127.0.0.1:{relay.port}"))


@contextlib.contextmanager
def relayed(url: str, default_port: int) -> Iterator[tuple[Relay, str]]:
    """A relay the test owns in front of the service ``url`` names, and the URL that goes through it."""
    parts = urlsplit(url)
    relay = Relay(parts.hostname or "127.0.0.1", parts.port or default_port)
    try:
        yield relay, through(relay, url)
    finally:
        relay.close()

"""A throwaway PostgreSQL 15 cluster a test can stop and start again, for the disk-spool fault tests.

``PgCluster.create(workdir)`` runs ``initdb`` as the ``postgres`` OS user and starts ``postgres`` on a
free port of 127.0.0.1 (trust auth, fsync off). ``halt()`` stops it the way an operator does for an
upgrade (``pg_ctl stop -m fast``: every connection is closed, new ones are refused) and keeps its
data; ``resume()`` starts it again on the same port. ``destroy()`` stops it hard and removes the
directory. ``tls_cluster.missing()`` says why such a cluster cannot be made here.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from pathlib import Path

from harness import free_port
from tls_cluster import PG_BIN, _as_postgres, socket_psql, stop_hard


class PgCluster:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.data = workdir / "data"
        self.sockets = workdir / "sockets"
        self.port = free_port()
        self._made = False
        self.running = False

    @classmethod
    def create(cls, workdir: Path) -> PgCluster:
        cluster = cls(workdir)
        try:
            cluster._init()
            cluster.resume()
        except BaseException:
            cluster.destroy()
            raise
        return cluster

    def _init(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.sockets.mkdir()
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            for path in (self.workdir, self.sockets):
                os.chown(path, pw.pw_uid, pw.pw_gid)
        self._made = True
        subprocess.run(
            _as_postgres([str(PG_BIN / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync"]),
            check=True,
            capture_output=True,
            timeout=60,
        )
        (self.data / "pg_hba.conf").write_text("local all all trust\nhost all all 127.0.0.1/32 trust\n", "utf-8")

    def _ctl(self, *args: str) -> None:
        subprocess.run(
            _as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(self.data), *args]),
            check=True,
            capture_output=True,
            timeout=60,
        )

    def resume(self) -> None:
        """Start (again) on the same port."""
        options = f"-p {self.port} -k {self.sockets} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=60"
        self._ctl("-o", options, "-l", str(self.workdir / "log"), "-w", "-t", "30", "start")
        self.running = True

    def halt(self) -> None:
        """Stop as an operator does before an upgrade: connections closed, new ones refused, data kept."""
        self._ctl("-m", "fast", "-w", "-t", "30", "stop")
        self.running = False

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def psql(self, sql: str, database: str = "postgres") -> str:
        """One statement over the cluster's Unix socket; its rows, unaligned."""
        return socket_psql(self.sockets, self.port, sql, database)

    def destroy(self) -> None:
        if self._made:
            stop_hard(self.data)
        shutil.rmtree(self.workdir, ignore_errors=True)

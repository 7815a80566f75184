"""The maintenance spool: an append-only disk file that takes journal batches instead of PostgreSQL.

While maintenance mode is on, the journal's writer appends each batch to the active spool file as
one JSON line and fsyncs before any caller in the batch is acknowledged (one fsync per batch: the
group commit applies here too). Turning maintenance off *finalizes* the file (fsync, rename
``.open`` -> ``.buf``, fsync the directory) and the journal drains every ``.buf`` file into
PostgreSQL oldest first; ``(room, gen, seq)`` dedupes, so a file drained twice (a crash between the
insert and the unlink) applies nothing twice.

Files are named ``qm-spool-<wall ms, 13 digits>-<instance>-<counter>.open|.buf``, so name order is
age order across instances sharing a directory. The active file and a file being drained are held
with ``flock``: another process (or a new journal in this one) adopts an ``.open`` file only when
nobody holds it, i.e. its writer died, and never drains a file somebody else is draining.

A torn last line (a crash mid-append: the batch was never acknowledged) is ignored. A line that does
not parse *before* the last one cannot come from a crash (every line was fsynced before the next was
written). Such a file, or one PostgreSQL refuses for good, is *quarantined*: moved into the
``failed/`` directory beside the spool, with a ``<name>.why`` note saying what went wrong. It stays
there until an operator moves it back (it then drains, deduplicated as ever) or deletes it.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import orjson

from queue_manager.store.base import StoreUnavailable

try:  # POSIX advisory locks; without them (Windows) a directory must not be shared by two processes
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

PREFIX = "qm-spool-"
OPEN = ".open"
FINAL = ".buf"
QUARANTINE = "failed"  # the subdirectory of files that cannot be drained
_SAFE = re.compile(r"[^A-Za-z0-9_.]+")


class SpoolCorrupt(Exception):
    """A spool file holds a line that does not parse before its last line."""


class SpoolFailed(StoreUnavailable):
    """The maintenance spool could not take a batch (says nothing about PostgreSQL)."""


def _lock(fd: int) -> bool:
    if fcntl is None:  # pragma: no cover
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def _fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):  # not every platform lets a directory be fsynced
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@dataclass(slots=True)
class SpoolFile:
    path: Path
    size: int
    events: int


class Spool:
    """One process's spool in ``directory`` (created if missing). Blocking I/O: call from a thread."""

    def __init__(self, directory: str | os.PathLike[str], instance_id: str) -> None:
        self.dir = Path(directory)
        self.instance = _SAFE.sub("_", instance_id)[:64] or "qm"
        self._mutex = threading.Lock()
        self._file: IO[bytes] | None = None
        self._path: Path | None = None
        self._good = 0  # bytes of the active file known to be on disk (fsynced)
        self._counter = 0
        self.active_events = 0
        self.appended_events = 0
        self.failed_files: dict[str, str] = {}  # name -> why the last drain of it failed (it is retried)
        self.write_failed: str | None = None  # why the newest append failed; None once one lands
        self._counts: dict[tuple[str, int], int] = {}  # (name, size) -> events, for stats()

    # ------------------------------------------------------------------------------ writing

    def _open(self, wall_ms: int) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self._counter += 1
        path = self.dir / f"{PREFIX}{wall_ms:013d}-{self.instance}-{self._counter:06d}{OPEN}"
        f = open(path, "ab")  # held open across appends, closed by finalize()
        if not _lock(f.fileno()):
            f.close()
            raise OSError(f"spool file {path.name} is locked by another writer")
        _fsync_dir(self.dir)
        self._file, self._path, self._good, self.active_events = f, path, 0, 0

    def append(self, events: list[dict[str, Any]], wall_ms: int, audit: list[dict[str, Any]] | None = None) -> None:
        """Append one batch (journal events, and audit rows) as one line and fsync it. Raises OSError when
        it is not on disk."""
        record: dict[str, Any] = {"v": 1, "events": events}
        if audit:
            record["audit"] = audit
        line = orjson.dumps(record) + b"\n"
        with self._mutex:
            if self._file is None:
                self._open(wall_ms)
            f = self._file
            assert f is not None
            try:
                f.write(line)
                f.flush()
                os.fsync(f.fileno())
            except OSError as err:
                # nothing after a failed append may follow garbage: cut back to what is on disk
                with contextlib.suppress(OSError):
                    f.truncate(self._good)
                    f.seek(self._good)
                self.write_failed = f"{type(err).__name__}: {err}"
                raise
            self.write_failed = None
            self._good += len(line)
            self.active_events += len(events) + len(audit or ())
            self.appended_events += len(events) + len(audit or ())

    def finalize(self) -> Path | None:
        """Close the active file and make it drainable (``.buf``). Returns its new path, if any."""
        with self._mutex:
            f, path = self._file, self._path
            self._file, self._path, self.active_events = None, None, 0
            if f is None or path is None:
                return None
            try:
                f.flush()
                os.fsync(f.fileno())
            finally:
                f.close()
            if self._good == 0:
                path.unlink(missing_ok=True)
                return None
            final = path.with_suffix(FINAL)
            os.replace(path, final)
            _fsync_dir(self.dir)
            return final

    def abandon(self) -> None:
        """Drop the active file as a process death would (tests): closed, not finalized."""
        with self._mutex:
            if self._file is not None:
                self._file.close()
            self._file, self._path, self.active_events = None, None, 0

    def adopt_orphans(self) -> list[Path]:
        """Finalize every ``.open`` file nobody holds (its writer died). Returns the adopted files."""
        adopted: list[Path] = []
        if not self.dir.is_dir():
            return adopted
        for path in sorted(self.dir.glob(f"{PREFIX}*{OPEN}")):
            if path == self._path:
                continue
            try:
                fd = os.open(path, os.O_RDWR)
            except FileNotFoundError:
                continue
            try:
                if not _lock(fd):
                    continue  # a live writer holds it
                final = path.with_suffix(FINAL)
                os.replace(path, final)
                adopted.append(final)
            finally:
                os.close(fd)
        if adopted:
            _fsync_dir(self.dir)
        return adopted

    # ------------------------------------------------------------------------------ draining

    def finalized(self) -> list[Path]:
        """Finalized files, oldest first."""
        if not self.dir.is_dir():
            return []
        return sorted(self.dir.glob(f"{PREFIX}*{FINAL}"))

    @contextlib.contextmanager
    def claim(self, path: Path) -> Iterator[bool]:
        """Hold ``path`` for draining; yields False when another drainer holds it (or it is gone)."""
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            yield False
            return
        try:
            yield _lock(fd) and path.exists()
        finally:
            os.close(fd)

    @staticmethod
    def lines(path: Path) -> Iterator[tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
        """Each line of a spool file in order, as (journal events, audit rows); a torn last line is skipped."""
        data = path.read_bytes()
        lines = data.split(b"\n")
        complete, tail = lines[:-1], lines[-1]  # ``tail`` is b"" when the file ends with a newline
        for i, raw in enumerate(complete):
            try:
                record = orjson.loads(raw)
                events = record["events"]
                audit = record.get("audit", [])
            except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError) as err:
                if i == len(complete) - 1 and not tail:
                    return  # the last line: a torn append, never acknowledged
                raise SpoolCorrupt(f"{path.name}: line {i + 1} does not parse ({err})") from err
            if not isinstance(events, list) or not isinstance(audit, list):
                raise SpoolCorrupt(f"{path.name}: line {i + 1} carries no event list")
            yield events, audit

    @staticmethod
    def batches(path: Path) -> Iterator[list[dict[str, Any]]]:
        """The journal batches of a spool file in order; a torn last line is skipped."""
        for events, _ in Spool.lines(path):
            yield events

    def remove(self, path: Path) -> None:
        path.unlink(missing_ok=True)
        self.failed_files.pop(path.name, None)
        _fsync_dir(self.dir)

    def count(self, path: Path) -> int:
        """Records (events and audit rows) in a finished file (cached by name and size)."""
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            return 0
        key = (path.name, size)
        if key not in self._counts:
            total = 0
            with contextlib.suppress(SpoolCorrupt, OSError):
                for events, audit in self.lines(path):
                    total += len(events) + len(audit)
            self._counts[key] = total
        return self._counts[key]

    @property
    def quarantine_dir(self) -> Path:
        return self.dir / QUARANTINE

    def quarantine(self, path: Path, why: str) -> Path:
        """Move a file that cannot be drained into ``failed/``, with a note saying why."""
        target_dir = self.quarantine_dir
        target_dir.mkdir(parents=True, exist_ok=True)
        target = target_dir / path.name
        note = target_dir / f"{path.name}.why"
        note.write_text(why.rstrip() + "\n", encoding="utf-8")
        os.replace(path, target)
        self.failed_files.pop(path.name, None)
        _fsync_dir(target_dir)
        _fsync_dir(self.dir)
        return target

    def quarantined(self) -> list[SpoolFile]:
        """The files in ``failed/``, oldest first."""
        out: list[SpoolFile] = []
        target_dir = self.quarantine_dir
        if not target_dir.is_dir():
            return out
        for path in sorted(target_dir.glob(f"{PREFIX}*{FINAL}")):
            with contextlib.suppress(FileNotFoundError):
                out.append(SpoolFile(path, path.stat().st_size, self.count(path)))
        return out

    # ------------------------------------------------------------------------------ reporting

    def files(self) -> list[SpoolFile]:
        out = []
        for path in self.finalized():
            with contextlib.suppress(FileNotFoundError):
                out.append(SpoolFile(path, path.stat().st_size, self.count(path)))
        return out

    def stats(self, db_healthy: bool) -> dict[str, Any]:
        """The broker page's ``bufferStats``: ``pendingCount`` = events in the active spool file,
        ``failedCount`` = events in finalized files still waiting to drain, ``failedFiles`` = those
        files (``failoverCount`` mirrors ``count``; ``qos0Count`` is always 0)."""
        files = self.files()
        total = sum(f.size for f in files)
        return {
            "pendingCount": self.active_events,
            "failedCount": sum(f.events for f in files),
            "dbHealthy": db_healthy,
            "failedFiles": {
                "count": len(files),
                "totalBytes": total,
                "totalMB": round(total / (1024 * 1024), 2),
                "failoverCount": len(files),
                "qos0Count": 0,
            },
        }

    def quarantine_stats(self) -> dict[str, Any]:
        """The quarantine: ``count``, ``totalBytes``, ``events`` and each file's ``name``, ``bytes``,
        ``events`` and ``why``."""
        files = self.quarantined()
        listed = []
        for f in files:
            try:
                why = (f.path.parent / f"{f.path.name}.why").read_text(encoding="utf-8").strip()
            except OSError:
                why = ""
            listed.append({"name": f.path.name, "bytes": f.size, "events": f.events, "why": why})
        names = {f.path.name for f in files} | {f.path.name for f in self.files()}
        self._counts = {k: v for k, v in self._counts.items() if k[0] in names}
        return {
            "count": len(files),
            "totalBytes": sum(f.size for f in files),
            "events": sum(f.events for f in files),
            "files": listed,
        }

    @property
    def writing(self) -> bool:
        return self._file is not None

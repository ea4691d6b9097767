"""Content-addressed store of every model call: resume after a crash, replay, and the run's cost report.

Each call is stored under :func:`call_key`, a SHA-256 over everything that determines the answer: the stage, its
prompt-template version, the backend id (``openai:gpt-4o``), the generation parameters, the message text and the
SHA-256 of every image. Editing a prompt (and bumping its version) is a clean miss; re-running the same work is a
hit. Backend options that change replies (``extra_body``, run-wide ``temperature``...) join the key through
:class:`~echo_builder.backends.caller.ModelCaller`. API keys and base URLs are not part of the key and are never
stored: every stored value passes through :func:`~echo_builder.secrets.redact` (a key a server echoed back
becomes ``***``).

The store is one SQLite database in write-ahead-log mode (``<dir>/calls.sqlite``). Every entry is committed in its
own transaction, so a process killed with SIGKILL loses only the calls that were in flight and the database opens
cleanly afterwards (SQLite replays or discards the log). Several processes may share one cache directory.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from echo_builder.errors import ConfigError
from echo_builder.secrets import get_logger, redact

__all__ = ["CACHE_FORMAT", "BackendStats", "CacheStats", "CacheWriteError", "CallCache", "call_key"]

log = get_logger(__name__)
#: Bumped when the key payload or stored value changes shape, so old entries miss instead of misparsing.
CACHE_FORMAT = 1
DB_NAME = "calls.sqlite"
#: A file of :data:`RESERVE_BYTES` kept beside the database and deleted when the disk fills up, so that the replies
#: of the calls in flight at that moment can still be stored (a rerun then repeats no paid call).
RESERVE_SUFFIX = ".reserve"
RESERVE_BYTES = 1 << 20
#: How long a process waits for another one that holds the database's write lock (SQLite's busy timeout), s.
BUSY_TIMEOUT_S = 60.0


_SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    key TEXT PRIMARY KEY,
    backend TEXT NOT NULL,
    stage TEXT NOT NULL,
    prompt_version TEXT NOT NULL,
    value TEXT NOT NULL,
    input_tokens INTEGER,
    output_tokens INTEGER,
    latency_s REAL,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS counters (
    backend TEXT PRIMARY KEY,
    hits INTEGER NOT NULL DEFAULT 0,
    misses INTEGER NOT NULL DEFAULT 0
);
"""


class CacheWriteError(ConfigError):
    """A reply could not be stored (full disk, read-only folder); the message names the cache file."""


def call_key(
    *,
    stage: str,
    prompt_version: str,
    backend_id: str,
    params: dict[str, Any],
    messages: Sequence[Any],
    kind: str = "generate",
    extra: dict[str, Any] | None = None,
) -> str:
    """SHA-256 hex key of a model call.

    Args:
        stage: the pipeline stage or purpose (``relevance``, ``judge``...).
        prompt_version: version string of the prompt template.
        backend_id: ``<backend>:<model>``.
        params: generation parameters as a JSON-compatible dict.
        messages: :class:`~echo_builder.backends.base.Message` objects; images contribute their SHA-256 only.
        kind: ``generate`` or ``candidates`` (next-token scoring), so both calls on one prompt do not collide.
        extra: anything else that changes the answer (e.g. the candidate answers).
    """
    payload = {
        "format": CACHE_FORMAT,
        "kind": kind,
        "stage": stage,
        "prompt_version": prompt_version,
        "backend": backend_id,
        "params": params,
        "messages": [
            {
                "role": m.role,
                "content": [
                    {"type": "image", "sha256": p.sha256, "mime": p.mime_type}
                    if p.type == "image"
                    else {"type": "text", "text": p.text}
                    for p in m.content
                ],
            }
            for m in messages
        ],
        "extra": extra or {},
    }
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


@dataclass
class BackendStats:
    """Per-backend totals. ``hits``/``misses`` are lookups over the cache's lifetime; tokens and wall time are
    those of the stored (paid-for) calls, in tokens and seconds."""

    entries: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    wall_time_s: float = 0.0
    hits: int = 0
    misses: int = 0


@dataclass
class CacheStats:
    """Summary of a cache directory: entry count, bytes on disk, per-backend and per-stage counts."""

    path: str
    entries: int
    size_bytes: int
    backends: dict[str, BackendStats] = field(default_factory=dict)
    stages: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "entries": self.entries,
            "size_bytes": self.size_bytes,
            "backends": {k: vars(v) for k, v in self.backends.items()},
            "stages": dict(self.stages),
        }


class CallCache:
    """Thread-safe, process-shareable store of model-call results keyed by :func:`call_key`.

    Args:
        directory: folder holding ``calls.sqlite`` (created if missing).
        read_only: open without writing (for ``cache stats`` on a cache another run is using).
        root: the output folder ``directory`` lies in (``OUT/cache``): no component of ``directory`` below it may
            be a symbolic link. The database files themselves are never opened through a link.

    A :meth:`put` that fails (full disk, read-only folder) raises :class:`CacheWriteError`; the reply is kept in
    memory and written again by the next :meth:`put` and by :meth:`close`, so a reply paid for is not lost when
    space comes back before the run ends (the failed write of a large file frees its temporary file).

    Raises:
        ConfigError: the directory cannot be created or the file is not a cache database, or a link is in its path.
    """

    def __init__(
        self, directory: str | Path, *, read_only: bool = False, root: str | Path | None = None
    ) -> None:
        from echo_dataset.safe_io import check_inside, ensure_dir

        self.directory = Path(directory)
        self.path = self.directory / DB_NAME
        self.read_only = read_only
        self._lock = threading.Lock()
        self._pending: dict[str, list[int]] = {}  # backend -> [hits, misses] not yet written
        self._unsaved: dict[str, tuple[Any, ...]] = {}  # key -> row whose INSERT failed, written again later
        self._full: str | None = None  # the disk filled up: the reserve was used, the run must stop
        for suffix in ("", "-wal", "-shm", "-journal", RESERVE_SUFFIX):
            check_inside(self.directory, self.directory / (DB_NAME + suffix))
        try:
            if root is not None and not read_only:
                ensure_dir(root, self.directory)
        except OSError as exc:
            raise ConfigError(f"cannot create cache directory {self.directory}: {exc}") from exc
        try:
            if read_only:
                if not self.path.exists():
                    raise ConfigError(f"no cache at {self.path}")
                self._conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, check_same_thread=False)
            else:
                self.directory.mkdir(parents=True, exist_ok=True)
                self._conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, check_same_thread=False)
                _enable_wal(self._conn)
                self._conn.execute(
                    "PRAGMA synchronous=NORMAL"
                )  # WAL + NORMAL: an app crash never tears a commit
                self._conn.executescript(_SCHEMA)
                self._make_reserve()
            self._conn.execute("SELECT count(*) FROM calls").fetchone()
        except sqlite3.OperationalError as exc:  # a read-only folder, a full disk, a locked file
            raise ConfigError(f"cannot open the call cache {self.path}: {exc}") from None
        except sqlite3.DatabaseError as exc:
            raise ConfigError(f"{self.path} is not a readable echo-bench cache: {exc}") from exc
        except OSError as exc:
            raise ConfigError(f"cannot create cache directory {self.directory}: {exc}") from exc

    # -- lookups -------------------------------------------------------------------------------------------------
    def get(self, key: str, *, backend: str = "") -> dict[str, Any] | None:
        """The stored value for ``key``, or ``None``. Counts a hit or a miss for ``backend``."""
        with self._lock:
            row = self._conn.execute("SELECT value FROM calls WHERE key = ?", (key,)).fetchone()
            value = _stored_value(row[0], key) if row else None
            counts = self._pending.setdefault(backend, [0, 0])
            counts[0 if value is not None else 1] += 1
        return value

    def __contains__(self, key: str) -> bool:
        with self._lock:
            return self._conn.execute("SELECT 1 FROM calls WHERE key = ?", (key,)).fetchone() is not None

    def __len__(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT count(*) FROM calls").fetchone()[0])

    def keys(self) -> Iterable[str]:
        with self._lock:
            return [r[0] for r in self._conn.execute("SELECT key FROM calls")]

    # -- writes --------------------------------------------------------------------------------------------------
    def put(
        self,
        key: str,
        value: dict[str, Any],
        *,
        backend: str,
        stage: str = "",
        prompt_version: str = "",
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        latency_s: float | None = None,
    ) -> None:
        """Store ``value`` (JSON-compatible) under ``key`` in one atomic transaction."""
        if self.read_only:
            raise ConfigError(f"cache {self.path} was opened read-only")
        # A key the server echoed back (in a reply or an error) is never stored; callers redact too.
        blob = redact(json.dumps(value, ensure_ascii=False, separators=(",", ":")))
        row = (key, backend, stage, prompt_version, blob, input_tokens, output_tokens, latency_s, time.time())
        with self._lock:
            self._unsaved[key] = row
            self._write_unsaved()

    def _insert(self, row: tuple[Any, ...]) -> None:
        with self._conn:
            self._conn.execute("INSERT OR REPLACE INTO calls VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", row)

    def _write_unsaved(self) -> None:
        """Insert every row not yet stored, each in its own transaction (caller holds the lock).

        When the disk is full, the reserve file is given back once and the row written into the space it held; from
        then on every put still stores its reply but raises :class:`CacheWriteError`, so the run stops sending
        calls while the replies of the calls in flight are kept (a rerun repeats none of them).
        """
        for key, row in list(self._unsaved.items()):
            try:
                try:
                    self._insert(row)
                except sqlite3.OperationalError as exc:
                    # "database or disk is full", or "disk I/O error" when the write-ahead log cannot grow:
                    # give the reserve back once and try again
                    if not self._release_reserve():
                        raise
                    self._full = str(exc)
                    self._insert(row)
            except sqlite3.Error as exc:
                raise CacheWriteError(
                    f"cannot store a model reply in the call cache {self.path}: {exc}; free space (or make "
                    "the folder writable) and run the command again: stored replies are not requested again"
                ) from None
            del self._unsaved[key]
        if self._full is not None:
            raise CacheWriteError(
                f"the disk holding the call cache {self.path} is full ({self._full}); every reply received is "
                "stored: free space and run the command again (no stored call is requested again)"
            )

    def _make_reserve(self) -> None:
        """Set aside :data:`RESERVE_BYTES` beside the database, given back when the disk fills up (best effort)."""
        reserve = self.directory / (DB_NAME + RESERVE_SUFFIX)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        try:
            fd = os.open(reserve, flags, 0o644)
        except OSError:
            return  # already there (or no room for it: the cache works without)
        try:
            os.write(fd, b"\0" * RESERVE_BYTES)
        except OSError:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(reserve)
            return
        os.close(fd)

    def _release_reserve(self) -> bool:
        """Delete the reserve file to give its space to the database; ``False`` when there was none."""
        try:
            os.unlink(self.directory / (DB_NAME + RESERVE_SUFFIX))
        except OSError:
            return False
        return True

    def flush_counters(self) -> None:
        """Add the hit/miss counts gathered since the last flush to the database.

        A failure (full disk, read-only folder) keeps the counts for a later flush and raises nothing: counters
        are statistics, and an error here must never hide the one that stopped the run.
        """
        if self.read_only:
            return
        with self._lock:
            pending, self._pending = self._pending, {}
            if not pending:
                return
            try:
                with self._conn:
                    self._conn.executemany(
                        "INSERT INTO counters (backend, hits, misses) VALUES (?, ?, ?) "
                        "ON CONFLICT(backend) DO UPDATE SET hits = hits + excluded.hits, "
                        "misses = misses + excluded.misses",
                        [(b, h, m) for b, (h, m) in pending.items()],
                    )
            except sqlite3.Error as exc:
                log.info("hit/miss counters of %s not stored: %s", self.path, exc)
                for backend, (hits, misses) in pending.items():
                    counts = self._pending.setdefault(backend, [0, 0])
                    counts[0] += hits
                    counts[1] += misses

    def session_counters(self) -> dict[str, tuple[int, int]]:
        """Hits and misses per backend counted by this object and not yet flushed."""
        with self._lock:
            return {b: (h, m) for b, (h, m) in self._pending.items()}

    def close(self) -> None:
        """Store replies whose first write failed, flush counters and close the database. Safe to call twice."""
        if getattr(self, "_conn", None) is None:
            return
        try:
            # the run already reports a failure here; the replies are lost only when this fails too
            with self._lock, contextlib.suppress(CacheWriteError):
                self._write_unsaved()
            with contextlib.suppress(
                sqlite3.Error
            ):  # hit/miss counters are statistics: never worth a failure
                self.flush_counters()
        finally:
            with self._lock:
                self._conn.close()
                self._conn = None  # type: ignore[assignment]

    def __enter__(self) -> CallCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reporting -----------------------------------------------------------------------------------------------
    def stats(self) -> CacheStats:
        """Entries, size on disk (database plus write-ahead log) and per-backend / per-stage totals."""
        self.flush_counters()
        with self._lock:
            backends: dict[str, BackendStats] = {}
            for backend, n, tin, tout, wall in self._conn.execute(
                "SELECT backend, count(*), coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0), "
                "coalesce(sum(latency_s), 0) FROM calls GROUP BY backend"
            ):
                backends[backend] = BackendStats(
                    entries=n, input_tokens=tin, output_tokens=tout, wall_time_s=wall
                )
            for backend, hits, misses in self._conn.execute("SELECT backend, hits, misses FROM counters"):
                entry = backends.setdefault(backend, BackendStats())
                entry.hits, entry.misses = hits, misses
            stages = dict(self._conn.execute("SELECT stage, count(*) FROM calls GROUP BY stage").fetchall())
            entries = int(self._conn.execute("SELECT count(*) FROM calls").fetchone()[0])
        size = sum(
            p.stat().st_size
            for p in self.directory.glob(DB_NAME + "*")
            if p.is_file() and not p.name.endswith(RESERVE_SUFFIX)
        )
        return CacheStats(str(self.directory), entries, size, backends, stages)


def _enable_wal(conn: sqlite3.Connection, *, timeout_s: float = BUSY_TIMEOUT_S) -> None:
    """Switch ``conn``'s database to write-ahead logging, waiting for the other processes opening it.

    SQLite answers "database is locked" at once, without its busy timeout, when a process asks for the journal
    mode while another one holds the lock it needs (two runs opening the same new cache directory at the same
    moment: measured about once in 15 openings with 8 processes); the request is retried with a short backoff
    until ``timeout_s`` seconds have passed, then the error is raised.
    """
    deadline = time.monotonic() + timeout_s
    delay = 0.002
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL").fetchone()
            return
        except sqlite3.OperationalError as exc:
            message = str(exc).lower()
            if ("locked" not in message and "busy" not in message) or time.monotonic() >= deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def _stored_value(text: Any, key: str) -> dict[str, Any] | None:
    """A stored value, or ``None`` (a miss, with a warning) when the row is torn or not an object: one damaged
    row costs one repeated call, never the run."""
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        value = None
    if not isinstance(value, dict):
        log.warning("call cache: the stored reply of call %s is damaged; calling again", key[:12])
        return None
    return value

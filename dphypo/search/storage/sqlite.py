"""A crash-safe, sealed journal of one private search in a file (SQLite from the standard library, one file each).

**The journal is NOT PRIVATE — curator only.** It holds T and every run's score and timing; publishing it voids
the accounted (ε, δ). ``dphypo release FILE`` prints the only part that may be published.

What it holds, in the order a search writes it:

1. the **sealed search**, written once before any data is touched: the privacy configuration, grid, strategy,
   direction, seed, runs per update, a description of the objective, the drawn T, and a SHA-256 hash of all of it.
   On resume the caller's configuration must match it exactly, and T is read from it, never redrawn
   (privacy rule 2);
2. one row per **attempt** of a run: ``running`` when it starts, then ``done`` / ``data_failure`` (scored worst,
   never retried: privacy rule 5; any exception the objective raises counts as one), or ``lost`` (its process
   or worker died) / ``error`` (the search was stopped while it ran: Ctrl-C, a budget overrun). Lost and errored
   attempts touched the data: the search's ε already charges up to ``max_lost`` of them up front
   (:class:`~dphypo.privacy.PrivacyAccounting`), and a search that would exceed that stops without a release; an
   attempt still ``running`` when a search resumes was in flight when the process died and is marked ``lost``
   first;
3. the **incumbent's artifact** (e.g. the trained model of the best run so far, pickled), so a search that died
   after its best run can still release it;
4. the **release**: what may be published (params, score, ε, δ, accounting report, DP-SGD mechanism).

SQLite commits every write atomically, so ``kill -9`` at any moment leaves a readable journal. The connection holds
an exclusive lock while a search runs: a second process cannot resume the same journal concurrently.

**Integrity.** Every stored value that can reach a release carries a SHA-256 chained to the sealed search's: each
attempt row, the incumbent's artifact (hashed as stored, before it is unpickled) and the release record. Opening
a journal checks them all, so an edited score, model or release (or a bit flip on disk) is refused in one line
(:class:`~dphypo.search.storage.JournalError`) instead of being released. The hashes are not a signature (whoever
can write the file can recompute them); they catch damage and hand edits, not a forger.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import pickle
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dphypo.search.records import Trial
from dphypo.search.storage.base import (
    CHARGED_STATES,
    JournalError,
    SealedSearch,
    canonical,
    check_run_count,
    check_status,
    mismatch,
    seal_digest,
)

__all__ = ["CURATOR_WARNING", "FORMAT", "VERSION", "SQLiteJournal"]

FORMAT = "dphypo-journal"
#: 2: canonical sealed configuration (no reprs) and a hash on every attempt, the artifact and the release.
VERSION = 2
CURATOR_WARNING = (
    "NOT PRIVATE - curator only: this journal holds T and every run's score; publish only `dphypo release FILE`"
)
_SQLITE_HEADER = b"SQLite format 3\x00"
_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE plan (id INTEGER PRIMARY KEY CHECK (id = 1), config TEXT NOT NULL, run_count INTEGER NOT NULL,
                   digest TEXT NOT NULL, sealed_at REAL NOT NULL);
CREATE TABLE attempts (id INTEGER PRIMARY KEY AUTOINCREMENT, number INTEGER NOT NULL, grid_index INTEGER NOT NULL,
                       params TEXT NOT NULL, status TEXT NOT NULL
                       CHECK (status IN ('running', 'done', 'data_failure', 'lost', 'error')),
                       score REAL, seconds REAL, started_at REAL NOT NULL, finished_at REAL, note TEXT,
                       digest TEXT NOT NULL);
CREATE TABLE incumbent (id INTEGER PRIMARY KEY CHECK (id = 1), number INTEGER NOT NULL, artifact BLOB,
                        digest TEXT NOT NULL);
CREATE TABLE release (id INTEGER PRIMARY KEY CHECK (id = 1), payload TEXT NOT NULL, released_at REAL NOT NULL,
                      digest TEXT NOT NULL);
"""
# The columns of an attempt its hash covers, in order (everything but the id's own autoincrement bookkeeping).
_ATTEMPT_COLUMNS = ("id", "number", "grid_index", "params", "status", "score", "seconds", "started_at",
                    "finished_at", "note")


def _quote(text: str) -> str:
    """An SQL string literal's body (our own constants only; values from users go through parameters)."""
    return text.replace("'", "''")


class SQLiteJournal:
    """One search's journal file (a :class:`~dphypo.search.storage.Journal`).

    Open with :meth:`open`; use as a context manager or call :meth:`close`.

    Args:
        connection: An open SQLite connection (use :meth:`open`).
        path: The file it belongs to.
        read_only: Whether the connection refuses writes (:meth:`open` with ``read_only=True``).
    """

    def __init__(self, connection: sqlite3.Connection, path: Path, *, read_only: bool = False) -> None:
        self._db = connection
        self.path = path
        self.read_only = read_only
        self._seal_digest = ""  # the sealed search's hash, which every row hash is chained to ("" before sealing)

    # -- opening ---------------------------------------------------------------------------------------------

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, read_only: bool = False) -> SQLiteJournal:
        """Open an existing journal, or create a new one if ``path`` does not exist (or is an empty file).

        Args:
            path: The journal file.
            read_only: Open an existing journal without writing anything to it (``dphypo release``, checks):
                a missing or empty file is refused instead of created, and nothing is ever written.

        Raises:
            JournalError: ``path`` is not a usable dphypo journal (not SQLite, another program's database, a
                newer format, a corrupted file or a failed integrity check, a search that another process is
                running, or with ``read_only`` a missing or empty file). The file is left untouched.
        """
        path = Path(path)
        if path.exists() and path.stat().st_size > 0:  # an empty file holds nothing to protect
            return cls._open_existing(path, read_only=read_only)
        if read_only:
            state = "is empty" if path.exists() else "does not exist"
            raise JournalError(f"{str(path)!r} {state}, so it holds no dphypo journal; nothing was changed")
        if not path.parent.is_dir():
            raise ValueError(f"journal directory does not exist: {str(path.parent)!r}")
        db = cls._connect(path, create=True)
        meta = [("format", FORMAT), ("version", str(VERSION)), ("warning", CURATOR_WARNING),
                ("created_at", repr(time.time()))]
        inserts = "".join(f"INSERT INTO meta (key, value) VALUES ('{k}', '{_quote(v)}');" for k, v in meta)
        db.executescript(f"BEGIN IMMEDIATE;{_SCHEMA}{inserts}COMMIT;")  # all or nothing
        return cls(db, path)

    @staticmethod
    def _connect(path: Path, *, create: bool, read_only: bool = False) -> sqlite3.Connection:
        mode = "ro" if read_only else "rwc" if create else "rw"
        db = sqlite3.connect(f"file:{path}?mode={mode}", uri=True, isolation_level=None)
        try:
            if read_only:  # a shared read; fails while a search holds the file's exclusive lock
                db.execute("BEGIN")
                db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
                db.execute("COMMIT")
                return db
            # Hold the lock for the whole search: a second process resuming the same file would double-spend.
            db.execute("PRAGMA locking_mode = EXCLUSIVE")
            db.execute("PRAGMA synchronous = FULL")
            db.execute("BEGIN EXCLUSIVE")
            db.execute("COMMIT")
        except sqlite3.DatabaseError as exc:
            db.close()
            if "locked" in str(exc):
                raise JournalError(f"journal {str(path)!r} is in use by another process ({exc})") from exc
            raise JournalError(f"{str(path)!r} is corrupted ({exc}); nothing was changed") from exc
        return db

    @classmethod
    def _open_existing(cls, path: Path, *, read_only: bool) -> SQLiteJournal:
        with path.open("rb") as handle:
            header = handle.read(len(_SQLITE_HEADER))
        if header != _SQLITE_HEADER:
            raise JournalError(f"{str(path)!r} is not a dphypo journal (not an SQLite file); nothing was changed")
        db = cls._connect(path, create=False, read_only=read_only)
        try:
            journal = cls(db, path, read_only=read_only)
            journal._check_integrity()
        except sqlite3.DatabaseError as exc:
            db.close()
            raise JournalError(f"{str(path)!r} is corrupted ({exc}); nothing was changed") from exc
        except JournalError:
            db.close()
            raise
        return journal

    def _check_integrity(self) -> None:
        """Refuse a file that is not a journal of this version, or whose stored values fail their hashes."""
        (status,) = self._db.execute("PRAGMA quick_check").fetchone()
        if status != "ok":
            raise JournalError(f"{str(self.path)!r} is corrupted (SQLite: {status}); nothing was changed")
        tables = {row[0] for row in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "meta" not in tables:
            raise JournalError(f"{str(self.path)!r} is an SQLite file but not a dphypo journal; nothing was changed")
        meta = dict(self._db.execute("SELECT key, value FROM meta").fetchall())
        if meta.get("format") != FORMAT:
            raise JournalError(f"{str(self.path)!r} is an SQLite file but not a dphypo journal; nothing was changed")
        if meta.get("version") != str(VERSION):
            raise JournalError(f"{str(self.path)!r} has journal version {meta.get('version')}, this dphypo reads "
                               f"version {VERSION} only")
        sealed = self.sealed()
        if sealed is not None and seal_digest(sealed.config, sealed.run_count) != sealed.digest:
            raise JournalError(f"{str(self.path)!r} is corrupted: the sealed search does not match its hash")
        self._seal_digest = "" if sealed is None else sealed.digest
        self._check_attempts()
        self._check_incumbent()
        self._check_release()

    def _damaged(self, what: str) -> JournalError:
        return JournalError(f"{str(self.path)!r} is corrupted or was edited: {what} does not match its hash; "
                            "nothing was released or changed")

    def _check_attempts(self) -> None:
        columns = ", ".join((*_ATTEMPT_COLUMNS, "digest"))
        for row in self._db.execute(f"SELECT {columns} FROM attempts ORDER BY id"):
            if self._row_digest("attempt", *row[:-1]) != row[-1]:
                raise self._damaged(f"attempt {row[0]} (run {row[1]})")

    def _check_incumbent(self) -> None:
        row = self._db.execute("SELECT number, artifact, digest FROM incumbent WHERE id = 1").fetchone()
        if row is not None and self._blob_digest(row[0], row[1]) != row[2]:
            raise self._damaged(f"the stored artifact of run {row[0]}")

    def _check_release(self) -> None:
        row = self._db.execute("SELECT payload, released_at, digest FROM release WHERE id = 1").fetchone()
        if row is not None and self._row_digest("release", row[0], row[1]) != row[2]:
            raise self._damaged("the release record")

    def _row_digest(self, kind: str, *values: Any) -> str:
        """SHA-256 of a row's stored values, chained to the sealed search's hash (rows cannot move between files)."""
        return hashlib.sha256(canonical([self._seal_digest, kind, *values]).encode()).hexdigest()

    def _blob_digest(self, number: int, blob: bytes | None) -> str:
        digest = hashlib.sha256(canonical([self._seal_digest, "incumbent", number]).encode())
        digest.update(blob or b"")
        return digest.hexdigest()

    def close(self) -> None:
        """Release the file (and its lock)."""
        self._db.close()

    def __enter__(self) -> SQLiteJournal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _writable(self) -> None:
        if self.read_only:
            raise JournalError(f"{str(self.path)!r} was opened read-only; nothing was written")

    # -- the sealed search ---------------------------------------------------------------------------------------

    def sealed(self) -> SealedSearch | None:
        """The sealed search, or ``None`` for a journal no search has started yet."""
        row = self._db.execute("SELECT config, run_count, digest FROM plan WHERE id = 1").fetchone()
        if row is None:
            return None
        return SealedSearch(json.loads(row[0]), int(row[1]), row[2])

    def seal(self, config: dict[str, Any], run_count: int) -> SealedSearch:
        """Write the configuration and the drawn T (once; before any data is touched)."""
        self._writable()
        if self.sealed() is not None:
            raise JournalError(f"{str(self.path)!r} is already sealed")
        check_run_count(run_count)
        config = json.loads(canonical(config))  # exactly what a later read returns
        digest = seal_digest(config, run_count)
        with self._db:
            self._db.execute("INSERT INTO plan (id, config, run_count, digest, sealed_at) VALUES (1, ?, ?, ?, ?)",
                             (canonical(config), run_count, digest, time.time()))
        self._seal_digest = digest
        return SealedSearch(config, run_count, digest)

    def verify(self, config: dict[str, Any], *, ignore: tuple[str, ...] = ()) -> SealedSearch:
        """The sealed search, after checking that ``config`` is the configuration it was sealed with.

        Args:
            config: The caller's configuration (JSON-ready).
            ignore: Dotted field prefixes not compared (for an early check before every field is known).

        Raises:
            JournalMismatch: Naming every field that differs.
        """
        sealed = self.sealed()
        if sealed is None:
            raise JournalError(f"{str(self.path)!r} has no sealed search")
        mismatch(sealed, config, ignore, repr(str(self.path)))
        return sealed

    # -- attempts ---------------------------------------------------------------------------------------------

    def start_attempt(self, number: int, grid_index: int, params: dict[str, Any]) -> int:
        """Record that run ``number`` starts (status ``running``); returns the attempt id."""
        self._writable()
        with self._transaction():
            cursor = self._db.execute(
                "INSERT INTO attempts (number, grid_index, params, status, started_at, digest) "
                "VALUES (?, ?, ?, 'running', ?, '')",
                (number, grid_index, canonical(params), time.time()),
            )
            attempt = int(cursor.lastrowid)  # type: ignore[arg-type]
            self._rehash_attempt(attempt)
        return attempt

    def _rehash_attempt(self, attempt: int) -> None:
        """Store the hash of attempt ``attempt``'s current values (inside the caller's transaction)."""
        columns = ", ".join(_ATTEMPT_COLUMNS)
        row = self._db.execute(f"SELECT {columns} FROM attempts WHERE id = ?", (attempt,)).fetchone()
        self._db.execute("UPDATE attempts SET digest = ? WHERE id = ?", (self._row_digest("attempt", *row), attempt))

    def finish_attempt(self, attempt: int, status: str, score: float | None = None, seconds: float | None = None,
                       *, note: str | None = None, incumbent: tuple[int, Any] | None = None) -> None:
        """Close an attempt as ``done``, ``data_failure``, ``lost`` or ``error``.

        Args:
            attempt: Id returned by :meth:`start_attempt`.
            status: The outcome.
            score: The run's score (non-finite for a data failure).
            seconds: Its wall time.
            note: Why it was lost, for the curator.
            incumbent: ``(run number, artifact)`` to keep as the best run's artifact, written in the *same*
                transaction, so the stored artifact always belongs to the best finished run.
        """
        self._writable()
        check_status(status)
        stored_score = None if score is None or not math.isfinite(score) else float(score)
        blob = None if incumbent is None else pickle.dumps(incumbent[1], protocol=pickle.HIGHEST_PROTOCOL)
        with self._transaction():
            updated = self._db.execute(
                "UPDATE attempts SET status = ?, score = ?, seconds = ?, finished_at = ?, note = ? "
                "WHERE id = ? AND status = 'running'",
                (status, stored_score, seconds, time.time(), note, attempt),
            ).rowcount
            if updated != 1:
                raise JournalError(f"attempt {attempt} is not running in {str(self.path)!r}")
            self._rehash_attempt(attempt)
            if incumbent is not None:
                self._db.execute("INSERT OR REPLACE INTO incumbent (id, number, artifact, digest) VALUES (1, ?, ?, ?)",
                                 (incumbent[0], sqlite3.Binary(blob),  # type: ignore[arg-type]
                                  self._blob_digest(incumbent[0], blob)))

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        """All statements inside commit together or not at all (the connection is in autocommit mode)."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def charge_interrupted(self) -> int:
        """Mark every attempt still ``running`` (in flight when a process died) as ``lost``; returns how many."""
        self._writable()
        with self._transaction():
            running = [row[0] for row in self._db.execute("SELECT id FROM attempts WHERE status = 'running'")]
            for attempt in running:
                self._db.execute("UPDATE attempts SET status = 'lost', finished_at = ?, "
                                 "note = 'in flight when the search stopped' WHERE id = ?", (time.time(), attempt))
                self._rehash_attempt(attempt)
        return len(running)

    def finished_runs(self) -> dict[int, Trial]:
        """Every run with a final outcome (``done`` or ``data_failure``), by run number."""
        rows = self._db.execute(
            "SELECT number, grid_index, params, status, score, seconds, note FROM attempts "
            "WHERE status IN ('done', 'data_failure') ORDER BY id"
        ).fetchall()
        out: dict[int, Trial] = {}
        for number, grid_index, params, status, score, seconds, note in rows:
            if number in out:
                raise JournalError(f"{str(self.path)!r} is corrupted: run {number} finished twice")
            out[number] = Trial(number, grid_index, json.loads(params), math.nan if score is None else float(score),
                                status != "done", float(seconds or 0.0), note or None)
        return out

    def charged_attempts(self) -> int:
        """Attempts that touched the data without a usable output (``lost`` or ``error``)."""
        (count,) = self._db.execute(
            f"SELECT COUNT(*) FROM attempts WHERE status IN {CHARGED_STATES!r}").fetchone()
        return int(count)

    def attempts(self) -> list[dict[str, Any]]:
        """Every attempt in order (curator-only view)."""
        columns = ("id", "number", "grid_index", "params", "status", "score", "seconds", "note")
        rows = self._db.execute(f"SELECT {', '.join(columns)} FROM attempts ORDER BY id").fetchall()
        return [dict(zip(columns, row, strict=True)) | {"params": json.loads(row[3])} for row in rows]

    # -- incumbent artifact and release -------------------------------------------------------------------------

    def incumbent(self) -> tuple[int, Any] | None:
        """``(run number, artifact)`` of the stored incumbent, or ``None``.

        Raises:
            JournalError: The stored artifact fails its hash or cannot be unpickled (one line, no traceback).
        """
        row = self._db.execute("SELECT number, artifact, digest FROM incumbent WHERE id = 1").fetchone()
        if row is None:
            return None
        number, blob, digest = int(row[0]), row[1], row[2]
        if self._blob_digest(number, blob) != digest:
            raise self._damaged(f"the stored artifact of run {number}")
        try:
            # The journal is the curator's own file (see the module docstring) and the bytes passed their hash.
            return number, pickle.loads(blob)
        except Exception as exc:  # any unpickling failure is a damaged file, not a bug of the caller
            raise JournalError(f"{str(self.path)!r}: the stored artifact of run {number} cannot be read "
                               f"({type(exc).__name__}: {exc}); nothing was released") from exc

    def write_release(self, payload: dict[str, Any]) -> None:
        """Store what may be published (JSON-ready; replaced if the search is replayed)."""
        self._writable()
        text, released_at = canonical(payload), time.time()
        with self._db:
            self._db.execute("INSERT OR REPLACE INTO release (id, payload, released_at, digest) VALUES (1, ?, ?, ?)",
                             (text, released_at, self._row_digest("release", text, released_at)))

    def release(self) -> dict[str, Any] | None:
        """The published part of a finished search, or ``None`` if it has not finished."""
        row = self._db.execute("SELECT payload, released_at, digest FROM release WHERE id = 1").fetchone()
        if row is None:
            return None
        if self._row_digest("release", row[0], row[1]) != row[2]:
            raise self._damaged("the release record")
        return dict(json.loads(row[0]))

"""A journal kept in memory: the same :class:`~dphypo.search.storage.Journal` as the file, without the file.

A search without a journal file, and every simulated search, records through it, so the loop has one code path.
Artifacts are kept as objects (never pickled), and nothing survives the process: there is nothing to resume.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
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

__all__ = ["MemoryJournal"]


@dataclass
class _Attempt:
    number: int
    grid_index: int
    params: dict[str, Any]
    status: str = "running"
    score: float | None = None
    seconds: float | None = None
    note: str | None = None


class MemoryJournal:
    """One search's journal in memory (a :class:`~dphypo.search.storage.Journal`; curator only)."""

    def __init__(self) -> None:
        self._sealed: SealedSearch | None = None
        self._attempts: list[_Attempt] = []
        self._incumbent: tuple[int, Any] | None = None
        self._release: dict[str, Any] | None = None

    def __repr__(self) -> str:
        return f"MemoryJournal(attempts={len(self._attempts)}, sealed={self._sealed is not None})"

    def __enter__(self) -> MemoryJournal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Nothing to release (kept for the protocol)."""

    def sealed(self) -> SealedSearch | None:
        """The sealed search, or ``None`` before :meth:`seal`."""
        return self._sealed

    def seal(self, config: dict[str, Any], run_count: int) -> SealedSearch:
        """Keep the configuration and the drawn T (once)."""
        if self._sealed is not None:
            raise JournalError("the in-memory journal is already sealed")
        check_run_count(run_count)
        config = json.loads(canonical(config))  # exactly what the file journal would read back
        self._sealed = SealedSearch(config, run_count, seal_digest(config, run_count))
        return self._sealed

    def verify(self, config: dict[str, Any], *, ignore: tuple[str, ...] = ()) -> SealedSearch:
        """The sealed search, after checking that ``config`` is the one it was sealed with.

        Raises:
            JournalMismatch: Naming every field that differs.
        """
        if self._sealed is None:
            raise JournalError("the in-memory journal has no sealed search")
        mismatch(self._sealed, config, ignore, "in memory")
        return self._sealed

    def start_attempt(self, number: int, grid_index: int, params: dict[str, Any]) -> int:
        """Record that run ``number`` starts; returns the attempt id (1-based, like SQLite's)."""
        self._attempts.append(_Attempt(number, grid_index, dict(params)))
        return len(self._attempts)

    def finish_attempt(self, attempt: int, status: str, score: float | None = None, seconds: float | None = None,
                       *, note: str | None = None, incumbent: tuple[int, Any] | None = None) -> None:
        """Close an attempt (see :meth:`SQLiteJournal.finish_attempt <dphypo.search.storage.SQLiteJournal>`)."""
        check_status(status)
        if not (1 <= attempt <= len(self._attempts)) or self._attempts[attempt - 1].status != "running":
            raise JournalError(f"attempt {attempt} is not running in the in-memory journal")
        record = self._attempts[attempt - 1]
        record.status = status
        record.score = None if score is None or not math.isfinite(score) else float(score)
        record.seconds = seconds
        record.note = note
        if incumbent is not None:
            self._incumbent = incumbent

    def charge_interrupted(self) -> int:
        """Mark every attempt still ``running`` as ``lost``; returns how many."""
        running = [a for a in self._attempts if a.status == "running"]
        for record in running:
            record.status, record.note = "lost", "in flight when the search stopped"
        return len(running)

    def charged_attempts(self) -> int:
        """Attempts that touched the data without a usable output (``lost`` or ``error``)."""
        return sum(a.status in CHARGED_STATES for a in self._attempts)

    def finished_runs(self) -> dict[int, Trial]:
        """Every run with a final outcome (``done`` or ``data_failure``), by run number."""
        out: dict[int, Trial] = {}
        for a in self._attempts:
            if a.status in ("done", "data_failure"):
                if a.number in out:
                    raise JournalError(f"run {a.number} finished twice in the in-memory journal")
                out[a.number] = Trial(a.number, a.grid_index, dict(a.params),
                                      math.nan if a.score is None else a.score, a.status != "done",
                                      float(a.seconds or 0.0), a.note or None)
        return out

    def attempts(self) -> list[dict[str, Any]]:
        """Every attempt in order, as :meth:`SQLiteJournal.attempts` lists them."""
        return [{"id": i, "number": a.number, "grid_index": a.grid_index, "params": dict(a.params),
                 "status": a.status, "score": a.score, "seconds": a.seconds, "note": a.note}
                for i, a in enumerate(self._attempts, start=1)]

    def incumbent(self) -> tuple[int, Any] | None:
        """``(run number, artifact)`` of the incumbent, or ``None``."""
        return self._incumbent

    def write_release(self, payload: dict[str, Any]) -> None:
        """Keep what may be published."""
        self._release = json.loads(canonical(payload))

    def release(self) -> dict[str, Any] | None:
        """The published part of a finished search, or ``None``."""
        return self._release

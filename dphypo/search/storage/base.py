"""What the search needs of a journal (:class:`Journal`), its errors, and the sealed search both journals share.

A journal records one search: the **sealed search** (configuration and the drawn T, fixed before any data is
touched, privacy rule 2), every **attempt** of a run, the **incumbent's artifact**, and the **release**.
:class:`~dphypo.search.storage.sqlite.SQLiteJournal` keeps it in a crash-safe file (a resumable search);
:class:`~dphypo.search.storage.memory.MemoryJournal` keeps it in memory (a search without a file, and every
simulated search), so the loop has one code path. **A journal is NOT PRIVATE — curator only.**
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from dphypo.privacy.errors import DphypoError
from dphypo.privacy.validation import check_non_negative_int
from dphypo.search.records import Trial

__all__ = [
    "ATTEMPT_STATES",
    "CHARGED_STATES",
    "Journal",
    "JournalError",
    "JournalMismatch",
    "SealedSearch",
    "seal_digest",
]

#: Attempt states that touched the data without a usable output: charged to the budget, then re-run.
CHARGED_STATES = ("lost", "error")
#: Final states of an attempt (``running`` until one of them).
ATTEMPT_STATES = ("done", "data_failure", *CHARGED_STATES)


class JournalError(DphypoError, RuntimeError):
    """The file is not a usable dphypo journal (foreign, corrupted, in use, or from a newer version).

    Nothing is written to the file when this is raised.
    """


class JournalMismatch(DphypoError, ValueError):
    """The configuration of a resumed search differs from the journal's sealed search."""


@dataclass(frozen=True)
class SealedSearch:
    """The part of a search fixed before any data is touched.

    Attributes:
        config: Canonical JSON-ready description of the search (privacy, grid, strategy, seed, ...).
        run_count: The drawn T.
        digest: SHA-256 of ``config`` and ``run_count`` (:func:`seal_digest`).
    """

    config: dict[str, Any]
    run_count: int
    digest: str


@runtime_checkable
class Journal(Protocol):
    """One search's record, as the loop and the tuner use it (NOT PRIVATE — curator only)."""

    def sealed(self) -> SealedSearch | None:
        """The sealed search, or ``None`` for a journal no search has started yet."""
        ...

    def seal(self, config: dict[str, Any], run_count: int) -> SealedSearch:
        """Write the configuration and the drawn T (once; before any data is touched)."""
        ...

    def verify(self, config: dict[str, Any], *, ignore: tuple[str, ...] = ()) -> SealedSearch:
        """The sealed search, after checking that ``config`` is the one it was sealed with (else JournalMismatch)."""
        ...

    def start_attempt(self, number: int, grid_index: int, params: dict[str, Any]) -> int:
        """Record that run ``number`` starts (status ``running``); returns the attempt id."""
        ...

    def finish_attempt(self, attempt: int, status: str, score: float | None = None, seconds: float | None = None,
                       *, note: str | None = None, incumbent: tuple[int, Any] | None = None) -> None:
        """Close an attempt as one of :data:`ATTEMPT_STATES`, keeping ``incumbent`` ``(number, artifact)`` with it."""
        ...

    def charge_interrupted(self) -> int:
        """Mark every attempt still ``running`` as ``lost``; returns how many."""
        ...

    def charged_attempts(self) -> int:
        """Attempts that touched the data without a usable output (``lost`` or ``error``)."""
        ...

    def finished_runs(self) -> dict[int, Trial]:
        """Every run with a final outcome (``done`` or ``data_failure``), by run number."""
        ...

    def attempts(self) -> list[dict[str, Any]]:
        """Every attempt in order (curator-only view)."""
        ...

    def incumbent(self) -> tuple[int, Any] | None:
        """``(run number, artifact)`` of the stored incumbent, or ``None``."""
        ...

    def write_release(self, payload: dict[str, Any]) -> None:
        """Store what may be published (JSON-ready)."""
        ...

    def release(self) -> dict[str, Any] | None:
        """The published part of a finished search, or ``None`` if it has not finished."""
        ...

    def close(self) -> None:
        """Release the journal's resources (idempotent)."""
        ...


def canonical(value: Any) -> str:
    """Canonical JSON of a JSON-ready value (sorted keys, no spaces): what is hashed and stored."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=True)


def seal_digest(config: dict[str, Any], run_count: int) -> str:
    """SHA-256 hex digest of a sealed search (canonical JSON of ``config`` and ``run_count``)."""
    return hashlib.sha256(canonical({"config": config, "run_count": run_count}).encode()).hexdigest()


def check_run_count(run_count: Any) -> None:
    """Raise ``ValueError`` unless ``run_count`` is a non-negative integer."""
    check_non_negative_int("run_count", run_count)


def check_status(status: str) -> None:
    """Raise ``ValueError`` unless ``status`` is one of :data:`ATTEMPT_STATES`."""
    if status not in ATTEMPT_STATES:
        raise ValueError(f"status must be done, data_failure, lost or error, got {status!r}")


def mismatch(sealed: SealedSearch, config: dict[str, Any], ignore: tuple[str, ...], where: str) -> None:
    """Raise :class:`JournalMismatch` naming every field in which ``config`` differs from the sealed one.

    Args:
        sealed: The sealed search.
        config: The caller's configuration (JSON-ready).
        ignore: Dotted field prefixes not compared (for an early check before every field is known).
        where: The journal, as named in the message.
    """
    given = json.loads(canonical(config))
    differences = [d for d in _differences(sealed.config, given)
                   if not any(d == p or d.startswith(p + ".") for p in ignore)]
    if differences:
        raise JournalMismatch(
            f"the configuration differs from the journal {where} in: {', '.join(differences)}; "
            "a resumed search must use exactly the sealed configuration (start a new journal for a new search)"
        )


def _differences(sealed: Any, given: Any, prefix: str = "") -> list[str]:
    """Dotted paths at which two JSON-ready values differ (for a readable mismatch message)."""
    if isinstance(sealed, dict) and isinstance(given, dict):
        out: list[str] = []
        for key in sorted(set(sealed) | set(given)):
            path = f"{prefix}.{key}" if prefix else str(key)
            if key not in sealed or key not in given:
                out.append(path)
            else:
                out.extend(_differences(sealed[key], given[key], path))
        return out
    return [] if canonical(sealed) == canonical(given) else [prefix or "(root)"]

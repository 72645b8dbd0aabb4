"""Journals of a search: the :class:`Journal` protocol, a crash-safe SQLite file and an in-memory journal.

**A journal is NOT PRIVATE — curator only.** It holds T and every run's score; ``dphypo release FILE`` prints the
only part that may be published.
"""

from __future__ import annotations

from dphypo.search.storage.base import (
    CHARGED_STATES,
    Journal,
    JournalError,
    JournalMismatch,
    SealedSearch,
    seal_digest,
)
from dphypo.search.storage.memory import MemoryJournal
from dphypo.search.storage.sqlite import CURATOR_WARNING, SQLiteJournal
from dphypo.search.storage.stages import StageJournal

__all__ = [
    "CHARGED_STATES",
    "CURATOR_WARNING",
    "Journal",
    "JournalError",
    "JournalMismatch",
    "MemoryJournal",
    "SQLiteJournal",
    "SealedSearch",
    "StageJournal",
    "seal_digest",
]


def __getattr__(name: str) -> object:
    """Names this version renamed (issue #21) fail with one line naming their replacement."""
    renamed = {"SealedPlan": "SealedSearch", "plan_digest": "seal_digest"}
    if name in renamed:
        raise AttributeError(f"dphypo.search.storage.{name} was renamed dphypo.search.storage.{renamed[name]}")
    raise AttributeError(f"module 'dphypo.search.storage' has no attribute {name!r}")

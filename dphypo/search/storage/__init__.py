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
    SealedPlan,
    plan_digest,
)
from dphypo.search.storage.memory import MemoryJournal
from dphypo.search.storage.sqlite import CURATOR_WARNING, SQLiteJournal

__all__ = [
    "CHARGED_STATES",
    "CURATOR_WARNING",
    "Journal",
    "JournalError",
    "JournalMismatch",
    "MemoryJournal",
    "SQLiteJournal",
    "SealedPlan",
    "plan_digest",
]

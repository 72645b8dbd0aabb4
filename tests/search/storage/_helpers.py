"""What the journal tests share: a sealed configuration and a freshly sealed file journal."""

from __future__ import annotations

from dphypo.search.storage import SQLiteJournal

CONFIG = {"privacy": {"C": 2.0, "c": 0.75, "runs": "geometric"}, "seed": 7, "space": {"grid": "lr x clip"}}


def _sealed(path, run_count: int = 5) -> SQLiteJournal:
    journal = SQLiteJournal.open(path)
    journal.seal(CONFIG, run_count)
    return journal


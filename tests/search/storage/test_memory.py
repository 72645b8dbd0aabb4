"""The in-memory journal: it records exactly what the sealed file records (the Journal protocol)."""

from __future__ import annotations

import math

import pytest

from dphypo.search.storage import Journal, JournalError, JournalMismatch, MemoryJournal, SQLiteJournal
from tests.search.storage._helpers import CONFIG


def _journals(tmp_path) -> tuple[SQLiteJournal, MemoryJournal]:
    return SQLiteJournal.open(tmp_path / "j.db"), MemoryJournal()


def test_the_memory_journal_records_exactly_what_the_file_records(tmp_path) -> None:
    views = []
    for journal in _journals(tmp_path):
        assert isinstance(journal, Journal)
        with journal:
            assert journal.sealed() is None
            sealed = journal.seal(CONFIG, 5)
            with pytest.raises(JournalError, match="already sealed"):
                journal.seal(CONFIG, 3)
            with pytest.raises(JournalMismatch, match=r"in: seed"):
                journal.verify({**CONFIG, "seed": 8})
            assert journal.verify({**CONFIG, "seed": 8}, ignore=("seed",)) == sealed
            a = journal.start_attempt(0, 4, {"lr": 0.1})
            journal.finish_attempt(a, "done", 0.9, 1.5, incumbent=(0, {"model": "zero"}))
            with pytest.raises(JournalError, match="not running"):
                journal.finish_attempt(a, "done", 0.8, 1.0)
            with pytest.raises(ValueError, match="status must be"):
                journal.finish_attempt(journal.start_attempt(1, 2, {}), "finished")
            journal.finish_attempt(journal.start_attempt(2, 1, {"lr": 0.3}), "data_failure", math.nan, 0.3,
                                   note="DataFailure: diverged")
            assert journal.charge_interrupted() == 1
            journal.write_release({"score": 0.9, "epsilon": 1.5})
            views.append((sealed, journal.charged_attempts(), repr(journal.finished_runs()), journal.attempts(),
                          journal.incumbent(), journal.release()))
    file_view, memory_view = views
    assert memory_view == file_view
    assert "error='DataFailure: diverged'" in file_view[2]


"""A stage's view of its search's one journal: runs numbered within the stage, its own losses and incumbent."""

from __future__ import annotations

import pytest

from dphypo.search.recording import LostAttemptsExceeded, Recorder
from dphypo.search.storage import Journal, JournalError, MemoryJournal, SQLiteJournal, StageJournal
from tests.search.storage._helpers import CONFIG


@pytest.mark.parametrize("kind", ["file", "memory"])
def test_two_stages_share_one_journal_with_their_runs_numbered_on(tmp_path, kind) -> None:
    journal = SQLiteJournal.open(tmp_path / "j.db") if kind == "file" else MemoryJournal()
    with journal:
        journal.seal(CONFIG, 5)
        probes, finals = StageJournal(journal, 0, 3, keep_artifacts=False), StageJournal(journal, 3, 2)
        assert isinstance(probes, Journal)
        with pytest.raises(JournalError, match="sealed on its own"):
            probes.seal(CONFIG, 3)
        for number in range(3):
            attempt = probes.start_attempt(number, number, {"x": number})
            probes.finish_attempt(attempt, "done", 0.5 + number, 1.0, incumbent=(number, f"probe {number}"))
        finals.start_attempt(0, 7, {"x": 7})
        finals.charge_interrupted()  # a dead process left the final run in flight
        attempt = finals.start_attempt(0, 7, {"x": 7})
        finals.finish_attempt(attempt, "done", 0.1, 2.0, incumbent=(0, "final model"))
        with pytest.raises(ValueError, match=r"run number must be in \[0, 2\)"):
            finals.start_attempt(2, 1, {"x": 1})

        # one journal, runs numbered on: 0-2 the probes, 3-4 the final stage
        assert [(a["number"], a["status"]) for a in journal.attempts()] == [
            (0, "done"), (1, "done"), (2, "done"), (3, "lost"), (3, "done")]
        assert journal.incumbent() == (3, "final model")  # the probes' artifacts are never journaled
        # each stage sees its own runs, losses and incumbent, numbered within the stage
        assert sorted(probes.finished_runs()) == [0, 1, 2] and probes.charged_attempts() == 0
        assert list(finals.finished_runs()) == [0] and finals.finished_runs()[0].number == 0
        assert finals.charged_attempts() == 1 and [a["number"] for a in finals.attempts()] == [0, 0]
        assert finals.incumbent() == (0, "final model") and probes.incumbent() is None


def test_each_stage_is_charged_against_its_own_max_lost(tmp_path) -> None:
    with SQLiteJournal.open(tmp_path / "j.db") as journal:
        journal.seal(CONFIG, 4)
        probes, finals = StageJournal(journal, 0, 3, keep_artifacts=False), StageJournal(journal, 3, 1)
        probes.start_attempt(1, 1, {"x": 1})
        finals.start_attempt(0, 2, {"x": 2})
        stage1, stage2 = Recorder("maximize", probes, max_lost=1), Recorder("maximize", finals, max_lost=1)
        stage1.resume()  # marks both attempts in flight lost; each stage counts its own
        stage2.resume()
        assert (stage1.lost_attempts, stage2.lost_attempts) == (1, 1)
        finals.start_attempt(0, 2, {"x": 2})
        with pytest.raises(LostAttemptsExceeded, match="max_lost=1"):
            Recorder("maximize", finals, max_lost=1).resume()
        Recorder("maximize", probes, max_lost=1).resume()  # stage 1 still within its charge

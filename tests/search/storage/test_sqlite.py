"""The sealed SQLite journal: crash-safe writes, refusal of foreign/corrupted files, integrity, locking."""

from __future__ import annotations

import math
import sqlite3

import pytest

from dphypo.search.records import Trial
from dphypo.search.storage import CURATOR_WARNING, JournalError, SQLiteJournal, seal_digest
from tests.search.storage._helpers import CONFIG, _sealed


def test_a_new_journal_is_sealed_once_and_reads_back(tmp_path) -> None:
    path = tmp_path / "search.db"
    with _sealed(path, 12) as journal, pytest.raises(JournalError, match="already sealed"):
        journal.seal(CONFIG, 3)
    with SQLiteJournal.open(path) as journal:
        sealed = journal.sealed()
        assert sealed.run_count == 12 and sealed.config == CONFIG
        assert sealed.digest == seal_digest(CONFIG, 12)
        assert journal.verify(CONFIG).run_count == 12
    assert CURATOR_WARNING in dict(sqlite3.connect(path).execute("SELECT key, value FROM meta").fetchall()).values()


def test_attempts_finish_once_and_lost_ones_are_charged(tmp_path) -> None:
    with _sealed(tmp_path / "j.db") as journal:
        a = journal.start_attempt(0, 4, {"lr": 0.1})
        journal.finish_attempt(a, "done", 0.9, 1.5, incumbent=(0, {"model": "zero"}))
        with pytest.raises(JournalError, match="not running"):
            journal.finish_attempt(a, "done", 0.8, 1.0)
        b = journal.start_attempt(1, 2, {"lr": 0.2})
        journal.finish_attempt(b, "lost", note="worker died")
        c = journal.start_attempt(1, 2, {"lr": 0.2})
        journal.finish_attempt(c, "data_failure", math.nan, 0.3)
        journal.start_attempt(2, 1, {"lr": 0.3})  # in flight when the process "dies"
    with SQLiteJournal.open(tmp_path / "j.db") as journal:
        assert journal.charge_interrupted() == 1
        assert journal.charged_attempts() == 2  # the dead worker + the run in flight
        finished = journal.finished_runs()
        assert sorted(finished) == [0, 1]
        assert finished[0] == Trial(0, 4, {"lr": 0.1}, 0.9, False, 1.5, None)
        assert math.isnan(finished[1].score) and finished[1].failed and finished[1].seconds == 0.3
        assert journal.incumbent() == (0, {"model": "zero"})
        assert [a["status"] for a in journal.attempts()] == ["done", "lost", "data_failure", "lost"]


def test_an_incumbent_is_written_with_its_result_or_not_at_all(tmp_path) -> None:
    with _sealed(tmp_path / "j.db") as journal:
        a = journal.start_attempt(0, 4, {})
        with pytest.raises(Exception):  # noqa: B017 - an unpicklable artifact
            journal.finish_attempt(a, "done", 0.9, 1.0, incumbent=(0, lambda: None))
        assert journal.incumbent() is None
        assert journal.finished_runs() == {}  # rolled back together: the attempt is still running
        journal.finish_attempt(a, "done", 0.9, 1.0, incumbent=(0, "model"))
        assert journal.incumbent() == (0, "model")


@pytest.mark.parametrize(
    "content",
    [b"not a database at all, just text\n" * 10, b"SQLite format 3\x00" + b"\xff" * 2000],
    ids=["text", "garbage-after-header"],
)
def test_a_foreign_or_corrupted_file_is_refused_and_left_untouched(tmp_path, content) -> None:
    path = tmp_path / "j.db"
    path.write_bytes(content)
    with pytest.raises(JournalError, match="nothing was changed"):
        SQLiteJournal.open(path)
    assert path.read_bytes() == content


def test_another_programs_database_is_refused(tmp_path) -> None:
    path = tmp_path / "other.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE users (name TEXT)")
    db.commit()
    db.close()
    before = path.read_bytes()
    with pytest.raises(JournalError, match="not a dphypo journal"):
        SQLiteJournal.open(path)
    assert path.read_bytes() == before


def test_a_truncated_journal_is_refused(tmp_path) -> None:
    path = tmp_path / "j.db"
    with _sealed(path) as journal:
        for number in range(40):
            journal.finish_attempt(journal.start_attempt(number, number, {"x": "y" * 200}), "done", 0.5, 1.0)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(JournalError, match="corrupted"):
        SQLiteJournal.open(path).finished_runs()


def test_a_tampered_run_count_breaks_the_seal(tmp_path) -> None:
    path = tmp_path / "j.db"
    _sealed(path, 5).close()
    db = sqlite3.connect(path)
    db.execute("UPDATE plan SET run_count = 50")
    db.commit()
    db.close()
    with pytest.raises(JournalError, match="does not match its hash"):
        SQLiteJournal.open(path)


def test_a_journal_in_use_cannot_be_opened_twice(tmp_path) -> None:
    path = tmp_path / "j.db"
    with _sealed(path), pytest.raises(JournalError, match="in use"):
        SQLiteJournal.open(path)
    SQLiteJournal.open(path).close()  # released with the first handle


def test_an_empty_file_becomes_a_new_journal_but_a_missing_directory_does_not(tmp_path) -> None:
    (tmp_path / "empty.db").touch()
    with SQLiteJournal.open(tmp_path / "empty.db") as journal:
        assert journal.sealed() is None
    with pytest.raises(ValueError, match="directory does not exist"):
        SQLiteJournal.open(tmp_path / "missing" / "j.db")


# -- integrity of everything that reaches a release (issue #20) ---------------------------------------------------
def _finished_search(path) -> None:
    with _sealed(path) as journal:
        attempt = journal.start_attempt(0, 3, {"lr": 0.1})
        journal.finish_attempt(attempt, "done", 0.75, 1.0, incumbent=(0, {"weights": [1.0, 2.0, 3.0]}))
        journal.write_release({"params": {"lr": 0.1}, "score": 0.75, "epsilon": 7.999, "delta": 1e-5})


def _edit(path, statement: str, *args) -> None:
    db = sqlite3.connect(path)
    db.execute(statement, args)
    db.commit()
    db.close()


@pytest.mark.parametrize(
    ("statement", "what"),
    [
        ("UPDATE release SET payload = replace(payload, '7.999', '1.999')", "release record"),
        ("UPDATE attempts SET score = 0.99", "attempt 1"),
        ("UPDATE attempts SET params = '{\"lr\":10.0}'", "attempt 1"),
        ("UPDATE incumbent SET artifact = CAST(replace(CAST(artifact AS TEXT), 'weights', 'weightz') AS BLOB)",
         "artifact of run 0"),
        ("UPDATE incumbent SET number = 1", "artifact of run 1"),
    ],
    ids=["epsilon-digit", "score", "params", "model-bytes", "incumbent-number"],
)
def test_an_edited_value_that_reaches_a_release_is_refused(tmp_path, statement: str, what: str) -> None:
    path = tmp_path / "j.db"
    _finished_search(path)
    with SQLiteJournal.open(path) as journal:
        assert journal.release()["epsilon"] == 7.999 and journal.incumbent()[1]["weights"] == [1.0, 2.0, 3.0]
    _edit(path, statement)
    before = path.read_bytes()
    for read_only in (False, True):
        with pytest.raises(JournalError, match=f"{what}.*does not match its hash"):
            SQLiteJournal.open(path, read_only=read_only)
    assert path.read_bytes() == before


def test_a_damaged_artifact_with_a_recomputed_hash_is_one_line_not_an_unpickling_traceback(tmp_path) -> None:
    path = tmp_path / "j.db"
    _finished_search(path)
    with SQLiteJournal.open(path) as journal:
        garbage = b"\x80\x05not a pickle"
        forged = journal._blob_digest(0, garbage)  # someone who edits the hash too
    _edit(path, "UPDATE incumbent SET artifact = ?, digest = ?", garbage, forged)
    with SQLiteJournal.open(path) as journal, pytest.raises(JournalError, match="artifact of run 0 cannot be read"):
        journal.incumbent()


def test_rows_cannot_move_between_journals(tmp_path) -> None:
    _finished_search(tmp_path / "a.db")
    with SQLiteJournal.open(tmp_path / "b.db") as journal:
        journal.seal({**CONFIG, "seed": 99}, 5)
    row = sqlite3.connect(tmp_path / "a.db").execute("SELECT payload, released_at, digest FROM release").fetchone()
    _edit(tmp_path / "b.db", "INSERT INTO release (id, payload, released_at, digest) VALUES (1, ?, ?, ?)", *row)
    with pytest.raises(JournalError, match="release record"):
        SQLiteJournal.open(tmp_path / "b.db")  # its hash is chained to a.db's sealed mechanism, not b.db's


def test_a_read_only_open_writes_nothing_and_refuses_missing_or_empty_files(tmp_path) -> None:
    empty = tmp_path / "empty.db"
    empty.touch()
    with pytest.raises(JournalError, match="is empty"):
        SQLiteJournal.open(empty, read_only=True)
    assert empty.read_bytes() == b""  # no schema written into the user's file
    with pytest.raises(JournalError, match="does not exist"):
        SQLiteJournal.open(tmp_path / "missing.db", read_only=True)
    assert not (tmp_path / "missing.db").exists()
    path = tmp_path / "j.db"
    _finished_search(path)
    with SQLiteJournal.open(path) as journal:
        journal.start_attempt(1, 2, {"lr": 0.2})  # in flight when the process "died"
    before = path.read_bytes()
    with SQLiteJournal.open(path, read_only=True) as journal:
        assert journal.release()["score"] == 0.75
        with pytest.raises(JournalError, match="read-only"):
            journal.charge_interrupted()
    assert path.read_bytes() == before

"""``dphypo release FILE`` prints the publishable part of a journaled search, and nothing curator-only."""

from __future__ import annotations

import json

from dphypo.cli import run
from dphypo.privacy import PrivacyPlan, SearchSpec, gaussian_rdp, geometric
from dphypo.search.storage import SQLiteJournal as Journal
from dphypo.search.tuner import Tuner
from dphypo.strategies import GPUCB
from tests.search._search_child import SPACE, DyingObjective


def _journaled_search(path) -> object:
    privacy = PrivacyPlan(SearchSpec(geometric(0.1), 2.0, 0.75), gaussian_rdp(4.0), 1e-5)
    return Tuner(DyingObjective(str(path) + ".marker", -1), SPACE, privacy, strategy=GPUCB(), seed=5,
                 journal=path).run()


def test_release_prints_only_the_release(tmp_path, capsys) -> None:
    path = tmp_path / "search.db"
    result = _journaled_search(path)
    assert run(["release", str(path), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["params"] == result.release.params
    assert payload["epsilon"] == result.release.epsilon and payload["delta"] == 1e-5
    assert payload["score"] == result.release.score
    text = json.dumps(payload)
    assert "run_count" not in text and "trials" not in text and "seconds" not in text  # curator-only stays out
    assert run(["release", str(path)]) == 0
    table = capsys.readouterr().out
    assert "total ε" in table and "curator-only" in table
    assert f"{result.release.epsilon:.4g}" in table


def test_release_refuses_an_unfinished_or_foreign_file(tmp_path, capsys) -> None:
    unfinished = tmp_path / "unfinished.db"
    with Journal.open(unfinished) as journal:
        journal.seal({"seed": 1}, 4)
    assert run(["release", str(unfinished)]) == 2
    assert "has not finished" in capsys.readouterr().err
    foreign = tmp_path / "notes.txt"
    foreign.write_text("hello")
    assert run(["release", str(foreign)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "not a dphypo journal" in err and foreign.read_text() == "hello"
    assert run(["release", str(tmp_path / "missing.db")]) == 2
    assert not (tmp_path / "missing.db").exists()  # never created by a read-only command


TINY_TUNE = (
    "tune --epochs 1 --lr-grid 0.3,1,3 --clip-grid 0.5,1,2 --runs geometric --mean 4 --seed 3 --epsilon 8 "
    "--strategy gp --json"
).split()


def test_tune_with_a_journal_resumes_and_releases_the_same(tmp_path, capsys) -> None:
    path = tmp_path / "search.db"
    assert run([*TINY_TUNE, "--out", str(tmp_path / "a"), "--journal", str(path)]) == 0
    first = json.loads(capsys.readouterr().out)
    with Journal.open(path) as journal:
        attempts = len(journal.attempts())
        sealed = journal.sealed()
    assert attempts == sealed.run_count  # one attempt per run, nothing charged
    assert "DPSGDObjective" in sealed.config["objective"] and "digits" in sealed.config["objective"]

    # Running the same command again resumes a finished search: nothing is trained, the release is the same.
    assert run([*TINY_TUNE, "--out", str(tmp_path / "b"), "--journal", str(path)]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["release"]["params"] == first["release"]["params"]
    assert again["privacy"]["epsilon"] == first["privacy"]["epsilon"]
    with Journal.open(path) as journal:
        assert len(journal.attempts()) == attempts

    assert run(["release", str(path), "--json"]) == 0
    published = json.loads(capsys.readouterr().out)
    assert published["params"] == first["release"]["params"]
    assert published["test_accuracy"] == again["release"]["test_accuracy"]
    assert published["model_path"].endswith("released_model.pt")


def test_tune_refuses_to_resume_with_other_options(tmp_path, capsys) -> None:
    path = tmp_path / "search.db"
    assert run([*TINY_TUNE, "--out", str(tmp_path), "--journal", str(path)]) == 0
    capsys.readouterr()
    before = path.read_bytes()
    assert run([*TINY_TUNE, "--out", str(tmp_path), "--journal", str(path), "--C", "1.5"]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].startswith("error:") and "privacy.C" in err and "new journal" in err
    assert path.read_bytes() == before


def test_a_changed_resume_is_refused_before_sigma_is_calibrated(tmp_path, capsys, monkeypatch) -> None:
    path = tmp_path / "search.db"
    assert run([*TINY_TUNE, "--out", str(tmp_path), "--journal", str(path)]) == 0
    capsys.readouterr()

    def no_calibration(*args, **kwargs):
        raise AssertionError("sigma was calibrated before the seal was checked")

    monkeypatch.setattr("dphypo.api.search.calibrate_sigma", no_calibration)
    assert run([*TINY_TUNE, "--out", str(tmp_path), "--journal", str(path), "--runs-per-update", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "runs_per_update" in err and "batch_size" not in err

"""``dphypo release FILE`` prints the publishable part of a journaled search, and nothing curator-only."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import typer

from dphypo.cli import run
from dphypo.privacy import PrivacyAccounting, RepeatAndSelect, gaussian_rdp, geometric
from dphypo.search.storage import SQLiteJournal as Journal
from dphypo.search.tuner import Tuner
from dphypo.strategies import GPUCB
from tests.search._search_child import SPACE, DyingObjective

ROOT = Path(__file__).resolve().parents[2]


def _journaled_search(path) -> object:
    privacy = PrivacyAccounting(RepeatAndSelect(geometric(0.1), 2.0, 0.75), gaussian_rdp(4.0), 1e-5)
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
    objective = sealed.config["objective"]
    assert objective["type"].endswith("DPSGDObjective") and objective["dataset"] == "digits"

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

    monkeypatch.setattr("dphypo.api.search.cached_calibration", no_calibration)
    assert run([*TINY_TUNE, "--out", str(tmp_path), "--journal", str(path), "--runs-per-update", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "runs_per_update" in err and "batch_size" not in err


# -- issue #20: the default (uniform) search resumes, from any directory, and a damaged journal is refused -------
UNIFORM_TUNE = "tune --epochs 1 --lr-grid 0.3,1,3 --clip-grid 0.5,1,2 --runs geometric --mean 4 --json".split()


def test_the_default_uniform_search_resumes_from_its_journal(tmp_path, capsys) -> None:
    # The regression: the sealed PLD profile was a repr with a memory address, so the same command was refused.
    path = tmp_path / "search.db"
    assert run([*UNIFORM_TUNE, "--out", str(tmp_path / "a"), "--journal", str(path)]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["strategy"] == "uniform" and first["privacy"]["method"].startswith("train:profile")
    assert run([*UNIFORM_TUNE, "--out", str(tmp_path / "a"), "--journal", str(path)]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["release"] == first["release"] and again["privacy"]["epsilon"] == first["privacy"]["epsilon"]


def test_release_works_from_another_directory_and_refuses_an_edited_journal(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert run([*UNIFORM_TUNE, "--out", "relative/out", "--journal", "search.db"]) == 0
    capsys.readouterr()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert run(["release", str(tmp_path / "search.db"), "--json"]) == 0  # the model path was stored resolved
    published = json.loads(capsys.readouterr().out)
    assert Path(published["model_path"]).is_absolute() and Path(published["model_path"]).is_file()
    db = sqlite3.connect(tmp_path / "search.db")
    db.execute("UPDATE release SET payload = replace(payload, '\"epsilon\":7.9', '\"epsilon\":1.9')")
    db.commit()
    db.close()
    assert run(["release", str(tmp_path / "search.db")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "release record does not match its hash" in err[0]


def _tune_child(tmp_path: Path, *args: str, base: tuple[str, ...] = (*UNIFORM_TUNE, "--epochs", "2")
                ) -> subprocess.Popen:
    command = [sys.executable, "-m", "dphypo", *base, *args]
    return subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)})


def _released_in_process(tmp_path: Path, capsys, monkeypatch, argv: list[str]) -> dict:
    """``dphypo *argv`` run in this process, in ``tmp_path`` (as a child would): its JSON output."""
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert run(argv) == 0
    return json.loads(capsys.readouterr().out)


# One case per resume path: the adaptive search (GP refit on the journaled history) with --seed, compared with the
# uninterrupted search, and the uniform search on fresh entropy (stored in the journal, read back on resume). Every
# strategy × run-count law is compared with its uninterrupted search at the Tuner level (tests/search/test_faults.py);
# here `dphypo tune` itself is killed from outside. Only the killed search is a subprocess (it is the subject); the
# uninterrupted reference and the resume run in this process (same command, same folder).
@pytest.mark.parametrize(("strategy", "seeded"), [("gp", True), ("uniform", False)],
                         ids=["gp-seed", "uniform-fresh-entropy"])
def test_a_killed_cli_search_resumes_and_releases_the_uninterrupted_result(tmp_path, capsys, monkeypatch, strategy,
                                                                           seeded) -> None:
    seed = ["--seed", "7"] if seeded else []
    # One Opacus run at a time (a vectorised pass in flight loses the whole pass: see the test below).
    common = ["--strategy", strategy, "--max-lost", "1", "--engine", "opacus", *seed]
    base = [*UNIFORM_TUNE, "--epochs", "2"]
    if seeded:
        expected = _released_in_process(tmp_path, capsys, monkeypatch, [*base, *common, "--out", "ref"])
    journal = ["--journal", "j.db", "--out", "out"]
    child = _tune_child(tmp_path, *common, *journal)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and child.poll() is None and not (tmp_path / "j.db").exists():
        time.sleep(0.05)
    time.sleep(1.5)  # somewhere inside the search: before, between or during runs (each case must resume)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=60)
    released = _released_in_process(tmp_path, capsys, monkeypatch, [*base, *common, *journal])
    if seeded:
        assert released["release"]["params"] == expected["release"]["params"]
        assert released["release"]["score"] == expected["release"]["score"]
        assert released["privacy"]["epsilon"] == expected["privacy"]["epsilon"]
    with Journal.open(tmp_path / "j.db", read_only=True) as opened:
        assert opened.release()["params"] == released["release"]["params"]
        assert opened.charged_attempts() <= 1


# -- issue #22: a vectorised search (kill -9 with a pass in flight: tests/train/test_passes.py) ----------------------
def test_max_lost_below_the_pass_size_is_refused_before_any_run_trains(tmp_path, capsys) -> None:
    assert run([*UNIFORM_TUNE, "--out", str(tmp_path / "o"), "--max-lost", "1", "--pass-size", "8"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--max-lost must be ≥ the pass size 8" in err and "set --max-lost ≥ 8" in err and "--pass-size" in err
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())


def test_with_max_lost_the_default_pass_size_shrinks_to_what_max_lost_covers(tmp_path, capsys) -> None:
    # README's `dphypo tune --journal ... --max-lost 1`: passes of 1, so one kill -9 mid-pass stays covered.
    path = tmp_path / "j.db"
    assert run([*UNIFORM_TUNE, "--out", str(tmp_path / "o"), "--max-lost", "1", "--journal", str(path)]) == 0
    capsys.readouterr()
    with Journal.open(path, read_only=True) as opened:
        assert opened.sealed().config["runs_per_update"] == 1


# -- issue #30 item 5: the two-stage default is journaled; --out is written in one step ----------------------------
TWO_STAGE_TUNE = ("tune --design two-stage --probes 2 --epochs 2 --probe-epochs 1 --lr-grid 0.3,1,3 "
                  "--clip-grid 0.5,1,2 --seed 3 --json").split()


def test_the_two_stage_search_is_journaled_and_its_rerun_replays_into_the_same_out(tmp_path, capsys,
                                                                                      monkeypatch) -> None:
    journal, out = tmp_path / "j.db", tmp_path / "out"
    assert run([*TWO_STAGE_TUNE, "--journal", str(journal), "--out", str(out)]) == 0
    first = json.loads(capsys.readouterr().out)
    with Journal.open(journal, read_only=True) as opened:
        sealed, attempts = opened.sealed(), len(opened.attempts())
    assert sealed.config["search"] == "two-stage" and sealed.config["run_counts"] == {"probes": 2, "finals": 1}
    assert attempts == 3

    from dphypo.api import two_stage

    accounted = two_stage.charged_mechanisms

    def no_calibration(*args, **kwargs):
        assert kwargs["epsilon"] is None, "a resumed search reads its sigma from the journal, never recalibrates"
        return accounted(*args, **kwargs)

    monkeypatch.setattr(two_stage, "charged_mechanisms", no_calibration)
    # The same command again: the same search (its own release in --out), replayed, nothing trained or calibrated.
    assert run([*TWO_STAGE_TUNE, "--journal", str(journal), "--out", str(out)]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["release"] == first["release"] and again["privacy"]["epsilon"] == first["privacy"]["epsilon"]
    assert again["two_stage"]["released_probes"] == first["two_stage"]["released_probes"]
    with Journal.open(journal, read_only=True) as opened:
        assert len(opened.attempts()) == attempts
    assert json.loads((out / "release.json").read_text())["release"] == first["release"]
    assert run(["release", str(journal), "--json"]) == 0
    published = json.loads(capsys.readouterr().out)
    assert published["params"] == first["release"]["params"] and published["model_sha256"]
    assert len(published["two_stage"]["released_probes"]) == 2 and "run_counts" not in json.dumps(published)
    assert run(["release", str(journal)]) == 0
    table = capsys.readouterr().out
    assert "2 probe(s) with their noisy scores" in table and "stage 2: one final run" in table


def _killed_at(monkeypatch, target: str) -> None:
    """``target`` exits as a kill -9 would stop the process there (status 137, nothing after it runs)."""

    def killed(*args, **kwargs):
        raise typer.Exit(137)

    monkeypatch.setattr(target, killed)


def test_out_is_written_in_one_step_and_only_the_same_search_may_write_it_again(tmp_path, capsys,
                                                                                monkeypatch) -> None:
    journal, out = tmp_path / "j.db", tmp_path / "out"
    command = [*TINY_TUNE, "--journal", str(journal), "--out", str(out)]
    with monkeypatch.context() as patch:  # killed after the model was saved, before release.json was written
        _killed_at(patch, "dphypo.cli.outdir.publish")
        assert run(command) == 137
    assert not out.exists()  # never a model without its epsilon in --out
    with monkeypatch.context() as patch:  # killed after publishing, before the journal recorded the model file
        _killed_at(patch, "dphypo.cli.tune._journal_release_extras")
        assert run(command) == 137
    assert sorted(p.name for p in out.iterdir()) == ["release.json", "released_model.json", "released_model.pt"]
    capsys.readouterr()
    assert run(command) == 0  # the same search: recognised by its journal's release, not "another search"
    first = json.loads(capsys.readouterr().out)
    assert json.loads((out / "release.json").read_text())["release"] == first["release"]
    assert not list(tmp_path.glob(".out.*"))  # no temporary folder left behind

    other = [*TINY_TUNE[:-1], "--seed", "4", "--json", "--journal", str(tmp_path / "other.db"), "--out", str(out)]
    assert run(other) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "another search" in err and "--out" in err and not (tmp_path / "other.db").exists()
    assert run([*TINY_TUNE, "--out", str(out)]) == 2
    assert "without --journal this run cannot tell" in capsys.readouterr().err
    assert json.loads((out / "release.json").read_text())["release"] == first["release"]  # untouched


def test_a_journal_and_max_lost_keep_the_two_stage_default_and_max_lost_is_charged(tmp_path, capsys) -> None:
    paths = ["--journal", str(tmp_path / "j.db"), "--out", str(tmp_path / "o"), "--dry-run", "--json"]
    assert run(["tune", "--epochs", "2", *paths]) == 0
    assert json.loads(capsys.readouterr().out)["design"]["kind"] == "two-stage"  # --journal selects no design
    assert run(["tune", "--epochs", "2", "--probes", "4", "--max-lost", "1", *paths]) == 0
    charged = json.loads(capsys.readouterr().out)
    assert charged["design"]["kind"] == "two-stage" and charged["epsilon"] <= 8.0
    assert "1 charged attempt" in charged["accounting"]["stage1_theorem"]
    assert "1 charged attempt" in charged["accounting"]["stage2_theorem"]


def test_a_killed_two_stage_cli_search_resumes_and_releases_the_uninterrupted_result(tmp_path, capsys,
                                                                                     monkeypatch) -> None:
    # `dphypo tune`'s default kind of search (two-stage), killed from outside at some moment of the search
    base = tuple("tune --design two-stage --probes 3 --epochs 2 --probe-epochs 1 --lr-grid 0.3,1,3 --clip-grid "
                 "0.5,1,2 --max-lost 1 --engine opacus --seed 7 --json".split())
    expected = _released_in_process(tmp_path, capsys, monkeypatch, [*base, "--out", "ref"])  # uninterrupted
    journal = ["--journal", "j.db", "--out", "out"]
    child = _tune_child(tmp_path, *journal, base=base)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and child.poll() is None and not (tmp_path / "j.db").exists():
        time.sleep(0.05)
    time.sleep(1.5)  # somewhere in the search: before it, in a stage or between the stages (each must resume)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=60)
    # the resume, in this process (as the child ran it: same folder, same command)
    released = _released_in_process(tmp_path, capsys, monkeypatch, [*base[:-1], *journal, "--json"])
    assert released["release"]["params"] == expected["release"]["params"]
    assert released["release"]["score"] == expected["release"]["score"]
    assert released["privacy"]["epsilon"] == expected["privacy"]["epsilon"]
    assert released["two_stage"]["released_probes"] == expected["two_stage"]["released_probes"]
    assert json.loads((tmp_path / "out" / "release.json").read_text())["release"] == released["release"]

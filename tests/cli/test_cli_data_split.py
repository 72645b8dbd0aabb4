"""``dphypo tune --data-split per-record`` (issue #32, docs/proofs/split.md): the split is a secret draw per record
sealed with the search (a resume reproduces it), and an exact test accuracy on test records drawn from the protected
pool is curator-only, never in the release (assumption (T), §6.2)."""

from __future__ import annotations

import json

import pytest

from dphypo.cli import run
from dphypo.cli.tune import _journaled_split_seed
from dphypo.search.storage import SQLiteJournal as Journal

TUNE = ("tune --epochs 1 --lr-grid 0.3,1 --clip-grid 0.5,1 --runs geometric --mean 3 --epsilon 8 --json "
        "--data-split per-record").split()


def test_a_per_record_search_keeps_its_test_accuracy_curator_only_and_resumes_on_the_same_split(tmp_path,
                                                                                                   capsys) -> None:
    path = tmp_path / "search.db"
    assert run([*TUNE, "--out", str(tmp_path / "a"), "--journal", str(path)]) == 0
    captured = capsys.readouterr()
    first = json.loads(captured.out)
    assert "exact test accuracy" not in captured.err + captured.out  # release mode: nothing curator-only printed
    written = json.loads((tmp_path / "a" / "release.json").read_text())
    assert written.get("release", written).get("test_accuracy") is None and first["release"]["test_accuracy"] is None
    assert "curator" not in captured.out
    with Journal.open(path) as journal:
        sealed, attempts = journal.sealed(), len(journal.attempts())
        published = journal.release()
    split = sealed.config["objective"]["split"]
    assert split["kind"] == "draw" and split["val_fraction"] == 0.2 and split["test_fraction"] == 0.2
    assert _journaled_split_seed(str(path)) == split["seed"]  # the secret seed: journal (curator-only) only
    assert str(split["seed"]) not in json.dumps(written) and str(split["seed"]) not in captured.out
    assert published is None or published.get("test_accuracy") is None

    # no --seed: a resume must read the split's seed back, else its objective differs and the journal refuses it
    assert run([*TUNE, "--out", str(tmp_path / "a"), "--journal", str(path), "--show-trials"]) == 0
    captured = capsys.readouterr()
    again = json.loads(captured.out)
    accuracy = again["NOT_PRIVATE_curator_only"]["test_accuracy"]  # --show-trials: the curator's, marked so
    assert 0.0 <= accuracy <= 1.0 and f"{accuracy:.4f}" in captured.err and "NOT PRIVATE" in captured.err
    assert "NOT_PRIVATE" not in (tmp_path / "a" / "release.json").read_text()
    assert again["release"]["params"] == first["release"]["params"]
    with Journal.open(path) as journal:
        assert len(journal.attempts()) == attempts  # nothing retrained


def test_an_unknown_data_split_is_refused_naming_the_option(tmp_path, capsys) -> None:
    assert run([*TUNE[:-1], "shuffle", "--out", str(tmp_path / "o")]) == 2
    assert "--data-split must be one of permutation, per-record, got 'shuffle'" in capsys.readouterr().err


def test_per_record_with_subsampled_tuning_is_refused_in_one_line(tmp_path, capsys) -> None:
    assert run([*TUNE, "--tune-fraction", "0.5", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "--data-split per-record does not combine with --tune-fraction" in err and len(err.strip().splitlines()) == 1


def _dry_run(capsys, argv: str) -> dict:
    assert run([*argv.split(), "--dry-run", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_default_design_is_accounted_by_theorem_s_and_trains_with_less_noise_than_the_sum(capsys) -> None:
    # issue #32's "done when": the default design at ε = 8 spends ≈ 7.35 of the sum's 7.995 at the same σ, so at
    # ε = 8 it calibrates to a smaller σ (both stages); the dry run names the bound.
    default = _dry_run(capsys, "tune")
    summed = _dry_run(capsys, "tune --data-split permutation")
    assert default["bound"].startswith("Theorem S (max of train/validation sides)") and "bound" not in summed
    assert default["accounting"]["rule"]["train"] == 0.6  # described to 12 digits, not 0.6000000000000001
    assert default["epsilon"] <= 8.0 and summed["epsilon"] <= 8.0
    sigma = {row["stage"]: row["sigma"] for row in default["candidates"]}
    sigma_sum = {row["stage"]: row["sigma"] for row in summed["candidates"]}
    assert sigma["final"] < 0.97 * sigma_sum["final"] and sigma["probes"] < sigma_sum["probes"]
    assert default["accounting"]["val"]["epsilon"] < default["accounting"]["train"]["epsilon"] == default["epsilon"]


def test_subsampled_tuning_keeps_the_permutation_split_unless_per_record_is_asked_for(tmp_path, capsys) -> None:
    payload = _dry_run(capsys, "tune --tune-fraction 0.5 --mean 5 --epsilon 8")
    assert "bound" not in payload and not payload["method"].startswith(("train:", "val:"))
    assert run(["tune", "--tune-fraction", "0.5", "--data-split", "per-record", "--out", str(tmp_path / "o")]) == 2
    assert "--data-split per-record does not combine with --tune-fraction" in capsys.readouterr().err


def test_simulate_calibrates_the_default_design_as_tune_does(capsys) -> None:
    # the simulated σ is tune's σ under tune's default split (issue #31: every simulated number is what tune runs)
    import glob

    tune = {row["stage"]: row["sigma"] for row in _dry_run(capsys, "tune --probes 20")["candidates"]}
    finals = " ".join(f"--landscape {f}" for f in sorted(glob.glob("landscapes/digits_mlp_sigma*.npz")))
    probes = " ".join(f"--probe-landscape {f}"
                      for f in sorted(glob.glob("landscapes/multifidelity/digits_mlp_epochs2_sigma*.npz")))
    argv = f"simulate --design two-stage --epsilon 8 --probes 20 {finals} {probes} --repeats 2 --json"
    for split, expected in (("", tune), (" --data-split per-record", tune)):
        assert run((argv + split).split()) == 0
        simulated = json.loads(capsys.readouterr().out)
        assert simulated["bound"].startswith("Theorem S")
        assert simulated["probe_sigma"] == pytest.approx(expected["probes"], rel=1e-9)
        assert simulated["final_sigma"] == pytest.approx(expected["final"], rel=1e-9)
    assert run((argv + " --data-split permutation").split()) == 0
    summed = json.loads(capsys.readouterr().out)
    assert "bound" not in summed and summed["final_sigma"] > 1.03 * tune["final"]

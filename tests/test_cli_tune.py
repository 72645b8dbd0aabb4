"""`dphypo tune` end to end on the embedded digits data (tiny settings), and release-mode privacy of the output."""

from __future__ import annotations

import json
import re

import pytest

from dphypo.cli import run

TINY = (
    "tune --epochs 2 --lr-grid 0.3,1,3 --clip-grid 0.5,1,2 --runs geometric --mean 4 --seed 3 --epsilon 8 "
    "--strategy gp"
).split()


def test_tune_releases_a_model_with_the_accountants_epsilon(tmp_path, capsys) -> None:
    assert run([*TINY, "--out", str(tmp_path), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    release, privacy = payload["release"], payload["privacy"]
    assert privacy["epsilon"] <= 8.0 and privacy["epsilon"] == pytest.approx(8.0, rel=1e-3)
    assert set(release["params"]) == {"lr", "clip"}
    assert 0.0 <= release["test_accuracy"] <= 1.0
    assert (tmp_path / "released_model.pt").exists() and (tmp_path / "release.json").exists()
    assert "NOT_PRIVATE_curator_only" not in payload and "run_count" not in json.dumps(payload)
    saved = json.loads((tmp_path / "release.json").read_text())
    assert saved["privacy"]["epsilon"] == privacy["epsilon"]


def test_release_mode_never_shows_other_runs_or_T(tmp_path, capsys) -> None:
    curator = tmp_path / "curator"
    assert run([*TINY, "--out", str(curator), "--show-trials", "--json"]) == 0
    full = json.loads(capsys.readouterr().out)
    trials = full["NOT_PRIVATE_curator_only"]["trials"]
    T = full["NOT_PRIVATE_curator_only"]["run_count"]
    released = full["release"]["score"]
    assert T == len(trials) >= 1
    others = {f"{t['score']:.4f}" for t in trials if t["score"] is not None} - {f"{released:.4f}"}

    assert run([*TINY, "--out", str(tmp_path / "public")]) == 0  # same seed, release mode, table output
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert f"{released:.4f}" in text
    assert not any(s in text for s in others), "a non-released run's score leaked into release mode"
    assert not re.search(r"T = \d", text) and "NOT PRIVATE" not in text


def test_show_trials_is_labelled_not_private(tmp_path, capsys) -> None:
    assert run([*TINY, "--out", str(tmp_path), "--show-trials"]) == 0
    out = capsys.readouterr().out
    assert "NOT PRIVATE" in out and re.search(r"T = \d+ runs", out)


def test_tune_rejects_bad_options(tmp_path, capsys) -> None:
    assert run([*TINY, "--out", str(tmp_path), "--score-noise", "-1"]) == 2
    assert "score-noise" in capsys.readouterr().err
    assert run(["tune", "--dataset", "imagenet", "--out", str(tmp_path)]) == 2
    assert "imagenet" in capsys.readouterr().err

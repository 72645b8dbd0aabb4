"""``dphypo account`` and ``dphypo calibrate`` with ``--data-split``: the release names the bound it used."""

from __future__ import annotations

import json

import pytest

from dphypo.cli import run

RUN = "--sample-rate 0.0588235294 --steps 60 --runs geometric --mean 10 --score-noise 3"
ACCOUNT = f"account --sigma 1.1 {RUN}"
CALIBRATE = f"calibrate --epsilon 4 {RUN}"
THEOREM_S = "Theorem S (max of train/validation sides)"
SUM = "sum of DP-SGD and score parts"


def _json(capsys: pytest.CaptureFixture[str], argv: str) -> dict:
    assert run([*argv.split(), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_account_names_the_bound_in_its_table_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert run([*ACCOUNT.split(), "--data-split", "per-record"]) == 0
    table = capsys.readouterr().out
    assert THEOREM_S in table and "ε by side" in table and "train:" in table
    split = _json(capsys, f"{ACCOUNT} --data-split per-record")
    summed = _json(capsys, ACCOUNT)
    assert split["bound"] == THEOREM_S and summed["bound"] == SUM
    assert split["split"]["rule"] == "per-record" and split["split"]["worse_side"] == "training"
    assert split["epsilon"] < summed["epsilon"]
    assert _json(capsys, f"{ACCOUNT} --data-split permutation") == summed
    assert run([*ACCOUNT.split()]) == 0 and SUM in capsys.readouterr().out


def test_calibrate_names_the_bound_and_needs_less_noise(capsys: pytest.CaptureFixture[str]) -> None:
    split = _json(capsys, f"{CALIBRATE} --data-split per-record")
    summed = _json(capsys, CALIBRATE)
    assert split["bound"] == THEOREM_S and summed["bound"] == SUM
    assert split["sigma"] < summed["sigma"] and split["epsilon"] <= 4.0 and summed["epsilon"] <= 4.0
    assert run([*CALIBRATE.split(), "--data-split", "per-record"]) == 0
    assert THEOREM_S in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ("account --sigma 1.1 --sample-rate 0.05 --steps 60 --runs geometric --mean 10 --data-split per-record",
         "--data-split per-record needs a private score (--score-noise"),
        (f"{ACCOUNT} --data-split hash", "--data-split must be one of permutation, per-record, got 'hash'"),
        ("account --pure-epsilon 1 --runs geometric --mean 10 --data-split per-record",
         "--data-split per-record needs DP-SGD runs"),
        ("calibrate --epsilon 4 --sample-rate 0.05 --steps 60 --runs geometric --mean 10 --data-split per-record",
         "--data-split per-record needs a private score"),
    ],
)
def test_a_split_no_bound_covers_is_refused_in_one_line(capsys: pytest.CaptureFixture[str], argv: str,
                                                        message: str) -> None:
    assert run(argv.split()) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_a_single_stage_dry_run_accounts_as_tune_does_under_the_split(capsys: pytest.CaptureFixture[str]) -> None:
    argv = "tune --dry-run --epsilon 2 --design single --mean 5"
    split = _json(capsys, f"{argv} --data-split per-record")
    summed = _json(capsys, f"{argv} --data-split permutation")
    assert split == _json(capsys, argv)  # per-record is tune's default
    assert split["bound"] == THEOREM_S and split["method"].startswith("train:") and "bound" not in summed
    assert split["epsilon"] <= 2.0 and split["candidates"][0]["sigma"] < summed["candidates"][0]["sigma"]

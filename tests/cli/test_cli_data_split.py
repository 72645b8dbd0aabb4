"""``dphypo tune --data-split per-record`` (issue #32, docs/proofs/split.md): the split is a secret draw per record
sealed with the search (a resume reproduces it), and an exact test accuracy on test records drawn from the protected
pool is curator-only, never in the release (assumption (T), §6.2)."""

from __future__ import annotations

import json

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
    assert "curator-only" in captured.err and "exact test accuracy" in captured.err
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
    assert run([*TUNE, "--out", str(tmp_path / "a"), "--journal", str(path)]) == 0
    again = json.loads(capsys.readouterr().out)
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

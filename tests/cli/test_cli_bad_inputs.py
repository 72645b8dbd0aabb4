"""Malformed invocations of every command: exit status 2, exactly one ``error:`` line, no traceback (issue #12).

Each case also names the option the user typed (or the value they gave), never a library parameter such as
``sample_rate`` or ``n``, and ``landscape build`` leaves nothing behind (no checkpoint, no output).
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import numpy as np
import pytest

from dphypo.cli import run

SIM = "simulate --landscape synthetic:smooth --strategy uniform --fixed-T 5"
GP = "simulate --landscape synthetic:smooth --strategy gp --fixed-T 5"
EPS = "plot epsilon --out x.png --sigma 1 --sample-rate 0.01 --steps 10"
DPSGD = "--sigma 1 --sample-rate 0.01 --steps 10"
CAL = "calibrate --epsilon 8 --sample-rate 0.01 --steps 10"

# (arguments, a text the error line must contain)
CASES = [
    # simulate
    ("simulate --landscape synthetic:nope --strategy uniform --fixed-T 5", "--landscape"),
    ("simulate --landscape missing.npz --strategy uniform --fixed-T 5", "missing.npz"),
    ("simulate --landscape empty.npz --strategy uniform --fixed-T 5", "empty"),
    ("simulate --landscape junk.npz --strategy uniform --fixed-T 5", "junk.npz"),
    ("simulate --landscape synthetic:smooth --strategy foo --fixed-T 5", "--strategy"),
    ("simulate --landscape synthetic:smooth --strategy uniform", "--fixed-T"),
    (f"{SIM} --fixed-T 0", "--fixed-T"),
    ("simulate --landscape synthetic:smooth --strategy uniform --fixed-T abc", "--fixed-T"),
    (f"{SIM} --repeats 0", "--repeats"),
    (f"{GP} --C 0.5", "--C"),
    (f"{GP} --c 2", "--c"),
    (f"{GP} --tau -1", "--tau"),
    (f"{GP} --beta nan", "--beta"),
    (f"{GP} --scale weird", "--scale"),
    ("simulate --landscape synthetic:smooth --strategy uniform --runs geometric --gamma 2", "--gamma"),
    ("simulate --landscape synthetic:smooth --strategy gp --runs geometric --mean 5 --bounds a:b", "--bounds"),
    ("simulate --landscape synthetic:smooth --strategy gp --runs geometric --mean 5 --gp-repeats x", "--gp-repeats"),
    (f"{SIM} --sweep table9", "--sweep"),
    (f"{SIM} --engine warp", "--engine"),
    (f"{SIM} --batch 0", "--batch"),
    (f"{SIM} --workers 0", "--workers"),
    (f"{SIM} --executor foo", "--executor"),
    (f"{SIM} --delta 2", "--delta"),
    (f"{SIM} --seed -1", "--seed"),
    (f"{SIM} --gp-landscape synthetic:ridge", "--gp-landscape"),
    # plot
    ("plot foo --out x.png", "foo"),
    ("plot landscape --out x.png", "--landscape"),
    ("plot landscape --out x.txt --landscape synthetic:smooth", "--out"),
    ("plot landscape --out x.png --landscape empty.npz", "empty"),
    ("plot accuracy --out x.png --from bad.json", "bad.json"),
    ("plot accuracy --out x.png --landscape synthetic:smooth --T 0 --repeats 2", "--T"),
    ("plot accuracy --out x.png --landscape synthetic:smooth --T 2 --repeats 0", "--repeats"),
    ("plot density --out x.png --landscape synthetic:smooth --step 99", "--step"),
    ("plot density --out x.png --landscape synthetic:smooth --fixed-T 0", "--fixed-T"),
    ("plot epsilon --out x.png", "--sigma"),
    ("plot epsilon --out x.png --sigma 1 --sample-rate 2 --steps 10", "--sample-rate"),
    (f"{EPS} --bounds x", "--bounds"),
    (f"{EPS} --runs foo", "--runs"),
    (f"{EPS} --delta 0", "--delta"),
    # account
    ("account --runs geometric --mean 10", "--sigma"),
    (f"account --runs geometric --mean 10 {DPSGD} --C 2 --c 3", "--c"),
    (f"account --runs geometric {DPSGD}", "--gamma or --mean"),
    (f"account --runs binomial --mean 10 {DPSGD}", "--max-runs"),
    (f"account --runs binomial --max-runs 0 --mean 3 {DPSGD}", "--max-runs"),
    (f"account --runs poisson --mean 10 {DPSGD} --C 2", "Poisson"),
    ("account --runs geometric --mean 10 --pure-epsilon -1", "--pure-epsilon"),
    (f"account --runs geometric --mean 10 {DPSGD} --delta nan", "--delta"),
    ("account --runs geometric --mean 10 --sigma 1 --sample-rate 1.5 --steps 10", "--sample-rate"),
    # calibrate
    ("calibrate --epsilon -1 --sample-rate 0.01 --steps 10 --runs geometric --mean 10", "--epsilon"),
    ("calibrate --epsilon 8 --sample-rate 0 --steps 10 --runs geometric --mean 10", "--sample-rate"),
    ("calibrate --epsilon 8 --sample-rate 0.01 --steps 0 --runs geometric --mean 10", "--steps"),
    (f"{CAL} --runs binomial --max-runs 0 --mean 5", "--max-runs"),
    (CAL, "--runs"),
    # landscape build: every option is checked before anything is written or trained
    ("landscape build --out x.npz --sigma -1", "--sigma"),
    ("landscape build --out x.npz --sigma nan", "--sigma"),
    ("landscape build --out x.npz --epochs 0", "--epochs"),
    ("landscape build --out x.npz --batch-size 0", "--batch-size"),
    ("landscape build --out x.npz --seeds 0", "--seeds"),
    ("landscape build --out x.npz --workers 0", "--workers"),
    ("landscape build --out x.npz --dataset mnist", "--data-dir"),
    ("landscape build --out x.npz --dataset mnist --data-dir .", "--data-dir"),
    ("landscape build --out x.npz --model foo", "--model"),
    ("landscape build --out x.npz --lr-grid 1:1:0:log", "--lr-grid"),
    ("landscape build --out x.npz --lr-grid 0:1:5:log", "--lr-grid"),
    ("landscape build --out x.npz --lr-grid -1:1:5:log", "--lr-grid"),
    ("landscape build --out x.npz --lr-grid abc", "--lr-grid"),
    ("landscape build --out x.npz --lr-grid ''", "--lr-grid"),
    ("landscape build --out x.npz --clip-grid 1,1", "--clip-grid"),
    ("landscape build --out l.txt", ".npz"),
    ("landscape build --out adir", "--out"),
    ("landscape build --out adir.npz", "directory"),
    ("landscape build --out afile/x.npz", "afile"),
    ("landscape build --out x.npz --model cifar-cnn", "cifar-cnn"),
    ("landscape rebuild --out x.npz", "build"),
    # no command-specific case: a bad option value
    ("account --runs geometric --mean 10 --sigma abc --sample-rate 0.01 --steps 10", "--sigma"),
    # issue #20: every output path proven writable before any calibration or data
    ("tune --out afile/sub", "afile"),
    ("tune --out /proc/dphypo-x", "/proc/dphypo-x"),
    ("tune --out ''", "--out"),
    ("tune --journal nodir/j.db", "nodir"),
    ("tune --journal /proc/j.db", "/proc/j.db"),
    ("tune --journal adir", "--journal"),
    # issue #20: values that must be refused, and sizes that must not allocate or hang
    ("tune --clip-grid=-1,0", "--clip-grid"),
    ("tune --lr-grid 0,1", "--lr-grid"),
    ("tune --lr-grid 1e-3:1:100000000:log", "--lr-grid"),
    ("tune --tau 5", "--tau"),
    ("tune --beta 2", "--beta"),
    ("tune --mean 1e12", "--mean"),
    ("simulate --landscape synthetic:smooth --strategy uniform --fixed-T 100000000", "--fixed-T"),
    ("simulate --landscape synthetic:smooth --strategy uniform --fixed-T 1..100000000", "--fixed-T"),
    ("simulate --landscape synthetic:smooth --strategy uniform --runs geometric --mean 1e12", "--mean"),
    ("landscape build --seeds 1000000000 --out x.npz", "--seeds"),
    ("landscape build --lr-grid=-1,1 --out x.npz", "--lr-grid"),
    ("landscape build --out existing.npz", "--force"),
    # issue #20: messages name the user's option, not the library's parameter
    ("tune --dataset foo", "--dataset"),
    ("tune --tune-fraction 1.5", "--tune-fraction"),
    ("tune --runs foo", "--runs"),
    ("tune --batch-size 0", "--batch-size"),
    ("tune --variant 3 --tune-fraction 0.5", "--variant"),
    ("tune --strategy gp --C 0.5", "--C"),
    ("tune --executor foo", "--executor"),
    ("tune --model foo", "--model"),
    ("tune --runs negbin", "--theta"),
    ("simulate --landscape nanmean.npz --strategy uniform --fixed-T 5", "'mean' array"),
    ("simulate --landscape synthetic:smooth --landscape synthetic:ridge --strategy uniform --runs geometric "
     "--mean 5 --epsilon 8", "synthetic"),
    ("calibrate --epsilon 8 --sample-rate 0.01 --steps 10 --runs geometric --mean 10 --score-noise-accuracy 0.02",
     "--n-val"),
    ("account --runs geometric --mean 10 --sigma 1 --sample-rate 0.01 --steps 10 --score-noise 2 --n-val 100",
     "--score-noise"),
    ("release empty.db", "empty"),
    # a computed ε is printed as ε, never as the --epsilon the user gave; no score noise is blamed when none exists
    ("calibrate --epsilon 1 --sample-rate 0.5 --steps 1000000000000 --runs geometric --mean 10", "more noise"),
]


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty.npz").write_bytes(b"")
    (tmp_path / "junk.npz").write_text("hello")
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "adir").mkdir()
    (tmp_path / "adir.npz").mkdir()
    (tmp_path / "afile").write_text("")
    (tmp_path / "existing.npz").write_bytes(b"a landscape")
    (tmp_path / "empty.db").write_bytes(b"")
    _landscape_with_nan_mean(tmp_path / "nanmean.npz")
    return tmp_path


def _landscape_with_nan_mean(path: Path) -> None:
    from dphypo.simulation.landscapes import save_landscape
    from dphypo.simulation.synthetic import synthetic_landscape

    save_landscape(synthetic_landscape("smooth"), path)
    with np.load(path, allow_pickle=False) as data:
        arrays = dict(data)
    arrays["mean"] = arrays["mean"].copy()
    arrays["mean"].flat[0] = np.nan
    np.savez(path, **arrays)


@pytest.mark.parametrize(("argv", "needle"), CASES, ids=[argv for argv, _ in CASES])
def test_bad_input_is_one_error_line(workdir: Path, capsys: pytest.CaptureFixture[str], argv: str,
                                     needle: str) -> None:
    before = set(os.listdir(workdir))
    assert run(shlex.split(argv)) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ") and "Traceback" not in err
    assert needle in lines[0]
    library_names = (r"Choice\(\(|numpy|(?<![\w-])n must be|sample_rate|batch_size|lr_grid|tuning_rate|"
                     r"(?<![\w-])name must|max_lost|runs_per_update")
    assert not re.search(library_names, lines[0])
    assert "score noise" not in lines[0] or "score-noise" in argv
    assert len(re.findall(r"--epsilon=", lines[0])) <= 1 and "--sigma=" not in lines[0]  # only what the user typed
    assert set(os.listdir(workdir)) == before  # nothing written: no checkpoint, no figure, no table, no journal
    assert (workdir / "empty.db").read_bytes() == b"" and (workdir / "existing.npz").read_bytes() == b"a landscape"

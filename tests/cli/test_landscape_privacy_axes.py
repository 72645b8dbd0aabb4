"""``dphypo landscape build --batch-size-grid/--epochs-grid``: a tiny real 4-D build, and one-line refusals."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest

from dphypo.cli import run
from dphypo.simulation.landscapes import load_landscape

BUILD = "landscape build --out x.npz --lr-grid 0.5,2 --clip-grid 0.5,2 --seeds 1 --workers 1"


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (f"{BUILD} --batch-size-grid 0,64 --epochs-grid 1,2", "--batch-size-grid values must be ≥ 1, got 0"),
        (f"{BUILD} --batch-size-grid 64,128 --epochs-grid 0,2", "--epochs-grid values must be ≥ 1, got 0"),
        (f"{BUILD} --batch-size-grid 64,x", "--batch-size-grid must be a comma-separated list"),
        (f"{BUILD} --batch-size-grid 64,5000 --epochs 1", "--batch-size-grid values must be <= the training set"),
        # batch 128 x 20 epochs cannot be dominated by the batch 64 x 10 epochs reference at σ_ref = 50 (it would need
        # σ > 100, the cap; at σ_ref = 40 it needs 91.8): RDP envelopes, docs/proofs/heterogeneous.md §5
        (f"{BUILD} --batch-size-grid 64,128 --epochs-grid 10,20 --sigma 50", "cannot be dominated"),
    ],
)
def test_bad_privacy_grids_fail_in_one_line_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: str, needle: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    assert run(shlex.split(argv)) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], err
    assert not re.search(r"(?<![\w-])(batch_size_grid|epochs_grid)", lines[0])  # options, not library names
    assert os.listdir(tmp_path) == []  # no checkpoint, no output


def test_a_4d_landscape_build_from_the_command_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    argv = f"{BUILD} --epochs 1 --batch-size 64 --batch-size-grid 64,128 --epochs-grid 1,2 --sigma 1"
    assert run(shlex.split(argv)) == 0
    assert "wrote x.npz: best mean" in capsys.readouterr().out
    land = load_landscape(tmp_path / "x.npz")
    assert land.shape == (2, 2, 2, 2) and land.metadata["sigma"] == 1.0
    assert land.metadata["plan"][0]["sigma"] == 1.0  # the reference setting (batch 64, 1 epoch) runs at --sigma

"""The landscape builder: real tiny DP-SGD builds, resume after interruption, checkpoint safety."""

from __future__ import annotations

import json

import numpy as np
import pytest

import dphypo.train.build as build
from dphypo.landscapes import load_landscape
from dphypo.train.build import BuildSpec, build_landscape, parse_grid

SPEC = BuildSpec(dataset="digits", model="digits-mlp", lr_grid=(0.5, 2.0), clip_grid=(0.5, 1.0, 2.0), sigma=1.0,
                 epochs=1, batch_size=128, seeds=2, score_noise=0.02)


def test_build_writes_a_valid_landscape(tmp_path) -> None:
    out = tmp_path / "tiny.npz"
    land = build_landscape(SPEC, out, workers=1)
    again = load_landscape(out)
    assert land.shape == again.shape == (2, 3)
    np.testing.assert_array_equal(land.mean, again.mean)
    assert np.all((land.mean >= 0) & (land.mean <= 1))
    assert np.all(land.std >= 0.02 - 1e-12)  # score noise folded into std
    meta = again.metadata
    assert meta["dataset"] == "digits" and meta["sigma"] == 1.0 and meta["seeds"] == 2
    assert not (tmp_path / "tiny.npz.partial.jsonl").exists()


class Interrupted(Exception):
    """Stands in for the process dying mid-build (pytest treats a real KeyboardInterrupt as its own)."""


def test_interrupted_build_resumes_without_redoing_jobs(tmp_path, monkeypatch) -> None:
    out = tmp_path / "resume.npz"
    calls: list[tuple[int, int, int]] = []
    interrupt_at = [5]
    real_job = build._job

    def counting_job(spec, i, j, s):
        calls.append((i, j, s))
        if len(calls) == interrupt_at[0]:
            raise Interrupted  # the process is interrupted after 4 finished jobs
        return real_job(spec, i, j, s)

    monkeypatch.setattr(build, "_job", counting_job)
    with pytest.raises(Interrupted):
        build_landscape(SPEC, out, workers=1)
    checkpoint = tmp_path / "resume.npz.partial.jsonl"
    lines = checkpoint.read_text().splitlines()
    assert len(lines) == 1 + 4  # header + 4 finished jobs
    with checkpoint.open("a") as fh:
        fh.write('{"lr": 1, "clip"')  # a line cut by a crash: redone, not fatal
    finished = {tuple(json.loads(line)[k] for k in ("lr", "clip", "seed")) for line in lines[1:]}
    calls.clear()
    interrupt_at[0] = -1
    land = build_landscape(SPEC, out, workers=1)
    assert len(calls) == 12 - 4 and not finished & set(calls)
    assert land.shape == (2, 3)


def test_checkpoint_of_another_build_is_refused(tmp_path) -> None:
    out = tmp_path / "other.npz"
    (tmp_path / "other.npz.partial.jsonl").write_text(json.dumps({"digest": "0000"}) + "\n")
    with pytest.raises(ValueError, match="different build"):
        build_landscape(SPEC, out, workers=1)


def test_parse_grid_and_spec_validation() -> None:
    assert parse_grid("1e-4:10:16:log")[0] == pytest.approx(1e-4) and len(parse_grid("1e-4:10:16:log")) == 16
    assert parse_grid("0.3:6:20:linear")[-1] == pytest.approx(6.0)
    assert parse_grid("0.1,0.5,1") == (0.1, 0.5, 1.0)
    with pytest.raises(ValueError, match="grid must be"):
        parse_grid("1:2:3")
    with pytest.raises(ValueError, match="lr_grid"):
        BuildSpec(dataset="digits", model="digits-mlp", lr_grid=(1.0, 0.5), clip_grid=(1.0, 2.0), sigma=1.0,
                  epochs=1, batch_size=64, seeds=1)

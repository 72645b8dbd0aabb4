"""The landscape builder: real tiny DP-SGD builds, resume after interruption, checkpoint safety."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
import warnings

import numpy as np
import psutil
import pytest

import dphypo.simulation.builder as build
from dphypo.simulation.builder import BuildSpec, build_landscape
from dphypo.simulation.landscapes import load_landscape
from dphypo.space import parse_grid

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
        build_landscape(SPEC, out, workers=1, engine="opacus")
    checkpoint = tmp_path / "resume.npz.partial.jsonl"
    lines = checkpoint.read_text().splitlines()
    assert len(lines) == 1 + 4  # header + 4 finished jobs
    with checkpoint.open("a") as fh:
        fh.write('{"lr": 1, "clip"')  # a line cut by a crash: redone, not fatal
    finished = {tuple(json.loads(line)[k] for k in ("lr", "clip", "seed")) for line in lines[1:]}
    calls.clear()
    interrupt_at[0] = -1
    land = build_landscape(SPEC, out, workers=1, engine="opacus")
    assert len(calls) == 12 - 4 and not finished & set(calls)
    assert land.shape == (2, 3)


def test_checkpoint_of_another_build_is_refused(tmp_path) -> None:
    out = tmp_path / "other.npz"
    record = {"lr": 0, "clip": 0, "seed": 0, "score": 0.5, "failed": False, "seconds": 1.0}
    text = json.dumps({"digest": "0000"}) + "\n" + json.dumps(record) + "\n"
    (tmp_path / "other.npz.partial.jsonl").write_text(text)
    with pytest.raises(ValueError, match="different build"):
        build_landscape(SPEC, out, workers=1)


def test_checkpoint_without_finished_runs_does_not_block_a_build(tmp_path) -> None:
    # issue #12: a failed invocation used to leave a header-only checkpoint that blocked every later build.
    out = tmp_path / "stale.npz"
    (tmp_path / "stale.npz.partial.jsonl").write_text(json.dumps({"digest": "0000"}) + "\n")
    land = build_landscape(SPEC, out, workers=1)
    assert land.shape == (2, 3) and not (tmp_path / "stale.npz.partial.jsonl").exists()


def test_parse_grid_and_spec_validation() -> None:
    assert parse_grid("1e-4:10:16:log")[0] == pytest.approx(1e-4) and len(parse_grid("1e-4:10:16:log")) == 16
    assert parse_grid("0.3:6:20:linear")[-1] == pytest.approx(6.0)
    assert parse_grid("0.1,0.5,1") == (0.1, 0.5, 1.0)
    with pytest.raises(ValueError, match="grid must be"):
        parse_grid("1:2:3")
    assert parse_grid("0.3:6:20:linear")[6] == 2.1  # as the grid defines it, not 2.0999999999999996
    with pytest.raises(ValueError, match="lr_grid"):
        BuildSpec(dataset="digits", model="digits-mlp", lr_grid=(1.0, 0.5), clip_grid=(1.0, 2.0), sigma=1.0,
                  epochs=1, batch_size=64, seeds=1)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1:1:0:log", "num must be an integer >= 2"),
        ("1:2:1:linear", "num must be an integer >= 2"),
        ("0:1:5:log", "low > 0"),
        ("-1:1:5:log", "low > 0"),
        ("2:1:5:linear", "low must be < high"),
        ("1:nan:5:linear", "finite"),
        ("a:1:5:log", "numbers"),
        ("1:2:x:log", "num must be"),
        ("abc", "must be low:high:num"),
        ("", "empty"),
        ("  ", "empty"),
        ("0.1", "at least 2"),
        ("0.5,0.1", "strictly increasing"),
        ("0.1,inf", "finite"),
    ],
)
def test_parse_grid_errors_name_the_option_without_numpy(text: str, message: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy RuntimeWarning on the way
        with pytest.raises(ValueError, match=message) as info:
            parse_grid(text, "--lr-grid")
    assert str(info.value).startswith("--lr-grid") and "Choice" not in str(info.value)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"sigma": -1.0}, "sigma must be"),
        ({"sigma": float("nan")}, "sigma must be"),
        ({"epochs": 0}, "epochs must be"),
        ({"batch_size": 0}, "batch_size must be"),
        ({"seeds": 0}, "seeds must be"),
        ({"dataset": "imagenet"}, "dataset must be"),
    ],
)
def test_spec_rejects_bad_options(change: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(SPEC, **change)


@pytest.mark.parametrize(
    ("out", "change", "workers", "message"),
    [
        ("l.txt", {}, 1, "must be a file name ending in .npz"),
        ("adir", {}, 1, "ending in .npz"),
        ("adir.npz", {}, 1, "directory"),
        ("afile/x.npz", {}, 1, "is a file"),
        ("x.npz", {}, 0, "workers must be"),
        ("x.npz", {"dataset": "mnist", "model": "mnist-cnn"}, 1, "--data-dir"),
        ("x.npz", {"dataset": "cifar10", "model": "cifar-cnn"}, 1, "--data-dir"),
        ("x.npz", {"model": "cifar-cnn"}, 1, "takes inputs"),
        ("x.npz", {"model": "resnet"}, 1, "model must be"),
        ("x.npz", {"engine": "jax"}, 1, "engine must be one of"),
        ("x.npz", {"pass_size": 0}, 1, "pass_size must be"),
        ("x.npz", {"engine": "opacus", "pass_size": 4}, 1, "vectorized engine only"),
    ],
)
def test_build_checks_everything_before_writing(tmp_path, monkeypatch, out, change, workers, message) -> None:
    (tmp_path / "adir.npz").mkdir()
    (tmp_path / "afile").write_text("")
    before = sorted(p.name for p in tmp_path.iterdir())
    started = []
    monkeypatch.setattr(build, "_job", lambda *args: started.append(args))
    monkeypatch.setattr(build, "_pass_item", lambda *args: started.append(args))
    options = {k: change.pop(k) for k in ("engine", "pass_size") if k in change}
    with pytest.raises(ValueError, match=message):
        build_landscape(dataclasses.replace(SPEC, **change), tmp_path / out, workers=workers, **options)
    assert sorted(p.name for p in tmp_path.iterdir()) == before and not started


def _descendants(pid: int) -> set[int]:
    try:
        return {child.pid for child in psutil.Process(pid).children(recursive=True)}
    except psutil.NoSuchProcess:
        return set()


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE  # a zombie has exited, only not reaped
    except psutil.NoSuchProcess:
        return False


def test_kill_9_of_a_build_leaves_no_process_behind(tmp_path) -> None:
    # issue #12: `kill -9` of `landscape build` left its 2 pool workers and a resource tracker running.
    argv = [sys.executable, "-m", "dphypo", "landscape", "build", "--out", str(tmp_path / "k.npz"),
            "--lr-grid", "0.1,1", "--clip-grid", "1,2", "--seeds", "4", "--epochs", "30", "--workers", "2",
            "--engine", "opacus"]
    parent = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
    children: set[int] = set()
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and parent.poll() is None:  # until both workers are training
            children |= _descendants(parent.pid)
            if len([pid for pid in children if _alive(pid)]) >= 2 and (tmp_path / "k.npz.partial.jsonl").exists():
                time.sleep(3)  # let them import torch and start a job
                children |= _descendants(parent.pid)
                break
            time.sleep(0.2)
        assert parent.poll() is None and len(children) >= 2, "the build did not start its workers"
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 30  # the workers poll for their parent; a loaded machine delays them
        while time.monotonic() < deadline and any(_alive(pid) for pid in children):
            time.sleep(0.2)
        survivors = [pid for pid in children if _alive(pid)]
        assert not survivors, f"processes outlived the killed build: {survivors}"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        for pid in children:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


# -- the vectorised engine (issue #22) ----------------------------------------------------------------------------


def test_the_vectorized_build_trains_the_opacus_builds_runs(tmp_path) -> None:
    # Same run seeds, same mechanism: the engines agree up to float round-off, which may flip at most a prediction.
    vec = build_landscape(SPEC, tmp_path / "v.npz", workers=1, pass_size=5)
    opa = build_landscape(SPEC, tmp_path / "o.npz", workers=1, engine="opacus")
    one_prediction = 1 / 359
    assert np.max(np.abs(vec.mean - opa.mean)) <= one_prediction + 1e-12
    assert vec.metadata["engine"] == "vectorized" and opa.metadata["engine"] == "opacus"


def test_a_checkpoint_resumes_only_with_the_engine_that_wrote_it(tmp_path) -> None:
    out = tmp_path / "mixed.npz"
    record = {"lr": 0, "clip": 0, "seed": 0, "score": 0.5, "failed": False, "seconds": 1.0}
    header = {"digest": SPEC.digest(), "spec": dataclasses.asdict(SPEC)}  # no engine: written by the Opacus builder
    (tmp_path / "mixed.npz.partial.jsonl").write_text(json.dumps(header) + "\n" + json.dumps(record) + "\n")
    with pytest.raises(ValueError, match="resume it with --engine opacus"):
        build_landscape(SPEC, out, workers=1)


def test_a_vectorized_build_killed_mid_pass_resumes_from_its_last_finished_pass(tmp_path, monkeypatch) -> None:
    out = tmp_path / "k.npz"
    checkpoint = tmp_path / "k.npz.partial.jsonl"
    argv = [sys.executable, "-m", "dphypo", "landscape", "build", "--out", str(out), "--lr-grid", "0.5,2",
            "--clip-grid", "0.5,1,2", "--seeds", "2", "--epochs", "1", "--batch-size", "128", "--workers", "1",
            "--pass-size", "2", "--score-noise", "0.02"]
    done_before: list[dict] = []
    for _ in range(5):  # a pass is short: retry until the kill lands after one pass and before the last
        if checkpoint.exists():
            checkpoint.unlink()
        child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 env={**os.environ, "OMP_NUM_THREADS": "1"})
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and child.poll() is None:
            if checkpoint.exists() and len(checkpoint.read_text().splitlines()) >= 3:  # header + one pass
                child.send_signal(signal.SIGKILL)
                break
            time.sleep(0.01)
        child.wait()
        if child.returncode == -signal.SIGKILL and not out.exists():
            done_before = [json.loads(line) for line in checkpoint.read_text().splitlines()[1:]]
            break
        out.unlink(missing_ok=True)
    assert child.returncode == -signal.SIGKILL and 2 <= len(done_before) < 12, "the kill did not land mid-build"
    passes: list[list[tuple[int, int, int]]] = []
    real = build._pass_item

    def counting(spec, jobs):
        passes.append(list(jobs))
        return real(spec, jobs)

    monkeypatch.setattr(build, "_pass_item", counting)
    resumed = build_landscape(SPEC, out, workers=1, pass_size=2)
    finished = {(r["lr"], r["clip"], r["seed"]) for r in done_before}
    retrained = [job for jobs in passes for job in jobs]
    assert len(retrained) == 12 - len(finished) and not finished & set(retrained)  # nothing finished is redone
    fresh = build_landscape(SPEC, tmp_path / "fresh.npz", workers=1, pass_size=2)
    np.testing.assert_array_equal(resumed.mean, fresh.mean)  # public seeds: the resumed build is the same build


# --------------------------------------------------------------------------- privacy axes (issue #25): N-D builds
SPEC_4D = dataclasses.replace(SPEC, lr_grid=(0.5, 2.0), clip_grid=(0.5, 2.0), epochs=1, batch_size=64, seeds=1,
                              batch_size_grid=(64, 128), epochs_grid=(1, 2))


def _reference_curve_and_candidates(meta: dict) -> tuple:
    """The reference's per-run curve and every planned setting's own curve, from the stored metadata alone."""
    from dphypo.privacy.dpsgd_run import dpsgd_run_rdp

    score = meta["score_noise"] * meta["n_val"]
    ref = meta["reference"]
    reference = dpsgd_run_rdp(meta["sigma"], ref["sample_rate"], ref["steps"], score_noise=score)
    own = [dpsgd_run_rdp(row["sigma"], row["sample_rate"], row["steps"], score_noise=score) for row in meta["plan"]]
    return reference, own


def test_a_4d_build_trains_every_setting_at_the_sigma_its_reference_plans(tmp_path) -> None:
    from dphypo.privacy.heterogeneous import (
        CandidateRun,
        ReferenceRun,
        dominating_sigma,
        opacus_sample_rate,
        opacus_steps,
    )

    land = build_landscape(SPEC_4D, tmp_path / "four.npz", workers=1)
    again = load_landscape(tmp_path / "four.npz")
    assert again.axis_names == ("lr", "clip", "batch_size", "epochs") and again.shape == (2, 2, 2, 2)
    np.testing.assert_array_equal(again.axis_values[2], [64, 128])
    np.testing.assert_array_equal(land.mean, again.mean)
    assert np.all((again.mean >= 0) & (again.mean <= 1))
    meta = again.metadata
    n_train, n_val = meta["n_train"], meta["n_val"]
    assert meta["sigma"] == 1.0 and meta["batch_size"] == 64 and meta["epochs"] == 1  # the reference
    assert meta["privacy_axes"] == {"batch_size": "batch_size", "epochs": "epochs"}
    # The plan re-derived from the reference alone (the privacy layer's calibration, independently invoked).
    reference = ReferenceRun(opacus_sample_rate(n_train, 64), opacus_steps(n_train, 64, 1), 0.02 * n_val)
    assert (meta["reference"]["sample_rate"], meta["reference"]["steps"]) == (reference.sample_rate, reference.steps)
    assert [(r["batch_size"], r["epochs"]) for r in meta["plan"]] == [(64, 1), (64, 2), (128, 1), (128, 2)]
    for row in meta["plan"]:
        candidate = CandidateRun.from_batch(n_train, row["batch_size"], row["epochs"])
        assert (row["sample_rate"], row["steps"]) == (candidate.sample_rate, candidate.steps)
        assert row["sigma"] == dominating_sigma(candidate, reference, 1.0, profiles=True)
    assert meta["plan"][0]["sigma"] == 1.0  # the reference's own setting runs at σ_ref
    assert all(row["sigma"] > 1.0 for row in meta["plan"][1:])  # more steps or a larger rate: more noise
    # Every setting's own per-run curve (score release included) stays under the reference at every order.
    ref_curve, own = _reference_curve_and_candidates(meta)
    for curve in own:
        assert np.all(curve.epsilons <= ref_curve.epsilons)
    # The training layer trained each setting at its planned σ (the mechanisms the passes used).
    for row in meta["plan"]:
        mechanism = build._mechanism(SPEC_4D, (row["batch_size"], row["epochs"]))
        assert (mechanism.sigma, mechanism.sample_rate, mechanism.steps) == (
            row["sigma"], row["sample_rate"], row["steps"])


def test_a_4d_build_groups_passes_by_setting_and_resumes(tmp_path, monkeypatch) -> None:
    out = tmp_path / "r.npz"
    passes: list[list[tuple[int, ...]]] = []
    real = build._pass_item

    def failing(spec, jobs):
        if len(passes) == 2:
            raise Interrupted
        passes.append(list(jobs))
        return real(spec, jobs)

    monkeypatch.setattr(build, "_pass_item", failing)
    with pytest.raises(Interrupted):
        build_landscape(SPEC_4D, out, workers=1, pass_size=3)
    for jobs in passes:  # one mechanism per pass: every job of a pass has the same (batch, epochs) indices
        assert len({job[2:4] for job in jobs}) == 1
    done = {tuple(job) for jobs in passes for job in jobs}
    resumed: list[tuple[int, ...]] = []
    monkeypatch.setattr(build, "_pass_item", lambda spec, jobs: resumed.extend(jobs) or real(spec, jobs))
    land = build_landscape(SPEC_4D, out, workers=1, pass_size=3)
    assert not done & set(resumed) and len(done) + len(resumed) == 16
    fresh = build_landscape(SPEC_4D, tmp_path / "fresh.npz", workers=1)
    np.testing.assert_array_equal(land.mean, fresh.mean)  # public seeds: the resumed build is the same build


def test_a_2d_spec_keeps_the_digest_of_the_shipped_builds() -> None:
    shipped = load_landscape("landscapes/vectorized/digits_mlp_sigma1.0.npz")
    meta = shipped.metadata
    spec = BuildSpec(dataset=meta["dataset"], model=meta["model"], lr_grid=tuple(shipped.axis_values[0]),
                     clip_grid=tuple(shipped.axis_values[1]), sigma=meta["sigma"], epochs=meta["epochs"],
                     batch_size=meta["batch_size"], seeds=meta["seeds"], score_noise=meta["score_noise"])
    assert spec.digest() == meta["spec_digest"]
    assert dataclasses.replace(spec, epochs_grid=(5, 10)).digest() != spec.digest()
    assert build.build_plan(spec) is None and spec.shape == (16, 20)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"batch_size_grid": (0, 64)}, "batch_size_grid values must be an integer >= 1, got 0"),
        ({"epochs_grid": (0, 10)}, "epochs_grid values must be an integer >= 1, got 0"),
        ({"epochs_grid": (10, 5)}, "epochs_grid must hold at least 2 strictly increasing"),
        ({"batch_size_grid": (64,)}, "batch_size_grid must hold at least 2"),
        ({"batch_size_grid": (64, 2.5)}, "batch_size_grid values must be an integer"),
    ],
)
def test_a_spec_refuses_bad_privacy_grids(change: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(SPEC_4D, **change)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"batch_size_grid": (64, 5000)}, r"batch_size_grid values must be <= the training set of digits \(1079"),
        # RDP domination (envelopes, docs/proofs/heterogeneous.md §5) asks batch 128 x 20 epochs for more than σ = 100
        # under the batch 64 x 10 reference at σ 50 (at σ 40 it needs 91.8)
        ({"batch_size_grid": (64, 128), "epochs_grid": (10, 20), "epochs": 10, "sigma": 50.0},
         "batch_size_grid or epochs_grid must be narrowed .*cannot be dominated .* sigma <= 100"),
    ],
)
def test_a_4d_build_refuses_before_writing_or_training(tmp_path, monkeypatch, change: dict, message: str) -> None:
    started: list = []
    monkeypatch.setattr(build, "_job", lambda *args: started.append(args))
    monkeypatch.setattr(build, "_pass_item", lambda *args: started.append(args))
    with pytest.raises(ValueError, match=message) as info:
        build_landscape(dataclasses.replace(SPEC_4D, **change), tmp_path / "x.npz", workers=1)
    assert "\n" not in str(info.value) and not started and not list(tmp_path.iterdir())

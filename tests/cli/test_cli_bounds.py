"""Issue #30 item 7: bounds and refusals of the command line, each one line naming the option, before any work."""

from __future__ import annotations

from pathlib import Path

import pytest

from dphypo.cli import run
from dphypo.cli.common import MAX_EPOCHS, MAX_PASS_SIZE

LANDSCAPES = Path(__file__).resolve().parents[2] / "landscapes"
FAMILY = [arg for s in ("1.0", "1.45", "2.1", "4.0")
          for arg in ("--landscape", str(LANDSCAPES / f"digits_mlp_sigma{s}.npz"))]


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize(("extra", "message"), [
    (["--pass-size", "100000000"], f"--pass-size must be at most {MAX_PASS_SIZE} (candidates trained at once"),
    (["--design", "single", "--epochs-grid", "1,1000000"],
     f"--epochs-grid values must be at most {MAX_EPOCHS} (beyond it a single DP-SGD run trains for days), "
     "got 1000000"),
    (["--epochs", "1000000"], f"--epochs must be at most {MAX_EPOCHS}"),
    (["--design", "single", "--epochs", "5000"], f"--epochs must be at most {MAX_EPOCHS}"),
])
def test_tune_caps_pass_size_and_epochs_before_any_data(extra, message, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setattr("dphypo.train.load_dataset", lambda *a, **k: pytest.fail("data read before the refusal"))
    for mode in (["--dry-run"], []):  # a dry run too: it would otherwise print a plan no run can carry out
        assert run(["tune", *extra, *mode, "--out", str(tmp_path / "o")]) == 2
        assert message in _one_error_line(capsys)


@pytest.mark.parametrize(("extra", "message"), [
    (["--pass-size", str(MAX_PASS_SIZE + 1)], f"--pass-size must be at most {MAX_PASS_SIZE}"),
    (["--epochs", "1000000"], f"--epochs must be at most {MAX_EPOCHS}"),
    (["--epochs-grid", "1,1000000"], f"--epochs-grid values must be at most {MAX_EPOCHS}"),
])
def test_landscape_build_caps_pass_size_and_epochs(extra, message, tmp_path, capsys) -> None:
    assert run(["landscape", "build", *extra, "--out", str(tmp_path / "l.npz")]) == 2
    assert message in _one_error_line(capsys)
    assert not list(tmp_path.iterdir())  # nothing written


@pytest.mark.parametrize("kind", ["marginals", "epsilon"])
def test_plot_refuses_axes_where_it_would_be_ignored(kind, tmp_path, capsys) -> None:
    argv = ["plot", kind, "--landscape", "synthetic:ridge", "--axes", "lr,clip", "--out", str(tmp_path / "m.png")]
    assert run(argv) == 2
    line = _one_error_line(capsys)
    assert f"--axes is an option of plot landscape only: plot {kind} does not take it" in line
    assert not (tmp_path / "m.png").exists()
    assert run(["plot", "marginals", "--landscape", "synthetic:ridge", "--out", str(tmp_path / "m.png")]) == 0


@pytest.mark.parametrize(("extra", "message"), [
    (["--probes", "0"], "--probes must be an integer >= 1, got 0"),
    (["--probes", "2", "--top-k", "3"], "--top-k must be at most the number of probes (2), got 3"),
    (["--top-k", "0"], "--top-k must be an integer >= 1"),
    (["--split", "1"], "--split must be in (0, 1)"),
    (["--final-mean", "3"], "--final-mean needs --top-k >= 2 with --probe-mode release"),
    (["--final-mean", "0.5", "--top-k", "2"], "--final-mean must be a finite number > 1"),
    (["--probe-mode", "select", "--probes", "0.5"], "--probes must be a finite number > 1 with --probe-mode select"),
    (["--probe-mode", "select", "--probes", "1e9"], "--probes must be at most 1,000,000 runs"),
])
def test_two_stage_refusals_name_the_options(extra, message, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setattr("dphypo.train.load_dataset", lambda *a, **k: pytest.fail("data read before the refusal"))
    assert run(["tune", *extra, "--dry-run", "--out", str(tmp_path / "o")]) == 2
    line = _one_error_line(capsys)
    assert message in line
    for python_name in ("top_k", "final_mean", "ProbeRelease", "FinalRun", "FinalSelection"):
        assert python_name not in line, line


def test_simulate_two_stage_refusals_name_the_options(capsys) -> None:
    assert run(["simulate", "--design", "two-stage", *FAMILY, "--epsilon", "8", "--split", "0"]) == 2
    assert "--split must be in (0, 1)" in _one_error_line(capsys)


def test_an_interrupted_landscape_build_says_what_is_saved_and_resumes(tmp_path, capsys, monkeypatch) -> None:
    import dphypo.simulation.builder as builder

    argv = ["landscape", "build", "--lr-grid", "0.1,1", "--clip-grid", "0.5,1", "--seeds", "2", "--epochs", "1",
            "--pass-size", "2", "--workers", "1", "--out", str(tmp_path / "l.npz")]
    real, calls = builder._pass_item, []

    def interrupted_at_the_second_pass(spec, jobs):
        calls.append(len(jobs))
        if len(calls) == 2:
            raise KeyboardInterrupt  # Ctrl-C in the middle of the build
        return real(spec, jobs)

    monkeypatch.setattr(builder, "_pass_item", interrupted_at_the_second_pass)
    assert run(argv) == 130
    line = capsys.readouterr().err.strip().splitlines()[-1]  # after the progress bar (stderr, not a terminal)
    checkpoint = tmp_path / "l.npz.partial.jsonl"
    assert line == (f"interrupted: 2 of 8 runs of {tmp_path / 'l.npz'} are saved in {checkpoint}; run the same "
                    "command again to resume: finished runs are not trained again")
    assert checkpoint.exists() and not (tmp_path / "l.npz").exists()
    monkeypatch.setattr(builder, "_pass_item", real)
    assert run(argv) == 0  # resumes: only the 6 other runs are trained
    assert (tmp_path / "l.npz").exists() and not checkpoint.exists()


def test_plan_at_an_unreachable_epsilon_is_one_line_saying_what_would_run(capsys) -> None:
    argv = ["plan", *FAMILY, "--mean", "10", "--repeats", "2", "--workers", "1", "--design", "uniform"]
    assert run([*argv, "--epsilon", "0.01"]) == 2
    line = _one_error_line(capsys)
    assert line.startswith("error: no design reaches total ε = 0.01 on this family (σ from 1 to 4): even with "
                           "unlimited noise the cheapest, uniform, E[T]=10, costs ε = 0.86")
    assert "raise --epsilon above it" in line and not capsys.readouterr().out
    assert run([*argv, "--epsilon", "0.9"]) == 2  # reachable with more noise than the family holds
    line = _one_error_line(capsys)
    assert "no design reaches total ε = 0.9" in line and "needs sigma=" in line
    assert "build a member there (dphypo landscape build --sigma)" in line

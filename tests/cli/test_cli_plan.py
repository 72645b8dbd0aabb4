"""``dphypo plan``: the equal-ε planner on the shipped digits family, from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dphypo.cli import run

LANDSCAPES = Path(__file__).resolve().parents[2] / "landscapes"
SIGMAS = ("1.0", "1.2226", "1.45", "1.7673", "2.1", "2.9", "4.0")
FAMILY = [arg for s in SIGMAS for arg in ("--landscape", str(LANDSCAPES / f"digits_mlp_sigma{s}.npz"))]
#: Small enough for seconds: one E[T], 4 searches per candidate, this process only.
SMALL = ["--mean", "10", "--repeats", "4", "--seed", "1", "--workers", "1"]


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:
    assert run(argv) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1  # exactly one JSON object
    return json.loads(out)


def test_plan_table_marks_the_best_configuration_and_json_agrees(capsys: pytest.CaptureFixture[str]) -> None:
    payload = _json(capsys, ["plan", *FAMILY, "--epsilon", "8", *SMALL, "--json"])
    rows = payload["rows"]
    assert len(rows) == 6 and all(r["status"] == "ok" for r in rows)  # uniform, 3 GP-UCB, 2 top-set at E[T] = 10
    assert all(7.95 <= r["epsilon"] <= 8.0 and r["repeats"] == 4 for r in rows)
    best = max(rows, key=lambda r: r["mean"])
    assert payload["best"] == best["name"]
    assert payload["runner_up"] == sorted(rows, key=lambda r: -r["mean"])[1]["name"]
    assert payload["difference"]["first"] == best["name"] and payload["difference"]["pairing"].startswith("paired")
    assert payload["verdict"].startswith(f"Best: {best['name']}")
    assert payload["family_sigmas"] == [float(s) for s in SIGMAS] and payload["runs"] == "geometric"

    assert run(["plan", *FAMILY, "--epsilon", "8", *SMALL]) == 0
    out = capsys.readouterr().out
    best_line = next(line for line in out.splitlines() if "★ best" in line)
    assert best["label"] in best_line and f"{best['mean']:.4f}" in best_line
    assert "runner-up" in out and f"Best: {best['name']}" in out
    assert "Best − runner-up" in out and "E[T] = 10: best uniform" in out
    assert "not from the private data" in out


def test_plan_lists_unreachable_and_outside_family_candidates(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", *FAMILY, "--epsilon", "2", "--mean", "10", "--mean", "20", "--repeats", "3", "--workers", "1",
            "--adaptive-theorem", "A"]  # the fixture family's σ range was chosen for Theorem A
    assert run(argv) == 0
    out = capsys.readouterr().out
    unreachable = [line for line in out.splitlines() if "unreachable: target epsilon=2" in line]
    assert len(unreachable) == 10  # every adaptive candidate at both E[T]
    assert any("narrow [c, C]" in line for line in unreachable)  # brackets printed, not eaten as markup
    assert "outside family: needs sigma=" in out  # uniform search at E[T] = 20 needs σ above the largest member
    assert "No runner-up" in out


@pytest.mark.parametrize(("extra", "message"), [
    (["--runs", "poisson"], "--runs must be one of"),
    (["--mean", "0.5"], "--mean must be"),
    (["--epsilon", "-1"], "--epsilon must be a finite number > 0"),
    (["--repeats", "0"], "--repeats must be a positive integer"),
])
def test_plan_bad_options_are_one_line_errors(capsys: pytest.CaptureFixture[str], extra: list[str],
                                              message: str) -> None:
    argv = ["plan", *FAMILY, "--epsilon", "8", *extra]
    assert run(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


def test_plan_needs_a_family(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["plan", "--landscape", str(LANDSCAPES / "digits_mlp_sigma1.0.npz"), "--epsilon", "8"]) == 2
    assert "at least 2 members" in capsys.readouterr().err
    mixed = ["--landscape", str(LANDSCAPES / "digits_mlp_sigma1.0.npz"),
             "--landscape", str(LANDSCAPES / "mnist_subset_cnn_sigma1.3716.npz")]
    assert run(["plan", *mixed, "--epsilon", "8"]) == 2
    assert "mnist_subset_cnn_sigma1.3716.npz" in capsys.readouterr().err


def test_plan_help_says_the_plan_uses_no_private_data(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["plan", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "not from the private data of the search it plans" in out and "<bool>" not in out

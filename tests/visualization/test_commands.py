"""The bodies of the ``dphypo plot`` subcommands (dphypo/visualization/_commands.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dphypo.cli import run
from dphypo.privacy import dpsgd_rdp, gaussian_rdp, geometric
from dphypo.privacy.profiles import dpsgd_profile_or_skip
from dphypo.simulation.simulate import ArmResult
from dphypo.strategies import Uniform
from dphypo.visualization import (
    accuracy_vs_T_info,
    epsilon_breakdown_info,
    epsilon_breakdown_reports,
    plot_accuracy_vs_T_json,
    plot_accuracy_vs_T_simulated,
    plot_density_run,
    plot_epsilon_breakdown,
    plot_epsilon_breakdown_bounds,
    plot_landscape_file,
)
from tests.visualization._helpers import MIN_BYTES


def test_plot_density_run_with_a_real_gp_search(tmp_path) -> None:
    path = plot_density_run("synthetic:smooth", tmp_path / "run.png", runs=4, C=2.0, c=0.75, seed=0)
    assert path.stat().st_size > MIN_BYTES["png"]
    # A uniform search (C = c = 1): every ratio is 1, the degenerate colour scale still renders.
    path = plot_density_run("synthetic:smooth", tmp_path / "uniform.svg", strategy=Uniform(), runs=3,
                            C=1.0, c=1.0)
    assert path.stat().st_size > MIN_BYTES["svg"]


def test_epsilon_plot_shows_what_account_reports_and_names_the_method(capsys) -> None:
    # Issue #12 item 7: the uniform bar used RDP only (2.99) where `dphypo account` reported the profile bound
    # (2.395). Now every bar is the report of `account` with the run's profile, labelled with its method.
    sigma, q, steps = 1.0, 0.01, 500
    args = ["--sigma", "1", "--sample-rate", "0.01", "--steps", "500", "--runs", "geometric", "--gamma", "0.05"]
    assert run(["account", *args, "--C", "1", "--c", "1", "--delta", "1e-5", "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    base, profile = dpsgd_rdp(sigma, q, steps), dpsgd_profile_or_skip(sigma, q, steps)
    reports = epsilon_breakdown_reports(base, geometric(0.05), [(1, 1), (2, 0.75)], 1e-5, profile=profile)
    uniform = reports[0][1]
    assert uniform.epsilon == pytest.approx(cli["epsilon"], rel=1e-12)
    assert uniform.method == cli["method"] and uniform.methods == pytest.approx(cli["methods"], rel=1e-12)
    assert {"rdp", "rdp-theorem-b", "profile-tnb"} <= set(uniform.methods)  # every valid bound, the least used
    assert uniform.epsilon == min(uniform.methods.values())
    # One convention for "one run" in every bar: min(RDP, profile) of the run.
    assert reports[1][1].base_epsilon == uniform.base_epsilon == pytest.approx(cli["base_epsilon"], rel=1e-12)
    info = epsilon_breakdown_info(reports)
    assert info.methods == tuple(r.method for _, r in reports)
    texts = [t.get_text() for t in plot_epsilon_breakdown(reports).axes[0].texts]
    for (_, report), text in zip(reports, texts, strict=True):
        assert text == f"{report.epsilon:.3g}\n{report.method}"


def test_command_functions_write_figures(tmp_path, capsys) -> None:
    assert plot_landscape_file("synthetic:ridge", tmp_path / "l.svg").stat().st_size > MIN_BYTES["svg"]
    out = plot_epsilon_breakdown_bounds(gaussian_rdp(3.0), geometric(0.1), [(1, 1), (2, 0.75)], 1e-5,
                                        tmp_path / "e.png")
    assert out.stat().st_size > MIN_BYTES["png"]
    out = plot_accuracy_vs_T_simulated("synthetic:smooth", tmp_path / "a.png", [Uniform()], [2, 8], repeats=5,
                                       workers=1)
    assert out.stat().st_size > MIN_BYTES["png"]
    paths = []
    for T in (2, 4):
        assert run(f"simulate --landscape synthetic:smooth --strategy uniform --fixed-T {T} --repeats 5 "
                   "--workers 1 --json".split()) == 0
        paths.append(tmp_path / f"sim{T}.json")
        paths[-1].write_text(capsys.readouterr().out)
    assert plot_accuracy_vs_T_json(paths, tmp_path / "j.png").stat().st_size > MIN_BYTES["png"]
    paths[0].write_text(json.dumps({"results": "nope"}))
    with pytest.raises(ValueError, match="simulate --json"):
        plot_accuracy_vs_T_json(paths, tmp_path / "k.png")


def test_simulation_files_are_labelled_by_bounds_and_deduplicated(tmp_path) -> None:
    from dphypo.visualization._commands import _simulation_arms

    def payload(C: float, T: int, gp_mean: float) -> dict:
        arms = [ArmResult("uniform", T, None, 0.8, (0.7, 0.9), 10, np.zeros(10)),
                ArmResult("gp-ucb", T, None, gp_mean, (gp_mean - 0.1, gp_mean + 0.1), 10, np.zeros(10))]
        return {"best_value": 0.95, "C": C, "c": 0.75, "results": [a.to_dict() for a in arms]}

    paths = []
    for k, (C, T, m) in enumerate([(2.0, 5, 0.85), (1.5, 5, 0.83), (2.0, 10, 0.9)]):
        paths.append(tmp_path / f"{k}.json")
        paths[-1].write_text(json.dumps(payload(C, T, m)))
    arms, labels, best = _simulation_arms(paths)
    assert best == 0.95
    # The uniform arm at T=5 is the same in both files: drawn once.
    assert labels == ["uniform", "gp-ucb (C=2, c=0.75)", "gp-ucb (C=1.5, c=0.75)", "uniform",
                      "gp-ucb (C=2, c=0.75)"]
    assert [(a.T, a.mean) for a in arms] == [(5, 0.8), (5, 0.85), (5, 0.83), (10, 0.8), (10, 0.9)]
    info = accuracy_vs_T_info(arms, 0.95, labels)
    assert [(c.label, c.T.tolist()) for c in info.curves] == [
        ("uniform", [5, 10]), ("gp-ucb (C=2, c=0.75)", [5, 10]), ("gp-ucb (C=1.5, c=0.75)", [5])]
    (tmp_path / "other.json").write_text(json.dumps({**payload(2.0, 20, 0.9), "best_value": 0.5}))
    with pytest.raises(ValueError, match="one landscape"):
        _simulation_arms([*paths, tmp_path / "other.json"])


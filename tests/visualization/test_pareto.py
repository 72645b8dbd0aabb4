"""The utility-vs-compute figure of a plan (dphypo/visualization/_pareto.py) and ``dphypo plot pareto``."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dphypo.cli import run
from dphypo.privacy import make_run_count
from dphypo.simulation.planner import ComputeBudget, PlanCandidate, PlanResult, PlanRow, strategy_label
from dphypo.strategies import GPUCB, Uniform
from dphypo.visualization import pareto_info, plot_pareto
from tests.visualization._helpers import _check_saved

#: (strategy, E[T], mean): uniform at 10 is beaten by GP-UCB at 10, which uniform at 20 and 50 beat in turn.
ROWS = ((Uniform(), 10.0, 0.80), (GPUCB(C=1.25, c=0.8), 10.0, 0.82), (Uniform(), 20.0, 0.85),
        (GPUCB(C=1.25, c=0.8), 20.0, 0.84), (Uniform(), 50.0, 0.86))


def _plan(compute: ComputeBudget) -> PlanResult:
    rows = []
    for strategy, runs, mean in ROWS:
        cand = PlanCandidate(strategy_label(strategy), strategy, make_run_count("geometric", mean=runs))
        rows.append(PlanRow(cand, "ok", mean=mean, ci95=(mean - 0.01, mean + 0.01), values=np.full(4, mean),
                            expected_compute=compute.expected_compute(runs), budget_reason=compute.over_budget(runs)))
    unreachable = PlanCandidate("gp-ucb C=2 c=0.75", GPUCB(), make_run_count("geometric", mean=10.0))
    rows.append(PlanRow(unreachable, "unreachable", reason="target epsilon unreachable"))
    return PlanResult(8.0, 1e-5, 4, 0, (1.0, 2.0), 0.95, tuple(rows), compute=compute)


def test_pareto_info_reads_the_plan_payload() -> None:
    plan = _plan(ComputeBudget(run_seconds=2.0, budget_seconds=50.0))
    info = pareto_info(json.loads(json.dumps(plan.to_dict())))
    assert info.names == tuple(r.candidate.name for r in plan.rows if r.feasible)  # the unreachable row is left out
    assert info.designs == ("uniform", "dp-hypo", "uniform", "dp-hypo", "uniform")
    assert info.unit == "s" and info.budget == 50.0
    np.testing.assert_allclose(info.compute, [20.0, 20.0, 40.0, 40.0, 100.0], rtol=1e-12)
    assert info.on_front.tolist() == [False, True, True, False, True]
    assert info.within_budget.tolist() == [True, True, True, True, False]
    assert info.means.tolist() == [m for _, _, m in ROWS] and info.epsilon == 8.0
    np.testing.assert_allclose(info.ci_high - info.ci_low, 0.02)


def test_pareto_info_falls_back_to_runs_without_a_cost_per_run() -> None:
    info = pareto_info(_plan(ComputeBudget(max_mean_runs=20.0)).to_dict())
    assert info.unit == "runs" and info.budget == 20.0
    np.testing.assert_allclose(info.compute, [10.0, 10.0, 20.0, 20.0, 50.0], rtol=1e-12)  # E[T] from γ


def test_pareto_info_rejects_what_is_not_a_plan() -> None:
    with pytest.raises(ValueError, match="dphypo plan --json"):
        pareto_info({"results": []})
    payload = _plan(ComputeBudget()).to_dict()
    payload["rows"] = [r for r in payload["rows"] if r["status"] != "ok"]
    with pytest.raises(ValueError, match="no simulated configuration"):
        pareto_info(payload)


def test_plot_pareto_draws_points_front_and_budget(tmp_path) -> None:
    fig = plot_pareto(pareto_info(_plan(ComputeBudget(run_seconds=2.0, budget_seconds=50.0)).to_dict()))
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and "seconds" in ax.get_xlabel()
    labels = ax.get_legend_handles_labels()[1]
    assert {"uniform", "dp-hypo", "Pareto front", "compute budget"} <= set(labels)
    step = next(line for line in ax.get_lines() if line.get_label() == "Pareto front")
    assert step.get_ydata().tolist() == [0.82, 0.85, 0.86]
    _check_saved(fig, tmp_path, "pareto")


def test_plot_pareto_command(tmp_path) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(_plan(ComputeBudget(run_seconds=2.0)).to_dict()))
    out = tmp_path / "front.png"
    assert run(["plot", "pareto", "--from", str(plan), "--out", str(out)]) == 0
    assert out.read_bytes().startswith(b"\x89PNG")
    assert run(["plot", "pareto", "--out", str(out)]) == 2  # no --from: one-line error

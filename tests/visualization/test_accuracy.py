"""The accuracy-vs-T figure (dphypo/visualization/_accuracy.py)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dphypo.simulation.simulate import ArmResult, mean_ci95
from dphypo.visualization import accuracy_vs_T_info, plot_accuracy_vs_T
from tests.visualization._helpers import _check_saved


def _arm(strategy: str, T: int, seed: int, repeats: int = 20) -> ArmResult:
    values = np.random.default_rng(seed).normal(0.9, 0.02, size=repeats)
    mean, ci = mean_ci95(values)
    return ArmResult(strategy, T, None, mean, ci, repeats, values)


def test_accuracy_info_groups_sorts_and_keeps_intervals() -> None:
    arms = [_arm("gp-ucb", 20, 0), _arm("uniform", 10, 1), _arm("gp-ucb", 5, 2), _arm("uniform", 5, 3),
            _arm("gp-ucb", 10, 4)]
    info = accuracy_vs_T_info(arms, best_value=0.95)
    assert [c.label for c in info.curves] == ["gp-ucb", "uniform"]
    gp, uniform = info.curves
    assert gp.T.tolist() == [5, 10, 20] and uniform.T.tolist() == [5, 10]
    by_T = {a.T: a for a in arms if a.strategy == "gp-ucb"}
    assert gp.mean.tolist() == [by_T[t].mean for t in (5, 10, 20)]
    assert gp.lower.tolist() == [by_T[t].ci95[0] for t in (5, 10, 20)]
    assert gp.upper.tolist() == [by_T[t].ci95[1] for t in (5, 10, 20)]
    assert np.all(gp.lower < gp.mean) and np.all(gp.mean < gp.upper)
    assert info.best_value == 0.95 and info.log_T is False  # 20 / 5 < 8
    assert accuracy_vs_T_info([_arm("u", 5, 0), _arm("u", 40, 1)]).log_T is True


def test_accuracy_info_relabels_and_rejects_bad_input() -> None:
    arms = [_arm("gp-ucb", 5, 0), _arm("gp-ucb", 5, 1)]
    info = accuracy_vs_T_info(arms, labels=["C=1.5", "C=2"])
    assert [c.label for c in info.curves] == ["C=1.5", "C=2"]
    with pytest.raises(ValueError, match="one arm per"):
        accuracy_vs_T_info(arms)
    with pytest.raises(ValueError, match="at least one"):
        accuracy_vs_T_info([])
    with pytest.raises(ValueError, match="fixed T"):
        accuracy_vs_T_info([dataclasses.replace(arms[0], T=None, run_count="geometric")])
    with pytest.raises(ValueError, match="one label per result"):
        accuracy_vs_T_info(arms, labels=["x"])
    with pytest.raises(ValueError, match="contain the mean"):
        accuracy_vs_T_info([dataclasses.replace(arms[0], ci95=(0.0, 0.1))])


def test_plot_accuracy_draws_each_curve_and_the_reference(tmp_path) -> None:
    arms = [_arm("uniform", t, t) for t in (5, 10, 20, 40)] + [_arm("gp-ucb", t, 100 + t, 4) for t in (5, 10)]
    fig = plot_accuracy_vs_T(arms, best_value=0.95)
    ax = fig.axes[0]
    curves = accuracy_vs_T_info(arms).curves
    lines = [line for line in ax.get_lines() if len(line.get_xdata()) > 0 and line.get_linestyle() == "-"]
    for line, curve in zip(lines, curves, strict=True):
        assert np.asarray(line.get_xdata()).tolist() == curve.T.tolist()
        assert np.asarray(line.get_ydata()) == pytest.approx(curve.mean)
    assert any(line.get_linestyle() == "--" and line.get_ydata()[0] == 0.95 for line in ax.get_lines())
    assert ax.get_xscale() == "log"
    _check_saved(fig, tmp_path, "accuracy")


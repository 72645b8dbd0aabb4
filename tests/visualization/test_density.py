"""The sampling-density figures (dphypo/visualization/_density.py): ratio to the prior, runs, categorical axes."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from dphypo.density import project
from dphypo.search.records import Trial
from dphypo.search.tuner import SearchHistory
from dphypo.space import Choice, Grid, SearchSpace
from dphypo.visualization import density_snapshots_info, plot_density_snapshots
from tests.visualization._helpers import _check_saved


def _space(prior: np.ndarray | None = None) -> SearchSpace:
    return SearchSpace({"lr": Grid((1e-3, 1e-2, 1e-1), scale="log"), "clip": Grid((0.5, 1.0, 2.0, 4.0))},
                       prior=prior)


def _history(space: SearchSpace, runs: int, runs_per_update: int = 1, C: float = 2.0, c: float = 0.5,
             seed: int = 0) -> SearchHistory:
    """Projected random densities (as the tuner records them) and runs drawn from them."""
    rng = np.random.default_rng(seed)
    densities, trials = [], []
    for k in range(math.ceil(runs / runs_per_update)):
        density = project(rng.dirichlet(np.full(space.size, 0.3)), space.prior, C, c)
        densities.append(density)
        for _ in range(min(runs_per_update, runs - k * runs_per_update)):
            index = int(rng.choice(space.size, p=density))
            trials.append(Trial(len(trials), index, space.params(index), float(rng.random()), False, 0.0))
    return SearchHistory(runs, tuple(trials), 0, tuple(densities), (), seed)


@pytest.mark.parametrize("uniform_prior", [True, False])
def test_density_info_ratio_runs_and_scale(uniform_prior: bool) -> None:
    prior = None if uniform_prior else np.random.default_rng(1).uniform(1.0, 3.0, size=12)
    space = _space(prior)
    history = _history(space, runs=9, runs_per_update=2)
    info = density_snapshots_info(history, space, steps=[3, 0], C=2.0, c=0.5, runs_per_update=2)
    assert [s.step for s in info.snapshots] == [3, 0]
    assert (info.vmin, info.vmax, info.bounds_given) == (0.5, 2.0, True)
    for snap in info.snapshots:
        density = history.densities[snap.step]
        assert snap.ratio.shape == (4, 3)
        for i in range(3):
            for j in range(4):
                assert snap.ratio[j, i] == pytest.approx(density[4 * i + j] / space.prior[4 * i + j])
        assert np.all((snap.ratio >= 0.5 - 1e-9) & (snap.ratio <= 2.0 + 1e-9))
        drawn = [t.grid_index for t in history.trials]
        assert snap.observed.tolist() == drawn[: 2 * snap.step]
        assert snap.drawn.tolist() == drawn[2 * snap.step : 2 * snap.step + 2]


def test_density_info_defaults_and_errors() -> None:
    space = _space()
    history = _history(space, runs=20)
    info = density_snapshots_info(history, space)
    assert [s.step for s in info.snapshots] == [0, 6, 13, 19]
    ratios = np.stack([s.ratio for s in info.snapshots])
    assert (info.vmin, info.vmax) == (min(1.0, ratios.min()), max(1.0, ratios.max()))
    assert info.bounds_given is False
    empty = dataclasses.replace(history, densities=())
    with pytest.raises(ValueError, match="record_densities=True"):
        density_snapshots_info(empty, space)
    with pytest.raises(ValueError, match=r"outside S_\(C,c\)"):
        density_snapshots_info(history, space, C=1.2, c=0.9)
    with pytest.raises(ValueError, match="both C and c"):
        density_snapshots_info(history, space, C=2.0)
    with pytest.raises(ValueError, match="runs_per_update=2 does not match"):
        density_snapshots_info(history, space, runs_per_update=2)
    with pytest.raises(ValueError, match=r"steps must be integers in \[0, 20\)"):
        density_snapshots_info(history, space, steps=[20])
    with pytest.raises(ValueError, match="search's space"):
        density_snapshots_info(history, SearchSpace({"a": Grid((1.0, 2.0)), "b": Grid((1.0, 2.0))}))


def test_plot_density_snapshots_panels_and_files(tmp_path) -> None:
    space = _space()
    history = _history(space, runs=6)
    fig = plot_density_snapshots(history, space, steps=[0, 2, 5], C=2.0, c=0.5)
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.get_label() != "<colorbar>"]
    assert len(panels) == 3
    colorbar = next(ax for ax in fig.axes if ax.get_label() == "<colorbar>")
    assert colorbar.get_ylim() == pytest.approx((0.5, 2.0))  # the colour scale is [c, C]
    _check_saved(fig, tmp_path, "density")


def test_density_plot_with_a_categorical_axis(tmp_path) -> None:
    space = SearchSpace({"optimizer": Choice(("sgd", "adam", "rmsprop")),
                         "lr": Grid((1e-3, 1e-2), scale="log")})
    history = _history(space, runs=3)
    info = density_snapshots_info(history, space, C=2.0, c=0.5)
    assert info.x.positions.tolist() == [0.0, 1.0, 2.0] and info.snapshots[0].ratio.shape == (2, 3)
    fig = plot_density_snapshots(history, space, C=2.0, c=0.5)
    fig.canvas.draw()
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert labels == ["sgd", "adam", "rmsprop"]
    _check_saved(fig, tmp_path, "categorical")

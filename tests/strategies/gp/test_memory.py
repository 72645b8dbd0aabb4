"""Bounded GP memory: low-rank compression stays exact, rows stay ≤ min(t, 2u) + 1, batch sizes follow memory."""

from __future__ import annotations

import numpy as np
import torch

import dphypo.strategies.gp.fit as surrogate
import dphypo.strategies.gp.likelihood as likelihood
from dphypo.simulation.batched import MEMORY_SHARE, memory_batch
from dphypo.space import Float, Int, IntGrid, LogFloat, SearchSpace
from dphypo.strategies.gp.fit import fit_surrogate
from dphypo.strategies.gp.memory import factor_bytes, job_bytes, max_rows
from dphypo.strategies.gp.posterior import GridFactors, GridPosterior


def _grid_4d() -> np.ndarray:
    """A mixed 4-D grid: log lr, linear clip, log-integer batch size, integer epochs (3·3·3·3 = 81 points)."""
    space = SearchSpace({
        "lr": LogFloat(1e-3, 1e-1, 3),
        "clip": Float(0.5, 1.5, 3),
        "batch": IntGrid((32, 64, 128), scale="log"),
        "epochs": Int(5, 15, 5),
    })
    return np.asarray(space.unit_coordinates)


def _moments_from_scratch(factors: GridFactors, idx: np.ndarray, y: np.ndarray,
                          model: GridPosterior) -> tuple[np.ndarray, np.ndarray]:
    targets = (torch.as_tensor(y) - model.loc[:, None]) / model.scale[:, None]
    data = likelihood.Replicates.of(factors, idx, targets)
    reference, ok = surrogate._marginal_posterior(factors, data.x, data.means, model.loc, model.scale, model.hyper,
                                                  data.weights)
    assert ok.all()
    return reference.score_moments()


def test_repeated_points_compress_to_their_rank_and_stay_exact() -> None:
    """A sampler returning to 5 points: rows stay ≤ min(t, 2u) + 1 and the posterior equals the one from scratch."""
    grid = _grid_4d()
    factors = GridFactors(grid)
    rng = np.random.default_rng(3)
    members, first, total = 3, 8, 120
    favourites = rng.choice(grid.shape[0], size=5, replace=False)
    idx = np.where(rng.random((members, total)) < 0.9, favourites[rng.integers(0, 5, (members, total))],
                   rng.integers(0, grid.shape[0], (members, total)))
    y = np.sin(3.0 * grid[idx].sum(-1)) + 0.05 * rng.normal(size=idx.shape)
    fit = fit_surrogate(factors, idx[:, :first], y[:, :first], seed=np.arange(members))
    assert fit.ok.all()
    model = fit.posterior
    for t in range(first, total):
        model.condition(np.arange(members), idx[:, t], y[:, t])
        distinct = np.array([np.unique(row[: t + 1]).size for row in idx])
        assert np.all(model._rows <= np.minimum(t + 1, 2 * distinct) + 1)
    distinct = np.array([np.unique(row).size for row in idx])
    assert np.all(model._rows <= 2 * distinct)
    assert model._rows.max() < total // 2  # far below the t rows the old rule kept (2n = 162 never reached)
    mean, std = model.score_moments()
    expected_mean, expected_std = _moments_from_scratch(factors, idx, y, model)
    np.testing.assert_allclose(mean, expected_mean, rtol=0, atol=1e-9)
    np.testing.assert_allclose(std, expected_std, rtol=1e-7, atol=1e-9)


def test_a_posterior_without_recorded_points_keeps_the_2n_rule() -> None:
    """Built directly from a factor (no points recorded): the rank bound is n, as before."""
    grid = _grid_4d()
    n = grid.shape[0]
    model = GridPosterior(GridFactors(grid), torch.tensor([[0.1, 0.0, 0.3, 0.3, 0.3, 0.3]], dtype=torch.float64),
                          torch.zeros(1, dtype=torch.float64), torch.ones(1, dtype=torch.float64),
                          torch.zeros(1, n, dtype=torch.float64), torch.ones(1, n, dtype=torch.float64),
                          torch.zeros(1, 0, n, dtype=torch.float64))
    model._seen[:] = False
    assert model._rank_bound(np.array([0])).tolist() == [n]


def test_the_memory_bound_formulas() -> None:
    assert max_rows(2500, 200) == 201 and max_rows(320, 1000) == 641
    assert factor_bytes(2500, 200) == 8 * 2500 * (4 * 201 + 4)
    assert job_bytes(3, 320, 100) == 3 * factor_bytes(320, 100) + 8 * 320 * 101 * 8 * 3
    # the old rule's worst case at n = 2,500, T = 1,000 was (2n, n) rows per member: the bound is T + 1 rows
    assert factor_bytes(2500, 1000) < 8 * 2500 * 5000 * 4


def test_memory_batch_fits_the_available_memory() -> None:
    available = 24 * 2**30
    b = memory_batch(2500, 1000, 2, available=available)
    assert job_bytes(b, 2500, 1000) <= MEMORY_SHARE * available / 2 < job_bytes(b + 1, 2500, 1000)
    assert memory_batch(2500, 200, 2, available=available) > b  # shorter searches: more members
    assert memory_batch(20000, 1000, 2, available=2**20) == 1  # never zero: one search cannot be split

"""The GP in N dimensions: the ARD RBF is a product kernel over mixed axes, and GP-UCB finds a 4-D optimum region."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from dphypo.simulation.batched import simulate_batched
from dphypo.simulation.landscapes import Landscape
from dphypo.space import Float, Int, IntGrid, LogFloat, SearchSpace
from dphypo.strategies import GPUCB, Uniform
from dphypo.strategies.gp.posterior import GridFactors


def _mixed_space() -> SearchSpace:
    return SearchSpace({
        "lr": LogFloat(1e-3, 1e-1, 4),
        "clip": Float(0.5, 2.0, 3),
        "batch": IntGrid((32, 64, 128, 256), scale="log"),
        "epochs": Int(5, 15, 5),
    }, privacy_roles={"batch": "batch_size", "epochs": "epochs"})


@pytest.mark.parametrize("shuffle", [False, True])
def test_the_cross_kernel_is_the_ard_rbf_on_a_mixed_4d_grid(shuffle: bool) -> None:
    """exp(−½ Σ_d (x_d − g_d)²/ℓ_d²), on the product grid and on the same points in another order (no product)."""
    grid = np.asarray(_mixed_space().unit_coordinates)
    if shuffle:
        grid = grid[np.random.default_rng(0).permutation(grid.shape[0])]
    factors = GridFactors(grid)
    assert factors.is_product == (not shuffle)
    rng = np.random.default_rng(1)
    train = torch.as_tensor(rng.random((2, 5, 4)))
    lengthscale = torch.as_tensor(rng.uniform(0.1, 2.0, (2, 4)))
    got = factors.cross_kernel(train, lengthscale).numpy()
    diff = (train.numpy()[:, :, None, :] - grid[None, None, :, :]) / lengthscale.numpy()[:, None, None, :]
    np.testing.assert_allclose(got, np.exp(-0.5 * (diff**2).sum(-1)), rtol=1e-12, atol=0)


def _bump_landscape() -> tuple[Landscape, float]:
    """8 × 6 × 3 × 3 = 432 points (log lr, clip, log batch, log epochs); a Gaussian bump: 5 points in the top 1 %."""
    axes = {"lr": np.geomspace(1e-3, 1e-1, 8), "clip": np.linspace(0.5, 2.0, 6),
            "batch": np.array([32.0, 64.0, 128.0]), "epochs": np.array([5.0, 10.0, 20.0])}
    scales = {"lr": "log", "clip": "linear", "batch": "log", "epochs": "log"}
    units = np.meshgrid(*[np.linspace(0.0, 1.0, len(v)) for v in axes.values()], indexing="ij")
    distance = sum((u - c) ** 2 for u, c in zip(units, (0.75, 0.2, 0.5, 1.0), strict=True))
    mean = 0.3 + 0.6 * np.exp(-distance / 0.1)
    return Landscape.from_axes(mean, np.full(mean.shape, 0.02), axes, scales), float(np.quantile(mean, 0.99))


def test_gp_ucb_recovers_a_4d_optimum_region_better_than_chance() -> None:
    """GP-UCB lands in the top 1 % more often than uniform search can (exact chance, one-sided binomial test)."""
    land, threshold = _bump_landscape()
    top = int(np.count_nonzero(land.mean >= threshold))
    repeats, runs = 80, 20
    chance = 1.0 - (1.0 - top / land.size) ** runs  # uniform search: some run draws a top point (its best at most)
    strategy = GPUCB(C=10.0, c=0.1, beta=3.0, scale="standardized")
    gp = simulate_batched(land, strategy, repeats=repeats, T=runs, seed=1, workers=1)
    uniform = simulate_batched(land, Uniform(), repeats=repeats, T=runs, seed=1, workers=1)
    hits = int(np.count_nonzero(gp >= threshold))
    assert stats.binomtest(hits, repeats, chance, alternative="greater").pvalue < 1e-3
    assert gp.mean() > uniform.mean()  # and better on average, at equal seeds

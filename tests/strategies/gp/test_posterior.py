"""GridPosterior: conditioning a fitted GP on new observations equals the posterior computed from scratch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import dphypo.strategies.gp.fit as surrogate
import dphypo.strategies.gp.likelihood as likelihood
from dphypo.space import SearchSpace
from dphypo.strategies import GPUCB
from dphypo.strategies.gp.fit import fit_surrogate
from dphypo.strategies.gp.posterior import GridFactors, GridPosterior
from tests.strategies._feed import batch_densities_after, density_after


def _grid(lr: int = 8, clip: int = 5) -> np.ndarray:
    space = SearchSpace.from_grid(
        {"lr": np.geomspace(1e-4, 1.0, lr), "clip": np.linspace(0.1, 5.0, clip)}, {"lr": "log", "clip": "linear"}
    )
    return np.asarray(space.unit_coordinates)


def _scores(grid: np.ndarray, idx: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    x = grid[idx]
    bump = 0.2 + 0.75 * np.exp(-((x[..., 0] - 0.6) ** 2 / 0.08 + (x[..., 1] - 0.35) ** 2 / 0.15))
    return bump + 0.05 * rng.normal(size=idx.shape)


def _from_scratch(
    factors: GridFactors, idx: np.ndarray, y: np.ndarray, model: GridPosterior
) -> tuple[np.ndarray, np.ndarray]:
    """Posterior of all observations at the model's hyperparameters and standardisation, without conditioning."""
    targets = (torch.as_tensor(y) - model.loc[:, None]) / model.scale[:, None]
    data = likelihood.Replicates.of(factors, idx, targets)
    reference, factorised = surrogate._marginal_posterior(
        factors, data.x, data.means, model.loc, model.scale, model.hyper, data.weights
    )
    assert factorised.all()
    return reference.score_moments()


@pytest.mark.parametrize("extra", [1, 7, 40])
def test_conditioning_equals_the_posterior_from_scratch(extra: int) -> None:
    """Fit on 6 observations, condition on ``extra`` more (repeats included), one at a time."""
    grid = _grid()
    factors = GridFactors(grid)
    rng = np.random.default_rng(extra)
    members, first = 3, 6
    idx = rng.integers(0, grid.shape[0], size=(members, first + extra))
    y = _scores(grid, idx, rng)
    fit = fit_surrogate(factors, idx[:, :first], y[:, :first], seed=np.arange(members))
    assert fit.ok.all()
    model = fit.posterior
    for j in range(first, first + extra):
        model.condition(np.arange(members), idx[:, j], y[:, j])
    mean, std = model.score_moments()
    expected_mean, expected_std = _from_scratch(factors, idx, y, model)
    np.testing.assert_allclose(mean, expected_mean, rtol=0, atol=1e-9)
    np.testing.assert_allclose(std, expected_std, rtol=1e-7, atol=1e-9)


def test_compression_keeps_the_posterior() -> None:
    """A member that reaches 2n rows is compressed to n rows (QR) and later conditioning stays exact."""
    grid = _grid(3, 2)  # n = 6: 2n = 12 rows reached quickly
    factors = GridFactors(grid)
    rng = np.random.default_rng(1)
    idx = rng.integers(0, grid.shape[0], size=(2, 40))
    y = _scores(grid, idx, rng)
    fit = fit_surrogate(factors, idx[:, :5], y[:, :5], seed=[0, 1])
    model = fit.posterior
    for j in range(5, 40):
        model.condition(np.array([0, 1]), idx[:, j], y[:, j])
        assert model._rows.max() <= 2 * grid.shape[0]
    mean, std = model.score_moments()
    expected_mean, expected_std = _from_scratch(factors, idx, y, model)
    np.testing.assert_allclose(mean, expected_mean, rtol=0, atol=1e-9)
    np.testing.assert_allclose(std, expected_std, rtol=1e-7, atol=1e-9)


def test_members_are_conditioned_independently() -> None:
    """Conditioning a subset leaves the others untouched; a member's result does not depend on the batch."""
    grid = _grid()
    factors = GridFactors(grid)
    rng = np.random.default_rng(3)
    idx = rng.integers(0, grid.shape[0], size=(3, 12))
    y = _scores(grid, idx, rng)
    batch = fit_surrogate(factors, idx[:, :8], y[:, :8], seed=[0, 1, 2]).posterior
    before = batch.score_moments(np.array([1]))
    for j in range(8, 12):
        batch.condition(np.array([0, 2]), idx[[0, 2], j], y[[0, 2], j])
    np.testing.assert_array_equal(batch.score_moments(np.array([1]))[0], before[0])
    alone = fit_surrogate(factors, idx[2, :8], y[2, :8], seed=2).posterior
    for j in range(8, 12):
        alone.condition(np.array([0]), idx[2, j : j + 1], y[2, j : j + 1])
    np.testing.assert_allclose(batch.score_moments(np.array([2]))[0], alone.score_moments()[0], atol=1e-9)


# ------------------------------------------------------------------------------------------ refit schedule
class _CountingFit:
    """Wraps fit_surrogate and records the number of observations of every fit."""

    def __init__(self) -> None:
        self.steps: list[int] = []

    def __call__(self, grid, indices, scores, **kwargs):
        self.steps.append(np.shape(indices)[-1])
        return fit_surrogate(grid, indices, scores, **kwargs)


def _space() -> SearchSpace:
    return SearchSpace.from_grid(
        {"lr": np.geomspace(1e-4, 1.0, 8), "clip": np.linspace(0.1, 5.0, 5)}, {"lr": "log", "clip": "linear"}
    )


def test_refit_schedule_and_exact_conditioning_in_between(monkeypatch: pytest.MonkeyPatch) -> None:
    """r = 0.5: usable fits at t = 2, 3, 5, 8, 12, 18 over 20 steps; in between, the density is the rule applied to the
    exact posterior of all observations at the last fit's hyperparameters."""
    space = _space()
    counting = _CountingFit()
    monkeypatch.setattr(surrogate, "fit_surrogate", counting)
    strategy = GPUCB(refit_growth=0.5)
    session = strategy.start(space, "maximize", seed=5)
    rng = np.random.default_rng(5)
    idx = rng.integers(0, space.size, size=20)
    y = _scores(np.asarray(space.unit_coordinates), idx, rng)
    for t in range(1, 21):
        density = density_after(session, list(zip(idx[:t].tolist(), y[:t].tolist(), strict=True)))
    assert counting.steps == [1, 2, 3, 5, 8, 12, 18]  # t = 1 is attempted and unusable (one observation)
    model = session._batch._model
    assert model is not None
    mean, std = _from_scratch(GridFactors(np.asarray(space.unit_coordinates)), idx[None], y[None], model)
    loc, scale = model.standardization(np.array([0]))
    expected = strategy.densities(mean, std, loc, scale, np.asarray(space.prior))[0]
    np.testing.assert_allclose(density, expected, rtol=1e-8, atol=1e-12)


def test_zero_growth_refits_every_step(monkeypatch: pytest.MonkeyPatch) -> None:
    counting = _CountingFit()
    monkeypatch.setattr(surrogate, "fit_surrogate", counting)
    space = _space()
    session = GPUCB().start(space, "maximize", seed=1)
    rng = np.random.default_rng(1)
    idx = rng.integers(0, space.size, size=8)
    y = _scores(np.asarray(space.unit_coordinates), idx, rng)
    for t in range(1, 9):
        density_after(session, list(zip(idx[:t].tolist(), y[:t].tolist(), strict=True)))
    assert counting.steps == [1, 2, 3, 4, 5, 6, 7, 8]


def test_batched_update_equals_one_member_sessions() -> None:
    """The simulator's lockstep update and the tuner's one-member density follow the same schedule and values."""
    space = _space()
    strategy = GPUCB(refit_growth=0.3)
    rng = np.random.default_rng(4)
    idx = rng.integers(0, space.size, size=(3, 15))
    y = _scores(np.asarray(space.unit_coordinates), idx, rng)
    batch = strategy.start_batch(space, "maximize", [7, 8, 9])
    singles = [strategy.start(space, "maximize", seed=s) for s in (7, 8, 9)]
    for t in range(15):
        densities = batch_densities_after(batch, idx[:, :t], y[:, :t])
        for b, single in enumerate(singles):
            one = density_after(single, list(zip(idx[b, :t].tolist(), y[b, :t].tolist(), strict=True)))
            np.testing.assert_allclose(densities[b], one, rtol=1e-9, atol=1e-14)


def test_refit_growth_is_validated() -> None:
    with pytest.raises(ValueError, match="refit_growth"):
        GPUCB(refit_growth=-0.1)
    with pytest.raises(ValueError, match="refit_growth"):
        GPUCB(refit_growth=float("inf"))

"""Batched GP fits against the sequential :func:`dphypo.surrogate.fit_surrogate`, member by member."""

from __future__ import annotations

import numpy as np
import pytest
from linear_operator.utils.errors import NotPSDError

from dphypo import _batched_gp
from dphypo._batched_gp import GridFactors, fit_surrogate_batch
from dphypo.space import SearchSpace
from dphypo.surrogate import fit_surrogate

#: Posterior agreement with the sequential fit, relative to the scores' spread (mean) or to std itself. The
#: hyperparameters agree to ~1e-9 relative (both runs follow scipy's L-BFGS-B iterates); posteriors to ~1e-11.
TOLERANCE = 1e-8


def _grid(lr: int = 12, clip: int = 10) -> np.ndarray:
    space = SearchSpace.from_grid(
        {"lr": np.geomspace(1e-4, 1.0, lr), "clip": np.linspace(0.1, 5.0, clip)},
        {"lr": "log", "clip": "linear"},
    )
    return np.asarray(space.unit_coordinates)


def _data(grid: np.ndarray, members: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, grid.shape[0], size=(members, k))
    x = grid[idx]
    y = 0.1 + 0.85 * np.exp(-((x[..., 0] - 0.3) ** 2 + (x[..., 1] - 0.7) ** 2) / 0.05)
    return idx, y + 0.03 * rng.normal(size=y.shape)


def _assert_rows_match_sequential(grid, idx, y, seeds, fit, rows) -> None:
    for b in rows:
        reference = fit_surrogate(grid, idx[b], y[b], seed=int(seeds[b]))
        assert fit.ok[b] == reference.ok
        assert fit.score_loc[b] == pytest.approx(reference.score_loc, rel=1e-14)
        if reference.ok:
            spread = np.ptp(y[b])
            np.testing.assert_allclose(fit.mean[b], reference.mean, rtol=0, atol=TOLERANCE * spread)
            np.testing.assert_allclose(fit.std[b], reference.std, rtol=TOLERANCE)
        else:
            assert np.all(np.isnan(fit.mean[b])) and np.all(np.isnan(fit.std[b]))


@pytest.mark.parametrize("k", [2, 6, 15])
def test_every_member_matches_its_sequential_fit(k: int) -> None:
    grid = _grid()
    idx, y = _data(grid, members=12, k=k, seed=k)
    y[4] = 0.5  # all-equal scores: not fitted, exactly as fit_surrogate refuses them
    seeds = np.arange(12) + 100
    fit = fit_surrogate_batch(grid, idx, y, seeds=seeds)
    assert not fit.ok[4] and fit.ok.sum() == 11 and not fit.refitted.any()
    _assert_rows_match_sequential(grid, idx, y, seeds, fit, rows=[0, 4, 7])


def test_a_single_observation_is_never_fitted() -> None:
    grid = _grid()
    fit = fit_surrogate_batch(grid, np.array([[3], [5]]), np.array([[0.2], [0.4]]), seeds=np.array([0, 1]))
    assert not fit.ok.any() and np.isnan(fit.score_scale).all() and fit.mean.shape == (2, grid.shape[0])


def test_grids_that_are_not_a_product_in_c_order_are_handled() -> None:
    grid = _grid()
    shuffled = grid[np.random.default_rng(0).permutation(grid.shape[0])]
    factors = GridFactors(shuffled)
    assert GridFactors(grid).is_product and not factors.is_product
    idx, y = _data(shuffled, members=4, k=5, seed=1)
    fit = fit_surrogate_batch(factors, idx, y, seeds=np.arange(4))
    _assert_rows_match_sequential(shuffled, idx, y, np.arange(4), fit, rows=[0])


def test_cross_kernel_is_the_rbf_kernel() -> None:
    import torch

    for grid in (_grid(5, 4), _grid(5, 4)[::-1].copy()):
        factors = GridFactors(grid)
        x = torch.rand(3, 4, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
        ls = torch.tensor([[0.2, 0.5], [1.0, 0.05], [0.3, 0.3]], dtype=torch.float64)
        g = torch.tensor(grid)
        direct = torch.exp(-0.5 * (((x[:, :, None, :] - g) / ls[:, None, None, :]) ** 2).sum(-1))
        torch.testing.assert_close(factors.cross_kernel(x, ls), direct, rtol=1e-12, atol=1e-300)


def test_a_member_whose_evaluation_raises_does_not_break_the_others(monkeypatch) -> None:
    """A batch containing the bad member raises; it is split until the bad member is fitted alone."""
    grid = _grid()
    idx, y = _data(grid, members=9, k=6, seed=3)
    seeds = np.arange(9)
    clean = fit_surrogate_batch(grid, idx, y, seeds=seeds)
    bad_row = y[5].copy()
    original = _batched_gp._fit_and_predict

    def raising(factors, part_idx, part_y):
        if any(np.array_equal(row, bad_row) for row in part_y):
            raise NotPSDError("injected")
        return original(factors, part_idx, part_y)

    monkeypatch.setattr(_batched_gp, "_fit_and_predict", raising)
    fit = fit_surrogate_batch(grid, idx, y, seeds=seeds)
    assert fit.refitted.tolist() == [b == 5 for b in range(9)]
    np.testing.assert_allclose(fit.mean, clean.mean, rtol=0, atol=1e-12)
    np.testing.assert_allclose(fit.std, clean.std, rtol=1e-12)
    _assert_rows_match_sequential(grid, idx, y, seeds, fit, rows=[5])


def test_members_that_botorch_would_retry_are_refitted_alone(monkeypatch) -> None:
    """A failed first L-BFGS-B run makes BoTorch retry from the priors: replayed by fit_surrogate."""
    grid = _grid()
    idx, y = _data(grid, members=6, k=4, seed=4)
    seeds = np.arange(6) + 7
    original = _batched_gp._fit_lockstep

    def failing_two(train_x, train_y):
        model, hyper, accepted = original(train_x, train_y)
        accepted[[1, 4]] = False
        return model, hyper, accepted

    monkeypatch.setattr(_batched_gp, "_fit_lockstep", failing_two)
    fit = fit_surrogate_batch(grid, idx, y, seeds=seeds)
    assert fit.refitted.tolist() == [False, True, False, False, True, False]
    _assert_rows_match_sequential(grid, idx, y, seeds, fit, rows=[1, 4])


def test_arguments_are_validated() -> None:
    grid = _grid()
    with pytest.raises(ValueError, match="indices"):
        fit_surrogate_batch(grid, np.array([1, 2]), np.array([0.1, 0.2]), seeds=np.array([0]))
    with pytest.raises(ValueError, match="indices must lie"):
        fit_surrogate_batch(grid, np.array([[1, 999]]), np.array([[0.1, 0.2]]), seeds=np.array([0]))
    with pytest.raises(ValueError, match="finite"):
        fit_surrogate_batch(grid, np.array([[1, 2]]), np.array([[0.1, np.nan]]), seeds=np.array([0]))
    with pytest.raises(ValueError, match="seeds"):
        fit_surrogate_batch(grid, np.array([[1, 2]]), np.array([[0.1, 0.2]]), seeds=np.array([-1]))
    with pytest.raises(ValueError, match="grid"):
        GridFactors(np.array([[0.0, 2.0]]))


@pytest.mark.parametrize("k", [2, 9])
def test_closed_form_loss_is_botorchs_loss_closure(k: int) -> None:
    """Value and gradient of the batched loss equal BoTorch's own closure on random hyperparameters."""
    import torch
    from botorch.models import SingleTaskGP
    from botorch.models.transforms.outcome import Standardize
    from botorch.optim.closures import BatchedNDarrayOptimizationClosure, get_loss_closure
    from botorch.optim.utils import get_parameters_and_bounds
    from gpytorch.mlls import ExactMarginalLogLikelihood

    grid = _grid()
    idx, y = _data(grid, members=16, k=k, seed=k)
    x, t = torch.as_tensor(grid[idx]), torch.as_tensor(y).unsqueeze(-1)
    model = SingleTaskGP(x, t, outcome_transform=Standardize(m=1, batch_shape=torch.Size([16])))
    mll = ExactMarginalLogLikelihood(model.likelihood, model)
    mll.train()
    parameters = {n: p for n, p in get_parameters_and_bounds(mll)[0].items() if p.requires_grad}
    reference = BatchedNDarrayOptimizationClosure(get_loss_closure(mll), parameters, torch.Size([16]))
    rng = np.random.default_rng(0)
    state = reference.state * np.exp(rng.normal(scale=0.7, size=reference.state.shape))
    state[:, 1] = rng.normal(size=16)
    rows = list(range(0, 16, 2))
    expected_loss, expected_grad = reference(state[rows].copy(), batch_indices=rows)
    loss, grad = _batched_gp._NegativeMarginalLogLikelihood(model)(state[rows], rows)
    np.testing.assert_allclose(loss, expected_loss, rtol=1e-12)
    np.testing.assert_allclose(grad, expected_grad, rtol=1e-9, atol=1e-12)

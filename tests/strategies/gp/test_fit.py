"""The one GP fit (dphypo.strategies.surrogate): accuracy, batch = members fitted alone, BoTorch agreement, failures."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from botorch.exceptions.errors import ModelFittingError
from botorch.exceptions.warnings import OptimizationWarning
from linear_operator.utils.errors import NotPSDError

import dphypo.strategies.gp.fit as surrogate
import dphypo.strategies.gp.likelihood as likelihood
from dphypo.space import SearchSpace
from dphypo.strategies.gp.fit import SurrogateFit, fit_surrogate
from dphypo.strategies.gp.posterior import GridFactors, GridPosterior

#: Agreement with BoTorch's own ``fit_gpytorch_mll`` on the same model, relative to the scores' spread (mean) or
#: to std itself: both follow scipy's L-BFGS-B iterates, so hyperparameters agree to ~1e-9, posteriors ~1e-11.
TOLERANCE = 1e-8


def _grid(n1: int, n2: int) -> np.ndarray:
    """Regular grid on [0, 1]^2, shape (n1*n2, 2), C order."""
    u1, u2 = np.meshgrid(np.linspace(0, 1, n1), np.linspace(0, 1, n2), indexing="ij")
    return np.stack([u1.ravel(), u2.ravel()], axis=-1)


def _space_grid(lr: int = 12, clip: int = 10) -> np.ndarray:
    space = SearchSpace.from_grid(
        {"lr": np.geomspace(1e-4, 1.0, lr), "clip": np.linspace(0.1, 5.0, clip)},
        {"lr": "log", "clip": "linear"},
    )
    return np.asarray(space.unit_coordinates)


def _bump(x: np.ndarray) -> np.ndarray:
    """Smooth test function on [0, 1]^2 with values in (0.2, 0.95], shape x.shape[:-1]."""
    return 0.2 + 0.75 * np.exp(-((x[..., 0] - 0.6) ** 2 / 0.08 + (x[..., 1] - 0.35) ** 2 / 0.15))


def _data(grid: np.ndarray, members: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, grid.shape[0], size=(members, k))
    return idx, _bump(grid[idx]) + 0.03 * rng.normal(size=(members, k))


def _botorch_reference(grid: np.ndarray, idx: np.ndarray, y: np.ndarray, seed: int) -> tuple:
    """BoTorch's own fit_gpytorch_mll on the same model (the retry path, here used as the reference).

    Returns ``(mean, std, reason, warnings, hyper)`` (mean and std ``nan`` when the fit failed).
    """
    posterior, reason, caught, hyper = surrogate._fit_alone(GridFactors(grid), idx, y, seed)
    if posterior is None:
        failed = np.full(grid.shape[0], np.nan)
        return failed, failed, reason, caught, hyper
    mean, std = posterior.score_moments()
    return mean[0], std[0], reason, caught, hyper


# ---------------------------------------------------------------------------------------------- the model
def test_interpolates_smooth_function() -> None:
    grid = _grid(20, 20)
    indices = np.random.default_rng(0).choice(grid.shape[0], size=60, replace=False)
    fit = fit_surrogate(grid, indices, _bump(grid[indices]), seed=0)
    assert fit.ok.shape == () and fit.ok and fit.reasons == (None,)
    assert fit.mean.shape == fit.std.shape == (grid.shape[0],)
    # Function range is 0.75; a sensible GP on 60 of 400 points is within a few percent of it everywhere.
    assert np.max(np.abs(fit.mean - _bump(grid))) < 0.03
    assert np.max(np.abs(fit.mean[indices] - _bump(grid[indices]))) < 0.01
    assert fit.score_loc == pytest.approx(_bump(grid[indices]).mean())
    assert fit.score_scale == pytest.approx(_bump(grid[indices]).std(ddof=1))


def test_std_small_at_observations_and_large_far_away() -> None:
    grid = _grid(20, 20)
    near = np.flatnonzero(grid[:, 0] <= 0.35)
    far = np.flatnonzero(grid[:, 0] >= 0.9)
    indices = near[::3]
    fit = fit_surrogate(grid, indices, _bump(grid[indices]), seed=1)
    assert fit.ok and np.all(fit.std >= 0)
    assert fit.std[far].min() > 5 * fit.std[indices].max()


@pytest.mark.parametrize("k", [2, 6, 15])
def test_matches_botorchs_own_fit(k: int) -> None:
    """The lockstep L-BFGS-B with the closed-form loss ends where BoTorch's fit_gpytorch_mll ends."""
    grid = _space_grid()
    idx, y = _data(grid, members=3, k=k, seed=k)
    fit = fit_surrogate(grid, idx, y, seed=np.arange(3))
    assert fit.ok.all() and not fit.refitted.any()
    for b in range(3):
        mean, std, reason, _, _ = _botorch_reference(grid, idx[b], y[b], b)
        assert reason is None
        np.testing.assert_allclose(fit.mean[b], mean, rtol=0, atol=TOLERANCE * np.ptp(y[b]))
        np.testing.assert_allclose(fit.std[b], std, rtol=TOLERANCE)


def test_batch_members_equal_the_batch_of_one() -> None:
    """Batch-native: member b of a batch is the fit of its own data alone (the tuner's batch of one)."""
    grid = _space_grid()
    idx, y = _data(grid, members=10, k=7, seed=3)
    y[4] = 0.5  # all-equal scores: not fitted
    batch = fit_surrogate(grid, idx.reshape(2, 5, 7), y.reshape(2, 5, 7), seed=np.arange(10).reshape(2, 5))
    assert batch.mean.shape == (2, 5, grid.shape[0]) and batch.ok.shape == (2, 5)
    assert batch.ok.ravel().tolist() == [b != 4 for b in range(10)]
    assert "all equal" in str(batch.reasons[4])
    for b in range(10):
        alone = fit_surrogate(grid, idx[b], y[b], seed=b)
        assert bool(alone.ok) == batch.ok.ravel()[b]
        np.testing.assert_allclose(batch.mean.reshape(10, -1)[b], alone.mean, rtol=1e-10, atol=1e-12, equal_nan=True)
        np.testing.assert_allclose(batch.std.reshape(10, -1)[b], alone.std, rtol=1e-9, equal_nan=True)


def test_closed_form_loss_is_botorchs_loss_closure() -> None:
    """Value and gradient of the replicate-reduced loss equal BoTorch's own closure on all observations.

    The reduced loss includes the within-point term and its constants, so it is the same function exactly,
    not just up to a constant (issue #15).
    """
    from botorch.models import SingleTaskGP
    from botorch.models.transforms.outcome import Standardize
    from botorch.optim.closures import BatchedNDarrayOptimizationClosure, get_loss_closure
    from botorch.optim.utils import get_parameters_and_bounds
    from gpytorch.mlls import ExactMarginalLogLikelihood

    grid = _space_grid()
    for k, points in ((2, 120), (9, 120), (40, 12)):  # the last with many replicates (40 draws from 12 points)
        idx, y = _data(grid, members=16, k=k, seed=k)
        idx = idx % points
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
        data = likelihood.Replicates.of(GridFactors(grid), idx, model.train_targets)
        loss, grad = likelihood.NegativeMarginalLogLikelihood(data)(state[rows], rows)
        np.testing.assert_allclose(loss, expected_loss, rtol=1e-12)
        np.testing.assert_allclose(grad, expected_grad, rtol=1e-9, atol=1e-12)


def test_grids_that_are_not_a_product_in_c_order_are_handled() -> None:
    grid = _space_grid()
    shuffled = grid[np.random.default_rng(0).permutation(grid.shape[0])]
    factors = GridFactors(shuffled)
    assert GridFactors(grid).is_product and not factors.is_product
    idx, y = _data(shuffled, members=2, k=5, seed=1)
    fit = fit_surrogate(factors, idx, y, seed=np.arange(2))
    mean, std, _, _, _ = _botorch_reference(shuffled, idx[0], y[0], 0)
    np.testing.assert_allclose(fit.mean[0], mean, rtol=0, atol=TOLERANCE * np.ptp(y[0]))
    np.testing.assert_allclose(fit.std[0], std, rtol=TOLERANCE)


def test_cross_kernel_is_the_rbf_kernel() -> None:
    for grid in (_space_grid(5, 4), _space_grid(5, 4)[::-1].copy()):
        factors = GridFactors(grid)
        x = torch.rand(3, 4, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
        ls = torch.tensor([[0.2, 0.5], [1.0, 0.05], [0.3, 0.3]], dtype=torch.float64)
        g = torch.tensor(grid)
        direct = torch.exp(-0.5 * (((x[:, :, None, :] - g) / ls[:, None, None, :]) ** 2).sum(-1))
        torch.testing.assert_close(factors.cross_kernel(x, ls), direct, rtol=1e-12, atol=1e-300)


# ------------------------------------------------------------------------------------ BoTorch's retry path
def test_a_member_whose_evaluation_raises_does_not_break_the_others(monkeypatch) -> None:
    """A batch containing the bad member raises; it is split until the bad member is fitted alone."""
    grid = _space_grid()
    idx, y = _data(grid, members=9, k=6, seed=3)
    clean = fit_surrogate(grid, idx, y, seed=np.arange(9))
    bad_row = y[5].copy()
    original = surrogate._fit_and_predict

    def raising(factors, part_idx, part_y, start):
        if any(np.array_equal(row, bad_row) for row in part_y):
            raise NotPSDError("injected")
        return original(factors, part_idx, part_y, start)

    monkeypatch.setattr(surrogate, "_fit_and_predict", raising)
    fit = fit_surrogate(grid, idx, y, seed=np.arange(9))
    assert fit.refitted.tolist() == [b == 5 for b in range(9)]
    np.testing.assert_allclose(fit.mean, clean.mean, rtol=0, atol=TOLERANCE * np.ptp(y))
    np.testing.assert_allclose(fit.std, clean.std, rtol=TOLERANCE)


def test_members_that_botorch_would_retry_go_through_botorch(monkeypatch) -> None:
    """A failed first L-BFGS-B run makes BoTorch retry from the priors: that member is BoTorch's own fit."""
    grid = _space_grid()
    idx, y = _data(grid, members=6, k=4, seed=4)
    original = surrogate._fit_lockstep

    def failing_two(data, start):
        hyper, status = original(data, start)
        status[[1, 4]] = 2
        return hyper, status

    monkeypatch.setattr(surrogate, "_fit_lockstep", failing_two)
    fit = fit_surrogate(grid, idx, y, seed=np.arange(6) + 7)
    assert fit.refitted.tolist() == [False, True, False, False, True, False]
    for b in (1, 4):
        mean, std, _, _, _ = _botorch_reference(grid, idx[b], y[b], b + 7)
        np.testing.assert_array_equal(fit.mean[b], mean)
        np.testing.assert_array_equal(fit.std[b], std)


def _retry_everyone(monkeypatch: pytest.MonkeyPatch) -> None:
    original = surrogate._fit_lockstep

    def never_accepted(data, start):
        hyper, status = original(data, start)
        return hyper, np.full_like(status, 2)

    monkeypatch.setattr(surrogate, "_fit_lockstep", never_accepted)


def test_seeded_fit_is_bit_reproducible_and_leaves_global_rng_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    _retry_everyone(monkeypatch)  # the only path that uses torch's RNG
    grid = _grid(12, 10)
    rng = np.random.default_rng(2)
    indices = rng.integers(0, grid.shape[0], size=25)
    scores = _bump(grid[indices]) + rng.normal(0, 0.05, size=25)
    torch.manual_seed(1234)
    state_before = torch.get_rng_state()
    first = fit_surrogate(grid, indices, scores, seed=7)
    assert torch.equal(torch.get_rng_state(), state_before)
    second = fit_surrogate(grid, indices, scores, seed=7)
    assert first.ok and second.ok and first.refitted
    assert np.array_equal(first.mean, second.mean) and np.array_equal(first.std, second.std)


def test_retry_resampling_uses_the_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    # Make every first optimisation attempt "fail" so BoTorch re-samples hyperparameters from the priors
    # with torch's global RNG; the seed must then decide the result.
    _retry_everyone(monkeypatch)
    real_fit = surrogate.fit_gpytorch_mll

    def fit_with_retries(mll: object) -> object:
        calls = {"n": 0}

        def flaky_optimizer(mll_: object, closure: object = None, **kwargs: object) -> object:
            from botorch.optim.fit import fit_gpytorch_mll_scipy

            calls["n"] += 1
            if calls["n"] == 1:
                raise NotImplementedError("attempt 1 fails")
            return fit_gpytorch_mll_scipy(mll_, closure=closure, **kwargs)

        return real_fit(mll, optimizer=flaky_optimizer, caught_exception_types=(NotImplementedError,))

    monkeypatch.setattr(surrogate, "fit_gpytorch_mll", fit_with_retries)
    grid = _grid(10, 10)
    rng = np.random.default_rng(3)
    indices = rng.integers(0, grid.shape[0], size=15)
    scores = _bump(grid[indices]) + rng.normal(0, 0.05, size=15)
    a = fit_surrogate(grid, indices, scores, seed=11)
    b = fit_surrogate(grid, indices, scores, seed=11)
    c = fit_surrogate(grid, indices, scores, seed=12)
    assert a.ok and b.ok and c.ok
    assert np.array_equal(a.mean, b.mean) and np.array_equal(a.std, b.std)
    assert not np.array_equal(a.std, c.std)


def test_fit_error_reports_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    _retry_everyone(monkeypatch)

    def failing_fit(mll: object) -> None:
        raise ModelFittingError("All attempts to fit the model have failed.")

    monkeypatch.setattr(surrogate, "fit_gpytorch_mll", failing_fit)
    fit = fit_surrogate(_grid(5, 5), [0, 12, 24], [0.1, 0.5, 0.2], seed=0)
    assert not fit.ok and np.all(np.isnan(fit.mean))
    assert fit.reasons[0] is not None and "ModelFittingError" in fit.reasons[0]


def test_warnings_are_recorded_not_emitted(monkeypatch: pytest.MonkeyPatch) -> None:
    _retry_everyone(monkeypatch)
    real_fit = surrogate.fit_gpytorch_mll

    def noisy_fit(mll: object) -> object:
        warnings.warn("synthetic optimiser complaint", OptimizationWarning, stacklevel=1)
        return real_fit(mll)

    monkeypatch.setattr(surrogate, "fit_gpytorch_mll", noisy_fit)
    with warnings.catch_warnings(record=True) as escaped:
        warnings.simplefilter("always")
        fit = fit_surrogate(_grid(6, 6), [0, 7, 20, 35], [0.1, 0.5, 0.3, 0.2], seed=0)
    assert fit.ok
    assert any("synthetic optimiser complaint" in w for w in fit.warnings[0])
    assert not any("synthetic optimiser complaint" in str(w.message) for w in escaped)


# ------------------------------------------------------------------------------------------ degenerate data
@pytest.mark.parametrize(
    ("indices", "scores", "reason"),
    [
        ([], [], "at least 2"),
        ([3], [0.5], "at least 2"),
        ([1, 5, 9], [0.4, 0.4, 0.4], "all equal"),
    ],
)
def test_degenerate_data_reports_failure(indices: list[int], scores: list[float], reason: str) -> None:
    fit = fit_surrogate(_grid(5, 5), indices, scores, seed=0)
    assert isinstance(fit, SurrogateFit)
    assert not fit.ok and np.all(np.isnan(fit.mean)) and np.all(np.isnan(fit.std))
    assert fit.reasons[0] is not None and reason in fit.reasons[0]


def test_duplicate_observations_fit() -> None:
    grid = _grid(8, 8)
    fit = fit_surrogate(grid, [10, 10, 10, 10, 40, 40], [0.50, 0.52, 0.49, 0.51, 0.80, 0.78], seed=0)
    assert fit.ok and np.all(np.isfinite(fit.mean)) and np.all(np.isfinite(fit.std))
    assert fit.mean[40] > fit.mean[10]
    assert fit.mean[10] == pytest.approx(0.505, abs=0.03)


def test_non_finite_posterior_reports_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    def nan_predict(factors, idx, y, start):
        m, n = idx.shape[0], factors.grid.shape[0]
        ones = np.ones(m, dtype=bool)
        nan = torch.full((m, n), float("nan"), dtype=torch.float64)
        hyper = torch.as_tensor(start)
        posterior = GridPosterior(factors, hyper, torch.zeros(m, dtype=torch.float64),
                                  torch.ones(m, dtype=torch.float64), nan, torch.ones_like(nan),
                                  torch.zeros(m, 1, n, dtype=torch.float64))
        return posterior, ones, ~ones, start

    monkeypatch.setattr(surrogate, "_fit_and_predict", nan_predict)
    fit = fit_surrogate(_grid(5, 5), [0, 12, 24], [0.1, 0.5, 0.2], seed=0)
    assert not fit.ok and "not finite" in str(fit.reasons[0])


@pytest.mark.parametrize(
    ("grid", "indices", "scores", "seed", "match"),
    [
        (np.zeros(4), [0], [0.0], 0, "grid"),
        (np.full((4, 2), 1.5), [0], [0.0], 0, "grid"),
        (np.zeros((4, 2)), [4], [0.0], 0, "indices"),
        (np.zeros((4, 2)), [0.5], [0.0], 0, "indices"),
        (np.zeros((4, 2)), [0, 1], [0.0], 0, "scores"),
        (np.zeros((4, 2)), [0, 1], [0.0, np.nan], 0, "scores"),
        (np.zeros((4, 2)), [0, 1], [0.0, 1.0], -1, "seed"),
        (np.zeros((4, 2)), [[0, 1]], [[0.0, 1.0]], [0, 1], "seed"),
    ],
)
def test_invalid_arguments_raise(grid: np.ndarray, indices: list, scores: list, seed: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        fit_surrogate(grid, indices, scores, seed=seed)  # type: ignore[arg-type]


# ----------------------------------------------------------------------- replicated points (issue #15)
def _replicated(members: int, k: int, points: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """k observations per member drawn from the first ``points`` grid points (many replicates)."""
    grid = _space_grid()
    idx = _data(grid, members=members, k=k, seed=seed)[0] % points
    return grid, idx, _bump(grid[idx]) + 0.03 * np.random.default_rng(seed + 1).normal(size=idx.shape)


def _model(grid: np.ndarray, idx: np.ndarray, y: np.ndarray):
    from botorch.models import SingleTaskGP
    from botorch.models.transforms.outcome import Standardize

    x, t = torch.as_tensor(grid[idx]), torch.as_tensor(y).unsqueeze(-1)
    return SingleTaskGP(x, t, outcome_transform=Standardize(m=1, batch_shape=torch.Size([idx.shape[0]])))


def test_replicated_likelihood_factorises_exactly() -> None:
    """log N(ỹ | c, K + σ²I) = log N(ȳ | c, K_u + σ²N⁻¹) − (k−u)/2·log 2πσ² − ½Σ log n_i − ΣSS_i/(2σ²)."""
    from torch.distributions import MultivariateNormal

    grid, idx, y = _replicated(members=3, k=30, points=7, seed=5)
    model = _model(grid, idx, y)
    data = likelihood.Replicates.of(GridFactors(grid), idx, model.train_targets)
    noise, constant, lengthscale = 0.07, 0.2, torch.tensor([0.3, 0.6], dtype=torch.float64)
    for b in range(3):
        x, targets = torch.as_tensor(grid[idx[b]]), model.train_targets[b]
        k_full = torch.exp(-0.5 * (((x[:, None] - x[None]) / lengthscale) ** 2).sum(-1))
        eye = torch.eye(30, dtype=torch.float64)
        full = MultivariateNormal(torch.full((30,), constant, dtype=torch.float64), k_full + noise * eye)
        u = int(data.unique[b])
        xu, means, weights = data.x[b, :u], data.means[b, :u], data.weights[b, :u]
        k_u = torch.exp(-0.5 * (((xu[:, None] - xu[None]) / lengthscale) ** 2).sum(-1))
        reduced = MultivariateNormal(torch.full((u,), constant, dtype=torch.float64), k_u + torch.diag(noise * weights))
        n = np.bincount(idx[b])
        n = n[n > 0]
        groups = [targets.numpy()[idx[b] == i] for i in np.unique(idx[b])]
        ybar = np.array([group.mean() for group in groups])
        within = sum(((group - group.mean()) ** 2).sum() for group in groups)
        assert u == n.size < 30 and np.allclose(means.numpy(), ybar) and np.allclose(weights.numpy(), 1 / n)
        assert float(data.within[b]) == pytest.approx(within, rel=1e-12)
        constant_term = -(30 - u) / 2 * np.log(2 * np.pi * noise) - 0.5 * np.log(n).sum() - within / (2 * noise)
        assert float(full.log_prob(targets)) == pytest.approx(float(reduced.log_prob(means)) + constant_term, rel=1e-12)


def test_replicated_loss_and_gradient_equal_botorchs_mll_on_all_observations() -> None:
    """The reduced loss is ExactMarginalLogLikelihood (+ priors, / k) on the replicated data, gradient included."""
    from gpytorch.mlls import ExactMarginalLogLikelihood

    grid, idx, y = _replicated(members=4, k=50, points=9, seed=6)
    model = _model(grid, idx, y)
    data = likelihood.Replicates.of(GridFactors(grid), idx, model.train_targets)
    loss = likelihood.NegativeMarginalLogLikelihood(data)
    state = np.array([[0.05, 0.1, 0.4, 0.8], [0.3, -0.2, 0.2, 1.5], [1e-3, 0.0, 1.0, 0.1], [0.02, 0.5, 0.7, 0.7]])
    value, grad = loss(state, [0, 1, 2, 3])
    mll = ExactMarginalLogLikelihood(model.likelihood, model)
    mll.train()
    theta = torch.as_tensor(state)
    # The raw parameters are the hyperparameters themselves (BoTorch bounds them, no transform).
    with torch.no_grad():
        model.likelihood.noise_covar.raw_noise.copy_(theta[:, :1])
        model.mean_module.raw_constant.copy_(theta[:, 1])
        model.covar_module.raw_lengthscale.copy_(theta[:, None, 2:])
    full = -mll(model(*model.train_inputs), model.train_targets)  # divided by k, priors included
    full.sum().backward()
    np.testing.assert_allclose(value, full.detach().numpy(), rtol=1e-11)
    raw = [model.likelihood.noise_covar.raw_noise, model.mean_module.raw_constant, model.covar_module.raw_lengthscale]
    expected_grad = np.concatenate([p.grad.reshape(4, -1).numpy() for p in raw], axis=1)
    np.testing.assert_allclose(grad, expected_grad, rtol=1e-8, atol=1e-12)


def test_replicated_posterior_equals_the_full_data_posterior() -> None:
    """At the same hyperparameters the reduced posterior is the posterior given all observations (round-off)."""
    grid, idx, y = _replicated(members=5, k=40, points=15, seed=7)
    factors = GridFactors(grid)
    model = _model(grid, idx, y)
    data = likelihood.Replicates.of(factors, idx, model.train_targets)
    transform = model.outcome_transform
    offset, scale = transform.means.reshape(-1), transform.stdvs.reshape(-1)
    hyper = torch.tensor([[0.05, 0.1, 0.3, 0.5]] * 5, dtype=torch.float64) * torch.linspace(0.5, 2, 5)[:, None]
    train_x = factors.grid[torch.as_tensor(idx)]
    full, full_ok = surrogate._marginal_posterior(factors, train_x, model.train_targets, offset, scale, hyper)
    reduced, reduced_ok = surrogate._marginal_posterior(
        factors, data.x, data.means, offset, scale, hyper, data.weights
    )
    assert full_ok.all() and reduced_ok.all()
    (full_mean, full_std), (reduced_mean, reduced_std) = full.score_moments(), reduced.score_moments()
    np.testing.assert_allclose(reduced_mean, full_mean, rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(reduced_std, full_std, rtol=1e-9)


def test_replicated_members_of_a_padded_batch_equal_the_batch_of_one() -> None:
    """Members with different numbers of distinct points (padded in one batch) fit as they do alone."""
    grid, idx, y = _replicated(members=6, k=30, points=40, seed=8)
    idx[1] %= 5  # far fewer distinct points than the others
    idx[4] %= 12
    batch = fit_surrogate(grid, idx, y, seed=np.arange(6))
    assert batch.ok.all() and batch.hyper.shape == (6, 4)
    for b in range(6):
        alone = fit_surrogate(grid, idx[b], y[b], seed=b)
        np.testing.assert_allclose(batch.mean[b], alone.mean, rtol=1e-7, atol=1e-9)
        np.testing.assert_allclose(batch.std[b], alone.std, rtol=1e-6)


def test_warm_start_reaches_the_same_fit() -> None:
    """Started from the previous step's hyperparameters, the fit ends at the same optimum (optimiser tolerance)."""
    grid, idx, y = _replicated(members=4, k=60, points=60, seed=9)
    previous = fit_surrogate(grid, idx[:, :-1], y[:, :-1], seed=np.arange(4))
    cold = fit_surrogate(grid, idx, y, seed=np.arange(4))
    warm = fit_surrogate(grid, idx, y, seed=np.arange(4), start=previous.hyper)
    assert warm.ok.all() and cold.ok.all()
    np.testing.assert_allclose(warm.mean, cold.mean, rtol=0, atol=3e-3 * np.ptp(y))
    np.testing.assert_allclose(warm.hyper, cold.hyper, rtol=0.05)
    again = fit_surrogate(grid, idx, y, seed=np.arange(4), start=previous.hyper)
    assert np.array_equal(again.mean, warm.mean) and np.array_equal(again.hyper, warm.hyper)  # deterministic
    unset = fit_surrogate(grid, idx, y, seed=np.arange(4), start=np.full(4, np.nan))
    assert np.array_equal(unset.mean, cold.mean)  # a non-finite start is BoTorch's default start
    with pytest.raises(ValueError, match="start"):
        fit_surrogate(grid, idx, y, seed=np.arange(4), start=np.zeros(3))


def test_without_botorchs_batched_optimiser_every_member_is_fitted_by_fit_gpytorch_mll(monkeypatch) -> None:
    """The batched L-BFGS-B is not documented BoTorch API: without it BoTorch's own fit is the explicit fallback."""
    grid = _space_grid()
    idx, y = _data(grid, members=3, k=5, seed=9)
    batched = fit_surrogate(grid, idx, y, seed=np.arange(3) + 1)
    monkeypatch.setattr(surrogate, "fmin_l_bfgs_b_batched", None)
    fallback = fit_surrogate(grid, idx, y, seed=np.arange(3) + 1)
    assert fallback.refitted.all() and not batched.refitted.any()
    for b in range(3):
        mean, std, _, _, _ = _botorch_reference(grid, idx[b], y[b], b + 1)
        np.testing.assert_array_equal(fallback.mean[b], mean)
        np.testing.assert_array_equal(fallback.std[b], std)
    # the two paths fit the same model: same posterior up to the optimisers' tolerance
    np.testing.assert_allclose(fallback.mean, batched.mean, rtol=1e-4, atol=1e-6)

"""Gaussian-process surrogate over a discrete hyperparameter grid (DP-HyPO Algorithm 3, the "refit GP" step).

The surrogate is a BoTorch ``SingleTaskGP`` (RBF kernel with dimension-scaled priors, inferred homoskedastic
noise, ``Standardize`` outcome transform) in float64 on the grid's unit coordinates, fitted by maximising the
exact marginal log-likelihood. It returns the *marginal* posterior mean and standard deviation of the latent
function (no observation noise) at every grid point.

Direction: the surrogate is a plain regression model and does not know whether scores are maximised or
minimised; it models the numbers it is given. Callers that minimise (losses) negate the scores first, as
:mod:`dphypo.strategies` does, so that "higher is better" downstream.

Failures never raise: degenerate data (fewer than two observations, all-equal scores), fitting errors and
non-finite posteriors return a :class:`SurrogateFit` with ``ok=False`` and a ``reason``, so the caller can
fall back deterministically. Invalid *arguments* (shapes, indices out of range, non-finite scores) raise
``ValueError`` eagerly.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dphypo._threads import limit_torch_threads

limit_torch_threads()

import torch  # noqa: E402
from botorch.exceptions.errors import BotorchError, ModelFittingError  # noqa: E402
from botorch.fit import fit_gpytorch_mll  # noqa: E402
from botorch.models import SingleTaskGP  # noqa: E402
from botorch.models.transforms.outcome import Standardize  # noqa: E402
from gpytorch.mlls import ExactMarginalLogLikelihood  # noqa: E402
from linear_operator.utils.errors import NanError, NotPSDError  # noqa: E402

__all__ = ["MIN_SCORE_STD", "SurrogateFit", "fit_surrogate"]

#: Observed scores whose standard deviation is below this are treated as all equal. It matches the
#: ``min_stdv`` of BoTorch's ``Standardize``, below which BoTorch stops scaling (the GP would see raw units).
MIN_SCORE_STD = 1e-8

# Rounding slack allowed on unit coordinates (e.g. log-space maps that land at 1 + 1e-16).
_UNIT_TOL = 1e-9

# Errors that mean "this data could not be fitted", as opposed to programming errors, which propagate.
_FIT_ERRORS: tuple[type[BaseException], ...] = (
    ModelFittingError,
    NotPSDError,
    NanError,
    BotorchError,
    torch.linalg.LinAlgError,
)


@dataclass(frozen=True)
class SurrogateFit:
    """Result of one surrogate fit.

    Attributes:
        mean: Posterior mean of the latent function at every grid point, shape ``(n,)``, in the units of the
            scores that were fitted; ``None`` if ``ok`` is False.
        std: Posterior standard deviation (``observation_noise=False``) at every grid point, shape ``(n,)``,
            in score units; ``None`` if ``ok`` is False.
        ok: Whether the fit succeeded and the posterior is finite.
        reason: Why the fit failed (``None`` when ``ok``).
        score_loc: Mean of the fitted scores (the ``Standardize`` offset).
        score_scale: Sample standard deviation (ddof=1) of the fitted scores (the ``Standardize`` scale);
            ``nan`` with fewer than two scores. ``(mean - score_loc) / score_scale`` is the GP's
            standardised space.
        warnings: Warnings emitted by BoTorch/GPyTorch during the fit, as ``"Category: message"`` strings.
            They are recorded here instead of being shown to the user.
    """

    mean: np.ndarray | None
    std: np.ndarray | None
    ok: bool
    reason: str | None
    score_loc: float
    score_scale: float
    warnings: tuple[str, ...] = ()


def fit_surrogate(
    grid: np.ndarray,
    indices: Sequence[int] | np.ndarray,
    scores: Sequence[float] | np.ndarray,
    *,
    seed: int,
) -> SurrogateFit:
    """Fit a GP to ``scores`` observed at ``grid[indices]`` and return the marginal posterior on the grid.

    The fit is reproducible: BoTorch re-samples hyperparameters from their priors with torch's *global* RNG
    when an optimisation attempt fails, so the fit runs inside ``torch.random.fork_rng`` seeded with
    ``seed``; the caller's RNG state is left untouched.

    Args:
        grid: Unit coordinates of all grid points, shape ``(n, d)``, float, every entry in ``[0, 1]``.
        indices: Grid index of each observation, shape ``(k,)``; repeats are allowed (noisy re-evaluations).
        scores: Observed score of each observation, shape ``(k,)``, finite; higher and lower are treated
            alike (negate minimised scores before calling).
        seed: Non-negative integer seeding torch's RNG for the fit.

    Returns:
        A :class:`SurrogateFit` with mean and std of shape ``(n,)``; ``ok=False`` with a reason if there are
        fewer than two observations, the scores are all equal, the fit fails or the posterior is not finite.

    Raises:
        ValueError: If an argument is malformed (shapes, range, non-finite values, negative seed).
    """
    grid_arr, idx, y = _validate_inputs(grid, indices, scores, seed)
    loc = float(y.mean()) if y.size else float("nan")
    scale = float(y.std(ddof=1)) if y.size >= 2 else float("nan")

    if y.size < 2:
        return _failed(f"need at least 2 observations, got {y.size}", loc, scale)
    if not scale >= MIN_SCORE_STD:
        return _failed(f"observed scores are all equal (std {scale:.3g} < {MIN_SCORE_STD:g})", loc, scale)

    with warnings.catch_warnings(record=True) as caught, torch.random.fork_rng(devices=[]):
        warnings.simplefilter("always")
        torch.manual_seed(seed)
        try:
            mean, std = _fit_and_predict(grid_arr, idx, y)
        except _FIT_ERRORS as err:
            recorded = _format_warnings(caught)
            return _failed(f"GP fit failed: {type(err).__name__}: {err}", loc, scale, recorded)
    recorded = _format_warnings(caught)

    if not (np.all(np.isfinite(mean)) and np.all(np.isfinite(std))):
        return _failed("GP posterior is not finite", loc, scale, recorded)
    return SurrogateFit(mean=mean, std=std, ok=True, reason=None, score_loc=loc, score_scale=scale,
                        warnings=recorded)


def _fit_and_predict(grid: np.ndarray, idx: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Build, fit and query the GP; may raise any of ``_FIT_ERRORS``.

    Args:
        grid: Unit coordinates, shape ``(n, d)``.
        idx: Observation grid indices, shape ``(k,)``.
        y: Observation scores, shape ``(k,)``.

    Returns:
        Posterior mean and std on the grid, each shape ``(n,)``.
    """
    grid_t = torch.as_tensor(grid, dtype=torch.float64)
    train_x = grid_t[torch.as_tensor(idx, dtype=torch.long)]
    train_y = torch.as_tensor(y, dtype=torch.float64).unsqueeze(-1)
    # Inputs are already in the unit cube (no input transform); outputs are standardised by the transform,
    # so BoTorch's input-scaling check passes and stays on as a guard.
    model = SingleTaskGP(train_x, train_y, outcome_transform=Standardize(m=1))
    mll = ExactMarginalLogLikelihood(model.likelihood, model)
    fit_gpytorch_mll(mll)
    model.eval()
    with torch.no_grad():
        # A batch of n single points gives the marginals in O(n k^2) instead of an n x n joint covariance.
        posterior = model.posterior(grid_t.unsqueeze(-2), observation_noise=False)
        mean = posterior.mean.reshape(-1).numpy().copy()
        variance = posterior.variance.reshape(-1).clamp_min(0.0).numpy().copy()
    return mean, np.sqrt(variance)


def _validate_inputs(
    grid: np.ndarray,
    indices: Sequence[int] | np.ndarray,
    scores: Sequence[float] | np.ndarray,
    seed: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Check and convert the arguments of :func:`fit_surrogate`.

    Args:
        grid: Candidate unit coordinates, shape ``(n, d)``.
        indices: Observation grid indices, shape ``(k,)``.
        scores: Observation scores, shape ``(k,)``.
        seed: RNG seed.

    Returns:
        ``grid`` as float64 ``(n, d)``, indices as int64 ``(k,)`` and scores as float64 ``(k,)``.
    """
    grid_arr = np.asarray(grid, dtype=np.float64)
    if grid_arr.ndim != 2 or grid_arr.shape[0] == 0 or grid_arr.shape[1] == 0:
        raise ValueError(f"grid must have shape (n, d) with n, d >= 1, got shape {grid_arr.shape!r}")
    if not np.all(np.isfinite(grid_arr)) or grid_arr.min() < -_UNIT_TOL or grid_arr.max() > 1.0 + _UNIT_TOL:
        raise ValueError("grid must hold finite unit coordinates in [0, 1], got values outside [0, 1]")
    grid_arr = np.clip(grid_arr, 0.0, 1.0)
    idx = np.asarray(indices)
    if idx.size == 0:
        idx = idx.astype(np.int64)
    if idx.ndim != 1 or not np.issubdtype(idx.dtype, np.integer):
        raise ValueError(f"indices must be a 1-D sequence of integers, got {indices!r}")
    if idx.size and (idx.min() < 0 or idx.max() >= grid_arr.shape[0]):
        raise ValueError(f"indices must lie in [0, {grid_arr.shape[0]}), got {indices!r}")
    y = np.asarray(scores, dtype=np.float64)
    if y.shape != idx.shape:
        raise ValueError(f"scores must have the same shape as indices {idx.shape!r}, got {y.shape!r}")
    if not np.all(np.isfinite(y)):
        raise ValueError(f"scores must be finite (impute failed runs before fitting), got {scores!r}")
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    return grid_arr, idx.astype(np.int64), y


def _failed(reason: str, loc: float, scale: float, recorded: tuple[str, ...] = ()) -> SurrogateFit:
    """Build the ``ok=False`` result.

    Args:
        reason: Human-readable cause.
        loc: Mean of the observed scores.
        scale: Standard deviation of the observed scores.
        recorded: Warnings recorded before the failure.

    Returns:
        A failed :class:`SurrogateFit` with ``mean = std = None``.
    """
    return SurrogateFit(mean=None, std=None, ok=False, reason=reason, score_loc=loc, score_scale=scale,
                        warnings=recorded)


def _format_warnings(caught: list[warnings.WarningMessage]) -> tuple[str, ...]:
    """Turn recorded warnings into ``"Category: message"`` strings.

    Args:
        caught: Warnings recorded by ``warnings.catch_warnings(record=True)``.

    Returns:
        One string per warning, in emission order.
    """
    return tuple(f"{w.category.__name__}: {w.message}" for w in caught)

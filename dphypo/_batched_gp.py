"""Many independent GP surrogates at once: the fit of :mod:`dphypo.surrogate` for a batch of searches.

Member b of a batch is one simulated search at the same step; it gets its own BoTorch ``SingleTaskGP`` with
its own hyperparameters, exactly as :func:`dphypo.surrogate.fit_surrogate` would build it. The members are
stacked into one BoTorch model with batch shape ``(B,)`` and fitted with BoTorch's batched L-BFGS-B
(``botorch.optim.batched_lbfgs_b.fmin_l_bfgs_b_batched``): a port of scipy's L-BFGS-B that keeps one optimiser
state per member and only batches the evaluation of the loss and its gradient. The loss is BoTorch's (negative
exact marginal log-likelihood with the model's priors, per observation), evaluated in closed form for all
active members at once. Each member therefore follows the iterates scipy's L-BFGS-B follows in the sequential
fit — same start (the priors' modes), bounds, tolerances and stopping rules — and ends at the same
hyperparameters up to floating-point round-off (measured ~1e-8 relative; ``tests/test_batched_gp.py``).

What the sequential ``fit_gpytorch_mll`` does beyond its first attempt is not batched: a member whose first
L-BFGS-B run ends in a failure status (BoTorch then retries from hyperparameters sampled from the priors),
whose loss evaluation raises (a Cholesky failure, where GPyTorch would add jitter), or whose posterior
Cholesky fails is fitted on its own by :func:`dphypo.surrogate.fit_surrogate` with the member's seed, which
replays the sequential fit exactly. A batch whose evaluation raises is split in halves until the failing
members are isolated, so one bad member never changes the others' fits.

The marginal posterior on the grid is computed directly from the fitted hyperparameters (constant mean, RBF
kernel without outputscale, Gaussian noise, ``Standardize`` — BoTorch's default ``SingleTaskGP``; a different
default raises instead of silently computing something else), per member with its own Cholesky factor. The RBF
cross-covariance is built from per-dimension factors exp(−(x_d − g_d)²/(2ℓ_d²)) evaluated on the grid's
distinct coordinates only.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

from dphypo._threads import limit_torch_threads

limit_torch_threads()

import gpytorch  # noqa: E402
import torch  # noqa: E402
from botorch.models import SingleTaskGP  # noqa: E402
from botorch.models.transforms.outcome import Standardize  # noqa: E402
from gpytorch.kernels import RBFKernel  # noqa: E402
from gpytorch.likelihoods import GaussianLikelihood  # noqa: E402
from gpytorch.likelihoods.noise_models import HomoskedasticNoise  # noqa: E402
from gpytorch.means import ConstantMean  # noqa: E402
from gpytorch.mlls import ExactMarginalLogLikelihood  # noqa: E402
from gpytorch.priors import LogNormalPrior  # noqa: E402
from linear_operator.utils.errors import NanError  # noqa: E402

from dphypo import surrogate  # noqa: E402
from dphypo.surrogate import _FIT_ERRORS, _UNIT_TOL, MIN_SCORE_STD  # noqa: E402

try:
    from botorch.optim.batched_lbfgs_b import fmin_l_bfgs_b_batched
    from botorch.optim.utils import get_parameters_and_bounds
except ImportError as err:  # pragma: no cover - depends on the installed BoTorch
    raise ImportError(
        "the batched simulation engine needs BoTorch's batched L-BFGS-B (botorch.optim.batched_lbfgs_b; "
        "tested with botorch 0.18.1): pip install -U botorch, or use engine='sequential'"
    ) from err

__all__ = ["BatchFit", "fit_surrogate_batch"]

#: Members per chunk of the posterior computation: (chunk, k, n) float64 blocks stay a few MB, which is faster
#: than large blocks (fresh multi-MB allocations page-fault on every step).
POSTERIOR_CHUNK = 8

# fmin_l_bfgs_b_batched's warnflag: 0 converged, 1 iteration limit, 2 any other stop (e.g. line search).
_CONVERGED, _ITERATION_LIMIT = 0, 1
# The trainable parameters of BoTorch's default SingleTaskGP, in the order BoTorch optimises them.
_PARAMETERS = (
    "likelihood.noise_covar.raw_noise",
    "model.mean_module.raw_constant",
    "model.covar_module.raw_lengthscale",
)
_PRIORS = ("likelihood.noise_covar.noise_prior", "covar_module.lengthscale_prior")


@dataclass(frozen=True)
class BatchFit:
    """Result of one batched surrogate fit; row b is what ``fit_surrogate`` returns for member b.

    Attributes:
        mean: Posterior mean of the latent function on the grid, shape ``(B, n)``; ``nan`` rows where not
            ``ok``.
        std: Posterior standard deviation (no observation noise), shape ``(B, n)``; ``nan`` rows where not
            ``ok``.
        ok: Shape ``(B,)``: the fit succeeded and the posterior is finite (``SurrogateFit.ok``).
        score_loc: Shape ``(B,)``, mean of each member's scores.
        score_scale: Shape ``(B,)``, sample standard deviation (ddof=1) of each member's scores.
        refitted: Shape ``(B,)``: the member was fitted on its own by :func:`dphypo.surrogate.fit_surrogate`.
    """

    mean: np.ndarray
    std: np.ndarray
    ok: np.ndarray
    score_loc: np.ndarray
    score_scale: np.ndarray
    refitted: np.ndarray


class GridFactors:
    """The grid's distinct coordinates per dimension, for cheap batched RBF cross-covariances.

    Args:
        grid: Unit coordinates, shape ``(n, d)``, float, in ``[0, 1]``.
    """

    def __init__(self, grid: np.ndarray) -> None:
        grid = np.asarray(grid, dtype=np.float64)
        if grid.ndim != 2 or grid.shape[0] == 0 or grid.shape[1] == 0:
            raise ValueError(f"grid must have shape (n, d) with n, d >= 1, got shape {grid.shape!r}")
        if not np.all(np.isfinite(grid)) or grid.min() < -_UNIT_TOL or grid.max() > 1.0 + _UNIT_TOL:
            raise ValueError("grid must hold finite unit coordinates in [0, 1], got values outside [0, 1]")
        grid = np.clip(grid, 0.0, 1.0)  # as fit_surrogate does
        self.grid = torch.as_tensor(grid.copy())
        uniques = [np.unique(grid[:, d], return_inverse=True) for d in range(grid.shape[1])]
        self.values = [torch.as_tensor(values) for values, _ in uniques]
        self.codes = [torch.as_tensor(codes.reshape(-1)) for _, codes in uniques]
        mesh = np.meshgrid(*(values for values, _ in uniques), indexing="ij")
        product = np.stack([m.ravel() for m in mesh], axis=1)
        # A C-order product grid (every landscape) is an outer product of the factors: no gather needed.
        self.is_product = product.shape == grid.shape and bool(np.array_equal(product, grid))

    def cross_kernel(self, train_x: torch.Tensor, lengthscale: torch.Tensor) -> torch.Tensor:
        """RBF covariance between training points and every grid point.

        Args:
            train_x: Shape ``(c, k, d)``.
            lengthscale: Shape ``(c, d)``.

        Returns:
            exp(−½ Σ_d (x_d − g_d)²/ℓ_d²), shape ``(c, k, n)``.
        """
        factors = [
            torch.exp(-0.5 * ((train_x[:, :, d, None] - values) / lengthscale[:, d, None, None]) ** 2)
            for d, values in enumerate(self.values)
        ]
        c, k = train_x.shape[:2]
        if self.is_product:
            kernel = factors[0]
            for factor in factors[1:]:
                kernel = (kernel[..., :, None] * factor[..., None, :]).reshape(c, k, -1)
            return kernel
        kernel = factors[0][:, :, self.codes[0]]
        for factor, codes in zip(factors[1:], self.codes[1:], strict=True):
            kernel = kernel * factor[:, :, codes]
        return kernel


def fit_surrogate_batch(
    grid: np.ndarray | GridFactors,
    indices: np.ndarray,
    scores: np.ndarray,
    *,
    seeds: np.ndarray,
) -> BatchFit:
    """Fit one GP per member and return each member's marginal posterior on the grid.

    Row b of the result equals ``dphypo.surrogate.fit_surrogate(grid, indices[b], scores[b], seed=seeds[b])``
    up to floating-point round-off (the seed only matters for members that are refitted on their own).

    Args:
        grid: Unit coordinates of all grid points, shape ``(n, d)`` in ``[0, 1]``, or their
            :class:`GridFactors`.
        indices: Observation grid indices, shape ``(B, k)``.
        scores: Observed (oriented, imputed) scores, shape ``(B, k)``, finite.
        seeds: Non-negative integer seeds, shape ``(B,)``.

    Returns:
        A :class:`BatchFit`.
    """
    factors = grid if isinstance(grid, GridFactors) else GridFactors(grid)
    idx, y, seeds = _validate(factors, indices, scores, seeds)
    size, k = factors.grid.shape[0], y.shape[1]
    loc = y.mean(axis=1)
    scale = y.std(axis=1, ddof=1) if k >= 2 else np.full(y.shape[0], np.nan)
    mean = np.full((y.shape[0], size), np.nan)
    std = np.full_like(mean, np.nan)
    ok = np.zeros(y.shape[0], dtype=bool)
    refitted = np.zeros(y.shape[0], dtype=bool)
    if k < 2:
        return BatchFit(mean, std, ok, loc, scale, refitted)
    alone: list[int] = []
    pending = [np.flatnonzero(scale >= MIN_SCORE_STD)]  # all-equal scores: not fitted, as fit_surrogate
    while pending:
        part = pending.pop()
        if part.size == 0:
            continue
        try:
            part_mean, part_std, usable = _fit_and_predict(factors, idx[part], y[part])
        except _FIT_ERRORS:
            if part.size == 1:
                alone.append(int(part[0]))
            else:  # isolate the member(s) whose evaluation raised; the others' fits do not depend on them
                pending += [part[: part.size // 2], part[part.size // 2 :]]
            continue
        mean[part[usable]], std[part[usable]] = part_mean[usable], part_std[usable]
        ok[part[usable]] = np.all(np.isfinite(part_mean[usable]), axis=1) & np.all(
            np.isfinite(part_std[usable]), axis=1
        )
        alone.extend(int(b) for b in part[~usable])
    for b in sorted(alone):
        fit = surrogate.fit_surrogate(factors.grid.numpy(), idx[b], y[b], seed=int(seeds[b]))
        refitted[b], ok[b] = True, fit.ok
        if fit.ok:
            mean[b], std[b] = fit.mean, fit.std
    mean[~ok], std[~ok] = np.nan, np.nan
    return BatchFit(mean, std, ok, loc, scale, refitted)


def _fit_and_predict(
    factors: GridFactors, idx: np.ndarray, y: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Lockstep-fit the members' GPs and compute their posteriors; may raise any of ``_FIT_ERRORS``.

    Args:
        factors: The grid.
        idx: Observation grid indices, shape ``(m, k)``.
        y: Scores, shape ``(m, k)``, each row with standard deviation ≥ ``MIN_SCORE_STD``.

    Returns:
        ``(mean, std, usable)``: posteriors of shape ``(m, n)`` in score units, and which members' fits the
        sequential ``fit_gpytorch_mll`` would also have accepted at its first attempt (shape ``(m,)``).
    """
    train_x = factors.grid[torch.as_tensor(idx)]
    train_y = torch.as_tensor(y).unsqueeze(-1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the sequential fit records them as events; they change no density
        model, hyper, accepted = _fit_lockstep(train_x, train_y)
    with torch.no_grad():
        mean, std, factorised = _marginal_posterior(factors, model, train_x, torch.as_tensor(hyper))
    return mean, std, accepted & factorised


def _fit_lockstep(
    train_x: torch.Tensor, train_y: torch.Tensor
) -> tuple[SingleTaskGP, np.ndarray, np.ndarray]:
    """Maximise every member's marginal log-likelihood with its own scipy L-BFGS-B state, evaluations batched.

    The model, its initial hyperparameters (the priors' modes), their bounds and priors are BoTorch's own;
    only the loss and its gradient are computed by :class:`_NegativeMarginalLogLikelihood` (the same function
    as BoTorch's loss closure, agreeing to ~1e-13; ``tests/test_batched_gp.py``), which is twice as fast.

    Args:
        train_x: Shape ``(m, k, d)``.
        train_y: Shape ``(m, k, 1)``.

    Returns:
        ``(model, hyper, accepted)``: the batch model (its data, outcome transform and priors), the fitted
        hyperparameters ``(noise, constant, lengthscale_1..d)`` of shape ``(m, 2 + d)``, and which members
        ended with a status ``fit_gpytorch_mll`` accepts, shape ``(m,)``: converged, or stopped at the
        iteration limit (BoTorch's ``scipy_minimize`` reports that as STOPPED, which its default warning
        handler accepts); any other stop makes BoTorch retry from hyperparameters sampled from the priors.
    """
    batch = torch.Size([train_x.shape[0]])
    model = SingleTaskGP(train_x, train_y, outcome_transform=Standardize(m=1, batch_shape=batch))
    parameters, bounds = get_parameters_and_bounds(ExactMarginalLogLikelihood(model.likelihood, model))
    parameters = {name: p for name, p in parameters.items() if p.requires_grad}
    _check_default_model(model, tuple(parameters))
    start = np.concatenate([p.detach().reshape(batch[0], -1).numpy() for p in parameters.values()], axis=1)
    per_member_bounds = _per_member_bounds(parameters, bounds, batch[0])
    # Defaults equal scipy.optimize.minimize's L-BFGS-B defaults, which the sequential fit uses.
    hyper, _, results = fmin_l_bfgs_b_batched(
        _NegativeMarginalLogLikelihood(model), start, bounds=per_member_bounds, pass_batch_indices=True
    )
    accepted = np.array([r["status"] in (_CONVERGED, _ITERATION_LIMIT) for r in results], dtype=bool)
    return model, hyper, accepted


def _per_member_bounds(
    parameters: dict[str, torch.Tensor], bounds: dict[str, tuple], members: int
) -> np.ndarray:
    """BoTorch's parameter bounds (constraints without transform) of one member's vector, ``(p, 2)``."""
    rows = []
    for name, parameter in parameters.items():
        lower, upper = bounds.get(name, (None, None))
        low = -np.inf if lower is None else float(lower)
        high = np.inf if upper is None else float(upper)
        rows += [(low, high)] * (parameter.numel() // members)
    return np.array(rows, dtype=np.float64)


class _NegativeMarginalLogLikelihood:
    """BoTorch's fitting loss of every member and its gradient in closed form (Rasmussen & Williams, eq. 5.9).

    loss(σ², c, ℓ) = −[log N(ỹ | c·1, K + σ²I) + log p(σ²) + Σ_d log p(ℓ_d)] / k, with ỹ the standardised
    scores, K_ij = exp(−½ Σ_d (x_id − x_jd)²/ℓ_d²) and the models' LogNormal priors — GPyTorch's
    ``ExactMarginalLogLikelihood`` divided by the number of observations. With α = (K + σ²I)⁻¹(ỹ − c)
    and W = ααᵀ − (K + σ²I)⁻¹: ∂/∂σ² = ½ tr W, ∂/∂c = Σα, ∂/∂ℓ_d = ½ Σ_ij W_ij K_ij (x_id − x_jd)²/ℓ_d³.

    Args:
        model: The batch model (training data, standardised targets, priors).
    """

    def __init__(self, model: SingleTaskGP) -> None:
        x = model.train_inputs[0]
        self._targets = model.train_targets
        self._squared = (x[:, :, None, :] - x[:, None, :, :]) ** 2  # (m, k, k, d)
        self._k = x.shape[-2]
        self._eye = torch.eye(self._k, dtype=x.dtype)
        priors = {name: prior for name, _, prior, _, _ in model.named_priors()}
        self._noise_prior, self._lengthscale_prior = (priors[name] for name in _PRIORS)

    def __call__(self, state: np.ndarray, batch_indices: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """Loss and gradient of the members ``batch_indices`` at ``state`` (shape ``(a, 2 + d)``)."""
        rows = torch.as_tensor(np.asarray(batch_indices, dtype=np.int64))
        theta = torch.as_tensor(state)
        noise, constant, lengthscale = theta[:, 0], theta[:, 1], theta[:, 2:]
        squared, targets = self._squared[rows], self._targets[rows]
        rbf = torch.exp(-0.5 * torch.einsum("aijd,ad->aij", squared, lengthscale**-2))
        chol = torch.linalg.cholesky(rbf + noise[:, None, None] * self._eye)  # raises LinAlgError if not p.d.
        residual = (targets - constant[:, None]).unsqueeze(-1)
        alpha = torch.cholesky_solve(residual, chol)
        log_det = 2.0 * torch.log(torch.diagonal(chol, dim1=-2, dim2=-1)).sum(-1)
        log_likelihood = -0.5 * (
            (residual * alpha).sum((-1, -2)) + log_det + self._k * math.log(2.0 * math.pi)
        )
        w = alpha @ alpha.transpose(-1, -2) - torch.cholesky_inverse(chol)
        grad_noise = 0.5 * torch.diagonal(w, dim1=-2, dim2=-1).sum(-1)
        grad_constant = alpha.squeeze(-1).sum(-1)
        grad_lengthscale = 0.5 * torch.einsum("aij,aijd->ad", w * rbf, squared) / lengthscale**3
        prior_noise, dprior_noise = _log_normal_prior(self._noise_prior, noise)
        prior_lengthscale, dprior_lengthscale = _log_normal_prior(self._lengthscale_prior, lengthscale)
        loss = -(log_likelihood + prior_noise + prior_lengthscale.sum(-1)) / self._k
        grad = torch.cat(
            [
                (grad_noise + dprior_noise)[:, None],
                grad_constant[:, None],
                grad_lengthscale + dprior_lengthscale,
            ],
            dim=1,
        )
        if not (torch.isfinite(loss).all() and torch.isfinite(grad).all()):
            # GPyTorch would raise or steer scipy elsewhere: let fit_surrogate replay that member exactly.
            raise NanError("non-finite marginal log-likelihood or gradient")
        return loss.numpy(), (-grad / self._k).numpy()


def _log_normal_prior(prior: LogNormalPrior, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """log p(v) by the prior itself (float32 loc/scale included), d log p/dv = −1/v − (log v − μ)/(s² v)."""
    return prior.log_prob(value), -1.0 / value - (value.log() - prior.loc) / prior.scale.pow(2) / value


def _check_default_model(model: SingleTaskGP, parameters: tuple[str, ...]) -> None:
    """Refuse a BoTorch whose default ``SingleTaskGP`` is not the model the loss and posterior here assume."""
    covar, likelihood = model.covar_module, model.likelihood
    priors = {name: prior for name, _, prior, _, _ in model.named_priors()}
    if not (
        isinstance(covar, RBFKernel)
        and covar.active_dims is None
        and isinstance(model.mean_module, ConstantMean)
        and isinstance(likelihood, GaussianLikelihood)
        and isinstance(likelihood.noise_covar, HomoskedasticNoise)
        and parameters == _PARAMETERS
        and not likelihood.noise_covar.raw_noise_constraint.enforced  # raw parameter = noise, bounded below
        and not covar.raw_lengthscale_constraint.enforced
        and set(priors) == set(_PRIORS)
        and all(isinstance(prior, LogNormalPrior) for prior in priors.values())
    ):
        raise RuntimeError(
            "the batched engine assumes BoTorch's default SingleTaskGP (ConstantMean, RBFKernel without "
            "outputscale, homoskedastic Gaussian noise, LogNormal priors, bounds without transform); this "
            f"BoTorch builds {type(model.mean_module).__name__}, {type(covar).__name__}, parameters "
            f"{parameters}, priors {sorted(priors)}: use engine='sequential'"
        )


def _marginal_posterior(
    factors: GridFactors, model: SingleTaskGP, train_x: torch.Tensor, hyper: torch.Tensor
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Marginal posterior mean and std of every member's latent function at every grid point.

    In the standardised space (Rasmussen & Williams 2006, Alg. 2.1): K = k(X, X) + σ²I = LLᵀ, α = K⁻¹(y − c),
    μ(g) = c + k(g, X)α, v(g) = 1 − ‖L⁻¹k(X, g)‖²; then μ·s + m and max(v·s², min_variance) in score units, as
    BoTorch's ``Standardize.untransform_posterior`` and GPyTorch's ``MultivariateNormal.variance`` do.

    Args:
        factors: The grid.
        model: The batch model with ``m`` members (standardised targets, outcome transform).
        train_x: Shape ``(m, k, d)``.
        hyper: Fitted ``(noise, constant, lengthscale_1..d)``, shape ``(m, 2 + d)``.

    Returns:
        ``(mean, std, factorised)``: shapes ``(m, n)``, ``(m, n)`` and ``(m,)`` (False where the Cholesky
        failed).
    """
    targets = model.train_targets  # standardised by the outcome transform, shape (m, k)
    noise, constant, lengthscale = hyper[:, 0], hyper[:, 1], hyper[:, 2:]
    offset = model.outcome_transform.means.reshape(-1)
    scale = model.outcome_transform.stdvs.reshape(-1)
    min_variance = gpytorch.settings.min_variance.value(torch.float64)
    k = train_x.shape[1]
    means, stds, factorised = [], [], []
    for start in range(0, train_x.shape[0], POSTERIOR_CHUNK):
        part = slice(start, start + POSTERIOR_CHUNK)
        x, ls = train_x[part], lengthscale[part]
        scaled = x / ls[:, None, :]
        train_cov = torch.exp(-0.5 * ((scaled[:, :, None, :] - scaled[:, None, :, :]) ** 2).sum(-1))
        train_cov = train_cov + noise[part, None, None] * torch.eye(k, dtype=train_cov.dtype)
        chol, info = torch.linalg.cholesky_ex(train_cov)
        alpha = torch.cholesky_solve((targets[part] - constant[part, None]).unsqueeze(-1), chol)
        cross = factors.cross_kernel(x, ls)
        latent_mean = constant[part, None] + torch.bmm(alpha.transpose(1, 2), cross).squeeze(1)
        reduced = torch.linalg.solve_triangular(chol, cross, upper=False)
        latent_var = 1.0 - torch.einsum("ckn,ckn->cn", reduced, reduced)
        variance = (latent_var * scale[part, None] ** 2).clamp_min(min_variance)
        means.append(offset[part, None] + scale[part, None] * latent_mean)
        stds.append(variance.sqrt())
        factorised.append(info == 0)
    return torch.cat(means).numpy(), torch.cat(stds).numpy(), torch.cat(factorised).numpy()


def _validate(
    factors: GridFactors, indices: np.ndarray, scores: np.ndarray, seeds: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Check and convert the arguments of :func:`fit_surrogate_batch`.

    Returns:
        int64 indices ``(B, k)``, float64 scores ``(B, k)`` and int64 seeds ``(B,)``.
    """
    idx = np.asarray(indices)
    if idx.ndim != 2 or not (np.issubdtype(idx.dtype, np.integer) or idx.size == 0):
        raise ValueError(f"indices must be a (B, k) integer array, got shape {idx.shape!r} dtype {idx.dtype}")
    size = factors.grid.shape[0]
    if idx.size and (idx.min() < 0 or idx.max() >= size):
        raise ValueError(f"indices must lie in [0, {size}), got range [{idx.min()}, {idx.max()}]")
    y = np.asarray(scores, dtype=np.float64)
    if y.shape != idx.shape:
        raise ValueError(f"scores must have the shape of indices {idx.shape!r}, got {y.shape!r}")
    if not np.all(np.isfinite(y)):
        raise ValueError("scores must be finite (impute failed runs before fitting)")
    seed_arr = np.asarray(seeds)
    if (
        seed_arr.shape != (idx.shape[0],)
        or not np.issubdtype(seed_arr.dtype, np.integer)
        or np.any(seed_arr < 0)
    ):
        raise ValueError(f"seeds must be {idx.shape[0]} non-negative integers, got {seeds!r}")
    return idx.astype(np.int64), y, seed_arr.astype(np.int64)

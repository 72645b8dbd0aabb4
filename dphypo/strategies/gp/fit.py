"""The GP fit of GP-UCB (DP-HyPO Algorithm 3, the "refit GP" step), batch-native: hyperparameters and posterior.

The model is BoTorch's default ``SingleTaskGP`` written down in :mod:`.model` (constant mean, RBF kernel with
dimension-scaled LogNormal priors, inferred homoskedastic noise, ``Standardize``) in float64 on the grid's unit
coordinates, fitted by maximising the exact marginal log-likelihood; :func:`fit_surrogate` returns the *marginal*
posterior mean and standard deviation of the latent function (no observation noise) at every grid point and the
posterior itself (:class:`~dphypo.strategies.gp.posterior.GridPosterior`), which the session conditions exactly on
later observations between scheduled refits. It is batch-native: scores of shape ``(..., k)`` are that many
independent searches (members), each with its own GP and hyperparameters; a single search is the batch of one.

The loss is evaluated on replicate-reduced data (:mod:`.likelihood`), so a step costs O(u³) for u distinct points
instead of O(t³). Warm start: each member's first L-BFGS-B run starts from ``start`` (the session passes the
member's previous fit) instead of the priors' modes; it changes where the optimiser starts, not the function.

How: BoTorch's batched L-BFGS-B (``botorch.optim.batched_lbfgs_b.fmin_l_bfgs_b_batched``, a port of scipy's
L-BFGS-B that keeps one optimiser state per member and batches only the evaluation of the loss and its gradient).
Without a warm start each member follows the iterates scipy's L-BFGS-B follows in BoTorch's own
``fit_gpytorch_mll`` — same start, bounds, tolerances and stopping rules — and ends at the same hyperparameters
up to round-off (~1e-8 relative; ``tests/strategies/gp/test_fit.py``). Measured (2,500-point grid, 5-19
observations, one torch thread): 27-33 ms per GP step for one member vs 90-130 ms for ``fit_gpytorch_mll``, and
1.4-2.0 ms per member at B = 256.

**BoTorch's ``fit_gpytorch_mll`` is the explicit fallback**, per member, with torch's RNG seeded from its seed:
for a member whose first L-BFGS-B run ends in a failure status (BoTorch then retries from hyperparameters sampled
from the priors), whose loss evaluation raises (a Cholesky failure, where GPyTorch adds jitter), or whose
posterior Cholesky fails; and for every member when the installed BoTorch lacks the batched optimiser (it is not
documented public API). A batch whose evaluation raises is split in halves until the failing members are
isolated, so one bad member never changes the others' fits.

Direction: the surrogate is a plain regression model; callers that minimise negate the scores first
(:func:`dphypo.strategies.base.orient`). Failures never raise: degenerate data (fewer than two observations,
all-equal scores), fitting errors and non-finite posteriors give ``ok=False`` and a reason for that member.
Invalid *arguments* raise ``ValueError`` eagerly.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import torch
from botorch.exceptions.errors import BotorchError, ModelFittingError
from botorch.fit import fit_gpytorch_mll
from botorch.models import SingleTaskGP
from botorch.models.transforms.outcome import Standardize
from gpytorch.mlls import ExactMarginalLogLikelihood
from linear_operator.utils.errors import NanError, NotPSDError
from numpy.typing import ArrayLike

from dphypo._threads import torch_threads
from dphypo.strategies.gp.likelihood import NegativeMarginalLogLikelihood, Replicates
from dphypo.strategies.gp.memory import POSTERIOR_CHUNK
from dphypo.strategies.gp.model import MIN_SCORE_STD, bounds, initial_hyper, standardize
from dphypo.strategies.gp.posterior import GridFactors, GridPosterior

# BoTorch's batched L-BFGS-B (a port of scipy's that keeps one optimiser state per member) is not documented
# public API: without it every member is fitted by BoTorch's own fit_gpytorch_mll, the explicit fallback.
try:
    from botorch.optim.batched_lbfgs_b import fmin_l_bfgs_b_batched
except ImportError:  # pragma: no cover - depends on the installed BoTorch
    fmin_l_bfgs_b_batched = None  # type: ignore[assignment]

__all__ = ["MIN_SCORE_STD", "GridFactors", "SurrogateFit", "fit_surrogate"]

# Members per chunk of the posterior computation (memory.POSTERIOR_CHUNK): (chunk, k, n) float64 blocks stay a few
# MB, which is faster than large blocks (fresh multi-MB allocations page-fault on every step).

#: Largest m·u² of one lockstep fit (m members, u distinct points each): its (m, u, u) float64 blocks stay
#: ~8 MB, so B = 256 searches at u = 320 never allocate GBs (CPU time per member is the same as with one
#: 32 MB part: ~65 ms per warm-started step at u ≈ 310).
LOCKSTEP_ENTRIES = 1 << 20

# Errors that mean "this data could not be fitted", as opposed to programming errors, which propagate.
_FIT_ERRORS: tuple[type[BaseException], ...] = (
    ModelFittingError,
    NotPSDError,
    NanError,
    BotorchError,
    torch.linalg.LinAlgError,  # type: ignore[attr-defined]  # public, but missing from torch's stub __all__
)
# fmin_l_bfgs_b_batched's warnflag: 0 converged, 1 iteration limit, 2 any other stop (e.g. line search).
_CONVERGED, _ITERATION_LIMIT = 0, 1

@dataclass(frozen=True)
class SurrogateFit:
    """Result of one (batched) surrogate fit; batch shape ``S`` is that of the scores without their last axis.

    Attributes:
        mean: Posterior mean of the latent function at every grid point, shape ``S + (n,)``, in the units of
            the scores that were fitted; ``nan`` where not ``ok``.
        std: Posterior standard deviation (``observation_noise=False``), shape ``S + (n,)``, score units;
            ``nan`` where not ``ok``.
        ok: bool, shape ``S``: the fit succeeded and the posterior is finite.
        reasons: Why each member's fit failed (``None`` where ``ok``), flattened in C order.
        score_loc: Mean of each member's scores (the ``Standardize`` offset), shape ``S``.
        score_scale: Their sample standard deviation (ddof=1; the ``Standardize`` scale), shape ``S``; ``nan``
            with fewer than two scores. ``(mean - score_loc) / score_scale`` is the GP's standardised space.
        warnings: Warnings of each member's fit as ``"Category: message"`` strings, flattened in C order.
        refitted: bool, shape ``S``: the member went through BoTorch's own ``fit_gpytorch_mll`` (retry path).
        hyper: Fitted ``(noise, constant, lengthscale_1..d)`` in the GP's standardised space, shape
            ``S + (2 + d,)``; ``nan`` where not ``ok``. Pass it as the next fit's ``start`` (warm start).
        posterior: The members' posteriors at the fitted hyperparameters, flattened in C order (``prod(S)``
            members; ``nan`` where not ``ok``), ready to be conditioned on later observations without a refit
            (:class:`~dphypo.strategies.gp.posterior.GridPosterior`).
    """

    mean: np.ndarray
    std: np.ndarray
    ok: np.ndarray
    reasons: tuple[str | None, ...]
    score_loc: np.ndarray
    score_scale: np.ndarray
    warnings: tuple[tuple[str, ...], ...]
    refitted: np.ndarray
    hyper: np.ndarray
    posterior: GridPosterior


def fit_surrogate(
    grid: ArrayLike | GridFactors,
    indices: ArrayLike,
    scores: ArrayLike,
    *,
    seed: int | ArrayLike,
    start: ArrayLike | None = None,
) -> SurrogateFit:
    """Fit one GP per member to ``scores`` observed at ``grid[indices]``; marginal posteriors on the grid.

    Reproducible: the lockstep fit uses no randomness, and a member refitted by BoTorch's retry path runs
    inside ``torch.random.fork_rng`` seeded with its seed (the caller's torch RNG state is untouched).

    Warm start: ``start`` (e.g. the ``hyper`` of this member's previous fit) replaces BoTorch's default
    initial hyperparameters (the priors' modes) of the first L-BFGS-B run; it changes where the optimiser
    starts, not the function it maximises. A member whose warm-started run fails still goes through
    BoTorch's own ``fit_gpytorch_mll`` (default start, then its retries).

    Args:
        grid: Unit coordinates of all grid points, shape ``(n, d)`` in ``[0, 1]``, or their :class:`GridFactors`
            (build once and reuse: it caches the grid's per-dimension factors).
        indices: Observation grid indices, shape ``S + (k,)``; repeats are allowed (noisy re-evaluations).
        scores: Observed scores, shape ``S + (k,)``, finite (impute failed runs and negate minimised scores
            first).
        seed: Non-negative integer seeds, shape ``S`` (or one int for every member).
        start: Initial hyperparameters ``(noise, constant, lengthscale_1..d)`` of each member's first
            L-BFGS-B run, shape ``S + (2 + d,)`` (broadcast); a row with a non-finite entry, or ``None``,
            starts from BoTorch's default. Clipped to BoTorch's bounds.

    Returns:
        A :class:`SurrogateFit` of batch shape ``S``.

    Raises:
        ValueError: If an argument is malformed (shapes, range, non-finite values, negative seed).
    """
    factors = grid if isinstance(grid, GridFactors) else GridFactors(np.asarray(grid))
    idx, y, seeds, batch = _validate(factors, indices, scores, seed)
    members, k = y.shape
    size, dim = factors.grid.shape
    initial = _initial_hyper(start, batch, members, dim)
    loc = y.mean(axis=1) if k else np.full(members, np.nan)
    scale = y.std(axis=1, ddof=1) if k >= 2 else np.full(members, np.nan)
    fits = _Fits.empty(factors, members)
    flat = ~(scale >= MIN_SCORE_STD)  # all equal: Standardize would stop scaling, the GP is meaningless
    mean = np.full((members, size), np.nan)
    std = np.full_like(mean, np.nan)
    if k < 2:
        fits.reasons[:] = [f"need at least 2 observations, got {k}"] * members
    else:
        for member in np.flatnonzero(flat):
            fits.reasons[member] = f"observed scores are all equal (std {scale[member]:.3g} < {MIN_SCORE_STD:g})"
        with torch_threads():  # one thread by default, restored afterwards (see dphypo._threads)
            alone = _fit_in_lockstep(fits, factors, idx, y, initial, np.flatnonzero(~flat))
            for b in alone:
                fits.refit_alone(factors, b, idx[b], y[b], int(seeds[b]))
            mean, std = fits.posterior.score_moments()
    ok = np.all(np.isfinite(mean), axis=1) & np.all(np.isfinite(std), axis=1)
    for member in np.flatnonzero(~ok & ~flat):
        fits.reasons[member] = fits.reasons[member] or "GP posterior is not finite"
    mean[~ok], std[~ok], fits.hyper[~ok] = np.nan, np.nan, np.nan
    fits.posterior.put(np.flatnonzero(~ok), GridPosterior.empty(factors, int(np.count_nonzero(~ok)), size, 2 + dim))
    return SurrogateFit(
        mean=mean.reshape((*batch, size)),
        std=std.reshape((*batch, size)),
        ok=ok.reshape(batch),
        reasons=tuple(fits.reasons),
        score_loc=loc.reshape(batch),
        score_scale=scale.reshape(batch),
        warnings=tuple(fits.caught),
        refitted=fits.refitted.reshape(batch),
        hyper=fits.hyper.reshape((*batch, 2 + dim)),
        posterior=fits.posterior,
    )


def _initial_hyper(start: ArrayLike | None, batch: tuple[int, ...], members: int, dim: int) -> np.ndarray:
    """Each member's warm start ``(noise, constant, lengthscales)``, shape ``(members, 2 + dim)`` (nan: default)."""
    if start is None:
        return np.full((members, 2 + dim), np.nan)
    try:
        initial = np.broadcast_to(np.asarray(start, dtype=np.float64), (*batch, 2 + dim))
    except ValueError as err:
        expected = (*batch, 2 + dim)
        raise ValueError(f"start must have shape {expected} (broadcast), got shape {np.shape(start)!r}") from err
    return initial.reshape(members, 2 + dim)


@dataclass
class _Fits:
    """What the fit of a batch collects per member: posterior, hyperparameters, failure reasons, warnings."""

    posterior: GridPosterior
    hyper: np.ndarray
    reasons: list[str | None]
    caught: list[tuple[str, ...]]
    refitted: np.ndarray

    @classmethod
    def empty(cls, factors: GridFactors, members: int) -> _Fits:
        size, dim = factors.grid.shape
        return cls(GridPosterior.empty(factors, members, size, 2 + dim), np.full((members, 2 + dim), np.nan),
                   [None] * members, [()] * members, np.zeros(members, dtype=bool))

    def refit_alone(self, factors: GridFactors, member: int, idx: np.ndarray, y: np.ndarray, seed: int) -> None:
        """BoTorch's own ``fit_gpytorch_mll`` for one member (the explicit fallback)."""
        self.refitted[member] = True
        single, self.reasons[member], self.caught[member], self.hyper[member] = _fit_alone(factors, idx, y, seed)
        if single is not None:
            self.posterior.put(np.array([member]), single)


def _fit_in_lockstep(fits: _Fits, factors: GridFactors, idx: np.ndarray, y: np.ndarray, initial: np.ndarray,
                     members: np.ndarray) -> list[int]:
    """Fit ``members`` in lockstep batches into ``fits``; the members that need the fallback, sorted.

    A batch whose evaluation raises is split in halves until the failing members are isolated, so one bad member
    never changes the others' fits; a member whose own L-BFGS-B run failed goes to the fallback.
    """
    alone: list[int] = []
    pending = _parts(idx, members)
    while pending:
        part = pending.pop()
        if part.size == 0:
            continue
        try:
            part_posterior, usable, stopped, part_hyper = _fit_and_predict(factors, idx[part], y[part], initial[part])
        except _FIT_ERRORS:
            if part.size == 1:
                alone.append(int(part[0]))
            else:  # isolate the member(s) whose evaluation raised; the others' fits do not depend on them
                pending += [part[: part.size // 2], part[part.size // 2 :]]
            continue
        fits.posterior.put(part[usable], part_posterior, rows=np.flatnonzero(usable))
        fits.hyper[part[usable]] = part_hyper[usable]
        for member in part[usable & stopped]:
            fits.caught[member] = ("OptimizationWarning: L-BFGS-B stopped at its iteration limit",)
        alone.extend(int(member) for member in part[~usable])
    return sorted(alone)


def _parts(idx: np.ndarray, members: np.ndarray) -> list[np.ndarray]:
    """Split ``members`` into lockstep batches whose (m, u, u) blocks stay within ``LOCKSTEP_ENTRIES``.

    Members are ordered by their number u of distinct points first, so a batch pads little. A member's fit
    does not depend on the others in its batch (up to round-off of the padded linear algebra).
    """
    if members.size == 0:
        return []
    ordered = np.sort(idx[members], axis=1)
    unique = 1 + np.count_nonzero(np.diff(ordered, axis=1), axis=1)
    members = members[np.argsort(unique, kind="stable")]
    per_part = max(1, LOCKSTEP_ENTRIES // int(unique.max()) ** 2)
    return [members[i : i + per_part] for i in range(0, members.size, per_part)]


def _fit_and_predict(
    factors: GridFactors, idx: np.ndarray, y: np.ndarray, start: np.ndarray
) -> tuple[GridPosterior, np.ndarray, np.ndarray, np.ndarray]:
    """Lockstep-fit the members' GPs and compute their posteriors; may raise any of ``_FIT_ERRORS``.

    Args:
        factors: The grid.
        idx: Observation grid indices, shape ``(m, k)``.
        y: Scores, shape ``(m, k)``, each row with standard deviation ≥ ``MIN_SCORE_STD``.
        start: Initial hyperparameters ``(noise, constant, lengthscale_1..d)``, shape ``(m, 2 + d)``; a row
            with a non-finite entry starts from BoTorch's default (the priors' modes).

    Returns:
        ``(posterior, usable, stopped, hyper)``: the m posteriors; which members' fits ``fit_gpytorch_mll``
        would also have accepted at its first attempt and whose posterior factorised, and which stopped at the
        iteration limit (shape ``(m,)`` each); the fitted hyperparameters, shape ``(m, 2 + d)``.
    """
    targets, offset, scale = standardize(torch.as_tensor(y))  # over all k observations, as BoTorch's model
    data = Replicates.of(factors, idx, targets)
    hyper, status = _fit_lockstep(data, start)
    accepted = (status == _CONVERGED) | (status == _ITERATION_LIMIT)
    with torch.no_grad():
        posterior, factorised = _marginal_posterior(
            factors, data.x, data.means, offset, scale, torch.as_tensor(hyper), data.weights
        )
    posterior.mark_observed(idx)  # its rows span these points: the rank bound of GridPosterior's compression
    return posterior, accepted & factorised, status == _ITERATION_LIMIT, hyper


def _fit_alone(
    factors: GridFactors, idx: np.ndarray, y: np.ndarray, seed: int
) -> tuple[GridPosterior | None, str | None, tuple[str, ...], np.ndarray]:
    """BoTorch's own ``fit_gpytorch_mll`` (with its retries) for one member, torch's RNG seeded with ``seed``.

    It fits all k observations (no replicate reduction: this is BoTorch's own path, taken rarely).

    Args:
        factors: The grid.
        idx: Observation grid indices, shape ``(k,)``.
        y: Scores, shape ``(k,)``.
        seed: Non-negative integer.

    Returns:
        ``(posterior, reason, warnings, hyper)``: the one-member posterior (``None`` on failure), why it
        failed (``None`` on success), the warnings BoTorch emitted and the fitted hyperparameters, shape
        ``(2 + d,)`` (``nan`` on failure).
    """
    no_hyper = np.full(2 + factors.grid.shape[1], np.nan)
    with warnings.catch_warnings(record=True) as caught, torch.random.fork_rng(devices=[]):
        warnings.simplefilter("always")
        torch.manual_seed(seed)
        try:
            train_x = factors.grid[torch.as_tensor(idx)]
            model = SingleTaskGP(train_x, torch.as_tensor(y).unsqueeze(-1), outcome_transform=Standardize(m=1))
            fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))
            hyper = torch.cat(
                [
                    model.likelihood.noise.reshape(1),
                    model.mean_module.constant.reshape(1),
                    model.covar_module.lengthscale.reshape(-1),
                ]
            ).detach()
            transform = model.outcome_transform
            if not isinstance(transform, Standardize):  # pragma: no cover - BoTorch's model, built just above
                raise TypeError(f"expected a Standardize outcome transform, got {transform!r}")
            with torch.no_grad():
                posterior, factorised = _marginal_posterior(
                    factors,
                    train_x[None],
                    model.train_targets[None],
                    transform.means.reshape(-1),
                    transform.stdvs.reshape(-1),
                    hyper[None],
                )
        except _FIT_ERRORS as err:
            reason = f"GP fit failed: {type(err).__name__}: {err}"
            return None, reason, _format_warnings(caught), no_hyper
    recorded = _format_warnings(caught)
    if not factorised[0]:
        return None, "GP fit failed: posterior Cholesky factorisation failed", recorded, no_hyper
    posterior.mark_observed(np.asarray(idx)[None])  # the rank bound of GridPosterior's compression
    return posterior, None, recorded, hyper.numpy()


def _format_warnings(caught: list[warnings.WarningMessage]) -> tuple[str, ...]:
    """Recorded warnings as ``"Category: message"`` strings, in emission order."""
    return tuple(f"{w.category.__name__}: {w.message}" for w in caught)


def _fit_lockstep(data: Replicates, start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Maximise every member's marginal log-likelihood with its own scipy L-BFGS-B state, evaluations batched.

    The bounds, priors and default start (the priors' modes) are BoTorch's (:mod:`.model`); the loss and its
    gradient are :class:`~dphypo.strategies.gp.likelihood.NegativeMarginalLogLikelihood` on the replicate-reduced
    data (the same function as BoTorch's loss closure on all observations, agreeing to ~1e-13;
    ``tests/strategies/gp/test_fit.py``).

    Args:
        data: The members' replicate-reduced observations.
        start: Initial hyperparameters, shape ``(m, 2 + d)``; non-finite rows use BoTorch's default start.
            A warm start is clipped to the bounds.

    Returns:
        ``(hyper, status)``: the fitted hyperparameters ``(noise, constant, lengthscale_1..d)`` of shape
        ``(m, 2 + d)``, and each member's L-BFGS-B status, shape ``(m,)``: ``fit_gpytorch_mll`` accepts
        converged, or stopped at the iteration limit (BoTorch's ``scipy_minimize`` reports that as STOPPED,
        which its default warning handler accepts); any other stop makes BoTorch retry from hyperparameters
        sampled from the priors. Without BoTorch's batched optimiser every status is a failure, which sends
        every member to :func:`_fit_alone` (``fit_gpytorch_mll``).
    """
    members, dim = int(data.unique.shape[0]), int(data.x.shape[-1])
    if fmin_l_bfgs_b_batched is None:
        return np.full((members, 2 + dim), np.nan), np.full(members, -1, dtype=np.int64)
    box = bounds(dim)
    warm = np.all(np.isfinite(start), axis=1)
    initial = np.where(warm[:, None], np.clip(start, box[:, 0], box[:, 1]), initial_hyper(dim))
    # Defaults equal scipy.optimize.minimize's L-BFGS-B defaults, which BoTorch's fit_gpytorch_mll uses.
    hyper, _, results = fmin_l_bfgs_b_batched(  # type: ignore[no-untyped-call]  # BoTorch leaves it unannotated
        NegativeMarginalLogLikelihood(data), initial, bounds=box, pass_batch_indices=True
    )
    status = np.array([r["status"] for r in results], dtype=np.int64)
    return np.asarray(hyper, dtype=np.float64), status


def _marginal_posterior(
    factors: GridFactors,
    train_x: torch.Tensor,
    targets: torch.Tensor,
    offset: torch.Tensor,
    scale: torch.Tensor,
    hyper: torch.Tensor,
    weights: torch.Tensor | None = None,
) -> tuple[GridPosterior, np.ndarray]:
    """Marginal posterior of every member's latent function at every grid point, at fixed hyperparameters.

    In the standardised space (Rasmussen & Williams 2006, Alg. 2.1): K = k(X, X) + σ²W = LLᵀ, α = K⁻¹(y − c),
    μ(g) = c + k(g, X)α, v(g) = 1 − ‖L⁻¹k(X, g)‖²; :meth:`GridPosterior.score_moments` maps them to score units
    as BoTorch's ``Standardize.untransform_posterior`` and GPyTorch's ``MultivariateNormal.variance`` do. With
    replicate-reduced data (X the distinct points, y their mean standardised scores, W = diag(1/n_i)) this is
    exactly the posterior given all observations: the predictive equations depend on the data only through
    (ȳ_i, n_i) (Binois, Gramacy & Ludkovski 2018, homoskedastic part; the derivation in
    :class:`_NegativeMarginalLogLikelihood` applied to k(X, X) + σ²I). The rows L⁻¹k(X, grid) are kept as the
    posterior's factor, so later observations can be conditioned on without a refit.

    Args:
        factors: The grid.
        train_x: Shape ``(m, k, d)``.
        targets: Standardised scores (or their means per distinct point), shape ``(m, k)``.
        offset: The ``Standardize`` means, shape ``(m,)``.
        scale: The ``Standardize`` standard deviations, shape ``(m,)``.
        hyper: Fitted ``(noise, constant, lengthscale_1..d)``, shape ``(m, 2 + d)``.
        weights: Noise weights 1/n_i, shape ``(m, k)``; 0 marks a padding entry, which is ignored. ``None``:
            every entry is one observation (W = I).

    Returns:
        ``(posterior, factorised)``: the m posteriors, and where the Cholesky succeeded, shape ``(m,)``.
    """
    noise, constant, lengthscale = hyper[:, 0], hyper[:, 1], hyper[:, 2:]
    if weights is None:
        weights = torch.ones_like(targets)
    means, variances, rows, factorised = [], [], [], []
    for start in range(0, train_x.shape[0], POSTERIOR_CHUNK):
        part = slice(start, start + POSTERIOR_CHUNK)
        width = int((weights[part] > 0).sum(-1).max())  # trim padding shared by the whole chunk
        x, ls, w = train_x[part, :width], lengthscale[part], weights[part, :width]
        present = (w > 0).to(x.dtype)
        scaled = x / ls[:, None, :]
        train_cov = torch.exp(-0.5 * ((scaled[:, :, None, :] - scaled[:, None, :, :]) ** 2).sum(-1))
        train_cov = train_cov * (present[:, :, None] * present[:, None, :])
        train_cov = train_cov + torch.diag_embed(noise[part, None] * w + (1.0 - present))
        chol, info = torch.linalg.cholesky_ex(train_cov)
        residual = (targets[part, :width] - constant[part, None]) * present
        alpha = torch.cholesky_solve(residual.unsqueeze(-1), chol)
        cross = factors.cross_kernel(x, ls) * present[:, :, None]
        means.append(constant[part, None] + torch.bmm(alpha.transpose(1, 2), cross).squeeze(1))
        reduced = torch.linalg.solve_triangular(chol, cross, upper=False)  # padding rows stay 0
        variances.append(1.0 - torch.einsum("ckn,ckn->cn", reduced, reduced))
        rows.append(reduced)
        factorised.append(info == 0)
    height = max(r.shape[1] for r in rows)
    factor = torch.cat([torch.nn.functional.pad(r, (0, 0, 0, height - r.shape[1])) for r in rows])
    posterior = GridPosterior(factors, hyper, offset, scale, torch.cat(means), torch.cat(variances), factor)
    return posterior, torch.cat(factorised).numpy()


def _validate(
    factors: GridFactors, indices: ArrayLike, scores: ArrayLike, seed: int | ArrayLike
) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[int, ...]]:
    """Check and convert the arguments of :func:`fit_surrogate`.

    Returns:
        int64 indices ``(B, k)``, float64 scores ``(B, k)``, int64 seeds ``(B,)`` and the batch shape ``S``.
    """
    idx = np.asarray(indices)
    if idx.size == 0:
        idx = idx.astype(np.int64)
    if idx.ndim == 0 or not np.issubdtype(idx.dtype, np.integer):
        raise ValueError(f"indices must be an integer array of shape (..., k), got {indices!r}")
    size = factors.grid.shape[0]
    if idx.size and (idx.min() < 0 or idx.max() >= size):
        raise ValueError(f"indices must lie in [0, {size}), got range [{idx.min()}, {idx.max()}]")
    y = np.asarray(scores, dtype=np.float64)
    if y.shape != idx.shape:
        raise ValueError(f"scores must have the shape of indices {idx.shape!r}, got {y.shape!r}")
    if not np.all(np.isfinite(y)):
        raise ValueError("scores must be finite (impute failed runs before fitting)")
    batch = idx.shape[:-1]
    if isinstance(seed, bool) or (isinstance(seed, int | np.integer) and seed < 0):
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    seeds = np.asarray(seed)
    if not np.issubdtype(seeds.dtype, np.integer) or np.any(seeds < 0):
        raise ValueError(f"seed must be non-negative integers, got {seed!r}")
    try:
        seeds = np.broadcast_to(seeds, batch)
    except ValueError as err:
        raise ValueError(f"seed must have the batch shape {batch}, got shape {seeds.shape}") from err
    members, k = math.prod(batch), idx.shape[-1]
    return idx.reshape(members, k).astype(np.int64), y.reshape(members, k), seeds.reshape(-1).astype(np.int64), batch

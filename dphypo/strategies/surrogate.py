"""The Gaussian-process surrogate of GP-UCB (DP-HyPO Algorithm 3, the "refit GP" step), batch-native.

The model is BoTorch's default ``SingleTaskGP`` (constant mean, RBF kernel with dimension-scaled LogNormal
priors, inferred homoskedastic noise, ``Standardize`` outcome transform) in float64 on the grid's unit
coordinates, fitted by maximising the exact marginal log-likelihood; :func:`fit_surrogate` returns the
*marginal* posterior mean and standard deviation of the latent function (no observation noise) at every grid
point. It is batch-native: scores of shape ``(..., k)`` are that many independent searches (members), each
with its own GP and hyperparameters; a single search is the batch of one, so the tuner and the batched
simulation engine use this one fit.

Replicated points (issue #15): on a grid, a search of T runs re-evaluates points, and the marginal likelihood
of t observations at u ≤ n distinct points factorises exactly into a heteroskedastic GP on the u point means
(noise σ²/n_i) times a term in σ² alone (derivation and source in :class:`_NegativeMarginalLogLikelihood`);
the posterior depends on the data only through the point means and counts. The loss and the posterior are
computed on the u distinct points, so a step costs O(u³) instead of O(t³) and stops growing once the grid is
covered, while the function maximised — Standardize over all t scores, priors, bounds — is unchanged.

Warm start: :func:`fit_surrogate` takes each member's initial hyperparameters (``start``; the GP-UCB session
passes the member's previous fit) and returns the fitted ones (``SurrogateFit.hyper``). It also returns each
member's posterior as a :class:`~dphypo.strategies.posterior.GridPosterior`, which the session conditions exactly
on later observations between scheduled refits (``GPUCB.refit_growth``).

How: the members are stacked into one BoTorch model with batch shape ``(B,)`` and fitted with BoTorch's batched
L-BFGS-B (``botorch.optim.batched_lbfgs_b.fmin_l_bfgs_b_batched``): a port of scipy's L-BFGS-B that keeps one
optimiser state per member and only batches the evaluation of the loss and its gradient. The loss is BoTorch's
(negative exact marginal log-likelihood with the model's priors, per observation), evaluated in closed form
(:class:`_NegativeMarginalLogLikelihood`). Without a warm start, each member therefore follows the iterates
scipy's L-BFGS-B follows in BoTorch's own ``fit_gpytorch_mll`` — same start (the priors' modes), bounds,
tolerances and stopping rules — and ends at the same hyperparameters up to round-off (~1e-8 relative;
``tests/strategies/test_surrogate.py``).
Measured (2,500-point grid, 5-19 observations, one torch thread): 27-33 ms per GP step for one member vs
90-130 ms for ``fit_gpytorch_mll`` on the same model, and 1.4-2.0 ms per member at B = 256 vs 2.1-3.5 ms for
BoTorch's stock batched ``fit_gpytorch_mll`` (which agreed to 1e-10 on the posterior mean).

What ``fit_gpytorch_mll`` does beyond its first attempt is BoTorch's own retry path and is delegated to it: a
member whose first L-BFGS-B run ends in a failure status (BoTorch then retries from hyperparameters sampled
from the priors, seeded here from the member's seed), whose loss evaluation raises (a Cholesky failure, where
GPyTorch adds jitter), or whose posterior Cholesky fails is fitted on its own by ``fit_gpytorch_mll`` with
torch's RNG seeded from its seed. A batch whose evaluation raises is split in halves until the failing members
are isolated, so one bad member never changes the others' fits. Either way the posterior is computed by
:func:`_marginal_posterior` from the fitted hyperparameters.

Direction: the surrogate is a plain regression model; callers that minimise negate the scores first
(:func:`dphypo.strategies.base.orient`). Failures never raise: degenerate data (fewer than two observations,
all-equal scores), fitting errors and non-finite posteriors give ``ok=False`` and a reason for that member.
Invalid *arguments* raise ``ValueError`` eagerly.

Measured after issue #15 (``benchmarks/gp_step.py``, 320-point digits grid): see that benchmark's docstring.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import gpytorch
import numpy as np
import torch
from botorch.exceptions.errors import BotorchError, ModelFittingError
from botorch.fit import fit_gpytorch_mll
from botorch.models import SingleTaskGP
from botorch.models.transforms.outcome import Standardize
from gpytorch.kernels import RBFKernel
from gpytorch.likelihoods import GaussianLikelihood
from gpytorch.likelihoods.noise_models import HomoskedasticNoise
from gpytorch.means import ConstantMean
from gpytorch.mlls import ExactMarginalLogLikelihood
from gpytorch.priors import LogNormalPrior
from linear_operator.utils.errors import NanError, NotPSDError
from numpy.typing import ArrayLike

from dphypo._threads import torch_threads
from dphypo.strategies.posterior import GridFactors, GridPosterior

try:
    from botorch.optim.batched_lbfgs_b import fmin_l_bfgs_b_batched
    from botorch.optim.utils import get_parameters_and_bounds
except ImportError as err:  # pragma: no cover - depends on the installed BoTorch
    raise ImportError(
        "the GP surrogate needs BoTorch's batched L-BFGS-B (botorch.optim.batched_lbfgs_b; tested with "
        "botorch 0.18.1): pip install -U botorch"
    ) from err

__all__ = ["MIN_SCORE_STD", "GridFactors", "SurrogateFit", "fit_surrogate"]

#: Observed scores whose standard deviation is below this are treated as all equal. It matches the
#: ``min_stdv`` of BoTorch's ``Standardize``, below which BoTorch stops scaling (the GP would see raw units).
MIN_SCORE_STD = 1e-8
#: Members per chunk of the posterior computation: (chunk, k, n) float64 blocks stay a few MB, which is faster
#: than large blocks (fresh multi-MB allocations page-fault on every step).
POSTERIOR_CHUNK = 8
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
# The trainable parameters of BoTorch's default SingleTaskGP, in the order BoTorch optimises them.
_PARAMETERS = (
    "likelihood.noise_covar.raw_noise",
    "model.mean_module.raw_constant",
    "model.covar_module.raw_lengthscale",
)
_PRIORS = ("likelihood.noise_covar.noise_prior", "covar_module.lengthscale_prior")


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
            (:class:`~dphypo.strategies.posterior.GridPosterior`).
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
    if start is None:
        initial = np.full((members, 2 + dim), np.nan)
    else:
        try:
            initial = np.broadcast_to(np.asarray(start, dtype=np.float64), (*batch, 2 + dim))
        except ValueError as err:
            shape = np.shape(start)
            raise ValueError(f"start must have shape {(*batch, 2 + dim)} (broadcast), got shape {shape!r}") from err
        initial = initial.reshape(members, 2 + dim)
    hyper = np.full((members, 2 + dim), np.nan)
    loc = y.mean(axis=1) if k else np.full(members, np.nan)
    scale = y.std(axis=1, ddof=1) if k >= 2 else np.full(members, np.nan)
    mean = np.full((members, size), np.nan)
    std = np.full_like(mean, np.nan)
    ok = np.zeros(members, dtype=bool)
    refitted = np.zeros(members, dtype=bool)
    reasons: list[str | None] = [None] * members
    caught: list[tuple[str, ...]] = [()] * members
    posterior = GridPosterior.empty(factors, members, size, 2 + dim)
    if k < 2:
        reasons = [f"need at least 2 observations, got {k}"] * members
    else:
        flat = ~(scale >= MIN_SCORE_STD)  # all equal: Standardize would stop scaling, the GP is meaningless
        for member in np.flatnonzero(flat):
            reasons[member] = f"observed scores are all equal (std {scale[member]:.3g} < {MIN_SCORE_STD:g})"
        alone: list[int] = []
        pending = _parts(idx, np.flatnonzero(~flat))
        with torch_threads():  # one thread by default, restored afterwards (see dphypo._threads)
            while pending:
                part = pending.pop()
                if part.size == 0:
                    continue
                try:
                    part_posterior, usable, stopped, part_hyper = _fit_and_predict(
                        factors, idx[part], y[part], initial[part]
                    )
                except _FIT_ERRORS:
                    if part.size == 1:
                        alone.append(int(part[0]))
                    else:  # isolate the member(s) whose evaluation raised; the others' fits do not depend on them
                        pending += [part[: part.size // 2], part[part.size // 2 :]]
                    continue
                posterior.put(part[usable], part_posterior, rows=np.flatnonzero(usable))
                hyper[part[usable]] = part_hyper[usable]
                for member in part[usable & stopped]:
                    caught[member] = ("OptimizationWarning: L-BFGS-B stopped at its iteration limit",)
                alone.extend(int(member) for member in part[~usable])
            for b in sorted(alone):
                refitted[b] = True
                single, reasons[b], caught[b], hyper[b] = _fit_alone(factors, idx[b], y[b], int(seeds[b]))
                if single is not None:
                    posterior.put(np.array([b]), single)
            mean, std = posterior.score_moments()
        ok = np.all(np.isfinite(mean), axis=1) & np.all(np.isfinite(std), axis=1)
        for member in np.flatnonzero(~ok & ~flat):
            reasons[member] = reasons[member] or "GP posterior is not finite"
    mean[~ok], std[~ok], hyper[~ok] = np.nan, np.nan, np.nan
    posterior.put(np.flatnonzero(~ok), GridPosterior.empty(factors, int(np.count_nonzero(~ok)), size, 2 + dim))
    return SurrogateFit(
        mean=mean.reshape((*batch, size)),
        std=std.reshape((*batch, size)),
        ok=ok.reshape(batch),
        reasons=tuple(reasons),
        score_loc=loc.reshape(batch),
        score_scale=scale.reshape(batch),
        warnings=tuple(caught),
        refitted=refitted.reshape(batch),
        hyper=hyper.reshape((*batch, 2 + dim)),
        posterior=posterior,
    )


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
    train_x = factors.grid[torch.as_tensor(idx)]
    train_y = torch.as_tensor(y).unsqueeze(-1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # statuses are read from the optimiser's results instead
        batch = torch.Size([train_x.shape[0]])
        # Built on all k observations: its Standardize (over all of them), priors, bounds and initial values
        # are exactly BoTorch's; only the loss and the posterior use the replicate reduction.
        model = SingleTaskGP(train_x, train_y, outcome_transform=Standardize(m=1, batch_shape=batch))
        data = _Replicates.of(factors, idx, model.train_targets)
        hyper, status = _fit_lockstep(model, data, start)
    accepted = (status == _CONVERGED) | (status == _ITERATION_LIMIT)
    transform = _standardize(model)
    with torch.no_grad():
        posterior, factorised = _marginal_posterior(
            factors,
            data.x,
            data.means,
            transform.means.reshape(-1),
            transform.stdvs.reshape(-1),
            torch.as_tensor(hyper),
            data.weights,
        )
    return posterior, accepted & factorised, status == _ITERATION_LIMIT, hyper


@dataclass(frozen=True)
class _Replicates:
    """Each member's observations reduced to its distinct grid points (padded to the batch's largest count).

    With u_b distinct points among member b's k observations, row b holds them in grid order in its first u_b
    entries; the remaining (padding) entries have weight 0 and are neutralised by the loss and the posterior.

    Attributes:
        x: Unit coordinates of the distinct points, shape ``(m, u, d)`` (padding: any grid point).
        means: Mean standardised score ȳ_i at each distinct point, shape ``(m, u)`` (padding: 0).
        weights: 1/n_i, the inverse number of observations at each point, shape ``(m, u)`` (padding: 0).
        unique: u_b, shape ``(m,)``, int64.
        within: Within-point sum of squares Σ_i SS_i of the standardised scores, shape ``(m,)``.
        log_counts: Σ_i log n_i, shape ``(m,)``.
        total: k, the number of observations of every member.
    """

    x: torch.Tensor
    means: torch.Tensor
    weights: torch.Tensor
    unique: torch.Tensor
    within: torch.Tensor
    log_counts: torch.Tensor
    total: int

    @staticmethod
    def of(factors: GridFactors, idx: np.ndarray, targets: torch.Tensor) -> _Replicates:
        """Reduce observations at grid indices ``idx`` ``(m, k)`` with standardised scores ``targets`` ``(m, k)``."""
        members, k = idx.shape
        # O(m·k log k) with no (m, n) arrays: small t on a large grid costs no more than before the reduction.
        order = np.argsort(idx, axis=1, kind="stable")  # stable: each point's scores stay in observation order
        ordered = np.take_along_axis(idx, order, axis=1)
        y = np.take_along_axis(targets.detach().numpy(), order, axis=1)
        first = np.ones((members, k), dtype=bool)
        first[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
        position = np.cumsum(first, axis=1) - 1  # rank of each observation's point among the member's points
        unique = position[:, -1] + 1
        width = int(unique.max())
        flat = (position + width * np.arange(members)[:, None]).ravel()
        # bincount sums each point's scores in observation order: a member's statistics do not depend on
        # the other members of the batch.
        counts = np.bincount(flat, minlength=members * width).reshape(members, width)
        sums = np.bincount(flat, weights=y.ravel(), minlength=members * width).reshape(members, width)
        present = counts > 0
        point_means = np.where(present, sums / np.maximum(counts, 1), 0.0)
        deviation = y - np.take_along_axis(point_means, position, axis=1)
        points = np.zeros((members, width), dtype=np.int64)  # padding: grid point 0 (its weight is 0)
        rows, columns = np.nonzero(first)
        points[rows, position[rows, columns]] = ordered[rows, columns]
        return _Replicates(
            x=factors.grid[torch.as_tensor(points)],
            means=torch.as_tensor(point_means),
            weights=torch.as_tensor(np.where(present, 1.0 / np.maximum(counts, 1), 0.0)),
            unique=torch.as_tensor(unique.astype(np.int64)),
            within=torch.as_tensor((deviation**2).sum(axis=1)),
            log_counts=torch.as_tensor(np.log(np.maximum(counts, 1)).sum(axis=1)),
            total=k,
        )

    def rows(self, rows: torch.Tensor) -> _Replicates:
        """The members ``rows``, padding trimmed to their largest number of distinct points."""
        width = int(self.unique[rows].max())
        return _Replicates(
            x=self.x[rows, :width],
            means=self.means[rows, :width],
            weights=self.weights[rows, :width],
            unique=self.unique[rows],
            within=self.within[rows],
            log_counts=self.log_counts[rows],
            total=self.total,
        )


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
            transform = _standardize(model)
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
    return posterior, None, recorded, hyper.numpy()


def _format_warnings(caught: list[warnings.WarningMessage]) -> tuple[str, ...]:
    """Recorded warnings as ``"Category: message"`` strings, in emission order."""
    return tuple(f"{w.category.__name__}: {w.message}" for w in caught)


def _fit_lockstep(
    model: SingleTaskGP, data: _Replicates, start: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Maximise every member's marginal log-likelihood with its own scipy L-BFGS-B state, evaluations batched.

    The model's bounds and priors are BoTorch's own, and so is the start of a member without a warm start (the
    priors' modes); the loss and its gradient are computed by :class:`_NegativeMarginalLogLikelihood` on the
    replicate-reduced data (the same function as BoTorch's loss closure on all observations, agreeing to
    ~1e-13; ``tests/strategies/test_surrogate.py``).

    Args:
        model: The batch model on all observations (its outcome transform, priors and bounds).
        data: The members' replicate-reduced observations.
        start: Initial hyperparameters, shape ``(m, 2 + d)``; non-finite rows use BoTorch's default start.
            A warm start is clipped to the bounds.

    Returns:
        ``(hyper, status)``: the fitted hyperparameters ``(noise, constant, lengthscale_1..d)`` of shape
        ``(m, 2 + d)``, and each member's L-BFGS-B status, shape ``(m,)``: ``fit_gpytorch_mll`` accepts
        converged, or stopped at the iteration limit (BoTorch's ``scipy_minimize`` reports that as STOPPED,
        which its default warning handler accepts); any other stop makes BoTorch retry from hyperparameters
        sampled from the priors.
    """
    members = int(data.unique.shape[0])
    parameters, bounds = get_parameters_and_bounds(ExactMarginalLogLikelihood(model.likelihood, model))
    parameters = {name: p for name, p in parameters.items() if p.requires_grad}
    _check_default_model(model, tuple(parameters))
    default = np.concatenate([p.detach().reshape(members, -1).numpy() for p in parameters.values()], axis=1)
    per_member_bounds = _per_member_bounds(parameters, bounds, members)
    warm = np.all(np.isfinite(start), axis=1)
    initial = np.where(warm[:, None], np.clip(start, per_member_bounds[:, 0], per_member_bounds[:, 1]), default)
    # Defaults equal scipy.optimize.minimize's L-BFGS-B defaults, which BoTorch's fit_gpytorch_mll uses.
    hyper, _, results = fmin_l_bfgs_b_batched(  # type: ignore[no-untyped-call]  # BoTorch leaves it unannotated
        _NegativeMarginalLogLikelihood(model, data), initial, bounds=per_member_bounds, pass_batch_indices=True
    )
    status = np.array([r["status"] for r in results], dtype=np.int64)
    return np.asarray(hyper, dtype=np.float64), status


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
    """BoTorch's fitting loss of every member and its gradient in closed form, on replicate-reduced data.

    BoTorch's loss is −[log N(ỹ | c·1, K + σ²I) + log p(σ²) + Σ_d log p(ℓ_d)] / k over the k standardised
    scores ỹ, with K_ij = exp(−½ Σ_d (x_id − x_jd)²/ℓ_d²) and the model's LogNormal priors (GPyTorch's
    ``ExactMarginalLogLikelihood`` divided by k). On a grid, observations repeat points: let the u distinct
    points have n_i observations each, mean ȳ_i and within-point sum of squares SS_i = Σ_j (ỹ_ij − ȳ_i)².
    Then, exactly (Binois, Gramacy & Ludkovski 2018, "Practical heteroskedastic Gaussian process modeling for
    large simulation experiments", JCGS 27(4): the "Woodbury" identities of its homoskedastic part; the
    constants below are re-derived here and tested against GPyTorch on the replicated data)::

        log N(ỹ | c, K + σ²I) = log N(ȳ | c, K_u + σ² N⁻¹)
                                − (k − u)/2 · log(2πσ²) − ½ Σ_i log n_i − Σ_i SS_i / (2σ²),

    with N = diag(n_i) and K_u the kernel on the distinct points. Derivation: write K = U K_u Uᵀ with U the
    k×u incidence matrix (UᵀU = N) and split ỹ − c = U(ȳ − c) + r, r ⊥ range(U) (r holds the deviations
    from the point means, rᵀr = Σ_i SS_i). Σ = K + σ²I maps range(U) to itself, ΣU = U(σ²I + K_u N), and is
    σ²I on its complement (dimension k − u). Hence (ỹ − c)ᵀΣ⁻¹(ỹ − c) = rᵀr/σ² + (ȳ − c)ᵀN(σ²I + K_u N)⁻¹(ȳ − c)
    = rᵀr/σ² + (ȳ − c)ᵀ(K_u + σ²N⁻¹)⁻¹(ȳ − c), and log det Σ = (k − u) log σ² + log det(σ²I + K_u N)
    = (k − u) log σ² + Σ_i log n_i + log det(K_u + σ²N⁻¹); the k log 2π splits into u + (k − u). The loss is
    therefore the same function of (σ², c, ℓ), constants included, at O(u³) instead of O(k³) per evaluation.

    Gradients (Rasmussen & Williams 2006, eq. 5.9, on A = K_u + σ²N⁻¹): with α = A⁻¹(ȳ − c) and
    W = ααᵀ − A⁻¹: ∂/∂σ² = ½ Σ_i W_ii/n_i − (k − u)/(2σ²) + Σ_i SS_i/(2σ⁴), ∂/∂c = Σα,
    ∂/∂ℓ_d = ½ Σ_ij W_ij K_ij (x_id − x_jd)²/ℓ_d³. Padding entries (weight 0) get A_ii = 1 and no coupling,
    residual 0: they add exactly nothing.

    Args:
        model: The batch model (its priors).
        data: The members' replicate-reduced observations.
    """

    def __init__(self, model: SingleTaskGP, data: _Replicates) -> None:
        self._data = data
        x = data.x
        self._squared = (x[:, :, None, :] - x[:, None, :, :]) ** 2  # (m, u, u, d); fit_surrogate bounds m·u²
        self._present = (data.weights > 0).to(x.dtype)
        self._everyone = list(range(x.shape[0]))
        priors = {name: prior for name, _, prior, _, _ in gpytorch.Module.named_priors(model)}
        self._noise_prior, self._lengthscale_prior = (priors[name] for name in _PRIORS)

    def __call__(self, state: np.ndarray, batch_indices: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """Loss and gradient of the members ``batch_indices`` at ``state`` (shape ``(a, 2 + d)``)."""
        data, squared, present = self._data, self._squared, self._present
        if list(batch_indices) != self._everyone:  # members still iterating: trim their padding
            rows = torch.as_tensor(np.asarray(batch_indices, dtype=np.int64))
            data = data.rows(rows)
            width = data.x.shape[1]
            squared, present = squared[rows, :width, :width], present[rows, :width]
        theta = torch.as_tensor(state)
        noise, constant, lengthscale = theta[:, 0], theta[:, 1], theta[:, 2:]
        x, weights = data.x, data.weights
        rbf = torch.exp(-0.5 * torch.einsum("aijd,ad->aij", squared, lengthscale**-2))
        padded = not bool(present.all())
        if padded:  # padding entries are uncoupled from everything
            rbf.mul_(present[:, :, None] * present[:, None, :])
        # In-place updates of (a, u, u) blocks: at u ≈ 300 these elementwise passes cost as much as the Cholesky.
        matrix = rbf.clone()
        matrix.diagonal(dim1=-2, dim2=-1).add_(noise[:, None] * weights + (1.0 - present))
        chol = torch.linalg.cholesky(matrix)  # raises LinAlgError if not p.d.
        residual = ((data.means - constant[:, None]) * present).unsqueeze(-1)
        alpha = torch.cholesky_solve(residual, chol)
        log_det = 2.0 * torch.log(torch.diagonal(chol, dim1=-2, dim2=-1)).sum(-1)
        unique = data.unique.to(x.dtype)
        repeated = data.total - unique  # k − u
        log_likelihood = -0.5 * (
            (residual * alpha).sum((-1, -2))
            + log_det
            + unique * math.log(2.0 * math.pi)
            + repeated * torch.log(2.0 * math.pi * noise)
            + data.log_counts
            + data.within / noise
        )
        w = torch.cholesky_inverse(chol).neg_().baddbmm_(alpha, alpha.transpose(-1, -2))  # ααᵀ − A⁻¹
        grad_noise = 0.5 * (
            (torch.diagonal(w, dim1=-2, dim2=-1) * weights).sum(-1) - repeated / noise + data.within / noise**2
        )
        grad_constant = alpha.squeeze(-1).sum(-1)
        grad_lengthscale = 0.5 * torch.einsum("aij,aijd->ad", w.mul_(rbf), squared) / lengthscale**3
        prior_noise, dprior_noise = _log_normal_prior(self._noise_prior, noise)
        prior_lengthscale, dprior_lengthscale = _log_normal_prior(self._lengthscale_prior, lengthscale)
        loss = -(log_likelihood + prior_noise + prior_lengthscale.sum(-1)) / data.total
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
        return loss.numpy(), (-grad / data.total).numpy()


def _log_normal_prior(prior: LogNormalPrior, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-density log p(v) by the prior itself (float32 loc/scale included) and d log p/dv.

    d log p/dv = −1/v − (log v − μ)/(s² v) for the LogNormal(μ, s) prior.
    """
    return prior.log_prob(value), -1.0 / value - (value.log() - prior.loc) / prior.scale.pow(2) / value


def _standardize(model: SingleTaskGP) -> Standardize:
    """The model's ``Standardize`` outcome transform (its means and stds map the GP back to score units)."""
    transform = model.outcome_transform
    if not isinstance(transform, Standardize):
        raise TypeError(f"expected a Standardize outcome transform, got {transform!r}")
    return transform


def _check_default_model(model: SingleTaskGP, parameters: tuple[str, ...]) -> None:
    """Refuse a BoTorch whose default ``SingleTaskGP`` is not the model the loss and posterior here assume."""
    covar, likelihood = model.covar_module, model.likelihood
    priors = {name: prior for name, _, prior, _, _ in gpytorch.Module.named_priors(model)}
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
            "the GP surrogate assumes BoTorch's default SingleTaskGP (ConstantMean, RBFKernel without "
            "outputscale, homoskedastic Gaussian noise, LogNormal priors, bounds without transform); this "
            f"BoTorch builds {type(model.mean_module).__name__}, {type(covar).__name__}, parameters "
            f"{parameters}, priors {sorted(priors)}: pin botorch 0.18"
        )


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

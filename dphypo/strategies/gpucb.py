"""GP-UCB softmax (DP-HyPO Algorithm 3): refit a GP, score the grid by its UCB, tilt the prior by exp(β·UCB).

One session serves a single search (the tuner calls :meth:`GPUCBSession.density` with its observations) and a
batch of B searches advanced in lockstep (the batched simulation engine calls :meth:`GPUCBSession.update`);
the single search is the batch of one, so both follow the same rules: the prior before any observation, the
previous density (or the prior) whenever the GP is unavailable, else the tilted softmax of the UCB.

Two algorithm choices, shared by the tuner and the simulator because both run this session; each depends only
on the member's own observations (never on public values or other members), so runs stay deterministic at
equal seeds:

* Warm start: each member's GP fit starts L-BFGS-B from the hyperparameters of that member's last successful
  fit instead of BoTorch's default start, so a fit costs a few iterations once the hyperparameters settle. It
  changes the optimiser's start, not the likelihood it maximises.
* Refit schedule (``refit_growth`` = r ≥ 0, issue #15): a member's hyperparameters and ``Standardize``
  transform are refitted at step t when t ≥ (1 + r)·t_fit, t_fit the number of observations at its last fit
  (and whenever it has no usable fit). In between, the last fitted GP is conditioned exactly on each new
  observation (:class:`~dphypo.strategies.posterior.GridPosterior`, O(R·n) work per observation), so the
  density at step t is the posterior of all t observations under the hyperparameters fitted at t_fit. r = 0
  refits at every step (DP-HyPO Algorithm 3). With r > 0 a search of T runs makes about
  1/r + log(rT)/log(1 + r) fits instead of T (every step while t < 1/r), so the GP's cost per step stops
  growing with T. A failed run is conditioned on with the value it was imputed at when it arrived (the worst
  finite score so far); a refit re-imputes. The schedule is configuration, fixed before any data.

Importing this module does not import torch: :mod:`dphypo.strategies.surrogate` (BoTorch) is loaded when a
session starts, so uniform search stays light.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from numpy.typing import ArrayLike

from dphypo.privacy.tuning import check_density_bounds
from dphypo.strategies.base import (
    SCALES,
    Direction,
    Scale,
    StrategyEvent,
    check_direction,
    check_seed,
    checked_prior,
    orient,
    split_observations,
    step_seed,
)

if TYPE_CHECKING:
    from dphypo.space import SearchSpace
    from dphypo.strategies.posterior import GridPosterior

__all__ = [
    "GPUCB",
    "GPRule",
    "GPUCBSession",
    "check_refit_growth",
    "start_gp_session",
    "tilted_softmax",
    "ucb_scores",
]


def check_refit_growth(refit_growth: float) -> None:
    """Refuse a refit schedule that is not a finite number r ≥ 0 (module docstring)."""
    if isinstance(refit_growth, bool) or not isinstance(refit_growth, int | float) or not (
        np.isfinite(refit_growth) and refit_growth >= 0
    ):
        raise ValueError(f"refit_growth must be a finite number >= 0, got {refit_growth!r}")


class GPRule(Protocol):
    """What a GP session needs from its strategy: the rule turning each member's GP posterior into a density.

    Attributes:
        refit_growth: The refit schedule's r ≥ 0 (module docstring).
    """

    @property
    def refit_growth(self) -> float:
        """Refit a member's GP once its observations grew by this fraction since its last fit (0: every step)."""
        ...

    def densities(
        self, mean: np.ndarray, std: np.ndarray, loc: np.ndarray, scale: np.ndarray, prior: np.ndarray
    ) -> np.ndarray:
        """Unprojected densities of m members, shape ``(m, n)``, from their posteriors (oriented scores).

        Args:
            mean: Posterior means, shape ``(m, n)``.
            std: Posterior standard deviations, shape ``(m, n)``.
            loc: Mean of each member's observed scores, shape ``(m,)``.
            scale: Their sample standard deviation, shape ``(m,)``.
            prior: Prior over the grid, shape ``(n,)``.
        """
        ...


@dataclass(frozen=True)
class GPUCB:
    """GP-UCB softmax strategy (DP-HyPO Algorithm 3, Wang et al. 2023).

    After each run the GP is updated with all observations (refitted, or conditioned between scheduled refits:
    ``refit_growth``), the upper confidence bound s = μ + τσ is computed
    on the grid (on the oriented score, so higher s is better also when minimising), and the density is the
    softmax π(λ) ∝ π0(λ)·exp(β·s_λ) (see :func:`tilted_softmax`; the paper's uniform π0 gives its
    exp(βs_λ)/Σexp(βs)). With no observations, or when the GP cannot be fitted (one observation, all-equal
    scores, fitting error), the previous density (or the prior) is returned and a ``"fallback"`` event is
    recorded. The tuner projects every density onto S_{C,c}(π0) with this strategy's ``C`` and ``c``.

    The scale of s decides how peaked the softmax is, and thus whether the projection onto S_{C,c} binds:

    * ``"raw"``: s in the score's own units (the paper's form; β=1 on accuracies in [0, 1] is nearly flat).
    * ``"standardized"``: μ and σ in units of the observed scores' standard deviation (the GP's
      ``Standardize`` space; μ is also centred, which the softmax ignores). τ keeps its meaning and β is
      per observed standard deviation, whatever the score's units.
    * ``"range"``: s mapped affinely onto [0, 1] over the grid, so β is the log-ratio of the largest to the
      smallest density-to-prior ratio before projection.

    Default ``scale="standardized", beta=1``: in ``benchmarks/sampler.py`` (T=20, C=2, c=0.75, synthetic
    accuracy bump on the 320-point MNIST grid, noise 0.02, 200 repeats) it gave the best true value of the
    released point, 0.822 ± 0.016 vs 0.773 ± 0.020 for uniform search, while the paper's raw β=1 gave
    0.781 ± 0.020 (its softmax is nearly flat, so the search is nearly uniform). Standardised β ∈ [0.5, 2]
    and range β=3 were within noise of it. Too peaked a softmax is worse, not better: the Euclidean
    projection of a near-point-mass pins a few points at C·π0 and spreads the rest almost evenly.

    Attributes:
        C: Upper density-ratio bound, finite, ≥ 1 (DP-HyPO eq. 3.1; the paper uses 2).
        c: Lower density-ratio bound, 0 < c ≤ 1 (the paper uses 0.75).
        tau: UCB exploration weight τ ≥ 0 (the paper uses 0.1). BoTorch's ``UpperConfidenceBound(beta=b)``
            is μ + √b·σ, i.e. τ = √b.
        beta: Softmax inverse temperature β ≥ 0 (the paper uses 1 with raw scores).
        scale: ``"raw"``, ``"standardized"`` or ``"range"`` (see above).
        refit_growth: Refit the GP's hyperparameters once a search's observations grew by this fraction since
            its last fit, and condition the fitted GP exactly on the observations in between (module docstring).
            0 refits at every step, as DP-HyPO Algorithm 3. The default 0.1 refits at every step up to t = 10,
            then at t = 11, 13, 15, 17, 19, 21, 24, …: 14 fits instead of 19 in a search of T = 20 runs, 29
            instead of 99 at T = 100, 53 instead of 999 at T = 1,000. Measured on the digits landscape
            (σ 1.7673, C = 2, c = 0.75, geometric T, paired repeats), released accuracy with 0.1 minus with 0:
            −0.0006 [−0.0020, +0.0009] at E[T] = 20 (200 repeats), +0.0006 [−0.0012, +0.0024] at E[T] = 100
            (100 repeats): no detectable change, at 2.8× and 5.7× less CPU (``benchmarks/refit_schedule.py``).

    Example:
        >>> from dphypo.space import Float, SearchSpace
        >>> from dphypo.strategies import GPUCB
        >>> strategy = GPUCB(beta=2.0)
        >>> strategy.C, strategy.c, strategy.tau
        (2.0, 0.75, 0.1)
        >>> space = SearchSpace({"x": Float(0.0, 1.0, 5)})
        >>> session = strategy.start(space, "maximize", seed=0)
        >>> session.density([]).tolist()  # no observation yet: the prior
        [0.2, 0.2, 0.2, 0.2, 0.2]
        >>> density = session.density([(0, 0.1), (4, 0.9), (2, 0.6)])
        >>> int(density.argmax()), bool(density[4] > 0.2 > density[0])
        (4, True)
        >>> [event.kind for event in session.events]
        []
    """

    C: float = 2.0
    c: float = 0.75
    tau: float = 0.1
    beta: float = 1.0
    scale: Scale = "standardized"
    refit_growth: float = 0.1

    def __post_init__(self) -> None:
        """Validate eagerly."""
        check_density_bounds(self.C, self.c)
        check_refit_growth(self.refit_growth)
        if not (np.isfinite(self.tau) and self.tau >= 0):
            raise ValueError(f"tau must be a finite number >= 0, got {self.tau!r}")
        if not (np.isfinite(self.beta) and self.beta >= 0):
            raise ValueError(f"beta must be a finite number >= 0, got {self.beta!r}")
        if self.scale not in SCALES:
            raise ValueError(f"scale must be one of {SCALES}, got {self.scale!r}")

    @property
    def name(self) -> str:
        """Strategy identifier."""
        return "gp-ucb"

    def start(self, space: SearchSpace, direction: Direction, seed: int) -> GPUCBSession:
        """Open a GP-UCB session for one search (the batch of one).

        Args:
            space: Search space with ``unit_coordinates`` ``(n, d)`` and ``prior`` ``(n,)``.
            direction: ``"maximize"`` or ``"minimize"`` the score.
            seed: Non-negative integer; the GP fit at step t is seeded from ``(seed, t)``.

        Returns:
            A :class:`GPUCBSession` with one member.
        """
        check_seed(seed)
        return self.start_batch(space, direction, [seed])

    def start_batch(self, space: SearchSpace, direction: Direction, seeds: Sequence[int]) -> GPUCBSession:
        """Open one session for ``len(seeds)`` independent searches advanced in lockstep.

        Args:
            space: Search space with ``unit_coordinates`` ``(n, d)`` and ``prior`` ``(n,)``.
            direction: ``"maximize"`` or ``"minimize"`` the score.
            seeds: One non-negative integer per member.

        Returns:
            A :class:`GPUCBSession` with ``len(seeds)`` members.
        """
        return start_gp_session(self, space, direction, seeds)

    def densities(
        self, mean: np.ndarray, std: np.ndarray, loc: np.ndarray, scale: np.ndarray, prior: np.ndarray
    ) -> np.ndarray:
        """The GP-UCB rule: softmax(β·UCB) tilted by the prior (:func:`ucb_scores`, :func:`tilted_softmax`)."""
        return tilted_softmax(ucb_scores(mean, std, loc, scale, self.tau, self.scale), self.beta, prior)


def start_gp_session(rule: GPRule, space: SearchSpace, direction: Direction, seeds: Sequence[int]) -> GPUCBSession:
    """Open a GP session for ``len(seeds)`` searches whose densities come from ``rule`` (GP-UCB or another rule).

    Args:
        rule: The strategy; its ``densities`` turns the GP posteriors into densities.
        space: Search space with ``unit_coordinates`` ``(n, d)`` and ``prior`` ``(n,)``.
        direction: ``"maximize"`` or ``"minimize"`` the score.
        seeds: One non-negative integer per member.

    Returns:
        A :class:`GPUCBSession` with ``len(seeds)`` members.
    """
    check_direction(direction)
    for seed in seeds:
        check_seed(seed)
    # Import BoTorch now, so a broken install fails here instead of as a silent fallback on every step.
    from dphypo.strategies import surrogate

    prior = checked_prior(space)
    coords = np.asarray(space.unit_coordinates, dtype=np.float64)
    if coords.ndim != 2 or coords.shape[0] != prior.size:
        raise ValueError(f"space.unit_coordinates must have shape ({prior.size}, d), got {coords.shape!r}")
    return GPUCBSession(rule, surrogate.GridFactors(coords), prior, direction, np.asarray(seeds, np.int64))


class GPUCBSession:
    """Session of :class:`GPUCB` (or another :class:`GPRule`) for B searches: each member's GP, refitted or conditioned.

    Each update refits a member's GP, or conditions its last fit on the new observations, as the rule's
    ``refit_growth`` schedules (module docstring).

    Args:
        config: The strategy configuration (its ``densities`` is the rule).
        grid: The grid's :class:`~dphypo.strategies.surrogate.GridFactors` (unit coordinates ``(n, d)``).
        prior: Prior over the grid, shape ``(n,)``.
        direction: ``"maximize"`` or ``"minimize"``.
        seeds: One non-negative integer seed per member, shape ``(B,)``.
    """

    def __init__(self, config: GPRule, grid: Any, prior: np.ndarray, direction: Direction, seeds: np.ndarray) -> None:
        self._config = config
        self._grid = grid
        self._prior = prior
        self._direction = direction
        self._seeds = seeds
        self._previous = np.tile(prior, (seeds.size, 1))  # each member's last density (a fallback reuses it)
        self._has_previous = np.zeros(seeds.size, dtype=bool)
        self._failed_reported = np.zeros(seeds.size, dtype=np.int64)
        self._events: list[list[StrategyEvent]] = [[] for _ in range(seeds.size)]
        self._hyper: np.ndarray | None = None  # each member's last fitted GP hyperparameters (warm start), (B, p)
        self._growth = float(config.refit_growth)
        # Each member's GP: the posterior of its last fit, conditioned on the observations since (refit schedule).
        self._model: GridPosterior | None = None
        self._refit_at = np.zeros(seeds.size, dtype=np.int64)  # step at which the member refits (0: no model)
        self._held = np.zeros(seeds.size, dtype=np.int64)  # observations its model holds
        self._held_indices = np.zeros((seeds.size, 0), dtype=np.int64)  # ... and what they were (prefix check)
        self._held_scores = np.zeros((seeds.size, 0))

    @property
    def members(self) -> int:
        """Number of searches B in this session."""
        return self._seeds.size

    @property
    def events(self) -> list[StrategyEvent]:
        """Recorded fallbacks, fit warnings and imputed failed runs of a one-member session, in order (a copy)."""
        if self.members != 1:
            raise ValueError(f"events is for a one-member session; use member_events(b) for {self.members}")
        return self.member_events(0)

    def member_events(self, member: int) -> list[StrategyEvent]:
        """Events of member ``member`` (a copy)."""
        return list(self._events[member])

    def density(self, observations: Sequence[tuple[int, float]]) -> np.ndarray:
        """Update the GP of a one-member session with all its observations (refit or condition, per the schedule).

        Args:
            observations: ``(grid index, score)`` pairs in run order; failed runs have a non-finite score.

        Returns:
            The rule's unprojected density (GP-UCB: softmax(β·UCB)), shape ``(n,)``, non-negative, summing to 1.
        """
        if self.members != 1:
            raise ValueError(f"density is for a one-member session; use update() for {self.members} members")
        indices, scores = split_observations(observations, self._prior.size)
        densities, _ = self.update(np.zeros(1, dtype=np.int64), indices[None], scores[None])
        return densities[0]

    def update(self, members: ArrayLike, indices: ArrayLike, scores: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        """Densities of the given members from all their observations so far (each member at the same step t).

        Args:
            members: Which members, shape ``(m,)``, distinct integers in ``[0, B)``.
            indices: Their runs' grid indices, shape ``(m, t)``.
            scores: Their runs' scores, shape ``(m, t)``; failed runs non-finite.

        Returns:
            ``(densities, refitted)``: unprojected densities, shape ``(m, n)``, non-negative, each summing to 1;
            and which members got a new density from their GP at this step (refitted or conditioned), shape
            ``(m,)`` (the others reuse their previous density or the prior, unchanged).
        """
        members = np.asarray(members, dtype=np.int64)
        indices, scores = np.asarray(indices, dtype=np.int64), np.asarray(scores, dtype=np.float64)
        step = indices.shape[1]
        self._report_failed_runs(members, indices, scores)
        refitted = np.zeros(members.size, dtype=bool)
        if step == 0:
            densities = np.tile(self._prior, (members.size, 1))
        else:
            utilities = orient(scores, self._direction)
            finite = np.all(np.isfinite(utilities), axis=1)
            for b in members[~finite]:
                self._fallback(b, step, "no finite score observed yet")
            densities = self._previous[members]  # a copy (fancy indexing); fallbacks keep these rows
            usable = np.flatnonzero(finite)
            current = self._model_is_current(members[usable], indices[usable], scores[usable])
            held = usable[current]
            if held.size:
                densities[held] = self._from_model(members[held], indices[held], utilities[held])
                refitted[held] = True
            due = usable[~current]
            if due.size:
                fitted, new = self._from_fit(members[due], step, indices[due], utilities[due])
                densities[due[fitted]], refitted[due[fitted]] = new, True
            self._remember(members, indices, scores)
        self._previous[members] = densities
        self._has_previous[members] = True
        return densities.copy(), refitted

    def _model_is_current(self, members: np.ndarray, indices: np.ndarray, scores: np.ndarray) -> np.ndarray:
        """Which members' models can be conditioned instead of refitted.

        A model can be conditioned when no refit is due and the observations extend the ones it holds (a session
        fed a different history refits).

        Args:
            members: Shape ``(m,)``.
            indices: Their observations' grid indices, shape ``(m, t)``.
            scores: Their raw scores, shape ``(m, t)``.

        Returns:
            Shape ``(m,)``, bool.
        """
        step = indices.shape[1]
        held = self._held[members]
        width = min(step, self._held_indices.shape[1])
        old_scores, new_scores = self._held_scores[members, :width], scores[:, :width]
        same = (self._held_indices[members, :width] == indices[:, :width]) & (
            (old_scores == new_scores) | (np.isnan(old_scores) & np.isnan(new_scores))
        )
        kept = np.all(same | (np.arange(width) >= held[:, None]), axis=1) & (held <= step)
        return (self._refit_at[members] > 0) & (step < self._refit_at[members]) & kept

    def _remember(self, members: np.ndarray, indices: np.ndarray, scores: np.ndarray) -> None:
        """Keep the members' observations (what their models hold is a prefix of them)."""
        step, width = indices.shape[1], self._held_indices.shape[1]
        if step > width:
            grown = max(step, 2 * width)
            self._held_indices = np.pad(self._held_indices, ((0, 0), (0, grown - width)), constant_values=-1)
            self._held_scores = np.pad(self._held_scores, ((0, 0), (0, grown - width)), constant_values=np.nan)
        self._held_indices[members, :step] = indices
        self._held_scores[members, :step] = scores

    def _from_model(self, members: np.ndarray, indices: np.ndarray, utilities: np.ndarray) -> np.ndarray:
        """Condition the members' models on their new observations and turn the posteriors into densities.

        Args:
            members: Shape ``(m,)``; each has a model holding a prefix of its observations.
            indices: Shape ``(m, t)``.
            utilities: Oriented, imputed scores, shape ``(m, t)``, finite.

        Returns:
            Densities, shape ``(m, n)``.
        """
        model = self._model
        assert model is not None  # _model_is_current is False for every member without a model
        held, step = self._held[members], indices.shape[1]
        for j in range(int(held.min()), step):
            new = held <= j  # members whose model does not hold observation j yet
            model.condition(members[new], indices[new, j], utilities[new, j])
        self._held[members] = step
        mean, std = model.score_moments(members)
        loc, scale = model.standardization(members)
        return self._config.densities(mean, std, loc, scale, self._prior)

    def _from_fit(
        self, members: np.ndarray, step: int, indices: np.ndarray, utilities: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Fit the members' surrogates and turn their UCBs into densities; record fallbacks and warnings.

        Args:
            members: Shape ``(m,)``.
            step: Number of observations t.
            indices: Shape ``(m, t)``.
            utilities: Oriented, imputed scores (higher is better), shape ``(m, t)``, finite.

        Returns:
            ``(fitted, densities)``: which members got a usable fit, shape ``(m,)``, and their densities,
            shape ``(fitted.sum(), n)``.
        """
        from dphypo.strategies import surrogate  # attribute looked up at call time: patchable in tests

        seeds = np.array([step_seed(int(self._seeds[b]), step) for b in members], dtype=np.int64)
        try:
            start = None if self._hyper is None else self._hyper[members]
            fit = surrogate.fit_surrogate(self._grid, indices, utilities, seed=seeds, start=start)
        except Exception as err:  # any model error must not end a search that has spent privacy budget
            for b in members:
                self._fallback(b, step, f"surrogate raised {type(err).__name__}: {err}")
            return np.zeros(members.size, dtype=bool), np.empty((0, self._prior.size))
        for b, caught in zip(members, fit.warnings, strict=True):
            self._events[b] += [StrategyEvent(step, "fit-warning", message) for message in caught]
        ok = np.asarray(fit.ok, dtype=bool)
        if self._hyper is None:
            self._hyper = np.full((self.members, fit.hyper.shape[-1]), np.nan)
        self._hyper[members[ok]] = fit.hyper[ok]  # a failed fit keeps the member's previous warm start
        if self._model is None:
            from dphypo.strategies.posterior import GridPosterior

            self._model = GridPosterior.empty(self._grid, self.members, self._prior.size, fit.hyper.shape[-1])
        self._model.put(members[ok], fit.posterior, rows=np.flatnonzero(ok))
        self._held[members[ok]] = step
        # The smallest step ≥ (1 + r)·step (the 1e-9 absorbs round-off, e.g. 1.1·10 = 11.000000000000002).
        self._refit_at[members[ok]] = max(step, math.ceil((1.0 + self._growth) * step - 1e-9))
        self._refit_at[members[~ok]] = 0  # no usable model: refit at the next update
        for b, reason in zip(members[~ok], np.asarray(fit.reasons, dtype=object)[~ok], strict=True):
            self._fallback(b, step, f"surrogate fit not usable: {reason}")
        rule = self._config
        return ok, rule.densities(fit.mean[ok], fit.std[ok], fit.score_loc[ok], fit.score_scale[ok], self._prior)

    def _fallback(self, member: int, step: int, reason: str) -> None:
        """Record that ``member`` keeps its previous density (or the prior, if it has none)."""
        target = "previous density" if self._has_previous[member] else "prior"
        self._events[member].append(StrategyEvent(step, "fallback", f"{reason}; using the {target}"))

    def _report_failed_runs(self, members: np.ndarray, indices: np.ndarray, scores: np.ndarray) -> None:
        """Record one ``"failed-run"`` event per failed run of each member not reported before."""
        failed = np.count_nonzero(~np.isfinite(scores), axis=1)
        step = scores.shape[1]
        for row in np.flatnonzero(failed > self._failed_reported[members]):
            b = members[row]
            bad = np.flatnonzero(~np.isfinite(scores[row]))
            for i in bad[self._failed_reported[b] :]:
                message = (
                    f"run {i} (grid index {indices[row, i]}) scored {scores[row, i]!r}; treated as the worst "
                    "finite score"
                )
                self._events[b].append(StrategyEvent(step, "failed-run", message))
            self._failed_reported[b] = failed[row]


def ucb_scores(
    mean: ArrayLike, std: ArrayLike, score_loc: ArrayLike, score_scale: ArrayLike, tau: float, scale: Scale
) -> np.ndarray:
    """Upper confidence bound s = μ + τσ on the grid in the requested scale (DP-HyPO Algorithm 3).

    Args:
        mean: Posterior means of the oriented scores, shape ``(..., n)``.
        std: Posterior standard deviations, shape ``(..., n)``.
        score_loc: Mean of each search's observed scores, shape ``(...)``.
        score_scale: Their sample standard deviation, shape ``(...)``.
        tau: Exploration weight τ ≥ 0.
        scale: ``"raw"`` (score units), ``"standardized"`` (units of the observed scores' std, centred) or
            ``"range"`` (affinely mapped onto [0, 1] over the grid; all zeros where s is constant).

    Returns:
        Shape ``(..., n)``.
    """
    mean, std = np.asarray(mean, dtype=np.float64), np.asarray(std, dtype=np.float64)
    if scale == "standardized":
        loc = np.asarray(score_loc, dtype=np.float64)[..., None]
        spread = np.asarray(score_scale, dtype=np.float64)[..., None]
        return (mean - loc) / spread + tau * std / spread
    s = mean + tau * std
    if scale == "raw":
        return s
    if scale == "range":
        low, spread = s.min(axis=-1, keepdims=True), np.ptp(s, axis=-1, keepdims=True)
        flat = ~(spread > 0)
        return np.where(flat, 0.0, (s - low) / np.where(flat, 1.0, spread))
    raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")


def tilted_softmax(s: ArrayLike, beta: float, prior: np.ndarray) -> np.ndarray:
    """Softmax tilted by the prior: π(λ) = π0(λ)·exp(β s_λ) / Σ_λ' π0(λ')·exp(β s_λ').

    For the uniform π0 of DP-HyPO Algorithm 3 this is exactly its exp(β s_λ)/Σ exp(β s_λ'). For another π0
    it keeps the ratio π/π0 — the quantity the projection onto S_{C,c}(π0) bounds — equal to exp(β s)/Z, and
    β = 0 gives back the prior.

    Args:
        s: Scores, shape ``(..., n)``, finite.
        beta: Inverse temperature β ≥ 0.
        prior: Prior, shape ``(n,)``, non-negative, summing to 1.

    Returns:
        Densities of shape ``(..., n)``, non-negative, each summing to 1, zero where the prior is zero.
    """
    s = np.asarray(s, dtype=np.float64)
    if s.shape[-1:] != prior.shape or not np.all(np.isfinite(s)):
        raise ValueError(f"s must be finite with shape (..., {prior.size}), got shape {s.shape!r}")
    support = prior > 0
    # Shift by the max over the prior's support so the best supported point has weight π0·1 > 0 (no underflow
    # to an all-zero vector, no overflow).
    top = np.max(np.where(support, s, -np.inf), axis=-1, keepdims=True)
    weights = np.where(support, prior * np.exp(np.minimum(beta * (s - top), 0.0)), 0.0)
    return weights / weights.sum(axis=-1, keepdims=True)

"""The GP rules: how a GP posterior becomes a density (GP-UCB softmax, GP top-set), and their configurations.

Both rules share one :class:`~dphypo.strategies.gp.session.GPSession` (the GP, its refit schedule and fallbacks);
only the map from the posterior to the density differs:

* :class:`GPUCB` (DP-HyPO Algorithm 3): the softmax of the upper confidence bound μ + τσ, tilted by the prior.
* :class:`GPTopSet`: C·π⁰ on the points most likely to be near the best, c·π⁰ elsewhere. DP-HyPO's Framework 1
  accepts *any* update rule and its privacy cost depends only on (C, c); this rule asks directly for what a
  search that releases its best run needs, a high chance that the next draw lands near the best point. With w_λ
  the GP's posterior probability that λ is within ``tolerance`` of the best, the density in S_{C,c} maximising
  Σ_λ w_λ f_λ is a fractional knapsack (:func:`~dphypo.density.top_mass_density`). Because that density is C·π⁰
  on a set of prior mass exactly ``top_mass`` = (1 − c)/(C − c), the rule fixes c from C and the target mass
  (:func:`~dphypo.density.lower_bound_for_top_mass`): e.g. C = 2 with 5 % needs c = 0.947 (log(C/c) = 0.75), where
  DP-HyPO's c = 0.75 pays log(8/3) = 0.98. (C, top_mass) — hence c — are configuration, fixed before any data.

Both have the batch capability (:class:`~dphypo.strategies.base.BatchStrategy`). Importing this module does not
import torch: the GP fit (BoTorch) is loaded when a session opens, so uniform search stays light.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike
from scipy import special

from dphypo.density import lower_bound_for_top_mass, top_mass_density
from dphypo.privacy.tuning import check_density_bounds
from dphypo.privacy.validation import check_non_negative
from dphypo.strategies.base import SCALES, Direction, MemberSession, Scale, check_seed
from dphypo.strategies.gp.session import GPSession

if TYPE_CHECKING:
    from dphypo.space import SearchSpace

__all__ = [
    "GPUCB",
    "GPTopSet",
    "check_refit_growth",
    "near_best_probability",
    "tilted_softmax",
    "ucb_scores",
]


def check_refit_growth(refit_growth: float) -> None:
    """Refuse a refit schedule that is not a finite number r ≥ 0 (module docstring)."""
    check_non_negative("refit_growth", refit_growth)


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
        >>> session.density().tolist()  # no observation yet: the prior
        [0.2, 0.2, 0.2, 0.2, 0.2]
        >>> for index, score in [(0, 0.1), (4, 0.9), (2, 0.6)]:
        ...     session.observe(index, score)
        >>> density = session.density()
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
        check_non_negative("tau", self.tau)
        check_non_negative("beta", self.beta)
        if self.scale not in SCALES:
            raise ValueError(f"scale must be one of {SCALES}, got {self.scale!r}")

    @property
    def name(self) -> str:
        """Strategy identifier."""
        return "gp-ucb"

    def start(self, space: SearchSpace, direction: Direction, seed: int) -> MemberSession:
        """Open a GP-UCB session for one search (member 0 of a batch of one).

        Args:
            space: Search space with ``unit_coordinates`` ``(n, d)`` and ``prior`` ``(n,)``.
            direction: ``"maximize"`` or ``"minimize"`` the score.
            seed: Non-negative integer; the GP fit at step t is seeded from ``(seed, t)``.

        Returns:
            A :class:`~dphypo.strategies.base.MemberSession` of a one-member :class:`GPSession`.
        """
        check_seed(seed)
        return MemberSession(self.start_batch(space, direction, [seed]))

    def start_batch(self, space: SearchSpace, direction: Direction, seeds: Sequence[int]) -> GPSession:
        """Open one session for ``len(seeds)`` independent searches advanced in lockstep.

        Args:
            space: Search space with ``unit_coordinates`` ``(n, d)`` and ``prior`` ``(n,)``.
            direction: ``"maximize"`` or ``"minimize"`` the score.
            seeds: One non-negative integer per member.

        Returns:
            A :class:`GPSession` with ``len(seeds)`` members.
        """
        return GPSession.open(self, space, direction, seeds)

    def densities(
        self, mean: np.ndarray, std: np.ndarray, loc: np.ndarray, scale: np.ndarray, prior: np.ndarray
    ) -> np.ndarray:
        """The GP-UCB rule: softmax(β·UCB) tilted by the prior (:func:`ucb_scores`, :func:`tilted_softmax`)."""
        return tilted_softmax(ucb_scores(mean, std, loc, scale, self.tau, self.scale), self.beta, prior)


@dataclass(frozen=True)
class GPTopSet:
    """GP top-set rule: C·π⁰ on the points most likely within ``tolerance`` of the best, c·π⁰ elsewhere.

    Attributes:
        C: Upper density-ratio bound > 1.
        top_mass: Prior mass of the favoured set, in (0, 1/C); fixes ``c``.
        tolerance: "Near the best", in units of the observed scores' standard deviation (≥ 0).
        refit_growth: The GP's refit schedule, as :class:`~dphypo.strategies.GPUCB`'s (default 0.1; 0: refit
            every step).
        c: Lower bound, derived: ``lower_bound_for_top_mass(C, top_mass)`` (not a constructor argument).
    """

    C: float = 2.0
    top_mass: float = 0.05
    tolerance: float = 0.5
    refit_growth: float = 0.1
    c: float = field(init=False)

    def __post_init__(self) -> None:
        """Validate eagerly and derive c."""
        check_non_negative("tolerance", self.tolerance)
        check_refit_growth(self.refit_growth)
        object.__setattr__(self, "c", lower_bound_for_top_mass(self.C, self.top_mass))

    @property
    def name(self) -> str:
        """Strategy identifier."""
        return "gp-top-set"

    def densities(self, mean: np.ndarray, std: np.ndarray, loc: np.ndarray, scale: np.ndarray,
                  prior: np.ndarray) -> np.ndarray:
        """The rule: GP posterior (oriented scores) of m members → their densities, shape ``(m, n)``."""
        priority = near_best_probability(mean, std, self.tolerance * np.asarray(scale, dtype=np.float64))
        # Many points can be near-certainly near the best (probability 1.0 in float64): prefer the higher mean.
        return top_mass_density(priority, prior, self.C, self.c, tiebreak=mean)

    def start(self, space: SearchSpace, direction: Direction, seed: int) -> MemberSession:
        """Open a one-member session (the GP and its fallbacks are GP-UCB's; only the rule differs)."""
        check_seed(seed)
        return MemberSession(self.start_batch(space, direction, [seed]))

    def start_batch(self, space: SearchSpace, direction: Direction, seeds: Sequence[int]) -> GPSession:
        """Open a session for B searches advanced in lockstep (the batched simulation engine)."""
        return GPSession.open(self, space, direction, seeds)


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


def near_best_probability(mean: ArrayLike, std: ArrayLike, tolerance: ArrayLike) -> np.ndarray:
    """P(f_λ ≥ max_λ' μ_λ' − tolerance) under the GP's marginal posterior N(μ_λ, σ_λ²) (probability of improvement).

    Args:
        mean: Posterior means of the oriented score (higher is better), shape ``(..., n)``.
        std: Posterior standard deviations, shape ``(..., n)``, ≥ 0 (0: a step function of the mean).
        tolerance: How far below the best posterior mean still counts as near, shape ``(...)`` or scalar, ≥ 0.

    Returns:
        Probabilities in [0, 1], shape ``(..., n)``.
    """
    mu, sd = np.asarray(mean, dtype=np.float64), np.asarray(std, dtype=np.float64)
    margin = mu - mu.max(axis=-1, keepdims=True) + np.asarray(tolerance, dtype=np.float64)[..., None]
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(sd > 0, margin / np.where(sd > 0, sd, 1.0), np.where(margin >= 0, np.inf, -np.inf))
    return np.asarray(special.ndtr(z))

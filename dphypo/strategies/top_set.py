"""GP top-set: put C·π⁰ on the grid points most likely to be near the best, the least the bounds allow elsewhere.

DP-HyPO's Framework 1 accepts *any* update rule; its privacy cost depends only on (C, c). The softmax of the UCB
(:class:`~dphypo.strategies.GPUCB`) is one rule; it spends the freedom S_{C,c} gives smoothly over the grid, and
the projection then flattens it. This rule asks directly for what a search that releases its best run needs:
a high chance that the next draw lands near the best point. With w_λ the GP's posterior probability that λ is
within ``tolerance`` of the best (probability of improvement over the best posterior mean minus the tolerance,
from the same fit as GP-UCB), the density in S_{C,c} that maximises the chance Σ_λ w_λ f_λ is a fractional
knapsack (:func:`~dphypo.density.top_mass_density`): C·π⁰ on the highest-w points, c·π⁰ on the rest.

Because that density is C·π⁰ on a set of prior mass exactly ``top_mass`` = (1 − c)/(C − c), the rule fixes c from
C and the target mass (:func:`~dphypo.density.lower_bound_for_top_mass`): log(C/c) is no larger than the density
needs. E.g. C = 2 with top_mass = 5 % needs c = 0.947 (log(C/c) = 0.75), where DP-HyPO's c = 0.75 pays
log(8/3) = 0.98. (C, top_mass) — hence c — are configuration, fixed before any data and accounted like any other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike
from scipy import special

from dphypo.density import lower_bound_for_top_mass, top_mass_density
from dphypo.strategies.gpucb import GPUCBSession, check_refit_growth, start_gp_session

if TYPE_CHECKING:
    from collections.abc import Sequence

    from dphypo.space import SearchSpace
    from dphypo.strategies.base import Direction

__all__ = ["GPTopSet", "near_best_probability"]


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
        if not (np.isfinite(self.tolerance) and self.tolerance >= 0):
            raise ValueError(f"tolerance must be a finite number >= 0, got {self.tolerance!r}")
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

    def start(self, space: SearchSpace, direction: Direction, seed: int) -> GPUCBSession:
        """Open a one-member session (the GP and its fallbacks are GP-UCB's; only the rule differs)."""
        return start_gp_session(self, space, direction, [seed])

    def start_batch(self, space: SearchSpace, direction: Direction, seeds: Sequence[int]) -> GPUCBSession:
        """Open a session for B searches advanced in lockstep (the batched simulation engine)."""
        return start_gp_session(self, space, direction, seeds)

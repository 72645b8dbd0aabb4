r"""RDP of a whole hyperparameter search: run a random number T of candidates, release only the best.

Theorems implemented (each only within its proven scope):

* DP-HyPO (Wang et al. 2023) **Theorem 1** — adaptive search, T ~ TNB(θ, γ), sampling densities within
  [c, C] × the prior. If every candidate is (α, ε)- and (α̂, ε̂)-RDP then the search is (α, ε′)-RDP with

      ε′ = ε + (1+θ)(1 − 1/α̂) ε̂ + (α/(α−1) + 1 + θ) log(C/c) + (1+θ) log(1/γ)/α̂ + log(E[T])/(α−1).

  At C = c = 1 this is exactly Papernot & Steinke 2022, Theorem 2. For C > c the published *proof* has a gap
  (Lemma A.5); the statement is implied by the proven, tighter Theorem A of ``docs/proofs/adaptive.md``
  (:mod:`dphypo.privacy.adaptive`); :func:`~dphypo.privacy.search_rdp.tuning_rdp` uses its sharpening Theorem B by
  default (Theorem A and the published bound are opt-in).
* DP-HyPO **Theorem 2** — every candidate ε-DP ⇒ the search is ((2+θ)(ε + log(C/c)), 0)-DP
  (C = c = 1: Papernot & Steinke 2022, Corollary 3; θ = 1: Liu & Talwar's 3ε).
* Papernot & Steinke 2022 **Theorem 6** — T ~ Poisson(μ), *uniform* search only (C = c = 1): if every candidate
  is (α, ε)-RDP and (ε̂, δ̂)-DP with e^{ε̂} ≤ 1 + 1/(α−1), the search is (α, ε + μ δ̂ + log(μ)/(α−1))-RDP.
  DP-HyPO states no Poisson theorem (its text only says the proof "can be adapted"), so an adaptive search with
  Poisson T is refused with :class:`AdaptivePoissonError`.

References (docs/references.md): Wang et al. 2023 (DP-HyPO) arXiv:2306.05734v2; Papernot & Steinke 2022
arXiv:2110.03620v2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dphypo.privacy.conversion import deltas_from_rdp
from dphypo.privacy.rdp import RdpCurve, nonnegative_bound
from dphypo.privacy.run_counts import Poisson, TruncatedNegativeBinomial
from dphypo.privacy.validation import check_non_negative, check_theta

__all__ = [
    "TuningRdp",
    "check_density_bounds",
    "dphypo_theorem1",
    "dphypo_theorem2",
    "papernot_steinke_theorem6",
]


def check_density_bounds(C: float, c: float) -> None:
    """Validate DP-HyPO's density-ratio bounds: 0 < c ≤ 1 ≤ C (otherwise S_{C,c} is empty)."""
    if not (isinstance(c, (int, float)) and math.isfinite(c) and 0.0 < c <= 1.0):
        raise ValueError(f"c must be in (0, 1] (lower density-ratio bound), got {c!r}")
    if not (isinstance(C, (int, float)) and math.isfinite(C) and C >= 1.0):
        raise ValueError(f"C must be a finite number >= 1 (upper density-ratio bound), got {C!r}")


@dataclass(frozen=True, eq=False)
class TuningRdp:
    """The RDP curve of a whole search and how it was obtained.

    Attributes:
        curve: ε′(α) of the search on the base curve's orders (monotone envelope applied).
        order_hat: The second order α̂ that minimised the α-independent term (``1.0`` for the α̂ = 1 limit,
            ``inf`` when the pure-DP limit won, ``nan`` where the theorem has no α̂).
        constant: The α-independent additive term ``(1+θ)[(1 − 1/α̂) ε̂ + log(1/γ)/α̂]`` at that α̂.
        theorem: Which theorem produced the curve.
    """

    curve: RdpCurve
    order_hat: float
    constant: float
    theorem: str


def dphypo_theorem1(base: RdpCurve, run_count: TruncatedNegativeBinomial, C: float, c: float) -> TuningRdp:
    """DP-HyPO Theorem 1 with the free order α̂ optimised over the base curve's orders.

    The α̂-terms do not depend on α, so they are minimised once (as dp_accounting does for Papernot & Steinke's
    Theorem 2) over: every grid order, the limit α̂ = 1 (term ``(1+θ) log(1/γ)``, P&S footnote 4/10), and α̂ → ∞
    when a pure-DP bound is known (term ``(1+θ) ε_∞``). The monotone envelope in α is applied afterwards.

    Args:
        base: RDP curve valid for *every* candidate (the max over candidates at each order).
        run_count: TNB(θ, γ) distribution of T.
        C: Upper density-ratio bound ≥ 1.
        c: Lower density-ratio bound in (0, 1].

    Returns:
        The search's RDP curve.
    """
    check_density_bounds(C, c)
    if not isinstance(run_count, TruncatedNegativeBinomial):
        raise TypeError(f"Theorem 1 needs a truncated negative binomial run count, got {run_count!r}")
    theta, gamma, mean = run_count.theta, run_count.gamma, run_count.mean
    log_inv_gamma = -math.log(gamma)
    a = base.orders
    with np.errstate(invalid="ignore"):
        hat_terms = (1.0 - 1.0 / a) * base.epsilons + log_inv_gamma / a
    hat_terms = np.where(np.isnan(hat_terms), np.inf, hat_terms)
    candidates = [(log_inv_gamma, 1.0)]  # α̂ = 1
    j = int(np.argmin(hat_terms))
    candidates.append((float(hat_terms[j]), float(a[j])))
    if base.pure_epsilon is not None:
        candidates.append((base.pure_epsilon, math.inf))  # α̂ → ∞
    best_term, order_hat = min(candidates)
    constant = (1.0 + theta) * best_term

    log_ratio = math.log(C / c)
    eps = base.epsilons + constant + (a / (a - 1.0) + 1.0 + theta) * log_ratio + math.log(mean) / (a - 1.0)
    pure = None if base.pure_epsilon is None else dphypo_theorem2(base.pure_epsilon, theta, C, c)
    label = f"DP-HyPO Thm 1 [TNB(theta={theta:g}, gamma={gamma:.6g}), C={C:g}, c={c:g}] of ({base.label})"
    curve = RdpCurve(a, eps, pure, label).monotone()
    theorem = "DP-HyPO Theorem 1" if c < C else "DP-HyPO Theorem 1 = Papernot-Steinke Theorem 2 (C = c = 1)"
    return TuningRdp(curve, order_hat, constant, theorem)


def dphypo_theorem2(epsilon: float, theta: float, C: float, c: float) -> float:
    """DP-HyPO Theorem 2: candidates ε-DP ⇒ the search is ``((2+θ)(ε + log(C/c)), 0)``-DP."""
    check_density_bounds(C, c)
    check_non_negative("epsilon", epsilon)
    check_theta(theta)
    return (2.0 + theta) * (epsilon + math.log(C / c))


def papernot_steinke_theorem6(base: RdpCurve, run_count: Poisson) -> TuningRdp:
    """Papernot & Steinke 2022, Theorem 6 (Poisson T, uniform search only).

    For each α, ε̂ = log(1 + 1/(α−1)) (the largest allowed) and δ̂ = δ_Q(ε̂) is the base mechanism's δ at ε̂
    from its whole RDP curve (tight conversion, :func:`~dphypo.privacy.conversion.delta_from_rdp`; zero if a pure
    bound ≤ ε̂ is known). The monotone envelope in α is applied afterwards (valid since D_α is non-decreasing).

    Args:
        base: RDP curve valid for every candidate.
        run_count: Poisson(μ) distribution of T.

    Returns:
        The search's RDP curve.
    """
    if not isinstance(run_count, Poisson):
        raise TypeError(f"Theorem 6 needs a Poisson run count, got {run_count!r}")
    mu = run_count.mean
    a = base.orders
    eps_hat = np.array([math.log1p(1.0 / (alpha - 1.0)) for alpha in a])
    delta_hat = deltas_from_rdp(a, base.epsilons, eps_hat, pure_epsilon=base.pure_epsilon)  # delta_from_rdp per ε̂
    eps = np.empty_like(a)
    for i, alpha in enumerate(a):
        eps[i] = base.epsilons[i] + mu * float(delta_hat[i]) + math.log(mu) / (alpha - 1.0)
    eps = nonnegative_bound(eps, "Papernot-Steinke Theorem 6")
    label = f"Papernot-Steinke Thm 6 [Poisson(mean={mu:g})] of ({base.label})"
    return TuningRdp(RdpCurve(a, eps, None, label).monotone(), math.nan, 0.0, "Papernot-Steinke Theorem 6")

"""DP-HyPO Lemma A.5's first display checked pointwise against the exact release law (pure numpy, no I/O).

:func:`lemma_a5_check` compares the exact per-output probabilities with the paper's claimed bounds
(which use ``P⁺(≤o) = P⁺(<o) + P⁺(o)`` for suprema over S_{C,c}) and with the corrected bounds obtained by
conditioning run by run; the result is a :class:`LemmaA5Check`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dphypo.privacy.run_counts import TruncatedNegativeBinomial
from dphypo.testing.audit._engine import VIOLATION_ATOL, OutputInterval, output_distribution
from dphypo.testing.audit._instance import UpdateRule
from dphypo.testing.audit.rules import automaton_rule, vertex_density


# -- Lemma A.5's first display, checked pointwise ------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class LemmaA5Check:
    """Exact release probabilities against the bounds of DP-HyPO Lemma A.5 (proof, first display), per output.

    With ``a = P⁺(<o)``, ``b = P⁺(o)``, ``c = P⁺(≤o)`` (suprema over S_{C,c}(π⁽⁰⁾) of the one-run
    probabilities) the paper claims ``A(o) ≤ f(c) − f(a)`` and, with infima, ``A(o) ≥ f(c⁻) − f(a⁻)``; both
    use ``P⁺(≤o) = P⁺(<o) + P⁺(o)``, which fails for suprema (``c ≤ a + b``) and infima (``c⁻ ≥ a⁻ + b⁻``).
    Conditioning run by run gives the corrected bounds ``A(o) ≤ b·(f(c) − f(a))/(c − a)`` and
    ``A(o) ≥ f(a⁻ + b⁻) − f(a⁻)``, which must hold (a self-check of the engine).

    Attributes:
        exact: The law's interval on this dataset.
        paper_upper, paper_lower, corrected_upper, corrected_lower: Shape ``(K,)`` each.
    """

    exact: OutputInterval
    paper_upper: np.ndarray
    paper_lower: np.ndarray
    corrected_upper: np.ndarray
    corrected_lower: np.ndarray

    @property
    def paper_refuted(self) -> bool:
        """True if some exact probability certainly breaks one of the paper's two claimed bounds."""
        tol = VIOLATION_ATOL
        above = np.any(self.exact.lower > self.paper_upper + tol)
        return bool(above or np.any(self.exact.upper < self.paper_lower - tol))

    @property
    def corrected_holds(self) -> bool:
        """Whether the exact release probabilities respect the corrected (Theorem A) bounds, to 1e-9."""
        tol = 1e-9
        return bool(
            np.all(self.exact.lower <= self.corrected_upper + tol)
            and np.all(self.exact.upper >= self.corrected_lower - tol)
        )


def _extreme_mass(coef: np.ndarray, prior: np.ndarray, C: float, c: float, sign: int) -> float:
    """Sup (``sign=1``) or inf (``sign=-1``) of ``π·coef`` over S_{C,c}(π⁽⁰⁾).

    A linear programme over the polytope, solved by the vertex that fills C·π⁽⁰⁾ in order of decreasing
    ``sign·coef``.
    """
    return float(vertex_density(np.argsort(-sign * coef, kind="stable"), prior, C, c) @ coef)


def lemma_a5_check(
    rule: UpdateRule,
    probs: np.ndarray,
    prior: np.ndarray,
    run_count: TruncatedNegativeBinomial,
    C: float,
    c: float,
) -> LemmaA5Check:
    """Compare the exact law of the release on one dataset with Lemma A.5's claimed and corrected bounds.

    Args:
        rule: A rule with densities in S_{C,c}(π⁽⁰⁾).
        probs: Shape ``(L, Y)``, the candidates' laws on this dataset.
        prior: π⁽⁰⁾, shape ``(L,)``.
        run_count: TNB(θ, γ) (its pgf f enters the bounds).
        C: Upper ratio bound.
        c: Lower ratio bound.

    Returns:
        The per-output comparison.
    """
    rule.check_in_density_set(prior, C, c)
    n_cand, n_scores = probs.shape
    exact = output_distribution(rule, probs, run_count)
    f = run_count.pgf
    bounds = {key: np.empty(n_cand * n_scores) for key in ("pu", "pl", "cu", "cl")}
    for o in range(n_cand * n_scores):
        lam, y = o % n_cand, o // n_cand
        below = probs[:, :y].sum(axis=1) + np.where(np.arange(n_cand) < lam, probs[:, y], 0.0)  # P_λ(< o)
        at = np.where(np.arange(n_cand) == lam, probs[:, y], 0.0)
        # float sums can land an ulp above 1, outside the pgf's domain
        sup = [min(_extreme_mass(v, prior, C, c, 1), 1.0) for v in (below, at, below + at)]
        inf = [min(_extreme_mass(v, prior, C, c, -1), 1.0) for v in (below, at, below + at)]
        a, b, cc = sup
        bounds["pu"][o] = f(cc) - f(a)
        bounds["cu"][o] = b * (f(cc) - f(a)) / (cc - a) if cc > a else b * run_count.pgf_derivative(a)
        a, b, cc = inf
        bounds["pl"][o] = f(cc) - f(a)
        bounds["cl"][o] = f(min(a + b, 1.0)) - f(a)
    return LemmaA5Check(exact, bounds["pu"], bounds["pl"], bounds["cu"], bounds["cl"])


#: The output (y·L + λ = (λ0, mid)) at which :func:`lemma_a5_counterexample` breaks the paper's first display.
LEMMA_A5_TARGET = 2


def lemma_a5_counterexample() -> tuple[UpdateRule, np.ndarray, np.ndarray, float, float]:
    """An exact instance on which DP-HyPO Lemma A.5's first display fails (``(rule, probs, prior, C, c)``).

    λ0 scores mid or top (never low), λ1 scores low. Before the best output reaches (λ0, mid) the rule favours
    λ0, after it λ1 (which cannot beat it): the release probability of (λ0, mid) then exceeds the paper's
    ``f(P⁺(≤o)) − f(P⁺(<o))``, because ``P⁺(≤o) = P⁺(<o) + P⁺(o)`` fails for suprema over S_{C,c}.
    """
    probs = np.array([[1e-6, 0.5 - 5e-7, 0.5 - 5e-7], [1 - 2e-6, 1e-6, 1e-6]])
    prior, C, c = np.array([0.5, 0.5]), 1.5, 0.5
    favour0 = vertex_density(np.array([0, 1]), prior, C, c)
    favour1 = vertex_density(np.array([1, 0]), prior, C, c)

    def step(key: int | str, o: int) -> int | str:
        return max(-1 if isinstance(key, str) else key, o)

    def density(key: int | str) -> np.ndarray:
        if isinstance(key, str):
            return prior.copy()
        return favour0 if key < LEMMA_A5_TARGET else favour1

    start: int | str = "start"  # the empty history; afterwards the best output index so far
    return automaton_rule("best-switch", start, step, density, 6), probs, prior, C, c

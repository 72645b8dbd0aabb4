"""The three-candidate "flag" construction: adaptivity provably costs privacy (pure numpy/scipy, no I/O).

``docs/proofs/adaptive.md`` (Section 8, "The price of adaptivity") uses it as a lower bound: an adaptive search
in S_{C,c}(π⁽⁰⁾) whose *exact* Rényi divergence exceeds the non-adaptive bounds (Papernot & Steinke's, printed or
in its sharper form, and Theorem B at C = c = 1) for candidates with the same per-candidate RDP curves. Scores
``0 < 1 < 2 < 3 < 4``:

* a *probe* (candidate 0) emits the flag (score 1) with probability ``p`` on D and ``p′`` on D′, else 0;
* a candidate *H* (1) emits a rare 3 with probability ``q`` on D and ``q′`` on D′, else 2;
* a data-independent candidate *B* (2) emits 4 with probability ``b``, else 2.

The rule remembers only "flag seen?": before a flag it gives B the most weight allowed (C·π⁽⁰⁾) and H the
least (c·π⁽⁰⁾), after a flag the reverse; the first run uses the prior (DP-HyPO Framework 1). The rule is the
same function of the history on D and D′, but the history reveals the dataset.

Scores a candidate never emits get probability :data:`TINY` on both datasets (the audit engine needs every
entry > 0); they contribute nothing to any divergence beyond float noise, and the base curve is computed
exactly for the instance as built, so every number is self-consistent.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import special

from dphypo.privacy.adaptive import theorem_a_hat_term, theorem_b_bound
from dphypo.privacy.run_counts import TruncatedNegativeBinomial
from dphypo.testing.audit._engine import output_distribution, renyi_bounds
from dphypo.testing.audit._instance import AuditInstance, BaseMechanisms, UpdateRule
from dphypo.testing.audit.rules import vertex_density

__all__ = [
    "TINY", "FlagParameters", "FlagResult", "flag_excess", "flag_instance", "non_adaptive_bound",
    "theorem_b_uniform_bound",
]

#: Probability of the scores a candidate never emits (identical on D and D′).
TINY = 1e-15
#: Dense orders for the non-adaptive bound's α̂ and α′ ≥ α optimisation.
_DENSE_ORDERS = np.unique(np.round(np.geomspace(1.001, 4096.0, 600), 6))


@dataclass(frozen=True)
class FlagParameters:
    """Parameters of the flag construction (all probabilities in (0, 1), ``prior`` over (probe, H, B))."""

    p: float
    p_prime: float
    q: float
    q_prime: float
    b: float
    prior: tuple[float, float, float]

    def __post_init__(self) -> None:
        for name in ("p", "p_prime", "q", "q_prime", "b"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and 0.0 < value < 1.0):
                raise ValueError(f"{name} must be in (0, 1), got {value!r}")
        prior = np.asarray(self.prior, dtype=np.float64)
        if prior.shape != (3,) or np.any(prior <= 0.0) or abs(prior.sum() - 1.0) > 1e-12:
            raise ValueError(f"prior must be 3 positive numbers summing to 1, got {self.prior!r}")


def flag_instance(
    params: FlagParameters, C: float, c: float, run_count: TruncatedNegativeBinomial
) -> AuditInstance:
    """The flag construction as an :class:`~dphypo.testing.audit.AuditInstance` (L = 3 candidates, 5 scores).

    Args:
        params: The construction's probabilities and prior.
        C: Upper density-ratio bound ≥ 1.
        c: Lower density-ratio bound in (0, 1].
        run_count: T ~ TNB(θ, γ).

    Returns:
        The instance; its rule's densities are vertices of S_{C,c}(π⁽⁰⁾) (checked by the instance).
    """

    def law(rows: list[dict[int, float]]) -> np.ndarray:
        out = np.full((3, 5), TINY)
        for lam, row in enumerate(rows):
            for y, pr in row.items():
                out[lam, y] = pr
            out[lam] /= out[lam].sum()
        return out

    pr = params
    probs = law([{1: pr.p, 0: 1 - pr.p}, {3: pr.q, 2: 1 - pr.q}, {4: pr.b, 2: 1 - pr.b}])
    probs_prime = law(
        [{1: pr.p_prime, 0: 1 - pr.p_prime}, {3: pr.q_prime, 2: 1 - pr.q_prime}, {4: pr.b, 2: 1 - pr.b}]
    )
    base = BaseMechanisms(probs, probs_prime, "flag")
    prior = np.asarray(pr.prior, dtype=np.float64)
    before = vertex_density(np.array([2, 0, 1]), prior, C, c)  # B to C·π⁰, probe next, H left at c·π⁰
    after = vertex_density(np.array([1, 0, 2]), prior, C, c)  # H to C·π⁰, B left at c·π⁰
    flag_outputs = np.zeros(15, dtype=bool)
    flag_outputs[1 * 3 + 0] = True  # o = y·L + λ: the probe's score 1
    transitions = np.empty((3, 15), dtype=np.int64)
    transitions[0] = np.where(flag_outputs, 2, 1)  # start (prior) → before/after
    transitions[1] = np.where(flag_outputs, 2, 1)
    transitions[2] = 2  # a flag is remembered
    rule = UpdateRule(np.stack([prior, before, after]), transitions, 0, "flag")
    return AuditInstance(prior, base, rule, run_count, C, c)


def _directional_curves(base: BaseMechanisms, orders: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-candidate maxima ``ε(α) = max_λ D_α(P_λ‖P′_λ)`` and ``ε̂(α) = max_λ D_α(P′_λ‖P_λ)``, shape ``(m,)``."""
    lp, lq = np.log(base.probs), np.log(base.probs_prime)
    a = np.asarray(orders, dtype=np.float64)[:, None, None]
    fwd = special.logsumexp(a * lp + (1 - a) * lq, axis=2) / (a[:, :, 0] - 1)
    bwd = special.logsumexp(a * lq + (1 - a) * lp, axis=2) / (a[:, :, 0] - 1)
    return np.maximum(fwd.max(axis=1), 0.0), np.maximum(bwd.max(axis=1), 0.0)


def _bounds(instance: AuditInstance, order: float, C: float, c: float) -> tuple[float, float, float]:
    """The published bound, Theorem A and the base ε at ``order``, for the direction D‖D′.

    Returns (Papernot-Steinke Thm 2 as printed at C = c = 1 or DP-HyPO Thm 1 as printed, Theorem A, ε(order)) for
    the direction D‖D′, with ε from the forward and ε̂ from the backward per-candidate curve; α̂ over a dense grid
    (plus α̂ = 1), monotone envelope over every α′ ≥ ``order``.
    """
    orders = np.unique(np.concatenate([_DENSE_ORDERS, [order]]))
    fwd, bwd = _directional_curves(instance.base, orders)
    rc = instance.run_count
    theta, gamma, mean = rc.theta, rc.gamma, rc.mean
    log_ratio = np.log(C / c)
    hats = np.append(orders, 1.0)
    hat_eps = np.append(bwd, 0.0)  # α̂ = 1: the ε̂ term has weight 0
    printed_hat = float(np.min((1 - 1 / hats) * hat_eps + np.log(1 / gamma) / hats))
    a_hat = float(np.min(theorem_a_hat_term(hats, hat_eps, theta, gamma, C, c)))
    a = orders
    printed = fwd + (a / (a - 1) + 1 + theta) * log_ratio + np.log(mean) / (a - 1) + (1 + theta) * printed_hat
    bound_a = fwd + a / (a - 1) * np.log(C) - np.log(c) + np.log(mean) / (a - 1) + a_hat
    i = int(np.searchsorted(orders, order))
    return float(printed[i:].min()), float(bound_a[i:].min()), float(fwd[i])


def non_adaptive_bound(instance: AuditInstance, order: float) -> float:
    """The best non-adaptive RDP bound on D_α(A(D)‖A(D′)) at ``order``.

    For candidates with the instance's per-candidate curves (forward ε(α), backward ε̂(α̂)).

    The smaller of Papernot & Steinke 2022 Theorem 2 as printed and its sharper form (Theorem A at C = c = 1),
    both with α̂ optimised over a dense grid and the monotone envelope over every α′ ≥ ``order``.
    """
    printed, sharp, _ = _bounds(instance, order, 1.0, 1.0)
    return min(printed, sharp)


def theorem_b_uniform_bound(instance: AuditInstance, order: float) -> float:
    """Theorem B at C = c = 1 (docs/proofs/adaptive.md §5b) for candidates with the instance's per-candidate curves.

    The uniform-search bound on D_α(A(D)‖A(D′)) at ``order`` from the forward curve ε(α) = max_λ D_α(P_λ‖P′_λ), the
    backward curve ε̂(α) = max_λ D_α(P′_λ‖P_λ) and the backward pure bound max_λ max log(P′_λ/P_λ), on the dense
    orders, with the monotone envelope over every α′ ≥ ``order`` (Theorem A at C = c = 1 is not taken here:
    :func:`non_adaptive_bound` has it).
    """
    orders = np.unique(np.concatenate([_DENSE_ORDERS, [order]]))
    fwd, bwd = _directional_curves(instance.base, orders)
    pure = float(np.max(np.log(instance.base.probs_prime) - np.log(instance.base.probs)))
    bound = theorem_b_bound(orders, fwd, bwd, instance.run_count, 1.0, 1.0, backward_pure=max(pure, 0.0))
    return float(bound[int(np.searchsorted(orders, order)):].min())


@dataclass(frozen=True)
class FlagResult:
    """Exact divergence D_α(A(D)‖A(D′)) of a flag instance against the non-adaptive and adaptive bounds.

    Attributes:
        exact_lower: Rigorous lower bound on D_α(A(D)‖A(D′)) (interval arithmetic of the audit engine).
        non_adaptive: :func:`non_adaptive_bound`.
        theorem_a: Theorem A's bound at the same order (directional curves, dense α̂ grid, envelope).
        published: DP-HyPO Theorem 1 as printed, same conventions.
        per_candidate: The per-candidate forward ε(α).
        theorem_b_uniform: :func:`theorem_b_uniform_bound` (the sharper non-adaptive reference).
    """

    exact_lower: float
    non_adaptive: float
    theorem_a: float
    published: float
    per_candidate: float
    theorem_b_uniform: float = float("nan")

    @property
    def excess(self) -> float:
        """Exact − best Papernot-Steinke bound (> 0: adaptivity provably costs privacy here)."""
        return self.exact_lower - self.non_adaptive

    @property
    def excess_over_b(self) -> float:
        """Exact − min(Papernot-Steinke, Theorem B at C = c = 1): the price measured against the sharpest reference."""
        return self.exact_lower - min(self.non_adaptive, self.theorem_b_uniform)


def flag_excess(instance: AuditInstance, order: float) -> FlagResult:
    """Exact D_α(A(D)‖A(D′)) of ``instance`` at ``order`` against the non-adaptive bounds and Theorems A / 1."""
    a = np.array([order])
    law = output_distribution(instance.rule, instance.base.probs, instance.run_count)
    law_p = output_distribution(instance.rule_on_prime, instance.base.probs_prime, instance.run_count)
    exact = float(renyi_bounds(law, law_p, a)[0][0])
    published, bound_a, eps = _bounds(instance, order, instance.C, instance.c)
    return FlagResult(exact, non_adaptive_bound(instance, order), bound_a, published, eps,
                      theorem_b_uniform_bound(instance, order))

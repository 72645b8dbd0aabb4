r"""Exact law of Framework 1's release, divergence bounds and the audit itself (pure numpy/scipy, no I/O).

Exact computation (:func:`output_distribution`): a forward dynamic programme over joint states
(best-so-far output, rule state), restricted to the states reachable from the start and merged (the
automaton already merges histories the rule cannot tell apart). One step is a sparse stochastic matrix
``M[s, s′] = Σ_o [next(s, o) = s′] π_s(λ_o) P[λ_o, y_o]``, the same at every step; the output law is
``Σ_{t ≤ t_max} P[T=t] · (distribution of the best after t runs)``.

Truncation: for every output, the computed sum is a lower bound on the exact probability and the sum plus
``tail_bound(t_max)`` ≥ P[T > t_max] is an upper bound; a relative float slack widens both. Divergence bounds
use the interval ends monotonically (for α > 1: upper = Σ P_hi^α Q_lo^{1−α}, lower = Σ P_lo^α Q_hi^{1−α}). A
*violation* is declared only when the lower bound exceeds the theorem's bound.

:func:`audit_instance` compares the exact Rényi divergences (both directions) with
:func:`~dphypo.privacy.tuning.dphypo_theorem1` and the exact max divergence with
:func:`~dphypo.privacy.tuning.dphypo_theorem2`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import sparse, special

from dphypo.privacy.tuning import dphypo_theorem1, dphypo_theorem2
from dphypo.testing.audit._instance import AuditInstance, FixedT, RunCount, UpdateRule

#: Relative float slack on every computed probability (float sums over ≤ 10⁴ steps of ≤ 20 non-negative terms
#: err by < 10⁻¹¹ relative; the pmf's gammaln by less).
FLOAT_SLACK = 1e-10
#: A violation needs lower bound > bound·(1 + VIOLATION_RTOL) + VIOLATION_ATOL.
VIOLATION_RTOL = 1e-9
VIOLATION_ATOL = 1e-12

Verdict = Literal["ok", "inconclusive", "violation"]


# -- exact output distribution -------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class OutputInterval:
    """Rigorous bounds on the law of the released output, shape ``(K,)`` each; ``lower ≤ exact ≤ upper``."""

    lower: np.ndarray
    upper: np.ndarray
    t_max: int
    tail: float
    n_joint_states: int


def _joint_chain(rule: UpdateRule, probs: np.ndarray) -> tuple[np.ndarray, sparse.csr_matrix, np.ndarray]:
    """Reachable joint states (best, rule state), the one-step transition matrix and the law after one run.

    Returns:
        ``best`` shape ``(n,)`` (best output of each joint state), the transposed transition matrix (n, n)
        and the distribution over joint states after the first run, shape ``(n,)``.
    """
    n_rule, n_out = rule.transitions.shape
    n_cand = probs.shape[0]
    outputs = np.arange(n_out)
    lam, score = outputs % n_cand, outputs // n_cand
    weights = rule.densities[:, lam] * probs[lam, score]  # (S, K): P[o | rule state]
    first = outputs * n_rule + rule.transitions[rule.initial]  # code = best·S + rule state
    seen = np.unique(first)
    frontier = seen
    while frontier.size:
        best, state = np.divmod(frontier, n_rule)
        nxt = np.unique(np.maximum(best[:, None], outputs) * n_rule + rule.transitions[state])
        frontier = np.setdiff1d(nxt, seen, assume_unique=True)
        seen = np.union1d(seen, frontier)
    best, state = np.divmod(seen, n_rule)
    dest = np.searchsorted(seen, np.maximum(best[:, None], outputs) * n_rule + rule.transitions[state])
    n = seen.size
    rows = np.repeat(np.arange(n), n_out)
    step = sparse.csr_matrix((weights[state].ravel(), (dest.ravel(), rows)), shape=(n, n))  # duplicates add
    start = np.bincount(np.searchsorted(seen, first), weights=weights[rule.initial], minlength=n)
    return best, step, start


def _truncation(run_count: RunCount, tail_target: float, max_steps: int) -> tuple[int, float]:
    """Smallest t_max ≤ max_steps with ``tail_bound(t_max) ≤ tail_target`` (else max_steps), and the bound."""
    if isinstance(run_count, FixedT):
        return run_count.k, 0.0
    hi = 1
    while hi < max_steps and run_count.tail_bound(hi) > tail_target:
        hi = min(2 * hi, max_steps)
    lo = hi // 2
    while hi - lo > 1:  # any t with a small enough bound is sound; bisection just keeps t_max short
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if run_count.tail_bound(mid) <= tail_target else (mid, hi)
    return hi, float(run_count.tail_bound(hi))


def output_distribution(
    rule: UpdateRule,
    probs: np.ndarray,
    run_count: RunCount,
    *,
    tail_target: float = 1e-13,
    max_steps: int = 20_000,
) -> OutputInterval:
    """Rigorous bounds on the law of Framework 1's release on one dataset.

    Forward DP over reachable (best-so-far, rule state) joint states; the accumulated law
    ``Σ_{t ≤ t_max} P[T=t]·P[best_t = o]`` is a lower bound on P[A = o] and adding ``tail_bound(t_max)``
    (≥ P[T > t_max], :meth:`TruncatedNegativeBinomial.tail_bound`) gives an upper bound.

    Args:
        rule: The update rule.
        probs: Shape ``(L, Y)``, the candidates' laws on this dataset.
        run_count: TNB(θ, γ), or :class:`FixedT` for self-checks.
        tail_target: Desired truncated mass.
        max_steps: Cap on t_max (the interval stays rigorous, only wider).

    Returns:
        Per-output lower and upper bounds, shape ``(K,)`` each, K = L·Y, indexed ``o = y·L + λ``.
    """
    best, step, state = _joint_chain(rule, np.asarray(probs, dtype=np.float64))
    if not np.allclose(np.asarray(step.sum(axis=0)).ravel(), 1.0, atol=1e-12):
        raise AssertionError("one-step transition matrix is not stochastic")
    t_max, tail = _truncation(run_count, tail_target, max_steps)
    weights = run_count.pmf(np.arange(1, t_max + 1))
    acc = weights[0] * state
    for t in range(2, t_max + 1):
        state = step @ state
        if weights[t - 1] > 0.0:
            acc += weights[t - 1] * state
    if abs(state.sum() - 1.0) > 1e-9:
        raise AssertionError(f"state distribution lost mass: sums to {state.sum()!r} after {t_max} runs")
    law = np.bincount(best, weights=acc, minlength=probs.size)
    if not 1.0 - tail - 1e-9 <= law.sum() <= 1.0 + 1e-9:
        raise AssertionError(f"output law sums to {law.sum()!r}, outside [1 - tail, 1] with tail {tail!r}")
    lower = law * (1.0 - FLOAT_SLACK)
    upper = np.minimum(law * (1.0 + FLOAT_SLACK) + tail, 1.0)
    return OutputInterval(lower, upper, t_max, tail, int(best.size))


# -- divergence bounds ---------------------------------------------------------------------------------------
def renyi_bounds(p: OutputInterval, q: OutputInterval, orders: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bounds on ``D_α(P‖Q) = log Σ P^α Q^{1−α} / (α−1)`` from per-outcome intervals, for α > 1.

    P^α is increasing in P and Q^{1−α} decreasing in Q, so the upper bound takes (P_hi, Q_lo) and the lower
    bound (P_lo, Q_hi) outcome by outcome.

    Returns:
        ``(lower, upper)``, shape ``(m,)`` each.
    """
    a = np.asarray(orders, dtype=np.float64)[:, None]
    hi = special.logsumexp(_log_terms(p.upper, q.lower, a), axis=1) / (a[:, 0] - 1)
    lo = special.logsumexp(_log_terms(p.lower, q.upper, a), axis=1) / (a[:, 0] - 1)
    return np.maximum(lo, 0.0), hi


def _log_terms(p: np.ndarray, q: np.ndarray, a: np.ndarray) -> np.ndarray:
    """log(p^a q^{1−a}), shape ``(m, K)``; 0^a·q^{1−a} = 0 (also for q = 0) and p^a·0^{1−a} = ∞ for p > 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = a * np.log(p) + (1 - a) * np.log(q)
    return np.where(p > 0, terms, -np.inf)


def max_divergence_bounds(p: OutputInterval, q: OutputInterval) -> tuple[float, float]:
    """Bounds on ``D_∞(P‖Q) = max_o log(P(o)/Q(o))`` (on a finite space the worst event is one outcome)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        lo = np.where(p.lower > 0, np.log(p.lower) - np.log(q.upper), -np.inf)
        hi = np.where(p.upper > 0, np.log(p.upper) - np.log(q.lower), -np.inf)
    return max(float(lo.max()), 0.0), float(hi.max())


# -- the audit -----------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class AuditResult:
    """Exact divergences of one instance against DP-HyPO Theorems 1 and 2.

    Attributes:
        rdp_lower, rdp_upper: Shape ``(2, m)``: bounds on D_α(A(D)‖A(D′)) (row 0) and the reverse (row 1).
        rdp_bound: Shape ``(m,)``: the library's Theorem 1 curve at the audit orders.
        pure_lower, pure_upper: Bounds on max(D_∞(A‖A′), D_∞(A′‖A)).
        pure_bound: Theorem 2's ε.
        rdp_verdict, pure_verdict, verdict: ``"ok"``, ``"inconclusive"`` or ``"violation"`` (worst of both).
        ratio: max(upper/bound) over orders, directions and Theorem 2 (conservative); ``ratio_lower`` the same
            with the lower bounds. ``worst_order`` is the α of the worst RDP ratio.
    """

    instance: AuditInstance
    orders: np.ndarray
    rdp_lower: np.ndarray
    rdp_upper: np.ndarray
    rdp_bound: np.ndarray
    pure_lower: float
    pure_upper: float
    pure_bound: float
    rdp_verdict: Verdict
    pure_verdict: Verdict
    ratio_rdp: float
    ratio_pure: float
    ratio_lower: float
    worst_order: float
    t_max: int
    tail: float
    n_joint_states: int

    @property
    def verdict(self) -> Verdict:
        order: list[Verdict] = ["ok", "inconclusive", "violation"]
        return max(self.rdp_verdict, self.pure_verdict, key=order.index)

    @property
    def ratio(self) -> float:
        return max(self.ratio_rdp, self.ratio_pure)


def _ratio(value: np.ndarray, bound: np.ndarray | float) -> np.ndarray:
    """value/bound, with 0/0 = 0 and x/0 = inf (a zero bound is only met by a zero divergence)."""
    bound = np.broadcast_to(np.asarray(bound, dtype=np.float64), np.shape(value))
    out = np.where(value > 0.0, np.inf, 0.0)
    np.divide(value, bound, out=out, where=bound > 0.0)
    return out


def _verdict(lower: np.ndarray, upper: np.ndarray, bound: np.ndarray) -> Verdict:
    if np.any(lower > bound * (1.0 + VIOLATION_RTOL) + VIOLATION_ATOL):
        return "violation"
    return "inconclusive" if np.any(upper > bound) else "ok"


def audit_instance(
    instance: AuditInstance,
    *,
    rdp_bound: np.ndarray | None = None,
    pure_bound: float | None = None,
    tail_target: float = 1e-13,
) -> AuditResult:
    """Exact Rényi / max divergences of Framework 1's release vs DP-HyPO Theorems 1 and 2.

    Args:
        instance: The audit problem.
        rdp_bound: Shape ``(m,)``, replaces the Theorem 1 curve (only to show a too-small bound is flagged).
        pure_bound: Override of Theorem 2's ε (same purpose).
        tail_target: Truncated mass of T aimed at.

    Returns:
        The result with verdicts and ratios.
    """
    orders = np.asarray(instance.orders, dtype=np.float64)
    base = instance.base.rdp_curve(orders)
    theta = instance.run_count.theta
    if rdp_bound is None:
        rdp_bound = dphypo_theorem1(base, instance.run_count, instance.C, instance.c).curve.epsilons
    if pure_bound is None:
        if base.pure_epsilon is None:  # pragma: no cover - finite base mechanisms always have a pure bound
            raise ValueError(f"the base mechanism {base.label!r} has no pure-DP bound; pass pure_bound")
        pure_bound = dphypo_theorem2(base.pure_epsilon, theta, instance.C, instance.c)
    rdp_bound = np.asarray(rdp_bound, dtype=np.float64)
    law = output_distribution(instance.rule, instance.base.probs, instance.run_count, tail_target=tail_target)
    law_p = output_distribution(
        instance.rule_on_prime, instance.base.probs_prime, instance.run_count, tail_target=tail_target
    )
    fwd, bwd = renyi_bounds(law, law_p, orders), renyi_bounds(law_p, law, orders)
    rdp_lower, rdp_upper = np.stack([fwd[0], bwd[0]]), np.stack([fwd[1], bwd[1]])
    pf, pb = max_divergence_bounds(law, law_p), max_divergence_bounds(law_p, law)
    pure_lower, pure_upper = max(pf[0], pb[0]), max(pf[1], pb[1])
    ratios = _ratio(rdp_upper, rdp_bound)
    worst = np.unravel_index(int(np.argmax(ratios)), ratios.shape)
    return AuditResult(
        instance=instance,
        orders=orders,
        rdp_lower=rdp_lower,
        rdp_upper=rdp_upper,
        rdp_bound=rdp_bound,
        pure_lower=pure_lower,
        pure_upper=pure_upper,
        pure_bound=float(pure_bound),
        rdp_verdict=_verdict(rdp_lower, rdp_upper, rdp_bound),
        pure_verdict=_verdict(np.array([pure_lower]), np.array([pure_upper]), np.array([pure_bound])),
        ratio_rdp=float(ratios[worst]),
        ratio_pure=float(_ratio(np.array(pure_upper), np.array(pure_bound))),
        ratio_lower=float(max(_ratio(rdp_lower, rdp_bound).max(), _ratio(np.array(pure_lower), pure_bound))),
        worst_order=float(orders[worst[1]]),
        t_max=max(law.t_max, law_p.t_max),
        tail=max(law.tail, law_p.tail),
        n_joint_states=max(law.n_joint_states, law_p.n_joint_states),
    )

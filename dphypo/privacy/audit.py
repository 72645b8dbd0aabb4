r"""Exact audit of DP-HyPO's privacy theorems on small discrete instances (pure numpy/scipy, no I/O).

The team trusts this module instead of the paper's proof of Theorem 1 (whose Lemma A.5 uses
``P⁺(≤y) = P⁺(<y) + P⁺(y)`` for suprema over S_{C,c}, where only ``≤`` holds in general). For an instance

* Λ finite (candidates λ), prior π⁽⁰⁾ over Λ, bounds 0 < c ≤ 1 ≤ C;
* base mechanisms given as explicit distributions ``P[λ, y]`` (on D) and ``P′[λ, y]`` (on D′) over an ordered
  score set Y, all entries > 0;
* a deterministic update rule: a finite automaton over outputs whose state fixes the next density
  π⁽ʲ⁺¹⁾ ∈ S_{C,c}(π⁽⁰⁾) (DP-HyPO Framework 1; the first draw uses π⁽⁰⁾);
* T ~ TNB(θ, γ) (DP-HyPO §3.2),

it computes the *exact* distribution of the released best pair o = (λ, y) on D and on D′, with rigorous
intervals for the truncation of T, and compares the exact Rényi divergences (both directions) with
:func:`~dphypo.privacy.tuning.dphypo_theorem1` and the exact max divergence with
:func:`~dphypo.privacy.tuning.dphypo_theorem2`.

Outputs are encoded ``o = y·L + λ`` (L = |Λ|): the total order "score first, ties by candidate index" is
the integer order, so "best" is ``max``. The release reveals λ (Papernot & Steinke 2022, Assumption 2).

Exact computation (:func:`output_distribution`): a forward dynamic programme over joint states
(best-so-far output, rule state), restricted to the states reachable from the start and merged (the
automaton already merges histories the rule cannot tell apart). One step is a sparse stochastic matrix
``M[s, s′] = Σ_o [next(s, o) = s′] π_s(λ_o) P[λ_o, y_o]``, the same at every step; the output law is
``Σ_{t ≤ t_max} P[T=t] · (distribution of the best after t runs)``.

Truncation: for every output, the computed sum is a lower bound on the exact probability and the sum plus
``tail_bound(t_max)`` ≥ P[T > t_max] is an upper bound; a relative float slack widens both. Divergence bounds
use the interval ends monotonically (for α > 1: upper = Σ P_hi^α Q_lo^{1−α}, lower = Σ P_lo^α Q_hi^{1−α}). A
*violation* is declared only when the lower bound exceeds the theorem's bound.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from scipy import sparse, special

from dphypo.density import project, softmax
from dphypo.privacy.distributions import TruncatedNegativeBinomial
from dphypo.privacy.rdp import RdpCurve
from dphypo.privacy.tuning import check_density_bounds, dphypo_theorem1, dphypo_theorem2

__all__ = [
    "AUDIT_ORDERS",
    "AuditInstance",
    "AuditResult",
    "BaseMechanisms",
    "FixedT",
    "LemmaA5Check",
    "OutputInterval",
    "UpdateRule",
    "adversarial_rule",
    "audit_instance",
    "automaton_rule",
    "history_rule",
    "lemma_a5_check",
    "lookup_table_rule",
    "max_divergence_bounds",
    "output_distribution",
    "random_instance",
    "renyi_bounds",
    "softmax_projected_rule",
    "uniform_rule",
    "vertex_density",
]

#: Orders audited (and used for the base curve, so the theorem is evaluated at exactly these α): the brief's
#: {1.5, 2, 3, 5, 10, 20, 50} plus a geometric grid, dense enough for the α̂ minimisation of Theorem 1.
AUDIT_ORDERS: np.ndarray = np.unique(
    np.round(np.concatenate([[1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0], np.geomspace(1.01, 512.0, 48)]), 6)
)
#: Relative float slack on every computed probability (float sums over ≤ 10⁴ steps of ≤ 20 non-negative terms
#: err by < 10⁻¹¹ relative; the pmf's gammaln by less).
FLOAT_SLACK = 1e-10
#: A violation needs lower bound > bound·(1 + VIOLATION_RTOL) + VIOLATION_ATOL.
VIOLATION_RTOL = 1e-9
VIOLATION_ATOL = 1e-12
#: Tolerance of the S_{C,c} membership check of rule densities.
DENSITY_ATOL = 1e-12

Verdict = Literal["ok", "inconclusive", "violation"]


# -- instance ingredients ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FixedT:
    """A point mass T = k (engine self-checks only: no tuning theorem covers a fixed run count)."""

    k: int

    def __post_init__(self) -> None:
        if not (isinstance(self.k, (int, np.integer)) and self.k >= 1):
            raise ValueError(f"k must be an integer >= 1, got {self.k!r}")

    def pmf(self, t: np.ndarray) -> np.ndarray:
        """P[T = t], elementwise."""
        return (np.asarray(t) == self.k).astype(np.float64)

    def tail_bound(self, t: int) -> float:
        """P[T > t] (exact)."""
        return 1.0 if t < self.k else 0.0


RunCount = TruncatedNegativeBinomial | FixedT


@dataclass(frozen=True, eq=False)
class BaseMechanisms:
    """Explicit output laws of every candidate M_λ on the neighbouring datasets D and D′.

    Args:
        probs: Shape ``(L, Y)``, row λ = law of M_λ(D) over the ordered scores; entries > 0, rows sum to 1.
        probs_prime: Shape ``(L, Y)``, the same on D′.
        label: Construction used (reports only).
    """

    probs: np.ndarray
    probs_prime: np.ndarray
    label: str = "custom"

    def __post_init__(self) -> None:
        for name in ("probs", "probs_prime"):
            p = np.array(getattr(self, name), dtype=np.float64)
            if p.ndim != 2 or min(p.shape) < 1:
                raise ValueError(f"{name} must have shape (L, Y), got {p.shape}")
            if not (np.all(np.isfinite(p)) and np.all(p > 0.0)):
                raise ValueError(f"{name} must be finite and > 0 (divergences must be finite)")
            if not np.allclose(p.sum(axis=1), 1.0, rtol=0.0, atol=1e-12):
                raise ValueError(f"{name} rows must sum to 1, got sums {p.sum(axis=1)!r}")
            p.flags.writeable = False
            object.__setattr__(self, name, p)
        if self.probs.shape != self.probs_prime.shape:
            raise ValueError(f"probs_prime must have shape {self.probs.shape}, got {self.probs_prime.shape}")

    @property
    def n_candidates(self) -> int:
        return int(self.probs.shape[0])

    @property
    def n_scores(self) -> int:
        return int(self.probs.shape[1])

    def rdp_curve(self, orders: np.ndarray) -> RdpCurve:
        """The exact base curve: ``ε(α) = max_λ max(D_α(P_λ‖P′_λ), D_α(P′_λ‖P_λ))``, ``ε_∞ = max |log P/P′|``.

        One (α, ε) valid for every candidate and both directions is what DP-HyPO Theorem 1 assumes (the
        theorem's α̂ term bounds the reverse direction, Papernot & Steinke 2022, proof of Theorem 2).
        """
        lp, lq = np.log(self.probs), np.log(self.probs_prime)
        a = np.asarray(orders, dtype=np.float64)[:, None, None]
        fwd = special.logsumexp(a * lp + (1 - a) * lq, axis=2) / (a[:, :, 0] - 1)
        bwd = special.logsumexp(a * lq + (1 - a) * lp, axis=2) / (a[:, :, 0] - 1)
        eps = np.maximum(np.maximum(fwd, bwd).max(axis=1), 0.0)
        pure = float(np.abs(lp - lq).max())
        return RdpCurve(np.asarray(orders, dtype=np.float64), eps, pure, f"exact base ({self.label})")


@dataclass(frozen=True, eq=False)
class UpdateRule:
    """A deterministic update rule as a finite automaton over outputs (DP-HyPO Framework 1).

    State ``s`` fixes the density of the next draw; output ``o`` moves it to ``transitions[s, o]``.
    Any deterministic function of a bounded summary of the history is such an automaton.

    Args:
        densities: Shape ``(S, L)``, row s = density over candidates used in state s (rows sum to 1).
        transitions: Shape ``(S, K)`` integers in [0, S), K = L·|Y|.
        initial: The start state; its density must be the prior π⁽⁰⁾ (Framework 1 draws the first λ from it).
        name: Family and parameters (reports only).
    """

    densities: np.ndarray
    transitions: np.ndarray
    initial: int = 0
    name: str = "custom"

    def __post_init__(self) -> None:
        d = np.array(self.densities, dtype=np.float64)
        t = np.array(self.transitions, dtype=np.int64)
        if d.ndim != 2 or t.ndim != 2 or d.shape[0] != t.shape[0]:
            raise ValueError(f"densities (S, L) and transitions (S, K) must agree, got {d.shape}, {t.shape}")
        if not (np.all(d >= 0.0) and np.allclose(d.sum(axis=1), 1.0, rtol=0.0, atol=1e-12)):
            raise ValueError("densities must be non-negative rows summing to 1")
        if t.size and (t.min() < 0 or t.max() >= d.shape[0]):
            raise ValueError(f"transitions must lie in [0, {d.shape[0]}), got range [{t.min()}, {t.max()}]")
        if not 0 <= self.initial < d.shape[0]:
            raise ValueError(f"initial must be a state index in [0, {d.shape[0]}), got {self.initial!r}")
        d.flags.writeable = False
        t.flags.writeable = False
        object.__setattr__(self, "densities", d)
        object.__setattr__(self, "transitions", t)

    @property
    def n_states(self) -> int:
        return int(self.densities.shape[0])

    def check_in_density_set(self, prior: np.ndarray, C: float, c: float) -> None:
        """Raise ``ValueError`` unless every density lies in S_{C,c}(π⁽⁰⁾) and the first one is π⁽⁰⁾."""
        lo, hi = c * prior, C * prior
        outside = (self.densities < lo - DENSITY_ATOL) | (self.densities > hi + DENSITY_ATOL)
        bad = np.flatnonzero(np.any(outside, axis=1))
        if bad.size:
            ratio = self.densities[bad[0]] / prior
            raise ValueError(
                f"rule {self.name!r}: density of state {bad[0]} leaves S_(C={C:g}, c={c:g}), ratios {ratio!r}"
            )
        if not np.allclose(self.densities[self.initial], prior, rtol=0.0, atol=DENSITY_ATOL):
            raise ValueError(f"rule {self.name!r}: the initial density must be the prior")


@dataclass(frozen=True, eq=False)
class AuditInstance:
    """One audit problem: Framework 1 on the neighbours D, D′ and the claimed (C, c, T).

    Args:
        prior: Shape ``(L,)``, π⁽⁰⁾ > 0 summing to 1.
        base: The candidates' laws on D and D′.
        rule: The update rule (the *same* function of the history on D and D′).
        run_count: T ~ TNB(θ, γ).
        C: Upper density-ratio bound claimed to the theorems.
        c: Lower density-ratio bound claimed to the theorems.
        orders: Orders of the base curve and of the audit (theorem evaluated at exactly these).
        validate_rule: Check the rule against S_{C,c}; ``False`` only to show the audit flags a broken rule.
        rule_prime: *Oracle relaxation* (not Framework 1): a different rule on D′, i.e. densities that may
            depend on the dataset itself. It contains Framework 1 (take ``rule_prime = rule``) and is what the
            proof of Lemma A.5 bounds step by step (suprema/infima over S_{C,c}), so it probes the proof's
            technique; its verdicts are not verdicts on the theorem.
    """

    prior: np.ndarray
    base: BaseMechanisms
    rule: UpdateRule
    run_count: TruncatedNegativeBinomial
    C: float
    c: float
    orders: np.ndarray = field(default_factory=lambda: AUDIT_ORDERS)
    validate_rule: bool = True
    rule_prime: UpdateRule | None = None

    def __post_init__(self) -> None:
        check_density_bounds(self.C, self.c)
        prior = np.array(self.prior, dtype=np.float64)
        if prior.shape != (self.base.n_candidates,) or np.any(prior <= 0) or abs(prior.sum() - 1) > 1e-12:
            raise ValueError(f"prior must be positive, sum to 1, shape ({self.base.n_candidates},)")
        object.__setattr__(self, "prior", prior)
        for rule in (self.rule, self.rule_on_prime):
            if rule.densities.shape[1] != self.base.n_candidates:
                raise ValueError("rule densities must have one column per candidate")
            if rule.transitions.shape[1] != self.base.probs.size:
                raise ValueError(f"rule transitions must have K = {self.base.probs.size} columns")
            if self.validate_rule:
                rule.check_in_density_set(prior, self.C, self.c)

    @property
    def rule_on_prime(self) -> UpdateRule:
        """The rule run on D′ (the same as on D unless in the oracle relaxation)."""
        return self.rule if self.rule_prime is None else self.rule_prime

    def describe(self) -> str:
        """One line with the instance's parameters."""
        t = self.run_count
        rule = self.rule.name
        if self.rule_prime is not None:
            rule = f"oracle({rule} | {self.rule_prime.name})"
        return (
            f"L={self.base.n_candidates} Y={self.base.n_scores} base={self.base.label} rule={rule} "
            f"theta={t.theta:.4g} gamma={t.gamma:.4g} E[T]={t.mean:.4g} C={self.C:.4g} c={self.c:.4g} "
            f"eps_inf={np.abs(np.log(self.base.probs / self.base.probs_prime)).max():.4g}"
        )


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
        pure_bound = dphypo_theorem2(float(base.pure_epsilon), theta, instance.C, instance.c)
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


# -- rule families -------------------------------------------------------------------------------------------
def vertex_density(order: np.ndarray, prior: np.ndarray, C: float, c: float) -> np.ndarray:
    """The extreme point of S_{C,c}(π⁽⁰⁾) that fills candidates to C·π⁽⁰⁾ in ``order``.

    Start from c·π⁽⁰⁾ (mass c ≤ 1) and raise candidates in ``order`` to C·π⁽⁰⁾ until the mass is 1: all
    coordinates sit at a bound except at most one, which is what a vertex of this polytope looks like.

    Args:
        order: Permutation of the candidates, shape ``(L,)``; earlier ones get the upper bound.
        prior: π⁽⁰⁾, shape ``(L,)``.
        C: Upper ratio bound.
        c: Lower ratio bound.

    Returns:
        The density, shape ``(L,)``.
    """
    f = c * prior
    budget = 1.0 - float(f.sum())
    for lam in order:
        add = min(budget, (C - c) * prior[lam])
        f[lam] += add
        budget -= add
    return f


def _random_density(rng: np.random.Generator, prior: np.ndarray, C: float, c: float, kind: str) -> np.ndarray:
    """A random vertex, or a random interior point (Dirichlet mix of random vertices) of S_{C,c}(π⁽⁰⁾)."""
    if kind == "mixed":
        kind = "vertex" if rng.random() < 0.5 else "interior"
    if kind == "vertex":
        return vertex_density(rng.permutation(prior.size), prior, C, c)
    verts = np.stack([vertex_density(rng.permutation(prior.size), prior, C, c) for _ in range(3)])
    return rng.dirichlet(np.ones(3)) @ verts


def automaton_rule(
    name: str,
    initial_key: Hashable,
    step: Callable[[Hashable, int], Hashable],
    density: Callable[[Hashable], np.ndarray],
    n_outputs: int,
    *,
    max_states: int = 50_000,
) -> UpdateRule:
    """Build an :class:`UpdateRule` by breadth-first search over the history summaries a rule keeps.

    Args:
        name: Rule description.
        initial_key: Summary of the empty history.
        step: ``(key, output) -> key`` after one more run.
        density: ``key -> density`` over candidates, shape ``(L,)``.
        n_outputs: K = L·|Y|.
        max_states: Refuse summaries that grow beyond this many states.

    Returns:
        The automaton.
    """
    index: dict[Hashable, int] = {initial_key: 0}
    keys, rows = [initial_key], []
    while len(rows) < len(keys):
        key = keys[len(rows)]
        row = []
        for o in range(n_outputs):
            nxt = step(key, o)
            if nxt not in index:
                if len(keys) >= max_states:
                    raise ValueError(f"rule {name!r} has more than max_states={max_states} states")
                index[nxt] = len(keys)
                keys.append(nxt)
            row.append(index[nxt])
        rows.append(row)
    return UpdateRule(np.stack([density(k) for k in keys]), np.array(rows, dtype=np.int64), 0, name)


def uniform_rule(prior: np.ndarray, n_outputs: int) -> UpdateRule:
    """Family (a): π⁽ʲ⁾ = π⁽⁰⁾ always (uniform random search; the only rule when C = c = 1).

    Args:
        prior: π⁽⁰⁾, shape ``(L,)``.
        n_outputs: K = L·|Y|.

    Returns:
        A one-state automaton.
    """
    return UpdateRule(prior[None, :], np.zeros((1, n_outputs), dtype=np.int64), 0, "uniform")


def lookup_table_rule(
    rng: np.random.Generator,
    prior: np.ndarray,
    C: float,
    c: float,
    n_scores: int,
    *,
    memory: tuple[str, ...] = ("best", "last", "step"),
    horizon: int = 3,
    kind: str = "mixed",
) -> UpdateRule:
    """Family (b): a random table from a bounded-memory state to densities of S_{C,c}(π⁽⁰⁾).

    Args:
        rng: Draws the table (one density per state, in breadth-first order).
        prior: π⁽⁰⁾, shape ``(L,)``.
        C: Upper ratio bound.
        c: Lower ratio bound.
        n_scores: |Y|.
        memory: Which of ``"best"`` (best output so far), ``"last"`` (last output) and ``"step"``
            (min(j, horizon)) the state keeps.
        horizon: Cap J of the step counter.
        kind: ``"vertex"`` (random extreme points), ``"interior"`` (Dirichlet mixes of 3 vertices) or
            ``"mixed"`` (a fair coin per state).

    Returns:
        The automaton.
    """
    n_out = prior.size * n_scores
    table: dict[Hashable, np.ndarray] = {}

    def step(key: Hashable, o: int) -> Hashable:
        best, _, j = (-1, -1, 0) if key == "start" else key  # type: ignore[misc]
        return (
            max(best, o) if "best" in memory else 0,
            o if "last" in memory else 0,
            min(j + 1, horizon) if "step" in memory else 0,
        )

    def density(key: Hashable) -> np.ndarray:
        if key == "start":
            return prior.copy()
        if key not in table:
            table[key] = _random_density(rng, prior, C, c, kind)
        return table[key]

    return automaton_rule(f"table[{'+'.join(memory)},J={horizon},{kind}]", "start", step, density, n_out)


def adversarial_rule(
    prior: np.ndarray,
    C: float,
    c: float,
    base: BaseMechanisms,
    *,
    trigger: str = "best",
    threshold: int = 0,
    direction: int = 1,
    score: int = -1,
    otherwise: str = "opposite",
) -> UpdateRule:
    """Family (c): after a good output, put C·π⁽⁰⁾ on the candidates most (``direction=1``) or least
    (``direction=-1``) revealing about D vs D′, ranked by ``log P_λ(score) − log P′_λ(score)``.

    Args:
        prior: π⁽⁰⁾, shape ``(L,)``.
        C: Upper ratio bound.
        c: Lower ratio bound.
        base: The instance's candidates (the rule is a fixed function known before the data; it may use them).
        trigger: ``"best"`` (best-so-far score ≥ threshold), ``"last"`` (last score ≥ threshold) or ``"llr"``
            (the sign of the clipped running log-likelihood ratio of the observed outputs, a bounded-memory
            test of "looks like D").
        threshold: Score index that counts as good.
        direction: ``1`` or ``-1``.
        score: Score whose likelihood ratio ranks the candidates (default: the top score).
        otherwise: Density when not triggered: ``"prior"`` or ``"opposite"`` (the reverse vertex).

    Returns:
        The automaton.
    """
    n_cand, n_scores = base.probs.shape
    n_out = n_cand * n_scores
    llr_rank = np.log(base.probs[:, score]) - np.log(base.probs_prime[:, score])
    favour = vertex_density(np.argsort(-direction * llr_rank, kind="stable"), prior, C, c)
    rest = prior.copy() if otherwise == "prior" else vertex_density(
        np.argsort(direction * llr_rank, kind="stable"), prior, C, c
    )
    # An output's likelihood ratio is P_λ(y)/P′_λ(y) (the density, the same function of the history on D and
    # D′, cancels); it is rounded to a grid of 1/4 of the largest so the running sum has few states.
    llr_out = (np.log(base.probs) - np.log(base.probs_prime)).T.ravel()
    unit = max(float(np.abs(llr_out).max()), 1e-12) / 4.0
    llr_steps = np.rint(llr_out / unit).astype(int)

    def step(key: Hashable, o: int) -> Hashable:
        best, llr = (-1, 0) if key == "start" else key  # type: ignore[misc]
        if trigger == "llr":
            return (0, int(np.clip(llr + llr_steps[o], -8, 8)))
        return (max(best, o // n_cand) if trigger == "best" else o // n_cand, 0)

    def density(key: Hashable) -> np.ndarray:
        if key == "start":
            return prior.copy()
        value, llr = key  # type: ignore[misc]
        hit = llr > 0 if trigger == "llr" else value >= threshold
        return favour if hit else rest

    name = f"adversarial[{trigger}>={threshold},dir={direction:+d},score={score},else={otherwise}]"
    return automaton_rule(name, "start", step, density, n_out)


def history_rule(
    rng: np.random.Generator,
    prior: np.ndarray,
    C: float,
    c: float,
    n_outputs: int,
    *,
    depth: int = 2,
    kind: str = "vertex",
) -> UpdateRule:
    """Family (d): the full history of the first ``depth`` runs is the state (exact for T ≤ depth + 1).

    Each of the Σ_{h ≤ depth} K^h histories gets its own random density; later runs keep the density of the
    first ``depth`` outputs.

    Args:
        rng: Draws the densities (breadth-first order).
        prior: π⁽⁰⁾, shape ``(L,)``.
        C: Upper ratio bound.
        c: Lower ratio bound.
        n_outputs: K = L·|Y|.
        depth: Length of the remembered history prefix.
        kind: As in :func:`lookup_table_rule`.

    Returns:
        The automaton.
    """

    def step(key: Hashable, o: int) -> Hashable:
        return key if len(key) >= depth else (*key, o)  # type: ignore[arg-type]

    table: dict[Hashable, np.ndarray] = {(): prior.copy()}

    def density(key: Hashable) -> np.ndarray:
        if key not in table:
            table[key] = _random_density(rng, prior, C, c, kind)
        return table[key]

    return automaton_rule(f"history[depth={depth},{kind}]", (), step, density, n_outputs)


def softmax_projected_rule(
    prior: np.ndarray, C: float, c: float, n_scores: int, *, beta: float = 5.0, optimism: float = 1.0
) -> UpdateRule:
    """Family (e): DP-HyPO's own shape: softmax(β·best score per candidate) projected onto S_{C,c}.

    State = best score index seen per candidate (unseen = ``optimism`` in [0, 1] on the normalised scale);
    the density is :func:`dphypo.density.project` of the softmax (DP-HyPO eq. 3.1; Algorithm 3 minus the GP).

    Args:
        prior: π⁽⁰⁾, shape ``(L,)``.
        C: Upper ratio bound.
        c: Lower ratio bound.
        n_scores: |Y|.
        beta: Inverse temperature β of the softmax.
        optimism: Normalised score assumed for unseen candidates.

    Returns:
        The automaton.
    """
    n_cand = prior.size

    def step(key: Hashable, o: int) -> Hashable:
        seen = list(key)  # type: ignore[call-overload]
        seen[o % n_cand] = max(seen[o % n_cand], o // n_cand)
        return tuple(seen)

    def density(key: Hashable) -> np.ndarray:
        if all(s < 0 for s in key):  # type: ignore[union-attr]
            return prior.copy()
        top = max(n_scores - 1, 1)
        scores = np.array([optimism if s < 0 else s / top for s in key])  # type: ignore[union-attr]
        return project(softmax(scores, beta), prior, C, c)

    name = f"softmax-projected[beta={beta:.3g},optimism={optimism:.2g}]"
    return automaton_rule(name, (-1,) * n_cand, step, density, n_cand * n_scores)


# -- random instances ----------------------------------------------------------------------------------------
def _random_base(
    rng: np.random.Generator, n_cand: int, n_scores: int, kind: str, mean_t: float
) -> BaseMechanisms:
    """Candidates' laws: ``"random"`` (bounded log-ratio tilt), ``"rr"`` (k-ary randomized response, the
    pure-DP worst case), ``"prop17"`` / ``"prop17b"`` (Papernot & Steinke 2022, Proposition 17's two
    constructions, one ε per candidate)."""
    eps = np.exp(rng.uniform(np.log(0.05), np.log(2.0), size=n_cand))
    eps[rng.random(n_cand) < 0.2] = 0.0  # some candidates do not look at the data (not all of them)
    eps[rng.integers(n_cand)] = max(eps.max(), 0.05)
    if kind == "random":
        p = rng.dirichlet(np.ones(n_scores), size=n_cand) + 1e-3
        p /= p.sum(axis=1, keepdims=True)
        q = p * np.exp(eps[:, None] * rng.uniform(-1, 1, size=p.shape))
    elif kind == "rr":
        favoured = np.full(n_cand, n_scores - 1) if rng.random() < 0.5 else rng.integers(0, n_scores, n_cand)
        other = (favoured + rng.integers(1, n_scores, n_cand)) % n_scores
        p, q = np.ones((n_cand, n_scores)), np.ones((n_cand, n_scores))
        p[np.arange(n_cand), favoured] = np.exp(eps)
        q[np.arange(n_cand), other] = np.exp(eps)
    elif kind == "prop17":  # D: good score w.p. 1/(1+e^ε); D′: w.p. e^ε/(1+e^ε)
        p = np.stack([np.exp(eps), np.ones(n_cand)], axis=1)
        q = p[:, ::-1].copy()
    else:  # prop17b: bad score w.p. e^{−1/k} on D and e^{−ε−1/k} on D′, k ≈ E[T]
        k = max(1.0, round(mean_t))
        bad, bad_p = np.full(n_cand, np.exp(-1 / k)), np.exp(-eps - 1 / k)
        p, q = np.stack([bad, 1 - bad], axis=1), np.stack([bad_p, 1 - bad_p], axis=1)
    p, q = p / p.sum(axis=1, keepdims=True), q / q.sum(axis=1, keepdims=True)
    return BaseMechanisms(p, q, kind) if rng.random() < 0.5 else BaseMechanisms(q, p, kind + "-swapped")


def _random_run_count(rng: np.random.Generator) -> TruncatedNegativeBinomial:
    theta = float(rng.choice([-0.5, 0.0, 0.5, 1.0, 2.0, rng.uniform(-0.95, 3.0)]))
    gamma = float(np.exp(rng.uniform(np.log(0.05), np.log(0.6))))
    return TruncatedNegativeBinomial(theta, gamma)


def _random_bounds(rng: np.random.Generator) -> tuple[float, float]:
    if rng.random() < 0.15:
        return 1.0, 1.0
    C = float(rng.choice([1.25, 1.5, 2.0, 3.0, rng.uniform(1.0, 4.0)]))
    c = float(rng.choice([1.0 / C, 0.75, 0.5, 1.0, rng.uniform(0.25, 1.0)]))
    return C, c


def random_instance(
    rng: np.random.Generator, *, max_candidates: int = 4, max_scores: int = 5, max_outputs: int = 16
) -> AuditInstance:
    """A random audit instance (sizes, base construction, (C, c), TNB(θ, γ), rule family).

    Args:
        rng: Source of every random choice.
        max_candidates: Largest |Λ| (≥ 2).
        max_scores: Largest |Y| (≥ 2).
        max_outputs: Largest K = |Λ|·|Y|.

    Returns:
        The instance.
    """
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    kind = str(rng.choice(["random", "rr", "prop17", "prop17b"], p=[0.4, 0.3, 0.15, 0.15]))
    n_cand = int(rng.integers(2, max_candidates + 1))
    top_scores = max(2, min(max_scores, max_outputs // n_cand))
    n_scores = 2 if kind.startswith("prop17") else int(rng.integers(2, top_scores + 1))
    n_out = n_cand * n_scores
    run_count = _random_run_count(rng)
    base = _random_base(rng, n_cand, n_scores, kind, run_count.mean)
    prior = np.full(n_cand, 1.0 / n_cand) if rng.random() < 0.5 else rng.dirichlet(np.full(n_cand, 3.0))
    C, c = _random_bounds(rng)
    families = ["uniform", "table", "adversarial", "history", "softmax"]
    family = str(rng.choice(families, p=[0.05, 0.3, 0.35, 0.15, 0.15]))
    if family == "uniform":
        rule = uniform_rule(prior, n_out)
    elif family == "table":
        memory = [("best", "last", "step"), ("best",), ("last",), ("best", "step"), ("last", "step")]
        rule = lookup_table_rule(
            rng, prior, C, c, n_scores, memory=memory[rng.integers(len(memory))],
            horizon=int(rng.integers(1, 4)), kind=str(rng.choice(["vertex", "interior", "mixed"])),
        )
    elif family == "adversarial":
        rule = adversarial_rule(
            prior, C, c, base, trigger=str(rng.choice(["best", "last", "llr"])),
            threshold=int(rng.integers(0, n_scores)), direction=int(rng.choice([-1, 1])),
            score=int(rng.integers(0, n_scores)) if rng.random() < 0.3 else n_scores - 1,
            otherwise=str(rng.choice(["prior", "opposite"])),
        )
    elif family == "history":
        depth = 3 if n_out <= 6 else (2 if n_out <= 16 else 1)
        rule = history_rule(rng, prior, C, c, n_out, depth=depth, kind=str(rng.choice(["vertex", "mixed"])))
    else:
        rule = softmax_projected_rule(
            prior, C, c, n_scores, beta=float(np.exp(rng.uniform(0.0, np.log(50.0)))),
            optimism=float(rng.random()),
        )
    return AuditInstance(prior, base, rule, run_count, C, c)


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
        tol = 1e-9
        return bool(
            np.all(self.exact.lower <= self.corrected_upper + tol)
            and np.all(self.exact.upper >= self.corrected_lower - tol)
        )


def _extreme_mass(coef: np.ndarray, prior: np.ndarray, C: float, c: float, sign: int) -> float:
    """sup (``sign=1``) or inf (``sign=-1``) of ``π·coef`` over S_{C,c}(π⁽⁰⁾): a linear programme over the
    polytope, solved by the vertex that fills C·π⁽⁰⁾ in order of decreasing ``sign·coef``."""
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

"""Ingredients of an audit instance (pure numpy/scipy, no I/O).

* :class:`FixedT` (a point-mass run count for engine self-checks) and the ``RunCount`` alias;
* :class:`BaseMechanisms`: the candidates' explicit laws on D and D′ and their exact base RDP curve;
* :class:`UpdateRule`: a deterministic update rule as a finite automaton over outputs (DP-HyPO Framework 1);
* :class:`AuditInstance`: one audit problem (prior, base, rule, T ~ TNB(θ, γ), claimed (C, c), orders);
* :data:`AUDIT_ORDERS` and the S_{C,c} membership tolerance :data:`DENSITY_ATOL`.

Outputs are encoded ``o = y·L + λ`` (L = |Λ|), see :mod:`dphypo.testing.audit`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy import special

from dphypo.privacy.rdp import RdpCurve
from dphypo.privacy.run_counts import TruncatedNegativeBinomial
from dphypo.privacy.tuning import check_density_bounds

#: Orders audited (and used for the base curve, so the theorem is evaluated at exactly these α): the brief's
#: {1.5, 2, 3, 5, 10, 20, 50} plus a geometric grid, dense enough for the α̂ minimisation of Theorem 1.
AUDIT_ORDERS: np.ndarray = np.unique(
    np.round(np.concatenate([[1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0], np.geomspace(1.01, 512.0, 48)]), 6)
)
#: Tolerance of the S_{C,c} membership check of rule densities.
DENSITY_ATOL = 1e-12


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


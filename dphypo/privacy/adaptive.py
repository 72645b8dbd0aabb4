r"""Proven privacy bounds for DP-HyPO's adaptive search (C > c): Theorems A, A∞ and B.

DP-HyPO (Wang et al. 2023) states Theorem 1 (RDP) and Theorem 2 (pure DP) for Framework 1, but the proof of
Theorem 1 is broken: Lemma A.5's step (A.12) uses ``P⁺(≤y) = P⁺(<y) + P⁺(y)`` for suprema over S_{C,c}, which
fails (``tests/privacy/test_adaptive_proof.py`` keeps an exact counterexample), and Theorem 2 is derived from
Theorem 1 as α, α̂ → ∞. ``docs/proofs/adaptive.md`` proves the replacements implemented here:

**Theorem A** (RDP). If every candidate is (α, ε)-RDP (D‖D′) and (α̂, ε̂)-RDP (D′‖D), α > 1, α̂ ≥ 1, T ~ TNB(θ, γ),
and every sampling density satisfies c·π⁽⁰⁾ ≤ π⁽ʲ⁾ ≤ C·π⁽⁰⁾, then

    D_α(A(D)‖A(D′)) ≤ ε + (α/(α−1)) log C + log(1/c) + log(E[T])/(α−1)
                      + ((1+θ)/α̂) log(1 + (1/γ − 1) C^α̂ c^(1−α̂) e^((α̂−1) ε̂)).

It is never larger than DP-HyPO Theorem 1 (by at least log(1/c)/(α−1) at equal α, α̂), so the published
statement is true (implied by Theorem A); only its proof has the gap.

**Theorem A∞** (pure DP). If every candidate is ε-DP,

    D_∞ ≤ ε + log(C/c) + (1+θ) log[(γ + (1−γ) C) / (γ + (1−γ) c e^(−ε))]  ≤  (2+θ)(ε + log(C/c)),

the right end being DP-HyPO Theorem 2.

**Theorem B** (RDP, the default for C > c). The same proof with Step 7 (Papernot–Steinke's Hölder step) replaced
by the supremum of the Step-5 integrand over every pair the per-run curve allows at *every* order
(:func:`theorem_b_bound`), evaluated with certified floating point; at C = c = 1 it is a uniform-search bound never
above Papernot & Steinke 2022 Theorem 2 (:func:`theorem_b` at C = c = 1).

The accountant evaluates them for C > c (:func:`adaptive_rdp`, :func:`adaptive_pure_epsilon`, floored at the
uniform bound so ε is monotone in C/c); a uniform search (C = c = 1) is covered by Papernot & Steinke 2022
Theorem 2 / Corollary 3 as printed and by Theorem B at C = c = 1 (``dphypo.privacy.search_rdp.rdp_bounds``).

References (docs/references.md): Wang et al. 2023 (DP-HyPO) arXiv:2306.05734v2; Papernot & Steinke 2022
arXiv:2110.03620v2; van Erven & Harremoës 2014 arXiv:1206.2459 (version unverified).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from dphypo.privacy.rdp import RdpCurve
from dphypo.privacy.run_counts import TruncatedNegativeBinomial
from dphypo.privacy.tuning import TuningRdp, check_density_bounds, dphypo_theorem1, dphypo_theorem2
from dphypo.privacy.validation import check_int_at_least, check_non_negative, check_probability, check_theta

__all__ = [
    "ADAPTIVE_THEOREMS",
    "PUBLISHED_THEOREM1",
    "PUBLISHED_THEOREM2",
    "THEOREM_A",
    "THEOREM_A_PURE",
    "THEOREM_B",
    "THEOREM_B_GRID",
    "THEOREM_B_SLACK",
    "THEOREM_B_UNIFORM",
    "adaptive_pure_epsilon",
    "adaptive_rdp",
    "check_adaptive_theorem",
    "check_theorem_b_curve",
    "rdp_method_name",
    "theorem_a",
    "theorem_a_hat_term",
    "theorem_a_pure",
    "theorem_b",
    "theorem_b_bound",
    "theorem_b_grid",
    "theorem_b_log_sup",
    "uniform_theorem_b",
]

#: Accepted values of ``adaptive_theorem``: the proven default (B, checked independently), the proven closed form
#: (A) and the published bound (proof has a gap); the last two are opt-in.
ADAPTIVE_THEOREMS: tuple[str, ...] = ("B", "A", "published")
#: Report label of Theorem B for C > c (the default RDP bound of an adaptive search).
THEOREM_B = "Theorem B (docs/proofs/adaptive.md; replaces DP-HyPO Theorem 1)"
#: Report label of Theorem B at C = c = 1 (a uniform-search bound).
THEOREM_B_UNIFORM = "Theorem B at C = c = 1 (docs/proofs/adaptive.md; sharpens Papernot-Steinke Theorem 2)"
#: Report label of Theorem A (opt-in RDP bound for C > c).
THEOREM_A = "Theorem A (docs/proofs/adaptive.md; replaces DP-HyPO Theorem 1)"
#: Report label of the pure-DP bound for C > c (Theorem B has no pure form; its pure bound is Theorem A∞).
THEOREM_A_PURE = "Theorem A-infinity (docs/proofs/adaptive.md; replaces DP-HyPO Theorem 2)"
#: Report label of the opt-in published RDP bound.
PUBLISHED_THEOREM1 = "DP-HyPO Theorem 1 (published; proof has a known gap; implied by Theorem A)"
#: Report label of the opt-in published pure-DP bound.
PUBLISHED_THEOREM2 = "DP-HyPO Theorem 2 (published; proof has a known gap; implied by Theorem A-infinity)"
#: Positive grid points of G in Theorem B's supremum before refinement (:func:`theorem_b_grid`). With the
#: second-order cell bound and the refinement of :func:`_theorem_b_log_sup`, the certified bound is within about 1e-4
#: (ε units) of an independent mpmath evaluation of the supremum (tests/privacy/test_theorem_b.py).
THEOREM_B_GRID = 300
#: Relative slack of Theorem B's certified comparisons and outward rounding (docs/proofs/adaptive.md §5b,
#: "Evaluation under floating point"): it multiplies the sum of the magnitudes of the terms involved (≈ 4,500 units of
#: roundoff), while their floating-point error is at most a few dozen units of roundoff of that sum.
THEOREM_B_SLACK = 1e-12
#: Bisection of :func:`_partner_bounds`: steps over every constraint, then over the most violated ones only.
_FULL_STEPS, _NARROW_STEPS, _WINDOW = 8, 30, 16
#: Relative moves of a bracket end until it is certified (:func:`_partner_bounds`; 1e-3 and 1e-2 only in the full pass).
_LADDER: tuple[float, ...] = (1e-10, 1e-9, 1e-8, 1e-7, 1e-6, 1e-5, 1e-4)
#: Share of :data:`THEOREM_B_GRID` placed geometrically below κ = γ/((1−γ)C) (:func:`theorem_b_grid`).
_TAIL_FRACTION = 0.2
#: Grid refinement of :func:`_theorem_b_log_sup`: target gap in ε units, points added per loose cell, rounds.
_REFINE_TOLERANCE, _REFINE_POINTS, _REFINE_ROUNDS = 2e-4, 4, 12
#: At most this many cells are refined per round (the loosest first), so the grid stays small.
_REFINE_CELLS = 100
#: Screening of :class:`_PartnerConstraints`: a constraint whose larger log-term is this far below its cap holds (in
#: floating point, with its error bound), valid while orders are at most ``_SCREEN_ORDER`` and caps at most
#: ``_SCREEN_CAP`` in magnitude (else every constraint is evaluated in full).
_SCREEN, _SCREEN_ORDER, _SCREEN_CAP = 1.0, 1e6, 1e11


def check_adaptive_theorem(adaptive_theorem: str) -> None:
    """Validate the choice of adaptive bound.

    Raises:
        ValueError: ``adaptive_theorem`` is not ``"B"`` (proven, default), ``"A"`` (proven closed form, opt-in) or
            ``"published"`` (opt-in).
    """
    if adaptive_theorem not in ADAPTIVE_THEOREMS:
        raise ValueError(f"adaptive_theorem must be one of {ADAPTIVE_THEOREMS}, got {adaptive_theorem!r}")


def rdp_method_name(adaptive: bool, adaptive_theorem: str = "B") -> str:
    """Name of the adaptive RDP route in a report's ``methods`` (``"rdp"`` for a uniform search).

    ``"rdp-theorem-b"`` (default), ``"rdp-theorem-a"`` or ``"rdp-published-thm1"``. A uniform search lists
    ``"rdp"`` (Papernot-Steinke Theorem 2 or 6) and ``"rdp-theorem-b"`` (Theorem B at C = c = 1, TNB T).
    """
    check_adaptive_theorem(adaptive_theorem)
    if not adaptive:
        return "rdp"
    return {"A": "rdp-theorem-a", "B": "rdp-theorem-b", "published": "rdp-published-thm1"}[adaptive_theorem]


def theorem_a_hat_term(
    order_hat: np.ndarray | float, eps_hat: np.ndarray | float, theta: float, gamma: float, C: float, c: float
) -> np.ndarray:
    r"""The α-independent term of Theorem A, ``((1+θ)/α̂) log(1 + (1/γ − 1) C^α̂ c^(1−α̂) e^((α̂−1) ε̂))``.

    docs/proofs/adaptive.md, Theorem A (step 7); computed as ``logaddexp(0, ·)`` so large α̂ ε̂ cannot overflow.
    ``α̂ = inf`` gives the limit ``(1+θ)(log(C/c) + ε̂)`` (valid for a pure ε̂-DP bound, whose ε̂ bounds every order).

    Args:
        order_hat: Orders α̂ ≥ 1, any shape (``inf`` allowed).
        eps_hat: Bounds ε̂(α̂) ≥ 0 on D_α̂(Q′‖Q), same shape (``inf``: no bound, the term is ``inf``).
        theta: θ > −1 of TNB(θ, γ).
        gamma: γ ∈ (0, 1).
        C: Upper density-ratio bound ≥ 1.
        c: Lower density-ratio bound in (0, 1].

    Returns:
        The term, broadcast shape of ``order_hat`` and ``eps_hat``.
    """
    check_density_bounds(C, c)
    check_theta(theta)
    check_probability("gamma", gamma)
    a, e = np.broadcast_arrays(np.asarray(order_hat, dtype=np.float64), np.asarray(eps_hat, dtype=np.float64))
    if np.any(np.isnan(a)) or np.any(a < 1.0):
        raise ValueError(f"order_hat must be >= 1, got min {np.nanmin(a) if a.size else a!r}")
    if np.any(np.isnan(e)) or np.any(e < 0.0):
        raise ValueError("eps_hat must be non-negative (inf allowed), got a negative or NaN value")
    log_c, log_big_c = math.log(c), math.log(C)
    out = np.empty(a.shape, dtype=np.float64)
    finite = np.isfinite(a)
    with np.errstate(invalid="ignore"):
        af, ef = a[finite], e[finite]
        exponent = math.log(1.0 / gamma - 1.0) + af * log_big_c + (1.0 - af) * log_c + (af - 1.0) * ef
        exponent = np.where(af == 1.0, math.log(1.0 / gamma - 1.0) + log_big_c, exponent)  # 0·∞ at α̂ = 1
        out[finite] = (1.0 + theta) / af * np.logaddexp(0.0, exponent)
    out[~finite] = (1.0 + theta) * (log_big_c - log_c + e[~finite])
    return out


def theorem_a(base: RdpCurve, run_count: TruncatedNegativeBinomial, C: float, c: float) -> TuningRdp:
    r"""Theorem A of docs/proofs/adaptive.md (replaces DP-HyPO Theorem 1), α̂ optimised over the base curve.

    ``ε′(α) = ε(α) + (α/(α−1)) log C + log(1/c) + log(E[T])/(α−1) + min_α̂ H(α̂)`` with
    ``H(α̂) = ((1+θ)/α̂) log(1 + (1/γ − 1) C^α̂ c^(1−α̂) e^((α̂−1) ε(α̂)))`` (:func:`theorem_a_hat_term`), minimised
    over the grid orders, α̂ = 1 (term ``(1+θ) log(1 + (1/γ − 1) C)``, which needs no ε̂) and α̂ → ∞ when a pure
    bound is known; then the monotone envelope in α (D_α is non-decreasing in α). The pure-DP bound of the search
    is :func:`theorem_a_pure`. The base curve must bound both directions (as :class:`RdpCurve` does).

    Args:
        base: RDP curve valid for every candidate, both directions, shape ``(m,)`` orders.
        run_count: TNB(θ, γ) distribution of T (Poisson T with C > c has no theorem).
        C: Upper density-ratio bound ≥ 1.
        c: Lower density-ratio bound in (0, 1].

    Returns:
        The search's RDP curve on the base orders, with ``order_hat`` and ``constant = min H``.
    """
    check_density_bounds(C, c)
    if not isinstance(base, RdpCurve):
        raise TypeError(f"base must be an RdpCurve, got {base!r}")
    if not isinstance(run_count, TruncatedNegativeBinomial):
        raise TypeError(f"Theorem A needs a truncated negative binomial run count, got {run_count!r}")
    theta, gamma, mean = run_count.theta, run_count.gamma, run_count.mean
    a = base.orders
    hat = theorem_a_hat_term(a, base.epsilons, theta, gamma, C, c)
    candidates = [(float(theorem_a_hat_term(1.0, 0.0, theta, gamma, C, c)), 1.0)]
    j = int(np.argmin(hat))
    candidates.append((float(hat[j]), float(a[j])))
    if base.pure_epsilon is not None:
        candidates.append((float(theorem_a_hat_term(math.inf, base.pure_epsilon, theta, gamma, C, c)), math.inf))
    constant, order_hat = min(candidates)
    eps = base.epsilons + a / (a - 1.0) * math.log(C) - math.log(c) + math.log(mean) / (a - 1.0) + constant
    pure = None if base.pure_epsilon is None else theorem_a_pure(base.pure_epsilon, theta, gamma, C, c)
    label = f"Theorem A [TNB(theta={theta:g}, gamma={gamma:.6g}), C={C:g}, c={c:g}] of ({base.label})"
    return TuningRdp(RdpCurve(a, eps, pure, label).monotone(), order_hat, constant, THEOREM_A)


# ------------------------------------------------------------------------------------------------ Theorem B
def _log_moment(
    lx: np.ndarray, l1x: np.ndarray, ly: np.ndarray, l1y: np.ndarray, o: np.ndarray, *, with_error: bool = False
) -> tuple[np.ndarray, np.ndarray | None]:
    """``log M_o(x, y)``, ``M_o(x, y) = x^o y^(1−o) + (1−x)^o (1−y)^(1−o)``, from ``log x``, ``log(1−x)``, ….

    ``M_o(x, y) = e^{(o−1) D_o(Bern(x)‖Bern(y))}`` (Rényi divergence of two Bernoulli laws, van Erven & Harremoës
    2014, Definition 2), with the conventions of the perspective function: a term with base 0 is 0 (``0^o = 0``,
    also ``0^o · 0^(1−o) = 0``) and ``x^o 0^(1−o) = ∞`` for ``x > 0``. Infinite logs are exact (``log 0``), so
    every infinite result is exact. With ``with_error`` also a bound on the floating-point error of the finite
    results (docs/proofs/adaptive.md §5b, "Evaluation under floating point"): :data:`THEOREM_B_SLACK` times
    ``1 + |o log x| + |(1−o) log y| + |o log(1−x)| + |(1−o) log(1−y)| + |result|``.

    Returns:
        ``(value, error)`` broadcast over the inputs; ``error`` is ``None`` unless asked for.
    """
    with np.errstate(invalid="ignore"):
        parts = (o * lx, (1.0 - o) * ly, o * l1x, (1.0 - o) * l1y)
        t1, t2 = parts[0] + parts[1], parts[2] + parts[3]
    t1 = np.where(np.isnan(t1), -np.inf, t1)  # 0^o 0^(1−o) := 0 (x = y = 0 or x = y = 1)
    t2 = np.where(np.isnan(t2), -np.inf, t2)
    value = np.logaddexp(t1, t2)
    if not with_error:
        return value, None
    magnitude = 1.0 + np.where(np.isfinite(value), np.abs(value), 0.0)
    for part in parts:
        magnitude = magnitude + np.where(np.isfinite(part), np.abs(part), 0.0)
    return value, THEOREM_B_SLACK * magnitude


def _partner_bounds(
    g: np.ndarray,
    orders: np.ndarray,
    eps_forward: np.ndarray,
    eps_backward: np.ndarray,
    pure_backward: float | None,
    *,
    narrow: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    r"""Certified bounds ``lower ≤ G′max(G) ≤ upper`` on the largest feasible partner of each ``G`` in ``(0, 1)``.

    ``G′max(G) = max{G′ : (G, G′) ∈ F}``, F of Theorem B: ``M_α̂(G, G′) ≤ e^{(α̂−1) ε(α̂)}`` (forward curve) and
    ``M_α̂(G′, G) ≤ e^{(α̂−1) ε̂(α̂)}`` (backward curve) at every finite order, and ``G′ ≤ e^{ε̂∞} G``. F is convex
    and contains the diagonal (docs/proofs/adaptive.md §5b, Lemma B1), so for each G the feasible G′ ≥ G form the
    interval ``[G, G′max(G)]``: a certified-infeasible ``G′ ≥ G`` is an upper bound, a certified-feasible one a
    lower bound. Bisection in ``log G′`` on ``[G, 1]`` (:data:`_FULL_STEPS` steps over every constraint, then
    :data:`_NARROW_STEPS` over the :data:`_WINDOW` constraints whose roots, interpolated between the bracket's ends,
    are smallest: dropping constraints enlarges the set, so the upper end stays an upper bound), then
    certification of both ends with :func:`_log_moment`'s error bound (rows whose lower end fails, because the
    window missed the binding constraint, are redone with every constraint, ``narrow=False``). An upper end that
    cannot be certified is moved up (finally to 1), a lower end that cannot be certified is moved down (finally to
    G, feasible exactly: ``M_α̂(G, G) = 1``).

    Args:
        g: Shape ``(n,)``, values in ``(0, 1)``.
        orders: Shape ``(m,)`` orders of both curves.
        eps_forward: Shape ``(m,)`` forward bounds ε(α̂) (``inf``: no constraint).
        eps_backward: Shape ``(m,)`` backward bounds ε̂(α̂).
        pure_backward: ε̂∞ with ``Q′ ≤ e^{ε̂∞} Q`` set-wise, or ``None``.
        narrow: Whether the bisection may continue over a window of constraints (``False``: every constraint).

    Returns:
        ``(upper, lower)``, each shape ``(n,)``, with ``g ≤ lower ≤ upper ≤ 1``.
    """
    constraints = _PartnerConstraints.build(g, orders, eps_forward, eps_backward)
    if constraints.empty:  # no finite constraint: every G′ is feasible
        upper, lower = np.ones_like(g), np.ones_like(g)
    else:
        every = constraints.every
        lo, hi = constraints.bisect(g.copy(), np.ones_like(g), _FULL_STEPS, *every)
        window = constraints.narrowed(lo, hi) if narrow else every
        lo, hi = (constraints.bisect_window(lo, hi, _NARROW_STEPS, window) if narrow
                  else constraints.bisect(lo, hi, _NARROW_STEPS, *window))
        upper, lower, ok = constraints.certify(lo, hi, window, narrow=narrow)
        if narrow and not np.all(ok):  # the window missed the binding constraint: redo those with all of them
            redo = ~ok
            upper[redo], lower[redo] = _partner_bounds(g[redo], orders, eps_forward, eps_backward, None, narrow=False)
    if pure_backward is not None:  # G′ ≤ e^{ε̂∞} G (a linear constraint; exact up to the slack)
        limit = math.exp(pure_backward) * g
        upper = np.minimum(upper, limit * (1.0 + THEOREM_B_SLACK))
        lower = np.maximum(np.minimum(lower, limit * (1.0 - THEOREM_B_SLACK)), g)
    return np.maximum(upper, g), lower


def _logs(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(log x, log(1 − x))`` as columns, shape ``(n, 1)`` each (``log 0 = −inf`` without a warning)."""
    with np.errstate(divide="ignore"):
        return np.log(x)[:, None], np.log1p(-x)[:, None]


@dataclass(frozen=True, eq=False)
class _PartnerConstraints:
    """The constraints of Theorem B's feasible set F on the partners G′ of the points ``g`` (:func:`_partner_bounds`).

    A constraint is an order ``o`` and a cap ``(o − 1) ε(o)`` on ``log M_o``: forward ``M_o(G, G′)``, backward
    ``M_o(G′, G)`` (:func:`_log_moment`); orders whose bound is infinite constrain nothing and are left out. The
    methods take the constraints to test as ``(o_f, c_f, o_b, c_b)``: every one (:attr:`every`, shape ``(1, ·)``)
    or a window per point (:meth:`narrowed`, shape ``(n, ·)``).

    :meth:`violated`, :meth:`certified` and :meth:`narrowed` screen before they evaluate (issue #30.6): the two
    log-terms ``t1, t2`` of :func:`_log_moment` are sums of products (the products with ``log G``, ``log(1 − G)``
    are computed once, :attr:`fixed`), and ``log M = logaddexp(t1, t2)`` lies in ``[m, m + log 2]``, ``m = max(t1,
    t2)``, in floating point too (``logaddexp`` returns ``m + log1p(e^{−|t1 − t2|})``, a non-negative addend at most
    log 2). A constraint with ``m − cap > 0`` is violated, one with ``m − cap ≤ −1`` (:data:`_SCREEN`) holds with a
    margin of 0.3 above every rounding error (:attr:`screen`: orders ≤ 1e6 and caps ≤ 1e11 in magnitude, so every
    finite product is below 7.5e8 (``|log| ≤ 745`` in double precision), the error bound of a finite ``log M``
    below 1e-2, the cap's slack below 0.1); only the others go through :func:`_log_moment`, the same elementwise
    operations on the same numbers. Every decision is therefore the one of the full evaluation, bit for
    bit (the ``*_reference`` methods, kept as the test oracle: tests/privacy/test_theorem_b_fast.py).

    Attributes:
        g: Shape ``(n,)``, the points G in ``(0, 1)``.
        lg: Shape ``(n, 1)``, ``log G``.
        l1g: Shape ``(n, 1)``, ``log(1 − G)``.
        of: Shape ``(1, kf)``, orders of the finite forward bounds.
        cf: Shape ``(1, kf)``, their caps ``(o − 1) ε(o)``.
        ob: Shape ``(1, kb)``, orders of the finite backward bounds.
        cb: Shape ``(1, kb)``, their caps ``(o − 1) ε̂(o)``.
        fixed: ``(o_f log G, o_f log(1 − G), (1 − o_b) log G, (1 − o_b) log(1 − G))`` for every constraint, shapes
            ``(n, kf)`` twice, ``(n, kb)`` twice.
        screen: Whether the screening is sound for these constraints (else every value is evaluated in full).
    """

    g: np.ndarray
    lg: np.ndarray
    l1g: np.ndarray
    of: np.ndarray
    cf: np.ndarray
    ob: np.ndarray
    cb: np.ndarray
    fixed: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
    screen: bool

    @classmethod
    def build(cls, g: np.ndarray, orders: np.ndarray, eps_forward: np.ndarray, eps_backward: np.ndarray
              ) -> _PartnerConstraints:
        """The constraints of the finite forward and backward bounds, for the points ``g``."""
        ff, fb = np.isfinite(eps_forward), np.isfinite(eps_backward)
        of, cf = orders[ff][None, :], ((orders[ff] - 1.0) * eps_forward[ff])[None, :]
        ob, cb = orders[fb][None, :], ((orders[fb] - 1.0) * eps_backward[fb])[None, :]
        lg, l1g = np.log(g)[:, None], np.log1p(-g)[:, None]
        with np.errstate(invalid="ignore"):
            fixed = (of * lg, of * l1g, (1.0 - ob) * lg, (1.0 - ob) * l1g)
        caps = np.abs(np.concatenate([cf[0], cb[0]]))
        screen = bool(np.all(np.concatenate([of[0], ob[0]]) <= _SCREEN_ORDER) and np.all(caps <= _SCREEN_CAP))
        return cls(g, lg, l1g, of, cf, ob, cb, fixed, screen)

    @property
    def empty(self) -> bool:
        """No finite constraint at all (every G′ is feasible)."""
        return bool(self.of.size + self.ob.size == 0)

    @property
    def every(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Every constraint, ``(o_f, c_f, o_b, c_b)``."""
        return self.of, self.cf, self.ob, self.cb

    def _terms(self, lq: np.ndarray, l1q: np.ndarray, rows: np.ndarray | None, o_f: np.ndarray, o_b: np.ndarray
               ) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
        """The log-terms ``(t1, t2)`` of :func:`_log_moment`, forward and backward (:meth:`_direction_terms`)."""
        return (self._direction_terms(True, lq, l1q, rows, o_f), self._direction_terms(False, lq, l1q, rows, o_b))

    def _direction_terms(self, forward: bool, lq: np.ndarray, l1q: np.ndarray, rows: np.ndarray | None,
                         o: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The log-terms ``(t1, t2)`` of :func:`_log_moment` in one direction, shape ``(r, ·)`` each.

        Bit for bit those of :func:`_log_moment` (the same products summed in the same order; NaN not yet
        replaced): forward ``M_o(G, x)``, backward ``M_o(x, G)``. ``rows`` selects points (``None``: all);
        ``lq``, ``l1q`` (``log x``, ``log(1 − x)``, shape ``(r, 1)``) and ``o`` are already restricted to them.
        """
        if o is (self.of if forward else self.ob):
            a, b = self.fixed[:2] if forward else self.fixed[2:]
            if rows is not None:
                a, b = a[rows], b[rows]
        else:
            lr, l1r = (self.lg, self.l1g) if rows is None else (self.lg[rows], self.l1g[rows])
            factor = o if forward else 1.0 - o
            with np.errstate(invalid="ignore"):
                a, b = factor * lr, factor * l1r
        with np.errstate(invalid="ignore"):
            if forward:  # o log G + (1 − o) log x, o log(1 − G) + (1 − o) log(1 − x)
                rest = 1.0 - o
                t1, t2 = np.multiply(rest, lq), np.multiply(rest, l1q)
                np.add(a, t1, out=t1)
                np.add(b, t2, out=t2)
            else:  # o log x + (1 − o) log G, o log(1 − x) + (1 − o) log(1 − G)
                t1, t2 = np.multiply(o, lq), np.multiply(o, l1q)
                np.add(t1, a, out=t1)
                np.add(t2, b, out=t2)
        return t1, t2

    @staticmethod
    def _gap(t1: np.ndarray, t2: np.ndarray, cap: np.ndarray) -> np.ndarray:
        """``max(t1, t2) − cap``, a lower bound on ``log M − cap`` at most log 2 below it (class docstring).

        A NaN term, which :func:`_log_moment` reads as ``−inf``, is ignored (``fmax``).
        """
        return np.fmax(t1, t2) - cap

    @staticmethod
    def _values(t1: np.ndarray, t2: np.ndarray) -> np.ndarray:
        """``log M`` from the log-terms, exactly as :func:`_log_moment` (NaN terms are ``−inf``)."""
        return np.logaddexp(np.where(np.isnan(t1), -np.inf, t1), np.where(np.isnan(t2), -np.inf, t2))

    def excess(self, x: np.ndarray, o_f: np.ndarray, c_f: np.ndarray, o_b: np.ndarray, c_b: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
        """Float ``log M − cap`` per constraint: forward shape ``(n, ·)``, backward shape ``(n, ·)``."""
        lq, l1q = _logs(x)
        return (_log_moment(self.lg, self.l1g, lq, l1q, o_f)[0] - c_f,
                _log_moment(lq, l1q, self.lg, self.l1g, o_b)[0] - c_b)

    def violated(self, x: np.ndarray, o_f: np.ndarray, c_f: np.ndarray, o_b: np.ndarray, c_b: np.ndarray
                 ) -> np.ndarray:
        """Whether the pair (g, x) violates one of the constraints (in floating point), shape ``(n,)``.

        Equal to :meth:`violated_reference` (screened, see the class docstring).
        """
        if not self.screen:
            return self.violated_reference(x, o_f, c_f, o_b, c_b)
        lq, l1q = _logs(x)
        out = np.zeros(x.shape, dtype=bool)
        for forward, o, cap in ((True, o_f, c_f), (False, o_b, c_b)):
            if o.shape[1] == 0:
                continue
            rows = None if forward else np.flatnonzero(~out)  # backward: only the points no forward one settled
            if rows is not None and rows.size == 0:
                break
            if rows is not None:
                lq_r, l1q_r = lq[rows], l1q[rows]
                o, cap = (o, cap) if o.shape[0] == 1 else (o[rows], cap[rows])
            else:
                lq_r, l1q_r = lq, l1q
            t1, t2 = self._direction_terms(forward, lq_r, l1q_r, rows, o)
            # m = max(t1, t2) (NaN terms ignored, see _gap): m > cap is violated (log M ≥ m); m ≤ cap − 1 holds
            # (log M ≤ m + log 2); a NaN m (both terms NaN: log M = −inf) holds, and fails both comparisons
            m = np.fmax(t1, t2)
            hit = np.any(m > cap, axis=1)
            undecided = m > cap - _SCREEN
            undecided &= ~hit[:, None]
            i, j = np.nonzero(undecided)
            if i.size:
                cap_e = cap[0, j] if cap.shape[0] == 1 else cap[i, j]
                bad = self._values(t1[i, j], t2[i, j]) - cap_e > 0.0
                hit[i[bad]] = True
            if rows is None:
                out |= hit
            else:
                out[rows[hit]] = True
        return out

    def violated_reference(self, x: np.ndarray, o_f: np.ndarray, c_f: np.ndarray, o_b: np.ndarray,
                           c_b: np.ndarray) -> np.ndarray:
        """:meth:`violated` evaluating every constraint in full (the test oracle)."""
        fwd, bwd = self.excess(x, o_f, c_f, o_b, c_b)
        return np.any(fwd > 0.0, axis=1) | np.any(bwd > 0.0, axis=1)

    def certified(self, x: np.ndarray, rows: np.ndarray, o_f: np.ndarray, c_f: np.ndarray, o_b: np.ndarray,
                  c_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(certainly infeasible, certainly feasible) for the pairs (g[rows], x) under the given constraints.

        Equal to :meth:`certified_reference` (screened: a constraint with ``max(t1, t2) − cap ≤ −1`` and a finite
        maximum holds with a margin above its error bound, see the class docstring).
        """
        if not self.screen:
            return self.certified_reference(x, rows, o_f, c_f, o_b, c_b)
        lq, l1q = _logs(x)
        lr, l1r = self.lg[rows], self.l1g[rows]
        o_f, c_f, o_b, c_b = (a if a.shape[0] == 1 else a[rows] for a in (o_f, c_f, o_b, c_b))
        bad, good = np.zeros(x.shape, dtype=bool), np.ones(x.shape, dtype=bool)
        terms = self._terms(lq, l1q, rows, o_f, o_b)
        for (t1, t2), cap, o, (lx, l1x, ly, l1y) in (
            (terms[0], c_f, o_f, (lr, l1r, lq, l1q)),
            (terms[1], c_b, o_b, (lq, l1q, lr, l1r)),
        ):
            if t1.shape[1] == 0:
                continue
            gap = self._gap(t1, t2, cap)
            i, j = np.nonzero(~((gap <= -_SCREEN) & (gap > -np.inf)))  # undecided (gap −inf: log M may be −inf)
            if i.size == 0:
                continue
            o_e, cap_e = np.broadcast_to(o, t1.shape)[i, j], np.broadcast_to(cap, t1.shape)[i, j]
            value, error = _log_moment(lx[i, 0], l1x[i, 0], ly[i, 0], l1y[i, 0], o_e, with_error=True)
            assert error is not None
            cap_error = THEOREM_B_SLACK * (1.0 + np.abs(cap_e))
            bad[i[(value == np.inf) | (value - error > cap_e + cap_error)]] = True
            good[i[~(np.isfinite(value) & (value + error <= cap_e - cap_error))]] = False
        return bad, good

    def certified_reference(self, x: np.ndarray, rows: np.ndarray, o_f: np.ndarray, c_f: np.ndarray,
                            o_b: np.ndarray, c_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`certified` evaluating every constraint in full (the test oracle)."""
        lq, l1q = _logs(x)
        lr, l1r = self.lg[rows], self.l1g[rows]
        o_f, c_f, o_b, c_b = (a if a.shape[0] == 1 else a[rows] for a in (o_f, c_f, o_b, c_b))
        bad, good = np.zeros(x.shape, dtype=bool), np.ones(x.shape, dtype=bool)
        for value, error, cap in (
            (*_log_moment(lr, l1r, lq, l1q, o_f, with_error=True), c_f),
            (*_log_moment(lq, l1q, lr, l1r, o_b, with_error=True), c_b),
        ):
            assert error is not None
            cap_error = THEOREM_B_SLACK * (1.0 + np.abs(cap))
            bad |= np.any((value == np.inf) | (value - error > cap + cap_error), axis=1)
            good &= np.all(np.isfinite(value) & (value + error <= cap - cap_error), axis=1)
        return bad, good

    def bisect(self, lo: np.ndarray, hi: np.ndarray, steps: int, *constraints: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
        """``steps`` bisections in ``log G′`` of each bracket [lo, hi] (lo feasible, hi not, in floating point)."""
        for _ in range(steps):
            mid = np.clip(np.exp((np.log(lo) + np.log(hi)) / 2.0), lo, hi)
            bad = self.violated(mid, *constraints)
            lo, hi = np.where(bad, lo, mid), np.where(bad, mid, hi)
        return lo, hi

    def bisect_window(self, lo: np.ndarray, hi: np.ndarray, steps: int, window: tuple[np.ndarray, ...]
                      ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`bisect` over a window of constraints per point (:meth:`narrowed`), every decision the same.

        The window is small (:data:`_WINDOW` constraints per point), so each step is dominated by the number of
        numpy calls, not by the arithmetic (issue #30.6): both directions are evaluated as one array, unscreened,
        as :meth:`violated_reference` does. Forward ``log M_o(G, x)`` has the log-terms ``o log G + (1 − o) log x``
        and ``o log(1 − G) + (1 − o) log(1 − x)``, backward ``M_o(x, G)`` has ``(1 − o) log G + o log x`` (the same
        two products as :func:`_log_moment`'s ``o log x + (1 − o) log G``: floating-point addition commutes) and
        its ``1 − x`` twin, so with coefficients ``(o_f, 1 − o_b)`` on the logs of G (their products computed once,
        as G does not move) and ``(1 − o_f, o_b)`` on those of x every value is bit for bit the one
        :func:`_log_moment` returns. tests/privacy/test_theorem_b_fast.py compares it with :meth:`bisect`.
        """
        o_f, c_f, o_b, c_b = window
        coef_g = np.concatenate([o_f, 1.0 - o_b], axis=1)
        coef_x = np.concatenate([1.0 - o_f, o_b], axis=1)
        cap = np.concatenate([c_f, c_b], axis=1)
        with np.errstate(invalid="ignore"):
            fixed1, fixed2 = coef_g * self.lg, coef_g * self.l1g
            for _ in range(steps):
                mid = np.clip(np.exp((np.log(lo) + np.log(hi)) / 2.0), lo, hi)
                lq, l1q = _logs(mid)
                t1 = np.multiply(coef_x, lq)
                t2 = np.multiply(coef_x, l1q)
                np.add(fixed1, t1, out=t1)
                np.add(fixed2, t2, out=t2)
                t1[np.isnan(t1)] = -np.inf  # 0^o 0^(1−o) := 0, as in _log_moment
                t2[np.isnan(t2)] = -np.inf
                value = np.logaddexp(t1, t2, out=t1)
                np.subtract(value, cap, out=value)
                bad = np.any(value > 0.0, axis=1)
                lo, hi = np.where(bad, lo, mid), np.where(bad, mid, hi)
        return lo, hi

    def narrowed(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, ...]:
        """The constraints with the smallest estimated roots in [lo, hi] (log-linear interpolation of the excess).

        Equal to :meth:`narrowed_reference`: a share is finite only where the excess at ``hi`` is positive, so only
        the constraints the screen leaves undecided at ``hi`` are evaluated (at both ends).
        """
        if not self.screen:
            return self.narrowed_reference(lo, hi)
        lq_lo, l1q_lo = _logs(lo)
        lq_hi, l1q_hi = _logs(hi)
        low_terms = self._terms(lq_lo, l1q_lo, None, self.of, self.ob)
        high_terms = self._terms(lq_hi, l1q_hi, None, self.of, self.ob)
        out: list[np.ndarray] = []
        for (l1, l2), (h1, h2), o, cap in zip(low_terms, high_terms, (self.of, self.ob), (self.cf, self.cb),
                                              strict=True):
            k = min(_WINDOW // 2, o.shape[1])
            if k == 0:
                out += [np.zeros((self.g.size, 0)), np.zeros((self.g.size, 0))]
                continue
            share = np.full(h1.shape, np.inf)
            i, j = np.nonzero(~(self._gap(h1, h2, cap) <= -_SCREEN))
            cap_e = cap[0][j]
            high = self._values(h1[i, j], h2[i, j]) - cap_e
            rising = high > 0.0
            i, j, high, cap_e = i[rising], j[rising], high[rising], cap_e[rising]
            low = self._values(l1[i, j], l2[i, j]) - cap_e
            with np.errstate(divide="ignore", invalid="ignore"):
                value = np.clip(-low / (high - low), 0.0, 1.0)
            share[i, j] = np.where(np.isnan(value), 0.0, value)  # an infinite excess: the root is at the lower end
            pick = np.argpartition(share, k - 1, axis=1)[:, :k]
            out += [o[0][pick], cap[0][pick]]
        return tuple(out)

    def narrowed_reference(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, ...]:
        """:meth:`narrowed` evaluating every constraint in full (the test oracle)."""
        lo_f, lo_b = self.excess(lo, *self.every)
        hi_f, hi_b = self.excess(hi, *self.every)
        out: list[np.ndarray] = []
        for low, high, o, cap in ((lo_f, hi_f, self.of, self.cf), (lo_b, hi_b, self.ob, self.cb)):
            k = min(_WINDOW // 2, o.shape[1])
            with np.errstate(divide="ignore", invalid="ignore"):
                share = np.where(high > 0.0, np.clip(-low / (high - low), 0.0, 1.0), np.inf)
            share = np.where(np.isnan(share), 0.0, share)  # an infinite excess: the root is at the lower end
            pick = np.argpartition(share, k - 1, axis=1)[:, :k] if k else np.zeros((self.g.size, 0), dtype=np.int64)
            out += [o[0][pick], cap[0][pick]]
        return tuple(out)

    def certify(self, lo: np.ndarray, hi: np.ndarray, window: tuple[np.ndarray, ...], *, narrow: bool
                ) -> tuple[np.ndarray, ...]:
        """(upper, lower, lower certified?): hi moved up until certified infeasible, lo down until feasible.

        The upper end is certified under ``window`` (dropping constraints only enlarges F, so an end infeasible
        under a window is infeasible under all of them); the lower end under every constraint.
        """
        g = self.g
        upper, pending = np.ones_like(g), np.ones(g.shape, dtype=bool)
        for bump in (0.0, *_LADDER, 1e-3, 1e-2):
            rows = np.flatnonzero(pending)
            if rows.size == 0:
                break
            candidate = np.minimum(hi[rows] * (1.0 + bump), 1.0)
            bad, _ = self.certified(candidate, rows, *window)
            upper[rows[bad]], pending[rows[bad]] = candidate[bad], False
        lower, pending = g.copy(), np.ones(g.shape, dtype=bool)
        for shrink in (0.0, *_LADDER) if narrow else (0.0, *_LADDER, 1e-3, 1e-2):
            rows = np.flatnonzero(pending)
            if rows.size == 0:
                break
            candidate = np.maximum(g[rows] + (lo[rows] - g[rows]) * (1.0 - shrink), g[rows])
            _, good = self.certified(candidate, rows, *self.every)
            lower[rows[good]], pending[rows[good]] = candidate[good], False
        return upper, lower, ~pending


def theorem_b_grid(gamma: float, C: float, grid: int = THEOREM_B_GRID) -> np.ndarray:
    """The points ``0 = G_0 < G_1 < … < G_n = 1`` of Theorem B's supremum, shape ``(≈ grid + 1,)``.

    Any grid gives a rigorous bound; this one places the points where φ_α varies: uniformly in
    ``log(G + κ)``, κ = γ/((1−γ)C) (so ``log(γ + (1−γ)C G)`` changes by the same amount between points), plus a
    fifth of them geometric in ``[1e-15, min(κ, 1)]`` (where the partner ``G′max(G)`` can still move fast).
    """
    kappa = gamma / ((1.0 - gamma) * C)
    n_tail = max(2, round(grid * _TAIL_FRACTION))
    n_main = max(2, grid - n_tail)
    main = kappa * np.expm1(np.linspace(0.0, math.log1p(1.0 / kappa), n_main + 1))
    tail = np.geomspace(1e-15, min(kappa, 0.5), n_tail)
    inner = np.concatenate([tail, main])
    inner = inner[(inner > 0.0) & (inner < 1.0)]
    return np.unique(np.concatenate([[0.0], inner, [1.0]]))


def _cell_bounds(
    g: np.ndarray, upper: np.ndarray, lower: np.ndarray, orders: np.ndarray, theta: float, gamma: float, C: float,
    c: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Certified bounds on ``log(sup φ_α / K)`` over each cell of ``g``, and a (float) lower estimate of the sup.

    docs/proofs/adaptive.md §5b, Lemma B2 (see :func:`_theorem_b_log_sup`). Returns ``(cells, floor)``: cells shape
    ``(m, n − 1)`` (outward rounded), floor shape ``(m,)`` = ``max_i A(G_i) + B(L_i)`` (each ``(G_i, L_i) ∈ F``).
    """
    a = orders[:, None]
    big_a = -(1.0 + theta) * a * np.log(gamma + (1.0 - gamma) * c * g)[None, :]
    inside = gamma + (1.0 - gamma) * C * upper
    big_b = (1.0 + theta) * (a - 1.0) * np.log(np.minimum(inside, 1.0))[None, :]
    # the logs' arguments carry a relative rounding error of a few units, which the factors (1+θ)α and (1+θ)(α−1)
    # amplify whatever the logs' sizes: that is what `scale` adds to the magnitudes
    scale = (1.0 + theta) * (2.0 * a - 1.0)
    first = big_a[:, :-1] + big_b[:, 1:]
    first_mag = np.abs(big_a[:, :-1]) + np.abs(big_b[:, 1:]) + scale
    slope = (upper[1:-1] - lower[:-2]) / (g[1:-1] - g[:-2]) * (1.0 + 1e-12)
    derivative = np.where(inside[1:-1] < 1.0, (1.0 - gamma) * C / inside[1:-1], 0.0)
    rise = (1.0 + theta) * (a - 1.0) * (derivative * slope * (g[2:] - g[1:-1]))[None, :]
    second = np.maximum(big_a[:, 1:-1] + big_b[:, 1:-1], big_a[:, 2:] + big_b[:, 1:-1] + rise)
    second_mag = np.abs(big_a[:, 1:-1]) + np.abs(big_a[:, 2:]) + np.abs(big_b[:, 1:-1]) + np.abs(rise) + 2.0 * scale
    cells = first + THEOREM_B_SLACK * first_mag
    cells[:, 1:] = np.minimum(cells[:, 1:], second + THEOREM_B_SLACK * second_mag)
    feasible_b = (1.0 + theta) * (a - 1.0) * np.log(np.minimum(gamma + (1.0 - gamma) * C * lower, 1.0))[None, :]
    return cells, np.max(big_a + feasible_b, axis=1)


def _theorem_b_log_sup(
    orders: np.ndarray,
    eps_forward: np.ndarray,
    eps_backward: np.ndarray,
    pure_backward: float | None,
    theta: float,
    gamma: float,
    mean: float,
    C: float,
    c: float,
    grid: int,
) -> np.ndarray:
    """Certified upper bound on ``log sup_F φ_α`` at every order of ``orders``, shape ``(m,)``.

    docs/proofs/adaptive.md §5b, Lemma B2: on each cell ``[G_i, G_{i+1}]`` of the grid, ``φ_α(G, G′) ≤
    φ_α(G, G′max(G))`` with ``G′max`` non-decreasing and concave. Two bounds are taken, the smaller kept: (first
    order) ``A(G_i) + B(U_{i+1})``; (second order, i ≥ 1) ``A`` is convex and ``B`` concave non-decreasing, and
    ``G′max(G) ≤ U_i + s_i (G − G_i)`` with the chord slope ``s_i = (U_i − L_{i−1})/(G_i − G_{i−1})`` (concavity),
    so ``A(G) + B(G′max(G))`` lies below the affine function through ``A(G_i) + B(U_i)`` and
    ``A(G_{i+1}) + B(U_i) + B′₊(U_i) s_i (G_{i+1} − G_i)``. Here ``A(G) = −(1+θ)α log(γ + (1−γ)cG)``,
    ``B(G′) = (1+θ)(α−1) log min(1, γ + (1−γ)CG′)`` and ``U ≥ G′max ≥ L`` come from :func:`_partner_bounds`. Every
    candidate is raised by :data:`THEOREM_B_SLACK` times the sum of its terms' magnitudes (outward rounding).

    The grid starts as :func:`theorem_b_grid` and is refined where it matters: every cell whose bound exceeds the
    best certified-feasible value ``max_i A(G_i) + B(L_i)`` by more than :data:`_REFINE_TOLERANCE`·(α − 1) at some
    order gets :data:`_REFINE_POINTS` more points (the :data:`_REFINE_CELLS` loosest per round), for at most
    :data:`_REFINE_ROUNDS` rounds (the partner of
    ``G′max`` can have kinks where the binding order changes, and there the chord bound is only first order).
    Refinement only moves the bound closer to the supremum; every grid gives a valid bound.
    """
    g = theorem_b_grid(gamma, C, grid)
    up, low = _partner_bounds(g[1:-1], orders, eps_forward, eps_backward, pure_backward)
    constrained = bool(np.any(np.isfinite(eps_backward))) or pure_backward is not None
    # G = 0: any finite backward order gives M(G′, 0) = ∞ for G′ > 0, and a pure bound gives G′ ≤ e^{ε̂∞}·0
    upper = np.concatenate([[0.0 if constrained else 1.0], up, [1.0]])
    lower = np.concatenate([[0.0], low, [1.0]])
    kappa = gamma / ((1.0 - gamma) * C)
    tolerance = _REFINE_TOLERANCE * (orders[:, None] - 1.0)
    cells: np.ndarray | None = None  # the bounds of the current grid, once computed
    for _ in range(_REFINE_ROUNDS):
        cells, floor = _cell_bounds(g, upper, lower, orders, theta, gamma, C, c)
        excess = np.max((cells - floor[:, None]) / tolerance, axis=0)
        loose = np.flatnonzero(excess > 1.0)
        if loose.size == 0:
            break
        loose = np.sort(loose[np.argsort(-excess[loose], kind="stable")[:_REFINE_CELLS]])
        left, right = np.log(g[loose] + kappa), np.log(g[loose + 1] + kappa)
        steps = np.arange(1, _REFINE_POINTS + 1) / (_REFINE_POINTS + 1.0)
        new = np.exp(left[:, None] + (right - left)[:, None] * steps[None, :]) - kappa
        new = new[(new > g[loose][:, None]) & (new < g[loose + 1][:, None])]
        new = np.setdiff1d(new[(new > 0.0) & (new < 1.0)], g)
        if new.size == 0:
            break
        new_up, new_low = _partner_bounds(new, orders, eps_forward, eps_backward, pure_backward)
        order = np.argsort(np.concatenate([g, new]), kind="stable")
        g = np.concatenate([g, new])[order]
        upper, lower = np.concatenate([upper, new_up])[order], np.concatenate([lower, new_low])[order]
        cells = None
    if cells is None:  # the last round refined the grid (or there was none): bound its cells
        cells, _ = _cell_bounds(g, upper, lower, orders, theta, gamma, C, c)
    log_k = (1.0 + theta) * math.log(gamma) + math.log(mean)
    return log_k + THEOREM_B_SLACK * (1.0 + abs(log_k)) + cells.max(axis=1)


@lru_cache(maxsize=128)
def _cached_log_sup(
    orders: bytes, forward: bytes, backward: bytes, pure_backward: float | None, theta: float, gamma: float,
    mean: float, C: float, c: float, grid: int,
) -> np.ndarray:
    out = _theorem_b_log_sup(
        np.frombuffer(orders), np.frombuffer(forward), np.frombuffer(backward), pure_backward, theta, gamma, mean,
        C, c, grid,
    )
    out.flags.writeable = False
    return out


def check_theorem_b_curve(base: RdpCurve) -> None:
    r"""Refuse a per-run curve Theorem B cannot trust at every order (docs/proofs/adaptive.md §5b, point (e)).

    Theorem B uses ε(α̂) at *every* order of the curve at once, so one order that is too low breaks it (so it does
    the RDP → (ε, δ) conversion, but B has more orders to be wrong at). A Rényi divergence is non-decreasing in
    the order (van Erven & Harremoës 2014, Theorem 3) and at most its pure bound: a curve that decreases, or
    exceeds its pure ε, has either a loose order (harmless) or one that is too low (fatal), and which cannot be
    told from the curve. Curves built by dphypo's own accountants (DP-SGD through ``dp_accounting``, Gaussian,
    pure-DP, data-independent, and their compositions: :func:`~dphypo.privacy.events.is_library_event`) are computed
    by tested formulas (``dp_accounting`` is loose at fractional orders near 1, where its curve may decrease, and
    ``tests/privacy/test_adaptive_proof.py`` checks it against an independent evaluation at every order of the
    README settings); any other curve (user-supplied, or of unknown mechanism) must be non-decreasing on its
    finite orders and at most its pure ε, up to a relative 1e-9.

    Raises:
        ValueError: A curve of unknown origin that decreases (or exceeds its pure bound).
    """
    if base.event is not None:
        from dphypo.privacy.events import is_library_event

        if is_library_event(base.event):
            return
    finite = np.isfinite(base.epsilons)
    orders, eps = base.orders[finite], base.epsilons[finite]
    tolerance = 1e-9 * np.maximum(1.0, eps)
    if eps.size > 1:
        running = np.maximum.accumulate(eps)
        drop = np.flatnonzero(eps < running - tolerance)
        if drop.size:
            j = int(drop[0])
            i = int(np.argmax(eps[:j + 1]))
            raise ValueError(
                f"Theorem B trusts the per-run curve at every order, but {base.label!r} decreases from "
                f"eps({orders[i]:g})={eps[i]:.6g} to eps({orders[j]:g})={eps[j]:.6g} (a Renyi divergence is "
                "non-decreasing in the order): one of them is loose or too low; pass curve.monotone() if every "
                "value is a valid bound, or use adaptive_theorem='A'"
            )
    if base.pure_epsilon is not None and eps.size and np.max(eps - tolerance) > base.pure_epsilon:
        j = int(np.argmax(eps))
        raise ValueError(
            f"Theorem B trusts the per-run curve at every order, but {base.label!r} has eps({orders[j]:g})="
            f"{eps[j]:.6g} above its pure bound {base.pure_epsilon:g} (D_alpha <= D_inf): pass curve.monotone() if "
            "every value is a valid bound, or use adaptive_theorem='A'"
        )


def theorem_b_bound(
    orders: np.ndarray,
    forward: np.ndarray,
    backward: np.ndarray,
    run_count: TruncatedNegativeBinomial,
    C: float,
    c: float,
    *,
    backward_pure: float | None = None,
    grid: int = THEOREM_B_GRID,
) -> np.ndarray:
    r"""Theorem B's bound on ``D_α(A(D)‖A(D′))`` at every order α of ``orders``, with directional curves.

    docs/proofs/adaptive.md §5b, Theorem B: if every candidate satisfies ``D_α̂(M_λ(D)‖M_λ(D′)) ≤ forward(α̂)`` and
    ``D_α̂(M_λ(D′)‖M_λ(D)) ≤ backward(α̂)`` at every order of ``orders`` (and ``M_λ(D′) ≤ e^{ε̂∞} M_λ(D)`` set-wise
    if ``backward_pure`` is given), then for every α in ``orders``

        D_α(A‖A′) ≤ forward(α) + [α log C + (1−α) log c + log sup_F φ_α] / (α − 1),

    ``φ_α(G, G′) = E[T] γ^{1+θ} (γ + (1−γ)cG)^{−(1+θ)α} min(1, γ + (1−γ)CG′)^{(1+θ)(α−1)}`` and F the pairs allowed
    by the curves (:func:`_partner_bounds`). The supremum is certified from above (:func:`_theorem_b_log_sup`). No
    envelope and no minimum with Theorem A (see :func:`theorem_b`).

    Args:
        orders: Shape ``(m,)``, strictly increasing orders > 1.
        forward: Shape ``(m,)`` forward bounds (``inf``: none at that order).
        backward: Shape ``(m,)`` backward bounds.
        run_count: TNB(θ, γ) distribution of T.
        C: Upper density-ratio bound ≥ 1.
        c: Lower density-ratio bound in (0, 1].
        backward_pure: Pure bound ε̂∞ of the backward direction, or ``None``.
        grid: Positive grid points of G (≥ 10).

    Returns:
        Shape ``(m,)`` bounds (``inf`` where ``forward`` is).
    """
    check_density_bounds(C, c)
    if not isinstance(run_count, TruncatedNegativeBinomial):
        raise TypeError(f"Theorem B needs a truncated negative binomial run count, got {run_count!r}")
    check_int_at_least("grid", grid, 10)
    a = np.ascontiguousarray(orders, dtype=np.float64)
    fwd = np.ascontiguousarray(forward, dtype=np.float64)
    bwd = np.ascontiguousarray(backward, dtype=np.float64)
    if a.ndim != 1 or a.size == 0 or fwd.shape != a.shape or bwd.shape != a.shape:
        raise ValueError(f"orders, forward and backward must be 1-D of one length, got {a.shape}, {fwd.shape}, "
                         f"{bwd.shape}")
    if not np.all(np.isfinite(a)) or np.any(a <= 1.0) or np.any(np.diff(a) <= 0.0):
        raise ValueError(f"orders must be finite, > 1 and strictly increasing, got min {a.min()!r}")
    if np.any(np.isnan(fwd)) or np.any(fwd < 0.0) or np.any(np.isnan(bwd)) or np.any(bwd < 0.0):
        raise ValueError("forward and backward must be non-negative (inf allowed), got a negative or NaN value")
    check_non_negative("backward_pure", backward_pure, optional=True)
    theta, gamma, mean = run_count.theta, run_count.gamma, run_count.mean
    log_sup = _cached_log_sup(a.tobytes(), fwd.tobytes(), bwd.tobytes(), backward_pure, float(theta),
                              float(gamma), float(mean), float(C), float(c), grid)
    with np.errstate(invalid="ignore"):
        out = fwd + (a * math.log(C) + (1.0 - a) * math.log(c) + log_sup) / (a - 1.0)
    return np.where(np.isfinite(fwd), out, np.inf)


def theorem_b_log_sup(
    base: RdpCurve, run_count: TruncatedNegativeBinomial, C: float, c: float, *, grid: int = THEOREM_B_GRID
) -> np.ndarray:
    """Certified upper bound on ``log sup_F φ_α`` per order α of ``base`` (both directions bounded by ``base``).

    See :func:`theorem_b` and :func:`_theorem_b_log_sup`; φ_α = u^α v^(1−α) of docs/proofs/adaptive.md, Step 7.
    Returns shape ``(m,)``.
    """
    check_density_bounds(C, c)
    if not isinstance(run_count, TruncatedNegativeBinomial):
        raise TypeError(f"Theorem B needs a truncated negative binomial run count, got {run_count!r}")
    check_int_at_least("grid", grid, 10)
    eps = np.ascontiguousarray(base.epsilons)
    return np.array(_cached_log_sup(np.ascontiguousarray(base.orders).tobytes(), eps.tobytes(), eps.tobytes(),
                                    base.pure_epsilon, float(run_count.theta), float(run_count.gamma),
                                    float(run_count.mean), float(C), float(c), grid))


def theorem_b(
    base: RdpCurve, run_count: TruncatedNegativeBinomial, C: float, c: float, *, grid: int = THEOREM_B_GRID
) -> TuningRdp:
    r"""Theorem B of docs/proofs/adaptive.md (§5b): Theorem A's proof with Step 7 replaced by a supremum.

    Steps 1–6 give ``e^{(α−1)D_α} ≤ C^α c^{1−α} e^{(α−1)ε(α)} sup φ_α(G_s(y), G′_s(y))``; every pair
    ``(G_s(y), G′_s(y))`` lies in the set F that the per-run curve allows at *every* order (data processing in
    both directions), and the supremum of φ_α over F is bounded from above with certified floating point
    (:func:`theorem_b_bound`). The curve is the order-wise minimum with :func:`theorem_a` (both valid), then the
    monotone envelope. At C = c = 1 it is a uniform-search bound never above Papernot & Steinke 2022 Theorem 2
    (Theorem A at C = c = 1 is their sharper form). The per-run curve is checked first
    (:func:`check_theorem_b_curve`).

    Args:
        base: RDP curve valid for every candidate, both directions, shape ``(m,)`` orders.
        run_count: TNB(θ, γ) (Theorem B is proven for TNB T only).
        C: Upper density-ratio bound ≥ 1.
        c: Lower density-ratio bound in (0, 1].
        grid: Positive grid points of G (≥ 10).

    Returns:
        The search's RDP curve; ``order_hat`` is ``nan`` (no single α̂), ``constant`` Theorem A's.

    Raises:
        ValueError: The per-run curve fails :func:`check_theorem_b_curve`, or invalid arguments.
    """
    tuned_a = theorem_a(base, run_count, C, c)  # validates the arguments
    check_theorem_b_curve(base)
    theta, gamma = run_count.theta, run_count.gamma
    eps = theorem_b_bound(base.orders, base.epsilons, base.epsilons, run_count, C, c,
                          backward_pure=base.pure_epsilon, grid=grid)
    eps = np.minimum(eps, tuned_a.curve.epsilons)
    label = f"Theorem B [TNB(theta={theta:g}, gamma={gamma:.6g}), C={C:g}, c={c:g}] of ({base.label})"
    curve = RdpCurve(base.orders, eps, tuned_a.curve.pure_epsilon, label).monotone()
    theorem = THEOREM_B if c < C else THEOREM_B_UNIFORM
    return TuningRdp(curve, math.nan, tuned_a.constant, theorem)


def theorem_a_pure(epsilon: float, theta: float, gamma: float, C: float, c: float) -> float:
    r"""Theorem A∞ of docs/proofs/adaptive.md (replaces DP-HyPO Theorem 2), the pure-DP bound for C > c.

    Every candidate ε-DP ⇒ the search is ε′-DP with
    ``ε′ = ε + log(C/c) + (1+θ) log[(γ + (1−γ) C) / (γ + (1−γ) c e^(−ε))]``.

    Never above DP-HyPO Theorem 2's ``(2+θ)(ε + log(C/c))`` (equal as γ → 0).

    Args:
        epsilon: Pure ε ≥ 0 of every candidate.
        theta: θ > −1.
        gamma: γ ∈ (0, 1).
        C: Upper density-ratio bound ≥ 1.
        c: Lower density-ratio bound in (0, 1].

    Returns:
        ε′.
    """
    check_density_bounds(C, c)
    check_theta(theta)
    check_probability("gamma", gamma)
    check_non_negative("epsilon", epsilon)
    ratio = (gamma + (1.0 - gamma) * C) / (gamma + (1.0 - gamma) * c * math.exp(-epsilon))
    return float(epsilon + math.log(C / c) + (1.0 + theta) * math.log(ratio))


def uniform_theorem_b(base: RdpCurve, run_count: TruncatedNegativeBinomial) -> TuningRdp | None:
    """Theorem B at C = c = 1, a uniform-search RDP curve, or ``None`` when the per-run curve is refused.

    docs/proofs/adaptive.md §5b at C = c = 1 (the order-wise minimum with Papernot & Steinke 2022 Theorem 2 as
    printed, both valid; Theorem B is never above it except by grid effects). ``None`` means
    :func:`check_theorem_b_curve` refused ``base``: the uniform search then has Papernot-Steinke's bound only.

    Args:
        base: RDP curve valid for every candidate, both directions.
        run_count: TNB(θ, γ) (Theorem B is proven for TNB T only).

    Returns:
        The curve, theorem :data:`THEOREM_B_UNIFORM`; or ``None``.
    """
    try:
        check_theorem_b_curve(base)
    except ValueError:
        return None
    tuned = theorem_b(base, run_count, 1.0, 1.0)
    printed = dphypo_theorem1(base, run_count, 1.0, 1.0).curve
    pures = [p for p in (tuned.curve.pure_epsilon, printed.pure_epsilon) if p is not None]
    curve = RdpCurve(base.orders, np.minimum(tuned.curve.epsilons, printed.epsilons), min(pures) if pures else None,
                     tuned.curve.label).monotone()
    return TuningRdp(curve, math.nan, tuned.constant, THEOREM_B_UNIFORM)


def adaptive_rdp(
    base: RdpCurve, run_count: TruncatedNegativeBinomial, C: float, c: float, adaptive_theorem: str = "B"
) -> TuningRdp:
    """The search's RDP curve for TNB T and C > c: Theorem B (default), Theorem A or DP-HyPO Theorem 1 (opt-in).

    At C = c = 1 this is Papernot & Steinke 2022, Theorem 2 exactly as printed (a uniform search also has Theorem B
    at C = c = 1, :func:`uniform_theorem_b`, listed separately by ``dphypo.privacy.search_rdp.rdp_bounds``).
    For C > c the proven curve is floored, order by order, at the uniform RDP curve (Theorem A: the printed
    Papernot-Steinke curve, as before; Theorem B: the order-wise minimum of that and Theorem B at C = c = 1): the
    maximum of a valid bound and anything is valid, and the floor keeps the accountant monotone in C/c (Theorem A's
    sharper Hölder step gains up to ``(1+θ) log(1/(γ + (1−γ)e^{-(α̂−1)ε̂}))/α̂`` over the printed uniform bound,
    which could otherwise exceed a tiny ``log(C/c)``; Theorem B's grids depend on C). In the README settings the
    floor does not bind.

    Raises:
        ValueError: Theorem B with a per-run curve it refuses (:func:`check_theorem_b_curve`), or bad arguments.
    """
    check_adaptive_theorem(adaptive_theorem)
    check_density_bounds(C, c)
    if c == C or adaptive_theorem == "published":
        tuned = dphypo_theorem1(base, run_count, C, c)
        if c < C:
            return TuningRdp(tuned.curve, tuned.order_hat, tuned.constant, PUBLISHED_THEOREM1)
        return tuned
    uniform = dphypo_theorem1(base, run_count, 1.0, 1.0).curve
    if adaptive_theorem == "A":
        tuned = theorem_a(base, run_count, C, c)
    else:
        tuned = theorem_b(base, run_count, C, c)
        # Theorem B at C = c = 1 is at most the printed curve at every order (an order-wise minimum with it, then a
        # running minimum and a cap), so where the printed curve does not exceed Theorem B's (no NaN either) neither
        # does the sharp one and the floor is not applied: the sharp one is then not computed (issue #30.6).
        if not np.all(uniform.epsilons <= tuned.curve.epsilons):
            sharp = uniform_theorem_b(base, run_count)
            assert sharp is not None  # theorem_b accepted the curve
            uniform = sharp.curve
    curve = tuned.curve
    if np.any(uniform.epsilons > curve.epsilons):
        pure = curve.pure_epsilon
        if pure is not None and uniform.pure_epsilon is not None:
            pure = max(pure, uniform.pure_epsilon)
        floored = RdpCurve(curve.orders, np.maximum(curve.epsilons, uniform.epsilons), pure, curve.label)
        return TuningRdp(floored, tuned.order_hat, tuned.constant, tuned.theorem)
    return tuned


def adaptive_pure_epsilon(
    epsilon: float, run_count: TruncatedNegativeBinomial, C: float, c: float, adaptive_theorem: str = "B"
) -> tuple[float, str]:
    """Pure-DP ε of a search with TNB T and its theorem label.

    C = c = 1: Papernot & Steinke 2022 Corollary 3, ``(2+θ)ε`` (unchanged). C > c: Theorem A∞ for ``"B"``
    (default; Theorem B has no pure-DP form) and ``"A"``, floored at the uniform ``(2+θ)ε`` as in
    :func:`adaptive_rdp`; or the published DP-HyPO Theorem 2 (opt-in, ``"published"``).
    """
    check_adaptive_theorem(adaptive_theorem)
    if not isinstance(run_count, TruncatedNegativeBinomial):
        raise TypeError(f"pure-DP accounting needs a truncated negative binomial run count, got {run_count!r}")
    theta = run_count.theta
    uniform = dphypo_theorem2(epsilon, theta, 1.0, 1.0)
    if c == C:
        return uniform, "DP-HyPO Theorem 2 = Papernot-Steinke Corollary 3"
    if adaptive_theorem == "published":
        return dphypo_theorem2(epsilon, theta, C, c), PUBLISHED_THEOREM2
    return max(theorem_a_pure(epsilon, theta, run_count.gamma, C, c), uniform), THEOREM_A_PURE

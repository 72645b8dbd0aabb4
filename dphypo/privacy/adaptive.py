r"""A proven privacy bound for DP-HyPO's adaptive search (C > c): Theorem A and its pure-DP limit.

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

The accountant evaluates them for C > c only (:func:`adaptive_rdp`, :func:`adaptive_pure_epsilon`, floored at
the uniform bound so ε is monotone in C/c); a uniform search (C = c = 1) keeps Papernot & Steinke 2022,
Theorem 2 / Corollary 3 exactly as printed (:func:`~dphypo.privacy.tuning.dphypo_theorem1` at C = c = 1).

References (docs/references.md): Wang et al. 2023 (DP-HyPO) arXiv:2306.05734v2; Papernot & Steinke 2022
arXiv:2110.03620v2.
"""

from __future__ import annotations

import math

import numpy as np

from dphypo.privacy.rdp import RdpCurve
from dphypo.privacy.run_counts import TruncatedNegativeBinomial
from dphypo.privacy.tuning import TuningRdp, check_density_bounds, dphypo_theorem1, dphypo_theorem2

__all__ = [
    "ADAPTIVE_THEOREMS",
    "PUBLISHED_THEOREM1",
    "PUBLISHED_THEOREM2",
    "THEOREM_A",
    "THEOREM_A_PURE",
    "THEOREM_B",
    "THEOREM_B_GRID",
    "adaptive_pure_epsilon",
    "adaptive_rdp",
    "check_adaptive_theorem",
    "rdp_method_name",
    "theorem_a",
    "theorem_a_hat_term",
    "theorem_a_pure",
    "theorem_b",
    "theorem_b_log_sup",
]

#: Accepted values of ``adaptive_theorem``: the proven default (A), the proven numerical sharpening (B, opt-in)
#: and the opt-in published bound.
ADAPTIVE_THEOREMS: tuple[str, ...] = ("A", "B", "published")
#: Report label of the default RDP bound for C > c.
THEOREM_A = "Theorem A (docs/proofs/adaptive.md; replaces DP-HyPO Theorem 1)"
#: Report label of the default pure-DP bound for C > c.
THEOREM_A_PURE = "Theorem A-infinity (docs/proofs/adaptive.md; replaces DP-HyPO Theorem 2)"
#: Report label of the opt-in numerical sharpening of Theorem A.
THEOREM_B = "Theorem B (docs/proofs/adaptive.md; Theorem A with the Hoelder step replaced by an exact supremum)"
#: Grid size of Theorem B's supremum over G ∈ [0, 1] (geometric in (0, 1], plus 0).
THEOREM_B_GRID = 2000
#: Report label of the opt-in published RDP bound.
PUBLISHED_THEOREM1 = "DP-HyPO Theorem 1 (published; proof has a known gap; implied by Theorem A)"
#: Report label of the opt-in published pure-DP bound.
PUBLISHED_THEOREM2 = "DP-HyPO Theorem 2 (published; proof has a known gap; implied by Theorem A-infinity)"


def check_adaptive_theorem(adaptive_theorem: str) -> None:
    """Validate the choice of adaptive bound.

    Raises:
        ValueError: ``adaptive_theorem`` is not ``"A"`` (proven, default), ``"B"`` (proven, numerical, opt-in) or
            ``"published"`` (opt-in).
    """
    if adaptive_theorem not in ADAPTIVE_THEOREMS:
        raise ValueError(f"adaptive_theorem must be one of {ADAPTIVE_THEOREMS}, got {adaptive_theorem!r}")


def rdp_method_name(adaptive: bool, adaptive_theorem: str = "A") -> str:
    """Name of the RDP route in a report's ``methods``.

    ``"rdp"`` (uniform), ``"rdp-theorem-a"``, ``"rdp-theorem-b"`` or ``"rdp-published-thm1"`` (adaptive).
    """
    check_adaptive_theorem(adaptive_theorem)
    if not adaptive:
        return "rdp"
    return {"A": "rdp-theorem-a", "B": "rdp-theorem-b", "published": "rdp-published-thm1"}[adaptive_theorem]


def _check_theta_gamma(theta: float, gamma: float) -> None:
    if not (isinstance(theta, (int, float)) and math.isfinite(theta) and theta > -1.0):
        raise ValueError(f"theta must be a finite number > -1, got {theta!r}")
    if not (isinstance(gamma, (int, float)) and 0.0 < gamma < 1.0):
        raise ValueError(f"gamma must be in (0, 1), got {gamma!r}")


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
    _check_theta_gamma(theta, gamma)
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


def _partner_upper(g: np.ndarray, orders: np.ndarray, eps_hat: np.ndarray, pure: float | None) -> np.ndarray:
    """Upper bounds on the largest feasible partner G′max(G) of each G, shape ``(n,)``.

    ``G′max(G) = max{G′ ≥ G : D_α̂(Bern(G′)‖Bern(G)) ≤ ε̂(α̂) and D_α̂(Bern(G)‖Bern(G′)) ≤ ε̂(α̂) for every α̂}``.

    Bisection on G′ ∈ [G, 1] (the feasible G′ ≥ G form an interval containing G: for α̂ ≥ 1 the binary α̂-moment
    p^α̂ q^(1−α̂) + (1−p)^α̂ (1−q)^(1−α̂) is convex in each argument and equals 1 at p = q), 60 halvings, returning
    the infeasible end, with a 1e-12 slack on the constraint, so every value is ≥ the true G′max.
    """
    o = orders[None, :]
    cap = (orders - 1.0) * eps_hat + 1e-12

    def log_moment(p: np.ndarray, q: np.ndarray) -> np.ndarray:
        """log(p^α̂ q^(1−α̂) + (1−p)^α̂ (1−q)^(1−α̂)), shape (n, m); 0^α̂ = 0, p^α̂ 0^(1−α̂) = ∞ for p > 0."""
        with np.errstate(divide="ignore", invalid="ignore"):
            t1 = o * np.log(p[:, None]) + (1.0 - o) * np.log(q[:, None])
            t2 = o * np.log1p(-p[:, None]) + (1.0 - o) * np.log1p(-q[:, None])
        t1 = np.where(p[:, None] > 0.0, t1, -np.inf)
        t2 = np.where(p[:, None] < 1.0, t2, -np.inf)
        return np.logaddexp(t1, t2)

    def feasible(gp: np.ndarray) -> np.ndarray:
        # both directions: the base curve bounds D_α̂(Q′‖Q) and D_α̂(Q‖Q′) (RdpCurve covers both)
        ok = np.all(log_moment(gp, g) <= cap[None, :], axis=1) & np.all(log_moment(g, gp) <= cap[None, :], axis=1)
        if pure is not None:
            ok &= gp <= math.exp(pure) * g + 1e-15
        return ok

    lo, hi = g.copy(), np.ones_like(g)
    done = feasible(hi)
    for _ in range(60):
        mid = (lo + hi) / 2.0
        ok = feasible(mid)
        lo, hi = np.where(ok, mid, lo), np.where(ok, hi, mid)
    return np.where(done, 1.0, hi)


def theorem_b_log_sup(
    base: RdpCurve, run_count: TruncatedNegativeBinomial, C: float, c: float, *, grid: int = THEOREM_B_GRID
) -> np.ndarray:
    """Rigorous upper bound on ``log sup φ_α(G, G′)`` over the feasible pairs, per order α of ``base``.

    See :func:`theorem_b`; φ_α = u^α v^(1−α) of docs/proofs/adaptive.md, Step 7. Returns shape ``(m,)``.
    """
    theta, gamma, mean = run_count.theta, run_count.gamma, run_count.mean
    a = base.orders
    finite = np.isfinite(base.epsilons)
    g = np.concatenate([[0.0], np.geomspace(1e-15, 1.0, grid)])
    partner = _partner_upper(g, a[finite], base.epsilons[finite], base.pure_epsilon)
    log_k = (1.0 + theta) * math.log(gamma) + math.log(mean)
    log_a = np.log(gamma + (1.0 - gamma) * c * g[:-1])  # left ends: φ decreasing in G
    log_b = np.log(np.minimum(gamma + (1.0 - gamma) * C * partner[1:], 1.0))  # right ends' partners
    return log_k + np.max(
        -(1.0 + theta) * a[:, None] * log_a[None, :] + (1.0 + theta) * (a[:, None] - 1.0) * log_b[None, :], axis=1
    )


def theorem_b(
    base: RdpCurve, run_count: TruncatedNegativeBinomial, C: float, c: float, *, grid: int = THEOREM_B_GRID
) -> TuningRdp:
    r"""Theorem B of docs/proofs/adaptive.md: Theorem A's proof with Step 7 replaced by an exact supremum.

    Steps 1–6 give ``e^{(α−1)D_α} ≤ C^α c^{1−α} e^{(α−1)ε(α)} sup φ_α(G, G′)`` with
    ``φ_α = K (γ + (1−γ)cG)^{−(1+θ)α} min(1, γ + (1−γ)CG′)^{(1+θ)(α−1)}`` over the pairs (G, G′) that one test
    function can produce from Q and Q′; by data processing they satisfy ``D_α̂(Bern(G′)‖Bern(G)) ≤ ε̂(α̂)`` and
    ``D_α̂(Bern(G)‖Bern(G′)) ≤ ε(α̂)`` at every order of the base curve (which bounds both directions), and
    ``G′ ≤ e^{ε∞} G`` with a pure bound. φ_α decreases in G and increases
    in G′, and the largest feasible G′ is non-decreasing in G, so on a grid ``0 = G_0 < … < G_n = 1``,
    ``sup φ_α ≤ max_i φ_α(G_i, G′max(G_{i+1}))`` with :func:`_partner_upper` — a rigorous upper bound. The
    curve is the order-wise minimum with :func:`theorem_a` (both valid), then the monotone envelope.

    Args:
        base: RDP curve valid for every candidate, both directions, shape ``(m,)`` orders.
        run_count: TNB(θ, γ).
        C: Upper density-ratio bound ≥ 1.
        c: Lower density-ratio bound in (0, 1].
        grid: Number of positive grid points of G (≥ 10).

    Returns:
        The search's RDP curve; ``order_hat`` is ``nan`` (no single α̂), ``constant`` Theorem A's.
    """
    if not (isinstance(grid, int) and grid >= 10):
        raise ValueError(f"grid must be an integer >= 10, got {grid!r}")
    tuned_a = theorem_a(base, run_count, C, c)  # validates the arguments
    theta, gamma = run_count.theta, run_count.gamma
    a = base.orders
    sup = theorem_b_log_sup(base, run_count, C, c, grid=grid)
    eps = base.epsilons + (a * math.log(C) + (1.0 - a) * math.log(c) + sup) / (a - 1.0)
    eps = np.minimum(eps, tuned_a.curve.epsilons)
    label = f"Theorem B [TNB(theta={theta:g}, gamma={gamma:.6g}), C={C:g}, c={c:g}] of ({base.label})"
    curve = RdpCurve(a, eps, tuned_a.curve.pure_epsilon, label).monotone()
    return TuningRdp(curve, math.nan, tuned_a.constant, THEOREM_B)


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
    _check_theta_gamma(theta, gamma)
    if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon >= 0.0):
        raise ValueError(f"epsilon must be a finite number >= 0, got {epsilon!r}")
    ratio = (gamma + (1.0 - gamma) * C) / (gamma + (1.0 - gamma) * c * math.exp(-epsilon))
    return float(epsilon + math.log(C / c) + (1.0 + theta) * math.log(ratio))


def adaptive_rdp(
    base: RdpCurve, run_count: TruncatedNegativeBinomial, C: float, c: float, adaptive_theorem: str = "A"
) -> TuningRdp:
    """The search's RDP curve for TNB T: Theorem A (default) or the published DP-HyPO Theorem 1 (opt-in).

    At C = c = 1 both are Papernot & Steinke 2022, Theorem 2 exactly as printed (the uniform path is unchanged).
    For C > c the Theorem A curve is floored, order by order, at that uniform curve: the maximum of a valid bound
    and anything is valid, and the floor keeps the accountant monotone in C/c (Theorem A's sharper Hölder step
    gains up to ``(1+θ) log(1/(γ + (1−γ)e^{-(α̂−1)ε̂}))/α̂`` over the printed uniform bound, which could otherwise
    exceed a tiny ``log(C/c)``). In the regimes the tuner is used in the floor does not bind.
    """
    check_adaptive_theorem(adaptive_theorem)
    check_density_bounds(C, c)
    if c == C or adaptive_theorem == "published":
        tuned = dphypo_theorem1(base, run_count, C, c)
        if c < C:
            return TuningRdp(tuned.curve, tuned.order_hat, tuned.constant, PUBLISHED_THEOREM1)
        return tuned
    tuned = theorem_a(base, run_count, C, c) if adaptive_theorem == "A" else theorem_b(base, run_count, C, c)
    uniform = dphypo_theorem1(base, run_count, 1.0, 1.0).curve
    curve = tuned.curve
    if np.any(uniform.epsilons > curve.epsilons):
        pure = curve.pure_epsilon
        if pure is not None and uniform.pure_epsilon is not None:
            pure = max(pure, uniform.pure_epsilon)
        floored = RdpCurve(curve.orders, np.maximum(curve.epsilons, uniform.epsilons), pure, curve.label)
        return TuningRdp(floored, tuned.order_hat, tuned.constant, tuned.theorem)
    return tuned


def adaptive_pure_epsilon(
    epsilon: float, run_count: TruncatedNegativeBinomial, C: float, c: float, adaptive_theorem: str = "A"
) -> tuple[float, str]:
    """Pure-DP ε of a search with TNB T and its theorem label.

    C = c = 1: Papernot & Steinke 2022 Corollary 3, ``(2+θ)ε`` (unchanged). C > c: Theorem A∞ (default; floored
    at the uniform ``(2+θ)ε`` as in :func:`adaptive_rdp`) or the published DP-HyPO Theorem 2 (opt-in).
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

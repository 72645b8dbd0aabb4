"""Sampling densities over the grid: softmax of scores, and projection onto the bounded set S_{C,c}(π⁽⁰⁾).

DP-HyPO (Wang et al. 2023) keeps every sampling density inside

    S_{C,c}(π⁽⁰⁾) = {f : c·π⁽⁰⁾ ≤ f ≤ C·π⁽⁰⁾, Σ f = 1}          (eq. 3.1; App. D for a general prior)

by Euclidean projection; the log(C/c) terms of Theorems 1 and 2 pay for exactly this freedom. On a finite grid
with the counting measure (App. C.2) the projection is a separable quadratic programme with one equality
constraint. Its KKT conditions say the solution is ``f = clip(p − τ, c·π⁽⁰⁾, C·π⁽⁰⁾)`` for a single scalar τ;
:func:`project` finds τ exactly in O(n log n) (``solver="exact"``), by bisection (``"bisection"``, a
cross-check) or with cvxpy (``"cvxpy"``, an optional reference oracle).

Privacy rule 3: every density the sampler uses goes through :func:`project`; the result always satisfies the
bounds elementwise (against the float64 products ``c·π0`` and ``C·π0``) and sums to 1 within a few ulps.
"""

from __future__ import annotations

import importlib.metadata
import math
import numbers
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["in_bounded_set", "project", "project_kl_penalised", "softmax", "validate_prior"]

#: A prior may drift this far from summing to 1 (float round-off) and is renormalised; more is an error.
PRIOR_SUM_TOL = 1e-9
#: Inputs whose spread max − min exceeds this cannot be projected without overflow.
MAX_SPREAD = 1e300
# Residual |Σf − 1| above which the exact algorithm distrusts its bracket and falls back to bisection.
_BRACKET_TOL = 1e-9
_BISECTION_ITERS = 200


# -- validation ----------------------------------------------------------------------------------------------
def _real_scalar(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    result = float(value)
    if not math.isfinite(result):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return result


def _finite_array(values: ArrayLike, name: str) -> np.ndarray:
    try:
        array = np.array(values, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be an array of real numbers, got {values!r}") from err
    if array.ndim == 0 or array.size == 0:
        raise ValueError(f"{name} must be a non-empty array, got shape {array.shape}")
    if not np.all(np.isfinite(array)):
        bad = np.count_nonzero(~np.isfinite(array))
        raise ValueError(f"{name} must be finite, got {bad} non-finite entries")
    return array


def _check_bounds(C: float, c: float) -> tuple[float, float]:
    C, c = _real_scalar(C, "C"), _real_scalar(c, "c")
    if not 0.0 < c <= 1.0:
        raise ValueError(f"c must satisfy 0 < c <= 1 (else S_C,c is empty or unbounded below), got {c!r}")
    if C < 1.0:
        raise ValueError(f"C must satisfy C >= 1 (else S_C,c is empty), got {C!r}")
    return C, c


def validate_prior(prior: ArrayLike, shape: tuple[int, ...] | None = None) -> np.ndarray:
    """Check a prior π⁽⁰⁾ and return it as float64, renormalised if its sum drifted by ≤ ``PRIOR_SUM_TOL``.

    A sum within 4·n·ε of 1 (ε = float64 machine epsilon) is what normalising in floating point leaves
    behind; such a prior is returned unchanged, so this function is idempotent and :func:`project` uses
    exactly the π⁽⁰⁾ the caller holds (e.g. ``SearchSpace.prior``).

    Args:
        prior: strictly positive, finite weights summing to 1; any shape.
        shape: the required shape (that of the density), or None.

    Returns:
        A new float64 array of ``prior``'s shape.
    """
    pi0 = _finite_array(prior, "prior")
    if shape is not None and pi0.shape != shape:
        raise ValueError(f"prior must have the density's shape {shape}, got {pi0.shape}")
    if np.any(pi0 <= 0):
        raise ValueError(
            f"prior must be strictly positive (S_C,c(π0) forces f = 0 where π0 = 0), got min {pi0.min()!r}"
        )
    total = float(np.sum(pi0))
    if abs(total - 1.0) > PRIOR_SUM_TOL:
        raise ValueError(f"prior must sum to 1 (within {PRIOR_SUM_TOL}), got sum {total!r}")
    if abs(total - 1.0) > 4 * pi0.size * np.finfo(np.float64).eps:
        pi0 = pi0 / total
    return pi0


# -- softmax -------------------------------------------------------------------------------------------------
def softmax(scores: ArrayLike, beta: float) -> np.ndarray:
    """Softmax density π(λ) = exp(β·s_λ) / Σ_λ' exp(β·s_λ') over the grid (DP-HyPO Algorithm 3).

    The normaliser is a sum over grid points (counting measure), so the result is uniform over the grid, not
    over the prior; to weight by π⁽⁰⁾ add ``log(prior) / beta`` to the scores. Computed as
    ``exp(β·(s − max s))`` so huge scores cannot overflow.

    Args:
        scores: finite scores s, any shape (n grid points).
        beta: inverse temperature, finite and ≥ 0; ``beta = 0`` gives the uniform density 1/n.

    Returns:
        float64 probability vector of ``scores``' shape, summing to 1.
    """
    s = _finite_array(scores, "scores")
    beta = _real_scalar(beta, "beta")
    if beta < 0:
        raise ValueError(f"beta must be >= 0, got {beta!r}")
    if beta == 0.0:
        return np.full(s.shape, 1.0 / s.size)
    with np.errstate(over="ignore"):
        # An overflow to -inf here only means exp(...) = 0; the maximum entry stays exp(0) = 1.
        weights = np.exp(beta * (s - s.max()))
    return weights / weights.sum()


# -- projection ----------------------------------------------------------------------------------------------
Solver = Literal["exact", "bisection", "cvxpy"]


def project(
    density: ArrayLike, prior: ArrayLike, C: float, c: float, *, solver: Solver = "exact"
) -> np.ndarray:
    """Euclidean projection P(p) = argmin_{f ∈ S_{C,c}(π⁽⁰⁾)} ‖f − p‖₂ (DP-HyPO eq. 3.1, App. C.2, App. D).

    S_{C,c}(π⁽⁰⁾) = {f : c·π⁽⁰⁾ ≤ f ≤ C·π⁽⁰⁾, Σf = 1}. By the KKT conditions the solution is
    ``clip(p − τ, c·π0, C·π0)`` with the scalar τ for which it sums to 1; the map τ ↦ Σ clip(p − τ, ...) is
    continuous, non-increasing and piecewise linear with breakpoints p − C·π0 and p − c·π0.

    * ``"exact"`` (default): sort the 2n breakpoints, locate the segment holding τ with prefix sums, then
      solve for τ in closed form from that segment's free set. O(n log n), exact up to round-off.
    * ``"bisection"``: bisect on τ to float resolution. A cross-check.
    * ``"cvxpy"``: the QP solved by OSQP (polished; CLARABEL with tight tolerances as fallback) on the
      rescaled problem g = n·f, i.e. min ‖g − n·p‖² s.t. c·n·π0 ≤ g ≤ C·n·π0, Σg = n. This is the same
      Euclidean problem (objective times n²) but with O(1) entries, so absolute solver tolerances are not
      large relative errors when f ≈ 1/n. Needs ``pip install dphypo[cvx]``.

    The density is shifted by its (upper) median first (P(p + a·1) = P(p) because Σf is fixed), which keeps
    ``p − τ`` well-scaled for inputs with a large common offset. Every solver's output then has float drift
    removed: it is clipped to the bounds and the residual 1 − Σf (a few ulps for the numpy solvers) is spread
    over the entries without crossing a bound and with a small *relative* change of each (see
    ``_remove_drift``).

    Args:
        density: any finite real vector p (it need not be a probability vector), any shape; its spread
            max − min must be ≤ ``MAX_SPREAD``.
        prior: π⁽⁰⁾, strictly positive, summing to 1, same shape (see :func:`validate_prior`).
        C: upper ratio bound, finite, ≥ 1.
        c: lower ratio bound, 0 < c ≤ 1.
        solver: ``"exact"``, ``"bisection"`` or ``"cvxpy"``.

    Returns:
        f, float64 of the density's shape, with ``c·π0 ≤ f ≤ C·π0`` elementwise and Σf = 1 within a few ulps.
        With C = c = 1 this is the (validated) prior itself.
    """
    p = _finite_array(density, "density")
    pi0 = validate_prior(prior, p.shape)
    C, c = _check_bounds(C, c)
    shape, p, pi0 = p.shape, p.ravel(), pi0.ravel()
    lo, hi = c * pi0, C * pi0
    if c == C:  # C = c = 1: S is the single point π0
        return pi0.reshape(shape).copy()
    centred = _centre(p)
    if solver == "exact":
        f = _project_exact(centred, lo, hi)
    elif solver == "bisection":
        f = _project_bisection(centred, lo, hi)
    elif solver == "cvxpy":
        f = _project_cvxpy(p, pi0, C, c)
    else:
        raise ValueError(f"solver must be 'exact', 'bisection' or 'cvxpy', got {solver!r}")
    return _remove_drift(f, lo, hi).reshape(shape)


def _centre(p: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        spread = float(p.max()) - float(p.min())
    if not spread <= MAX_SPREAD:
        raise ValueError(f"density's spread max - min must be <= {MAX_SPREAD:g}, got {spread!r}; rescale it")
    # The median sits among the coordinates most likely to end up free, so p − τ is small there and its
    # rounding error is small relative to f (shifting by the mid-range cost up to 10x in Σf on peaky inputs).
    return p - float(np.partition(p, p.size // 2)[p.size // 2])


def _clip_at(p: np.ndarray, tau: float, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return np.clip(p - tau, lo, hi)


def _tau_bracket(p: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[float, float]:
    # At the smallest breakpoint every coordinate sits at hi (sum C ≥ 1), at the largest at lo (sum c ≤ 1).
    return float(np.min(p - hi)), float(np.max(p - lo))


def _project_exact(p: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Sort-based exact projection for per-coordinate bounds lo ≤ hi; p is the centred density, shape (n,)."""
    n = p.size
    upper, lower = p - hi, p - lo  # coordinate i is at hi for τ ≤ upper_i and at lo for τ ≥ lower_i
    breaks = np.concatenate((upper, lower))
    order = np.argsort(breaks)  # ties need no order: they bound zero-length segments
    sorted_breaks = breaks[order]
    # Free coordinates on the open segment after breakpoint k: (#upper among the first k+1) − (#lower).
    n_free = 2 * np.cumsum(order[:-1] < n) - np.arange(1, 2 * n)
    mass = np.empty(2 * n)
    mass[0] = hi.sum()
    np.cumsum(n_free * np.diff(sorted_breaks), out=mass[1:])
    mass[1:] = mass[0] - mass[1:]
    j = int(np.searchsorted(-mass, -1.0, side="left"))  # first breakpoint where Σf ≤ 1
    if j == 0:  # Σhi ≤ 1, i.e. C = 1 (up to round-off): everything at hi
        f = _clip_at(p, float(sorted_breaks[0]), lo, hi)
    elif j == 2 * n:  # Σlo > 1 by round-off (c = 1): everything at lo
        f = _clip_at(p, float(sorted_breaks[-1]), lo, hi)
    else:
        f = _solve_in_segment(p, lo, hi, upper, lower, float(sorted_breaks[j - 1]), float(sorted_breaks[j]))
    if abs(1.0 - f.sum()) > _BRACKET_TOL:
        # Prefix-sum round-off picked the wrong segment (only conceivable with extreme inputs): bisect.
        f = _project_bisection(p, lo, hi)
    return f


def _solve_in_segment(
    p: np.ndarray, lo: np.ndarray, hi: np.ndarray, upper: np.ndarray, lower: np.ndarray, t0: float, t1: float
) -> np.ndarray:
    """clip(p − τ) with τ ∈ [t0, t1] solving Σ clip(p − τ) = 1, when no breakpoint is inside (t0, t1).

    On such a segment the coordinates split into fixed sets (at hi, at lo, free), so τ has a closed form.
    τ is written as m + τ_rel with m the mean of the free p's: then p − m and τ_rel are of the size of f,
    not of p, and f = (p − m) − τ_rel keeps its relative accuracy (τ itself could not be stored that well).
    """
    at_hi = upper >= t1
    at_lo = (lower <= t0) & ~at_hi
    free = ~(at_hi | at_lo)
    n_free = int(np.count_nonzero(free))
    if n_free == 0 or t0 == t1:
        return _clip_at(p, t0, lo, hi)
    m = float(np.sum(p, where=free)) / n_free
    shifted = p - m
    # Fresh (pairwise) sums rather than the prefix sums: this is where the accuracy of τ is decided.
    fixed = np.sum(hi, where=at_hi) + np.sum(lo, where=at_lo)
    tau_rel = (np.sum(shifted, where=free) + fixed - 1.0) / n_free
    tau_rel = min(max(tau_rel, t0 - m), t1 - m)
    return _clip_at(shifted, tau_rel, lo, hi)


def _project_bisection(p: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    tau = _bisect_decreasing(lambda t: _clip_at(p, t, lo, hi).sum(), _tau_bracket(p, lo, hi))
    return _clip_at(p, tau, lo, hi)


def _bisect_decreasing(mass: Callable[[float], float], bracket: tuple[float, float]) -> float:
    """Root of mass(t) = 1 for non-increasing ``mass`` with mass(a) ≥ 1 ≥ mass(b), to float resolution."""
    a, b = bracket
    for _ in range(_BISECTION_ITERS):
        mid = 0.5 * (a + b)
        if mid <= a or mid >= b:
            break
        if mass(mid) > 1.0:
            a = mid
        else:
            b = mid
    return 0.5 * (a + b)


def _remove_drift(f: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Clip f into [lo, hi], then spread the residual r = 1 − Σf over the entries with weights w.

    w_i = min(slack_i, f_i), where the slack is hi − f if mass must be added (r > 0) and f − lo if it must
    be removed. Entry i moves by r·w_i / max(Σw, |r|): never across its bound (|move| ≤ slack) and by at
    most |r| / Σw of its own value, so tiny entries keep their relative accuracy — what the ratio bounds
    f/π0 care about. For the numpy solvers r is a few ulps, so the KKT form clip(p − τ) survives up to
    round-off; if Σw < |r| (C or c equal to 1 up to round-off) a residual of that size remains.
    """
    f = np.clip(f, lo, hi)
    residual = 1.0 - f.sum()
    if residual != 0.0:
        weights = np.minimum(hi - f if residual > 0 else f - lo, f)
        total = weights.sum()
        if total > 0:
            f = np.clip(f + residual * (weights / max(total, abs(residual))), lo, hi)
    return f


# -- cvxpy reference solvers ---------------------------------------------------------------------------------
def _import_cvxpy() -> Any:
    try:
        import cvxpy
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError(
            "solver='cvxpy' needs the optional dependency cvxpy: pip install 'dphypo[cvx]'"
        ) from err
    return cvxpy


def _osqp_polish() -> dict[str, bool]:
    # OSQP 1.x renamed the setting "polish" to "polishing" (the old name still works but warns).
    try:
        major = int(importlib.metadata.version("osqp").split(".")[0])
    except (importlib.metadata.PackageNotFoundError, ValueError):
        major = 1
    return {"polishing": True} if major >= 1 else {"polish": True}


def _solve(problem: Any, cp: Any, *, quadratic: bool) -> None:
    """OSQP with polishing for QPs; tight-tolerance CLARABEL for cones (and as the QP fallback)."""
    if quadratic:
        try:
            problem.solve(solver=cp.OSQP, eps_abs=1e-12, eps_rel=1e-12, max_iter=200_000, **_osqp_polish())
            stats = problem.solver_stats.extra_stats
            polished = getattr(getattr(stats, "info", None), "status_polish", 1) == 1
            if problem.status == cp.OPTIMAL and polished:
                return
        except cp.error.SolverError:
            pass
    tol = {"tol_gap_abs": 1e-12, "tol_gap_rel": 1e-12, "tol_feas": 1e-12, "max_iter": 500}
    problem.solve(solver=cp.CLARABEL, **tol)
    if problem.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE):
        raise RuntimeError(f"cvxpy could not solve the projection: status {problem.status}")


def _project_cvxpy(p: np.ndarray, pi0: np.ndarray, C: float, c: float) -> np.ndarray:
    cp = _import_cvxpy()
    n = p.size
    g = cp.Variable(n)  # g = n·f keeps the entries O(1)
    constraints = [g >= c * n * pi0, g <= C * n * pi0, cp.sum(g) == n]
    problem = cp.Problem(cp.Minimize(cp.sum_squares(g - n * p)), constraints)
    _solve(problem, cp, quadratic=True)
    return np.asarray(g.value, dtype=np.float64) / n


# -- KL-penalised projection (App. C.1) ----------------------------------------------------------------------
def project_kl_penalised(
    density: ArrayLike,
    prior: ArrayLike,
    C: float,
    c: float,
    nu: float,
    *,
    solver: Literal["bisection", "cvxpy"] = "bisection",
) -> np.ndarray:
    """argmin_{f ∈ S_{C,c}(π⁽⁰⁾)} ‖f − π‖₂² + ν·KL(π ‖ f), KL(π ‖ f) = Σ π log(π / f) (DP-HyPO eq. C.1).

    ν = 0 is the Euclidean projection; ν → ∞ tends to the moment (M-)projection min KL(π ‖ f). The problem is
    strictly convex and separable apart from Σf = 1: for a multiplier λ each coordinate minimises
    (f − π_i)² − ν·π_i·log f + λ·f over [c·π0_i, C·π0_i], whose unconstrained minimiser is the positive root
    u_i(λ) of 2f² + (λ − 2π_i)·f − ν·π_i = 0, so f_i = clip(u_i(λ)). Σ_i f_i(λ) is non-increasing in λ.

    * ``"bisection"`` (default, numpy only): bisect on λ to float resolution.
    * ``"cvxpy"``: the exponential-cone problem with CLARABEL on the rescaled variable g = n·f, a reference
      for small grids: it matched the bisection to 3e-8 (relative) at n = 320 but only to 1e-4 at n = 2500,
      where CLARABEL reports "inaccurate" (measured with cvxpy 1.9 / CLARABEL; the bisection's KKT residual
      is at round-off level there).

    Args:
        density: π, a probability vector (non-negative, summing to 1 within ``PRIOR_SUM_TOL``, renormalised);
            KL(π ‖ f) needs it. Zero entries contribute nothing to the KL term.
        prior: π⁽⁰⁾ as in :func:`project`.
        C: upper ratio bound, ≥ 1.
        c: lower ratio bound, 0 < c ≤ 1.
        nu: penalty weight ν, finite, ≥ 0.
        solver: ``"bisection"`` or ``"cvxpy"``.

    Returns:
        f of π's shape in S_{C,c}(π⁽⁰⁾) (bounds exact, Σf = 1 within a few ulps).
    """
    pi = _finite_array(density, "density")
    if np.any(pi < 0):
        raise ValueError(f"density must be a probability vector (non-negative), got min {pi.min()!r}")
    total = float(pi.sum())
    if abs(total - 1.0) > PRIOR_SUM_TOL:
        raise ValueError(f"density must sum to 1 (within {PRIOR_SUM_TOL}) for the KL term, got sum {total!r}")
    pi0 = validate_prior(prior, pi.shape)
    C, c = _check_bounds(C, c)
    nu = _real_scalar(nu, "nu")
    if nu < 0:
        raise ValueError(f"nu must be >= 0, got {nu!r}")
    shape, pi, pi0 = pi.shape, (pi / total).ravel(), pi0.ravel()
    lo, hi = c * pi0, C * pi0
    if c == C:
        return pi0.reshape(shape).copy()
    if solver == "bisection":
        # λ below every 2(π−hi) + νπ/hi puts all coordinates at hi; above every 2(π−lo) + νπ/lo at lo.
        bracket = float(np.min(2 * (pi - hi) + nu * pi / hi)), float(np.max(2 * (pi - lo) + nu * pi / lo))
        lam = _bisect_decreasing(lambda t: np.clip(_kl_root(pi, nu, t), lo, hi).sum(), bracket)
        f = np.clip(_kl_root(pi, nu, lam), lo, hi)
    elif solver == "cvxpy":
        f = _project_kl_cvxpy(pi, pi0, C, c, nu)
    else:
        raise ValueError(f"solver must be 'bisection' or 'cvxpy', got {solver!r}")
    return _remove_drift(f, lo, hi).reshape(shape)


def _kl_root(pi: np.ndarray, nu: float, lam: float) -> np.ndarray:
    """Positive root of 2f² − b·f − ν·π = 0 with b = 2π − λ, in a cancellation-free form, shape (n,)."""
    b = 2.0 * pi - lam
    disc = np.sqrt(b * b + 8.0 * nu * pi)
    with np.errstate(divide="ignore", invalid="ignore"):
        # For b < 0 use root = 2νπ / (disc − b); disc − b > 0 there, and ν·π = 0 gives the root 0.
        small = np.where(disc - b > 0, 2.0 * nu * pi / (disc - b), 0.0)
    return np.where(b >= 0, (b + disc) / 4.0, small)


def _project_kl_cvxpy(pi: np.ndarray, pi0: np.ndarray, C: float, c: float, nu: float) -> np.ndarray:
    cp = _import_cvxpy()
    n = pi.size
    g = cp.Variable(n)  # f = g / n; the objective below is n² times (C.1), with O(1) entries throughout
    # Σ kl_div(nπ, g) = n·Σ [π log(π/f) − π + f] = n·KL(π ‖ f), as Σπ = Σf = 1.
    objective = cp.sum_squares(g - n * pi) + nu * n * cp.sum(cp.kl_div(n * pi, g))
    constraints = [g >= c * n * pi0, g <= C * n * pi0, cp.sum(g) == n]
    problem = cp.Problem(cp.Minimize(objective), constraints)
    _solve(problem, cp, quadratic=False)
    return np.asarray(g.value, dtype=np.float64) / n


# -- membership ----------------------------------------------------------------------------------------------
def in_bounded_set(f: ArrayLike, prior: ArrayLike, C: float, c: float, atol: float = 1e-12) -> bool:
    """Whether f ∈ S_{C,c}(π⁽⁰⁾): c·π0 − atol ≤ f ≤ C·π0 + atol elementwise and |Σf − 1| ≤ atol.

    Args:
        f: candidate density, same shape as ``prior``.
        prior: π⁽⁰⁾ (validated as in :func:`project`).
        C: upper ratio bound, ≥ 1.
        c: lower ratio bound, 0 < c ≤ 1.
        atol: absolute tolerance, ≥ 0.

    Returns:
        True if f is finite, has the prior's shape and lies in the set up to ``atol``.
    """
    pi0 = validate_prior(prior)
    C, c = _check_bounds(C, c)
    atol = _real_scalar(atol, "atol")
    if atol < 0:
        raise ValueError(f"atol must be >= 0, got {atol!r}")
    arr = np.asarray(f, dtype=np.float64)
    if arr.shape != pi0.shape or not np.all(np.isfinite(arr)):
        return False
    within = np.all(arr >= c * pi0 - atol) and np.all(arr <= C * pi0 + atol)
    return bool(within and abs(float(arr.sum()) - 1.0) <= atol)

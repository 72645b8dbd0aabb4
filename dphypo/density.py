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

__all__ = [
    "draw",
    "in_bounded_set",
    "lower_bound_for_top_mass",
    "project",
    "softmax",
    "top_mass_density",
    "validate_prior",
]

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
        scores: finite scores s, shape ``(..., n)``: leading dimensions are a batch, each ``(n,)`` row one
            density over the n grid points.
        beta: inverse temperature, finite and ≥ 0; ``beta = 0`` gives the uniform density 1/n.

    Returns:
        float64 probability vectors of ``scores``' shape, each row summing to 1.
    """
    s = _finite_array(scores, "scores")
    beta = _real_scalar(beta, "beta")
    if beta < 0:
        raise ValueError(f"beta must be >= 0, got {beta!r}")
    if beta == 0.0:
        return np.full(s.shape, 1.0 / s.shape[-1])
    with np.errstate(over="ignore"):
        # An overflow to -inf here only means exp(...) = 0; the maximum entry stays exp(0) = 1.
        weights = np.exp(beta * (s - s.max(axis=-1, keepdims=True)))
    return weights / weights.sum(axis=-1, keepdims=True)


# -- projection ----------------------------------------------------------------------------------------------
Solver = Literal["exact", "bisection", "cvxpy"]


def _batch_shape(p: np.ndarray, pi0: np.ndarray) -> tuple[int, ...] | None:
    """Leading (batch) dimensions of ``p`` whose trailing dimensions are the prior's shape, else None."""
    if p.ndim < pi0.ndim or p.shape[p.ndim - pi0.ndim :] != pi0.shape:
        return None
    return p.shape[: p.ndim - pi0.ndim]


def project(
    density: ArrayLike, prior: ArrayLike, C: float, c: float, *, solver: Solver = "exact"
) -> np.ndarray:
    """Euclidean projection P(p) = argmin_{f ∈ S_{C,c}(π⁽⁰⁾)} ‖f − p‖₂ (DP-HyPO eq. 3.1, App. C.2, App. D).

    S_{C,c}(π⁽⁰⁾) = {f : c·π⁽⁰⁾ ≤ f ≤ C·π⁽⁰⁾, Σf = 1}. By the KKT conditions the solution is
    ``clip(p − τ, c·π0, C·π0)`` with the scalar τ for which it sums to 1; the map τ ↦ Σ clip(p − τ, ...) is
    continuous, non-increasing and piecewise linear with breakpoints p − C·π0 and p − c·π0.

    Batch-native: ``density`` has shape ``batch + prior.shape`` and every density of the batch is projected
    on its own (a single density is the batch of one; one code path for both).

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
        density: finite real densities p (they need not be probability vectors), shape ``(..., *prior.shape)``;
            each one's spread max − min must be ≤ ``MAX_SPREAD``.
        prior: π⁽⁰⁾, strictly positive, summing to 1 (see :func:`validate_prior`), any shape (e.g. ``(n,)``).
        C: upper ratio bound, finite, ≥ 1.
        c: lower ratio bound, 0 < c ≤ 1.
        solver: ``"exact"``, ``"bisection"`` or ``"cvxpy"``.

    Returns:
        f, float64 of the density's shape, with ``c·π0 ≤ f ≤ C·π0`` elementwise and Σf = 1 within a few ulps
        for every density of the batch. With C = c = 1 this is the (validated) prior itself.
    """
    p = _finite_array(density, "density")
    pi0 = validate_prior(prior)
    if _batch_shape(p, pi0) is None:
        raise ValueError(f"density must have shape (..., *prior.shape) = (..., *{pi0.shape}), got {p.shape}")
    C, c = _check_bounds(C, c)
    if solver not in ("exact", "bisection", "cvxpy"):
        raise ValueError(f"solver must be 'exact', 'bisection' or 'cvxpy', got {solver!r}")
    shape, pi0 = p.shape, pi0.ravel()
    p = p.reshape(-1, pi0.size)
    lo, hi = c * pi0, C * pi0
    if c == C:  # C = c = 1: S is the single point π0
        return np.broadcast_to(pi0, p.shape).reshape(shape).copy()
    centred = _centre(p)
    if solver == "exact":
        f = _project_exact(centred, lo, hi)
    elif solver == "bisection":
        f = np.array([_project_bisection(row, lo, hi) for row in centred])
    else:
        f = np.array([_project_cvxpy(row, pi0, C, c) for row in p])
    return _remove_drift(f, lo, hi).reshape(shape)


def _centre(p: np.ndarray) -> np.ndarray:
    """Shift every row of ``p`` (shape ``(B, n)``) by its upper median."""
    with np.errstate(over="ignore"):
        spread = p.max(axis=-1) - p.min(axis=-1)
    if not np.all(spread <= MAX_SPREAD):
        worst = float(np.max(np.where(np.isnan(spread), np.inf, spread)))
        raise ValueError(f"density's spread max - min must be <= {MAX_SPREAD:g}, got {worst!r}; rescale it")
    # The median sits among the coordinates most likely to end up free, so p − τ is small there and its
    # rounding error is small relative to f (shifting by the mid-range cost up to 10x in Σf on peaky inputs).
    half = p.shape[-1] // 2
    return p - np.partition(p, half, axis=-1)[:, half : half + 1]


def _clip_at(p: np.ndarray, tau: float, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return np.clip(p - tau, lo, hi)


def _tau_bracket(p: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[float, float]:
    # At the smallest breakpoint every coordinate sits at hi (sum C ≥ 1), at the largest at lo (sum c ≤ 1).
    return float(np.min(p - hi)), float(np.max(p - lo))


def _project_exact(p: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Sort-based exact projection of every row of the centred densities ``p``, shape ``(B, n)``.

    Per row: sort the breakpoints, find with prefix sums the segment [t0, t1] where Σ clip(p − τ) crosses 1,
    then solve τ in closed form from that segment's free set (coordinates neither at lo nor at hi). τ is
    written as m + τ_rel with m the mean of the free p's: then p − m and τ_rel are of the size of f, not of p,
    and f = (p − m) − τ_rel keeps its relative accuracy. Rows whose result misses Σf = 1 by more than
    ``_BRACKET_TOL`` (prefix-sum round-off picked the wrong segment; extreme inputs only) are bisected.
    """
    rows, n = p.shape
    upper, lower = p - hi, p - lo  # coordinate i is at hi for τ ≤ upper_i and at lo for τ ≥ lower_i
    breaks = np.concatenate((upper, lower), axis=1)
    order = np.argsort(breaks, axis=1)  # ties need no order: they bound zero-length segments
    sorted_breaks = np.take_along_axis(breaks, order, axis=1)
    # Free coordinates on the open segment after breakpoint k: (#upper among the first k+1) − (#lower).
    n_free = 2 * np.cumsum(order[:, :-1] < n, axis=1) - np.arange(1, 2 * n)
    mass = np.empty((rows, 2 * n))
    mass[:, 0] = hi.sum()
    np.cumsum(n_free * np.diff(sorted_breaks, axis=1), axis=1, out=mass[:, 1:])
    mass[:, 1:] = mass[:, :1] - mass[:, 1:]
    # mass is non-increasing (a running sum of non-negative terms): j is the first breakpoint with Σf ≤ 1.
    j = np.count_nonzero(mass > 1.0, axis=1)
    everyone = np.arange(rows)
    t0 = sorted_breaks[everyone, np.maximum(j - 1, 0)]
    t1 = sorted_breaks[everyone, np.minimum(j, 2 * n - 1)]
    edge = (j == 0) | (j == 2 * n)  # everything at hi (C = 1) or at lo (c = 1), up to round-off
    t_edge = np.where(j == 0, sorted_breaks[:, 0], sorted_breaks[:, -1])
    at_hi = upper >= t1[:, None]
    at_lo = (lower <= t0[:, None]) & ~at_hi
    free = ~(at_hi | at_lo)
    count = np.count_nonzero(free, axis=1)
    degenerate = edge | (count == 0) | (t0 == t1)
    safe = np.maximum(count, 1)
    m = np.sum(p, axis=1, where=free) / safe
    shifted = p - m[:, None]
    # Fresh (pairwise) sums rather than the prefix sums: this is where the accuracy of τ is decided.
    fixed = np.sum(np.broadcast_to(hi, p.shape), axis=1, where=at_hi)
    fixed += np.sum(np.broadcast_to(lo, p.shape), axis=1, where=at_lo)
    tau_rel = (np.sum(shifted, axis=1, where=free) + fixed - 1.0) / safe
    tau_rel = np.minimum(np.maximum(tau_rel, t0 - m), t1 - m)
    f = np.clip(shifted - tau_rel[:, None], lo, hi)
    t_clip = np.where(edge, t_edge, t0)
    f[degenerate] = np.clip(p[degenerate] - t_clip[degenerate, None], lo, hi)
    for row in np.flatnonzero(np.abs(1.0 - f.sum(axis=1)) > _BRACKET_TOL):
        f[row] = _project_bisection(p[row], lo, hi)
    return f


def _project_bisection(p: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Projection of one centred density ``p`` (shape ``(n,)``) by bisection on τ."""
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
    """Clip every row of f (shape ``(B, n)``) into [lo, hi], then spread its residual r = 1 − Σf with weights w.

    w_i = min(slack_i, f_i), where the slack is hi − f if mass must be added (r > 0) and f − lo if it must
    be removed. Entry i moves by r·w_i / max(Σw, |r|): never across its bound (|move| ≤ slack) and by at
    most |r| / Σw of its own value, so tiny entries keep their relative accuracy — what the ratio bounds
    f/π0 care about. For the numpy solvers r is a few ulps, so the KKT form clip(p − τ) survives up to
    round-off; if Σw < |r| (C or c equal to 1 up to round-off) a residual of that size remains.
    """
    f = np.clip(f, lo, hi)
    residual = 1.0 - f.sum(axis=1)
    weights = np.minimum(np.where(residual[:, None] > 0, hi - f, f - lo), f)
    total = weights.sum(axis=1)
    move = (residual != 0.0) & (total > 0)
    if np.any(move):
        step = residual[move, None] * (weights[move] / np.maximum(total[move], np.abs(residual[move]))[:, None])
        f[move] = np.clip(f[move] + step, lo, hi)
    return f


# -- sampling ------------------------------------------------------------------------------------------------
def draw(density: ArrayLike, uniforms: ArrayLike) -> np.ndarray:
    """Grid indices drawn by inverse CDF: the first i with u·Σf < F_i = f_0 + … + f_i (one uniform per draw).

    Args:
        density: non-negative weights, shape ``(..., n)`` (a batch of densities), or ``(n,)``.
        uniforms: u ∈ [0, 1), shape ``density.shape[:-1]`` (one per density of the batch); for a single
            ``(n,)`` density any shape (one draw per uniform).

    Returns:
        int64 indices in ``[0, n)``, of the uniforms' shape.
    """
    cdf = np.cumsum(np.asarray(density, dtype=np.float64), axis=-1)
    x = np.asarray(uniforms, dtype=np.float64) * cdf[..., -1]
    last = cdf.shape[-1] - 1
    if cdf.ndim > 1:  # cdf is non-decreasing: counting entries ≤ x is searchsorted(side="right") row by row
        return np.minimum(np.count_nonzero(cdf <= x[..., None], axis=-1), last).astype(np.int64)
    return np.minimum(np.searchsorted(cdf, x, side="right"), last).astype(np.int64)


# -- the density inside S_{C,c} that maximises a linear objective ------------------------------------------
def top_mass_density(
    priority: ArrayLike, prior: ArrayLike, C: float, c: float, *, tiebreak: ArrayLike | None = None
) -> np.ndarray:
    """The density in S_{C,c}(π⁰) that maximises Σ_i w_i f_i: C·π⁰ on the highest-priority points, c·π⁰ elsewhere.

    Every f ∈ S_{C,c} is c·π⁰ plus an extra mass 1 − c spread with at most (C − c)·π⁰_i on point i, so maximising
    the linear objective Σ w_i f_i (e.g. the probability that the drawn point is within a tolerance of the best,
    with w_i that probability) is a fractional knapsack: fill points in decreasing order of w_i up to C·π⁰_i until
    the extra mass is used; the last point filled may end between c·π⁰_i and C·π⁰_i (Dantzig 1957). Ties are
    broken by ``tiebreak`` (higher first), then by grid index (lowest first). The top set therefore has prior
    mass (1 − c)/(C − c), which is how :func:`lower_bound_for_top_mass` chooses c. The result lies in S_{C,c}
    by construction; the tuner still projects (and verifies) it like any density (privacy rule 3).

    Args:
        priority: Weights w, shape ``(..., n)``, finite.
        prior: π⁰, shape ``(n,)``.
        C: Upper ratio bound ≥ 1.
        c: Lower ratio bound in (0, 1], c ≤ C.
        tiebreak: Secondary key among equal priorities, shape ``(..., n)`` (e.g. the posterior mean).

    Returns:
        Densities, shape ``(..., n)``, each summing to 1.
    """
    C, c = _check_bounds(C, c)
    pi0 = validate_prior(prior)
    w = np.asarray(priority, dtype=np.float64)
    if w.shape[-1:] != pi0.shape:
        raise ValueError(f"priority must have shape (..., {pi0.size}), got {w.shape}")
    if not np.all(np.isfinite(w)):
        raise ValueError(f"priority must be finite, got {np.count_nonzero(~np.isfinite(w))} non-finite entries")
    second = np.zeros_like(w) if tiebreak is None else np.broadcast_to(np.asarray(tiebreak, dtype=np.float64), w.shape)
    order = np.lexsort((-second, -w), axis=-1)  # highest priority first, then highest tiebreak, then lowest index
    room = (C - c) * pi0[order]  # extra mass each point can take, in that order
    used_before = np.cumsum(room, axis=-1) - room
    extra = np.clip((1.0 - c) - used_before, 0.0, room)
    f = np.empty_like(w)
    np.put_along_axis(f, order, c * pi0[order] + extra, axis=-1)
    return f / f.sum(axis=-1, keepdims=True)  # exact up to round-off: Σ c·π⁰ + (1 − c) = 1


def lower_bound_for_top_mass(C: float, top_mass: float) -> float:
    """The largest c (cheapest log(C/c)) that still lets a density put C·π⁰ on a set of prior mass ``top_mass``.

    A density that is C·π⁰ on a set of prior mass p must put 1 − C·p on the rest (mass 1 − p), a ratio of
    (1 − C·p)/(1 − p) there; S_{C,c} allows it iff c ≤ that ratio. So c = (1 − C·p)/(1 − p) is the bound a
    top-set density with target mass p needs, and any smaller c pays a larger log(C/c) in the accountant for
    nothing. It is a function of (C, p) only: fixed with the rest of the configuration before any data.

    Args:
        C: Upper ratio bound > 1.
        top_mass: Prior mass p of the favoured set, in (0, 1/C).

    Returns:
        c ∈ (0, 1).
    """
    C = _real_scalar(C, "C")
    p = _real_scalar(top_mass, "top_mass")
    if not C > 1.0:
        raise ValueError(f"C must be > 1, got {C!r}")
    if not 0.0 < p < 1.0 / C:
        raise ValueError(f"top_mass must be in (0, 1/C) = (0, {1.0 / C:.6g}), got {top_mass!r}")
    return (1.0 - C * p) / (1.0 - p)


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


def in_bounded_set(
    f: ArrayLike, prior: ArrayLike, C: float, c: float, atol: float = 1e-12
) -> bool | np.ndarray:
    """Whether f ∈ S_{C,c}(π⁽⁰⁾): c·π0 − atol ≤ f ≤ C·π0 + atol elementwise and |Σf − 1| ≤ atol.

    Args:
        f: candidate densities, shape ``(..., *prior.shape)``.
        prior: π⁽⁰⁾ (validated as in :func:`project`).
        C: upper ratio bound, ≥ 1.
        c: lower ratio bound, 0 < c ≤ 1.
        atol: absolute tolerance, ≥ 0.

    Returns:
        For a single density (f of the prior's shape) a bool; for a batch a bool array of the batch shape.
        False where f is not finite, and everywhere if f's trailing dimensions are not the prior's shape.
    """
    pi0 = validate_prior(prior)
    C, c = _check_bounds(C, c)
    atol = _real_scalar(atol, "atol")
    if atol < 0:
        raise ValueError(f"atol must be >= 0, got {atol!r}")
    arr = np.asarray(f, dtype=np.float64)
    batch = _batch_shape(arr, pi0)
    if batch is None:
        return False if arr.ndim <= pi0.ndim else np.zeros(arr.shape[: arr.ndim - pi0.ndim], dtype=bool)
    rows, pi0 = arr.reshape(-1, pi0.size), pi0.ravel()
    inside = (
        np.all(np.isfinite(rows), axis=1)
        & np.all(rows >= c * pi0 - atol, axis=1)
        & np.all(rows <= C * pi0 + atol, axis=1)
        & (np.abs(rows.sum(axis=1) - 1.0) <= atol)
    )
    return bool(inside[0]) if batch == () else inside.reshape(batch)

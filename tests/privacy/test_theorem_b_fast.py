"""Theorem B's screened evaluation (issue #30.6) against the full evaluation it replaces, bit for bit.

``_PartnerConstraints.violated``, ``certified`` and ``narrowed`` evaluate only the constraints that a cheap bound
leaves undecided; their ``*_reference`` twins evaluate every constraint with ``_log_moment`` (the code before the
change). Every decision, and so every bracket and every certified supremum, must be the same floating-point
number: the oracle below is the previous ``_theorem_b_log_sup`` loop run on the reference methods. ``adaptive_rdp``
skips Theorem B at C = c = 1 when the printed uniform curve cannot bind as a floor: checked against computing it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dphypo.privacy import adaptive as ad
from dphypo.privacy import dpsgd_rdp, gaussian_rdp, geometric, pure_dp_rdp
from dphypo.privacy.rdp import RdpCurve
from dphypo.privacy.run_counts import TruncatedNegativeBinomial
from dphypo.privacy.tuning import dphypo_theorem1

P = ad._PartnerConstraints
MNIST = dpsgd_rdp(0.71, 256 / 60000, 2344)
DIGITS = dpsgd_rdp(1.7673, 1 / 17, 170)
SMALL_SIGMA = dpsgd_rdp(0.6, 64 / 1500, 250)


def _with_infinite_tail(base: RdpCurve) -> RdpCurve:
    """The curve with no bound (inf) at its 20 largest orders (those constraints are left out)."""
    eps = base.epsilons.copy()
    eps[-20:] = np.inf
    return RdpCurve(base.orders, eps, None, base.label + " (inf tail)")


CURVES = [MNIST, DIGITS, SMALL_SIGMA, gaussian_rdp(3.0), pure_dp_rdp(1.5), _with_infinite_tail(DIGITS)]


def _points(rng: np.random.Generator) -> np.ndarray:
    """G in (0, 1): the extremes (1e-15, 1 − 1e-12), a geometric sweep and random points."""
    return np.sort(np.concatenate([[1e-15, 1e-9, 0.5, 1.0 - 1e-12], np.geomspace(1e-13, 0.9, 40),
                                   rng.uniform(0.0, 1.0, 40)]))


def _partners(g: np.ndarray, rng: np.random.Generator) -> list[np.ndarray]:
    """Partners x in [g, 1]: G itself, 1, and points near and far from the diagonal (log-uniform in [G, 1])."""
    out = [g.copy(), np.ones_like(g), np.minimum(g * (1.0 + 1e-9), 1.0)]
    for _ in range(6):
        out.append(np.exp(np.log(g) * rng.uniform(0.0, 1.0, g.size)))
    return out


@pytest.mark.parametrize("base", CURVES, ids=lambda b: b.label[:40])
def test_screened_methods_equal_the_full_evaluation(base: RdpCurve) -> None:
    rng = np.random.default_rng(7)
    g = _points(rng)
    c = P.build(g, base.orders, base.epsilons, base.epsilons)
    assert c.screen  # ordinary curves are screened (else this test would compare the reference with itself)
    rows = np.arange(g.size)
    every = c.every
    for x in _partners(g, rng):
        assert np.array_equal(c.violated(x, *every), c.violated_reference(x, *every))
        for got, want in zip(c.certified(x, rows, *every), c.certified_reference(x, rows, *every), strict=True):
            assert np.array_equal(got, want)
        part = rows[::3]
        for got, want in zip(c.certified(x[part], part, *every), c.certified_reference(x[part], part, *every),
                             strict=True):
            assert np.array_equal(got, want)
    for lo, hi in ((g, np.ones_like(g)), (g, np.exp(0.5 * np.log(g))), (np.exp(0.7 * np.log(g)), np.exp(0.5 *
                                                                                                      np.log(g)))):
        window = c.narrowed(lo, hi)
        reference = c.narrowed_reference(lo, hi)
        assert len(window) == len(reference) == 4
        for got, want in zip(window, reference, strict=True):
            assert got.shape == want.shape and np.array_equal(got, want)
        for x in _partners(g, rng)[3:5]:  # a window of constraints per point, as the narrow bisection uses it
            assert np.array_equal(c.violated(x, *window), c.violated_reference(x, *window))
            for got, want in zip(c.certified(x, rows, *window), c.certified_reference(x, rows, *window),
                                 strict=True):
                assert np.array_equal(got, want)


@pytest.mark.parametrize("base", CURVES, ids=lambda b: b.label[:40])
def test_window_bisection_equals_the_bisection_over_the_window(base: RdpCurve) -> None:
    """``bisect_window`` (both directions as one unscreened array) against ``bisect`` on ``violated_reference``."""
    rng = np.random.default_rng(11)
    g = _points(rng)
    c = P.build(g, base.orders, base.epsilons, base.epsilons)
    lo, hi = c.bisect(g.copy(), np.ones_like(g), ad._FULL_STEPS, *c.every)
    saved = P.violated
    P.violated = P.violated_reference  # type: ignore[method-assign]
    try:
        for window in (c.narrowed(lo, hi), c.narrowed(g, np.ones_like(g))):
            want = c.bisect(lo, hi, ad._NARROW_STEPS, *window)
            got = c.bisect_window(lo, hi, ad._NARROW_STEPS, window)
            assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
        one_sided = tuple(np.zeros((g.size, 0)) if k >= 2 else w for k, w in enumerate(c.narrowed(lo, hi)))
        got = c.bisect_window(lo, hi, ad._NARROW_STEPS, one_sided)  # forward constraints only
        want = c.bisect(lo, hi, ad._NARROW_STEPS, *one_sided)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    finally:
        P.violated = saved  # type: ignore[method-assign]


def test_a_diverging_window_bisection_is_caught() -> None:
    """The comparison above can fail: the backward coefficients swapped (``o`` on log G) change the brackets."""
    base = SMALL_SIGMA
    g = _points(np.random.default_rng(11))
    c = P.build(g, base.orders, base.epsilons, base.epsilons)
    lo, hi = c.bisect(g.copy(), np.ones_like(g), ad._FULL_STEPS, *c.every)
    o_f, c_f, o_b, c_b = c.narrowed(lo, hi)
    want = c.bisect(lo, hi, ad._NARROW_STEPS, o_f, c_f, o_b, c_b)
    got = c.bisect_window(lo, hi, ad._NARROW_STEPS, (o_f, c_f, 1.0 - o_b, c_b))  # 1 − o_b where o_b belongs
    assert not (np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1]))


def test_the_screen_steps_aside_for_huge_caps_and_orders() -> None:
    orders = np.array([1.5, 2.0, 3.0e6])
    g = np.geomspace(1e-6, 0.9, 20)
    huge = P.build(g, orders, np.array([0.1, 0.2, 1.0]), np.array([0.1, 0.2, 1.0]))
    assert not huge.screen  # an order above 1e6: every constraint in full
    x = np.sqrt(g)
    assert np.array_equal(huge.violated(x, *huge.every), huge.violated_reference(x, *huge.every))
    capped = P.build(g, orders[:2], np.array([0.1, 2e11]), np.array([0.1, 2e11]))
    assert not capped.screen  # a cap above 1e11


def _oracle_log_sup(orders: np.ndarray, forward: np.ndarray, backward: np.ndarray, pure: float | None,
                    run_count: TruncatedNegativeBinomial, C: float, c: float, grid: int = ad.THEOREM_B_GRID
                    ) -> np.ndarray:
    """``_theorem_b_log_sup`` as before issue #30.6: the same loop, every constraint evaluated in full."""
    theta, gamma, mean = run_count.theta, run_count.gamma, run_count.mean
    saved = P.violated, P.certified, P.narrowed, P.bisect_window
    P.violated, P.certified, P.narrowed = (  # type: ignore[method-assign]
        P.violated_reference, P.certified_reference, P.narrowed_reference)
    P.bisect_window = lambda self, lo, hi, steps, window: P.bisect(  # type: ignore[method-assign]
        self, lo, hi, steps, *window)
    try:
        g = ad.theorem_b_grid(gamma, C, grid)
        up, low = ad._partner_bounds(g[1:-1], orders, forward, backward, pure)
        constrained = bool(np.any(np.isfinite(backward))) or pure is not None
        upper = np.concatenate([[0.0 if constrained else 1.0], up, [1.0]])
        lower = np.concatenate([[0.0], low, [1.0]])
        kappa = gamma / ((1.0 - gamma) * C)
        tolerance = ad._REFINE_TOLERANCE * (orders[:, None] - 1.0)
        for _ in range(ad._REFINE_ROUNDS):
            cells, floor = ad._cell_bounds(g, upper, lower, orders, theta, gamma, C, c)
            excess = np.max((cells - floor[:, None]) / tolerance, axis=0)
            loose = np.flatnonzero(excess > 1.0)
            if loose.size == 0:
                break
            loose = np.sort(loose[np.argsort(-excess[loose], kind="stable")[:ad._REFINE_CELLS]])
            left, right = np.log(g[loose] + kappa), np.log(g[loose + 1] + kappa)
            steps = np.arange(1, ad._REFINE_POINTS + 1) / (ad._REFINE_POINTS + 1.0)
            new = np.exp(left[:, None] + (right - left)[:, None] * steps[None, :]) - kappa
            new = new[(new > g[loose][:, None]) & (new < g[loose + 1][:, None])]
            new = np.setdiff1d(new[(new > 0.0) & (new < 1.0)], g)
            if new.size == 0:
                break
            new_up, new_low = ad._partner_bounds(new, orders, forward, backward, pure)
            order = np.argsort(np.concatenate([g, new]), kind="stable")
            g = np.concatenate([g, new])[order]
            upper, lower = np.concatenate([upper, new_up])[order], np.concatenate([lower, new_low])[order]
        cells, _ = ad._cell_bounds(g, upper, lower, orders, theta, gamma, C, c)
    finally:
        P.violated, P.certified, P.narrowed, P.bisect_window = saved  # type: ignore[method-assign]
    log_k = (1.0 + theta) * math.log(gamma) + math.log(mean)
    return log_k + ad.THEOREM_B_SLACK * (1.0 + abs(log_k)) + cells.max(axis=1)


SUPREMUM_CASES = [  # (curve, run count, C, c): adaptive and C = c = 1 (Papernot-Steinke's setting), pure and inf
    (SMALL_SIGMA, geometric(1 / 20), 1.5, 1.0),
    (SMALL_SIGMA, geometric(1 / 20), 1.0, 1.0),
    (MNIST, geometric(0.01), 2.0, 0.75),
    (DIGITS, TruncatedNegativeBinomial(0.5, 0.1), 1.0, 1.0),
    (pure_dp_rdp(1.0), geometric(0.1), 2.0, 0.5),
    (_with_infinite_tail(DIGITS), geometric(0.05), 1.5, 1.0),
]


@pytest.mark.parametrize("base,run_count,C,c", SUPREMUM_CASES, ids=lambda v: getattr(v, "label", str(v))[:30])
def test_certified_supremum_equals_the_full_evaluation_bit_for_bit(
    base: RdpCurve, run_count: TruncatedNegativeBinomial, C: float, c: float
) -> None:
    args = (base.orders, base.epsilons, base.epsilons, base.pure_epsilon)
    fast = ad._theorem_b_log_sup(*args, run_count.theta, run_count.gamma, run_count.mean, C, c, ad.THEOREM_B_GRID)
    assert np.array_equal(fast, _oracle_log_sup(*args, run_count, C, c))


def test_a_diverging_screen_is_caught() -> None:
    """The comparison above can fail: a screen that drops the undecided constraints changes the supremum."""
    base, run_count = SMALL_SIGMA, geometric(1 / 20)
    args = (base.orders, base.epsilons, base.epsilons, base.pure_epsilon)
    saved = ad._SCREEN
    ad._SCREEN = -0.5  # "holds" already 0.5 above its cap: wrong
    try:
        broken = ad._theorem_b_log_sup(*args, run_count.theta, run_count.gamma, run_count.mean, 1.5, 1.0,
                                       ad.THEOREM_B_GRID)
    finally:
        ad._SCREEN = saved
    assert not np.array_equal(broken, _oracle_log_sup(*args, run_count, 1.5, 1.0))


@pytest.mark.parametrize("base", [SMALL_SIGMA, MNIST, DIGITS, pure_dp_rdp(1.0)], ids=lambda b: b.label[:30])
@pytest.mark.parametrize("C", [1.01, 1.5, 4.0])
def test_adaptive_rdp_equals_the_floor_computed_in_full(base: RdpCurve, C: float) -> None:
    """Skipping Theorem B at C = c = 1 where the printed curve cannot bind changes nothing (both branches occur)."""
    run_count = geometric(1 / 20)
    got = ad.adaptive_rdp(base, run_count, C, 1.0)
    tuned = ad.theorem_b(base, run_count, C, 1.0)
    sharp = ad.uniform_theorem_b(base, run_count)
    assert sharp is not None
    uniform = sharp.curve
    if np.any(uniform.epsilons > tuned.curve.epsilons):
        pure = tuned.curve.pure_epsilon
        if pure is not None and uniform.pure_epsilon is not None:
            pure = max(pure, uniform.pure_epsilon)
        want = RdpCurve(base.orders, np.maximum(tuned.curve.epsilons, uniform.epsilons), pure, tuned.curve.label)
    else:
        want = tuned.curve
    assert np.array_equal(got.curve.epsilons, want.epsilons) and got.curve.pure_epsilon == want.pure_epsilon
    assert got.theorem == tuned.theorem


def test_both_branches_of_the_floor_skip_occur() -> None:
    """The cases above include one where the printed uniform curve binds somewhere and one where it never does."""
    run_count = geometric(1 / 20)
    binds = []
    for base in (SMALL_SIGMA, pure_dp_rdp(1.0)):
        for C in (1.01, 4.0):
            printed = dphypo_theorem1(base, run_count, 1.0, 1.0).curve
            binds.append(bool(np.all(printed.epsilons <= ad.theorem_b(base, run_count, C, 1.0).curve.epsilons)))
    assert any(binds) and not all(binds)

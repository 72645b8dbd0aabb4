"""Theorem B (docs/proofs/adaptive.md §5b) checked a second time, independently of its implementation.

* the floating-point error bound of the Bernoulli moments against 50-digit arithmetic (point (d));
* the certified partner brackets against a 50-digit root finder, including orders up to 1024 and G = 1e-13;
* Lemma B1 (G′max non-decreasing and concave) on the computed brackets;
* the certified supremum against a separately written mpmath evaluator (a continuous search over G, with every
  point checked feasible at every order in 30-digit arithmetic): never below it, and close to it; a deliberately
  broken evaluator is caught;
* a closed form (ε = 0: F is the diagonal);
* Theorem B at C = c = 1 on exact uniform audit instances (random and randomized response);
* the per-run curve check (point (e)) and, in the README settings, dp_accounting's curve against an independent
  evaluation at every order;
* scope and composition: Theorem B is offered for uniform TNB searches, composes as the order-wise minimum, is
  absent for Poisson T and refused for adaptive Poisson T;
* the two-rule game of §8: the proof's steps 1–4 also cover it, so no proof built on them can charge less than its
  divergence at ε = 0, while the real search has divergence 0 there.
"""

from __future__ import annotations

import dataclasses
import math

import mpmath as mp
import numpy as np
import pytest
from scipy import integrate, optimize

from dphypo.privacy import (
    Poisson,
    RepeatAndSelect,
    TruncatedNegativeBinomial,
    account,
    compose,
    custom_rdp,
    dpsgd_rdp,
    epsilon_from_rdp,
    geometric,
    pure_dp_rdp,
    tuning_rdp,
    zero_rdp,
)
from dphypo.privacy.adaptive import (
    THEOREM_B_UNIFORM,
    _log_moment,
    _partner_bounds,
    check_theorem_b_curve,
    theorem_a,
    theorem_b,
    theorem_b_bound,
    theorem_b_grid,
    theorem_b_log_sup,
    uniform_theorem_b,
)
from dphypo.privacy.charged import account_charged
from dphypo.privacy.rdp import monotone_envelope
from dphypo.privacy.search_rdp import AdaptivePoissonError, rdp_bounds
from dphypo.privacy.tuning import dphypo_theorem1
from dphypo.testing.audit import AuditInstance, BaseMechanisms, audit_instance, random_instance, uniform_rule

MNIST = dpsgd_rdp(0.71, 256 / 60000, 2344)
DIGITS = dpsgd_rdp(1.7673, 1 / 17, 170)  # the DP-SGD part of the digits default run


# -- an independent evaluator, in mpmath ----------------------------------------------------------------------
def _mp_log_moment(p: mp.mpf, q: mp.mpf, a: mp.mpf) -> mp.mpf:
    """log(p^a q^(1−a) + (1−p)^a (1−q)^(1−a)) with the perspective conventions."""
    total = mp.mpf(0)
    for x, y in ((p, q), (1 - p, 1 - q)):
        if x > 0:
            if y == 0:
                return mp.inf
            total += x**a * y ** (1 - a)
    return mp.log(total)


def _float_roots(g: float, orders: np.ndarray, caps: np.ndarray, backward: bool) -> np.ndarray:
    """Largest feasible G′ ∈ [g, 1] of each single constraint (plain float bisection in G′, 200 steps)."""

    def logm(x: np.ndarray) -> np.ndarray:
        p, q = (x, np.full_like(x, g)) if backward else (np.full_like(x, g), x)
        with np.errstate(divide="ignore", invalid="ignore"):
            t1 = np.nan_to_num(orders * np.log(p) + (1 - orders) * np.log(q), nan=-np.inf)
            t2 = np.nan_to_num(orders * np.log1p(-p) + (1 - orders) * np.log1p(-q), nan=-np.inf)
        return np.logaddexp(t1, t2)

    lo, hi = np.full(orders.shape, g), np.ones(orders.shape)
    feasible_at_one = logm(hi) <= caps
    for _ in range(200):
        mid = (lo + hi) / 2
        ok = logm(mid) <= caps
        lo, hi = np.where(ok, mid, lo), np.where(ok, hi, mid)
    return np.where(feasible_at_one, 1.0, lo)


def _mp_partner(g: float, orders: np.ndarray, eps: np.ndarray, pure: float | None = None,
                pick: int = 3) -> tuple[mp.mpf, mp.mpf]:
    """An mp bracket [lo, hi] of G′max(g): lo feasible at every order (checked in mp), hi infeasible for one."""
    finite = np.isfinite(eps)
    orders, caps = orders[finite], (orders[finite] - 1) * eps[finite]
    gm = mp.mpf(g)
    brackets = []
    for backward in (False, True):
        roots = _float_roots(g, orders, caps, backward)
        for j in np.argsort(roots)[:pick]:
            a, cap = mp.mpf(float(orders[j])), mp.mpf(float(caps[j]))

            def ok(x: mp.mpf, a: mp.mpf = a, cap: mp.mpf = cap, backward: bool = backward) -> bool:
                return (_mp_log_moment(x, gm, a) if backward else _mp_log_moment(gm, x, a)) <= cap

            lo, hi = max(gm, mp.mpf(roots[j]) * (1 - mp.mpf(10) ** -9)), min(mp.mpf(1), mp.mpf(roots[j]) * 1.000000001)
            if not ok(lo):
                lo = gm
            if ok(hi):
                hi = mp.mpf(1)
                if ok(hi):
                    brackets.append((hi, hi))
                    continue
            for _ in range(2 * mp.mp.dps):
                mid = (lo + hi) / 2
                lo, hi = (mid, hi) if ok(mid) else (lo, mid)
            brackets.append((hi, lo))
    hi, lo = min(brackets)
    if pure is not None:
        limit = mp.e ** mp.mpf(pure) * gm
        hi, lo = min(hi, limit), min(lo, limit)
    for a, cap in zip(orders, caps, strict=True):  # lo is feasible for every constraint, exactly
        a, cap = mp.mpf(float(a)), mp.mpf(float(cap))
        assert _mp_log_moment(gm, lo, a) <= cap and _mp_log_moment(lo, gm, a) <= cap
    return lo, hi


def _reference_log_sup(alpha: float, base, run_count: TruncatedNegativeBinomial, C: float, c: float,
                       scan: int = 20, golden: int = 26) -> float:
    """A lower estimate of log sup_F φ_α: φ_α at certified-feasible points, maximised over log G (scan + golden)."""
    a, theta, gamma = mp.mpf(alpha), mp.mpf(run_count.theta), mp.mpf(run_count.gamma)
    log_k = (1 + theta) * mp.log(gamma) + mp.log(mp.mpf(run_count.mean))

    def value(log_g: float) -> mp.mpf:
        g = math.exp(log_g)
        lo, _ = _mp_partner(g, base.orders, base.epsilons, base.pure_epsilon)
        b = min(mp.mpf(1), gamma + (1 - gamma) * C * lo)
        return log_k - (1 + theta) * a * mp.log(gamma + (1 - gamma) * c * mp.mpf(g)) + (1 + theta) * (a - 1) * mp.log(b)

    xs = np.linspace(math.log(1e-6), math.log(0.999), scan)
    values = [value(x) for x in xs]
    i = int(np.argmax([float(v) for v in values]))
    lo_x, hi_x, best = xs[max(i - 1, 0)], xs[min(i + 1, scan - 1)], values[i]
    ratio = (math.sqrt(5) - 1) / 2
    x1, x2 = hi_x - ratio * (hi_x - lo_x), lo_x + ratio * (hi_x - lo_x)
    f1, f2 = value(x1), value(x2)
    for _ in range(golden):
        if f1 > f2:
            hi_x, x2, f2 = x2, x1, f1
            x1 = hi_x - ratio * (hi_x - lo_x)
            f1 = value(x1)
        else:
            lo_x, x1, f1 = x1, x2, f2
            x2 = lo_x + ratio * (hi_x - lo_x)
            f2 = value(x2)
        best = max(best, f1, f2)
    return float(best)


# -- point (d): floating point -----------------------------------------------------------------------------------
def test_the_slack_covers_the_floating_point_error_of_the_bernoulli_moments() -> None:
    """|computed − exact| ≤ the error bound of _log_moment, at random and extreme (G, G′, order), 50 digits."""
    mp.mp.dps = 50
    rng = np.random.default_rng(5)
    points = [(1e-13, 3e-13, 1024.0), (1e-13, 0.5, 1.001), (0.3, 0.30000001, 1.001), (0.999999, 1 - 1e-12, 640.0),
              (1e-300, 1e-290, 2.0), (0.2, 0.9, 1024.0)]
    points += [(float(10 ** rng.uniform(-14, 0) * 0.999), float(10 ** rng.uniform(-14, 0) * 0.999),
                float(1 + 10 ** rng.uniform(-3, 3))) for _ in range(300)]
    worst = 0.0
    for x, y, a in points:
        for p, q in ((x, y), (y, x)):
            value, error = _log_moment(np.log(p), np.log1p(-p), np.log(q), np.log1p(-q), np.float64(a),
                                       with_error=True)
            exact = _mp_log_moment(mp.mpf(p), mp.mpf(q), mp.mpf(a))
            assert error is not None
            assert abs(mp.mpf(float(value)) - exact) <= mp.mpf(float(error)), (p, q, a)
            worst = max(worst, float(abs(mp.mpf(float(value)) - exact) / mp.mpf(float(error))))
    # the slack is generous: the actual error is a tiny fraction of it (it would still hold at 1/20 of the slack)
    assert worst < 0.05
    mp.mp.dps = 15


def test_partner_brackets_contain_the_50_digit_partner() -> None:
    mp.mp.dps = 50
    for base in (MNIST, pure_dp_rdp(2.0), DIGITS):
        g = np.array([1e-13, 1e-9, 1e-5, 1e-3, 0.05, 0.3, 0.9])
        upper, lower = _partner_bounds(g, base.orders, base.epsilons, base.epsilons, base.pure_epsilon)
        for i, gi in enumerate(g):
            lo, hi = _mp_partner(float(gi), base.orders, base.epsilons, base.pure_epsilon)
            assert mp.mpf(float(lower[i])) <= lo and hi <= mp.mpf(float(upper[i])), (base.label, gi)
            assert upper[i] <= lower[i] * (1 + 1e-6) + 1e-300  # and the bracket is narrow
    mp.mp.dps = 15


def test_lemma_b1_the_partner_is_non_decreasing_and_concave_on_the_certified_brackets() -> None:
    for base, gamma, C in ((MNIST, 0.01, 2.0), (DIGITS, 0.05, 1.0), (pure_dp_rdp(1.0), 0.1, 2.0)):
        g = theorem_b_grid(gamma, C, 200)[1:-1]
        upper, lower = _partner_bounds(g, base.orders, base.epsilons, base.epsilons, base.pure_epsilon)
        assert np.all(g <= lower) and np.all(lower <= upper) and np.all(upper <= 1.0)
        # non-decreasing: G′max(G_j) ≥ G′max(G_i) for j > i, so U_j ≥ L_i
        assert np.all(upper[1:] >= np.maximum.accumulate(lower)[:-1])
        # concave: G′max(G_j) ≥ the chord through G_i, G_k (i < j < k), so U_j ≥ chord(L_i, L_k)
        i, j, k = np.arange(0, g.size - 2), np.arange(1, g.size - 1), np.arange(2, g.size)
        w = (g[k] - g[j]) / (g[k] - g[i])
        assert np.all(upper[j] >= w * lower[i] + (1 - w) * lower[k] - 1e-15)


# -- the supremum, evaluated twice -------------------------------------------------------------------------------
CASES = [  # (curve, run count, C, c, orders): the README's MNIST setting, adaptive and uniform, and a small-ε run
    (MNIST, geometric(0.01), 2.0, 0.75, (2.0, 6.0)),
    (MNIST, geometric(0.01), 1.0, 1.0, (4.0,)),
    (dpsgd_rdp(2.921875, 0.01, 200), TruncatedNegativeBinomial(0.0, 0.005859375), 1.0, 1.0, (64.0,)),
]


@pytest.mark.slow
@pytest.mark.parametrize(("base", "run_count", "C", "c", "alphas"), CASES)
def test_the_certified_supremum_is_never_below_an_independent_evaluation(base, run_count, C, c, alphas) -> None:
    mp.mp.dps = 30
    ours = theorem_b_log_sup(base, run_count, C, c)
    raw = theorem_b_bound(base.orders, base.epsilons, base.epsilons, run_count, C, c,
                          backward_pure=base.pure_epsilon)
    for alpha in alphas:
        k = int(np.searchsorted(base.orders, alpha))
        reference = _reference_log_sup(alpha, base, run_count, C, c)
        assert ours[k] >= reference  # every reference point lies in F, so the supremum is at least this
        assert (ours[k] - reference) / (alpha - 1) < 1e-3  # and the certified bound is tight (ε units)
        # the value the accountant uses at this order (before the minimum with Theorem A and the envelope)
        independent = base.epsilons[k] + (alpha * math.log(C) + (1 - alpha) * math.log(c) + reference) / (alpha - 1)
        assert raw[k] >= independent
    mp.mp.dps = 15


def test_a_broken_supremum_is_caught_by_the_reference() -> None:
    """Negative control: pretending the partner is G itself (the diagonal, ε = 0) falls below the reference."""
    mp.mp.dps = 30
    base, run_count, alpha = MNIST, geometric(0.01), 4.0
    theta, gamma = run_count.theta, run_count.gamma
    g = np.linspace(0, 1, 20001)
    broken = math.log(run_count.mean) + (1 + theta) * math.log(gamma) + float(np.max(
        -(1 + theta) * alpha * np.log(gamma + (1 - gamma) * 0.75 * g)
        + (1 + theta) * (alpha - 1) * np.log(np.minimum(1.0, gamma + (1 - gamma) * 2.0 * g))))
    assert broken < _reference_log_sup(alpha, base, run_count, 2.0, 0.75, scan=12, golden=12) - 1.0
    mp.mp.dps = 15


@pytest.mark.parametrize(("C", "c"), [(1.0, 1.0), (2.0, 0.75), (4.0, 0.25)])
def test_closed_form_with_data_independent_candidates(C: float, c: float) -> None:
    """ε = 0: F is the diagonal, sup φ_α is a one-dimensional maximum (exactly log E[T] at C = c = 1)."""
    run_count = geometric(0.05)
    theta, gamma = run_count.theta, run_count.gamma
    zero = zero_rdp()
    got = theorem_b_log_sup(zero, run_count, C, c)
    for alpha in (1.5, 2.0, 8.0, 64.0):
        k = int(np.searchsorted(zero.orders, alpha))

        def neg(x: float, alpha: float = alpha) -> float:
            return (1 + theta) * alpha * math.log(gamma + (1 - gamma) * c * x) - (1 + theta) * (alpha - 1) * math.log(
                min(1.0, gamma + (1 - gamma) * C * x))

        xs = np.linspace(0, 1, 4001)
        start = xs[int(np.argmin([neg(x) for x in xs]))]
        res = optimize.minimize_scalar(neg, bounds=(max(0.0, start - 3e-4), min(1.0, start + 3e-4)), method="bounded",
                                       options={"xatol": 1e-12})
        exact = math.log(run_count.mean) + (1 + theta) * math.log(gamma) - min(res.fun, neg(0.0), neg(1.0))
        assert got[k] >= exact - 1e-12
        assert got[k] - exact < 2e-4 * (alpha - 1)
        if C == c == 1.0:
            assert exact == pytest.approx(math.log(run_count.mean), abs=1e-12)


# -- Theorem B at C = c = 1 on exact instances ------------------------------------------------------------------
def test_theorem_b_at_c_equal_1_holds_on_exact_uniform_instances() -> None:
    rng = np.random.default_rng(7)
    worst = 0.0
    for _ in range(60):
        inst = random_instance(rng)
        inst = dataclasses.replace(inst, rule=uniform_rule(inst.prior, inst.base.probs.size), C=1.0, c=1.0)
        curve = theorem_b(inst.base.rdp_curve(inst.orders), inst.run_count, 1.0, 1.0, grid=100).curve.epsilons
        result = audit_instance(inst, rdp_bound=curve, pure_bound=1e9)
        assert result.rdp_verdict == "ok", inst.describe()
        worst = max(worst, result.ratio_lower)
    # randomized response, one candidate: the family closest to the uniform bounds (benchmarks/adaptive_bounds.py)
    for p, shift, gamma, rare_top in [(1e-4, 5.0, 0.05, True), (0.1, 2.0, 0.01, True), (1e-2, 10.0, 0.3, False),
                                      (0.3, 0.5, 0.05, False)]:
        pp = p * math.exp(-shift)
        rows = ([1 - p, p], [1 - pp, pp]) if rare_top else ([p, 1 - p], [pp, 1 - pp])
        base = BaseMechanisms(np.array([rows[0]]), np.array([rows[1]]), "rr")
        inst = AuditInstance(np.array([1.0]), base, uniform_rule(np.array([1.0]), 2), geometric(gamma), 1.0, 1.0)
        curve = theorem_b(inst.base.rdp_curve(inst.orders), inst.run_count, 1.0, 1.0, grid=100).curve.epsilons
        result = audit_instance(inst, rdp_bound=curve, pure_bound=1e9)
        assert result.rdp_verdict == "ok", inst.describe()
        worst = max(worst, result.ratio_lower)
    assert 0.5 < worst < 1.0


# -- point (e): the per-run curve ----------------------------------------------------------------------------------
def test_a_user_curve_that_decreases_is_refused_and_its_envelope_accepted() -> None:
    orders = np.array([2.0, 4.0, 8.0, 16.0])
    bad = custom_rdp(orders, [1.0, 0.5, 2.0, 3.0])
    with pytest.raises(ValueError, match=r"decreases from eps\(2\)=1 to eps\(4\)=0.5") as info:
        check_theorem_b_curve(bad)
    assert "\n" not in str(info.value)
    search = RepeatAndSelect(geometric(0.05), 2.0, 0.75)
    with pytest.raises(ValueError, match="Theorem B trusts the per-run curve"):
        account(bad, search, 1e-5)  # the default refuses it ...
    assert account(bad, search, 1e-5, adaptive_theorem="A").method == "rdp-theorem-a"  # ... Theorem A does not
    check_theorem_b_curve(bad.monotone())
    assert account(bad.monotone(), search, 1e-5).method == "rdp-theorem-b"
    # a uniform search then has Papernot-Steinke's bound only (Theorem B is skipped, not applied)
    assert set(account(bad, search.uniform(), 1e-5).methods) == {"rdp"}
    assert uniform_theorem_b(bad, geometric(0.05)) is None
    above_pure = custom_rdp(orders, [0.1, 0.2, 0.3, 0.4], pure_epsilon=0.25)
    with pytest.raises(ValueError, match="above its pure bound"):
        check_theorem_b_curve(above_pure)


def test_library_curves_are_accepted_even_where_dp_accounting_decreases() -> None:
    # dp_accounting is loose at fractional orders near 1 (src/rdp.py), so its raw curve may decrease there; dpsgd_rdp
    # returns its running minimum from the right (monotone_envelope), which Theorem B accepts as it accepts any
    # library curve.
    from dp_accounting import dp_event
    from dp_accounting.rdp import rdp_privacy_accountant

    curve = dpsgd_rdp(5.0, 1 / 17, 170)
    accountant = rdp_privacy_accountant.RdpAccountant(list(curve.orders))
    accountant.compose(dp_event.PoissonSampledDpEvent(1 / 17, dp_event.GaussianDpEvent(5.0)), 170)
    raw = np.array(accountant.rdp, dtype=np.float64)
    raw = np.where(np.isnan(raw), np.inf, np.maximum(raw, 0.0))  # as dpsgd_rdp reads it
    assert np.any(np.diff(raw) < 0)  # the library's own curve decreases somewhere
    np.testing.assert_allclose(curve.epsilons, monotone_envelope(raw), rtol=1e-12)
    assert np.all(curve.epsilons <= raw)  # the envelope never loosens a bound
    check_theorem_b_curve(curve)
    check_theorem_b_curve(curve + pure_dp_rdp(0.1).monotone())
    assert account(curve, RepeatAndSelect(geometric(0.05), 2.0, 0.75), 1e-5).method == "rdp-theorem-b"


def _sampled_gaussian_rdp(alpha: float, sigma: float, q: float) -> float:
    """Per-step RDP of the Poisson-subsampled Gaussian, both directions, by quadrature (Mironov et al. 2019, §3).

    D_α(μ‖μ₀) and D_α(μ₀‖μ) with μ₀ = N(0, σ²), μ = (1−q)N(0, σ²) + qN(1, σ²), integrated in log space around the
    peaks of the integrand; the larger of the two.
    """
    best = 0.0
    for power in (alpha, 1.0 - alpha):  # E_{μ₀}[(μ/μ₀)^power]: power α gives D(μ‖μ₀), 1 − α gives D(μ₀‖μ)

        def log_f(z: float, power: float = power) -> float:
            ratio = np.logaddexp(math.log1p(-q), math.log(q) + (2 * z - 1) / (2 * sigma**2)) if q < 1 else (
                (2 * z - 1) / (2 * sigma**2))
            return -(z**2) / (2 * sigma**2) - 0.5 * math.log(2 * math.pi * sigma**2) + power * ratio

        peak = optimize.minimize_scalar(lambda z: -log_f(z), bounds=(-50 * sigma, alpha + 50 * sigma),
                                        method="bounded").x
        centre = max(log_f(peak), log_f(0.0))
        lo, hi = min(-40 * sigma, peak - 40 * sigma), max(40 * sigma, peak + 40 * sigma)
        points = sorted({0.0, float(peak), 0.5})
        value, _ = integrate.quad(lambda z, centre=centre: math.exp(log_f(z) - centre), lo, hi, points=points,
                                  limit=400, epsabs=0.0, epsrel=1e-11)
        best = max(best, (math.log(value) + centre) / (alpha - 1.0))
    return best


@pytest.mark.slow
@pytest.mark.parametrize(("sigma", "q", "steps"), [(0.71, 256 / 60000, 2344), (1.7673, 1 / 17, 170)])
def test_dp_accounting_is_above_an_independent_evaluation_at_every_order(sigma: float, q: float, steps: int) -> None:
    """Point (e) in the README settings: Theorem B uses every order, so every order is checked (both directions)."""
    curve = dpsgd_rdp(sigma, q, steps)
    for alpha, eps in zip(curve.orders, curve.epsilons, strict=True):
        if not math.isfinite(eps):
            continue  # "no bound at this order": Theorem B does not use it
        independent = steps * _sampled_gaussian_rdp(float(alpha), sigma, q)
        assert eps >= independent * (1 - 1e-7), alpha
        if float(alpha).is_integer():  # at integer orders both are the exact value
            assert eps == pytest.approx(independent, rel=1e-6)


# -- scope and composition ----------------------------------------------------------------------------------------
def test_uniform_searches_offer_theorem_b_and_compose_the_order_wise_minimum() -> None:
    run_count = geometric(0.01)
    bounds = rdp_bounds(MNIST, run_count)
    assert set(bounds) == {"rdp", "rdp-theorem-b"} and bounds["rdp-theorem-b"].theorem == THEOREM_B_UNIFORM
    printed = dphypo_theorem1(MNIST, run_count, 1.0, 1.0).curve.epsilons
    sharp = bounds["rdp-theorem-b"].curve.epsilons
    assert np.all(sharp <= printed) and np.all(sharp <= theorem_a(MNIST, run_count, 1.0, 1.0).curve.epsilons)
    composing = tuning_rdp(MNIST, run_count)
    np.testing.assert_array_equal(composing.curve.epsilons, np.minimum(sharp, printed))
    # lost-attempt charging composes that curve, and reports under the best RDP method
    charged = account_charged(MNIST, RepeatAndSelect(run_count), 1e-5, 1)
    by_printed = compose(dphypo_theorem1(MNIST, run_count, 1.0, 1.0).curve, MNIST)
    assert charged.method == "rdp-theorem-b"
    assert charged.epsilon == pytest.approx(epsilon_from_rdp(composing.curve.orders, (composing.curve + MNIST).epsilons,
                                                             1e-5)[0], rel=1e-12)
    assert charged.epsilon < epsilon_from_rdp(by_printed.orders, by_printed.epsilons, 1e-5)[0]
    # scope: Theorem B is proven for TNB T only; a Poisson search keeps Papernot-Steinke Theorem 6, and an adaptive
    # Poisson search has no theorem at all
    assert set(rdp_bounds(MNIST, Poisson(100.0))) == {"rdp"}
    with pytest.raises(AdaptivePoissonError):
        rdp_bounds(MNIST, Poisson(100.0), 2.0, 0.75)
    with pytest.raises(TypeError, match="truncated negative binomial"):
        theorem_b_bound(MNIST.orders, MNIST.epsilons, MNIST.epsilons, Poisson(100.0), 1.0, 1.0)  # type: ignore[arg-type]


def test_adaptive_bound_is_floored_at_the_uniform_curve_and_never_above_theorem_a() -> None:
    run_count = geometric(0.05)
    for C, c in ((2.0, 0.75), (1.0001, 0.9999), (10.0, 0.1)):
        adaptive = tuning_rdp(DIGITS, run_count, C, c).curve.epsilons
        uniform = tuning_rdp(DIGITS, run_count).curve.epsilons
        assert np.all(adaptive >= uniform)
        assert np.all(adaptive <= theorem_a(DIGITS, run_count, C, c).curve.epsilons + 1e-12)


# -- §8: why a charge that shrinks with ε needs a coupling of the two histories -----------------------------------
#: The two-rule game (docs/proofs/adaptive.md §8): data-independent candidates with distinct outputs 0 < 1 < 2 and
#: prior TWO_RULE_PRIOR; on D every run draws from the density TWO_RULE_D (× the prior), on D′ from TWO_RULE_D_PRIME,
#: both in S_{C,c} for C = 2, c = 0.75. Steps 1–4 of the proof bound each dataset with its own envelope, so they
#: hold for this game too (found by random search and Nelder-Mead, benchmarks/adaptive_bounds.py --two-rule).
TWO_RULE_PRIOR = np.array([0.7820943388, 0.0179056612, 0.2])


def _vertex(prior: np.ndarray, order: list[int], C: float = 2.0, c: float = 0.75) -> np.ndarray:
    law = c * prior
    room = 1.0 - law.sum()
    for i in order:
        add = min((C - c) * prior[i], room)
        law[i] += add
        room -= add
    return law


def test_the_two_rule_game_reaches_two_at_epsilon_zero_below_theorem_b() -> None:
    run_count = geometric(0.05)  # E[T] = 20
    on_d, on_d_prime = _vertex(TWO_RULE_PRIOR, [1, 0, 2]), _vertex(TWO_RULE_PRIOR, [2, 0, 1])
    for law in (on_d, on_d_prime):
        assert law.sum() == pytest.approx(1.0) and np.all(law / TWO_RULE_PRIOR <= 2.0 + 1e-12)
        assert np.all(law / TWO_RULE_PRIOR >= 0.75 - 1e-12)

    def release(law: np.ndarray) -> np.ndarray:  # P[max of T draws = y], y = 0, 1, 2
        return np.diff(run_count.pgf(np.concatenate([[0.0], np.minimum(np.cumsum(law), 1.0)])))

    a, a_prime = release(on_d), release(on_d_prime)
    d8 = math.log(np.sum(a**8 * a_prime**-7)) / 7
    assert d8 == pytest.approx(1.9986, abs=1e-3)
    # Theorem B's steps cover the game, so at ε = 0 it must be (and is) above it; the real search, whose rule is the
    # same function of the history on both datasets, has divergence 0 with data-independent candidates.
    zero = zero_rdp()
    bound = theorem_b(zero, run_count, 2.0, 0.75).curve.epsilons[int(np.searchsorted(zero.orders, 8.0))]
    assert d8 < bound == pytest.approx(2.734, abs=2e-3)
    same_rule = release(on_d)
    assert math.log(np.sum(same_rule**8 * same_rule**-7)) / 7 == pytest.approx(0.0, abs=1e-12)

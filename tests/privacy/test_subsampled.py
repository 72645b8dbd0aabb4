"""Koskela-Kulkarni subsampled tuning: Thm 1 (variant 1), Zhu-Wang + composition (variant 2), transfer.

Golden values: notes/koskela-kulkarni.md §4.5 (their conventions: integer orders 2..256, P&S Theorem 5 with δ̂
from the RDP curve at ε̂_α = log(α/(α−1)), *no* monotone envelope). Independent checks: closed forms at α = 2,
Remark 2's limits, an exact 2-D Gaussian toy mechanism (quadrature), and the exact subsampled-Gaussian RDP.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from dphypo.privacy import (
    AdaptivePoissonError,
    CalibrationError,
    Poisson,
    RdpCurve,
    RepeatAndSelect,
    TruncatedNegativeBinomial,
    compose,
    delta_from_rdp,
    dphypo_theorem1,
    dpsgd_rdp,
    epsilon_from_rdp,
    gaussian_rdp,
    tuning_rdp,
    zero_rdp,
)
from dphypo.privacy.run_counts import Binomial
from dphypo.privacy.subsampled import (
    DpSgdHyperparameters,
    SubsampledScopeError,
    _theorem1_components,
    accounting_orders,
    calibrate_subsampled_sigma,
    dpsgd_subsampled_tuning,
    koskela_kulkarni_theorem1,
    nominal_set_sizes,
    subsampled_tuning,
    transfer_hyperparameters,
    transfer_learning_rate,
    tuning_curve,
    variant2_rdp,
    zhu_wang_subsampled_rdp,
)

A_MAX = 256
INTS = np.arange(2, A_MAX + 1, dtype=np.float64)


def _notes_base() -> RdpCurve:
    return dpsgd_rdp(2.0, 0.01, 5000, orders=INTS)  # KK Fig. 1 base: γ = 0.01, σ = 2, 50 epochs


def _notes_tune(base: RdpCurve, mu: float) -> RdpCurve:
    """P&S Theorem 6 exactly as the digest computed it (per order, δ̂ via Lemma 3 over the integer curve)."""
    eps = []
    for i, a in enumerate(base.orders):
        d_hat, _ = delta_from_rdp(base.orders, base.epsilons, math.log(a / (a - 1)))
        eps.append(base.epsilons[i] + mu * d_hat + math.log(mu) / (a - 1))
    return RdpCurve(base.orders, np.maximum(eps, 0.0), None, f"P&S Thm 6 raw mu={mu}")


def test_base_curve_and_single_run_match_the_notes() -> None:
    base = _notes_base()
    idx = [0, 1, 3, 6, 10, 30]  # orders 2, 3, 5, 8, 12, 32
    np.testing.assert_allclose(
        base.epsilons[idx], [0.142011, 0.213672, 0.358337, 0.578781, 0.879412, 2.514473], atol=2e-6
    )
    eps, order = epsilon_from_rdp(INTS, base.epsilons, 1e-5)
    assert eps == pytest.approx(1.6131, abs=1e-4) and order == 12


@pytest.mark.parametrize(
    ("mu", "v1_orders", "v2_orders"),
    [
        (15, [1.195497, 1.027410, 1.536971], [0.338224, 1.053160, 2.121120]),
        (45, [2.545083, 4.735551, 7.003127], [0.912441, 4.792973, 7.597466]),
    ],
)
def test_per_order_values_at_q_0_1_match_the_notes(mu: float, v1_orders: list, v2_orders: list) -> None:
    base = _notes_base()
    tune = _notes_tune(base, mu)
    v1 = koskela_kulkarni_theorem1(tune, base, 0.1, max_order=A_MAX)
    v2 = variant2_rdp(tune, base, 0.1, max_order=A_MAX)
    idx = [0, 3, 8]  # orders 2, 5, 10
    np.testing.assert_allclose(v1.epsilons[idx], v1_orders, atol=2e-6)
    np.testing.assert_allclose(v2.epsilons[idx], v2_orders, atol=2e-6)


@pytest.mark.parametrize(
    ("mu", "q", "v1", "v2"),
    [
        (15, 0.01, 1.6425, 1.6406),
        (15, 0.1, 2.4550, 2.9139),
        (15, 0.5, 3.9753, 4.6351),
        (15, 0.99, 4.6472, 5.4020),
        (45, 0.01, 4.6953, 3.9661),
        (45, 0.1, 6.9883, 6.9460),
        (45, 0.5, 8.5969, 9.0566),
        (45, 0.99, 9.2799, 9.9104),
    ],
)
def test_final_epsilons_match_the_notes_table(mu: float, q: float, v1: float, v2: float) -> None:
    base = _notes_base()
    tune = _notes_tune(base, mu)
    got1 = epsilon_from_rdp(INTS, koskela_kulkarni_theorem1(tune, base, q, max_order=A_MAX).epsilons, 1e-5)[0]
    got2 = epsilon_from_rdp(INTS, variant2_rdp(tune, base, q, max_order=A_MAX).epsilons, 1e-5)[0]
    assert got1 == pytest.approx(v1, abs=1e-4)
    assert got2 == pytest.approx(v2, abs=1e-4)


def test_closed_forms_at_order_two() -> None:
    # notes §4.5: Thm 1(2) = log(0.9 e^{0.142011} + 0.1 e^{3.121426}); variant 2(2) = log(1 − q² + q² e^{ε_t})
    # + ε_b.
    tune = RdpCurve([2.0, 3.0], [3.121426, 3.2], None)
    base = RdpCurve([2.0, 3.0], [0.142011, 0.2], None)
    v1 = koskela_kulkarni_theorem1(tune, base, 0.1, max_order=2)
    v2 = variant2_rdp(tune, base, 0.1, max_order=2)
    assert v1.epsilons[0] == pytest.approx(
        math.log(0.9 * math.exp(0.142011) + 0.1 * math.exp(3.121426)), abs=1e-12
    )
    assert v1.epsilons[0] == pytest.approx(1.19550, abs=1e-5)
    assert v2.epsilons[0] == pytest.approx(
        math.log(1 - 0.01 + 0.01 * math.exp(3.121426)) + 0.142011, abs=1e-12
    )


def test_remark_2_limits() -> None:
    base = _notes_base()
    tune = _notes_tune(base, 15)
    at_one = koskela_kulkarni_theorem1(tune, base, 1.0, max_order=A_MAX)
    at_zero = koskela_kulkarni_theorem1(tune, base, 0.0, max_order=A_MAX)
    np.testing.assert_allclose(at_one.epsilons, tune.epsilons, rtol=1e-12)
    np.testing.assert_allclose(at_zero.epsilons, base.epsilons, rtol=1e-12)


def _toy_exact(q: float, s1: float, s2: float, alpha: int, nodes: int = 120) -> tuple[float, float]:
    """Exact D_α both ways for M(X) = (tune on X₁, base on X\\X₁), Gaussian M_tune (s1), M_base (s2), Δ = 1:
    P = q N((1,0)) + (1−q) N((0,1)) vs Q = N((0,0)), by 2-D Gauss–Hermite quadrature over Q."""
    x, w = np.polynomial.hermite_e.hermegauss(nodes)
    w = w / w.sum()
    xs, ys = np.meshgrid(x * s1, x * s2, indexing="ij")
    weights = np.outer(w, w)
    ratio = q * np.exp((2 * xs - 1) / (2 * s1**2)) + (1 - q) * np.exp((2 * ys - 1) / (2 * s2**2))
    add = math.log(float((weights * ratio**alpha).sum())) / (alpha - 1)
    remove = math.log(float((weights * ratio ** (1 - alpha)).sum())) / (alpha - 1)
    return add, remove


@pytest.mark.parametrize("q", [0.1, 0.5])
@pytest.mark.parametrize(("s1", "s2"), [(1.0, 1.0), (0.8, 2.0), (2.0, 0.8)])
def test_theorem1_against_exact_gaussian_toy(q: float, s1: float, s2: float) -> None:
    """Gaussian M_tune, M_base: eq. (3.6) equals the exact add-direction divergence (its binomial expansion is
    exact for Gaussians), eq. (3.7) upper-bounds the exact remove direction (loose: it uses L-ineq)."""
    max_order = 8
    orders = np.arange(2, max_order + 1, dtype=np.float64)
    tune, base = gaussian_rdp(s1, orders=orders), gaussian_rdp(s2, orders=orders)
    eps1, eps2 = _theorem1_components(tune, base, q, max_order)
    bound = koskela_kulkarni_theorem1(tune, base, q, max_order=max_order)
    np.testing.assert_allclose(bound.epsilons, np.maximum(eps1, eps2))
    for alpha in (2, 4, 8):
        add, remove = _toy_exact(q, s1, s2, alpha)
        assert add == pytest.approx(eps1[alpha - 2], rel=1e-7)
        assert remove <= eps2[alpha - 2] * (1 + 1e-9)


def test_zhu_wang_bounds_exact_subsampled_gaussian_and_closed_form() -> None:
    for sigma, gamma in ((1.0, 0.01), (2.0, 0.1), (0.7, 0.5)):
        bound = zhu_wang_subsampled_rdp(gaussian_rdp(sigma, orders=INTS[:63]), gamma, max_order=64)
        exact = dpsgd_rdp(sigma, gamma, 1, orders=INTS[:63])  # Mironov et al. 2019, exact at integer orders
        assert np.all(bound.epsilons >= exact.epsilons * (1 - 1e-9))
        assert bound.epsilons[0] == pytest.approx(
            math.log(1 - gamma**2 + gamma**2 * math.exp(1 / sigma**2)), rel=1e-12
        )
        assert exact.epsilons[0] == pytest.approx(bound.epsilons[0], rel=1e-9)  # both tight at α = 2


def test_default_pipeline_is_tighter_than_the_raw_digest_pipeline() -> None:
    """The default uses the monotone envelope and dense α̂/δ̂ grids: valid and never looser."""
    for mu in (15, 45):
        raw_tune = _notes_tune(_notes_base(), mu)
        for variant in (1, 2):
            report = dpsgd_subsampled_tuning(
                2.0, 0.01, 5000, RepeatAndSelect(Poisson(float(mu))), 0.1, variant, 1e-5
            )
            fn = koskela_kulkarni_theorem1 if variant == 1 else variant2_rdp
            raw = epsilon_from_rdp(INTS, fn(raw_tune, _notes_base(), 0.1, max_order=A_MAX).epsilons, 1e-5)[0]
            assert report.epsilon <= raw + 1e-12
            assert report.epsilon >= raw - 0.1
            assert report.single_run_epsilon == pytest.approx(1.6131, abs=1e-4)
            assert report.epsilon > report.single_run_epsilon


def test_variant1_increases_with_q_and_beats_the_baseline() -> None:
    search = RepeatAndSelect(Poisson(15.0))
    eps = [
        dpsgd_subsampled_tuning(2.0, 0.01, 5000, search, q, 1, 1e-5).epsilon for q in (0.02, 0.1, 0.5, 0.9)
    ]
    assert all(a < b for a, b in itertools.pairwise(eps))
    report = dpsgd_subsampled_tuning(2.0, 0.01, 5000, search, 0.9, 1, 1e-5)
    assert report.epsilon < report.full_data_epsilon


def test_adaptive_tnb_uses_theorem_b_and_other_families_are_refused() -> None:
    candidate = dpsgd_rdp(1.0, 0.01, 1000, orders=accounting_orders(64))
    adaptive = RepeatAndSelect(TruncatedNegativeBinomial.from_mean(1.0, 10.0), 2.0, 0.5)
    curve, theorem = tuning_curve(candidate, adaptive, max_order=64)
    assert theorem.startswith("Theorem B (docs/proofs/adaptive.md")  # the proven default for C > c
    # a uniform search on X₁ composes the order-wise minimum of Papernot-Steinke Theorem 2 and Theorem B at C = c = 1
    uniform_curve, uniform_theorem = tuning_curve(candidate, adaptive.uniform(), max_order=64)
    assert uniform_theorem.startswith("Theorem B at C = c = 1")
    printed = dphypo_theorem1(candidate, adaptive.run_count, 1.0, 1.0).curve
    assert np.all(uniform_curve.epsilons <= printed.epsilons[np.isin(printed.orders, uniform_curve.orders)])
    reference = tuning_rdp(candidate, adaptive.run_count, 2.0, 0.5).curve
    published = dphypo_theorem1(candidate, adaptive.run_count, 2.0, 0.5).curve
    assert np.all(reference.epsilons <= published.epsilons)
    np.testing.assert_allclose(curve.epsilons, reference.epsilons[np.isin(reference.orders, curve.orders)])
    report = subsampled_tuning(candidate, adaptive, 0.1, 1, 1e-5, max_order=64)
    assert math.isfinite(report.epsilon)
    with pytest.raises(SubsampledScopeError, match=r"binomial T has no RDP theorem.*profile-binomial"):
        subsampled_tuning(candidate, RepeatAndSelect(Binomial(20, 0.5)), 0.1, 1, 1e-5, max_order=64)
    with pytest.raises(AdaptivePoissonError):
        RepeatAndSelect(Poisson(10.0), 2.0, 0.5)


def test_integer_orders_are_required() -> None:
    fractional = gaussian_rdp(1.0, orders=[1.5, 2.0, 2.5, 3.0, 5.0])
    with pytest.raises(ValueError, match=r"lacks integer order\(s\) \[4\]"):
        koskela_kulkarni_theorem1(fractional, fractional, 0.1, max_order=5)
    with pytest.raises(ValueError, match="variant"):
        subsampled_tuning(
            gaussian_rdp(1.0, orders=INTS[:9]), RepeatAndSelect(Poisson(3.0)), 0.1, 3, 1e-5, max_order=10
        )  # type: ignore[arg-type]


def test_transfer_rule_as_stated_in_the_paper() -> None:
    n, q = 60_000, 0.1
    tuned = DpSgdHyperparameters(
        learning_rate=0.5, noise_multiplier=1.1, sample_rate=128 / 6000, steps=1875, clip_norm=1.0
    )
    m1, n1 = nominal_set_sizes(n, q, 1)
    m2, n2 = nominal_set_sizes(n, q, 2)
    assert (m1, n1, m2, n2) == pytest.approx((6000, 54_000, 6000, 60_000))
    final1 = transfer_hyperparameters(tuned, tuning_set_size=m1, final_set_size=n1)
    final2 = transfer_hyperparameters(tuned, tuning_set_size=m2, final_set_size=n2)
    assert final1.learning_rate == pytest.approx(0.5 * 9) and final2.learning_rate == pytest.approx(0.5 * 10)
    # C, σ, γ and T are unchanged, so the batch grows: the paper's 128 → 1152 (variant 1) and 1280 (variant
    # 2).
    for final in (final1, final2):
        assert (final.noise_multiplier, final.sample_rate, final.steps, final.clip_norm) == (
            1.1,
            128 / 6000,
            1875,
            1.0,
        )
    assert final1.expected_batch_size(n1) == pytest.approx(1152) and final2.expected_batch_size(
        n2
    ) == pytest.approx(1280)
    assert tuned.expected_batch_size(m1) == pytest.approx(128)
    # DP-Adam: the learning rate is kept.
    assert transfer_learning_rate(0.01, tuning_set_size=m1, final_set_size=n1, optimizer="adam") == 0.01
    with pytest.raises(ValueError, match="optimizer"):
        transfer_learning_rate(0.01, tuning_set_size=m1, final_set_size=n1, optimizer="rmsprop")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="tuning_rate"):
        nominal_set_sizes(n, 1.0, 1)


def test_transfer_keeps_the_injected_noise_distribution() -> None:
    """KK Sec. 3.2: Σ_j η Z_j has variance T η² σ² C² / (γ·size)²; scaling η by n/m makes it equal."""
    tuned = DpSgdHyperparameters(0.3, 1.0, 0.02, 500, 2.0)
    m, n = 4000.0, 36_000.0
    final = transfer_hyperparameters(tuned, tuning_set_size=m, final_set_size=n)

    def noise_var(h: DpSgdHyperparameters, size: float) -> float:
        return (
            h.steps
            * h.learning_rate**2
            * h.noise_multiplier**2
            * h.clip_norm**2
            / (h.sample_rate * size) ** 2
        )

    assert noise_var(final, n) == pytest.approx(noise_var(tuned, m), rel=1e-12)


@pytest.mark.parametrize("variant", [1, 2])
def test_calibration_recovers_the_sigma_of_a_known_total(variant: int) -> None:
    """Round trip in the notes' Fig. 1 setting (γ = 0.01, T = 5000, Poisson μ = 15, q = 0.1): the total at σ = 2
    is the target, so the calibrated σ must be 2 (to rtol, never below)."""
    search, orders = RepeatAndSelect(Poisson(15.0)), accounting_orders(64)

    def curve(s: float) -> RdpCurve:
        return dpsgd_rdp(s, 0.01, 5000, orders=orders)

    target = subsampled_tuning(curve(2.0), search, 0.1, variant, 1e-5, max_order=64).epsilon
    cal = calibrate_subsampled_sigma(target, 1e-5, search, 0.1, variant, curve, curve, max_order=64, rtol=1e-5)
    assert 2.0 <= cal.sigma <= 2.0 * (1 + 2e-5)
    assert cal.report.epsilon <= target and cal.report.variant == variant


def test_calibration_refuses_an_unreachable_target() -> None:
    search, orders = RepeatAndSelect(Poisson(15.0)), accounting_orders(32)

    def curve(s: float) -> RdpCurve:
        return dpsgd_rdp(s, 0.01, 100, orders=orders)

    floor = subsampled_tuning(zero_rdp(orders), search, 0.5, 1, 1e-5, final=zero_rdp(orders), max_order=32).epsilon
    assert floor > 0.0
    with pytest.raises(CalibrationError, match="unreachable"):
        calibrate_subsampled_sigma(floor * 0.99, 1e-5, search, 0.5, 1, curve, curve, max_order=32)
    cal = calibrate_subsampled_sigma(floor + 0.5, 1e-5, search, 0.5, 1, curve, curve, max_order=32)
    assert cal.report.epsilon <= floor + 0.5


def test_charged_attempts_compose_into_the_tuning_curve() -> None:
    orders = accounting_orders(32)
    candidate = dpsgd_rdp(2.0, 0.01, 1000, orders=orders)
    search = RepeatAndSelect(Poisson(5.0))
    plain = subsampled_tuning(candidate, search, 0.1, 1, 1e-5, max_order=32)
    charged = subsampled_tuning(candidate, search, 0.1, 1, 1e-5, max_order=32, charged_runs=2)
    tune, _ = tuning_curve(candidate, search, max_order=32)
    lost = RdpCurve(tune.orders, 2 * candidate.epsilons[np.isin(candidate.orders, tune.orders)], None)
    expected = koskela_kulkarni_theorem1(compose(tune, lost), candidate, 0.1, max_order=32)
    np.testing.assert_allclose(charged.curve.epsilons, expected.epsilons)
    assert charged.epsilon > plain.epsilon and "charged" in charged.tuning_theorem

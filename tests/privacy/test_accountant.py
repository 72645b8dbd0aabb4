from __future__ import annotations

import math

import pytest

from dphypo.privacy import (
    CalibrationError,
    Poisson,
    PrivacyConfig,
    SearchPrivacy,
    TruncatedNegativeBinomial,
    account,
    account_pure,
    calibrate_dpsgd_sigma,
    calibrate_sigma,
    dpsgd_rdp,
    gaussian_rdp,
    geometric,
)
from dphypo.privacy.profiles import dpsgd_profile

Q = 256 / 60000


def test_breakdown_adds_up() -> None:
    report = account(dpsgd_rdp(0.71, Q, 2344), SearchPrivacy(geometric(0.01), 2.0, 0.75), 1e-5)
    assert report.base_epsilon + report.repetition_epsilon + report.adaptivity_epsilon == pytest.approx(
        report.epsilon
    )
    assert report.repetition_epsilon > 0 and report.adaptivity_epsilon > 0
    uniform = account(dpsgd_rdp(0.71, Q, 2344), SearchPrivacy(geometric(0.01)), 1e-5)
    assert uniform.adaptivity_epsilon == 0.0
    assert uniform.epsilon == pytest.approx(report.base_epsilon + report.repetition_epsilon)
    d = report.to_dict()
    for key in ("epsilon", "delta", "base_epsilon", "order", "order_hat", "expected_runs"):
        assert key in d
    assert d["expected_runs"] == pytest.approx(100.0)
    assert d["order"] > 1 and d["order_hat"] >= 1


def test_pure_accounting() -> None:
    search = SearchPrivacy(TruncatedNegativeBinomial(0.5, 0.05), 1.5, 0.8)
    report = account_pure(1.0, search)
    # Theorem A-infinity (docs/proofs/adaptive.md): ε + log(C/c) + (1+θ) log((γ + (1−γ)C)/(γ + (1−γ)c e^(−ε)))
    expected = 1.0 + math.log(1.5 / 0.8) + 1.5 * math.log((0.05 + 0.95 * 1.5) / (0.05 + 0.95 * 0.8 * math.exp(-1.0)))
    assert report.epsilon == pytest.approx(expected, rel=1e-12) and report.epsilon == pytest.approx(3.876462, abs=1e-6)
    assert report.method == "pure-dp-theorem-a" and report.theorem.startswith("Theorem A-infinity")
    assert report.delta == 0.0
    # Regression: the published DP-HyPO Theorem 2, opt-in only.
    published = account_pure(1.0, search, adaptive_theorem="published")
    assert published.epsilon == pytest.approx(2.5 * (1.0 + math.log(1.5 / 0.8)))
    assert published.method == "pure-dp-published-thm2" and "known gap" in published.theorem
    uniform = account_pure(1.0, search.uniform())
    assert uniform.epsilon == 2.5 and uniform.method == "pure-dp"  # Papernot-Steinke Corollary 3, unchanged
    with pytest.raises(ValueError, match="Poisson"):
        account_pure(1.0, SearchPrivacy(Poisson(5.0)))


def test_privacy_config_is_the_single_source() -> None:
    search = SearchPrivacy(geometric(0.1), 1.5, 0.8)
    config = PrivacyConfig(search, gaussian_rdp(5.0), 1e-6)
    assert config.account().epsilon == account(gaussian_rdp(5.0), search, 1e-6).epsilon
    assert config.account().search is search
    with pytest.raises(ValueError, match="delta"):
        PrivacyConfig(search, gaussian_rdp(5.0), 0.0)


@pytest.mark.parametrize(
    "search",
    [SearchPrivacy(geometric(0.01), 2.0, 0.75), SearchPrivacy(geometric(0.01)), SearchPrivacy(Poisson(10.0))],
)
def test_calibration_is_conservative_and_tight(search: SearchPrivacy) -> None:
    target = 8.0
    result = calibrate_dpsgd_sigma(target, 1e-5, Q, 2344, search, rtol=1e-4)
    assert result.report.epsilon <= target
    # the smallest σ to the stated tolerance, under the same minimum over valid bounds that calibration used
    # (profile bounds for a uniform search): a little less noise overshoots the target
    below = result.sigma - 2.5 * result.sigma_tolerance
    profile = None if search.adaptive else dpsgd_profile(below, Q, 2344, discretization=1e-3)
    assert account(dpsgd_rdp(below, Q, 2344), search, 1e-5, profile=profile).epsilon > target
    assert result.report.method == ("rdp-theorem-a" if search.adaptive else result.report.method)
    if not search.adaptive:  # the profile bounds let a uniform search use less noise than RDP alone
        assert result.sigma < calibrate_dpsgd_sigma(target, 1e-5, Q, 2344, search, use_profiles=False).sigma
    assert result.report.epsilon == pytest.approx(target, rel=1e-3)


def test_adaptive_search_needs_more_noise_for_the_same_budget() -> None:
    gp = calibrate_dpsgd_sigma(8.0, 1e-5, Q, 2344, SearchPrivacy(geometric(0.01), 2.0, 0.75))
    uniform = calibrate_dpsgd_sigma(8.0, 1e-5, Q, 2344, SearchPrivacy(geometric(0.01)))
    assert gp.sigma > uniform.sigma


def test_unreachable_target_is_refused() -> None:
    with pytest.raises(CalibrationError, match="unreachable"):
        calibrate_dpsgd_sigma(0.5, 1e-5, Q, 2344, SearchPrivacy(geometric(0.01), 2.0, 0.75))


def test_calibration_validation() -> None:
    search = SearchPrivacy(geometric(0.1))
    with pytest.raises(ValueError, match="epsilon"):
        calibrate_dpsgd_sigma(-1.0, 1e-5, Q, 100, search)
    with pytest.raises(ValueError, match="sample_rate"):
        calibrate_dpsgd_sigma(8.0, 1e-5, 2.0, 100, search)


def test_a_sigma_independent_part_that_exceeds_the_target_is_reported_as_such() -> None:
    # The per-run curve = DP-SGD(σ) + a fixed Gaussian score release that alone costs more than the target.
    search = SearchPrivacy(geometric(0.1))
    with pytest.raises(CalibrationError, match="does not shrink with sigma"):
        calibrate_sigma(1.0, 1e-5, search, lambda s: dpsgd_rdp(s, Q, 100) + gaussian_rdp(0.5))


def test_adaptive_default_is_theorem_a_and_published_theorem1_is_opt_in() -> None:
    base, search = dpsgd_rdp(0.71, Q, 2344), SearchPrivacy(geometric(0.01), 2.0, 0.75)
    report = account(base, search, 1e-5)
    # Theorem A (docs/proofs/adaptive.md), computed: 10.9287 (shared/notes/adaptive-bound.md table: 10.929).
    assert report.epsilon == pytest.approx(10.928736, abs=1e-5)
    assert report.method == "rdp-theorem-a" and set(report.methods) == {"rdp-theorem-a"}
    assert report.theorem == "Theorem A (docs/proofs/adaptive.md; replaces DP-HyPO Theorem 1)"
    assert report.to_dict()["method"] == "rdp-theorem-a"
    # Regression: DP-HyPO Theorem 1 as published (11.151), only on request, labelled.
    published = account(base, search, 1e-5, adaptive_theorem="published")
    assert published.epsilon == pytest.approx(11.150587, abs=1e-5)
    assert published.method == "rdp-published-thm1"
    assert published.theorem == "DP-HyPO Theorem 1 (published; proof has a known gap; implied by Theorem A)"
    assert PrivacyConfig(search, base, 1e-5, adaptive_theorem="published").account().epsilon == published.epsilon
    assert PrivacyConfig(search, base, 1e-5).account().epsilon == report.epsilon
    # A uniform search is exactly as before (Papernot-Steinke Theorem 2), whatever the choice.
    uniform = SearchPrivacy(geometric(0.01))
    plain = account(base, uniform, 1e-5)
    assert plain.method == "rdp" and plain.epsilon == account(base, uniform, 1e-5, adaptive_theorem="published").epsilon
    assert plain.epsilon == pytest.approx(7.952158, abs=1e-5)
    with pytest.raises(ValueError, match="adaptive_theorem must be one of"):
        account(base, search, 1e-5, adaptive_theorem="Theorem 1")
    with pytest.raises(ValueError, match="adaptive_theorem must be one of"):
        PrivacyConfig(search, base, 1e-5, adaptive_theorem="paper")


def test_calibration_uses_theorem_a_for_an_adaptive_search() -> None:
    search = SearchPrivacy(geometric(0.01), 2.0, 0.75)
    result = calibrate_dpsgd_sigma(8.0, 1e-5, Q, 2344, search)
    assert result.report.method == "rdp-theorem-a"
    assert result.sigma == pytest.approx(0.8506, rel=1e-3)  # published Theorem 1 would need σ = 0.8606
    at_sigma = account(dpsgd_rdp(result.sigma, Q, 2344), search, 1e-5, adaptive_theorem="published")
    assert at_sigma.epsilon > 8.0  # the published bound does not certify the calibrated σ

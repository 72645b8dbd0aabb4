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
    report = account_pure(1.0, SearchPrivacy(TruncatedNegativeBinomial(0.5, 0.05), 1.5, 0.8))
    assert report.epsilon == pytest.approx(2.5 * (1.0 + math.log(1.5 / 0.8)))
    assert report.delta == 0.0
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
    assert result.report.method == ("rdp" if search.adaptive else result.report.method)
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

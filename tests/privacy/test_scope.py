"""Theorems refuse inputs outside their proven scope instead of printing a meaningless ε (issue: ε = 0 corner)."""

from __future__ import annotations

import numpy as np
import pytest

from dphypo.privacy import (
    Poisson,
    RepeatAndSelect,
    account,
    calibrate_dpsgd_sigma,
    dpsgd_rdp,
    papernot_steinke_theorem6,
)
from dphypo.privacy.rdp import NEGATIVE_ROUNDING, nonnegative_bound

# The regression setting of the issue: DP-SGD σ = 1, q = 0.01, 1000 steps, δ = 1e-5.
BASE = dpsgd_rdp(1.0, 0.01, 1000)


@pytest.mark.parametrize("mean", [0.5, 0.999, 1e-3])
def test_poisson_mean_below_one_is_refused(mean: float) -> None:
    with pytest.raises(ValueError, match=r"mean must be a finite number >= 1 .*Theorem 6"):
        Poisson(mean)


def test_the_old_zero_epsilon_corner_is_refused_end_to_end() -> None:
    # Before: account(...) with Poisson(0.5) reported ε = 0.0 and calibration returned σ = 0.083.
    with pytest.raises(ValueError, match="Poisson"):
        account(BASE, RepeatAndSelect(Poisson(0.5)), 1e-5)
    with pytest.raises(ValueError, match="Poisson"):
        calibrate_dpsgd_sigma(8.0, 1e-5, 0.01, 1000, RepeatAndSelect(Poisson(0.5)))


def test_poisson_mean_one_gives_a_positive_bound_above_one_run() -> None:
    one_run = account(BASE, RepeatAndSelect(Poisson(1.0)), 1e-5)
    assert one_run.epsilon > one_run.base_epsilon > 0.0


def _poisson_bypassing_the_check(mean: float) -> Poisson:
    dist = Poisson(1.0)
    object.__setattr__(dist, "mean", mean)  # what Poisson(0.5) built before the scope check
    return dist


def test_a_negative_theorem_value_raises_instead_of_being_clamped_to_zero() -> None:
    with pytest.raises(ValueError, match="Theorem 6 gave a negative RDP bound"):
        papernot_steinke_theorem6(BASE, _poisson_bypassing_the_check(0.5))


def test_nonnegative_bound_keeps_rounding_and_maps_nan_to_no_bound() -> None:
    out = nonnegative_bound(np.array([0.3, -0.5 * NEGATIVE_ROUNDING, np.nan]), "test")
    np.testing.assert_array_equal(out, [0.3, 0.0, np.inf])
    with pytest.raises(ValueError, match="test gave a negative RDP bound"):
        nonnegative_bound(np.array([0.3, -1e-6]), "test")


# -- a privacy profile is used only next to an RDP curve of the same mechanism ---------------------------------
def test_a_training_only_profile_beside_a_curve_with_the_score_release_is_refused() -> None:
    from dphypo.privacy import compose, gaussian_rdp, geometric
    from dphypo.privacy.profiles import dpsgd_profile

    with_score = compose(BASE, gaussian_rdp(10.0))  # training + noisy score count
    training_only = dpsgd_profile(1.0, 0.01, 1000, discretization=1e-3)
    with pytest.raises(ValueError, match=r"same mechanism.*Gaussian.*profile covers DP-SGD"):
        account(with_score, RepeatAndSelect(geometric(0.1)), 1e-5, profile=training_only)
    # the matching pair is accepted, and the profile bound is used
    report = account(BASE, RepeatAndSelect(geometric(0.1)), 1e-5, profile=training_only)
    assert report.method != "rdp"


def test_a_profile_of_unknown_mechanism_is_refused() -> None:
    from dphypo.privacy import custom_rdp, gaussian_rdp, geometric
    from dphypo.privacy.profiles import DiscreteProfile, GaussianProfile

    search = RepeatAndSelect(geometric(0.1))
    with pytest.raises(ValueError, match="curve covers unknown"):
        account(custom_rdp(BASE.orders, BASE.epsilons), search, 1e-5, profile=GaussianProfile(2.0))
    unknown = DiscreteProfile(np.array([0.6, 0.4]), np.array([0.4, 0.6]))
    with pytest.raises(ValueError, match=r"the curve covers Gaussian.*profile covers unknown"):
        account(gaussian_rdp(2.0), search, 1e-5, profile=unknown)
    # the same event on both sides (GaussianProfile's) is accepted
    from dp_accounting import dp_event

    named = custom_rdp(BASE.orders, gaussian_rdp(2.0).epsilons, event=dp_event.GaussianDpEvent(2.0))
    assert account(named, search, 1e-5, profile=GaussianProfile(2.0)).epsilon > 0

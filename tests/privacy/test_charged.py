"""Charging lost attempts: composition of the search with k released runs."""

from __future__ import annotations

import math

import pytest

from dphypo.privacy import (
    PrivacyAccounting,
    RepeatAndSelect,
    TruncatedNegativeBinomial,
    account,
    dpsgd_rdp,
    epsilon_from_rdp,
    gaussian_rdp,
    geometric,
    pure_dp_rdp,
)
from dphypo.privacy.charged import account_charged
from dphypo.privacy.profiles import dpsgd_profile

BASE = dpsgd_rdp(1.0, 256 / 60000, 2344)


def test_no_charge_is_exactly_the_search() -> None:
    search = RepeatAndSelect(geometric(0.05), 2.0, 0.75)
    assert account_charged(BASE, search, 1e-5, 0) == account(BASE, search, 1e-5)


def test_pure_dp_charge_is_at_most_the_pure_sum() -> None:
    # Every candidate ε0-DP: the search is (2+θ)(ε0 + log(C/c))-DP (DP-HyPO Thm 2) and k more ε0-DP runs add k·ε0
    # (basic composition), so the charged RDP curve's pure limit gives at most that sum.
    eps0, k = 0.5, 3
    search = RepeatAndSelect(TruncatedNegativeBinomial(0.5, 0.05), 1.5, 0.8)
    report = account_charged(pure_dp_rdp(eps0), search, 1e-6, k)
    assert report.epsilon <= 2.5 * (eps0 + math.log(1.5 / 0.8)) + k * eps0 + 1e-9


@pytest.mark.parametrize("charged", [1, 2, 5])
def test_the_charge_is_paid_and_grows_with_the_count(charged: int) -> None:
    search = RepeatAndSelect(geometric(0.05), 2.0, 0.75)
    plain = account(BASE, search, 1e-5)
    report = account_charged(BASE, search, 1e-5, charged)
    more = account_charged(BASE, search, 1e-5, charged + 1)
    alone = epsilon_from_rdp(BASE.repeated(charged).orders, BASE.repeated(charged).epsilons, 1e-5)[0]
    assert plain.epsilon < report.epsilon < more.epsilon
    assert report.epsilon >= alone  # never below the charged runs on their own
    assert report.charged_runs == charged
    assert report.charged_epsilon == pytest.approx(report.epsilon - plain.epsilon)
    assert report.to_dict()["breakdown"]["charged_runs"] == pytest.approx(report.charged_epsilon)
    assert set(report.methods) == {"rdp-theorem-b"}  # adaptive: no profile bound applies


def test_a_uniform_search_with_a_profile_also_tries_basic_composition() -> None:
    profile = dpsgd_profile(1.0, 256 / 60000, 2344, discretization=1e-3)
    search = RepeatAndSelect(geometric(0.1))
    report = account_charged(BASE, search, 1e-5, 1, profile=profile)
    # the RDP route composes the order-wise minimum of the uniform RDP bounds (here Theorem B at C = c = 1)
    assert "rdp-theorem-b" in report.methods and any(name.endswith("+basic") for name in report.methods)
    assert report.epsilon == min(report.methods.values())
    assert report.epsilon > account(BASE, search, 1e-5, profile=profile).epsilon


def test_privacy_config_charges_max_lost_up_front_through_the_same_path() -> None:
    config = PrivacyAccounting(RepeatAndSelect(geometric(0.1), 1.5, 0.8), gaussian_rdp(5.0), 1e-6, max_lost=2)
    assert config.account() == account_charged(config.base, config.search, 1e-6, 2)
    with pytest.raises(ValueError, match="max_lost"):
        PrivacyAccounting(config.search, config.base, 1e-6, max_lost=-1)
    with pytest.raises(ValueError, match="charged_runs"):
        account_charged(config.base, config.search, 1e-6, -1)

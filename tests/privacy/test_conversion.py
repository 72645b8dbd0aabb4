from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant as oracle
from scipy import stats

from dphypo.privacy import DEFAULT_ORDERS, delta_from_rdp, dpsgd_rdp, epsilon_from_rdp, gaussian_rdp


@pytest.mark.parametrize("sigma", [0.6, 1.0, 4.0])
@pytest.mark.parametrize("delta", [1e-3, 1e-5, 1e-9])
def test_epsilon_matches_dp_accounting(sigma: float, delta: float) -> None:
    curve = dpsgd_rdp(sigma, 0.01, 1000)
    ours, order = epsilon_from_rdp(curve.orders, curve.epsilons, delta)
    theirs, their_order = oracle.compute_epsilon(curve.orders, curve.epsilons, delta)
    assert ours == pytest.approx(theirs, rel=1e-12)
    assert order == their_order


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 5.0])
def test_delta_matches_dp_accounting(epsilon: float) -> None:
    curve = dpsgd_rdp(1.0, 0.01, 1000)
    ours, _ = delta_from_rdp(curve.orders, curve.epsilons, epsilon)
    theirs, _ = oracle.compute_delta(curve.orders, curve.epsilons, epsilon)
    assert ours == pytest.approx(theirs, rel=1e-10)


def test_gaussian_conversion_is_valid_against_the_exact_profile() -> None:
    """The RDP route must never beat the exact Gaussian privacy profile (Balle & Wang 2018, Theorem 8)."""
    sigma = 2.0
    curve = gaussian_rdp(sigma)
    for delta in (1e-3, 1e-6):
        eps, _ = epsilon_from_rdp(curve.orders, curve.epsilons, delta)
        exact_delta = stats.norm.cdf(1 / (2 * sigma) - eps * sigma) - math.exp(eps) * stats.norm.cdf(
            -1 / (2 * sigma) - eps * sigma
        )
        assert exact_delta <= delta

        # and it is not grossly loose: within 30 % of the exact ε at this δ
        def profile(e: float, d: float = delta) -> float:
            return (
                stats.norm.cdf(1 / (2 * sigma) - e * sigma)
                - math.exp(e) * stats.norm.cdf(-1 / (2 * sigma) - e * sigma)
                - d
            )

        from scipy.optimize import brentq

        assert eps <= 1.3 * brentq(profile, 0.0, 50.0)


def test_round_trip_and_pure_bound() -> None:
    curve = dpsgd_rdp(1.0, 0.02, 300)
    eps, _ = epsilon_from_rdp(curve.orders, curve.epsilons, 1e-5)
    delta, _ = delta_from_rdp(curve.orders, curve.epsilons, eps)
    assert delta <= 1e-5 * (1 + 1e-9)
    zeros = np.zeros_like(DEFAULT_ORDERS)
    assert epsilon_from_rdp(DEFAULT_ORDERS, zeros, 1e-5)[0] == 0.0
    assert epsilon_from_rdp(DEFAULT_ORDERS, np.full_like(DEFAULT_ORDERS, 9.0), 1e-5, pure_epsilon=0.7) == (
        0.7,
        math.inf,
    )
    assert delta_from_rdp(DEFAULT_ORDERS, np.full_like(DEFAULT_ORDERS, 9.0), 0.7, pure_epsilon=0.7) == (
        0.0,
        math.inf,
    )


@pytest.mark.parametrize("delta", [0.0, 1.0, -1e-5])
def test_delta_validation(delta: float) -> None:
    with pytest.raises(ValueError, match="delta"):
        epsilon_from_rdp(DEFAULT_ORDERS, np.zeros_like(DEFAULT_ORDERS), delta)

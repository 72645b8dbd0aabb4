"""The array transcription of dp_accounting's subsampled-Gaussian RDP, against dp_accounting itself."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant

from dphypo.privacy import rdp
from dphypo.privacy.rdp import DEFAULT_ORDERS, dpsgd_rdp, poisson_gaussian_rdp


def _reference(q: float, sigma: float, orders: np.ndarray) -> np.ndarray:
    logger = logging.getLogger("absl")
    level = logger.level
    logger.setLevel(logging.ERROR)  # non-converging fractional orders warn
    try:
        with np.errstate(all="ignore"):
            out = rdp_privacy_accountant._compute_rdp_poisson_subsampled_gaussian(q, sigma, list(orders))
    finally:
        logger.setLevel(level)
    return np.where(np.isnan(out), np.inf, out)


# Tiny σ (overflow → ∞), DP-SGD rates, q where dp_accounting's fractional series does not converge (0.5, 0.2),
# q = 1 (closed form), huge σ (values ~1e-17, where a log-sum-exp cancels: absolute tolerance).
@pytest.mark.parametrize(("sigma", "q"), [(1e-3, 0.5), (0.3, 0.0593), (0.9, 0.0593), (0.9, 0.2), (1.0, 0.5),
                                          (2.0, 1e-6), (10.0, 0.999), (1.0, 1.0), (1e4, 0.2)])
def test_curve_equals_dp_accounting(sigma: float, q: float) -> None:
    orders = np.asarray(DEFAULT_ORDERS)[::4]  # 70 of the 280 orders, fractional and integer (the reference is slow)
    ours = np.where(np.isnan(poisson_gaussian_rdp(q, sigma, orders)), np.inf, poisson_gaussian_rdp(q, sigma, orders))
    reference = _reference(q, sigma, orders)
    np.testing.assert_array_equal(np.isfinite(ours), np.isfinite(reference))  # the same orders have no bound
    finite = np.isfinite(reference)
    np.testing.assert_allclose(ours[finite], reference[finite], rtol=1e-12, atol=1e-15)
    if (sigma, q) == (1.0, 0.5):
        assert not np.all(finite)  # a series that does not converge is ∞ in both


def test_dpsgd_rdp_is_dp_accounting_with_its_envelope() -> None:
    curve = dpsgd_rdp(1.1, 0.01, 500, orders=DEFAULT_ORDERS[::5])
    reference = np.minimum.accumulate(np.maximum(_reference(0.01, 1.1, curve.orders), 0.0)[::-1])[::-1]
    np.testing.assert_allclose(curve.epsilons, 500 * reference, rtol=1e-12, atol=1e-13)


def test_curve_calls_dp_accounting_only_to_spot_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """dp_accounting's per-order loops (≈ 1 ms per order) run for two orders of a curve, not all 280."""
    calls = []
    original = rdp_privacy_accountant._compute_log_a

    def counted(q, sigma, alpha):
        calls.append(alpha)
        return original(q, sigma, alpha)

    monkeypatch.setattr(rdp_privacy_accountant, "_compute_log_a", counted)
    rdp._poisson_gaussian_per_step.cache_clear()
    dpsgd_rdp(0.87, 0.0421, 3)
    assert 1 <= len(calls) <= 2


def test_spot_check_catches_a_changed_upstream(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rdp, "poisson_gaussian_rdp", lambda q, sigma, orders: np.full(len(orders), 1e-3))
    rdp._poisson_gaussian_per_step.cache_clear()
    try:
        with pytest.raises(RuntimeError, match="disagrees with dp_accounting"):
            dpsgd_rdp(0.93, 0.0377, 3)
    finally:
        rdp._poisson_gaussian_per_step.cache_clear()

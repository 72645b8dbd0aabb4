"""Issue #30 item 8: every RDP curve is replaced by its running minimum from the right wherever it is built, compared
or converted (D_α is non-decreasing in α, docs/proofs/heterogeneous.md §5), against closed forms."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.rdp import rdp_privacy_accountant

from dphypo.privacy import (
    CandidateRun,
    DominanceError,
    ReferenceRun,
    custom_rdp,
    delta_from_rdp,
    dpsgd_rdp,
    epsilon_from_rdp,
)
from dphypo.privacy.heterogeneous import dominating_sigma, rdp_dominated
from dphypo.privacy.rdp import monotone_envelope

#: A small grid with the fractional orders where dp_accounting's series does not converge at q = 0.5 (→ ∞ at every
#: σ ≤ 100), so that each σ costs milliseconds.
ORDERS = (1.25, 1.5, 2.0, 3.0, 4.0, 8.0, 16.0, 32.0, 64.0)


def _dp_accounting(sigma: float, q: float, orders: tuple[float, ...]) -> np.ndarray:
    """dp_accounting's raw per-step RDP of the Poisson-subsampled Gaussian (∞ where its series diverges)."""
    accountant = rdp_privacy_accountant.RdpAccountant(list(orders))
    accountant.compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)))
    return np.asarray(accountant.rdp, dtype=np.float64)


def test_the_envelope_is_the_running_minimum_from_the_right() -> None:
    np.testing.assert_array_equal(monotone_envelope(np.array([np.inf, 3.0, 1.0, 2.0, np.nan, 5.0])),
                                  [1.0, 1.0, 1.0, 2.0, 5.0, 5.0])
    np.testing.assert_array_equal(monotone_envelope(np.array([1.0, np.inf])), [1.0, np.inf])  # nothing above: ∞
    curve = custom_rdp([1.1, 2.0, 4.0], [math.inf, 0.5, 0.7])
    np.testing.assert_array_equal(curve.monotone().epsilons, [0.5, 0.5, 0.7])  # ∞ at a low order: the next one's


def test_dpsgd_curves_are_the_envelope_of_dp_accounting_and_never_above_it() -> None:
    raw = _dp_accounting(3.0, 0.5, ORDERS)
    assert np.isinf(raw[:2]).all()  # dp_accounting's fractional series diverges at q = 0.5
    curve = dpsgd_rdp(3.0, 0.5, 10, orders=ORDERS)
    expected = 10 * np.array([raw[j:].min() for j in range(raw.size)])
    np.testing.assert_allclose(curve.epsilons, expected, rtol=1e-12)
    assert np.isfinite(curve.epsilons).all() and np.all(np.diff(curve.epsilons) >= 0)
    assert curve.epsilons[0] == curve.epsilons[2]  # orders 1.25 and 1.5 carry order 2's bound
    assert np.all(curve.epsilons <= 10 * raw)
    # at large σ dp_accounting's fractional orders near 1 are far above a higher order's bound: the envelope fixes it
    loose = _dp_accounting(100.0, 0.0588, (1.001, 1.5, 2.0))
    assert loose[0] > loose[2]
    assert dpsgd_rdp(100.0, 0.0588, 1, orders=(1.001, 1.5, 2.0)).epsilons[0] == pytest.approx(loose[2], rel=1e-12)


def test_conversion_uses_a_higher_order_bound_at_lower_orders() -> None:
    # Canonne-Kamath-Steinke: ε = ε_R + log(1 − 1/α) − (log δ + log α)/(α − 1); at δ = 1/2 order 2 beats order 10,
    # so the ∞ at order 2 replaced by order 10's bound 1.0 gives 1 + log(1/2) − (log(1/2) + log 2) = 1 − log 2
    eps, order = epsilon_from_rdp(np.array([2.0, 10.0]), np.array([math.inf, 1.0]), 0.5)
    assert eps == pytest.approx(1.0 - math.log(2.0), rel=1e-12) and order == 2.0
    without = 1.0 + math.log(0.9) - (math.log(0.5) + math.log(10.0)) / 9.0  # order 10 alone (before: 0.716)
    assert eps < without
    # δ at ε = 0.5: order 2 with bound 1: exp(1·(1 − 0.5 + log(1/2)) − log 2)
    delta, order = delta_from_rdp(np.array([2.0, 10.0]), np.array([math.inf, 1.0]), 0.5)
    assert delta == pytest.approx(math.exp(0.5 + math.log(0.5) - math.log(2.0)), rel=1e-12) and order == 2.0


@pytest.mark.parametrize("delta", [1e-5, 1e-2, 0.3])
def test_conversion_never_gets_worse(delta: float) -> None:
    rng = np.random.default_rng(7)
    orders = np.sort(rng.uniform(1.02, 200.0, 40))
    for _ in range(20):
        eps = rng.exponential(2.0, 40)
        eps[rng.random(40) < 0.2] = math.inf
        a = np.asarray(orders)
        closed = eps + np.log1p(-1.0 / a) - (math.log(delta) + np.log(a)) / (a - 1.0)  # the raw per-order form
        raw_best = max(0.0, float(np.min(np.where(np.isfinite(eps), closed, np.inf))))
        assert epsilon_from_rdp(orders, eps, delta)[0] <= raw_best + 1e-12
        shuffled = rng.permutation(40)  # any order of the grid: the envelope runs over increasing orders
        assert epsilon_from_rdp(orders[shuffled], eps[shuffled], delta)[0] == epsilon_from_rdp(orders, eps, delta)[0]


def test_domination_compares_envelopes() -> None:
    reference = custom_rdp([1.5, 2.0], [1.0, 1.0])
    assert rdp_dominated(custom_rdp([1.5, 2.0], [math.inf, 1.0]), reference)  # ∞ at 1.5 is bounded by order 2
    assert rdp_dominated(custom_rdp([1.5, 2.0], [0.9, 0.9]), custom_rdp([1.5, 2.0], [2.0, 0.9]))
    assert not rdp_dominated(custom_rdp([1.5, 2.0], [0.5, 1.5]), custom_rdp([1.5, 2.0], [2.0, 1.0]))


def test_a_candidate_at_q_one_half_now_gets_a_finite_sigma() -> None:
    # the README batch/epochs dry run's reference (digits: n_train 1079, batch 128 × 20 epochs, score noise 0.02 ×
    # 359 counts); before the envelope every σ ≤ 100 left ∞ at orders 1.25 and 1.5 and the candidate was refused
    reference = ReferenceRun(1 / 9, 180, 0.02 * 359)
    candidate = CandidateRun.from_batch(1079, 540, 5)
    assert candidate.sample_rate == 0.5
    sigma = dominating_sigma(candidate, reference, 1.7, orders=ORDERS, rtol=1e-3)
    assert 1.0 < sigma < 5.0
    ref = reference.rdp(1.7, ORDERS)
    assert np.all(reference.candidate_rdp(candidate, sigma, ORDERS).epsilons <= ref.epsilons)
    assert not np.all(reference.candidate_rdp(candidate, sigma * 0.99, ORDERS).epsilons <= ref.epsilons)
    raw = _dp_accounting(sigma, 0.5, ORDERS)
    assert np.isinf(raw[:2]).all()  # what the comparison used to see
    with pytest.raises(DominanceError, match="cannot be dominated"):  # a cap below the answer still refuses
        dominating_sigma(candidate, reference, 1.7, orders=ORDERS, sigma_cap=sigma * 0.9, rtol=1e-3)

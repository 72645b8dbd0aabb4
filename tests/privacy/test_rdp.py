from __future__ import annotations

import numpy as np
import pytest

from dphypo.privacy import (
    DEFAULT_ORDERS,
    RdpCurve,
    compose,
    custom_rdp,
    dpsgd_rdp,
    gaussian_rdp,
    pure_dp_rdp,
    zero_rdp,
)


def test_default_orders_are_dense_from_near_one_to_1024() -> None:
    assert DEFAULT_ORDERS[0] < 1.01 and DEFAULT_ORDERS[-1] >= 1024
    assert np.all(np.diff(DEFAULT_ORDERS) > 0)
    assert np.sum(DEFAULT_ORDERS < 1.1) >= 5  # fractional orders near 1


@pytest.mark.parametrize(
    ("sigma", "q", "steps"), [(0.71, 256 / 60000, 2344), (1.1, 0.01, 500), (3.0, 0.5, 10)]
)
def test_dpsgd_against_opacus_rdp_analysis(sigma: float, q: float, steps: int) -> None:
    """Cross-library oracle: dp_accounting (our source) against Opacus's independent implementation.

    Equal at integer orders; at fractional orders dp_accounting's series sums |binomial terms| and so is an upper
    bound (never less private), and the difference does not matter for a search's total ε.
    """
    from opacus.accountants.analysis.rdp import compute_rdp

    from dphypo.privacy import RepeatAndSelect, account, geometric

    ours = dpsgd_rdp(sigma, q, steps)
    theirs = compute_rdp(q=q, noise_multiplier=sigma, steps=steps, orders=DEFAULT_ORDERS)
    integer = np.round(DEFAULT_ORDERS) == DEFAULT_ORDERS
    np.testing.assert_allclose(ours.epsilons[integer], theirs[integer], rtol=1e-9)
    assert np.all(ours.epsilons >= theirs * (1 - 1e-12))
    search = RepeatAndSelect(geometric(0.01), 2.0, 0.75)
    exact = account(custom_rdp(DEFAULT_ORDERS, theirs), search, 1e-5, adaptive_theorem="A").epsilon
    assert account(ours, search, 1e-5, adaptive_theorem="A").epsilon == pytest.approx(exact, rel=1e-4)
    # Theorem B (the default) uses every order of the curve, so dp_accounting's looser fractional orders count a
    # little more (computed: 2.8e-4 relative at σ = 3, q = 0.5, 10 steps)
    exact = account(custom_rdp(DEFAULT_ORDERS, theirs), search, 1e-5).epsilon
    assert account(ours, search, 1e-5).epsilon == pytest.approx(exact, rel=1e-3)


def test_dpsgd_is_linear_in_steps_and_decreasing_in_sigma() -> None:
    one = dpsgd_rdp(1.0, 0.01, 1)
    np.testing.assert_allclose(dpsgd_rdp(1.0, 0.01, 37).epsilons, 37 * one.epsilons, rtol=1e-12)
    assert np.all(dpsgd_rdp(1.2, 0.01, 10).epsilons <= dpsgd_rdp(1.0, 0.01, 10).epsilons)


def test_full_batch_dpsgd_is_the_gaussian_mechanism() -> None:
    orders = [2.0, 3.0, 10.0]
    np.testing.assert_allclose(
        dpsgd_rdp(2.0, 1.0, 5, orders=orders).epsilons, gaussian_rdp(2.0, count=5, orders=orders).epsilons
    )


def test_gaussian_and_pure_closed_forms() -> None:
    g = gaussian_rdp(2.0, sensitivity=0.5, count=3)
    np.testing.assert_allclose(g.epsilons, 3 * DEFAULT_ORDERS * 0.25 / 8)
    p = pure_dp_rdp(0.5)
    assert p.pure_epsilon == 0.5
    np.testing.assert_allclose(p.epsilons, np.minimum(0.5, DEFAULT_ORDERS * 0.125))


def test_composition_adds_and_keeps_pure_only_when_all_pure() -> None:
    a, b = pure_dp_rdp(0.3), pure_dp_rdp(0.2)
    ab = a + b
    np.testing.assert_allclose(ab.epsilons, a.epsilons + b.epsilons)
    assert ab.pure_epsilon == pytest.approx(0.5)
    assert compose(a, gaussian_rdp(1.0)).pure_epsilon is None
    rep = a.repeated(4)
    np.testing.assert_allclose(rep.epsilons, 4 * a.epsilons)
    assert rep.pure_epsilon == pytest.approx(1.2)
    with pytest.raises(ValueError, match="same orders"):
        compose(gaussian_rdp(1.0), gaussian_rdp(1.0, orders=[2.0, 3.0]))


def test_monotone_envelope() -> None:
    curve = custom_rdp([1.5, 2.0, 4.0, 8.0], [3.0, 1.0, 2.0, 1.5])
    np.testing.assert_allclose(curve.monotone().epsilons, [1.0, 1.0, 1.5, 1.5])
    assert zero_rdp().pure_epsilon == 0.0


def test_curves_are_immutable() -> None:
    curve = gaussian_rdp(1.0)
    with pytest.raises(ValueError):
        curve.epsilons[0] = 0.0


@pytest.mark.parametrize(
    ("orders", "eps", "message"),
    [
        ([], [], "empty"),
        ([1.0, 2.0], [0.1, 0.2], "> 1"),
        ([2.0, 1.5], [0.1, 0.2], "increasing"),
        ([2.0, 3.0], [0.1, -0.2], "non-negative"),
        ([2.0, 3.0], [0.1], "same length"),
    ],
)
def test_curve_validation(orders, eps, message) -> None:
    with pytest.raises(ValueError, match=message):
        RdpCurve(np.array(orders), np.array(eps))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(sigma=0.0, sample_rate=0.1, steps=1), "sigma"),
        (dict(sigma=1.0, sample_rate=1.5, steps=1), "sample_rate"),
        (dict(sigma=1.0, sample_rate=0.0, steps=1), "sample_rate"),
        (dict(sigma=1.0, sample_rate=0.1, steps=0), "steps"),
        (dict(sigma=1.0, sample_rate=0.1, steps=2.5), "steps"),
    ],
)
def test_dpsgd_validation(kwargs, message) -> None:
    with pytest.raises(ValueError, match=message):
        dpsgd_rdp(**kwargs)

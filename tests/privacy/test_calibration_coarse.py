"""Coarse-to-fine calibration (issue #30 item 6): the full-precision answer, found with few fine evaluations."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from dphypo.privacy import RepeatAndSelect, geometric
from dphypo.privacy.calibration import (
    COARSE_ORDERS,
    CalibrationError,
    calibrate_dpsgd_sigma,
    coarse_orders,
    coarse_to_fine_sigma,
    refine_sigma,
    smallest_sigma,
)
from dphypo.privacy.dpsgd_run import dpsgd_run_rdp
from dphypo.privacy.rdp import DEFAULT_ORDERS, RdpCurve
from dphypo.privacy.two_stage import FinalRun, ProbeRelease, TwoStageCalibration, calibrate_two_stage

RTOL = 1e-4
#: A smaller fine grid keeps the full-precision comparisons fast (every other default order up to 64: 120 orders).
GRID = DEFAULT_ORDERS[DEFAULT_ORDERS <= 64][::2]


class Counted:
    """A non-increasing ε(σ) with a known root, counting its evaluations."""

    def __init__(self, root: float, power: float = 1.5) -> None:
        self.root, self.power, self.calls = root, power, 0

    def __call__(self, sigma: float) -> float:
        self.calls += 1
        return 4.0 * (self.root / sigma) ** self.power


def _check_answer(epsilon_at: Counted, sigma: float, target: float = 4.0) -> None:
    assert epsilon_at(sigma) <= target  # certified
    assert epsilon_at(sigma / (1.0 + RTOL)) > target  # and within rtol of the smallest σ
    assert sigma / epsilon_at.root - 1.0 <= RTOL


@pytest.mark.parametrize("start", [1.2, 1.25, 0.5, 40.0, 0.011])
def test_refine_closes_the_bracket_from_any_guess(start: float) -> None:
    fine = Counted(1.23)
    _check_answer(fine, refine_sigma(fine, 4.0, start, rtol=RTOL))


def test_refine_needs_few_evaluations_from_a_close_guess() -> None:
    fine = Counted(1.23)
    sigma = refine_sigma(fine, 4.0, 1.23 * 1.003, slope=-6.0, rtol=RTOL)
    assert fine.calls <= 3
    _check_answer(fine, sigma)


def test_refine_returns_the_smallest_sigma_when_it_meets_the_target_and_refuses_past_the_largest() -> None:
    assert refine_sigma(Counted(0.001), 4.0, 1.0, rtol=RTOL, sigma_bounds=(0.01, 100.0)) == 0.01
    with pytest.raises(CalibrationError, match="needs σ > 100"):
        refine_sigma(Counted(1000.0), 4.0, 1.0, rtol=RTOL, sigma_bounds=(0.01, 100.0))


@pytest.mark.parametrize("bias", [1.05, 0.97, 1.0])  # a coarse accounting above, below (no bound at all), exact
def test_coarse_to_fine_answer_is_the_fine_one_whatever_the_coarse_accounting(bias: float) -> None:
    fine = Counted(2.0)
    coarse = Counted(2.0 * bias, power=1.4)
    sigma = coarse_to_fine_sigma(fine, coarse, 4.0, rtol=RTOL)
    _check_answer(fine, sigma)
    assert fine.calls <= 6  # three or four fine evaluations here, against Brent's ~ten


def test_coarse_orders_are_a_subset_with_both_ends() -> None:
    assert set(COARSE_ORDERS) <= set(DEFAULT_ORDERS) and 40 <= COARSE_ORDERS.size <= 60
    assert COARSE_ORDERS[0] == DEFAULT_ORDERS[0] and COARSE_ORDERS[-1] == DEFAULT_ORDERS[-1]
    grid = DEFAULT_ORDERS[DEFAULT_ORDERS <= 32]
    trimmed = coarse_orders(grid)
    assert set(trimmed) <= set(grid) and trimmed[-1] == grid[-1]


@pytest.mark.parametrize("search", [RepeatAndSelect(geometric(0.1)), RepeatAndSelect(geometric(0.1), 1.5, 1.0)],
                         ids=["uniform-with-profiles", "theorem-b"])
def test_dpsgd_calibration_matches_the_full_precision_search(search: RepeatAndSelect) -> None:
    """The new σ is within rtol of the previous algorithm's (Brent on the full accounting), with fewer evaluations."""
    args = (6.0, 1e-5, 0.05, 20, search)
    new = calibrate_dpsgd_sigma(*args, score_noise=5.0, orders=GRID)
    old = calibrate_dpsgd_sigma(*args, score_noise=5.0, orders=GRID, coarse=False)
    assert new.report.epsilon <= 6.0 and old.report.epsilon <= 6.0
    assert abs(new.sigma / old.sigma - 1.0) <= 2 * RTOL  # both within rtol of the same root
    assert new.sigma <= old.sigma * (1.0 + RTOL)  # never more noise than before beyond the tolerance
    assert new.evaluations < old.evaluations


def _two_stage(epsilon: float, coarse: bool) -> TwoStageCalibration:
    def curves(steps: int, orders: np.ndarray) -> Callable[[float], RdpCurve]:
        return lambda s: dpsgd_run_rdp(s, 0.05, steps, score_noise=5.0, orders=orders)

    options = {}
    if coarse:
        options = {"coarse_probe_for_sigma": curves(8, coarse_orders(GRID)),
                   "coarse_final_for_sigma": curves(40, coarse_orders(GRID))}
    return calibrate_two_stage(epsilon, 1e-5, ProbeRelease(5), FinalRun(), curves(8, GRID), curves(40, GRID),
                               **options)


def test_two_stage_calibration_matches_the_full_precision_search() -> None:
    new, old = _two_stage(8.0, coarse=True), _two_stage(8.0, coarse=False)
    assert new.report.epsilon <= 8.0
    for mine, theirs in ((new.probe_sigma, old.probe_sigma), (new.final_sigma, old.final_sigma)):
        assert abs(mine / theirs - 1.0) <= 5 * RTOL


@pytest.mark.parametrize("coarse", [True, False])
def test_two_stage_refuses_a_budget_that_does_not_determine_the_noise(coarse: bool) -> None:
    """Issue #30 item 7: ε = 1e308 trained at σ 5e-7 and reported ε 2.8e14; single-stage refuses it, so does this."""
    with pytest.raises(CalibrationError, match="does not determine the noise") as err:
        _two_stage(1e308, coarse=coarse)
    assert "\n" not in str(err.value)


def test_smallest_sigma_is_unchanged() -> None:
    """The full-precision root finder (what coarse=False uses) keeps its guarantee."""
    fine = Counted(3.0)
    _check_answer(fine, smallest_sigma(fine, 4.0, rtol=RTOL))
    assert math.isfinite(fine.root)


def test_the_domination_margin_has_the_sign_of_rdp_dominated_and_its_root_is_the_bisections() -> None:
    """heterogeneous.dominating_sigma finds σ_i as the root of a margin: same answer as bisection on rdp_dominated."""
    from dphypo.privacy import heterogeneous

    candidates = [heterogeneous.CandidateRun.from_batch(1437, b, e) for b, e in ((32, 5), (128, 5), (128, 20))]
    reference = heterogeneous.reference_for(candidates, 5.0)
    ref_curve = reference.rdp(1.7, GRID)
    for candidate in candidates[:2]:
        for sigma in (0.8, 1.2, 1.5, 2.0, 3.0):
            curve = reference.candidate_rdp(candidate, sigma, GRID)
            assert (heterogeneous._rdp_margin(curve, ref_curve) <= 0.0) == heterogeneous.rdp_dominated(curve, ref_curve)

        def ok(s: float, candidate: heterogeneous.CandidateRun = candidate) -> bool:
            return heterogeneous.rdp_dominated(reference.candidate_rdp(candidate, s, GRID), ref_curve)

        sigma = heterogeneous.dominating_sigma(candidate, reference, 1.7, orders=GRID, rtol=RTOL)
        bisection = heterogeneous._smallest(ok, 1.7, 100.0, RTOL, candidate, "RDP")
        assert ok(sigma) and not ok(sigma / (1.0 + RTOL))
        assert abs(sigma / bisection - 1.0) <= 2 * RTOL

"""The calibration's shortcuts (issue #30.6) against the full accounting they stand for: same σ, same report.

``calibrate_sigma`` of an adaptive Theorem B search steers its coarse search by Theorem B's curve converted without
the uniform floor and the report's breakdown (``_SearchAtSigma.guide_epsilon``), and skips the full accounting at a
last point that a lower bound on ε already shows to exceed the target (``refine_sigma(exceeds=...)``); a reachable
target no longer evaluates the σ → ∞ floor. The reference is the same search with the shortcuts switched off (what
the code did before): every σ and every report must be the same numbers, and where the floor binds (forced here)
the answer must still be certified by the full accounting.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from dphypo.privacy import RepeatAndSelect, geometric
from dphypo.privacy import adaptive as ad
from dphypo.privacy import calibration as cal
from dphypo.privacy.dpsgd_run import dpsgd_run_rdp
from dphypo.privacy.rdp import DEFAULT_ORDERS, RdpCurve
from dphypo.privacy.tuning import TuningRdp

RTOL = 1e-4
GRID = DEFAULT_ORDERS[DEFAULT_ORDERS <= 64][::4]  # 60 orders: full-precision comparisons stay fast
COARSE = cal.coarse_orders(GRID)
ADAPTIVE = RepeatAndSelect(geometric(0.05), 1.5, 1.0)


def _curve(orders: np.ndarray) -> Any:
    return lambda s: dpsgd_run_rdp(s, 1 / 17, 34, score_noise=5.0, orders=orders)


def _calibrate(search: RepeatAndSelect = ADAPTIVE, epsilon: float = 6.0) -> cal.CalibrationResult:
    return cal.calibrate_sigma(epsilon, 1e-5, search, _curve(GRID), rtol=RTOL, coarse_curve_for_sigma=_curve(COARSE))


def _reference(monkeypatch: pytest.MonkeyPatch, search: RepeatAndSelect = ADAPTIVE, epsilon: float = 6.0
               ) -> cal.CalibrationResult:
    """The calibration with the shortcuts off: the full report steers the coarse search and decides every point."""
    with monkeypatch.context() as patch:
        patch.setattr(cal._SearchAtSigma, "has_unfloored", property(lambda self: False))
        return _calibrate(search, epsilon)


def test_shortcuts_give_the_same_sigma_and_report_bit_for_bit(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    original = cal._SearchAtSigma.unfloored_epsilon

    def counted(self: Any, sigma: float) -> float | None:
        calls.append(sigma)
        return original(self, sigma)

    monkeypatch.setattr(cal._SearchAtSigma, "unfloored_epsilon", counted)
    fast = _calibrate()
    assert calls  # the shortcuts were taken
    slow = _reference(monkeypatch)
    assert fast.sigma == slow.sigma  # the same float
    assert fast.report == slow.report and fast.report.epsilon <= 6.0
    assert fast.evaluations <= slow.evaluations


def test_unfloored_epsilon_is_the_report_where_the_floor_does_not_bind_and_below_it_where_it_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    at = cal._SearchAtSigma(ADAPTIVE, 1e-5, _curve(GRID), None, 0, "B")
    assert at.has_unfloored
    for sigma in (0.8, 1.5):
        assert at.unfloored_epsilon(sigma) == at.report(sigma).epsilon
    _force_floor(monkeypatch)
    for sigma in (0.8, 1.5):
        low, full = at.unfloored_epsilon(sigma), at.report(sigma).epsilon
        assert low is not None and low < full  # a lower bound, strictly below where the floor binds
    for other in (cal._SearchAtSigma(RepeatAndSelect(geometric(0.05)), 1e-5, _curve(GRID), None, 0, "B"),
                  cal._SearchAtSigma(ADAPTIVE, 1e-5, _curve(GRID), None, 0, "A"),
                  cal._SearchAtSigma(ADAPTIVE, 1e-5, _curve(GRID), None, 1, "B")):
        assert not other.has_unfloored and other.unfloored_epsilon(1.0) is None
        assert other.guide_epsilon(1.0) == other.report(1.0).epsilon


def _raised(tuned: TuningRdp) -> TuningRdp:
    curve = RdpCurve(tuned.curve.orders, tuned.curve.epsilons + 2.0, None, tuned.curve.label)
    return TuningRdp(curve, tuned.order_hat, tuned.constant, tuned.theorem)


def _force_floor(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the uniform floor bind: both uniform curves raised by 2 at every order (valid, looser bounds)."""
    printed, sharp = ad.dphypo_theorem1, ad.uniform_theorem_b

    def raised_printed(base: RdpCurve, run_count: Any, C: float, c: float) -> TuningRdp:
        tuned = printed(base, run_count, C, c)
        return _raised(tuned) if C == c == 1.0 else tuned

    def raised_sharp(base: RdpCurve, run_count: Any) -> TuningRdp | None:
        tuned = sharp(base, run_count)
        return None if tuned is None else _raised(tuned)

    monkeypatch.setattr(ad, "dphypo_theorem1", raised_printed)
    monkeypatch.setattr(ad, "uniform_theorem_b", raised_sharp)


def test_a_binding_floor_still_gives_a_certified_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the floor binds the guide is off and the last lower bound may differ: the fine accounting decides."""
    _force_floor(monkeypatch)
    fast = _calibrate()
    at = cal._SearchAtSigma(ADAPTIVE, 1e-5, _curve(GRID), None, 0, "B")
    assert at.report(fast.sigma).epsilon <= 6.0 and fast.report.epsilon <= 6.0  # certified at full precision
    assert at.report(fast.sigma / (1.0 + RTOL)).epsilon > 6.0  # and within rtol of the smallest such σ
    slow = _reference(monkeypatch)
    assert abs(fast.sigma / slow.sigma - 1.0) <= RTOL


@pytest.mark.parametrize("start", [1.23 * 1.003, 1.23 * 0.997, 1.5, 1.0])
def test_refine_with_a_sound_exceeds_test_returns_the_same_sigma(start: float) -> None:
    values: dict[float, float] = {}

    def fine(sigma: float) -> float:
        values[sigma] = 4.0 * (1.23 / sigma) ** 1.5
        return values[sigma]

    plain = cal.refine_sigma(fine, 4.0, start, slope=-6.0, rtol=RTOL)
    plain_calls = len(values)
    values.clear()
    asked = []

    def exceeds(sigma: float) -> bool:  # a lower bound on fine(σ) above the target
        asked.append(sigma)
        return 4.0 * (1.23 / sigma) ** 1.5 - 1e-9 > 4.0

    fast = cal.refine_sigma(fine, 4.0, start, slope=-6.0, rtol=RTOL, exceeds=exceeds)
    assert fast == plain
    assert len(values) == plain_calls - sum(s not in values for s in asked)  # each shortcut saves one evaluation


def test_the_exceeds_shortcut_is_taken_from_some_start() -> None:
    fine = lambda sigma: 4.0 * (1.23 / sigma) ** 1.5  # noqa: E731
    asked: list[float] = []
    cal.refine_sigma(fine, 4.0, 1.23 * 0.997, slope=-6.0, rtol=RTOL,
                     exceeds=lambda sigma: asked.append(sigma) or fine(sigma) > 4.0)
    assert asked


def test_a_wrong_exceeds_test_changes_the_answer() -> None:
    """The comparison above can fail: a test that claims an excess it cannot know stops the search too early."""
    fine = lambda sigma: 4.0 * (1.23 / sigma) ** 1.5  # noqa: E731
    right = cal.refine_sigma(fine, 4.0, 2.0, rtol=RTOL)
    wrong = cal.refine_sigma(fine, 4.0, 2.0, rtol=RTOL, exceeds=lambda sigma: True)
    assert right != wrong


def test_a_reachable_target_never_evaluates_the_infinite_noise_floor(monkeypatch: pytest.MonkeyPatch) -> None:
    floors = []
    original = cal._SearchAtSigma.infinite_noise_epsilon

    def counted(self: Any, sigma_max: float) -> float:
        floors.append(sigma_max)
        return original(self, sigma_max)

    monkeypatch.setattr(cal._SearchAtSigma, "infinite_noise_epsilon", counted)
    assert _calibrate().report.epsilon <= 6.0
    assert floors == []
    with pytest.raises(cal.CalibrationError, match="even with infinite noise"):
        _calibrate(epsilon=math.log(1.5) / 2)  # below what log(C/c) alone costs
    assert floors  # an unreachable one is still diagnosed by it


@pytest.mark.parametrize("pure", [None, 0.5])
def test_deltas_from_rdp_equals_the_loop_of_delta_from_rdp_bit_for_bit(pure: float | None) -> None:
    """Papernot-Steinke Theorem 6 with a PLD δ̂ converts at one ε̂ per order: one array operation, the same numbers."""
    from dphypo.privacy.conversion import delta_from_rdp, deltas_from_rdp

    for base in (dpsgd_run_rdp(1.3, 1 / 17, 170, score_noise=5.0), dpsgd_run_rdp(0.6, 0.05, 30, orders=GRID)):
        eps = base.epsilons.copy()
        eps[::7] = np.inf  # no bound at some orders
        targets = np.concatenate([np.log1p(1.0 / (base.orders - 1.0)), [0.0, 0.3, 0.5, 2.0, 40.0]])
        got = deltas_from_rdp(base.orders, eps, targets, pure_epsilon=pure)
        want = np.array([delta_from_rdp(base.orders, eps, float(t), pure_epsilon=pure)[0] for t in targets])
        assert np.array_equal(got, want)
        assert np.any((got > 0.0) & (got < 1.0)) and (pure is None or np.any(got == 0.0))
    with pytest.raises(ValueError, match="non-negative"):
        deltas_from_rdp(GRID, np.ones_like(GRID), np.array([0.1, -1.0]))


def test_papernot_steinke_theorem6_equals_its_loop_bit_for_bit() -> None:
    """Theorem 6's δ̂ per order, now converted at once, gives the curve of the loop it replaces."""
    from dphypo.privacy.conversion import delta_from_rdp
    from dphypo.privacy.rdp import nonnegative_bound
    from dphypo.privacy.run_counts import Poisson
    from dphypo.privacy.tuning import papernot_steinke_theorem6

    base, run_count = dpsgd_run_rdp(1.3, 1 / 17, 170, score_noise=5.0), Poisson(20.0)
    eps = np.empty_like(base.orders)
    for i, alpha in enumerate(base.orders):  # the loop before issue #30.6
        delta_hat, _ = delta_from_rdp(base.orders, base.epsilons, math.log1p(1.0 / (alpha - 1.0)))
        eps[i] = base.epsilons[i] + 20.0 * delta_hat + math.log(20.0) / (alpha - 1.0)
    want = RdpCurve(base.orders, nonnegative_bound(eps, "test"), None, "test").monotone().epsilons
    assert np.array_equal(papernot_steinke_theorem6(base, run_count).curve.epsilons, want)

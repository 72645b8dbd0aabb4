"""Noise calibration: the smallest noise multiplier σ whose whole search meets a total (ε, δ) target.

:func:`calibrate_sigma` searches σ under exactly the accounting a :class:`~dphypo.privacy.accounting.PrivacyAccounting`
reports (the minimum over every valid bound, lost attempts charged), so a calibrated σ always meets its target.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import optimize

from dphypo.privacy.accountant import account
from dphypo.privacy.accounting import PrivacyAccounting
from dphypo.privacy.dpsgd_run import dpsgd_run_profile, dpsgd_run_rdp
from dphypo.privacy.errors import DphypoError
from dphypo.privacy.profiles import profile_or_skipped
from dphypo.privacy.rdp import RdpCurve, zero_rdp
from dphypo.privacy.run_counts import Binomial
from dphypo.privacy.spec import PrivacyReport, RepeatAndSelect
from dphypo.privacy.validation import check_delta, check_positive

__all__ = [
    "CalibrationError",
    "CalibrationResult",
    "calibrate_dpsgd_sigma",
    "calibrate_sigma",
    "smallest_sigma",
]


class CalibrationError(DphypoError, ValueError):
    """The target (ε, δ) cannot be met by any noise level (or the bracket could not be found)."""


@dataclass(frozen=True)
class CalibrationResult:
    """A calibrated noise multiplier and the accounting it achieves.

    Attributes:
        sigma: The returned σ; it always meets the target (checked).
        report: The accounting at ``sigma``.
        sigma_tolerance: σ is within this of the smallest σ that meets the target (conservative side).
        evaluations: Number of accountant evaluations used.
    """

    sigma: float
    report: PrivacyReport
    sigma_tolerance: float
    evaluations: int


def calibrate_sigma(
    target_epsilon: float,
    delta: float,
    search: RepeatAndSelect,
    curve_for_sigma: Callable[[float], RdpCurve],
    *,
    profile_for_sigma: Callable[[float], Any] | None = None,
    rtol: float = 1e-4,
    sigma_bounds: tuple[float, float] = (1e-2, 1e4),
    max_lost: int = 0,
    adaptive_theorem: str = "B",
) -> CalibrationResult:
    """The smallest noise multiplier σ (to ``rtol``) whose search meets a total (ε, δ) target.

    ε(σ) is continuous and non-increasing in σ (every RDP bound is non-increasing in σ and every later step is
    monotone), so the boundary σ* is found with Brent's method on a bracket (expanded geometrically if needed).
    The returned σ is the root plus Brent's error bound, so it is never below σ*; it is verified to meet the
    target before it is returned.

    Args:
        target_epsilon: Total ε of the search.
        delta: δ ∈ (0, 1).
        search: Run-count distribution and density bounds.
        curve_for_sigma: Per-candidate RDP curve as a function of σ (e.g. DP-SGD composed with a score release).
        profile_for_sigma: Optional privacy profile of one candidate run as a function of σ; the calibration then
            meets the target under the same minimum over valid bounds that :func:`account` reports.
        rtol: Relative tolerance on σ.
        sigma_bounds: Smallest and largest σ considered.
        max_lost: Lost attempts charged up front (:attr:`~dphypo.privacy.accounting.PrivacyAccounting.max_lost`).
        adaptive_theorem: The bound for C > c (:attr:`~dphypo.privacy.accounting.PrivacyAccounting.adaptive_theorem`;
            default the proven Theorem B, ``"A"`` and ``"published"`` on request).

    Returns:
        The calibration.

    Raises:
        CalibrationError: If even σ → ∞ (a data-independent candidate) exceeds the target, or the target is
            met only outside ``sigma_bounds``.

    Example:
        The Gaussian-mechanism noise multiplier for a uniform search with geometric T of mean 10 and a total
        budget (ε, δ) = (4, 1e-5) (Theorem B at C = c = 1; Papernot-Steinke Theorem 2 alone would need σ = 2.159):

        >>> from dphypo.privacy import RepeatAndSelect, calibrate_sigma, gaussian_rdp, geometric
        >>> result = calibrate_sigma(4.0, 1e-5, RepeatAndSelect(geometric(0.1)), gaussian_rdp)
        >>> round(result.sigma, 3), result.report.epsilon <= 4.0, result.report.method
        (1.702, True, 'rdp-theorem-b')
    """
    check_positive("epsilon", target_epsilon)
    check_delta(delta)
    _check_rtol(rtol)
    at = _SearchAtSigma(search, delta, curve_for_sigma, profile_for_sigma, max_lost, adaptive_theorem)
    _check_reachable(at, target_epsilon, sigma_bounds)
    evaluations = 0

    def epsilon_at(sigma: float) -> float:
        nonlocal evaluations
        evaluations += 1
        return at.report(sigma).epsilon

    sigma = smallest_sigma(epsilon_at, target_epsilon, rtol=rtol, sigma_bounds=sigma_bounds)
    report = at.report(sigma)
    if report.epsilon > target_epsilon:  # pragma: no cover - smallest_sigma guarantees this
        raise CalibrationError(f"calibration failed to meet epsilon={target_epsilon:g}")
    if sigma == sigma_bounds[0]:  # never a silent floor: the target does not determine σ at all
        raise CalibrationError(
            f"target epsilon={target_epsilon:g} is met even at the smallest sigma considered ({sigma_bounds[0]:g}, "
            f"which gives ε = {report.epsilon:.4g}), so this budget does not determine the noise: pass sigma=... "
            "explicitly, or a smaller epsilon"
        )
    return CalibrationResult(sigma, report, sigma * rtol, evaluations)


def _check_rtol(rtol: float) -> None:
    if not (0.0 < rtol < 0.1):
        raise ValueError(f"rtol must be in (0, 0.1), got {rtol!r}")


@dataclass(frozen=True)
class _SearchAtSigma:
    """The accounting of one search as a function of the noise multiplier σ (what :func:`calibrate_sigma` inverts).

    Attributes are :func:`calibrate_sigma`'s arguments of the same names.
    """

    search: RepeatAndSelect
    delta: float
    curve_for_sigma: Callable[[float], RdpCurve]
    profile_for_sigma: Callable[[float], Any] | None
    max_lost: int
    adaptive_theorem: str

    def report(self, sigma: float) -> PrivacyReport:
        """The report a :class:`~dphypo.privacy.accounting.PrivacyAccounting` gives at σ (lost attempts charged)."""
        profile = _profile_at(self.profile_for_sigma, sigma)
        return PrivacyAccounting(self.search, self.curve_for_sigma(sigma), self.delta, profile=profile,
                                 max_lost=self.max_lost, adaptive_theorem=self.adaptive_theorem).account()

    def epsilon_without_charge(self, curve: RdpCurve, profile: Any = None) -> float:
        """ε of the search whose every run satisfies ``curve`` (and ``profile``), no lost attempt charged."""
        return account(curve, self.search, self.delta, profile=profile, adaptive_theorem=self.adaptive_theorem).epsilon

    def infinite_noise_epsilon(self, sigma_max: float) -> float:
        """ε in the σ → ∞ limit: a data-independent run (zero RDP curve); binomial T has only the profile route."""
        if isinstance(self.search.run_count, Binomial):
            return self.epsilon_without_charge(self.curve_for_sigma(sigma_max),
                                               _profile_at(self.profile_for_sigma, sigma_max))
        return self.epsilon_without_charge(zero_rdp(self.curve_for_sigma(1.0).orders))


def _check_reachable(at: _SearchAtSigma, target_epsilon: float, sigma_bounds: tuple[float, float]) -> None:
    """Refuse a target that no σ in ``sigma_bounds`` meets, saying why (before any root finding).

    Raises:
        CalibrationError: Even infinite noise exceeds the target (the run count and log(C/c) alone cost more), or
            the largest σ considered does, because a part of the run does not shrink with σ or the runs need more
            noise than that.
    """
    floor = at.infinite_noise_epsilon(sigma_bounds[1])
    if floor >= target_epsilon:
        raise CalibrationError(
            f"target epsilon={target_epsilon:g} is unreachable: with delta={at.delta:g} the search itself costs at "
            f"least ε = {floor:.4g} even with infinite noise (run-count and log(C/c) terms); raise epsilon, "
            "lower E[T], or narrow [c, C]"
        )
    top = at.report(sigma_bounds[1]).epsilon
    if top <= target_epsilon:
        return
    # Either a part of the run does not shrink with σ (e.g. a score release), or the run needs more noise than
    # the largest σ considered (e.g. very many steps): tell which by looking 1000 times further out.
    far = at.curve_for_sigma(sigma_bounds[1] * 1e3)  # RDP only: this decides a message, not a bound
    if at.epsilon_without_charge(far) > target_epsilon:
        reason = ("the per-run mechanism has a part that does not shrink with sigma (e.g. the score noise): "
                  "raise epsilon or add more noise to that part")
    else:
        reason = "the runs need more noise than that (e.g. fewer steps would help): raise epsilon"
    raise CalibrationError(
        f"target epsilon={target_epsilon:g} is unreachable: even σ = {sigma_bounds[1]:g} gives "
        f"ε = {top:.4g}; {reason}"
    )


def _profile_at(profile_for_sigma: Callable[[float], Any] | None, sigma: float) -> Any:
    """``profile_for_sigma(σ)`` through :func:`~dphypo.privacy.profiles.profile_or_skipped` (``None`` without one)."""
    return None if profile_for_sigma is None else profile_or_skipped(lambda: profile_for_sigma(sigma))


def smallest_sigma(
    epsilon_at: Callable[[float], float],
    target_epsilon: float,
    *,
    rtol: float = 1e-4,
    sigma_bounds: tuple[float, float] = (1e-2, 1e4),
) -> float:
    """The smallest σ (to ``rtol``, on the conservative side) with ``epsilon_at(σ) ≤ target_epsilon``.

    The root finding of :func:`calibrate_sigma`, for any total ε(σ) that is continuous and non-increasing in σ
    (e.g. the Koskela-Kulkarni total of :mod:`dphypo.privacy.subsampled`): a bracket grown geometrically from
    σ = 1, Brent's method in log σ, then the root plus Brent's error bound, stepped up until the target is met.
    The caller checks that the target is reachable at all (the σ → ∞ limit).

    Args:
        epsilon_at: Total ε as a function of σ.
        target_epsilon: The target.
        rtol: Relative tolerance on σ, in (0, 0.1).
        sigma_bounds: Smallest and largest σ considered (``sigma_bounds[0]`` is returned when it already meets
            the target).

    Returns:
        σ with ``epsilon_at(σ) ≤ target_epsilon``.

    Raises:
        CalibrationError: The target needs σ above ``sigma_bounds[1]``.
    """
    _check_rtol(rtol)

    def excess(log_sigma: float) -> float:
        return epsilon_at(math.exp(log_sigma)) - target_epsilon

    lo, hi = _bracket(excess, sigma_bounds, target_epsilon)
    if lo is None:
        return sigma_bounds[0]
    # Tolerance in log σ is a relative tolerance in σ.
    xtol = math.log1p(rtol)
    root = optimize.brentq(excess, lo, hi, xtol=xtol / 2.0, rtol=4 * np.finfo(float).eps)
    log_sigma = min(hi, root + xtol / 2.0)
    while excess(log_sigma) > 0.0:  # guard against non-smoothness from the order grid
        log_sigma = min(hi, log_sigma + xtol / 2.0)
    return math.exp(log_sigma)


def _bracket(
    excess: Callable[[float], float], sigma_bounds: tuple[float, float], target: float
) -> tuple[float | None, float]:
    """A bracket [lo, hi] in log σ with excess(lo) > 0 ≥ excess(hi), grown geometrically from σ = 1.

    Starting near typical σ and doubling/halving avoids evaluating extreme σ (a PLD at σ = 0.01 over thousands of
    steps is huge). Returns ``(None, log σ_min)`` when even the smallest σ meets the target.
    """
    lo_limit, hi_limit = math.log(sigma_bounds[0]), math.log(sigma_bounds[1])
    point = min(max(0.0, lo_limit), hi_limit)
    if excess(point) > 0.0:
        lo = point
        while True:
            hi = min(lo + math.log(2.0), hi_limit)
            if excess(hi) <= 0.0:
                return lo, hi
            if hi >= hi_limit:
                raise CalibrationError(
                    f"target epsilon={target:g} needs σ > {sigma_bounds[1]:g}; raise epsilon or the sigma bound"
                )
            lo = hi
    hi = point
    while True:
        lo = max(hi - math.log(2.0), lo_limit)
        if excess(lo) > 0.0:
            return lo, hi
        if lo <= lo_limit:
            return None, lo_limit
        hi = lo


def calibrate_dpsgd_sigma(
    target_epsilon: float,
    delta: float,
    sample_rate: float,
    steps: int,
    search: RepeatAndSelect,
    *,
    score_noise: float | None = None,
    orders: Iterable[float] | None = None,
    rtol: float = 1e-4,
    use_profiles: bool = True,
    max_lost: int = 0,
    adaptive_theorem: str = "B",
) -> CalibrationResult:
    """:func:`calibrate_sigma` for DP-SGD candidate runs, each releasing a noisy score (``dphypo tune``'s runs).

    Every run is accounted exactly as ``dphypo tune`` accounts it (:mod:`dphypo.privacy.dpsgd_run`): RDP of
    DP-SGD composed with the Gaussian score release, and for a uniform search also the privacy profile of the
    same composition, so ``dphypo calibrate`` finds the σ that ``dphypo tune`` uses.

    Args:
        target_epsilon: Total ε of the search.
        delta: δ ∈ (0, 1).
        sample_rate: Poisson sampling rate q ∈ (0, 1].
        steps: DP-SGD steps per run.
        search: Run-count distribution and density bounds.
        score_noise: Std (in counts) of the Gaussian noise on each run's released score count (sensitivity 1);
            ``None`` when no score is released privately.
        orders: RDP order grid.
        rtol: Relative tolerance on σ.
        use_profiles: For a uniform search, also use the privacy-profile bounds (the run's PLD, see
            :func:`~dphypo.privacy.dpsgd_run.dpsgd_run_profile`; too large a PLD is skipped, RDP only).
        max_lost: Lost attempts charged up front (:attr:`~dphypo.privacy.accounting.PrivacyAccounting.max_lost`).
        adaptive_theorem: The bound for C > c (:attr:`~dphypo.privacy.accounting.PrivacyAccounting.adaptive_theorem`).

    Returns:
        The calibration.
    """
    grid = None if orders is None else np.asarray(list(orders), dtype=np.float64)

    def curve(sigma: float) -> RdpCurve:
        return dpsgd_run_rdp(sigma, sample_rate, steps, score_noise=score_noise, orders=grid)

    curve(1.0)  # validate sample_rate/steps/score_noise eagerly, before any root finding
    profile_for_sigma = None
    if use_profiles and not search.adaptive:  # profile bounds are proven for uniform searches only (KRW 2024)
        def profile_for_sigma(sigma: float) -> Any:  # a PLD too large is skipped by calibrate_sigma
            return dpsgd_run_profile(sigma, sample_rate, steps, score_noise=score_noise)

    return calibrate_sigma(target_epsilon, delta, search, curve, profile_for_sigma=profile_for_sigma, rtol=rtol,
                           max_lost=max_lost, adaptive_theorem=adaptive_theorem)

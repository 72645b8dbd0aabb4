"""Noise calibration: the smallest noise multiplier σ whose whole search meets a total (ε, δ) target.

:func:`calibrate_sigma` searches σ under exactly the accounting a :class:`~dphypo.privacy.accounting.PrivacyAccounting`
reports (the minimum over every valid bound, lost attempts charged), so a calibrated σ always meets its target.

**Coarse to fine.** One evaluation at the accountant's full precision (280 RDP orders, PLDs at discretisation 1e-4)
takes seconds, and a root finding needs a dozen. Given a *coarse* accounting as well (:data:`COARSE_ORDERS`, PLDs at
:data:`COARSE_DISCRETIZATION`: ~10× cheaper, within ~0.5 % of the fine ε), :func:`coarse_to_fine_sigma` finds the
coarse root first and then :func:`refine_sigma` closes a bracket ``fine(lo) > ε ≥ fine(hi)`` with
``hi / lo ≤ 1 + rtol`` using the fine accounting only (typically three evaluations: the fine value at the coarse
root, then secant steps with the slope of the coarse curve). The returned σ is ``hi``: it meets the target at full
precision (that evaluation *is* its certificate) and is within ``rtol`` of the fine root, whatever the coarse
accounting got wrong. Nothing about the coarse accounting needs to be a bound.

An adaptive Theorem B search (C > c) accounts two Theorem B curves per σ: its own and, for the uniform floor of
:func:`~dphypo.privacy.adaptive.adaptive_rdp` and the report's breakdown, the one at C = c = 1. The coarse search is
steered by the first alone (:meth:`_SearchAtSigma.guide_epsilon`), and a last fine point whose excess would close
the bracket is decided by it too (it is a lower bound on the full ε, so an excess it shows is one: the same decision,
``refine_sigma(exceeds=...)``); every other fine point is the full accounting. The σ and the report are therefore
those of the full search bit for bit wherever the floor does not bind on the coarse curves (every case measured),
and otherwise still decided and certified at full precision (tests/privacy/test_calibration_fast.py).
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
from dphypo.privacy.adaptive import theorem_b
from dphypo.privacy.conversion import epsilon_from_rdp
from dphypo.privacy.dpsgd_run import dpsgd_run_profile, dpsgd_run_rdp
from dphypo.privacy.errors import DphypoError
from dphypo.privacy.profiles import profile_or_skipped
from dphypo.privacy.rdp import DEFAULT_ORDERS, RdpCurve, zero_rdp
from dphypo.privacy.run_counts import Binomial, TruncatedNegativeBinomial
from dphypo.privacy.spec import PrivacyReport, RepeatAndSelect
from dphypo.privacy.validation import check_delta, check_positive

__all__ = [
    "COARSE_DISCRETIZATION",
    "COARSE_ORDERS",
    "CalibrationError",
    "CalibrationResult",
    "calibrate_dpsgd_sigma",
    "calibrate_sigma",
    "coarse_orders",
    "coarse_to_fine_sigma",
    "refine_sigma",
    "smallest_sigma",
]


def _coarse_orders() -> np.ndarray:
    """Every sixth default order and the largest: 48 orders over the same range (:data:`COARSE_ORDERS`)."""
    orders = np.unique(np.append(DEFAULT_ORDERS[::6], DEFAULT_ORDERS[-1]))
    orders.flags.writeable = False
    return orders


#: The order grid of the coarse accounting a calibration's bracket and first root are found on (a subset of
#: :data:`~dphypo.privacy.DEFAULT_ORDERS`, ~6× cheaper per DP-SGD curve and ~30× per Theorem B bound; the conversion's
#: ε moves by < 0.5 % on it). Never used for a reported ε.
COARSE_ORDERS: np.ndarray = _coarse_orders()

#: PLD discretisation of the coarse accounting (the fine one is
#: :data:`~dphypo.privacy.dpsgd_run.RUN_PROFILE_DISCRETIZATION`, 1e-4): ~15× cheaper on the default final run (170
#: steps), its ε within ~1e-4 relative of the fine one there.
COARSE_DISCRETIZATION = 3e-3

#: Relative tolerance of the coarse root (the fine refinement takes it to the caller's ``rtol``).
_COARSE_RTOL = 1e-3


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
    coarse_curve_for_sigma: Callable[[float], RdpCurve] | None = None,
    coarse_profile_for_sigma: Callable[[float], Any] | None = None,
    split_for_sigma: Callable[[float], Any] | None = None,
    coarse_split_for_sigma: Callable[[float], Any] | None = None,
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
        coarse_curve_for_sigma: A cheap approximation of ``curve_for_sigma`` (e.g. on :data:`COARSE_ORDERS`); with
            it the search runs coarse to fine (:func:`coarse_to_fine_sigma`: the answer is still found and certified
            at full precision). ``None``: Brent's method on the full accounting throughout.
        coarse_profile_for_sigma: A cheap approximation of ``profile_for_sigma`` (e.g. a PLD at
            :data:`COARSE_DISCRETIZATION`), used with ``coarse_curve_for_sigma``; defaults to ``profile_for_sigma``.
        split_for_sigma: Under a per-record split, the run's two parts at σ
            (:class:`~dphypo.privacy.split_account.SplitParts`, composing to ``curve_for_sigma(σ)``'s event): every
            evaluation is then the split accounting (Theorem S, docs/proofs/split.md), ``profile_for_sigma`` unused.
        coarse_split_for_sigma: A cheap approximation of ``split_for_sigma`` (on the coarse curve's orders), used with
            ``coarse_curve_for_sigma``; defaults to ``split_for_sigma``.

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
    at = _SearchAtSigma(search, delta, curve_for_sigma, profile_for_sigma, max_lost, adaptive_theorem,
                        split_for_sigma)
    coarse = None
    if coarse_curve_for_sigma is not None:
        coarse_profile = profile_for_sigma if coarse_profile_for_sigma is None else coarse_profile_for_sigma
        coarse_split = split_for_sigma if coarse_split_for_sigma is None else coarse_split_for_sigma
        coarse = _SearchAtSigma(search, delta, coarse_curve_for_sigma,
                                None if profile_for_sigma is None else coarse_profile, max_lost, adaptive_theorem,
                                None if split_for_sigma is None else coarse_split)
    _check_reachable(at, target_epsilon, sigma_bounds, coarse)
    reports: dict[float, PrivacyReport] = {}

    def report_at(sigma: float) -> PrivacyReport:
        if sigma not in reports:
            reports[sigma] = at.report(sigma)
        return reports[sigma]

    def epsilon_at(sigma: float) -> float:
        return report_at(sigma).epsilon

    if coarse is None:
        sigma = smallest_sigma(epsilon_at, target_epsilon, rtol=rtol, sigma_bounds=sigma_bounds)
    else:
        def exceeds(sigma: float) -> bool:  # a lower bound on the full ε above the target: an excess, certainly
            value = at.unfloored_epsilon(sigma)
            return value is not None and value > target_epsilon

        sigma = coarse_to_fine_sigma(epsilon_at, coarse.guide_epsilon, target_epsilon, rtol=rtol,
                                     sigma_bounds=sigma_bounds, exceeds=exceeds if at.has_unfloored else None)
    evaluations = len(reports)
    report = report_at(sigma)
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
    split_for_sigma: Callable[[float], Any] | None = None

    def report(self, sigma: float) -> PrivacyReport:
        """The report a :class:`~dphypo.privacy.accounting.PrivacyAccounting` gives at σ (lost attempts charged)."""
        if self.split_for_sigma is not None:  # per-record split: each side by every bound, the worse side
            return PrivacyAccounting(self.search, self.curve_for_sigma(sigma), self.delta, max_lost=self.max_lost,
                                     adaptive_theorem=self.adaptive_theorem,
                                     split=self.split_for_sigma(sigma)).account()
        profile = _profile_at(self.profile_for_sigma, sigma)
        return PrivacyAccounting(self.search, self.curve_for_sigma(sigma), self.delta, profile=profile,
                                 max_lost=self.max_lost, adaptive_theorem=self.adaptive_theorem).account()

    @property
    def has_unfloored(self) -> bool:
        """Whether :meth:`unfloored_epsilon` has a value (an adaptive Theorem B search, see there)."""
        search = self.search
        return (search.adaptive and self.adaptive_theorem == "B" and isinstance(search.run_count,
                                                                                TruncatedNegativeBinomial)
                and self.split_for_sigma is None and self.profile_for_sigma is None and not self.max_lost)

    def unfloored_epsilon(self, sigma: float) -> float | None:
        """A lower bound on ``report(σ).epsilon``, without the second Theorem B it needs, or ``None``.

        An adaptive search (C > c) accounted by Theorem B with TNB T (no split, no lost attempt charged, no profile)
        has one bound: Theorem B's curve, floored order by order at the uniform curve
        (:func:`~dphypo.privacy.adaptive.adaptive_rdp`; the floor needs Theorem B at C = c = 1 wherever the printed
        uniform curve exceeds Theorem B's, and so does the report's breakdown). This is ε of the curve before the
        floor: the floor only raises the curve and the conversion is non-decreasing in it, so the value is at most
        ``report(σ).epsilon``, and bit for bit equal to it where the floor does not bind (the README settings and
        every σ of ``benchmarks/calibration.py``). ``None`` for any other search.
        """
        if not self.has_unfloored:
            return None
        search, run_count = self.search, self.search.run_count
        assert isinstance(run_count, TruncatedNegativeBinomial)  # has_unfloored
        curve = theorem_b(self.curve_for_sigma(sigma), run_count, search.C, search.c).curve
        return epsilon_from_rdp(curve.orders, curve.epsilons, self.delta, pure_epsilon=curve.pure_epsilon)[0]

    def guide_epsilon(self, sigma: float) -> float:
        """``report(σ).epsilon`` for the coarse search: :meth:`unfloored_epsilon` where it exists (never a certificate).

        Only the coarse search is steered by it (issue #30.6: a coarse accounting need not be a bound): every σ
        returned is decided and certified by the full accounting (:func:`coarse_to_fine_sigma`).
        """
        value = self.unfloored_epsilon(sigma)
        return self.report(sigma).epsilon if value is None else value

    def epsilon_without_charge(self, curve: RdpCurve, profile: Any = None) -> float:
        """ε of the search whose every run satisfies ``curve`` (and ``profile``), no lost attempt charged."""
        return account(curve, self.search, self.delta, profile=profile, adaptive_theorem=self.adaptive_theorem).epsilon

    def infinite_noise_epsilon(self, sigma_max: float) -> float:
        """ε in the σ → ∞ limit: a data-independent run (zero RDP curve); binomial T has only the profile route."""
        if isinstance(self.search.run_count, Binomial):
            return self.epsilon_without_charge(self.curve_for_sigma(sigma_max),
                                               _profile_at(self.profile_for_sigma, sigma_max))
        return self.epsilon_without_charge(zero_rdp(self.curve_for_sigma(1.0).orders))


def _check_reachable(at: _SearchAtSigma, target_epsilon: float, sigma_bounds: tuple[float, float],
                     coarse: _SearchAtSigma | None = None) -> None:
    """Refuse a target that no σ in ``sigma_bounds`` meets, saying why (before any root finding).

    With a ``coarse`` accounting the σ → ∞ floor and the largest σ are tried on it first; only a coarse excess is
    confirmed at full precision before refusing (a target met there coarsely but not finely is refused by the root
    finding).

    Raises:
        CalibrationError: Even infinite noise exceeds the target (the run count and log(C/c) alone cost more), or
            the largest σ considered does, because a part of the run does not shrink with σ or the runs need more
            noise than that.
    """
    # A target the coarse accounting meets at the largest σ is reachable there (the σ → ∞ floor is below it): the floor,
    # which only decides the message below, is then not evaluated (issue #30.6: Theorem B on the zero curve costs
    # three coarse accountings). A target that only the coarse accounting meets is refused by the root finding.
    if coarse is not None and coarse.guide_epsilon(sigma_bounds[1]) <= target_epsilon:
        return
    # The σ → ∞ floor only decides this message: when the coarse accounting meets the target there, the fine one is
    # not asked (a target that only the coarse accounting meets is refused by the root finding, as below).
    coarse_floor = None if coarse is None else coarse.infinite_noise_epsilon(sigma_bounds[1])
    floor = at.infinite_noise_epsilon(sigma_bounds[1]) if coarse_floor is None or coarse_floor >= target_epsilon \
        else coarse_floor
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


def coarse_to_fine_sigma(
    epsilon_at: Callable[[float], float],
    coarse_epsilon_at: Callable[[float], float],
    target_epsilon: float,
    *,
    rtol: float = 1e-4,
    sigma_bounds: tuple[float, float] = (1e-2, 1e4),
    exceeds: Callable[[float], bool] | None = None,
) -> float:
    """:func:`smallest_sigma` of ``epsilon_at``, searched on a cheap ``coarse_epsilon_at`` and finished on the fine one.

    The coarse root (to 1e-3 or ``rtol``, by :func:`smallest_sigma`) is where :func:`refine_sigma` starts; the coarse
    curve's local slope (one more coarse evaluation) steers its first secant step. Only ``epsilon_at`` decides the
    answer: the returned σ has ``epsilon_at(σ) ≤ target_epsilon`` and ``epsilon_at(σ / (1 + rtol)) > target_epsilon``
    (or σ is ``sigma_bounds[0]``), exactly the guarantee of :func:`smallest_sigma`, so a coarse accounting that
    is off (even one that is no bound at all) costs fine evaluations, never correctness.

    Args:
        epsilon_at: Total ε as a function of σ at full precision, continuous and non-increasing.
        coarse_epsilon_at: A cheap approximation of it.
        target_epsilon: The target.
        rtol: Relative tolerance on σ, in (0, 0.1).
        sigma_bounds: Smallest and largest σ considered.
        exceeds: A cheap sufficient test of ``epsilon_at(σ) > target_epsilon`` (:func:`refine_sigma`), or ``None``.

    Returns:
        σ with ``epsilon_at(σ) ≤ target_epsilon``, within ``rtol`` of the smallest such σ.

    Raises:
        CalibrationError: The target needs σ above ``sigma_bounds[1]``.
    """
    _check_rtol(rtol)
    # Each accounting is a pure function of σ, and the searches below ask some σ twice (the coarse root again for the
    # slope; a fine point again after the secant steps): each σ is evaluated once (issue #30.6).
    epsilon_at, coarse_epsilon_at = _evaluated_once(epsilon_at), _evaluated_once(coarse_epsilon_at)
    try:
        start = smallest_sigma(coarse_epsilon_at, target_epsilon, rtol=max(rtol, _COARSE_RTOL),
                               sigma_bounds=sigma_bounds)
    except CalibrationError:  # the coarse accounting needs more noise than the bound: ask the fine one there
        start = sigma_bounds[1]
    step = 0.01  # the coarse slope d ε / d log σ, from a point 1 % below (the coarse ε is cheap)
    low = max(start * math.exp(-step), sigma_bounds[0])
    slope = None
    if low < start:
        slope = (coarse_epsilon_at(start) - coarse_epsilon_at(low)) / math.log(start / low)
    return refine_sigma(epsilon_at, target_epsilon, start, slope=slope, rtol=rtol, sigma_bounds=sigma_bounds,
                        exceeds=exceeds)


def _evaluated_once(epsilon_at: Callable[[float], float]) -> Callable[[float], float]:
    """``epsilon_at`` remembering its values by σ (a deterministic accounting: the same σ gives the same ε)."""
    values: dict[float, float] = {}

    def once(sigma: float) -> float:
        if sigma not in values:
            values[sigma] = epsilon_at(sigma)
        return values[sigma]

    return once


def refine_sigma(
    epsilon_at: Callable[[float], float],
    target_epsilon: float,
    start: float,
    *,
    slope: float | None = None,
    rtol: float = 1e-4,
    sigma_bounds: tuple[float, float] = (1e-2, 1e4),
    max_steps: int = 8,
    exceeds: Callable[[float], bool] | None = None,
) -> float:
    """The smallest σ (to ``rtol``, conservative side) with ``epsilon_at(σ) ≤ target_epsilon``, searched from a guess.

    Safeguarded secant steps in log σ from ``start``: each fine evaluation narrows a bracket ``[lo, hi]`` with
    ``epsilon_at(lo) > target ≥ epsilon_at(hi)``; the next point is the secant (first step: ``slope``) root, pushed a
    quarter of the tolerance towards the side still open, so that a good guess closes the bracket in two or three
    evaluations. Two steps in a row that fail to halve a closed bracket are followed by a bisection (a secant across
    a jump of ε(σ), e.g. where a PLD starts to be skipped, would crawl). An open side that a step fails to close is
    approached four times further each time; after
    ``max_steps`` the search finishes with :func:`smallest_sigma` (Brent's method) inside what is known.

    Args:
        epsilon_at: Total ε as a function of σ, continuous and non-increasing.
        target_epsilon: The target.
        start: A guess of the root.
        slope: A guess of ``d epsilon_at / d log σ`` near ``start`` (negative), or ``None``.
        rtol: Relative tolerance on σ, in (0, 0.1).
        sigma_bounds: Smallest and largest σ considered (``sigma_bounds[0]`` is returned when it meets the target).
        max_steps: Secant steps before the fallback.
        exceeds: A cheap test that implies ``epsilon_at(σ) > target_epsilon`` when it returns ``True`` (e.g. a lower
            bound on ε above the target), or ``None``. It is asked only at a point that closes the bracket if it
            exceeds the target, where the value of ``epsilon_at`` is never used: a ``True`` returns exactly what
            evaluating ``epsilon_at`` there would have returned (issue #30.6: the last fine evaluation of a
            calibration is often such a point, and its full accounting costs a second Theorem B); a ``False``
            evaluates ``epsilon_at`` as usual.

    Returns:
        ``hi``: σ with ``epsilon_at(σ) ≤ target_epsilon`` and ``epsilon_at(σ / (1 + rtol)) > target_epsilon``
        (or σ = ``sigma_bounds[0]``).

    Raises:
        CalibrationError: The target needs σ above ``sigma_bounds[1]``.
    """
    _check_rtol(rtol)
    width = math.log1p(rtol)
    lo_limit, hi_limit = math.log(sigma_bounds[0]), math.log(sigma_bounds[1])
    lo: float | None = None  # log σ known to exceed the target
    hi: float | None = None  # log σ known to meet it
    previous: tuple[float, float] | None = None
    gap: float | None = None  # the bracket's width at the previous step with both sides known
    slow = 0  # steps in a row with both sides known that did not halve the bracket
    x = min(max(math.log(start), lo_limit), hi_limit)
    misses = 0
    for _ in range(max_steps):
        if exceeds is not None and hi is not None and hi - x <= width and exceeds(math.exp(x)):
            return math.exp(hi)  # an excess at x would close the bracket [x, hi] (below): its value is not needed
        excess = epsilon_at(math.exp(x)) - target_epsilon
        if excess <= 0.0:
            closed = hi is None or x < hi
            hi = x if hi is None else min(hi, x)
            if hi <= lo_limit:
                return sigma_bounds[0]
        else:
            closed = lo is None or x > lo
            lo = x if lo is None else max(lo, x)
            if lo >= hi_limit:
                raise CalibrationError(
                    f"target epsilon={target_epsilon:g} needs σ > {sigma_bounds[1]:g}; raise epsilon or the sigma bound"
                )
        if lo is not None and hi is not None and hi - lo <= width:
            return math.exp(hi)
        misses = 0 if closed else misses + 1
        secant = slope
        if previous is not None and previous[0] != x:
            secant = (excess - previous[1]) / (x - previous[0])
        previous = (x, excess)
        root = x - excess / secant if secant is not None and secant < 0.0 and math.isfinite(secant) else x
        push = width / 4.0 * 4.0**misses
        if hi is None:  # still need a point that meets the target: aim above the predicted root
            x = max(root, x) + push if excess > 0.0 else root + push
        elif lo is None:  # still need a point above the target: aim below it
            x = min(root, x) - push if excess <= 0.0 else root - push
        else:  # both sides known: tighten the side farther from the predicted root
            root = min(max(root, lo), hi)
            x = root + width / 4.0 if hi - root > root - lo else root - width / 4.0
            # Two steps in a row that did not halve the bracket (a secant across a jump, e.g. where a PLD starts to be
            # skipped, crawls one quarter-tolerance at a time) are followed by a bisection, as in Brent's method.
            slow = slow + 1 if gap is not None and hi - lo > 0.5 * gap else 0
            gap = hi - lo
            if not lo < x < hi or slow >= 2:
                x = 0.5 * (lo + hi)
                slow = 0
        x = min(max(x, lo_limit), hi_limit)
    # fallback: Brent's method inside what is known (the full bracket search where a side is still open)
    bounds = (math.exp(lo) if lo is not None else sigma_bounds[0], math.exp(hi) if hi is not None else sigma_bounds[1])
    if lo is not None and hi is not None:
        root = optimize.brentq(lambda v: epsilon_at(math.exp(v)) - target_epsilon, lo, hi, xtol=width / 2.0,
                               rtol=4 * np.finfo(float).eps)
        x = min(hi, root + width / 2.0)
        while epsilon_at(math.exp(x)) > target_epsilon:
            x = min(hi, x + width / 2.0)
        return math.exp(x)
    return smallest_sigma(epsilon_at, target_epsilon, rtol=rtol, sigma_bounds=bounds)


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
    coarse: bool = True,
    split_rule: Any = None,
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
        coarse: Search coarse to fine (RDP on :func:`coarse_orders`, PLDs at :data:`COARSE_DISCRETIZATION`; the
            answer is certified at full precision); ``False``: the full accounting throughout (slower, same σ to
            ``rtol``).
        split_rule: The per-record split the runs use (:class:`~dphypo.privacy.split.SplitRule`; ``q`` and ``steps``
            from its nominal sizes): every evaluation is then Theorem S's bound, each side by every valid bound
            (:func:`~dphypo.privacy.split_account.account_split`; needs ``score_noise``). ``None`` (default): the sum.

    Returns:
        The calibration.
    """
    grid = None if orders is None else np.asarray(list(orders), dtype=np.float64)

    def curve(sigma: float) -> RdpCurve:
        return dpsgd_run_rdp(sigma, sample_rate, steps, score_noise=score_noise, orders=grid)

    coarse_grid = coarse_orders(grid)

    def coarse_curve(sigma: float) -> RdpCurve:
        return dpsgd_run_rdp(sigma, sample_rate, steps, score_noise=score_noise, orders=coarse_grid)

    coarse_curve(1.0)  # validate sample_rate/steps/score_noise eagerly, before any root finding
    profile_for_sigma = coarse_profile = None
    # profile bounds are proven for uniform searches only (KRW 2024); under a split each part brings its own PLD
    if use_profiles and not search.adaptive and split_rule is None:
        def profile_for_sigma(sigma: float) -> Any:  # a PLD too large is skipped by calibrate_sigma
            return dpsgd_run_profile(sigma, sample_rate, steps, score_noise=score_noise)

        def coarse_profile(sigma: float) -> Any:
            return dpsgd_run_profile(sigma, sample_rate, steps, score_noise=score_noise,
                                     discretization=COARSE_DISCRETIZATION)

    split_for_sigma = coarse_split = None
    if split_rule is not None:  # Theorem S: each part's PLD replaces the run's (profiles for a uniform search only)
        from dphypo.privacy.split_account import split_parts

        with_profiles = use_profiles and not search.adaptive

        def split_for_sigma(sigma: float) -> Any:
            return split_parts(sigma, sample_rate, steps, score_noise=score_noise, rule=split_rule, orders=grid,
                               profiles=with_profiles)

        def coarse_split(sigma: float) -> Any:
            return split_parts(sigma, sample_rate, steps, score_noise=score_noise, rule=split_rule,
                               orders=coarse_grid, profiles=with_profiles, discretization=COARSE_DISCRETIZATION)

        split_parts(1.0, sample_rate, steps, score_noise=score_noise, rule=split_rule, orders=coarse_grid)  # eager

    return calibrate_sigma(target_epsilon, delta, search, curve, profile_for_sigma=profile_for_sigma, rtol=rtol,
                           max_lost=max_lost, adaptive_theorem=adaptive_theorem,
                           coarse_curve_for_sigma=coarse_curve if coarse else None,
                           coarse_profile_for_sigma=coarse_profile, split_for_sigma=split_for_sigma,
                           coarse_split_for_sigma=coarse_split if coarse else None)


def coarse_orders(orders: np.ndarray | None = None) -> np.ndarray:
    """The coarse grid of an order grid: :data:`COARSE_ORDERS` for the default, else every sixth order and the last.

    Args:
        orders: Shape ``(K,)``, the fine grid (``None``: the default grid).

    Returns:
        Shape ``(k,)``, a subset of ``orders`` with its first and last order.
    """
    if orders is None:
        return COARSE_ORDERS
    grid = np.asarray(orders, dtype=np.float64)
    return np.unique(np.append(grid[::6], grid[-1]))

"""The accountant: one honest (ε, δ) for a whole search, its breakdown, and noise calibration.

A :class:`SearchPrivacy` says how a search is randomised (the distribution of T and the density bounds C, c). A
:class:`PrivacyConfig` adds the per-candidate RDP curve and δ; it is the single object that both the tuner (to
draw T) and the accountant (to report ε) read, so the two can never disagree (privacy rule 2).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import optimize

from dphypo.privacy.adaptive import adaptive_pure_epsilon, check_adaptive_theorem, rdp_method_name
from dphypo.privacy.binomial import Binomial
from dphypo.privacy.conversion import epsilon_from_rdp
from dphypo.privacy.distributions import Poisson, RunCountDistribution, TruncatedNegativeBinomial
from dphypo.privacy.profiles import ProfileSkipped, ProfileTooLargeError
from dphypo.privacy.rdp import RdpCurve, compose, dpsgd_rdp, zero_rdp
from dphypo.privacy.tuning import (
    check_density_bounds,
    dphypo_theorem2,
    tuning_rdp,
)

__all__ = [
    "CALIBRATION_PLD_POINTS",
    "CalibrationError",
    "CalibrationResult",
    "PrivacyConfig",
    "PrivacyReport",
    "SearchPrivacy",
    "account",
    "account_pure",
    "calibrate_dpsgd_sigma",
    "calibrate_sigma",
    "check_same_mechanism",
    "smallest_sigma",
]


#: PLD size cap of :func:`calibrate_dpsgd_sigma` (points per direction; ordinary σ use 1e-3 well below it, e.g.
#: 4·10⁴ points at σ = 0.66, q = 256/60000, 2344 steps).
CALIBRATION_PLD_POINTS = 2**18


class CalibrationError(ValueError):
    """The target (ε, δ) cannot be met by any noise level (or the bracket could not be found)."""


@dataclass(frozen=True)
class SearchPrivacy:
    """How a search is randomised: T's distribution and DP-HyPO's density-ratio bounds.

    Args:
        run_count: Distribution of the number of runs T (drawn once, before any data is touched).
        C: Upper bound on π⁽ʲ⁾/π⁽⁰⁾ (≥ 1). ``C = c = 1`` is a uniform (non-adaptive) search.
        c: Lower bound on π⁽ʲ⁾/π⁽⁰⁾ (in (0, 1]).
    """

    run_count: RunCountDistribution
    C: float = 1.0
    c: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.run_count, RunCountDistribution):
            raise TypeError(f"run_count must be a RunCountDistribution, got {self.run_count!r}")
        check_density_bounds(self.C, self.c)
        object.__setattr__(self, "C", float(self.C))
        object.__setattr__(self, "c", float(self.c))
        if isinstance(self.run_count, Poisson) and self.adaptive:
            # Fail at configuration time, before anything is sampled or trained.
            tuning_rdp(zero_rdp(), self.run_count, self.C, self.c)
        if isinstance(self.run_count, Binomial) and self.adaptive:
            raise ValueError(
                f"an adaptive search (C={self.C:g} > c={self.c:g}) with binomial T has no privacy theorem: only "
                "Koskela-Redberg-Wang 2024 Thm 5.7 covers binomial T, for a uniform search; use "
                "negbin/geometric/logarithmic runs or C = c = 1"
            )

    @property
    def adaptive(self) -> bool:
        """Whether the sampling density may move away from the prior (C > c)."""
        return self.c < self.C

    def uniform(self) -> SearchPrivacy:
        """The same run count with C = c = 1 (the non-adaptive baseline)."""
        return SearchPrivacy(self.run_count)

    def describe(self) -> dict[str, Any]:
        """JSON-ready parameters of the run-count distribution and the bounds."""
        rc = self.run_count
        out: dict[str, Any] = {"runs": rc.name, "expected_runs": rc.mean, "C": self.C, "c": self.c}
        if isinstance(rc, TruncatedNegativeBinomial):
            out.update(theta=rc.theta, gamma=rc.gamma)
        if isinstance(rc, Binomial):
            out.update(n=rc.n, p=rc.p)
        return out


@dataclass(frozen=True)
class PrivacyReport:
    """The accounted privacy of a search, in a form a user can read.

    Attributes:
        epsilon: Total ε of the search at ``delta``.
        delta: δ of the guarantee (0 for a pure-DP statement).
        base_epsilon: ε of one candidate run alone at the same δ.
        repetition_epsilon: What the random number of runs adds (uniform search ε − base ε).
        adaptivity_epsilon: What adaptivity adds (total ε − uniform search ε); 0 when C = c = 1.
        order: Rényi order α at which the conversion to (ε, δ) was tightest (``inf``: pure bound).
        order_hat: The second order α̂ of DP-HyPO Theorem 1 (``nan`` where the theorem has none).
        expected_runs: E[T].
        theorem: The theorem that produced ``epsilon``.
        search: The search configuration.
        base_label: Description of the per-candidate mechanism.
        methods: ε of every valid bound that was evaluated (``"rdp"`` and, for a uniform search given a privacy
            profile, the Koskela-Redberg-Wang profile bounds); ``epsilon`` is their minimum.
        method: The method that gave ``epsilon``.
        charged_runs: Lost attempts (crashed or dead-worker runs) charged on top of the search
            (:func:`~dphypo.privacy.charged.account_charged`); 0 for an uninterrupted search.
        charged_epsilon: What those charges added to ``epsilon``.
        profile_skipped: Why the privacy-profile bounds were not evaluated although asked for (the PLD would
            exceed its size cap, :class:`~dphypo.privacy.profiles.ProfileSkipped`), else ``None``.
    """

    epsilon: float
    delta: float
    base_epsilon: float
    repetition_epsilon: float
    adaptivity_epsilon: float
    order: float
    order_hat: float
    expected_runs: float
    theorem: str
    search: SearchPrivacy
    base_label: str
    methods: dict[str, float] = field(default_factory=dict)
    method: str = "rdp"
    charged_runs: int = 0
    charged_epsilon: float = 0.0
    profile_skipped: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (non-finite numbers become ``None``)."""

        def clean(x: float) -> float | None:
            return float(x) if math.isfinite(x) else None

        return {
            "epsilon": clean(self.epsilon),
            "delta": self.delta,
            "base_epsilon": clean(self.base_epsilon),
            "order": clean(self.order),
            "order_hat": clean(self.order_hat),
            "expected_runs": self.expected_runs,
            "theorem": self.theorem,
            "breakdown": {
                "one_run": clean(self.base_epsilon),
                "repetition": clean(self.repetition_epsilon),
                "adaptivity": clean(self.adaptivity_epsilon),
                "charged_runs": clean(self.charged_epsilon),
            },
            "charged_runs": self.charged_runs,
            **self.search.describe(),
            "base_mechanism": self.base_label,
            "methods": {name: clean(eps) for name, eps in self.methods.items()},
            "method": self.method,
            "profile_skipped": self.profile_skipped,
        }


@dataclass(frozen=True)
class PrivacyConfig:
    """Everything the accountant needs, shared with the tuner so T is drawn from exactly what is accounted.

    Args:
        search: Run-count distribution and density bounds.
        base: RDP curve valid for every candidate run, *including* the release of its score.
        delta: δ of the reported guarantee, in (0, 1).
        profile: Optional privacy profile of one whole candidate run (:mod:`dphypo.privacy.profiles`); for a
            uniform search it enables the tighter profile bounds.
        max_lost: Lost attempts (a run whose worker or process died after it touched the data) the search may
            absorb; each is charged up front as one more released run (:mod:`dphypo.privacy.charged`), whether
            or not it happens, and the search stops without a release when one more would be lost.
        adaptive_theorem: Bound for an adaptive search (C > c): ``"A"`` (default, Theorem A of
            ``docs/proofs/adaptive.md``), ``"B"`` (its numerical sharpening, opt-in) or ``"published"``
            (DP-HyPO Theorem 1 as printed, opt-in).
    """

    search: SearchPrivacy
    base: RdpCurve
    delta: float
    profile: Any = None
    adaptive_theorem: str = "A"
    max_lost: int = 0

    def __post_init__(self) -> None:
        _check_delta(self.delta)
        check_adaptive_theorem(self.adaptive_theorem)
        if isinstance(self.max_lost, bool) or not isinstance(self.max_lost, (int, np.integer)) or self.max_lost < 0:
            raise ValueError(f"max_lost must be a non-negative integer, got {self.max_lost!r}")
        object.__setattr__(self, "max_lost", int(self.max_lost))

    def account(self) -> PrivacyReport:
        """The search's total (ε, δ) with its breakdown, ``max_lost`` lost attempts charged up front.

        The charge does not depend on how many attempts were actually lost (that count depends on the run and
        may depend on the data, docs/parallel.md): the reported ε is fixed before any data is touched.
        """
        if self.max_lost:
            from dphypo.privacy.charged import account_charged  # imports this module: keep it lazy

            return account_charged(self.base, self.search, self.delta, self.max_lost, profile=self.profile,
                                   adaptive_theorem=self.adaptive_theorem)
        return account(self.base, self.search, self.delta, profile=self.profile,
                       adaptive_theorem=self.adaptive_theorem)


def _check_delta(delta: float) -> None:
    if not (isinstance(delta, (int, float)) and 0.0 < delta < 1.0):
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")


def check_same_mechanism(base: RdpCurve, profile: Any) -> None:
    """Refuse a privacy profile that does not bound the same mechanism as the RDP curve.

    A profile of less than the curve covers (e.g. the training alone, next to a curve that also covers the score
    release) would under-report ε, so both must carry the same exact description
    (:data:`~dphypo.privacy.rdp.Mechanism`: built by ``dpsgd_rdp``/``dpsgd_profile``, ``gaussian_rdp``/
    ``GaussianProfile`` and kept through composition); an unknown description on either side is refused too.

    Raises:
        ValueError: The descriptions differ or one is unknown.
    """
    curve_key, profile_key = base.mechanism, getattr(profile, "mechanism", None)
    if curve_key is None or profile_key is None or curve_key != profile_key:
        def show(key: Any) -> str:
            return "unknown" if key is None else " + ".join(key) or "data-independent"

        raise ValueError(
            f"the privacy profile must describe the same mechanism as the RDP curve: the curve covers "
            f"{show(curve_key)}, the profile covers {show(profile_key)}"
        )


def account(
    base: RdpCurve, search: SearchPrivacy, delta: float, *, profile: Any = None, adaptive_theorem: str = "A"
) -> PrivacyReport:
    """Total (ε, δ) of a search whose every candidate satisfies ``base``: the minimum over every valid bound.

    Always evaluated (where a theorem covers the run count): the tight RDP → (ε, δ) conversion (Canonne, Kamath &
    Steinke 2020) of the search's RDP curve from :func:`~dphypo.privacy.tuning.tuning_rdp` (Papernot-Steinke
    Theorems 2 and 6 for a uniform search; for C > c, Theorem A of ``docs/proofs/adaptive.md``, method
    ``"rdp-theorem-a"``, or opt-in the published DP-HyPO Theorem 1, method ``"rdp-published-thm1"``).
    With a ``profile`` of one whole candidate run and a *uniform* search
    (C = c = 1), also the privacy-profile bounds of Koskela, Redberg & Wang 2024 (Thm 5.2, Thm 5.7, Cor 5.8) and
    Papernot-Steinke Theorem 6 with a PLD δ̂ (:func:`~dphypo.privacy.profile_tuning.profile_bounds`); no profile
    bound is proven for an adaptive search, so none is used there. The breakdown evaluates the same minimum with
    C = c = 1 (what repetition alone costs) and the base mechanism alone (one run).

    Args:
        base: Per-candidate RDP curve.
        search: Run-count distribution and density bounds.
        delta: Target δ ∈ (0, 1).
        profile: Optional :class:`~dphypo.privacy.profiles.PrivacyProfile` of the same candidate run (it must
            cover everything ``base`` covers, e.g. the score release too), or a
            :class:`~dphypo.privacy.profiles.ProfileSkipped` (too large to build: RDP bounds only, and the report's
            ``profile_skipped`` says why).
        adaptive_theorem: ``"A"`` (default: the proven Theorem A for C > c), ``"B"`` (proven numerical
            sharpening, opt-in, method ``"rdp-theorem-b"``) or ``"published"`` (DP-HyPO Theorem 1 as printed; its
            proof has a known gap, the statement is implied by Theorem A). No effect when C = c = 1.

    Returns:
        The report; ``methods`` lists every bound evaluated and ``method`` the one used.
    """
    _check_delta(delta)
    rdp_name = rdp_method_name(search.adaptive, adaptive_theorem)
    skipped = None
    if isinstance(profile, ProfileSkipped):  # too large to build: RDP bounds only, and say so in the report
        skipped, profile = profile.reason, None
    if profile is not None:
        check_same_mechanism(base, profile)
    methods: dict[str, float] = {}
    theorems: dict[str, str] = {}
    order, order_hat = math.nan, math.nan
    if not isinstance(search.run_count, Binomial):  # binomial T has no RDP theorem
        tuned = tuning_rdp(base, search.run_count, search.C, search.c, adaptive_theorem=adaptive_theorem)
        methods[rdp_name], order = epsilon_from_rdp(
            tuned.curve.orders, tuned.curve.epsilons, delta, pure_epsilon=tuned.curve.pure_epsilon
        )
        theorems[rdp_name], order_hat = tuned.theorem, tuned.order_hat
    bounds: dict[str, Any] = {}
    if profile is not None:
        from dphypo.privacy.profile_tuning import profile_bounds  # imports this module: keep it lazy

        bounds = profile_bounds(profile, search, delta, base_rdp=base)
        methods.update({name: b.epsilon for name, b in bounds.items()})
        theorems.update({name: b.theorem for name, b in bounds.items()})
    if not methods:
        if skipped is not None:
            raise ValueError(
                f"binomial T has no RDP theorem, and the privacy-profile bound (Koskela-Redberg-Wang 2024 Thm 5.7) "
                f"cannot be evaluated: {skipped}; "
                "use negbin/geometric/poisson runs or more noise"
            )
        raise ValueError(
            "binomial T has no RDP theorem; only the profile bound of Koskela-Redberg-Wang 2024 (Thm 5.7, uniform "
            "search) applies: pass profile=dpsgd_profile(sigma, sample_rate, steps)"
        )
    method = min(methods, key=methods.__getitem__)
    eps = methods[method]
    if method != rdp_name:
        order, order_hat = bounds[method].order, math.nan
    base_eps, _ = epsilon_from_rdp(base.orders, base.epsilons, delta, pure_epsilon=base.pure_epsilon)
    if profile is not None:
        base_eps = min(base_eps, profile.epsilon(delta))
    uniform_eps = account(base, search.uniform(), delta, profile=profile).epsilon if search.adaptive else eps
    return PrivacyReport(
        epsilon=eps,
        delta=delta,
        base_epsilon=base_eps,
        repetition_epsilon=uniform_eps - base_eps,
        adaptivity_epsilon=eps - uniform_eps,
        order=order,
        order_hat=order_hat,
        expected_runs=search.run_count.mean,
        theorem=theorems[method],
        search=search,
        base_label=base.label,
        methods=methods,
        method=method,
        profile_skipped=skipped,
    )


def account_pure(epsilon: float, search: SearchPrivacy, *, adaptive_theorem: str = "A") -> PrivacyReport:
    """Pure-DP accounting: every candidate ε-DP ⇒ the search is (ε′, 0)-DP.

    Uniform search (C = c = 1): ε′ = (2+θ)ε (Papernot & Steinke 2022, Corollary 3 = DP-HyPO Theorem 2 at
    C = c = 1). Adaptive search (C > c): by default Theorem A-infinity of ``docs/proofs/adaptive.md``
    (:func:`~dphypo.privacy.adaptive.theorem_a_pure`, method ``"pure-dp-theorem-a"``), never above DP-HyPO
    Theorem 2's ``(2+θ)(ε + log(C/c))``; with ``adaptive_theorem="published"`` that published value (method
    ``"pure-dp-published-thm2"``; its proof has the gap of Theorem 1's). The adaptive ε′ is floored at the uniform
    ε′ so the report is monotone in C/c (see :func:`~dphypo.privacy.adaptive.adaptive_pure_epsilon`).

    Raises:
        ValueError: For Poisson T, which has no pure-DP theorem (Theorem 6 gives RDP only), or an unknown
            ``adaptive_theorem``.
    """
    check_adaptive_theorem(adaptive_theorem)
    rc = search.run_count
    if not isinstance(rc, TruncatedNegativeBinomial):
        raise ValueError(
            f"pure-DP accounting needs a truncated negative binomial run count (DP-HyPO Theorem 2), got "
            f"{rc.name}; Poisson T only has an RDP guarantee, so give a delta"
        )
    total, theorem = adaptive_pure_epsilon(epsilon, rc, search.C, search.c, adaptive_theorem)
    uniform = dphypo_theorem2(epsilon, rc.theta, 1.0, 1.0)
    if not search.adaptive:
        method = "pure-dp"
    else:
        method = "pure-dp-published-thm2" if adaptive_theorem == "published" else "pure-dp-theorem-a"
    return PrivacyReport(
        epsilon=total,
        delta=0.0,
        base_epsilon=float(epsilon),
        repetition_epsilon=uniform - epsilon,
        adaptivity_epsilon=total - uniform,
        order=math.inf,
        order_hat=math.inf,
        expected_runs=rc.mean,
        theorem=theorem,
        search=search,
        base_label=f"pure {epsilon:g}-DP",
        methods={method: total},
        method=method,
    )


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
    search: SearchPrivacy,
    curve_for_sigma: Callable[[float], RdpCurve],
    *,
    profile_for_sigma: Callable[[float], Any] | None = None,
    rtol: float = 1e-4,
    sigma_bounds: tuple[float, float] = (1e-2, 1e4),
    max_lost: int = 0,
    adaptive_theorem: str = "A",
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
        max_lost: Lost attempts charged up front (:attr:`PrivacyConfig.max_lost`).
        adaptive_theorem: The bound for C > c (:attr:`PrivacyConfig.adaptive_theorem`; default the proven Theorem A).

    Returns:
        The calibration.

    Raises:
        CalibrationError: If even σ → ∞ (a data-independent candidate) exceeds the target, or the target is
            met only outside ``sigma_bounds``.
    """
    if not (math.isfinite(target_epsilon) and target_epsilon > 0.0):
        raise ValueError(f"epsilon must be a finite number > 0, got {target_epsilon!r}")
    _check_delta(delta)
    if not (0.0 < rtol < 0.1):
        raise ValueError(f"rtol must be in (0, 0.1), got {rtol!r}")
    evaluations = 0

    def report_at(sigma: float) -> PrivacyReport:
        profile = _profile_at(profile_for_sigma, sigma)
        return PrivacyConfig(search, curve_for_sigma(sigma), delta, profile=profile, max_lost=max_lost,
                             adaptive_theorem=adaptive_theorem).account()

    def epsilon_at(sigma: float) -> float:
        nonlocal evaluations
        evaluations += 1
        return report_at(sigma).epsilon

    # The σ → ∞ limit: a data-independent candidate (zero RDP curve); binomial T has only the profile route.
    if isinstance(search.run_count, Binomial):
        floor = account(curve_for_sigma(sigma_bounds[1]), search, delta,
                        profile=_profile_at(profile_for_sigma, sigma_bounds[1]),
                        adaptive_theorem=adaptive_theorem).epsilon
    else:
        floor = account(zero_rdp(curve_for_sigma(1.0).orders), search, delta, adaptive_theorem=adaptive_theorem
                        ).epsilon
    if floor >= target_epsilon:
        raise CalibrationError(
            f"target epsilon={target_epsilon:g} is unreachable: with delta={delta:g} the search itself costs at "
            f"least epsilon={floor:.4g} even with infinite noise (run-count and log(C/c) terms); raise epsilon, "
            "lower E[T], or narrow [c, C]"
        )
    top = report_at(sigma_bounds[1]).epsilon  # parts of the run that do not shrink with σ (e.g. score noise)
    if top > target_epsilon:
        raise CalibrationError(
            f"target epsilon={target_epsilon:g} is unreachable: even sigma={sigma_bounds[1]:g} gives "
            f"epsilon={top:.4g}; the per-run mechanism has a part that does not shrink with sigma (e.g. the score "
            "noise): raise epsilon or add more noise to that part"
        )
    sigma = smallest_sigma(epsilon_at, target_epsilon, rtol=rtol, sigma_bounds=sigma_bounds)
    report = report_at(sigma)
    if report.epsilon > target_epsilon:  # pragma: no cover - smallest_sigma guarantees this
        raise CalibrationError(f"calibration failed to meet epsilon={target_epsilon:g}")
    return CalibrationResult(sigma, report, 0.0 if sigma == sigma_bounds[0] else sigma * rtol, evaluations)


def _profile_at(profile_for_sigma: Callable[[float], Any] | None, sigma: float) -> Any:
    """``profile_for_sigma(σ)``, or a :class:`~dphypo.privacy.profiles.ProfileSkipped` if that PLD is too large."""
    if profile_for_sigma is None:
        return None
    try:
        return profile_for_sigma(sigma)
    except ProfileTooLargeError as exc:
        return ProfileSkipped(str(exc))


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
    if not (0.0 < rtol < 0.1):
        raise ValueError(f"rtol must be in (0, 0.1), got {rtol!r}")

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
                    f"target epsilon={target:g} needs sigma > {sigma_bounds[1]:g}; raise epsilon or the sigma bound"
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
    search: SearchPrivacy,
    *,
    extra: RdpCurve | None = None,
    orders: Iterable[float] | None = None,
    rtol: float = 1e-4,
    use_profiles: bool = True,
) -> CalibrationResult:
    """:func:`calibrate_sigma` for DP-SGD runs (optionally composed with a fixed ``extra`` mechanism, e.g. the
    noisy release of each run's score).

    Args:
        target_epsilon: Total ε of the search.
        delta: δ ∈ (0, 1).
        sample_rate: Poisson sampling rate q ∈ (0, 1].
        steps: DP-SGD steps per run.
        search: Run-count distribution and density bounds.
        extra: A σ-independent mechanism composed into every run.
        orders: Order grid (must match ``extra``'s).
        rtol: Relative tolerance on σ.
        use_profiles: For a uniform search without ``extra``, also use the privacy-profile bounds (PLD of the
            DP-SGD run at discretisation 1e-3, still a valid pessimistic bound), like ``dphypo account``. The PLD
            is capped at :data:`CALIBRATION_PLD_POINTS` points (coarser grid beyond, RDP only past
            :data:`~dphypo.privacy.profiles.MAX_DISCRETIZATION`) so that each of the ~20 evaluations is fast.

    Returns:
        The calibration.
    """
    grid = None if orders is None else np.asarray(list(orders), dtype=np.float64)
    if extra is not None:
        grid = extra.orders if grid is None else grid

    def curve(sigma: float) -> RdpCurve:
        run = dpsgd_rdp(sigma, sample_rate, steps, orders=grid)
        return run if extra is None else compose(run, extra)

    curve(1.0)  # validate sample_rate/steps eagerly, before any root finding
    profile_for_sigma = None
    # A profile must cover the whole candidate run: with an RDP-only `extra` (e.g. a score release) it would not.
    if use_profiles and extra is None and not search.adaptive:
        from dphypo.privacy.profiles import dpsgd_profile

        def profile_for_sigma(sigma: float) -> Any:
            return dpsgd_profile(sigma, sample_rate, steps, discretization=1e-3, max_points=CALIBRATION_PLD_POINTS)

    return calibrate_sigma(target_epsilon, delta, search, curve, profile_for_sigma=profile_for_sigma, rtol=rtol)

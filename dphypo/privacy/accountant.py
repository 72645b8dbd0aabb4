"""The accountant: one honest (ε, δ) for a whole search, with its breakdown.

:func:`account` evaluates every valid bound for a search (each RDP curve of
:func:`~dphypo.privacy.search_rdp.rdp_bounds` converted to (ε, δ), and for a uniform search the privacy-profile
bounds of :mod:`dphypo.privacy.profile_tuning`) and reports the minimum; :func:`account_pure` is the pure-DP
statement. The plan shared with the tuner is :class:`~dphypo.privacy.accounting.PrivacyAccounting`; noise calibration
lives in :mod:`dphypo.privacy.calibration`.

References (docs/references.md): Papernot & Steinke 2022 arXiv:2110.03620v2; Wang et al. 2023 arXiv:2306.05734v2;
Koskela, Redberg & Wang 2024 arXiv:2402.06701 (version unverified); Canonne, Kamath & Steinke 2020
arXiv:2004.00010v4.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from dphypo.privacy.adaptive import adaptive_pure_epsilon, check_adaptive_theorem
from dphypo.privacy.conversion import epsilon_from_rdp
from dphypo.privacy.profile_tuning import ProfileBound, profile_bounds
from dphypo.privacy.profiles import ProfileSkipped
from dphypo.privacy.rdp import RdpCurve
from dphypo.privacy.run_counts import Binomial, TruncatedNegativeBinomial
from dphypo.privacy.search_rdp import rdp_bounds
from dphypo.privacy.spec import PrivacyReport, RepeatAndSelect
from dphypo.privacy.tuning import dphypo_theorem2
from dphypo.privacy.validation import check_delta

__all__ = ["account", "account_pure", "check_same_mechanism"]


def check_same_mechanism(base: RdpCurve, profile: Any) -> None:
    """Refuse a privacy profile that does not bound the same mechanism as the RDP curve.

    A profile of less than the curve covers (e.g. the training alone, next to a curve that also covers the score
    release) would under-report ε, so both must carry equal ``dp_accounting`` events (``base.event ==
    profile.event``: built by ``dpsgd_rdp``/``dpsgd_profile``, ``gaussian_rdp``/``GaussianProfile``, kept through
    composition in canonical form, :mod:`dphypo.privacy.events`); an unknown event on either side is refused too.

    Raises:
        ValueError: The events differ or one is unknown (the message renders both with
            :func:`~dphypo.privacy.events.describe_event`).
    """
    curve_event, profile_event = base.event, getattr(profile, "event", None)
    if curve_event is None or profile_event is None or curve_event != profile_event:
        from dphypo.privacy.events import describe_event

        # Two events that differ only beyond 3 significant digits are printed in full.
        exact = describe_event(curve_event) == describe_event(profile_event)
        curve, other = describe_event(curve_event, exact=exact), describe_event(profile_event, exact=exact)
        raise ValueError(
            f"the privacy profile must describe the same mechanism as the RDP curve: the curve covers {curve}, "
            f"the profile covers {other}"
        )


def account(
    base: RdpCurve, search: RepeatAndSelect, delta: float, *, profile: Any = None, adaptive_theorem: str = "B"
) -> PrivacyReport:
    """Total (ε, δ) of a search whose every candidate satisfies ``base``: the minimum over every valid bound.

    Always evaluated (where a theorem covers the run count): the tight RDP → (ε, δ) conversion (Canonne, Kamath &
    Steinke 2020) of every RDP curve of :func:`~dphypo.privacy.search_rdp.rdp_bounds`: for a uniform search with
    TNB T, Papernot-Steinke Theorem 2 (method ``"rdp"``) and Theorem B of ``docs/proofs/adaptive.md`` at
    C = c = 1 (``"rdp-theorem-b"``); with Poisson T, Papernot-Steinke Theorem 6 (``"rdp"``); for C > c, Theorem B
    (default, ``"rdp-theorem-b"``), or on request Theorem A (``"rdp-theorem-a"``) or the published DP-HyPO
    Theorem 1 (``"rdp-published-thm1"``). With a ``profile`` of one whole candidate run and a *uniform* search
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
        adaptive_theorem: ``"B"`` (default: Theorem B, proven and checked independently), ``"A"`` (Theorem A,
            proven closed form, opt-in) or ``"published"`` (DP-HyPO Theorem 1 as printed; its proof has a known
            gap, the statement is implied by Theorem A). For C > c, which bound; for a uniform search, ``"B"``
            also lists Theorem B at C = c = 1, while ``"A"`` and ``"published"`` keep Papernot-Steinke alone (the
            accounting before Theorem B was the default, so results recorded then are reproduced when their
            theorem is named).

    Under a per-record split (docs/proofs/split.md) this is evaluated on each side of the run — its DP-SGD part and
    its score part — and the worse side reported: :func:`~dphypo.privacy.split_account.account_split` (Theorem S,
    Corollary S1), which :class:`~dphypo.privacy.accounting.PrivacyAccounting` runs when given ``split``.

    Returns:
        The report; ``methods`` lists every bound evaluated and ``method`` the one used.

    Raises:
        ValueError: Bad arguments, binomial T without a profile, or Theorem B for C > c with a per-run curve it
            refuses (:func:`~dphypo.privacy.adaptive.check_theorem_b_curve`).

    Example:
        A uniform random search over DP-SGD runs (σ = 0.71, q = 256/60000, 2344 steps) with geometric T of mean
        100: one run costs ε ≈ 3.43; Papernot-Steinke Theorem 2 gives ε ≈ 7.95 for the search at δ = 1e-5 and
        Theorem B at C = c = 1 ≈ 6.50, which is reported.

        >>> from dphypo.privacy import RepeatAndSelect, account, dpsgd_rdp, geometric
        >>> report = account(dpsgd_rdp(0.71, 256 / 60000, 2344), RepeatAndSelect(geometric(0.01)), 1e-5)
        >>> round(report.base_epsilon, 3), round(report.methods["rdp"], 3), report.method
        (3.433, 7.952, 'rdp-theorem-b')
        >>> round(report.epsilon, 2), report.adaptivity_epsilon
        (6.5, 0.0)
    """
    check_delta(delta)
    check_adaptive_theorem(adaptive_theorem)
    skipped = None
    if isinstance(profile, ProfileSkipped):  # too large to build: RDP bounds only, and say so in the report
        skipped, profile = profile.reason, None
    if profile is not None:
        check_same_mechanism(base, profile)
    bounds = _rdp_bounds(base, search, delta, adaptive_theorem)
    if profile is not None:
        bounds.update(_profile_bounds(profile, search, delta, base))
    if not bounds:
        raise _no_bound_error(skipped)
    method = min(bounds, key=lambda name: bounds[name].epsilon)
    best = bounds[method]
    base_eps, _ = epsilon_from_rdp(base.orders, base.epsilons, delta, pure_epsilon=base.pure_epsilon)
    if profile is not None:
        base_eps = min(base_eps, profile.epsilon(delta))
    uniform_eps = (account(base, search.uniform(), delta, profile=profile, adaptive_theorem=adaptive_theorem).epsilon
                   if search.adaptive else best.epsilon)
    return PrivacyReport(
        epsilon=best.epsilon,
        delta=delta,
        base_epsilon=base_eps,
        repetition_epsilon=uniform_eps - base_eps,
        adaptivity_epsilon=best.epsilon - uniform_eps,
        order=best.order,
        order_hat=best.order_hat,
        expected_runs=search.run_count.mean,
        theorem=best.theorem,
        search=search,
        base_label=base.label,
        methods={name: bound.epsilon for name, bound in bounds.items()},
        method=method,
        profile_skipped=skipped,
    )


class _Bound(NamedTuple):
    """One valid bound on the search's ε at the target δ: its value, theorem and the orders it used."""

    epsilon: float
    theorem: str
    order: float
    order_hat: float


def _rdp_bounds(base: RdpCurve, search: RepeatAndSelect, delta: float, adaptive_theorem: str) -> dict[str, _Bound]:
    """Every RDP bound of the search (:func:`~dphypo.privacy.search_rdp.rdp_bounds`) converted to ε at ``delta``."""
    if isinstance(search.run_count, Binomial):  # binomial T has no RDP theorem
        return {}
    out: dict[str, _Bound] = {}
    for name, tuned in rdp_bounds(base, search.run_count, search.C, search.c,
                                  adaptive_theorem=adaptive_theorem).items():
        eps, order = epsilon_from_rdp(tuned.curve.orders, tuned.curve.epsilons, delta,
                                      pure_epsilon=tuned.curve.pure_epsilon)
        out[name] = _Bound(eps, tuned.theorem, order, tuned.order_hat)
    return out


def _profile_bounds(profile: Any, search: RepeatAndSelect, delta: float, base: RdpCurve) -> dict[str, _Bound]:
    """The privacy-profile bounds of a uniform search (:func:`~dphypo.privacy.profile_tuning.profile_bounds`)."""
    bounds: dict[str, ProfileBound] = profile_bounds(profile, search, delta, base_rdp=base)
    return {name: _Bound(b.epsilon, b.theorem, b.order, math.nan) for name, b in bounds.items()}


def _no_bound_error(skipped: str | None) -> ValueError:
    """Why a search has no valid bound at all: binomial T without a (buildable) privacy profile."""
    if skipped is not None:
        return ValueError(
            f"binomial T has no RDP theorem, and the privacy-profile bound (Koskela-Redberg-Wang 2024 Thm 5.7) "
            f"cannot be evaluated: {skipped}; "
            "use negbin/geometric/poisson runs or more noise"
        )
    return ValueError(
        "binomial T has no RDP theorem; only the profile bound of Koskela-Redberg-Wang 2024 (Thm 5.7, uniform "
        "search) applies: pass profile=dpsgd_profile(sigma, sample_rate, steps)"
    )


def account_pure(epsilon: float, search: RepeatAndSelect, *, adaptive_theorem: str = "B") -> PrivacyReport:
    """Pure-DP accounting: every candidate ε-DP ⇒ the search is (ε′, 0)-DP.

    Uniform search (C = c = 1): ε′ = (2+θ)ε (Papernot & Steinke 2022, Corollary 3 = DP-HyPO Theorem 2 at
    C = c = 1). Adaptive search (C > c): Theorem A-infinity of ``docs/proofs/adaptive.md``
    (:func:`~dphypo.privacy.adaptive.theorem_a_pure`, method ``"pure-dp-theorem-a"``) for ``"B"`` (default; Theorem
    B has no pure-DP form) and ``"A"``, never above DP-HyPO Theorem 2's ``(2+θ)(ε + log(C/c))``; with
    ``adaptive_theorem="published"`` that published value (method ``"pure-dp-published-thm2"``; its proof has the
    gap of Theorem 1's). The adaptive ε′ is floored at the uniform ε′ so the report is monotone in C/c (see
    :func:`~dphypo.privacy.adaptive.adaptive_pure_epsilon`).

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

"""Charging lost attempts: a search whose runs were interrupted (crash, dead worker) and then re-run.

An attempt that died with its process or worker produced no output the search used, but it *touched the data*,
and whether (and when) it died is observable. dphypo therefore charges every lost attempt as if its whole run had
been released on its own: the search mechanism M (DP-HyPO Framework 1 with the drawn T) is composed with ``k``
independent copies of the base mechanism. This over-approximates the leak (a crash reveals far less than a model),
but it is the simple statement that is clearly valid, and it makes the cost of resuming visible.

Two valid bounds are evaluated and the smaller is reported:

* RDP: composition (Mironov 2017, Proposition 1) of the search's RDP curve (the order-wise minimum of its valid RDP
  bounds, :func:`~dphypo.privacy.search_rdp.tuning_rdp`: Theorem B for C > c by default, Papernot & Steinke 2022
  Theorems 2 and 6 and Theorem B at C = c = 1 for a uniform search) with ``k`` × the base curve,
  converted with Canonne, Kamath & Steinke 2020 (:func:`~dphypo.privacy.conversion.epsilon_from_rdp`);
* ``<profile method>+basic``: for a uniform search with a privacy profile, the Koskela-Redberg-Wang bound at δ/2
  plus the RDP ε of the ``k`` charged runs at δ/2 (basic composition of approximate DP, Dwork & Roth 2014,
  Theorem 3.16: ε and δ add).

References (docs/references.md): Mironov 2017 arXiv:1702.07476 (version unverified); Papernot & Steinke 2022
arXiv:2110.03620v2; Canonne, Kamath & Steinke 2020 arXiv:2004.00010v4; Dwork & Roth 2014 (monograph, no arXiv id).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from dphypo.privacy.accountant import account
from dphypo.privacy.conversion import epsilon_from_rdp
from dphypo.privacy.profile_tuning import profile_bounds
from dphypo.privacy.profiles import ProfileSkipped
from dphypo.privacy.rdp import RdpCurve, compose
from dphypo.privacy.run_counts import Binomial
from dphypo.privacy.search_rdp import tuning_rdp
from dphypo.privacy.spec import PrivacyReport, RepeatAndSelect
from dphypo.privacy.validation import check_non_negative_int

__all__ = ["account_charged"]


def _rdp_epsilon(curve: RdpCurve, delta: float) -> tuple[float, float]:
    return epsilon_from_rdp(curve.orders, curve.epsilons, delta, pure_epsilon=curve.pure_epsilon)


def account_charged(
    base: RdpCurve,
    search: RepeatAndSelect,
    delta: float,
    charged_runs: int,
    *,
    profile: Any = None,
    adaptive_theorem: str = "B",
) -> PrivacyReport:
    """Total (ε, δ) of a search plus ``charged_runs`` lost attempts, each charged as one released run.

    Args:
        base: Per-candidate RDP curve (including the score release).
        search: Run-count distribution and density bounds of the search.
        delta: Target δ ∈ (0, 1).
        charged_runs: Number of lost attempts (≥ 0); 0 gives exactly :func:`~dphypo.privacy.accountant.account`.
        profile: Optional privacy profile of one candidate run (uniform searches only use it).
        adaptive_theorem: Bound for C > c, as in :func:`~dphypo.privacy.accountant.account` (``"B"``: Theorem B
            of ``docs/proofs/adaptive.md``, default; ``"A"``: Theorem A; ``"published"``: DP-HyPO Theorem 1 as
            printed).

    Returns:
        A report whose ``epsilon`` covers the search and the charged attempts; ``charged_runs`` and
        ``charged_epsilon`` (what the charge added) are filled in, and ``methods`` lists every bound evaluated.
    """
    check_non_negative_int("charged_runs", charged_runs)
    if charged_runs == 0:
        return account(base, search, delta, profile=profile, adaptive_theorem=adaptive_theorem)
    extra = base.repeated(charged_runs)
    candidates: list[PrivacyReport] = []
    if not isinstance(search.run_count, Binomial):  # binomial T has no RDP theorem
        skipped = profile if isinstance(profile, ProfileSkipped) else None  # kept, so the report says why
        candidates.append(_charged_by_rdp(base, extra, search, delta, charged_runs, adaptive_theorem, skipped))
    if profile is not None and not isinstance(profile, ProfileSkipped) and not search.adaptive:
        by_profile = _charged_by_profile(base, extra, search, delta, charged_runs, profile)
        if by_profile is not None:
            candidates.append(by_profile)
    if not candidates:
        raise ValueError(f"no bound covers the search with {charged_runs} charged attempts (binomial T needs a "
                         "privacy profile)")
    methods = {report.method: report.epsilon for report in candidates}
    used = min(candidates, key=lambda report: report.epsilon)
    if not math.isfinite(used.epsilon):
        raise ValueError(f"no finite bound for the search with {charged_runs} charged attempts")
    return replace(used, methods=methods)


def _charged_by_rdp(base: RdpCurve, extra: RdpCurve, search: RepeatAndSelect, delta: float, charged_runs: int,
                    adaptive_theorem: str, skipped: ProfileSkipped | None) -> PrivacyReport:
    """The search's RDP curve composed with the charged runs (Mironov 2017, Prop. 1), broken down in RDP too."""
    uncharged = account(base, search, delta, profile=skipped, adaptive_theorem=adaptive_theorem)  # RDP alone
    searched = tuning_rdp(base, search.run_count, search.C, search.c, adaptive_theorem=adaptive_theorem).curve
    epsilon, order = _rdp_epsilon(compose(searched, extra), delta)
    return replace(
        uncharged, epsilon=epsilon, order=order, charged_runs=charged_runs,
        charged_epsilon=epsilon - uncharged.epsilon,
        theorem=f"{uncharged.theorem} + {charged_runs} charged run(s) composed in RDP (Mironov 2017, Prop. 1)",
    )


def _charged_by_profile(base: RdpCurve, extra: RdpCurve, search: RepeatAndSelect, delta: float, charged_runs: int,
                        profile: Any) -> PrivacyReport | None:
    """The best profile bound at δ/2 plus the charged runs' RDP ε at δ/2 (basic composition), broken down as such.

    ``None`` when no profile bound applies.
    """
    bounds = profile_bounds(profile, search, delta / 2, base_rdp=base)
    if not bounds:
        return None
    name = min(bounds, key=lambda key: bounds[key].epsilon)
    half = account(base, search, delta / 2, profile=profile)  # one run's ε at δ/2 (min of RDP and PLD)
    extra_half = _rdp_epsilon(extra, delta / 2)[0]
    selected = bounds[name].epsilon
    return replace(
        half, epsilon=selected + extra_half, delta=delta, repetition_epsilon=selected - half.base_epsilon,
        adaptivity_epsilon=0.0, order=bounds[name].order, order_hat=math.nan, method=f"{name}+basic",
        charged_runs=charged_runs, charged_epsilon=extra_half,
        theorem=f"{bounds[name].theorem} at δ/2 + {charged_runs} charged run(s) at δ/2 (basic composition, Dwork & "
                "Roth 2014, Theorem 3.16)",
    )

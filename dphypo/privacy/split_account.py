r"""A single-stage search under a per-record split: every selection theorem on each side, then the worse side.

docs/proofs/split.md, Corollary S1: under a per-record split (:class:`~dphypo.privacy.split.SplitRule`) a search is
bounded by the worse of "the record is in training" (the selection theorem applied to every run's DP-SGD part; the
scores are post-processing) and "the record is in validation" (the same theorem applied to every run's score
release). :func:`account_split` evaluates each side with the whole accountant
(:func:`~dphypo.privacy.charged.account_charged`: every RDP bound of :func:`~dphypo.privacy.search_rdp.rdp_bounds`
and, for a uniform search, the profile bounds of :mod:`dphypo.privacy.profile_tuning`, lost attempts charged on
both sides) and reports ``max(ε_train, ε_val)`` at the same δ.

Why the worse side's *smallest* bound is valid: each side's report says that side's whole search is (ε_s, δ)-DP on
every pair of that side, i.e. δ_s(ε_s) ≤ δ for the side's (non-increasing) profile; at ε = max(ε_train, ε_val)
both sides are ≤ δ, so Theorem S's ``max(δ_train(ε), δ_val(ε)) ≤ δ``. Only the ``"max"`` bound of Theorem S (valid
for every per-record rule); the mixture needs both sides' whole profiles and is not used here.

A per-run mixture is never used (docs/proofs/split.md §6.1). Every size behind the parts (q, steps, the score's
divisor) must be a public nominal value (assumption (N), §5): the caller's (``DPSGDMechanism.from_splits``).

Pure numpy/scipy and dp_accounting; no torch, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from dphypo.privacy.charged import account_charged
from dphypo.privacy.dpsgd_run import RUN_PROFILE_DISCRETIZATION, score_release_profile
from dphypo.privacy.profiles import MAX_PLD_POINTS, PrivacyProfile, ProfileSkipped, dpsgd_profile, profile_or_skipped
from dphypo.privacy.rdp import RdpCurve, compose, dpsgd_rdp, gaussian_rdp
from dphypo.privacy.spec import PrivacyReport, RepeatAndSelect
from dphypo.privacy.split import SplitRule
from dphypo.privacy.validation import check_delta, check_non_negative_int

__all__ = ["SPLIT_MAX_BOUND", "SUM_BOUND", "SplitParts", "account_split", "check_split_parts", "split_parts"]

#: How a release names Theorem S's bound (docs/proofs/split.md, Corollaries S1 and S3).
SPLIT_MAX_BOUND = "Theorem S (max of train/validation sides)"
#: How a release names the bound every command uses without a per-record split (privacy/dpsgd_run.py).
SUM_BOUND = "sum of DP-SGD and score parts"


@dataclass(frozen=True)
class SplitParts:
    """The two sides of one candidate run under a per-record split: what :func:`account_split` takes.

    Args:
        rule: The per-record split rule.
        training: Per-run RDP curve of the DP-SGD training alone, valid for every candidate.
        score: Per-run RDP curve of the score release alone (the Gaussian count), same orders.
        training_profile: Optional profile (both directions) of the training alone, with ``training``'s event, or a
            :class:`~dphypo.privacy.profiles.ProfileSkipped` (that side is then accounted in RDP only).
        score_profile: Optional profile of the score release alone, with ``score``'s event.

    Raises:
        ValueError: Not a rule or curves, curves on different orders, or a profile of another mechanism than its
            curve (checked by the accountant).
    """

    rule: SplitRule
    training: RdpCurve
    score: RdpCurve
    training_profile: Any = None
    score_profile: Any = None

    def __post_init__(self) -> None:
        if not isinstance(self.rule, SplitRule):
            raise ValueError(f"rule must be a SplitRule, got {self.rule!r}")
        for name in ("training", "score"):
            if not isinstance(getattr(self, name), RdpCurve):
                raise ValueError(f"{name} must be an RdpCurve, got {getattr(self, name)!r}")
        for name in ("training_profile", "score_profile"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, (PrivacyProfile, ProfileSkipped)):
                raise ValueError(f"{name} must be a PrivacyProfile, a ProfileSkipped or None, got {value!r}")
        compose(self.training, self.score)  # raises on different orders

    @property
    def summed(self) -> RdpCurve:
        """The per-run curve of both parts composed: what the sum charges (and what a search's ``base`` is)."""
        return compose(self.training, self.score)

    def uniform_only(self) -> SplitParts:
        """The same parts without profiles (for an adaptive search, where no profile bound is proven)."""
        return replace(self, training_profile=None, score_profile=None)


def check_split_parts(parts: SplitParts, base: RdpCurve) -> None:
    """Refuse parts that do not describe the run ``base`` bounds: their composition must carry ``base``'s event.

    The training layer checks every run against ``base`` (``Tuner``); the split accounting uses the parts, so they
    must be the two parts of exactly that mechanism (:mod:`dphypo.privacy.events`), never something cheaper.

    Raises:
        ValueError: Not :class:`SplitParts`, or events that are unknown or differ.
    """
    if not isinstance(parts, SplitParts):
        raise ValueError(f"split must be SplitParts, got {parts!r}")
    summed = parts.summed
    if base.event is None or summed.event is None or summed.event != base.event:
        from dphypo.privacy.events import describe_event

        raise ValueError(
            "the split parts must be the training and score parts of the run the curve bounds: the curve covers "
            f"{describe_event(base.event)}, the parts compose to {describe_event(summed.event)}"
        )


def split_parts(
    sigma: float, sample_rate: float, steps: int, *, score_noise: float | None, rule: SplitRule,
    orders: Iterable[float] | None = None, profiles: bool = False,
    discretization: float = RUN_PROFILE_DISCRETIZATION, max_points: int = MAX_PLD_POINTS,
) -> SplitParts:
    """The two parts of one DP-SGD candidate run (what ``dphypo tune`` runs) under a per-record split.

    Args:
        sigma: DP-SGD noise multiplier σ > 0.
        sample_rate: Poisson rate q, from the public nominal training size.
        steps: Noisy steps, from the public nominal training size.
        score_noise: Std (counts) of the score release; required (without it no bound covers a validation record).
        rule: The per-record split rule.
        orders: RDP orders (default :data:`~dphypo.privacy.DEFAULT_ORDERS`).
        profiles: Also build both parts' PLDs (a too-large training PLD becomes a ``ProfileSkipped``); the score's
            PLD uses the training PLD's interval.
        discretization: PLD grid interval.
        max_points: Cap on the grid points of the training PLD.

    Returns:
        The parts; ``parts.summed`` carries the event of :func:`~dphypo.privacy.dpsgd_run.dpsgd_run_rdp`.

    Raises:
        ValueError: No score noise, or invalid settings.
    """
    if score_noise is None:
        raise ValueError(
            "the split bound needs a private score (score_noise in counts): without it the validation side releases "
            "an exact count and no bound covers a record in validation; got score_noise=None"
        )
    training = dpsgd_rdp(sigma, sample_rate, steps, orders=orders)
    score = gaussian_rdp(float(score_noise), sensitivity=1.0, orders=orders)
    training_profile: Any = None
    score_profile: Any = None
    if profiles:
        training_profile = profile_or_skipped(
            lambda: dpsgd_profile(sigma, sample_rate, steps, discretization=discretization, max_points=max_points))
        grid = discretization if isinstance(training_profile, ProfileSkipped) else training_profile.discretization
        score_profile = score_release_profile(float(score_noise), discretization=grid)
    return SplitParts(rule, training, score, training_profile, score_profile)


def account_split(
    parts: SplitParts, search: RepeatAndSelect, delta: float, *, max_lost: int = 0, adaptive_theorem: str = "B",
) -> PrivacyReport:
    """Total (ε, δ) of a search under a per-record split: the worse side, each side by every valid bound.

    docs/proofs/split.md, Corollary S1 and Theorem S (``"max"``). Each side is
    :func:`~dphypo.privacy.charged.account_charged` (= :func:`~dphypo.privacy.accountant.account` without lost
    attempts) of that side's per-run part; lost attempts are charged on both sides (Corollary S3).

    Args:
        parts: The run's two parts.
        search: Run-count law and density bounds (the same selection on both sides).
        delta: Target δ ∈ (0, 1).
        max_lost: Lost attempts charged up front on both sides.
        adaptive_theorem: The bound for C > c, as in :func:`~dphypo.privacy.accountant.account`.

    Returns:
        The report: ``epsilon = max(ε_train, ε_val)``; ``methods`` holds every side's bounds (``"train:<method>"``,
        ``"val:<method>"``), ``method`` the worse side's best; ``bound`` is :data:`SPLIT_MAX_BOUND`; ``split`` the rule
        and both sides' ε; the breakdown is the worse of the sides' at each step (one run, a uniform search, the
        search, the charged attempts), so that it still adds up to ``epsilon``.

    Raises:
        ValueError: Bad parts or arguments, or what the accountant refuses on either side.
    """
    if not isinstance(parts, SplitParts):
        raise ValueError(f"parts must be SplitParts, got {parts!r}")
    check_delta(delta)
    check_non_negative_int("max_lost", max_lost)
    if search.adaptive:  # no profile bound is proven for an adaptive search (the accountant ignores them anyway)
        parts = parts.uniform_only()
    sides = {
        name: account_charged(curve, search, delta, int(max_lost), profile=profile, adaptive_theorem=adaptive_theorem)
        for name, curve, profile in (("train", parts.training, parts.training_profile),
                                     ("val", parts.score, parts.score_profile))
    }
    train, val = sides["train"], sides["val"]
    worse_name = "train" if train.epsilon >= val.epsilon else "val"
    worse = sides[worse_name]
    side = "training" if worse_name == "train" else "validation"
    epsilon = max(train.epsilon, val.epsilon)
    base = max(r.base_epsilon for r in sides.values())
    uniform = max(r.base_epsilon + r.repetition_epsilon for r in sides.values())
    uncharged = max(r.epsilon - r.charged_epsilon for r in sides.values())
    methods = {f"{name}:{method}": eps for name, report in sides.items() for method, eps in report.methods.items()}
    skipped = "; ".join(f"{name}: {r.profile_skipped}" for name, r in sides.items() if r.profile_skipped) or None
    return replace(
        worse,
        epsilon=epsilon,
        base_epsilon=base,
        repetition_epsilon=uniform - base,
        adaptivity_epsilon=uncharged - uniform,
        charged_epsilon=epsilon - uncharged,
        theorem=f"{SPLIT_MAX_BOUND}, worse side: {side}, by {worse.theorem} (docs/proofs/split.md, Corollary S1)",
        base_label=f"split: training ({train.base_label}) | validation ({val.base_label})",
        methods=methods,
        method=f"{worse_name}:{worse.method}",
        profile_skipped=skipped,
        bound=SPLIT_MAX_BOUND,
        split={"rule": parts.rule.describe(), "worse_side": side,
               "training_epsilon": _clean(train.epsilon), "validation_epsilon": _clean(val.epsilon),
               "training_method": train.method, "validation_method": val.method},
    )


def _clean(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None

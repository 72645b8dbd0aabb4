"""The privacy plan shared by the tuner and the accountant, so T is drawn from exactly what is accounted.

A :class:`PrivacyAccounting` adds the per-candidate RDP curve and δ to a :class:`~dphypo.privacy.spec.RepeatAndSelect`;
it is the single object that both the tuner (to draw T) and the accountant (to report ε) read, so the two can never
disagree (privacy rule 2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dphypo.privacy.accountant import account
from dphypo.privacy.adaptive import check_adaptive_theorem
from dphypo.privacy.charged import account_charged
from dphypo.privacy.rdp import RdpCurve
from dphypo.privacy.spec import PrivacyReport, RepeatAndSelect
from dphypo.privacy.split_account import SplitParts, account_split, check_split_parts
from dphypo.privacy.validation import check_delta, check_non_negative_int

__all__ = ["PrivacyAccounting"]


@dataclass(frozen=True)
class PrivacyAccounting:
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
        adaptive_theorem: Bound for an adaptive search (C > c): ``"B"`` (default, Theorem B of
            ``docs/proofs/adaptive.md``, proven and checked independently), ``"A"`` (Theorem A, its closed-form
            relaxation, opt-in) or ``"published"`` (DP-HyPO Theorem 1 as printed, opt-in).
        split: Under a per-record split (docs/proofs/split.md), the run's two parts
            (:class:`~dphypo.privacy.split_account.SplitParts`, composing to ``base``'s event): every bound is then
            evaluated on each side and the worse side reported (Theorem S, Corollary S1); ``profile`` is then unused
            (each part carries its own). ``None`` (default): the sum, ``base`` and ``profile`` as given.
    """

    search: RepeatAndSelect
    base: RdpCurve
    delta: float
    profile: Any = None
    adaptive_theorem: str = "B"
    max_lost: int = 0
    split: SplitParts | None = None

    def __post_init__(self) -> None:
        check_delta(self.delta)
        check_adaptive_theorem(self.adaptive_theorem)
        check_non_negative_int("max_lost", self.max_lost)
        object.__setattr__(self, "max_lost", int(self.max_lost))
        if self.split is not None:
            check_split_parts(self.split, self.base)

    def account(self) -> PrivacyReport:
        """The search's total (ε, δ) with its breakdown, ``max_lost`` lost attempts charged up front.

        The charge does not depend on how many attempts were actually lost (that count depends on the run and
        may depend on the data, docs/parallel.md): the reported ε is fixed before any data is touched.
        """
        if self.split is not None:
            return account_split(self.split, self.search, self.delta, max_lost=self.max_lost,
                                 adaptive_theorem=self.adaptive_theorem)
        if self.max_lost:
            return account_charged(self.base, self.search, self.delta, self.max_lost, profile=self.profile,
                                   adaptive_theorem=self.adaptive_theorem)
        return account(self.base, self.search, self.delta, profile=self.profile,
                       adaptive_theorem=self.adaptive_theorem)

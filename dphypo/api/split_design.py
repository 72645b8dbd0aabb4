"""Two-stage designs under a per-record split: the DP-SGD mechanisms' parts, side by side (Theorem S, Corollary S3).

Where a two-stage design is accounted or calibrated (:mod:`dphypo.api.two_stage`) and its runs use a per-record split
(``DPSGDMechanism.split_rule``, docs/proofs/split.md), the report is
:func:`~dphypo.privacy.split_search.account_two_stage_split`: the design's two-stage accounting of every run's DP-SGD
part (the record in training) and of every score release (the record in validation), each by its smallest valid
bound (RDP; the composed PLDs of released probes and one final run), then the worse side. Without a split everything
here is what :mod:`dphypo.api.two_stage` did before (the sum).

**Calibration.** :func:`~dphypo.api.two_stage.calibrate_mechanisms` keeps its two steps: the ratio of the two σ is
the design's budget split applied to each stage alone *as the sum accounts it* (configuration, fixed before any
data; any ratio is valid), then both σ are scaled by the smallest common factor whose total meets ε — under a
per-record split, the total of :func:`split_two_stage_report`. So a per-record split keeps the design's σ ratio and
lowers both σ by one factor (the split's total never exceeds the sum's at any σ pair).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from dphypo.privacy.dpsgd_run import RUN_PROFILE_DISCRETIZATION, score_release_profile
from dphypo.privacy.profiles import PldProfile, ProfileTooLargeError, dpsgd_profile
from dphypo.privacy.rdp import RdpCurve, dpsgd_rdp, gaussian_rdp
from dphypo.privacy.split import SplitRule
from dphypo.privacy.split_search import SplitTwoStageReport, account_two_stage_split
from dphypo.privacy.two_stage import FinalRun, ProbeRelease, TwoStage

if TYPE_CHECKING:
    from dphypo.train.mechanism import DPSGDMechanism

__all__ = ["split_description", "split_rule_of", "split_two_stage_report"]


def split_rule_of(probe: DPSGDMechanism, final: DPSGDMechanism) -> SplitRule | None:
    """The design's per-record split rule (``None``: a permutation split, the sum), the same for both stages.

    Raises:
        ValueError: The probes and the final run name different rules (both stages run on one split, Corollary S5).
    """
    if probe.split_rule != final.split_rule:
        raise ValueError(f"the probes and the final run must use one split (docs/proofs/split.md, Corollary S5), got "
                         f"{probe.split_rule} and {final.split_rule}")
    return probe.split_rule


def split_description(mechanism: DPSGDMechanism) -> dict[str, Any]:
    """``{"split_rule": ...}`` for a per-record split, else ``{}`` (a calibration cache key of the sum is unchanged)."""
    if mechanism.split_rule is None:
        return {}
    return {"split_rule": mechanism.split_rule.describe(), "split_bound": "max", "split_ratio": "sum stage-alone"}


def _parts(mechanism: DPSGDMechanism, orders: Iterable[float] | None) -> tuple[RdpCurve, RdpCurve]:
    if mechanism.score_noise is None:
        raise ValueError("a per-record split needs a private score (score_noise): without it the validation side "
                         "releases an exact count and no bound covers a record in validation")
    return (dpsgd_rdp(mechanism.sigma, mechanism.sample_rate, mechanism.steps, orders=orders),
            gaussian_rdp(mechanism.score_noise, sensitivity=1.0, orders=orders))


def _side_profiles(probe: DPSGDMechanism, final: DPSGDMechanism, discretization: float
                   ) -> tuple[tuple[PldProfile, PldProfile], tuple[PldProfile, PldProfile]] | None:
    """``((probe training, probe score), (final training, final score))`` PLDs on one grid, or ``None``.

    The coarser of the two training PLDs' grids (a long run's PLD may coarsen to fit its cap; PLDs compose on one
    grid only); ``None`` where a training PLD cannot be built (RDP only then).
    """
    try:
        trainings = [dpsgd_profile(m.sigma, m.sample_rate, m.steps, discretization=discretization)
                     for m in (probe, final)]
        grid = max(t.discretization for t in trainings)
        if any(t.discretization != grid for t in trainings):
            trainings = [dpsgd_profile(m.sigma, m.sample_rate, m.steps, discretization=grid) for m in (probe, final)]
    except ProfileTooLargeError:
        return None
    if trainings[0].discretization != trainings[1].discretization:
        return None
    assert probe.score_noise is not None and final.score_noise is not None  # _parts checked
    grid = trainings[0].discretization
    return ((trainings[0], score_release_profile(probe.score_noise, discretization=grid)),
            (trainings[1], score_release_profile(final.score_noise, discretization=grid)))


def split_two_stage_report(
    probe: DPSGDMechanism, final: DPSGDMechanism, design: TwoStage, delta: float, *, max_lost: int = 0,
    orders: Iterable[float] | None = None, discretization: float = RUN_PROFILE_DISCRETIZATION,
) -> SplitTwoStageReport:
    """The design's (ε, δ) under the mechanisms' per-record split: each side's two-stage accounting, the worse side.

    docs/proofs/split.md, Corollary S3 (:func:`~dphypo.privacy.split_search.account_two_stage_split`): with PLDs of
    each part where the design has a PLD bound (released probes, one final run), ``max_lost`` lost attempts per stage
    charged on both sides.

    Args:
        probe: One probe's mechanism (its ``split_rule`` set).
        final: One final run's mechanism (the same rule).
        design: The design.
        delta: δ.
        max_lost: Lost attempts charged per stage.
        orders: RDP orders (e.g. the coarse grid of a calibration's bracket).
        discretization: The finest PLD grid asked for.

    Returns:
        The report (a :class:`~dphypo.privacy.two_stage.TwoStageReport`).

    Raises:
        ValueError: No split rule, different rules, or no private score.
    """
    rule = split_rule_of(probe, final)
    if rule is None:
        raise ValueError("split_two_stage_report needs mechanisms with a split_rule (a per-record split)")
    probe_training, probe_score = _parts(probe, orders)
    final_training, final_score = _parts(final, orders)
    profiles = None
    if isinstance(design.stage1, ProbeRelease) and isinstance(design.stage2, FinalRun):
        profiles = _side_profiles(probe, final, discretization)
    return account_two_stage_split(
        probe_training, probe_score, final_training, final_score, design.stage1, design.stage2, delta, rule,
        probe_profiles=None if profiles is None else profiles[0],
        final_profiles=None if profiles is None else profiles[1],
        charged_probes=max_lost, charged_finals=max_lost,
    )

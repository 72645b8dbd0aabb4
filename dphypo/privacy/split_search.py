r"""Whole searches under a per-record split: each side bounded by the search's own theorem, then the worse side.

docs/proofs/split.md: Corollary S1 (a selection: Sel applied to each side's per-run part, then Theorem S) and
Corollary S3 (two stages: each side's two-stage accounting, then Theorem S); the default of ``dphypo tune``.

* :func:`split_tuning_rdp`: ``max(Sel(ε_DPSGD), Sel(ε_score))`` (or the mixture for ``kind="draw"``), with Sel
  :func:`~dphypo.privacy.search_rdp.tuning_rdp` — never Sel of a per-run mixture (§6.1).
* :func:`account_two_stage_split`: :func:`~dphypo.privacy.two_stage.account_two_stage` run twice, on the training
  parts and on the score parts of the probes and the final run; the search is (max(ε_train, ε_val), δ)-DP, because
  each side's search is (ε_side, δ)-DP and Theorem S's max bounds the profile by max(δ_train, δ_val) (the ``"max"``
  bound; the mixture for fixed compositions is :func:`~dphypo.privacy.dpsgd_run.runs_split_profile`).

Pure numpy/scipy and dp_accounting; no torch, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dphypo.privacy.profiles import PldProfile
from dphypo.privacy.rdp import RdpCurve
from dphypo.privacy.run_counts import RunCountDistribution
from dphypo.privacy.search_rdp import tuning_rdp
from dphypo.privacy.split import SplitBound, SplitRule, split_rdp
from dphypo.privacy.split_account import SPLIT_MAX_BOUND
from dphypo.privacy.two_stage import Stage1, Stage2, TwoStageReport, account_two_stage

__all__ = ["SplitTwoStageReport", "account_two_stage_split", "split_tuning_rdp"]


def _check_rule(rule: object) -> SplitRule:
    if not isinstance(rule, SplitRule):
        raise ValueError(f"rule must be a SplitRule, got {rule!r}")
    return rule


def split_tuning_rdp(
    training: RdpCurve,
    score: RdpCurve,
    run_count: RunCountDistribution,
    C: float = 1.0,
    c: float = 1.0,
    *,
    rule: SplitRule,
    bound: SplitBound = "max",
    adaptive_theorem: str = "B",
) -> RdpCurve:
    """RDP curve of a selection under a per-record split (docs/proofs/split.md, Corollary S1).

    Args:
        training: Per-run RDP curve of the training part (DP-SGD), valid for every candidate.
        score: Per-run RDP curve of the score release, same orders.
        run_count: The law of T, as for :func:`~dphypo.privacy.search_rdp.tuning_rdp`.
        C: Density upper bound (1 for a uniform search).
        c: Density lower bound.
        rule: The per-record split rule.
        bound: ``"max"`` or ``"mixture"`` (``rule.kind == "draw"``), taken on the two *whole-search* curves.
        adaptive_theorem: As for :func:`~dphypo.privacy.search_rdp.tuning_rdp`.

    Returns:
        The search's curve; ``event`` is ``None``.

    Raises:
        ValueError: A bound the rule does not support, or what ``tuning_rdp`` refuses.
    """
    _check_rule(rule).check_bound(bound)
    sides = [tuning_rdp(part, run_count, C, c, adaptive_theorem=adaptive_theorem).curve for part in (training, score)]
    return split_rdp(sides[0], sides[1], rule, bound=bound)


@dataclass(frozen=True)
class SplitTwoStageReport(TwoStageReport):
    """A two-stage search accounted side by side under a per-record split (Corollary S3, the ``"max"`` bound).

    A :class:`~dphypo.privacy.two_stage.TwoStageReport` (so every consumer of one reads it): ``epsilon`` is
    ``max(train.epsilon, val.epsilon)``; ``method`` the worse side's best (``"train:pld"``, ``"val:rdp"``, ...);
    ``methods`` every side's bounds (``"train:<method>"``, ``"val:<method>"``); each stage's ε alone the worse of its
    sides' (a stage alone is a search Theorem S bounds); ``curve`` the RDP max of the sides' composed curves.

    Attributes:
        rule: The split rule.
        train: The two-stage report of the record in training (every run's DP-SGD; scores post-processing).
        val: The two-stage report of the record in validation (every score release).
    """

    rule: SplitRule
    train: TwoStageReport
    val: TwoStageReport

    @property
    def worse_side(self) -> str:
        """``"training"`` or ``"validation"``: the side whose bound is :attr:`epsilon`."""
        return "training" if self.train.epsilon >= self.val.epsilon else "validation"

    @property
    def bound(self) -> str:
        """The bound that gave :attr:`epsilon`, named for a release."""
        return f"{SPLIT_MAX_BOUND}, worse side: {self.worse_side} (docs/proofs/split.md, Corollary S3)"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary: the worse side's as a two-stage report, the bound, the rule and both sides."""
        return {**super().to_dict(), "bound": self.bound, "rule": self.rule.describe(),
                "train": self.train.to_dict(), "val": self.val.to_dict()}


def _split_report(train: TwoStageReport, val: TwoStageReport, delta: float, rule: SplitRule) -> SplitTwoStageReport:
    worse, name = (train, "train") if train.epsilon >= val.epsilon else (val, "val")
    methods = {f"{side}:{method}": eps for side, report in (("train", train), ("val", val))
               for method, eps in report.methods.items()}

    def theorem(stage: str) -> str:
        sides = getattr(train, stage), getattr(val, stage)
        if sides[0] == sides[1]:  # the usual case: one theorem bounds both sides
            return f"{sides[0]} (each side)"
        return f"training side: {sides[0]}; validation side: {sides[1]}"

    return SplitTwoStageReport(
        epsilon=max(train.epsilon, val.epsilon), delta=float(delta), method=f"{name}:{worse.method}", methods=methods,
        stage1_epsilon=max(train.stage1_epsilon, val.stage1_epsilon),
        stage2_epsilon=max(train.stage2_epsilon, val.stage2_epsilon),
        stage1_theorem=theorem("stage1_theorem"), stage2_theorem=theorem("stage2_theorem"), order=worse.order,
        expected_runs=train.expected_runs, curve=split_rdp(train.curve, val.curve, rule, bound="max"),
        rule=rule, train=train, val=val,
    )


def account_two_stage_split(
    probe_training: RdpCurve,
    probe_score: RdpCurve,
    final_training: RdpCurve,
    final_score: RdpCurve,
    stage1: Stage1,
    stage2: Stage2,
    delta: float,
    rule: SplitRule,
    *,
    probe_profiles: tuple[PldProfile, PldProfile] | None = None,
    final_profiles: tuple[PldProfile, PldProfile] | None = None,
    charged_probes: int = 0,
    charged_finals: int = 0,
) -> SplitTwoStageReport:
    """(ε, δ) of a two-stage search under a per-record split: the worse of its two sides (Corollary S3).

    Args:
        probe_training: RDP curve of one probe's DP-SGD.
        probe_score: RDP curve of one probe's score release (the Gaussian count).
        final_training: RDP curve of one final run's DP-SGD.
        final_score: RDP curve of one final run's score release (``zero_rdp`` if it releases none).
        stage1: :class:`~dphypo.privacy.two_stage.ProbeSelection` or :class:`~dphypo.privacy.two_stage.ProbeRelease`.
        stage2: :class:`~dphypo.privacy.two_stage.FinalRun` or :class:`~dphypo.privacy.two_stage.FinalSelection`.
        delta: Target δ ∈ (0, 1).
        rule: The per-record split rule (any kind: the max needs no secrecy).
        probe_profiles: ``(training PLD, score PLD)`` of one probe, for the PLD bound where the design has one.
        final_profiles: ``(training PLD, score PLD)`` of one final run, same discretisation.
        charged_probes: Lost probe attempts, charged on both sides.
        charged_finals: Lost final attempts, charged on both sides.

    Returns:
        The report; each side's ``epsilon`` is the smallest of its valid bounds.

    Raises:
        ValueError: A bad rule, or what :func:`~dphypo.privacy.two_stage.account_two_stage` refuses.
    """
    _check_rule(rule)
    sides = []
    for index, (probe, final) in enumerate(((probe_training, final_training), (probe_score, final_score))):
        sides.append(account_two_stage(
            probe, final, stage1, stage2, delta,
            probe_profile=None if probe_profiles is None else probe_profiles[index],
            final_profile=None if final_profiles is None else final_profiles[index],
            charged_probes=charged_probes, charged_finals=charged_finals,
        ))
    train, val = sides
    return _split_report(train, val, delta, rule)

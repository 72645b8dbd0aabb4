r"""``dphypo.tune_two_stage``: cheap probes whose outcome is released, then one committed full-fidelity run.

A two-stage search (:class:`~dphypo.privacy.two_stage.TwoStage`, accounted by
:mod:`dphypo.privacy.two_stage`) fixes before any data is touched the probes' fidelity (``probe_epochs`` ≤ the
final run's epochs), how stage 1 releases its outcome, ``k`` and the budget split; then

1. **stage 1** trains the probes with DP-SGD at the probe fidelity and probe σ, each with its noisy validation
   score (at ``probe_score_noise_factor`` times the final run's score noise, :func:`probe_training`): a
   :class:`~dphypo.privacy.two_stage.ProbeRelease` trains a fixed number n of probes and releases every
   probe's (hyperparameters, noisy score), so where a probe is placed may depend on the earlier scores (the
   ``strategy``: uniform draws from the prior, or GP-UCB, post-processing of released outputs; or a ``placement``,
   :class:`~dphypo.strategies.gp.placement.ProbePlacement`: batches placed by BoTorch acquisitions on the GP of the
   released probes, the simulator's :func:`~dphypo.strategies.gp.placement.place_probes`); a
   :class:`~dphypo.privacy.two_stage.ProbeSelection` is a private selection (random T, densities in S_{C,c}) that
   releases its best probe only;
2. **stage 2** trains the stage-1 winner once at full fidelity and the final σ
   (:class:`~dphypo.privacy.two_stage.FinalRun`), or runs a uniform private selection with random T′ over the
   stage-1 top k (:class:`~dphypo.privacy.two_stage.FinalSelection`), and releases that model with its noisy score.
   The winner (or top k) is chosen from stage 1's release alone by the ``recommend`` rule
   (:func:`~dphypo.strategies.recommend.recommend`: the best probe, today's, or the GP's posterior mean, ...).

The release is the final model, its hyperparameters and noisy score, **and everything stage 1 released** (shown in
:attr:`TwoStageOutcome.probes`), with the total (ε, δ) of :func:`~dphypo.privacy.two_stage.account_two_stage`:
the two stages' RDP curves composed (Mironov 2017, Prop. 1) and, for released probes and one final run, the
composed PLDs; the smaller valid bound is used and named. A reader recomputes it from the two mechanisms and the
design (:meth:`TwoStageOutcome.to_dict` holds both σ, q and steps).

Privacy rules (docs/privacy.md): T (of a probe selection) and T′ are drawn from the accounted laws before any data
is touched (rule 2); every density the probe sampler uses is its strategy's projection onto S_{C,c} (rule 3; for
released probes C and c are not charged, the composition covers any placement); every released score is a run's
noisy score covered by its own curve (rule 4); a failed run scores worst and is not retried (rule 5); all random
streams come from the secret seed or fresh OS entropy (rule 6). The curator-only histories hold T, T′ and every
run's score.

**Crash safety.** With ``journal=`` the search is recorded in one journal
(:class:`~dphypo.search.storage.SQLiteJournal`, curator only), sealed before any data is touched with the design,
both mechanisms, the seed and both drawn counts T and T′; every probe and every final run is journaled as it
finishes (runs numbered on from stage 1 to stage 2, :class:`~dphypo.search.storage.StageJournal`), the best final
run's model with it. Running the same call again resumes: the counts and σ are read back, never redrawn or
recalibrated, finished runs are replayed, and an attempt a dead process left in flight is charged against
``max_lost``, which the total ε charges up front in each stage (:func:`charged_mechanisms`); the release is the
uninterrupted search's at the same seed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack

import numpy as np

from dphypo._paths import check_output_file
from dphypo.api.calibration_cache import cached_sigmas
from dphypo.api.search import fresh_entropy, pass_options, resolve_strategy
from dphypo.api.split_design import split_description, split_two_stage_report
from dphypo.privacy.calibration import COARSE_DISCRETIZATION, COARSE_ORDERS, coarse_to_fine_sigma
from dphypo.privacy.profiles import PldProfile, ProfileTooLargeError
from dphypo.privacy.two_stage import (
    FinalRun,
    FinalSelection,
    ProbeRelease,
    ProbeSelection,
    TwoStage,
    TwoStageDesignError,
    TwoStageReport,
    account_two_stage,
    calibrate_two_stage,
)
from dphypo.privacy.validation import check_delta, check_int_at_least, check_non_negative_int, check_positive
from dphypo.search.evaluation import Objective, run_batch
from dphypo.search.execution import Executor, make_executor
from dphypo.search.limits import check_expected_runs
from dphypo.search.loop import best_trial
from dphypo.search.options import SearchOptionFields, SearchOptions, resolve_options
from dphypo.search.recording import Recorder
from dphypo.search.records import Run, Trial
from dphypo.search.run import SearchRun, SearchStreams
from dphypo.search.storage import (
    Journal,
    JournalMismatch,
    MemoryJournal,
    SealedSearch,
    SQLiteJournal,
    StageJournal,
)
from dphypo.search.storage.base import mismatch
from dphypo.search.storage.describe import describe
from dphypo.search.tuner import Release, SearchHistory, SearchResult, _objective_description, release_payload
from dphypo.space import SearchSpace
from dphypo.strategies import Strategy, Uniform
from dphypo.strategies.base import Direction
from dphypo.strategies.gp.placement import ProbePlacement, place_probes
from dphypo.strategies.recommend import RECOMMENDATIONS, Recommendation, recommend
from dphypo.strategies.released import released_probes
from dphypo.train.mechanism import check_probe_fidelity
from dphypo.train.objective import check_dpsgd_space
from dphypo.train.recipe import DPSGD

if TYPE_CHECKING:
    from dphypo.train.mechanism import DPSGDMechanism

__all__ = [
    "DEFAULT_TWO_STAGE",
    "ReleasedProbe",
    "TwoStageOutcome",
    "TwoStageSearchResult",
    "calibrate_mechanisms",
    "charged_mechanisms",
    "check_placement",
    "check_probe_score_noise_factor",
    "default_probe_epochs",
    "probe_training",
    "tune_two_stage",
    "two_stage_mechanisms",
    "two_stage_release_payload",
]

#: The design the studies favour at dphypo tune's default budget (ε = 8, about 20 runs, docs/studies.md "Two-stage
#: designs with cheap probes"): 20 released probes, one committed run, half the budget each.
DEFAULT_TWO_STAGE = TwoStage(ProbeRelease(20), FinalRun(), split=0.5)

# Entropy tags separating the stages' streams (SeedSequence([entropy, tag]) has its own entropy pool); _PLACE_TAG:
# the post-processing of stage 1's release (probe placement and the recommendation).
_PROBE_TAG, _FINAL_TAG, _PLACE_TAG = 0x9B0BE5, 0xF17A15, 0x91ACE5
# Streams within a stage (spawn keys): its run count, its candidate draws, its strategy, its per-run seeds.
_COUNT, _SAMPLING, _STRATEGY, _RUNS = range(4)
# Streams of _PLACE_TAG (spawn keys): the placement's generator, the recommendation's fit seed.
_PLACEMENT, _RECOMMEND = range(2)


def default_probe_epochs(epochs: int) -> int:
    """A fifth of the final run's epochs, at least one (2 of 10: the probes of the studies' best design)."""
    check_int_at_least("epochs", epochs, 1)
    return max(1, round(epochs / 5))


def check_probe_score_noise_factor(factor: float) -> float:
    """``factor`` as a float, refused in one line unless finite and > 0."""
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not (0.0 < float(factor) < math.inf):
        raise ValueError(f"probe_score_noise_factor must be a finite number > 0 (the probes' score noise as a "
                         f"multiple of the final run's), got {factor!r}")
    return float(factor)


def probe_training(training: DPSGD, probe_epochs: int, probe_score_noise_factor: float = 1.0) -> DPSGD:
    """How every probe trains: ``training`` with ``probe_epochs`` and its score noise times the factor.

    A probe's released score is the Gaussian release of its count of correct validation predictions with std
    ``probe_score_noise_factor · training.score_noise`` (counts); its curve, α/(2·std²) per probe (Mironov 2017,
    Prop. 7), is part of the probe's mechanism, so the accounting, the calibration and the probe's noisy score all
    follow from it (:meth:`~dphypo.train.mechanism.DPSGDMechanism.rdp`, ``.profile``, ``private_score``).

    Raises:
        ValueError: A bad factor, or a factor other than 1 for a training that releases no noisy score.
    """
    check_int_at_least("probe_epochs", probe_epochs, 1)
    factor = check_probe_score_noise_factor(probe_score_noise_factor)
    if training.score_noise is None:
        if factor != 1.0:
            raise ValueError(f"probe_score_noise_factor={factor:g} scales the final run's score noise, but the "
                             "training releases no noisy score (score_noise is None)")
        return dataclasses.replace(training, epochs=probe_epochs)
    return dataclasses.replace(training, epochs=probe_epochs, score_noise=training.score_noise * factor)


@dataclass(frozen=True)
class ReleasedProbe:
    """A probe stage 1 released (publishable: covered by the probe's own curve).

    Attributes:
        params: Its hyperparameters.
        score: Its noisy validation score; ``None`` for a probe that failed on the data (scored worst).
    """

    params: dict[str, Any]
    score: float | None


@dataclass(frozen=True)
class TwoStageOutcome:
    """How a two-stage release was obtained (publishable: the design, the mechanisms, what stage 1 released).

    Attributes:
        design: The design.
        probe_mechanism: Every probe's DP-SGD mechanism (σ, q, steps, score noise).
        final_mechanism: Every final run's mechanism.
        probes: What stage 1 released: every probe in run order (released probes), or the best probe (a probe
            selection; empty when its T was 0).
        finalists: The stage-1 top k handed to stage 2 (post-processing of the release): the final run's
            hyperparameters, or the candidates of the final selection.
        report: The accounting (total ε, each stage's ε and theorem, every valid bound).
        final_failed: The released final run failed on the data (no model; not retried).
        max_lost: Lost attempts each stage was charged for up front (in ``report``).
        placement: Who placed the probes (JSON-ready): ``{"via": "strategy", "name": ...}`` (the search core's
            strategy) or ``{"via": "place_probes", "name": "gp-log-nei", ...configuration}``.
        recommendation: The rule that chose the finalists (JSON-ready): ``{"rule": ..., "fell_back": bool}``
            (``fell_back``: a GP rule had no usable fit and the best probe was committed).
    """

    design: TwoStage
    probe_mechanism: DPSGDMechanism
    final_mechanism: DPSGDMechanism
    probes: tuple[ReleasedProbe, ...]
    finalists: tuple[dict[str, Any], ...]
    report: TwoStageReport
    final_failed: bool = False
    max_lost: int = 0
    placement: dict[str, Any] = dataclasses.field(default_factory=lambda: {"via": "strategy", "name": "uniform"})
    recommendation: dict[str, Any] = dataclasses.field(
        default_factory=lambda: {"rule": "best-probe", "fell_back": False})

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary: enough to recompute the total ε (both mechanisms and the design)."""

        def mechanism(m: DPSGDMechanism) -> dict[str, Any]:
            return {"sigma": m.sigma, "sample_rate": m.sample_rate, "steps": m.steps, "epochs": m.epochs,
                    "batch_size": m.batch_size, "score_noise": m.score_noise}

        return {
            "design": self.design.describe(), "probe_mechanism": mechanism(self.probe_mechanism),
            "final_mechanism": mechanism(self.final_mechanism),
            "released_probes": [{"params": p.params, "score": p.score} for p in self.probes],
            "finalists": list(self.finalists), "accounting": self.report.to_dict(), "final_failed": self.final_failed,
            "max_lost_per_stage": self.max_lost, "placement": dict(self.placement),
            "recommendation": dict(self.recommendation),
        }


@dataclass(frozen=True)
class TwoStageSearchResult(SearchResult):
    """A two-stage search: ``release`` is the final model with the total ε; ``two_stage`` says how it was obtained.

    ``history`` (curator only) is stage 1's (T of a probe selection, every probe's score and timing);
    ``final_history`` (curator only) is stage 2's.
    """

    final_history: SearchHistory | None = None
    two_stage: TwoStageOutcome | None = None


def two_stage_mechanisms(
    training: DPSGD, design: TwoStage, *, probe_epochs: int, epsilon: float | None, delta: float,
    sigmas: tuple[float, float] | None = None, probe_score_noise_factor: float = 1.0,
) -> tuple[DPSGDMechanism, DPSGDMechanism, TwoStageReport]:
    """The probes' and the final runs' mechanisms and the accounting, from a total ε or both σ; no data read.

    Args:
        training: The final runs' DP-SGD settings (the probes take ``probe_epochs`` of the same).
        design: The design.
        probe_epochs: Epochs of every probe, 1 ≤ ``probe_epochs`` ≤ ``training.epochs``.
        epsilon: Total ε to calibrate both σ for (:func:`~dphypo.privacy.two_stage.calibrate_two_stage`).
        delta: δ.
        sigmas: ``(probe σ, final σ)`` instead of ``epsilon`` (the total ε is then reported).
        probe_score_noise_factor: The probes' score noise as a multiple of ``training.score_noise``
            (:func:`probe_training`; default 1).

    Returns:
        ``(probe mechanism, final mechanism, report)``; the report takes the smallest valid bound (the composed
        PLDs of released probes and one final run where both profiles exist).

    Raises:
        TwoStageDesignError: Probes above the final fidelity.
        ValueError: Not exactly one of ``epsilon`` and ``sigmas``, or bad values.
    """
    check_delta(delta)
    probes = probe_training(training, probe_epochs, probe_score_noise_factor)
    check_probe_fidelity(probes.mechanism(1.0), training.mechanism(1.0))
    if (epsilon is None) == (sigmas is None):
        raise ValueError("give exactly one of epsilon (total budget to calibrate both stages for) or sigmas "
                         "((probe sigma, final sigma), fixed)")
    if sigmas is None:
        assert epsilon is not None
        check_positive("epsilon", epsilon)
        sigmas, report = _calibrated_sigmas(probes, training, design, epsilon, delta)
        return probes.mechanism(sigmas[0]), training.mechanism(sigmas[1]), report
    probe, final = probes.mechanism(sigmas[0]), training.mechanism(sigmas[1])
    return probe, final, _report(probe, final, design, delta)


def _calibrated_sigmas(probes: DPSGD, training: DPSGD, design: TwoStage, epsilon: float, delta: float,
                       *, coarse: bool = True, cache: bool = True) -> tuple[tuple[float, float], TwoStageReport]:
    """Both σ for a total ε and the report there: :func:`calibrate_mechanisms` of both trainings' mechanisms."""
    return calibrate_mechanisms(probes.mechanism(1.0), training.mechanism(1.0), design, epsilon, delta,
                                coarse=coarse, cache=cache)


def calibrate_mechanisms(probe: DPSGDMechanism, final: DPSGDMechanism, design: TwoStage, epsilon: float,
                         delta: float, *, coarse: bool = True, cache: bool = True
                         ) -> tuple[tuple[float, float], TwoStageReport]:
    """Both σ for a total ε and the report there: the smallest common scale whose smallest valid bound meets ε.

    The one two-stage calibration of dphypo: :func:`dphypo.tune` runs it, and a simulation
    (:func:`dphypo.simulation.two_stage.calibrate_design`) calls it on a landscape family's mechanisms, so a
    simulated design runs at the σ ``tune`` would run it at. Only the mechanisms' σ-independent fields matter (q,
    steps, score noise); their σ is replaced.

    :func:`~dphypo.privacy.two_stage.calibrate_two_stage` fixes the ratio of the two σ by the split (each stage alone
    calibrated to its share, RDP) and scales both by the smallest common factor whose total meets ε under the
    accounting the search reports (:func:`_report`): for released probes and one final run the composed PLDs are
    tighter (7.99 against 8.83 by RDP on the default design on digits), so their slack goes to less noise. Every
    root is found coarse to fine (``coarse``; the coarse accounting on
    :data:`~dphypo.privacy.calibration.COARSE_ORDERS` and PLDs at
    :data:`~dphypo.privacy.calibration.COARSE_DISCRETIZATION`, each answer certified at full precision), and the
    result is cached on disk by the description of both mechanisms, the design and (ε, δ) (``cache``;
    :mod:`dphypo.api.calibration_cache`: a cached pair is re-certified by one full accounting, the report returned).

    Args:
        probe: One probe's mechanism (any σ).
        final: One final run's mechanism (any σ).
        design: The design.
        epsilon: Total ε.
        delta: δ.
        coarse: Find every root coarse to fine.
        cache: Use the on-disk calibration cache.

    Returns:
        ``((probe σ, final σ), report)``.

    Raises:
        CalibrationError: No σ meets ε, or ε does not determine the noise.
    """
    description = {"calibration": "two-stage", "design": design.describe(), "epsilon": float(epsilon),
                   "delta": float(delta), "probe": _mechanism_description(probe),
                   "final": _mechanism_description(final), "accounting": "rdp+pld (composed) where valid"}

    def at(mechanism: DPSGDMechanism, sigma: float) -> DPSGDMechanism:
        return dataclasses.replace(mechanism, sigma=sigma)

    def report_at(probe_sigma: float, final_sigma: float) -> TwoStageReport:
        return _report(at(probe, probe_sigma), at(final, final_sigma), design, delta)

    def compute() -> tuple[tuple[float, float], TwoStageReport]:
        options: dict[str, Any] = {"split": design.split, "account_at": report_at}
        if coarse:
            options.update(coarse_probe_for_sigma=lambda s: at(probe, s).rdp(COARSE_ORDERS),
                           coarse_final_for_sigma=lambda s: at(final, s).rdp(COARSE_ORDERS),
                           coarse_account_at=lambda p, f: _coarse_epsilon(at(probe, p), at(final, f), design, delta))
        calibration = calibrate_two_stage(epsilon, delta, design.stage1, design.stage2,
                                          lambda s: at(probe, s).rdp(), lambda s: at(final, s).rdp(), **options)
        return (calibration.probe_sigma, calibration.final_sigma), calibration.report

    def certify(sigmas: tuple[float, ...]) -> TwoStageReport | None:
        if len(sigmas) != 2:
            return None
        report = report_at(*sigmas)
        return report if report.epsilon <= epsilon else None

    if not cache:
        return compute()
    sigmas, report = cached_sigmas(description, compute, certify)
    return (sigmas[0], sigmas[1]), report


def _mechanism_description(mechanism: DPSGDMechanism) -> dict[str, Any]:
    """What one run's privacy depends on besides σ (JSON-ready): q, steps, the score release."""
    return {"sample_rate": mechanism.sample_rate, "steps": mechanism.steps, "score_noise": mechanism.score_noise,
            **split_description(mechanism)}  # a per-record split's rule (Theorem S), absent for the sum


def _coarse_epsilon(probe: DPSGDMechanism, final: DPSGDMechanism, design: TwoStage, delta: float) -> float:
    """:func:`_report`'s ε on the coarse accounting (calibration's bracket only, never reported)."""
    if probe.split_rule is not None:  # per-record split: Theorem S, each side (docs/proofs/split.md, Cor. S3)
        return split_two_stage_report(probe, final, design, delta, orders=COARSE_ORDERS,
                                      discretization=COARSE_DISCRETIZATION).epsilon
    profiles: tuple[PldProfile | None, PldProfile | None] = (None, None)
    if isinstance(design.stage1, ProbeRelease) and isinstance(design.stage2, FinalRun):
        profiles = _shared_profiles(probe, final, COARSE_DISCRETIZATION)
    return account_two_stage(probe.rdp(COARSE_ORDERS), final.rdp(COARSE_ORDERS), design.stage1, design.stage2, delta,
                             probe_profile=profiles[0], final_profile=profiles[1]).epsilon


def _report(probe: DPSGDMechanism, final: DPSGDMechanism, design: TwoStage, delta: float, *, max_lost: int = 0
            ) -> TwoStageReport:
    """:func:`~dphypo.privacy.two_stage.account_two_stage`, with both runs' PLDs where that bound is valid.

    ``max_lost`` lost attempts per stage are charged up front: ``max_lost`` more probe runs and ``max_lost`` more
    final runs, each composed as a released run of its stage (docs/privacy.md rule 8). Under a per-record split
    (``probe.split_rule``) the design is accounted side by side (Theorem S, Corollary S3:
    :func:`~dphypo.api.split_design.split_two_stage_report`).
    """
    if probe.split_rule is not None or final.split_rule is not None:
        return split_two_stage_report(probe, final, design, delta, max_lost=max_lost)
    profiles: tuple[PldProfile | None, PldProfile | None] = (None, None)
    if isinstance(design.stage1, ProbeRelease) and isinstance(design.stage2, FinalRun):
        profiles = _shared_profiles(probe, final)
    return account_two_stage(probe.rdp(), final.rdp(), design.stage1, design.stage2, delta,
                             probe_profile=profiles[0], final_profile=profiles[1], charged_probes=max_lost,
                             charged_finals=max_lost)


def charged_mechanisms(
    training: DPSGD, design: TwoStage, *, probe_epochs: int, epsilon: float | None, delta: float,
    sigmas: tuple[float, float] | None = None, max_lost: int = 0, probe_score_noise_factor: float = 1.0,
) -> tuple[DPSGDMechanism, DPSGDMechanism, TwoStageReport]:
    """:func:`two_stage_mechanisms` with ``max_lost`` lost attempts per stage charged up front; no data read.

    ``probe_score_noise_factor``: the probes' score noise as a multiple of the final run's (:func:`probe_training`).

    Without a charge this is :func:`two_stage_mechanisms`. With one, a given ``sigmas`` is accounted with the
    charge; a total ``epsilon`` first gives both σ of the search without the charge, then both are scaled by the
    smallest common factor ≥ 1 (their ratio, the split, kept) whose charged total (the smallest valid bound: RDP, or
    the composed PLDs where valid) still meets ``epsilon``, searched coarse to fine
    (:func:`~dphypo.privacy.calibration.coarse_to_fine_sigma`: found on the coarse accounting, decided at full
    precision, to 0.1 % on the safe side). ε(factor) is non-increasing in the factor (every run's curve and PLD
    is), so the root finding applies; the returned report is the charged accounting at the σ used (every stage's
    theorem names its charged attempts).

    Raises:
        CalibrationError: The charged total cannot meet ``epsilon`` at any σ up to 1000 times the uncharged ones.
    """
    check_non_negative_int("max_lost", max_lost)
    probe, final, report = two_stage_mechanisms(training, design, probe_epochs=probe_epochs, epsilon=epsilon,
                                                delta=delta, sigmas=sigmas,
                                                probe_score_noise_factor=probe_score_noise_factor)
    if max_lost == 0:
        return probe, final, report
    probes = probe_training(training, probe_epochs, probe_score_noise_factor)
    if epsilon is None:
        return probe, final, _report(probe, final, design, delta, max_lost=max_lost)
    base = (probe.sigma, final.sigma)

    def pair(factor: float) -> tuple[DPSGDMechanism, DPSGDMechanism]:
        return probes.mechanism(factor * base[0]), training.mechanism(factor * base[1])

    def charged_at(factor: float) -> float:
        return _report(*pair(factor), design, delta, max_lost=max_lost).epsilon

    def coarse_at(factor: float) -> float:  # the search's bracket only (coarse orders and PLD grid), never reported
        p, f = pair(factor)
        if p.split_rule is not None:  # per-record split: Theorem S, each side (docs/proofs/split.md, Cor. S3)
            return split_two_stage_report(p, f, design, delta, max_lost=max_lost, orders=COARSE_ORDERS,
                                          discretization=COARSE_DISCRETIZATION).epsilon
        profiles: tuple[PldProfile | None, PldProfile | None] = (None, None)
        if isinstance(design.stage1, ProbeRelease) and isinstance(design.stage2, FinalRun):
            profiles = _shared_profiles(p, f, COARSE_DISCRETIZATION)
        return account_two_stage(p.rdp(COARSE_ORDERS), f.rdp(COARSE_ORDERS), design.stage1, design.stage2, delta,
                                 probe_profile=profiles[0], final_profile=profiles[1], charged_probes=max_lost,
                                 charged_finals=max_lost).epsilon

    factor = coarse_to_fine_sigma(charged_at, coarse_at, epsilon, rtol=1e-3, sigma_bounds=(1.0, 1e3))
    return (*pair(factor), _report(*pair(factor), design, delta, max_lost=max_lost))


def _shared_profiles(probe: DPSGDMechanism, final: DPSGDMechanism, discretization: float | None = None
                     ) -> tuple[PldProfile | None, PldProfile | None]:
    """Both runs' PLDs on one discretisation, or ``(None, None)`` when one cannot be built (RDP only then).

    The coarser of their own discretisations: a long run's PLD may coarsen to fit its size cap, and PLDs compose only
    on one grid. ``discretization``: the finest grid asked for (default the runs' own, what a report uses).
    """
    try:
        pair = ((probe.profile(), final.profile()) if discretization is None
                else (probe.profile(discretization), final.profile(discretization)))
        coarsest = max(p.discretization for p in pair)
        if any(p.discretization != coarsest for p in pair):
            pair = (probe.profile(coarsest), final.profile(coarsest))
    except ProfileTooLargeError:
        return None, None
    if pair[0].discretization != pair[1].discretization:  # a coarsening again: RDP only, never a mixed grid
        return None, None
    return pair


def tune_two_stage(
    objective: Objective,
    space: SearchSpace,
    training: DPSGD,
    design: TwoStage = DEFAULT_TWO_STAGE,
    *,
    probe_epochs: int | None = None,
    epsilon: float | None = None,
    sigmas: tuple[float, float] | None = None,
    delta: float = 1e-5,
    strategy: Strategy | str | None = None,
    placement: ProbePlacement | None = None,
    recommend: str = "best-probe",
    probe_score_noise_factor: float = 1.0,
    max_lost: int = 0,
    objective_id: Any = None,
    options: SearchOptions | None = None,
    **option_fields: Unpack[SearchOptionFields],
) -> TwoStageSearchResult:
    """Probe cheaply, commit once: a two-stage private search released with one total (ε, δ) (module docstring).

    The runner of ``dphypo.tune(..., design=dphypo.TwoStageSearch(design, strategy, probe_epochs, placement,
    recommend))``.

    Args:
        objective: As for :func:`~dphypo.api.tune` (it trains through ``run.make_private`` under the mechanism the
            run carries, so the probes get the probe epochs and σ, the final run the full ones).
        space: The grid (and prior) of hyperparameters; axes that change a run's privacy (batch size, epochs) are
            refused (the probe fidelity is ``probe_epochs``).
        training: How a final run trains (:class:`~dphypo.train.DPSGD`); a probe is the same with ``probe_epochs``.
        design: The stages and the split (default :data:`DEFAULT_TWO_STAGE`: 20 released probes, one final run).
        probe_epochs: Epochs of a probe (default :func:`default_probe_epochs`: a fifth of ``training.epochs``).
        epsilon: Total ε of both stages; both σ are calibrated to meet it. Give this or ``sigmas``.
        sigmas: ``(probe σ, final σ)`` fixed (the total ε is then reported).
        delta: δ of the guarantee.
        strategy: Where probes are placed: ``"uniform"`` (default, draws from the prior) or ``"gp"`` / a
            :class:`~dphypo.strategies.Strategy`. A probe selection must use a strategy with its search's C and c;
            released probes accept any (their accounting, composition, does not depend on the placement).
        placement: ``None`` (default: ``strategy`` places the probes through the search core), or a
            :class:`~dphypo.strategies.gp.placement.ProbePlacement`: released probes placed batch by batch by
            :func:`~dphypo.strategies.gp.placement.place_probes` (the simulator's implementation) from the probes
            released before them alone (:func:`~dphypo.strategies.released.released_probes`) and a secret stream of
            the search's entropy; a journaled resume places the same probes. Released probes only.
        recommend: The rule choosing the finalists from stage 1's release
            (:func:`~dphypo.strategies.recommend.recommend`: ``"best-probe"`` (default), ``"gp-mean"``,
            ``"gp-mean-grid"``, ``"gp-near-best"``; a GP rule needs released probes); stated with the release.
        probe_score_noise_factor: The probes' score noise as a multiple of ``training.score_noise`` (default 1;
            :func:`probe_training`): noisier probe scores cost less ε each, so more probes fit a budget. The probe
            mechanism (sealed, released in :attr:`TwoStageOutcome.probe_mechanism`) carries it.
        max_lost: Attempts *each stage* may lose to a dead worker or process (kill -9) and still release; charged
            up front as ``max_lost`` more probe runs and ``max_lost`` more final runs, composed into the total ε
            (and into the calibrated σ) whether or not they are used. One more loss in a stage stops the search
            without a release. Default 0.
        objective_id: Description of the objective sealed in the journal (default: a dataclass objective's fields,
            else its qualified name), so a resume with another objective is refused.
        options: How the runs execute (:class:`~dphypo.search.options.SearchOptions`): ``seed`` is the curator
            secret of both stages (default: fresh OS entropy), ``executor``, ``runs_per_update``, ``progress``
            (counts only), and ``journal``: a crash-safe file (curator only) sealed, before any data is touched,
            with the design, both mechanisms, the seed and both drawn run counts (T and T′); every probe and final
            run is journaled as it finishes and the final model with it. The same call on an existing journal
            resumes the search: the counts are read, never redrawn, finished runs are replayed, and attempts a dead
            process left in flight are charged against ``max_lost``; the release is the uninterrupted search's.
        **option_fields: The same fields as keywords.

    Returns:
        The release (the final model, its hyperparameters and noisy score, the total ε), ``two_stage`` (what stage
        1 released and both mechanisms) and the curator-only histories.

    Raises:
        TwoStageDesignError: A probe fidelity above the final one, a strategy whose bounds a probe selection does
            not account, or a split that leaves a stage nothing (all before any data is read).
        JournalMismatch: A journal sealed by another search (every differing field named).
        LostAttemptsExceeded: A stage lost more attempts than ``max_lost`` (no release).
        ValueError: Bad arguments, in one line.
    """
    run_options = resolve_options("tune_two_stage", options, option_fields)
    if not isinstance(design, TwoStage):
        raise TypeError(f"design must be a dphypo.TwoStage, got {design!r}")
    if not isinstance(training, DPSGD):
        raise TypeError(f"training must be a dphypo.train.DPSGD, got {training!r}")
    check_dpsgd_space(space)
    if space.changes_privacy:
        raise ValueError("tune_two_stage sets the probes' fidelity with probe_epochs; a space with batch-size or "
                         "epochs axes needs dphypo.tune")
    check_non_negative_int("max_lost", max_lost)
    noise_factor = check_probe_score_noise_factor(probe_score_noise_factor)
    chosen = _probe_strategy(strategy, design)
    check_placement(design, chosen, placement, recommend)
    rule = Recommendation(recommend)
    for stage, name in ((design.stage1, "probes"), (design.stage2, "final_mean")):  # T drawable in bounded time
        if isinstance(stage, (ProbeSelection, FinalSelection)):
            check_expected_runs(stage.search.run_count, name)
    epochs = default_probe_epochs(training.epochs) if probe_epochs is None else probe_epochs
    path = None if run_options.journal is None else check_output_file(run_options.journal, "journal")
    seal = _Seal(design, space, chosen, epochs, epsilon, sigmas, delta, max_lost, run_options.direction,
                 _objective_description(objective) if objective_id is None else objective_id, placement, rule,
                 noise_factor)
    sealed = _peek(path)
    if sealed is None:
        probe, final, report = charged_mechanisms(training, design, probe_epochs=epochs, epsilon=epsilon,
                                                  delta=delta, sigmas=sigmas, max_lost=max_lost,
                                                  probe_score_noise_factor=noise_factor)
    else:  # a resume: checked before anything is computed, then the sealed σ accounted again (never recalibrated)
        seal.check(sealed, run_options.seed, repr(str(path)))
        probe, final, report = _resumed_mechanisms(sealed, training, design, epochs, epsilon, delta, max_lost,
                                                   repr(str(path)), noise_factor)
    with contextlib.ExitStack() as cleanup:
        executor = make_executor(run_options.executor)
        if executor is not run_options.executor:
            cleanup.callback(executor.close)
        stage_options = dataclasses.replace(run_options, executor=executor)
        sizing = DPSGD(batch_size=probe.batch_size, epochs=probe.epochs, n_train=probe.n_train)
        adaptive = chosen.c < chosen.C or (placement is not None and placement.strategy != "uniform")
        probe_options, _ = pass_options(objective, stage_options, adaptive, sizing, max_lost)
        runs_per_update = probe_options.runs_per_update or executor.workers
        journal = MemoryJournal() if path is None else SQLiteJournal.open(path)
        cleanup.callback(journal.close)
        entropy, (probe_count, final_count), resumed = seal.open(journal, (probe, final), runs_per_update,
                                                                 run_options.seed)
        recorders = (Recorder(run_options.direction, StageJournal(journal, 0, probe_count, keep_artifacts=False),
                              max_lost),
                     Recorder(run_options.direction, StageJournal(journal, probe_count, final_count), max_lost))
        if resumed:  # attempts a dead process left in flight are charged (each stage against its max_lost)
            for recorder in recorders:
                recorder.resume()
        if placement is None:
            probes = _probe_stage(objective, space, chosen, probe, probe_count, entropy, probe_options,
                                  recorders[0], runs_per_update)
        else:
            probes = _placed_probe_stage(objective, space, placement, probe, probe_count, entropy, probe_options,
                                         recorders[0])
        released = _released_probes(design, probes, run_options.direction)
        finalists, fell_back = _recommended(rule, released, space, design.stage1.top_k, run_options.direction,
                                            entropy)
        finals = _final_stage(objective, space, finalists, final, final_count, entropy, stage_options, recorders[1],
                              completed=len(probes.trials))
        result = _two_stage_result(design, space, (probe, final), report, (probes, finals), (released, finalists),
                                   entropy, run_options.direction, max_lost=max_lost,
                                   post=(_placement_description(chosen, placement, probe_count),
                                         {**rule.describe(), "fell_back": fell_back}))
        journal.write_release(two_stage_release_payload(result))
    return result


def two_stage_release_payload(result: TwoStageSearchResult) -> dict[str, Any]:
    """What a two-stage search's journal releases (``dphypo release FILE``): the final run and stage 1's release."""
    outcome = result.two_stage
    assert outcome is not None
    return {**release_payload(result.release), "max_lost": outcome.max_lost, "design": "two-stage",
            "two_stage": outcome.to_dict()}


def _resumed_mechanisms(
    sealed: SealedSearch, training: DPSGD, design: TwoStage, probe_epochs: int, epsilon: float | None, delta: float,
    max_lost: int, where: str, probe_score_noise_factor: float = 1.0,
) -> tuple[DPSGDMechanism, DPSGDMechanism, TwoStageReport]:
    """Both mechanisms of a resumed search at its sealed σ, accounted again (the σ are not recalibrated).

    Every input of the calibration but the training settings was checked against the seal already; the training
    settings are in the sealed mechanisms, which the full check compares with these. Reading σ back (instead of
    recalibrating) keeps a journal resumable across versions whose calibration differs; the total ε is recomputed
    by this version's accountant and must still meet ``epsilon``.

    Raises:
        JournalMismatch: The sealed σ no longer meet ``epsilon`` under this version's accounting.
    """
    try:
        sigmas = (float(sealed.config["probe_mechanism"]["sigma"]), float(sealed.config["final_mechanism"]["sigma"]))
    except (KeyError, TypeError, ValueError):
        raise JournalMismatch(f"the journal {where} holds no two-stage mechanisms: start a new journal") from None
    probe, final, report = charged_mechanisms(training, design, probe_epochs=probe_epochs, epsilon=None, delta=delta,
                                              sigmas=sigmas, max_lost=max_lost,
                                              probe_score_noise_factor=probe_score_noise_factor)
    if epsilon is not None and report.epsilon > epsilon * (1 + 1e-9):
        raise JournalMismatch(f"the noise sealed in the journal {where} is accounted at epsilon={report.epsilon:.6g} "
                              f"by this version, above epsilon={epsilon:g}: the search cannot resume (start a new "
                              "journal)")
    return probe, final, report


def _peek(path: Path | None) -> SealedSearch | None:
    """The sealed search of an existing journal file (read-only), or ``None`` for a new search."""
    if path is None or not path.is_file() or path.stat().st_size == 0:
        return None
    with SQLiteJournal.open(path, read_only=True) as journal:
        return journal.sealed()


@dataclass(frozen=True)
class _Seal:
    """What a two-stage journal seals before any data is touched, and how a resume is checked against it."""

    design: TwoStage
    space: SearchSpace
    strategy: Strategy
    probe_epochs: int
    epsilon: float | None
    sigmas: tuple[float, float] | None
    delta: float
    max_lost: int
    direction: Direction
    objective: Any
    placement: ProbePlacement | None
    rule: Recommendation
    probe_score_noise_factor: float = 1.0

    def config(self, mechanisms: tuple[DPSGDMechanism, DPSGDMechanism] | None, runs_per_update: int | None,
               seed: int, counts: tuple[int, int]) -> dict[str, Any]:
        """The sealed configuration (JSON-ready): the design, both mechanisms, the seed and both drawn counts.

        A placement, a rule and a probe score-noise factor other than today's (``None``, best-probe, 1) are sealed
        too (absent otherwise, so a journal of today's design resumes as before).
        """
        extra: dict[str, Any] = {}
        if self.probe_score_noise_factor != 1.0:
            extra["probe_score_noise_factor"] = self.probe_score_noise_factor
        if self.placement is not None:
            extra["placement"] = self.placement.describe()
        if self.rule.rule != "best-probe":
            extra["recommend"] = self.rule.describe()
        return describe({**extra,
            "search": "two-stage", "design": self.design, "probe_epochs": self.probe_epochs,
            "epsilon": self.epsilon, "sigmas": self.sigmas, "delta": self.delta, "max_lost": self.max_lost,
            "probe_mechanism": None if mechanisms is None else mechanisms[0],
            "final_mechanism": None if mechanisms is None else mechanisms[1],
            "space": self.space, "strategy": self.strategy, "direction": self.direction, "objective": self.objective,
            "runs_per_update": runs_per_update, "seed": seed, "run_counts": {"probes": counts[0], "finals": counts[1]},
        })

    def check(self, sealed: SealedSearch, seed: int | None, where: str) -> tuple[int, int]:
        """Refuse a resume whose configuration differs from ``sealed``; returns the sealed counts (T, T′).

        The fields that depend on σ or on the executor (both mechanisms, runs per update) are left to
        :meth:`open`, so a changed resume is refused before σ is calibrated.

        Raises:
            JournalMismatch: Naming every differing field (a journal of a single-stage search among them).
        """
        if sealed.config.get("search") != "two-stage":
            raise JournalMismatch(f"the journal {where} holds a single-stage search, not a two-stage one: resume it "
                                  "with the same design, or start a new journal for a new search")
        counts = sealed.config.get("run_counts", {})
        sealed_counts = (int(counts.get("probes", -1)), int(counts.get("finals", -1)))
        given_seed = int(sealed.config.get("seed", -1)) if seed is None else int(seed)
        config = self.config(None, None, given_seed, sealed_counts)
        mismatch(sealed, config, ("probe_mechanism", "final_mechanism", "runs_per_update"), where)
        return sealed_counts

    def open(self, journal: Journal, mechanisms: tuple[DPSGDMechanism, DPSGDMechanism], runs_per_update: int,
             seed: int | None) -> tuple[int, tuple[int, int], bool]:
        """Seal a new search (drawing T and T′ first) or verify a resumed one; ``(entropy, counts, resumed)``.

        Both run counts are drawn from the accounted laws before any data is touched (privacy rule 2) and sealed;
        a resumed search reads them, never redraws them.
        """
        sealed = journal.sealed()
        if sealed is None:
            entropy = int(seed) if seed is not None else fresh_entropy()
            counts = _run_counts(self.design, entropy)
            journal.seal(self.config(mechanisms, runs_per_update, entropy, counts), sum(counts))
            return entropy, counts, False
        counts = self.check(sealed, seed, repr(str(getattr(journal, "path", "in memory"))))
        entropy = int(sealed.config["seed"])
        journal.verify(self.config(mechanisms, runs_per_update, entropy, counts))
        return entropy, counts, True


def check_placement(two_stage: TwoStage, strategy: Strategy, placement: ProbePlacement | None, recommend: str) -> None:
    """Refuse, in one line, a placement or recommendation the design cannot run (before any data is read).

    A placement reads every released probe, so it needs released probes: a probe selection's densities must be
    its strategy's projection onto the S_{C,c} it is accounted with (privacy rule 3). A GP rule reads every released
    probe too (a selection releases one). A placement replaces the strategy, which must then be the uniform one.

    Raises:
        TwoStageDesignError: One of the above.
        TypeError: ``placement`` is not a ProbePlacement.
        ValueError: An unknown rule.
    """
    if placement is not None and not isinstance(placement, ProbePlacement):
        raise TypeError(f"placement must be None or a dphypo.strategies.gp.placement.ProbePlacement, got "
                        f"{placement!r}")
    if recommend not in RECOMMENDATIONS:
        raise ValueError(f"recommend must be one of {', '.join(RECOMMENDATIONS)}, got {recommend!r}")
    selection = isinstance(two_stage.stage1, ProbeSelection)
    if selection and placement is not None:
        raise TwoStageDesignError("a probe placement needs released probes: a probe selection's densities must be "
                                  "projected onto its S_{C,c} (privacy rule 3), so it takes a strategy only")
    if selection and recommend != "best-probe":
        raise TwoStageDesignError(f"the {recommend} recommendation reads every released probe, but a probe "
                                  "selection releases its best probe only: use best-probe or released probes")
    if placement is not None and not isinstance(strategy, Uniform):
        raise TwoStageDesignError("a probe placement replaces the strategy: give one of them (the strategy must be "
                                  "uniform when a placement is given)")


def _probe_strategy(strategy: Strategy | str | None, design: TwoStage) -> Strategy:
    """The probe sampler; a probe selection's must project onto the set it is accounted with (rule 3)."""
    chosen = resolve_strategy(strategy)
    if isinstance(design.stage1, ProbeSelection):
        search = design.stage1.search
        if (float(chosen.C), float(chosen.c)) != (float(search.C), float(search.c)):
            raise TwoStageDesignError(
                f"the probe selection is accounted with C={search.C:g}, c={search.c:g} but the strategy projects "
                f"onto C={chosen.C:g}, c={chosen.c:g}: use a strategy with the selection's bounds"
            )
    return chosen


def _stream(entropy: int, tag: int, key: int) -> np.random.SeedSequence:
    return np.random.SeedSequence([entropy, tag], spawn_key=(key,))


def _run_counts(design: TwoStage, entropy: int) -> tuple[int, int]:
    """The number of probes (n, or T of a probe selection) and of final runs (1, or T′), from the accounted laws."""
    stage1, stage2 = design.stage1, design.stage2
    probes = stage1.probes if isinstance(stage1, ProbeRelease) else stage1.search.run_count.sample(
        np.random.default_rng(_stream(entropy, _PROBE_TAG, _COUNT)))
    finals = 1 if isinstance(stage2, FinalRun) else stage2.search.run_count.sample(
        np.random.default_rng(_stream(entropy, _FINAL_TAG, _COUNT)))
    return int(probes), int(finals)


def _run_seed(entropy: int, tag: int) -> Callable[[int], int]:
    return lambda number: int(np.random.SeedSequence([entropy, tag], spawn_key=(_RUNS, number)).generate_state(1)[0])


@dataclass(frozen=True)
class _Stage:
    """One stage as run: its trials in run order, their artifacts, densities and strategy events (curator only)."""

    count: int
    trials: tuple[Trial, ...]
    artifacts: tuple[Any, ...]
    densities: tuple[np.ndarray, ...] = ()
    events: tuple[Any, ...] = ()
    lost_attempts: int = 0


def _probe_stage(objective: Objective, space: SearchSpace, strategy: Strategy, probe: DPSGDMechanism, count: int,
                 entropy: int, options: SearchOptions, recorder: Recorder, runs_per_update: int) -> _Stage:
    """Stage 1: ``count`` probes placed by ``strategy`` (densities projected onto its S_{C,c}), trained as passes.

    ``recorder`` journals every probe as it finishes and replays the probes a resumed search already finished.
    """
    assert isinstance(options.executor, Executor)
    streams = SearchStreams(
        sampling=np.random.default_rng(_stream(entropy, _PROBE_TAG, _SAMPLING)),
        strategy_seed=int(_stream(entropy, _PROBE_TAG, _STRATEGY).generate_state(1)[0]),
        run_seed=_run_seed(entropy, _PROBE_TAG),
    )
    search = SearchRun(objective, space, strategy, options.direction, (strategy.C, strategy.c), count, streams,
                       recorder=recorder, mechanism=probe)
    trace = search.run(options.executor, runs_per_update=runs_per_update, progress=options.progress)
    return _Stage(count, tuple(trace.trials), tuple(trace.artifacts), tuple(trace.densities), tuple(trace.events),
                  recorder.lost_attempts)


def _placed_probe_stage(objective: Objective, space: SearchSpace, placement: ProbePlacement, probe: DPSGDMechanism,
                        count: int, entropy: int, options: SearchOptions, recorder: Recorder) -> _Stage:
    """Stage 1 of released probes placed by ``placement``: :func:`~dphypo.strategies.gp.placement.place_probes`.

    The simulator's loop (one search, B = 1): each batch is placed from the probes released before it alone (their
    grid points and released noisy scores, :class:`~dphypo.strategies.released.ReleasedProbes`; a failed probe is
    released as failed) and from a secret stream of the search's entropy (``_PLACE_TAG``), then trained; so a
    journaled resume, replaying the same released values, places the same probes (a diverging replay is refused by
    the journal). Per-run seeds are the probe stage's, as on the strategy path. With ``max_lost`` charged, a batch
    trains in sub-batches of at most ``max_lost`` runs (a kill loses at most that many).
    """
    executor = options.executor
    assert isinstance(executor, Executor)
    rng = np.random.default_rng(_stream(entropy, _PLACE_TAG, _PLACEMENT))
    run_seed = _run_seed(entropy, _PROBE_TAG)
    done: dict[int, tuple[Trial, Any]] = {}

    def score(indices: np.ndarray, first: int) -> np.ndarray:
        batch = [Run(first + j, run_seed(first + j), None, int(i), probe) for j, i in enumerate(indices[0])]
        size = recorder.max_lost if 0 < recorder.max_lost < len(batch) else max(1, len(batch))
        for start in range(0, len(batch), size):
            done.update(run_batch(objective, space, batch[start:start + size], executor, recorder,
                                  options.progress, completed=first + start, pass_size=size))
        trials = [done[run.number][0] for run in batch]
        return np.array([[math.nan if t.failed else float(t.score) for t in trials]])

    place_probes(placement, space, count, 1, score, rng, options.direction)
    trials = tuple(done[number][0] for number in range(count))
    return _Stage(count, trials, tuple(done[number][1] for number in range(count)),
                  lost_attempts=recorder.lost_attempts)


def _recommended(rule: Recommendation, released: tuple[ReleasedProbe, ...], space: SearchSpace, top_k: int,
                 direction: Direction, entropy: int) -> tuple[tuple[int, ...], bool]:
    """Grid indices of the finalists (distinct, best first) and whether a GP rule fell back to the best probe.

    :func:`~dphypo.strategies.recommend.recommend` on stage 1's release alone (the simulator's implementation), so
    stage 2 is post-processing of what stage 1 released (the composition theorem's condition).
    ``"best-probe"``: the k best distinct released points (ties: the earlier probe); a GP rule: the posterior mean's
    (or near-best probability's) ranking, its fit seeded from a secret stream of the search's entropy. When stage 1
    released no successful probe (T = 0, or every probe failed) the prior's mode, a data-independent default (as
    :func:`~dphypo.api.tune_subsampled` does), is the one finalist.
    """
    seed = int(_stream(entropy, _PLACE_TAG, _RECOMMEND).generate_state(1)[0])
    chosen = recommend(rule, space, released_probes(released, space), direction, seed=seed, top_k=top_k)
    available = int(chosen.available[0])
    return tuple(int(i) for i in chosen.indices[0, :max(1, available)]), bool(chosen.fallback[0])


def _placement_description(strategy: Strategy, placement: ProbePlacement | None, probes: int) -> dict[str, Any]:
    """Who placed the probes, JSON-ready (stated with the release; a GP placement with the batches it ran)."""
    if placement is None:  # the search core's strategy: a GP strategy is DP-HyPO's (softmax projected onto S_{C,c})
        name = str(getattr(strategy, "name", type(strategy).__name__))
        return {"via": "strategy", "name": name if isinstance(strategy, Uniform) else
                f"{name} strategy (C={strategy.C:g}, c={strategy.c:g})"}
    return {"via": "place_probes", "name": placement.name, **placement.describe(),
            "schedule": list(placement.schedule(probes))}


def _final_stage(objective: Objective, space: SearchSpace, finalists: tuple[int, ...], final: DPSGDMechanism,
                 count: int, entropy: int, options: SearchOptions, recorder: Recorder, *, completed: int) -> _Stage:
    """Stage 2: ``count`` full-fidelity runs, each of a finalist drawn uniformly (one run: the winner).

    ``recorder`` journals every run (and the best one's model) as it finishes; a resumed search replays the runs it
    already finished, and the released run's model is then the journal's.
    """
    assert isinstance(options.executor, Executor)
    rng = np.random.default_rng(_stream(entropy, _FINAL_TAG, _SAMPLING))
    picks = rng.integers(len(finalists), size=count)
    run_seed = _run_seed(entropy, _FINAL_TAG)
    batch = [Run(number, run_seed(number), None, finalists[int(pick)], final) for number, pick in enumerate(picks)]
    # batches of at most max_lost runs (padded to it) when losses are charged: a kill loses a batch in flight
    size = recorder.max_lost if 0 < recorder.max_lost < len(batch) else max(1, len(batch))
    done: dict[int, tuple[Trial, Any]] = {}
    for start in range(0, len(batch), size):
        done |= run_batch(objective, space, batch[start:start + size], options.executor, recorder, options.progress,
                          completed=completed + start, pass_size=size)
    trials = tuple(done[run.number][0] for run in batch)
    best = best_trial(trials, options.direction)
    artifacts = tuple(recorder.artifact(run.number, done[run.number][1]) if run.number == best and not
                      trials[run.number].failed else done[run.number][1] for run in batch)
    return _Stage(count, trials, artifacts, lost_attempts=recorder.lost_attempts)


def _history(stage: _Stage, entropy: int, direction: Direction) -> SearchHistory:
    """A stage's curator-only history (its count, every run's score and timing, densities, events, the seed)."""
    return SearchHistory(stage.count, stage.trials, best_trial(stage.trials, direction), stage.densities,
                         stage.events, entropy, stage.lost_attempts)


def _released_probes(design: TwoStage, probes: _Stage, direction: Direction) -> tuple[ReleasedProbe, ...]:
    """What stage 1 releases: every probe (released probes), or the selection's best (none when T = 0)."""
    trials = probes.trials
    if isinstance(design.stage1, ProbeSelection):
        best = best_trial(trials, direction)
        trials = () if best is None else (trials[best],)
    return tuple(ReleasedProbe(dict(t.params), None if t.failed else float(t.score)) for t in trials)


def _two_stage_result(
    design: TwoStage, space: SearchSpace, mechanisms: tuple[DPSGDMechanism, DPSGDMechanism], report: TwoStageReport,
    stages: tuple[_Stage, _Stage], handed_over: tuple[tuple[ReleasedProbe, ...], tuple[int, ...]], entropy: int,
    direction: Direction, *, max_lost: int = 0,
    post: tuple[dict[str, Any], dict[str, Any]] | None = None,
) -> TwoStageSearchResult:
    """The release (the best final run, the total ε), the publishable outcome and the curator-only histories."""
    (probe, final), (probes, finals), (released, finalists) = mechanisms, stages, handed_over
    best = best_trial(finals.trials, direction)
    winner = None if best is None else finals.trials[best]
    failed = winner is None or winner.failed
    release = Release(
        params=None if winner is None else dict(winner.params),
        score=None if winner is None else (math.nan if winner.failed else float(winner.score)),
        artifact=None if failed or best is None else finals.artifacts[best],
        epsilon=report.epsilon, delta=report.delta, privacy=report, mechanism=final,
    )
    outcome = TwoStageOutcome(design, probe, final, released, tuple(space.params(i) for i in finalists), report,
                              final_failed=failed, max_lost=max_lost,
                              **({} if post is None else {"placement": post[0], "recommendation": post[1]}))
    return TwoStageSearchResult(release, _history(probes, entropy, direction), _history(finals, entropy, direction),
                                outcome)

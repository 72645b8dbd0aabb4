"""Simulated two-stage searches on a landscape family, at an equal total ε with single-stage searches.

A two-stage design (:mod:`dphypo.privacy.two_stage`) probes with noisier runs, then commits to one full run (or a
small uniform selection) of the best probes. On a :class:`~dphypo.simulation.family.LandscapeFamily` — one grid and
one DP-SGD mechanism measured at several σ — the probes see the family at the probe σ and the final runs see it
at the final σ, both calibrated by :func:`~dphypo.privacy.two_stage.calibrate_two_stage` so that the whole design
costs the total ε. As in :mod:`dphypo.simulation.simulate`, a search is judged by the *true* value (the mean at the
final σ) of the λ its final stage releases.

Fidelity: the probes run on their own family (same grid, e.g. fewer epochs: a multi-fidelity family), or on the
final family itself (full-fidelity probes at a larger σ, all the shipped σ-only digits family allows); probes of a
higher fidelity than the final run are refused.

Scope: a probe selection draws its probes from the prior (C = c = 1; an adaptive selection is refused here, the
accounting covers it but its simulation is not written). Released probes are placed and recommended by an arm
(:class:`ProbeArm`): a placement (:class:`~dphypo.strategies.gp.placement.ProbePlacement`: uniform, or a BoTorch
acquisition on the GP of the released probes) and a recommendation rule
(:class:`~dphypo.strategies.recommend.Recommendation`: the best probe, or the GP's posterior mean), the same
functions :func:`dphypo.tune_two_stage` runs (:func:`~dphypo.strategies.gp.placement.place_probes`,
:func:`~dphypo.strategies.recommend.recommend`), batch-native over the simulated searches. Arms simulated with one
seed share their random streams (placement draws, the probes' score noise as common standard normals, stage 2), so
:func:`simulate_two_stage_arms` reports paired differences against uniform placement + best probe. σ outside a
family's range is refused, never extrapolated.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from dphypo.api.two_stage import calibrate_mechanisms, check_probe_score_noise_factor
from dphypo.privacy.split import SplitRule
from dphypo.privacy.two_stage import (
    FinalRun,
    FinalSelection,
    ProbeRelease,
    ProbeSelection,
    TwoStage,
    TwoStageCalibration,
    TwoStageDesignError,
)
from dphypo.privacy.validation import check_positive, check_positive_int
from dphypo.simulation.equal_epsilon import metadata_mechanism
from dphypo.simulation.family import LandscapeFamily
from dphypo.simulation.landscapes import Landscape
from dphypo.simulation.simulate import mean_ci95
from dphypo.strategies.gp.placement import ProbePlacement, place_probes
from dphypo.strategies.recommend import Recommendation, recommend
from dphypo.train.mechanism import DPSGDMechanism, check_probe_fidelity

__all__ = [
    "BASELINE_ARM",
    "ProbeArm",
    "TwoStageArmsResult",
    "TwoStageResult",
    "calibrate_design",
    "probe_noise_landscape",
    "simulate_two_stage",
    "simulate_two_stage_arms",
    "two_stage_arm_values",
    "two_stage_values",
]


def _check_simulable(design: TwoStage) -> None:
    """Refuse an adaptive probe selection: its draws are not simulated here (the accounting covers it)."""
    if isinstance(design.stage1, ProbeSelection) and design.stage1.search.adaptive:
        raise TwoStageDesignError(
            "adaptive probe selections (C > c) are accounted (dphypo.privacy.two_stage) and run by "
            "dphypo.tune_two_stage, but not simulated on landscapes yet, got "
            f"C={design.stage1.search.C:g}, c={design.stage1.search.c:g}; use C = c = 1"
        )


def calibrate_design(
    design: TwoStage, epsilon: float, delta: float, mechanism_metadata: Mapping[str, Any],
    probe_metadata: Mapping[str, Any] | None = None, *, probe_score_noise_factor: float = 1.0,
    split_rule: SplitRule | None = None,
) -> TwoStageCalibration:
    """σ of the probes and of the final stage for a total (ε, δ), under the families' DP-SGD mechanisms.

    The very calibration :func:`dphypo.tune` runs (:func:`~dphypo.api.two_stage.calibrate_mechanisms`: RDP, and
    the composed PLDs of released probes and one final run where they are tighter; cached on disk by the
    mechanisms' description), so a simulated design runs at the σ ``tune`` would run it at.

    Args:
        design: The design.
        epsilon: Total ε (> 0).
        delta: δ ∈ (0, 1).
        mechanism_metadata: The final runs' mechanism (a family's
            :attr:`~dphypo.simulation.family.LandscapeFamily.mechanism_metadata`,
            :func:`~dphypo.simulation.equal_epsilon.metadata_mechanism`): each final run is that DP-SGD run with its
            score release, at the final σ.
        probe_metadata: The probes' mechanism, e.g. fewer epochs (default: the final one: full-fidelity probes).
        probe_score_noise_factor: The probes' score noise as a multiple of the final run's (default 1), as in
            :class:`~dphypo.api.design.TwoStageSearch`.
        split_rule: Calibrate as ``tune --data-split per-record`` would (Theorem S side by side, docs/proofs/split.md
            Corollary S3); ``None`` (default): the sum.

    Returns:
        The calibration; its report is the one ``tune`` prints.

    Raises:
        TwoStageDesignError: Probes of a higher fidelity than the final run, or a refused split.
    """
    final = dataclasses.replace(metadata_mechanism(mechanism_metadata), split_rule=split_rule)
    probe = final if probe_metadata is None else metadata_mechanism(probe_metadata)
    probe = _with_probe_noise(dataclasses.replace(probe, split_rule=split_rule), final, probe_score_noise_factor)
    check_probe_fidelity(probe, final)
    (probe_sigma, final_sigma), report = calibrate_mechanisms(probe, final, design, epsilon, delta)
    return TwoStageCalibration(probe_sigma, final_sigma, report, float(design.split))


def _with_probe_noise(probe: DPSGDMechanism, final: DPSGDMechanism, factor: float) -> DPSGDMechanism:
    """The probe mechanism with score noise ``factor`` × the final run's (what ``tune``'s probes release)."""
    factor = check_probe_score_noise_factor(factor)
    if final.score_noise is None:
        return probe
    return dataclasses.replace(probe, score_noise=final.score_noise * factor)


def probe_noise_landscape(probes: Landscape, built_noise: float, noise: float) -> Landscape:
    """The probe landscape with its score noise changed from ``built_noise`` to ``noise`` (accuracy units).

    A family's ``std`` is ``sqrt(seed_std² + score_noise²)`` (:mod:`dphypo.simulation.builder`), so the probes'
    std at another score noise is ``sqrt(max(std² − built², 0) + noise²)``; unchanged (the same object) when the
    two are equal.

    Raises:
        ValueError: A negative noise.
    """
    if built_noise < 0 or noise < 0:
        raise ValueError(f"score noises must be >= 0, got built {built_noise!r} and probe {noise!r}")
    if noise == built_noise:
        return probes
    std = np.sqrt(np.maximum(probes.std**2 - built_noise**2, 0.0) + noise**2)
    return dataclasses.replace(probes, std=std, metadata={**probes.metadata, "probe_score_noise": noise})


def _ranked(scores: np.ndarray, valid: np.ndarray, maximize: bool) -> np.ndarray:
    """Column indices per row from the best valid score to the worst, invalid slots last; shape ``(R, W)``."""
    oriented = np.where(valid, scores if maximize else -scores, -np.inf)
    return np.argsort(-oriented, axis=1, kind="stable")


def _run_counts(stage: ProbeSelection | FinalSelection, repeats: int, rng: np.random.Generator) -> np.ndarray:
    """T per repeat, drawn from the stage's law, shape ``(repeats,)``."""
    return np.array([stage.search.run_count.sample(rng) for _ in range(repeats)], dtype=np.int64)


def _distinct_top(points: np.ndarray, order: list[np.ndarray], k: int) -> tuple[np.ndarray, np.ndarray]:
    """The best ``k`` distinct grid points per row, shape ``(R, k)`` (padded with the best), and how many exist."""
    top = np.empty((points.shape[0], k), dtype=np.int64)
    available = np.empty(points.shape[0], dtype=np.int64)
    for r, (row, ranks) in enumerate(zip(points, order, strict=True)):
        ranked = row[ranks]
        _, first = np.unique(ranked, return_index=True)
        distinct = ranked[np.sort(first)][:k]
        available[r] = distinct.size
        top[r] = np.resize(distinct, k)
    return top, available


def _stage1_top(
    design: TwoStage, probes: Landscape, repeats: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Each repeat's top-k distinct probed grid points by noisy score, shape ``(R, k)``, and how many exist."""
    if isinstance(design.stage1, ProbeRelease):
        counts = np.full(repeats, design.stage1.probes, dtype=np.int64)
    else:
        counts = _run_counts(design.stage1, repeats, rng)
    width = int(counts.max())
    points = rng.choice(probes.size, size=(repeats, width), p=probes.space.prior)
    scores = probes.sample_many(points, rng)
    valid = np.arange(width)[None, :] < counts[:, None]
    order = _ranked(scores, valid, probes.direction == "maximize")
    if design.stage1.top_k == 1:  # a selection with T = 0 (Poisson T) hands over nothing: available 0
        return np.take_along_axis(points, order[:, :1], axis=1), np.minimum(counts, 1)
    valid_orders = [ranks[:count] for ranks, count in zip(order, counts, strict=True)]  # invalid slots rank last
    return _distinct_top(points, valid_orders, design.stage1.top_k)


def two_stage_values(
    design: TwoStage, probes: Landscape, final: Landscape, repeats: int, rng: np.random.Generator
) -> np.ndarray:
    """True values (at the final σ) released by ``repeats`` independent simulated two-stage searches.

    Args:
        design: The design.
        probes: The landscape the probes see (the family at the probe σ).
        final: The landscape the final runs see (same grid, the family at the final σ).
        repeats: Number of independent searches ≥ 1.
        rng: The only source of randomness (T, probe placement, noisy scores).

    Returns:
        Shape ``(repeats,)``.
    """
    check_positive_int("repeats", repeats)
    _check_simulable(design)
    if probes.shape != final.shape:
        raise ValueError(f"probes and final must share one grid, got shapes {probes.shape} and {final.shape}")
    top, available = _stage1_top(design, probes, repeats, rng)
    return _final_values(design, final, top, available, rng)


def _final_values(design: TwoStage, final: Landscape, top: np.ndarray, available: np.ndarray,
                  rng: np.random.Generator) -> np.ndarray:
    """Stage 2 of every simulated search: the true value (final σ) of the point it releases, shape ``(R,)``.

    Args:
        design: The design (its stage 2).
        final: The final runs' landscape.
        top: Each search's finalists (distinct grid points, best first, padded), shape ``(R, k)``.
        available: How many finalists each search has, shape ``(R,)`` (0: stage 1 ran no probe).
        rng: Stage 2's stream (T′, the finalists' draws, their noisy scores).
    """
    if isinstance(design.stage2, FinalRun):
        # a search whose stage 1 ran no probe (T = 0) releases nothing: the worst mean, as simulate() scores it
        return np.where(available > 0, final.true_values(top[:, 0]), final.worst_value)
    repeats = top.shape[0]
    counts = _run_counts(design.stage2, repeats, rng)
    width = int(counts.max())
    # each final run picks uniformly among the search's available top-k points
    slots = np.floor(rng.random((repeats, width)) * np.maximum(available, 1)[:, None]).astype(np.int64)
    picks = np.take_along_axis(top, slots, axis=1)
    scores = final.sample_many(picks, rng)
    valid = np.arange(width)[None, :] < counts[:, None]
    best = _ranked(scores, valid, final.direction == "maximize")[:, :1]
    return final.true_values(np.take_along_axis(picks, best, axis=1)[:, 0])


@dataclass(frozen=True)
class TwoStageResult:
    """A simulated two-stage design at a total ε.

    Attributes:
        design: The design.
        calibration: σ of both stages and the accounted report.
        values: Shape ``(repeats,)``, the true values released.
    """

    design: TwoStage
    calibration: TwoStageCalibration
    values: np.ndarray

    @property
    def mean(self) -> float:
        """Mean released true value."""
        return float(self.values.mean())

    @property
    def expected_runs(self) -> float:
        """Expected trained runs, both stages."""
        return float(sum(self.calibration.report.expected_runs))


def _member_at(family: LandscapeFamily, sigma: float, what: str, design: TwoStage, epsilon: float) -> Landscape:
    """The family at σ, refusing (one line) a σ outside its range: never extrapolated."""
    low, high = family.sigma_range
    if not low <= sigma <= high:
        raise TwoStageDesignError(
            f"{design.label()} at epsilon={epsilon:g} needs {what} sigma {sigma:.4g}, outside the family's range "
            f"[{low:g}, {high:g}] (never extrapolated)"
        )
    return family.at(sigma)


def _check_same_grid(probes: Landscape, final: Landscape) -> None:
    """Refuse, in one line, probe and final landscapes on different grids."""
    if probes.axis_names != final.axis_names or not all(
        np.array_equal(a, b) for a, b in zip(probes.axis_values, final.axis_values, strict=True)
    ):
        raise TwoStageDesignError("probe_family and family must share one grid (the same axes and values)")


def simulate_two_stage(
    design: TwoStage, family: LandscapeFamily, epsilon: float, delta: float, repeats: int,
    rng: np.random.Generator, *, probe_family: LandscapeFamily | None = None, probe_score_noise_factor: float = 1.0,
    split_rule: SplitRule | None = None,
) -> TwoStageResult:
    """Calibrate ``design`` to total (ε, δ) and simulate it: probes on ``probe_family``, final runs on ``family``.

    Args:
        design: The design.
        family: The final runs' family (its mechanism and its landscapes at the final σ).
        epsilon: Total ε.
        delta: δ.
        repeats: Independent searches.
        rng: The only source of randomness.
        probe_family: The probes' family, on the same grid at a cheaper fidelity (e.g. fewer epochs); default
            ``family`` (full-fidelity probes at a larger σ).
        probe_score_noise_factor: The probes' score noise as a multiple of the final run's (default 1): both the
            calibration and the probes' simulated scores (:func:`probe_noise_landscape`) use it.
        split_rule: Calibrate as ``tune`` with a per-record split does (Theorem S), or ``None``: the sum.

    Returns:
        The result; ``values`` are true values at the final σ.

    Raises:
        TwoStageDesignError: A calibrated σ outside a family's range, probes above the final fidelity, or families
            on different grids.
    """
    check_positive("epsilon", epsilon)
    calibration, probe_landscape, final_landscape = _calibrated_landscapes(
        design, family, epsilon, delta, probe_family, probe_score_noise_factor, split_rule)
    values = two_stage_values(design, probe_landscape, final_landscape, repeats, rng)
    return TwoStageResult(design, calibration, values)


def _calibrated_landscapes(
    design: TwoStage, family: LandscapeFamily, epsilon: float, delta: float, probe_family: LandscapeFamily | None,
    probe_score_noise_factor: float, split_rule: SplitRule | None = None,
) -> tuple[TwoStageCalibration, Landscape, Landscape]:
    """The calibration (``tune``'s), the probes' landscape at the probe σ and score noise, the final one."""
    probes = family if probe_family is None else probe_family
    calibration = calibrate_design(design, epsilon, delta, family.mechanism_metadata, probes.mechanism_metadata,
                                   probe_score_noise_factor=probe_score_noise_factor, split_rule=split_rule)
    probe_landscape = _member_at(probes, calibration.probe_sigma, "probe", design, epsilon)
    final_landscape = _member_at(family, calibration.final_sigma, "final", design, epsilon)
    _check_same_grid(probe_landscape, final_landscape)
    built = float(probes.mechanism_metadata.get("score_noise", 0.0))
    noise = check_probe_score_noise_factor(probe_score_noise_factor) * float(
        family.mechanism_metadata.get("score_noise", 0.0))
    return calibration, probe_noise_landscape(probe_landscape, built, noise), final_landscape


@dataclass(frozen=True)
class ProbeArm:
    """How released probes are placed and which point is committed: one arm of a two-stage simulation.

    Attributes:
        placement: Where the probes go (default: uniform, today's).
        recommendation: Which point(s) stage 2 trains (default: the best probe, today's).
    """

    placement: ProbePlacement = dataclasses.field(default_factory=lambda: ProbePlacement("uniform"))
    recommendation: Recommendation = dataclasses.field(default_factory=Recommendation)

    @property
    def label(self) -> str:
        """E.g. ``"gp-ucb + gp-mean"``."""
        return f"{self.placement.name} + {self.recommendation.rule}"

    def describe(self) -> dict[str, Any]:
        """JSON-ready: the placement's and the recommendation's configuration."""
        return {"label": self.label, "placement": self.placement.describe(),
                "recommendation": self.recommendation.describe()}


#: The reference of every paired difference: uniform placement, the best probe committed.
BASELINE_ARM = ProbeArm()

# Streams of one simulated arm (SeedSequence spawn keys): placement, probe score noise, stage 2.
_PLACE, _NOISE, _FINAL = range(3)


def _check_arm(design: TwoStage, arm: ProbeArm) -> ProbeRelease:
    """The design's released probes; a placement or a GP recommendation needs every probe's score released."""
    if not isinstance(design.stage1, ProbeRelease):
        raise TwoStageDesignError(
            f"probe placement and recommendation rules read every released probe: they need released probes "
            f"(--probe-mode release), got a probe selection for arm {arm.label!r}"
        )
    return design.stage1


def two_stage_arm_values(
    design: TwoStage, probes: Landscape, final: Landscape, repeats: int, seed: int, arm: ProbeArm = BASELINE_ARM
) -> np.ndarray:
    """True values (at the final σ) released by ``repeats`` simulated searches of one arm, batch-native.

    The probes are placed by :func:`~dphypo.strategies.gp.placement.place_probes` and the committed point(s) chosen
    by :func:`~dphypo.strategies.recommend.recommend` (what ``tune`` runs) on all ``repeats`` searches at once. A
    probe's released score is its landscape mean plus its std times a standard normal that depends on the search
    and the probe's number only, so arms with the same ``seed`` see common random numbers.

    Args:
        design: The design (released probes).
        probes: The landscape the probes see.
        final: The final runs' landscape (same grid).
        repeats: Searches ≥ 1.
        seed: Seed of the arm's streams (equal seeds: paired arms).
        arm: Placement and recommendation.

    Returns:
        Shape ``(repeats,)``.
    """
    check_positive_int("repeats", repeats)
    stage1 = _check_arm(design, arm)
    if probes.shape != final.shape:
        raise ValueError(f"probes and final must share one grid, got shapes {probes.shape} and {final.shape}")
    streams = [np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(key,)))
               for key in (_PLACE, _NOISE, _FINAL)]
    noise = streams[_NOISE].standard_normal((repeats, stage1.probes))
    mean, std = probes.mean.ravel(), probes.std.ravel()

    def score(indices: np.ndarray, first: int) -> np.ndarray:
        return mean[indices] + std[indices] * noise[:, first : first + indices.shape[1]]

    released = place_probes(arm.placement, probes.space, stage1.probes, repeats, score, streams[_PLACE],
                            probes.direction)  # type: ignore[arg-type]  # a landscape's direction is checked
    chosen = recommend(arm.recommendation, probes.space, released, probes.direction,  # type: ignore[arg-type]
                       top_k=stage1.top_k, seed=seed)
    return _final_values(design, final, chosen.indices, chosen.available, streams[_FINAL])


@dataclass(frozen=True)
class TwoStageArmsResult:
    """Several arms of one two-stage design at a total ε, simulated with shared streams.

    Attributes:
        design: The design.
        calibration: σ of both stages and the accounted report (the same for every arm: placement and
            recommendation are post-processing).
        arms: The arms, in order.
        values: Per arm, the true values released, shape ``(repeats,)`` each (paired across arms).
        baseline: Index of :data:`BASELINE_ARM` in ``arms``.
    """

    design: TwoStage
    calibration: TwoStageCalibration
    arms: tuple[ProbeArm, ...]
    values: tuple[np.ndarray, ...]
    baseline: int

    def difference(self, arm: int) -> tuple[float, tuple[float, float]] | None:
        """Paired mean difference of arm ``arm`` against the baseline and its 95 % CI (``None`` for the baseline)."""
        if arm == self.baseline:
            return None
        return mean_ci95(self.values[arm] - self.values[self.baseline])


def simulate_two_stage_arms(
    design: TwoStage, family: LandscapeFamily, epsilon: float, delta: float, repeats: int, seed: int,
    arms: tuple[ProbeArm, ...], *, probe_family: LandscapeFamily | None = None,
    probe_score_noise_factor: float = 1.0, split_rule: SplitRule | None = None,
) -> TwoStageArmsResult:
    """Calibrate ``design`` once and simulate every arm with the same seed (paired), plus the baseline arm.

    Args:
        design: The design (released probes).
        family: The final runs' family.
        epsilon: Total ε.
        delta: δ.
        repeats: Searches per arm.
        seed: Seed shared by every arm.
        arms: The arms; :data:`BASELINE_ARM` is added first when missing.
        probe_family: The probes' family (same grid, e.g. fewer epochs); default ``family``.
        probe_score_noise_factor: As for :func:`simulate_two_stage`.
        split_rule: As for :func:`simulate_two_stage`.

    Returns:
        The result, ``values`` paired across arms.
    """
    check_positive("epsilon", epsilon)
    for arm in arms:
        _check_arm(design, arm)
    arms = arms if BASELINE_ARM in arms else (BASELINE_ARM, *arms)
    calibration, probe_landscape, final_landscape = _calibrated_landscapes(
        design, family, epsilon, delta, probe_family, probe_score_noise_factor, split_rule)
    values = tuple(two_stage_arm_values(design, probe_landscape, final_landscape, repeats, seed, arm) for arm in arms)
    return TwoStageArmsResult(design, calibration, tuple(arms), values, arms.index(BASELINE_ARM))

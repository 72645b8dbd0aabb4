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

Scope: the probes are drawn from the prior, i.e. a uniform probe selection (C = c = 1) or uniformly placed
released probes. Adaptive probe rules are refused here (the accounting covers them; their simulation is not
written yet). σ outside a family's range is refused, never extrapolated.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from dphypo.privacy import RdpCurve
from dphypo.privacy.two_stage import (
    FinalRun,
    FinalSelection,
    ProbeRelease,
    ProbeSelection,
    TwoStage,
    TwoStageCalibration,
    TwoStageDesignError,
    calibrate_two_stage,
)
from dphypo.privacy.validation import check_positive, check_positive_int
from dphypo.simulation.equal_epsilon import metadata_mechanism
from dphypo.simulation.family import LandscapeFamily
from dphypo.simulation.landscapes import Landscape
from dphypo.train.mechanism import DPSGDMechanism, check_probe_fidelity

__all__ = ["TwoStageResult", "calibrate_design", "simulate_two_stage", "two_stage_values"]


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
    probe_metadata: Mapping[str, Any] | None = None,
) -> TwoStageCalibration:
    """σ of the probes and of the final stage for a total (ε, δ), under the families' DP-SGD mechanisms.

    Args:
        design: The design.
        epsilon: Total ε (> 0).
        delta: δ ∈ (0, 1).
        mechanism_metadata: The final runs' mechanism (a family's
            :attr:`~dphypo.simulation.family.LandscapeFamily.mechanism_metadata`,
            :func:`~dphypo.simulation.equal_epsilon.metadata_mechanism`): each final run is that DP-SGD run with its
            score release, at the final σ.
        probe_metadata: The probes' mechanism, e.g. fewer epochs (default: the final one: full-fidelity probes).

    Returns:
        The calibration (RDP; see :func:`~dphypo.privacy.two_stage.calibrate_two_stage`).

    Raises:
        TwoStageDesignError: Probes of a higher fidelity than the final run, or a refused split.
    """
    final = metadata_mechanism(mechanism_metadata)
    probe = final if probe_metadata is None else metadata_mechanism(probe_metadata)
    check_probe_fidelity(probe, final)

    def curve_of(mechanism: DPSGDMechanism) -> Callable[[float], RdpCurve]:
        return lambda sigma: dataclasses.replace(mechanism, sigma=sigma).rdp()

    return calibrate_two_stage(epsilon, delta, design.stage1, design.stage2, curve_of(probe), curve_of(final),
                               split=design.split)


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
    if isinstance(design.stage2, FinalRun):
        # a search whose stage 1 ran no probe (T = 0) releases nothing: the worst mean, as simulate() scores it
        return np.where(available > 0, final.true_values(top[:, 0]), final.worst_value)
    counts = _run_counts(design.stage2, repeats, rng)
    width = int(counts.max())
    # each final run picks uniformly among the repeat's available top-k points
    slots = np.floor(rng.random((repeats, width)) * available[:, None]).astype(np.int64)
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


def simulate_two_stage(
    design: TwoStage, family: LandscapeFamily, epsilon: float, delta: float, repeats: int,
    rng: np.random.Generator, *, probe_family: LandscapeFamily | None = None,
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

    Returns:
        The result; ``values`` are true values at the final σ.

    Raises:
        TwoStageDesignError: A calibrated σ outside a family's range, probes above the final fidelity, or families
            on different grids.
    """
    check_positive("epsilon", epsilon)
    probes = family if probe_family is None else probe_family
    calibration = calibrate_design(design, epsilon, delta, family.mechanism_metadata, probes.mechanism_metadata)
    probe_landscape = _member_at(probes, calibration.probe_sigma, "probe", design, epsilon)
    final_landscape = _member_at(family, calibration.final_sigma, "final", design, epsilon)
    if probe_landscape.axis_names != final_landscape.axis_names or not all(
        np.array_equal(a, b) for a, b in zip(probe_landscape.axis_values, final_landscape.axis_values, strict=True)
    ):
        raise TwoStageDesignError("probe_family and family must share one grid (the same axes and values)")
    values = two_stage_values(design, probe_landscape, final_landscape, repeats, rng)
    return TwoStageResult(design, calibration, values)

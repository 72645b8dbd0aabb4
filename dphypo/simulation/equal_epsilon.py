"""Equal-ε arms: the noise multiplier σ at which a simulated search costs a given total ε.

An equal-ε comparison (the white-box setting of DP-HyPO §4.2) gives every arm the same total (ε, δ) and lets each
spend it as its search allows: a uniform search (C = c = 1) uses the Papernot-Steinke / Koskela-Redberg-Wang
bounds, an adaptive one (C > c) pays for adaptivity with more noise per run. :func:`arm_sigma` returns that σ for
the DP-SGD mechanism a landscape family was built with
(:attr:`dphypo.simulation.family.LandscapeFamily.mechanism_metadata`), so the arm's landscape is
``family.at(arm_sigma(...))``.

The per-run mechanism is the landscape's DP-SGD mechanism *including* the Gaussian release of the run's score
(:func:`dphypo.simulation.studies.mechanism_from_metadata`); σ is calibrated by :func:`dphypo.privacy.calibrate_sigma`,
i.e. the accountant's minimum over its valid bounds:

* uniform search: RDP (Papernot & Steinke 2022, Theorem 2, and with ``adaptive_theorem="B"`` Theorem B at
  C = c = 1 of docs/proofs/adaptive.md) and the privacy-profile bounds of Koskela, Redberg & Wang 2024 (the mechanism's
  :meth:`~dphypo.train.DPSGDMechanism.profile`), whichever is smallest;
* adaptive search (C > c): RDP only, with the named adaptive theorem (``adaptive_theorem``: ``"B"`` by default,
  ``"A"`` for the accounting the shipped equal-ε studies were calibrated with); profile bounds are not proven for
  C > c, so no profile is passed.

The theorem is always passed explicitly (never left to the accountant's default), so a recorded result can be
reproduced by naming the theorem it was calibrated with. :func:`dphypo.simulation.studies.arm_epsilon` accounts a
cell with the same bounds (the same profile, :func:`dphypo.simulation.studies.mechanism_profile`, and the study's
theorem), so an arm at its calibrated σ reads ε ≤ the target, within the calibration's tolerance. Digits, ε = 8,
E[T] = 20, uniform arm: 1.0888 with Theorem B at C = c = 1, 1.1143 with the profile bound alone
(``adaptive_theorem="A"``), 1.2226 with Papernot-Steinke alone (the shipped landscape).

**Heterogeneous families** (issue #25: members built with privacy grids, each (batch size, epochs) setting at its
own σ_i under one reference run, :func:`dphypo.simulation.family.is_heterogeneous`). A heterogeneous search is
accounted as a homogeneous search of its reference (docs/proofs/heterogeneous.md; the accountant takes the
reference's curve and, for a uniform search, its profile), so the arm's σ is the *reference's* σ_ref, calibrated by
:func:`dphypo.privacy.heterogeneous.calibrate_heterogeneous` with the family's reference and settings: the same
calibration ``dphypo.tune`` runs for such a space (RDP dominance of every setting; profile dominance too for a
uniform search). The arm's landscape is ``family.at(σ_ref)``. A σ_ref at which a setting cannot be dominated under
the σ cap is refused (:class:`~dphypo.privacy.heterogeneous.DominanceError`, naming the setting). The members were
built with plans that dominate the profile as well, so for an adaptive arm (whose own plan needs RDP dominance only,
hence σ_i no larger) the landscape is conservative: its runs carry at least the noise the arm would train with.

:func:`run_equal_epsilon_study` runs a study (:class:`dphypo.simulation.studies.StudyConfig` with ``epsilon``)
whose every cell is on ``family.at(arm_sigma(...))`` for its own run count and C, c (:func:`cell_landscapes`; the
cell's C, c are :func:`dphypo.simulation.studies.cell_bounds`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

from dphypo.api.calibration_cache import cached_calibration
from dphypo.privacy import CalibrationError, CalibrationResult, RepeatAndSelect, RunCountDistribution
from dphypo.privacy.adaptive import check_adaptive_theorem
from dphypo.privacy.heterogeneous import CandidateRun, DominanceError, ReferenceRun, calibrate_heterogeneous
from dphypo.privacy.split import SplitRule
from dphypo.privacy.validation import check_positive
from dphypo.search.execution import Executor
from dphypo.simulation.family import LandscapeFamily, is_heterogeneous, load_family
from dphypo.simulation.studies import (
    Cell,
    CellLandscape,
    StudyConfig,
    StudyResult,
    cell_bounds,
    mechanism_from_metadata,
    mechanism_profile,
    run_study,
)
from dphypo.train.mechanism import DPSGDMechanism

__all__ = [
    "arm_calibration",
    "arm_sigma",
    "cell_landscapes",
    "heterogeneous_runs",
    "metadata_mechanism",
    "run_equal_epsilon_study",
]

# σ of the placeholder mechanism the cache is keyed on (the calibration replaces it).
_PLACEHOLDER_SIGMA = 1.0


def metadata_mechanism(mechanism_metadata: Mapping[str, Any]) -> DPSGDMechanism:
    """The per-run DP-SGD mechanism (score release included) that landscape metadata describes, at σ = 1.

    Delegates to :func:`dphypo.simulation.studies.mechanism_from_metadata` (split sizes from
    :func:`dphypo.train.load_dataset` with the metadata's ``data_seed``); a ``sigma`` in the metadata is ignored.

    Args:
        mechanism_metadata: Landscape or family metadata with ``dataset``, ``batch_size``, ``epochs`` and
            ``score_noise`` > 0 (optionally ``data_seed``, ``n_train``, ``n_val``).

    Returns:
        The mechanism with σ = 1.

    Raises:
        ValueError: A mechanism key is missing, the score noise is 0 (the scores would not be private), or a stated
            ``n_train`` / ``n_val`` differs from the dataset's split.
    """
    if not isinstance(mechanism_metadata, Mapping):
        raise ValueError(f"mechanism_metadata must be a mapping, got {type(mechanism_metadata).__name__}")
    missing = [k for k in ("dataset", "batch_size", "epochs", "score_noise") if k not in mechanism_metadata]
    if missing:
        raise ValueError(f"mechanism_metadata lacks the DP-SGD mechanism keys {missing}, got keys "
                         f"{sorted(mechanism_metadata)}")
    mechanism = mechanism_from_metadata({**mechanism_metadata, "sigma": _PLACEHOLDER_SIGMA})
    if mechanism is None:
        raise ValueError(f"mechanism_metadata has no private score release (score_noise must be > 0, got "
                         f"{mechanism_metadata['score_noise']!r})")
    for key in ("n_train", "n_val"):
        if key in mechanism_metadata and mechanism_metadata[key] != getattr(mechanism, key):
            raise ValueError(f"mechanism_metadata[{key!r}]={mechanism_metadata[key]!r} but dataset "
                             f"{mechanism_metadata['dataset']!r} "
                             f"(data_seed {mechanism_metadata.get('data_seed', 0)!r}) "
                             f"splits {getattr(mechanism, key)}")
    return mechanism


def arm_calibration(
    epsilon: float,
    delta: float,
    run_count: RunCountDistribution,
    C: float,
    c: float,
    mechanism_metadata: Mapping[str, Any],
    *,
    adaptive_theorem: str = "B",
    cache: bool = True,
    split_rule: SplitRule | None = None,
) -> CalibrationResult:
    """:func:`arm_sigma` with the accountant's report at that σ (which bound won, its ε parts).

    Args and raises as :func:`arm_sigma`; ``cache``: use the on-disk calibration cache
    (:mod:`dphypo.api.calibration_cache`; a cached σ is re-certified by one full accounting) for a homogeneous
    family; ``split_rule``: calibrate as ``tune --data-split per-record`` would (Theorem S, docs/proofs/split.md),
    ``None`` (default) the sum.

    Returns:
        The calibration (``sigma``, ``report``, ``sigma_tolerance``, ``evaluations``).
    """
    check_positive("epsilon", epsilon)
    check_positive("delta", delta)
    epsilon, delta = float(epsilon), float(delta)
    if not isinstance(run_count, RunCountDistribution):
        raise ValueError(f"run_count must be a RunCountDistribution, got {run_count!r}")
    search = RepeatAndSelect(run_count, C, c)  # validates C, c (and refuses e.g. adaptive Poisson T)
    check_adaptive_theorem(adaptive_theorem)
    mechanism = dataclasses.replace(metadata_mechanism(mechanism_metadata), split_rule=split_rule)
    if is_heterogeneous(mechanism_metadata):
        reference, candidates = heterogeneous_runs(mechanism_metadata, mechanism)
        return _calibrate_heterogeneous(epsilon, delta, search, reference, candidates, adaptive_theorem, split_rule)
    return _calibrate(epsilon, delta, search, mechanism, adaptive_theorem, cache)


def heterogeneous_runs(
    mechanism_metadata: Mapping[str, Any], mechanism: DPSGDMechanism,
) -> tuple[ReferenceRun, tuple[CandidateRun, ...]]:
    """The reference run and every setting's (q, steps) that heterogeneous landscape metadata states.

    Args:
        mechanism_metadata: Metadata with ``reference`` and ``settings`` (:func:`~dphypo.simulation.family
            .is_heterogeneous`).
        mechanism: The reference's DP-SGD mechanism (:func:`metadata_mechanism`): its q, steps and score noise.

    Returns:
        ``(reference, candidates)``, the candidates in the metadata's settings order.

    Raises:
        ValueError: The stated reference (q, steps) is not the one the reference's batch size and epochs give.
    """
    stated = mechanism_metadata["reference"]
    if (stated["sample_rate"], stated["steps"]) != (mechanism.sample_rate, mechanism.steps):
        raise ValueError(f"metadata['reference'] states q={stated['sample_rate']!r}, steps={stated['steps']!r} but "
                         f"batch_size={mechanism.batch_size}, epochs={mechanism.epochs} give "
                         f"q={mechanism.sample_rate!r}, steps={mechanism.steps!r}")
    reference = ReferenceRun(mechanism.sample_rate, mechanism.steps, mechanism.score_noise)
    candidates = tuple(CandidateRun(row["sample_rate"], row["steps"],
                                    name=f"batch_size={row['batch_size']}, epochs={row['epochs']}")
                       for row in mechanism_metadata["settings"])
    return reference, candidates


@lru_cache(maxsize=512)
def _calibrate_heterogeneous(
    epsilon: float, delta: float, search: RepeatAndSelect, reference: ReferenceRun,
    candidates: tuple[CandidateRun, ...], adaptive_theorem: str, split_rule: SplitRule | None = None,
) -> CalibrationResult:
    """σ_ref of the reference for the total ε (:func:`~dphypo.privacy.heterogeneous.calibrate_heterogeneous`).

    Returns the calibration with σ = the plan's σ_ref and the report of the search under that plan (the reference's
    accounting; σ_ref is raised above the reference-only calibration only if a profile slack cost ε).
    """
    result = calibrate_heterogeneous(epsilon, delta, search, candidates, score_noise=reference.score_noise,
                                     reference=reference, adaptive_theorem=adaptive_theorem, split_rule=split_rule)
    return dataclasses.replace(result.calibration, sigma=result.plan.sigma_ref, report=result.report)


def arm_sigma(
    epsilon: float,
    delta: float,
    run_count: RunCountDistribution,
    C: float,
    c: float,
    mechanism_metadata: Mapping[str, Any],
    *,
    adaptive_theorem: str = "B",
) -> float:
    """The smallest σ (to 1e-4 relative, conservative side) at which this search costs total ``epsilon``.

    Calibrated by :func:`dphypo.privacy.calibrate_sigma` on the per-run curve of the mechanism in ``mechanism_metadata``
    (DP-SGD composed with the score release); a uniform search (C = c = 1) also counts the privacy-profile
    bounds. Results are cached per (ε, δ, run count, C, c, mechanism, theorem): one calibration takes seconds.

    Args:
        epsilon: Total ε of the search (> 0).
        delta: δ ∈ (0, 1).
        run_count: Distribution of the number of runs T.
        C: Upper density-ratio bound (≥ 1; 1 with ``c = 1`` for a uniform search).
        c: Lower density-ratio bound (in (0, 1]).
        mechanism_metadata: The DP-SGD mechanism, e.g.
            :attr:`~dphypo.simulation.family.LandscapeFamily.mechanism_metadata` (:func:`metadata_mechanism`).
        adaptive_theorem: The accounting (:func:`dphypo.privacy.account`): ``"B"`` (Theorem B; for a uniform search
            also Theorem B at C = c = 1), ``"A"`` (Theorem A; Papernot-Steinke and the profile bounds for a uniform
            search: the accounting of the shipped equal-ε studies) or ``"published"``.

    Returns:
        σ.

    Raises:
        ValueError: Invalid arguments or mechanism metadata.
        dphypo.privacy.CalibrationError: ε is unreachable: below the search's floor (what T and log(C/c) cost even
            with infinite noise) or below what the σ-independent score release costs.
    """
    return arm_calibration(epsilon, delta, run_count, C, c, mechanism_metadata, adaptive_theorem=adaptive_theorem).sigma


@lru_cache(maxsize=512)
def _calibrate(
    epsilon: float, delta: float, search: RepeatAndSelect, mechanism: DPSGDMechanism, adaptive_theorem: str,
    cache: bool = True,
) -> CalibrationResult:
    """:func:`~dphypo.privacy.calibrate_sigma` of the arm, coarse to fine and cached on disk.

    :func:`~dphypo.api.calibration_cache.cached_calibration`, with the very profile
    :func:`~dphypo.simulation.studies.arm_epsilon` accounts the arm with (same discretisation, shared cache).
    """
    return cached_calibration(epsilon, delta, search, mechanism, profiles=not search.adaptive,
                              adaptive_theorem=adaptive_theorem, profile_for=mechanism_profile, cache=cache)


def cell_landscapes(config: StudyConfig) -> dict[tuple[str, str], CellLandscape]:
    """Every cell's landscape in an equal-ε study: its arm's family at the σ its search needs for the total ε.

    Every cell is calibrated with :func:`~dphypo.simulation.studies.cell_bounds`, the very (C, c)
    :func:`~dphypo.simulation.studies.run_study` simulates and accounts it with: C = c = 1 for a uniform arm, the
    row's C, c for GP-UCB (the arm's own when the row has none), the row's C with the derived c for GPTopSet.

    Args:
        config: An equal-ε study (``config.epsilon`` set, every arm on a family, every row a run count).

    Returns:
        By (setting label, arm label): the landscape, its σ and the calibration's σ tolerance.

    Raises:
        ValueError: Not an equal-ε study, members that are not one family, or a σ outside its family's range
            (one line naming the arm, the row and σ; the family is never extrapolated).
        dphypo.privacy.CalibrationError: A cell's ε is unreachable (the message names the arm and the row).
    """
    if config.epsilon is None:
        raise ValueError("cell_landscapes needs an equal-ε study (StudyConfig.epsilon), got epsilon=None")
    families: dict[tuple[str, ...], LandscapeFamily] = {}
    for arm in config.arms:
        assert isinstance(arm.landscape, tuple)  # StudyConfig: every arm of an equal-ε study has a family
        if arm.landscape not in families:
            families[arm.landscape] = load_family(arm.landscape)
    out: dict[tuple[str, str], CellLandscape] = {}
    for setting in config.settings:
        assert setting.run_count is not None  # StudyConfig: no fixed-T rows in an equal-ε study
        for arm in config.arms:
            assert isinstance(arm.landscape, tuple)
            family = families[arm.landscape]
            C, c = cell_bounds(setting, arm)
            where = f"arm {arm.label!r} in setting {setting.label!r} ({setting.describe_runs()}, C={C:g}, c={c:g})"
            try:
                calibration = arm_calibration(config.epsilon, config.delta, setting.run_count, C, c,
                                              family.mechanism_metadata, adaptive_theorem=config.adaptive_theorem,
                                              split_rule=config.split_rule)
            except CalibrationError as err:
                raise CalibrationError(f"{where}: {err}") from None
            except DominanceError as err:  # a heterogeneous family's σ_ref beyond what its settings can follow
                raise DominanceError(f"{where}: {err}") from None
            try:
                land = family.at(calibration.sigma)
            except ValueError:
                low, high = family.sigma_range
                raise ValueError(
                    f"{where} needs sigma={calibration.sigma:.6g} for total epsilon={config.epsilon:g}, outside the "
                    f"family's range [{low:g}, {high:g}]; build a member there (dphypo landscape build --sigma)"
                ) from None
            out[(setting.label, arm.label)] = CellLandscape(
                land, f"{arm.landscape_name}@sigma={calibration.sigma!r}", calibration.sigma,
                calibration.sigma_tolerance)
    return out


def run_equal_epsilon_study(
    config: StudyConfig,
    *,
    progress: Callable[[Cell], None] | None = None,
    executor: Executor | str | None = None,
) -> StudyResult:
    """:func:`~dphypo.simulation.studies.run_study` on :func:`cell_landscapes`: every cell at total ε.

    Every cell's σ is calibrated, and checked against its family's range, before the first simulated search.
    Each cell reports its σ, the ε accounted at that σ (≤ ``config.epsilon``, within the calibration's
    tolerance) and, for adaptive arms, the paired difference to the uniform arm (repeat r of every arm uses the
    same random streams).

    Args:
        config: An equal-ε study.
        progress: Called with every finished cell.
        executor: Where the searches run (as :func:`~dphypo.simulation.studies.run_study`).

    Returns:
        The result.
    """
    return run_study(config, progress=progress, executor=executor, landscapes=cell_landscapes(config))

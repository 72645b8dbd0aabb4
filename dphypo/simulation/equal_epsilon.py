"""Equal-ε arms: the noise multiplier σ at which a simulated search costs a given total ε.

An equal-ε comparison (the white-box setting of DP-HyPO §4.2) gives every arm the same total (ε, δ) and lets each
spend it as its search allows: a uniform search (C = c = 1) uses the Papernot-Steinke / Koskela-Redberg-Wang
bounds, an adaptive one (C > c) pays for adaptivity with more noise per run. :func:`arm_sigma` returns that σ for
the DP-SGD plan a landscape family was built with (:attr:`dphypo.simulation.family.LandscapeFamily.plan_metadata`),
so the arm's landscape is ``family.at(arm_sigma(...))``.

The per-run mechanism is the landscape's DP-SGD plan *including* the Gaussian release of the run's score
(:func:`dphypo.simulation.studies.landscape_plan`); σ is calibrated by :func:`dphypo.privacy.calibrate_sigma`, i.e.
the accountant's minimum over its valid bounds:

* uniform search: RDP (Papernot & Steinke 2022, Theorem 2) and the privacy-profile bounds of Koskela, Redberg &
  Wang 2024 (the plan's :meth:`~dphypo.train.DPSGDPlan.profile`), whichever is smaller;
* adaptive search (C > c): RDP only (the accountant's default adaptive theorem unless one is named); profile
  bounds are not proven for C > c, so no profile is passed.

Because of the profile bounds, a uniform arm's σ can be *smaller* than the RDP-only σ that
:func:`dphypo.simulation.studies.arm_epsilon` (RDP only) would call equal-ε.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import numpy as np

from dphypo.privacy import CalibrationResult, RunCountDistribution, SearchSpec, calibrate_sigma
from dphypo.simulation.landscapes import Landscape
from dphypo.simulation.studies import landscape_plan
from dphypo.train.plan import DPSGDPlan

__all__ = ["arm_calibration", "arm_sigma", "metadata_plan"]

# σ of the placeholder plan the cache is keyed on (the calibration replaces it).
_PLACEHOLDER_SIGMA = 1.0


def metadata_plan(plan_metadata: Mapping[str, Any]) -> DPSGDPlan:
    """The per-run DP-SGD plan (score release included) that landscape metadata describes, at σ = 1.

    Delegates to :func:`dphypo.simulation.studies.landscape_plan` (split sizes from
    :func:`dphypo.train.load_dataset` with the metadata's ``data_seed``); a ``sigma`` in the metadata is ignored.

    Args:
        plan_metadata: Landscape or family metadata with ``dataset``, ``batch_size``, ``epochs`` and
            ``score_noise`` > 0 (optionally ``data_seed``, ``n_train``, ``n_val``).

    Returns:
        The plan with σ = 1.

    Raises:
        ValueError: A plan key is missing, the score noise is 0 (the scores would not be private), or a stated
            ``n_train`` / ``n_val`` differs from the dataset's split.
    """
    if not isinstance(plan_metadata, Mapping):
        raise ValueError(f"plan_metadata must be a mapping, got {type(plan_metadata).__name__}")
    missing = [k for k in ("dataset", "batch_size", "epochs", "score_noise") if k not in plan_metadata]
    if missing:
        raise ValueError(f"plan_metadata lacks the DP-SGD plan keys {missing}, got keys {sorted(plan_metadata)}")
    # landscape_plan reads only a landscape's metadata and studies.py has no metadata-level entry point, so a
    # 2-point stand-in landscape carries the metadata (one plan reconstruction, not a second copy of it).
    carrier = Landscape(np.zeros(2), np.zeros(2), ("x",), (np.array([0.0, 1.0]),), ("linear",),
                        metadata={**plan_metadata, "sigma": _PLACEHOLDER_SIGMA})
    plan = landscape_plan(carrier)
    if plan is None:
        raise ValueError(f"plan_metadata has no private score release (score_noise must be > 0, got "
                         f"{plan_metadata['score_noise']!r})")
    for key in ("n_train", "n_val"):
        if key in plan_metadata and plan_metadata[key] != getattr(plan, key):
            raise ValueError(f"plan_metadata[{key!r}]={plan_metadata[key]!r} but dataset "
                             f"{plan_metadata['dataset']!r} (data_seed {plan_metadata.get('data_seed', 0)!r}) "
                             f"splits {getattr(plan, key)}")
    return plan


def _check_positive(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def arm_calibration(
    epsilon: float,
    delta: float,
    run_count: RunCountDistribution,
    C: float,
    c: float,
    plan_metadata: Mapping[str, Any],
    *,
    adaptive_theorem: str | None = None,
) -> CalibrationResult:
    """:func:`arm_sigma` with the accountant's report at that σ (which bound won, its ε parts).

    Args and raises as :func:`arm_sigma`.

    Returns:
        The calibration (``sigma``, ``report``, ``sigma_tolerance``, ``evaluations``).
    """
    epsilon, delta = _check_positive("epsilon", epsilon), _check_positive("delta", delta)
    if not isinstance(run_count, RunCountDistribution):
        raise ValueError(f"run_count must be a RunCountDistribution, got {run_count!r}")
    search = SearchSpec(run_count, C, c)  # validates C, c (and refuses e.g. adaptive Poisson T)
    if adaptive_theorem is not None and not isinstance(adaptive_theorem, str):
        raise ValueError(f"adaptive_theorem must be a string or None, got {adaptive_theorem!r}")
    plan = metadata_plan(plan_metadata)
    return _calibrate(epsilon, delta, search, plan, adaptive_theorem)


def arm_sigma(
    epsilon: float,
    delta: float,
    run_count: RunCountDistribution,
    C: float,
    c: float,
    plan_metadata: Mapping[str, Any],
    *,
    adaptive_theorem: str | None = None,
) -> float:
    """The smallest σ (to 1e-4 relative, conservative side) at which this search costs total ``epsilon``.

    Calibrated by :func:`dphypo.privacy.calibrate_sigma` on the per-run curve of the plan in ``plan_metadata``
    (DP-SGD composed with the score release); a uniform search (C = c = 1) also counts the privacy-profile
    bounds. Results are cached per (ε, δ, run count, C, c, plan, theorem): one calibration takes seconds.

    Args:
        epsilon: Total ε of the search (> 0).
        delta: δ ∈ (0, 1).
        run_count: Distribution of the number of runs T.
        C: Upper density-ratio bound (≥ 1; 1 with ``c = 1`` for a uniform search).
        c: Lower density-ratio bound (in (0, 1]).
        plan_metadata: The DP-SGD plan, e.g. :attr:`~dphypo.simulation.family.LandscapeFamily.plan_metadata`
            (:func:`metadata_plan`).
        adaptive_theorem: The bound for C > c; ``None`` uses the accountant's default.

    Returns:
        σ.

    Raises:
        ValueError: Invalid arguments or plan metadata.
        dphypo.privacy.CalibrationError: ε is unreachable: below the search's floor (what T and log(C/c) cost even
            with infinite noise) or below what the σ-independent score release costs.
    """
    return arm_calibration(epsilon, delta, run_count, C, c, plan_metadata, adaptive_theorem=adaptive_theorem).sigma


@lru_cache(maxsize=512)
def _calibrate(
    epsilon: float, delta: float, search: SearchSpec, plan: DPSGDPlan, adaptive_theorem: str | None
) -> CalibrationResult:
    def curve(sigma: float) -> Any:
        return dataclasses.replace(plan, sigma=sigma).rdp()

    def profile(sigma: float) -> Any:
        return dataclasses.replace(plan, sigma=sigma).profile()

    options: dict[str, Any] = {} if adaptive_theorem is None else {"adaptive_theorem": adaptive_theorem}
    if not search.adaptive:
        options["profile_for_sigma"] = profile
    return calibrate_sigma(epsilon, delta, search, curve, **options)

"""Privacy accounting for hyperparameter searches: pure numpy/scipy, no torch, no I/O.

The public surface:

* run-count distributions: :class:`TruncatedNegativeBinomial`, :func:`geometric`, :func:`logarithmic`,
  :class:`Poisson`;
* per-candidate RDP curves: :func:`dpsgd_rdp`, :func:`gaussian_rdp`, :func:`pure_dp_rdp`, :func:`custom_rdp`,
  :func:`compose`, each carrying the ``dp_accounting`` ``DpEvent`` of its mechanism (:mod:`dphypo.privacy.events`,
  imported on first use: it loads dp_accounting);
* tuning theorems: :func:`tuning_rdp` (the order-wise minimum of the valid RDP bounds: Theorem B of
  ``docs/proofs/adaptive.md`` for C > c; Papernot-Steinke Theorems 2 and 6 and Theorem B at C = c = 1 for a uniform
  search), :func:`theorem_a`, :func:`theorem_b`, :func:`theorem_a_pure`, and the published
  :func:`dphypo_theorem1` / :func:`dphypo_theorem2` (proof gap; opt-in in the accountant);
* the accountant: :class:`RepeatAndSelect`, :class:`PrivacyAccounting`, :func:`account`, :func:`account_pure`,
  :func:`calibrate_sigma`, :func:`calibrate_dpsgd_sigma`;
* candidates whose hyperparameters change their privacy (batch size, epochs): :class:`CandidateRun`,
  :class:`ReferenceRun`, :func:`plan_heterogeneous`, :func:`calibrate_heterogeneous` (one σ_i per candidate, all
  dominated by one reference; :mod:`dphypo.privacy.heterogeneous`);
* two-stage searches (probes whose outcome is released, then a committed run): :class:`ProbeSelection`,
  :class:`ProbeRelease`, :class:`FinalRun`, :class:`FinalSelection`, :func:`account_two_stage`,
  :func:`calibrate_two_stage` (:mod:`dphypo.privacy.two_stage`);
* conversions: :func:`epsilon_from_rdp`, :func:`delta_from_rdp`.

Modules, each importing only earlier ones (``tests/test_architecture.py`` checks there is no cycle): ``errors``,
``events``; ``rdp``, ``conversion``, ``run_counts``; ``profiles``; ``tuning`` (the published theorems); ``adaptive``
(Theorems A and B); ``search_rdp`` (:func:`tuning_rdp`, the dispatcher to the covering theorems); ``spec``
(:class:`RepeatAndSelect`, :class:`PrivacyReport`); ``profile_tuning``; ``accountant`` (:func:`account`); ``charged``;
``plan`` (:class:`PrivacyAccounting`); ``calibration``; ``heterogeneous``; ``two_stage``; ``subsampled``,
``transfer``.
"""

from __future__ import annotations

from typing import NoReturn

from dphypo.privacy.accountant import account, account_pure
from dphypo.privacy.accounting import PrivacyAccounting
from dphypo.privacy.adaptive import theorem_a, theorem_a_pure, theorem_b
from dphypo.privacy.calibration import CalibrationError, CalibrationResult, calibrate_dpsgd_sigma, calibrate_sigma
from dphypo.privacy.conversion import delta_from_rdp, epsilon_from_rdp
from dphypo.privacy.heterogeneous import (
    CandidateRun,
    DominanceError,
    HeterogeneousCalibration,
    HeterogeneousPlan,
    ReferenceRun,
    calibrate_heterogeneous,
    plan_heterogeneous,
)
from dphypo.privacy.rdp import (
    DEFAULT_ORDERS,
    RdpCurve,
    compose,
    custom_rdp,
    dpsgd_rdp,
    gaussian_rdp,
    pure_dp_rdp,
    zero_rdp,
)
from dphypo.privacy.run_counts import (
    RUN_COUNT_FAMILIES,
    Poisson,
    RunCountDistribution,
    TruncatedNegativeBinomial,
    geometric,
    logarithmic,
    make_run_count,
)
from dphypo.privacy.search_rdp import AdaptivePoissonError, tuning_rdp
from dphypo.privacy.spec import PrivacyReport, RepeatAndSelect
from dphypo.privacy.tuning import (
    TuningRdp,
    check_density_bounds,
    dphypo_theorem1,
    dphypo_theorem2,
    papernot_steinke_theorem6,
)
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

__all__ = [
    "DEFAULT_ORDERS",
    "RUN_COUNT_FAMILIES",
    "AdaptivePoissonError",
    "CalibrationError",
    "CalibrationResult",
    "CandidateRun",
    "DominanceError",
    "FinalRun",
    "FinalSelection",
    "HeterogeneousCalibration",
    "HeterogeneousPlan",
    "Poisson",
    "PrivacyAccounting",
    "PrivacyReport",
    "ProbeRelease",
    "ProbeSelection",
    "RdpCurve",
    "ReferenceRun",
    "RepeatAndSelect",
    "RunCountDistribution",
    "TruncatedNegativeBinomial",
    "TuningRdp",
    "TwoStage",
    "TwoStageDesignError",
    "TwoStageReport",
    "account",
    "account_pure",
    "account_two_stage",
    "calibrate_dpsgd_sigma",
    "calibrate_heterogeneous",
    "calibrate_sigma",
    "calibrate_two_stage",
    "check_density_bounds",
    "compose",
    "custom_rdp",
    "delta_from_rdp",
    "dphypo_theorem1",
    "dphypo_theorem2",
    "dpsgd_rdp",
    "epsilon_from_rdp",
    "gaussian_rdp",
    "geometric",
    "logarithmic",
    "make_run_count",
    "papernot_steinke_theorem6",
    "plan_heterogeneous",
    "pure_dp_rdp",
    "theorem_a",
    "theorem_a_pure",
    "theorem_b",
    "tuning_rdp",
    "zero_rdp",
]

#: Names this version renamed (issue #21) mapped to their replacements (no alias: one name per concept): the
#: search's privacy configuration, how a search is randomised, and the tuple mechanism keys that dp_accounting
#: DpEvents replaced (dphypo.privacy.events).
_RENAMED = {
    "PrivacyPlan": "dphypo.privacy.PrivacyAccounting",
    "SearchSpec": "dphypo.privacy.RepeatAndSelect",
    "Mechanism": "dp_accounting.dp_event.DpEvent (RdpCurve.event, PrivacyProfile.event)",
    "mechanism_key": "dp_accounting.dp_event events (e.g. dphypo.privacy.events.gaussian_event)",
    "compose_mechanisms": "dphypo.privacy.events.compose_events",
    "dpsgd_mechanism": "dphypo.privacy.events.dpsgd_event",
}


def __getattr__(name: str) -> NoReturn:
    """Name the replacement of a renamed class instead of failing with a bare AttributeError.

    Raises:
        AttributeError: Always; for a renamed name the message names the new one.
    """
    if name in _RENAMED:
        raise AttributeError(f"dphypo.privacy.{name} was renamed to {_RENAMED[name]}")
    raise AttributeError(f"module 'dphypo.privacy' has no attribute {name!r}")

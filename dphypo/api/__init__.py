"""The one-call API: :func:`tune`, which runs a search design given as one value (:mod:`dphypo.api.design`).

:func:`tune` is a private DP-SGD hyperparameter search with one honest (ε, δ). Its ``design`` is a
:class:`SingleStage` search, a :class:`TwoStageSearch` (cheap probes whose outcome is released, then one committed
run; issue #24) or :class:`Subsampled` tuning (the search on a Poisson subsample, then one final run; Koskela &
Kulkarni 2023); without one it runs :func:`auto_design`'s pick, the default of ``dphypo tune``.
:func:`tune_two_stage` and :func:`tune_subsampled` are the runners of the last two (``tune(design=...)`` calls them).
"""

from __future__ import annotations

from dphypo.api.design import Design, SingleStage, Subsampled, TwoStageSearch, auto_design, design_from_dict
from dphypo.api.runner import tune
from dphypo.api.search import DEFAULT_RUNS
from dphypo.api.subsampled import SubsampledSearchResult, SubsampledTuning, tune_subsampled
from dphypo.api.two_stage import DEFAULT_TWO_STAGE, TwoStageOutcome, TwoStageSearchResult, tune_two_stage

__all__ = [
    "DEFAULT_RUNS",
    "DEFAULT_TWO_STAGE",
    "Design",
    "SingleStage",
    "Subsampled",
    "SubsampledSearchResult",
    "SubsampledTuning",
    "TwoStageOutcome",
    "TwoStageSearch",
    "TwoStageSearchResult",
    "auto_design",
    "design_from_dict",
    "tune",
    "tune_subsampled",
    "tune_two_stage",
]

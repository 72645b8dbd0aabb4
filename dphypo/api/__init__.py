"""The one-call API: :func:`tune`, :func:`tune_two_stage` and :func:`tune_subsampled`.

:func:`tune` is a private DP-SGD hyperparameter search with one honest (ε, δ); :func:`tune_two_stage` probes at a
cheaper fidelity, releases the probes' outcome and commits one full run (issue #24); :func:`tune_subsampled` is the
search on a Poisson subsample, then one final run (Koskela & Kulkarni 2023).
"""

from __future__ import annotations

from dphypo.api.search import DEFAULT_RUNS, tune
from dphypo.api.subsampled import SubsampledSearchResult, SubsampledTuning, tune_subsampled
from dphypo.api.two_stage import DEFAULT_TWO_STAGE, TwoStageOutcome, TwoStageSearchResult, tune_two_stage

__all__ = [
    "DEFAULT_RUNS",
    "DEFAULT_TWO_STAGE",
    "SubsampledSearchResult",
    "SubsampledTuning",
    "TwoStageOutcome",
    "TwoStageSearchResult",
    "tune",
    "tune_subsampled",
    "tune_two_stage",
]

"""The one-call API: :func:`tune` and :func:`tune_subsampled`.

:func:`tune` is a private DP-SGD hyperparameter search with one honest (ε, δ); :func:`tune_subsampled` is the same
search on a Poisson subsample, then one final run (Koskela & Kulkarni 2023).
"""

from __future__ import annotations

from dphypo.api.search import DEFAULT_RUNS, tune
from dphypo.api.subsampled import SubsampledSearchResult, SubsampledTuning, tune_subsampled

__all__ = [
    "DEFAULT_RUNS",
    "SubsampledSearchResult",
    "SubsampledTuning",
    "tune",
    "tune_subsampled",
]

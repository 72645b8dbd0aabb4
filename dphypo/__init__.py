"""dphypo: adaptive differentially private hyperparameter optimisation (DP-HyPO).

:func:`dphypo.tune` runs a private DP-SGD hyperparameter search and releases the best run with one honest total
(ε, δ); :mod:`dphypo.privacy` is the accountant (pure numpy/scipy). Heavy dependencies (torch, BoTorch, Opacus)
load only when a search or training needs them. ``docs/architecture.md`` shows the layers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dphypo import _moved

_moved.install()  # an import of a module path this version moved names its new place in one line

__version__ = "0.1.0"

__all__ = [
    "DPSGD",
    "GPUCB",
    "Choice",
    "DataFailure",
    "DphypoError",
    "FinalRun",
    "FinalSelection",
    "Float",
    "Int",
    "Journal",
    "LogFloat",
    "LostAttemptsExceeded",
    "PerRecordSplit",
    "PrivacyAccounting",
    "PrivacyReport",
    "PrivateScore",
    "ProbeRelease",
    "ProbeSelection",
    "Release",
    "RepeatAndSelect",
    "SQLiteJournal",
    "SearchOptions",
    "SearchResult",
    "SearchSpace",
    "SingleStage",
    "Subsampled",
    "Tuner",
    "TwoStage",
    "TwoStageSearch",
    "Uniform",
    "__version__",
    "auto_design",
    "make_executor",
    "split_arrays",
    "tune",
    "tune_subsampled",
    "tune_two_stage",
]

_LAZY = {
    "tune": "dphypo.api",
    "tune_subsampled": "dphypo.api",
    "tune_two_stage": "dphypo.api",
    "SingleStage": "dphypo.api",
    "Subsampled": "dphypo.api",
    "TwoStageSearch": "dphypo.api",
    "auto_design": "dphypo.api",
    "TwoStage": "dphypo.privacy",
    "ProbeRelease": "dphypo.privacy",
    "ProbeSelection": "dphypo.privacy",
    "FinalRun": "dphypo.privacy",
    "FinalSelection": "dphypo.privacy",
    "DPSGD": "dphypo.train.recipe",
    "PerRecordSplit": "dphypo.train.data",
    "split_arrays": "dphypo.train.data",
    "Tuner": "dphypo.search.tuner",
    "Release": "dphypo.search.tuner",
    "SearchResult": "dphypo.search.tuner",
    "SearchOptions": "dphypo.search.options",
    "DataFailure": "dphypo.exceptions",
    "DphypoError": "dphypo.exceptions",
    "LostAttemptsExceeded": "dphypo.exceptions",
    "PrivateScore": "dphypo.search.records",
    "GPUCB": "dphypo.strategies",
    "Uniform": "dphypo.strategies",
    "SearchSpace": "dphypo.space",
    "LogFloat": "dphypo.space",
    "Float": "dphypo.space",
    "Int": "dphypo.space",
    "Choice": "dphypo.space",
    "PrivacyAccounting": "dphypo.privacy",
    "PrivacyReport": "dphypo.privacy",
    "RepeatAndSelect": "dphypo.privacy",
    "Journal": "dphypo.search.storage",
    "SQLiteJournal": "dphypo.search.storage",
    "make_executor": "dphypo.search.execution",
}

#: Names this version renamed (issue #21), and their replacements: an old name fails with one line naming the new one.
_RENAMED = {
    "PrivacyPlan": "dphypo.PrivacyAccounting",
    "SearchSpec": "dphypo.RepeatAndSelect",
}

if TYPE_CHECKING:
    from dphypo.api import SingleStage, Subsampled, TwoStageSearch, auto_design, tune, tune_subsampled, tune_two_stage
    from dphypo.exceptions import DataFailure, DphypoError, LostAttemptsExceeded
    from dphypo.privacy import (
        FinalRun,
        FinalSelection,
        PrivacyAccounting,
        PrivacyReport,
        ProbeRelease,
        ProbeSelection,
        RepeatAndSelect,
        TwoStage,
    )
    from dphypo.search.execution import make_executor
    from dphypo.search.options import SearchOptions
    from dphypo.search.records import PrivateScore
    from dphypo.search.storage import Journal, SQLiteJournal
    from dphypo.search.tuner import Release, SearchResult, Tuner
    from dphypo.space import Choice, Float, Int, LogFloat, SearchSpace
    from dphypo.strategies import GPUCB, Uniform
    from dphypo.train.data import PerRecordSplit, split_arrays
    from dphypo.train.recipe import DPSGD


def __getattr__(name: str) -> Any:
    """Import the public names on first use (PEP 562), keeping ``import dphypo`` light."""
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    if name in _RENAMED:
        raise AttributeError(f"dphypo.{name} was renamed {_RENAMED[name]}")
    raise AttributeError(f"module 'dphypo' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

"""dphypo: adaptive differentially private hyperparameter optimisation (DP-HyPO).

``dphypo.tune`` runs a private DP-SGD hyperparameter search; :mod:`dphypo.privacy` is the accountant (pure
numpy/scipy). Heavy dependencies (torch, BoTorch, Opacus) load only when a search or training needs them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "GPUCB",
    "Choice",
    "DataFailure",
    "Float",
    "Int",
    "Journal",
    "LogFloat",
    "LostAttemptsExceeded",
    "PrivacyConfig",
    "PrivateScore",
    "Release",
    "SearchPrivacy",
    "SearchResult",
    "SearchSpace",
    "Tuner",
    "Uniform",
    "__version__",
    "make_executor",
    "tune",
]

_LAZY = {
    "tune": "dphypo.api",
    "Tuner": "dphypo.tuner",
    "Release": "dphypo.tuner",
    "SearchResult": "dphypo.tuner",
    "DataFailure": "dphypo.tuner",
    "LostAttemptsExceeded": "dphypo.tuner",
    "PrivateScore": "dphypo.tuner",
    "GPUCB": "dphypo.strategies",
    "Uniform": "dphypo.strategies",
    "SearchSpace": "dphypo.space",
    "LogFloat": "dphypo.space",
    "Float": "dphypo.space",
    "Int": "dphypo.space",
    "Choice": "dphypo.space",
    "PrivacyConfig": "dphypo.privacy",
    "SearchPrivacy": "dphypo.privacy",
    "Journal": "dphypo.storage",
    "make_executor": "dphypo.executors",
}

if TYPE_CHECKING:
    from dphypo.api import tune
    from dphypo.executors import make_executor
    from dphypo.privacy import PrivacyConfig, SearchPrivacy
    from dphypo.space import Choice, Float, Int, LogFloat, SearchSpace
    from dphypo.storage import Journal
    from dphypo.strategies import GPUCB, Uniform
    from dphypo.tuner import DataFailure, LostAttemptsExceeded, PrivateScore, Release, SearchResult, Tuner


def __getattr__(name: str) -> Any:
    """Import the public names on first use (PEP 562), keeping ``import dphypo`` light."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'dphypo' has no attribute {name!r}")

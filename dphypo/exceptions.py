"""Every exception dphypo raises on purpose, under one base: ``except DphypoError`` catches them all.

Each keeps the built-in base callers caught before (``ValueError`` for invalid privacy parameters and a changed
journal configuration, ``RuntimeError`` for a search that must stop, ``FileNotFoundError`` for missing data), so
existing ``except`` clauses still work. The base lives in the leaf module :mod:`dphypo.privacy.errors` because
:mod:`dphypo.privacy` imports nothing else from dphypo.
"""

from __future__ import annotations

from dphypo.privacy.calibration import CalibrationError
from dphypo.privacy.errors import DphypoError
from dphypo.privacy.heterogeneous import DominanceError
from dphypo.privacy.profile_tuning import ProfileScopeError
from dphypo.privacy.profiles import ProfileTooLargeError
from dphypo.privacy.search_rdp import AdaptivePoissonError
from dphypo.privacy.subsampled import SubsampledScopeError
from dphypo.privacy.two_stage import TwoStageDesignError
from dphypo.search.execution import WorkerLost
from dphypo.search.recording import LostAttemptsExceeded
from dphypo.search.records import DataFailure, RunMisuse
from dphypo.search.storage import JournalError, JournalMismatch
from dphypo.strategies.released import CuratorOnlyError
from dphypo.train.data import DataNotFoundError
from dphypo.train.mechanism import BudgetExceeded

__all__ = [
    "AdaptivePoissonError",
    "BudgetExceeded",
    "CalibrationError",
    "CuratorOnlyError",
    "DataFailure",
    "DataNotFoundError",
    "DominanceError",
    "DphypoError",
    "JournalError",
    "JournalMismatch",
    "LostAttemptsExceeded",
    "ProfileScopeError",
    "ProfileTooLargeError",
    "RunMisuse",
    "SubsampledScopeError",
    "TwoStageDesignError",
    "WorkerLost",
]

"""DP-SGD training for private hyperparameter searches: datasets, models, the per-run mechanism and the objective.

Importing :mod:`dphypo.train` is light: names are loaded on first use, and only ``models`` and ``objective`` import
torch (``data`` imports it lazily; ``mechanism`` never does, ``opacus`` only when a run makes its training private).
A :class:`DPSGDMechanism` opens a :class:`DPSGDRun` for each run: what an objective receives (``run.make_private``,
``run.private_score``). :mod:`dphypo.train.vectorized` trains many candidates at once.

Typical use::

    from dphypo.train import DPSGDObjective, DPSGDMechanism, load_dataset

    splits = load_dataset("digits")
    mechanism = DPSGDMechanism.from_splits(splits, sigma=1.0, batch_size=64, epochs=10, score_noise=5.0)
    objective = DPSGDObjective("digits", "digits-mlp", mechanism)
    privacy = PrivacyAccounting(RepeatAndSelect(geometric(0.1), C=2.0, c=0.75), mechanism.rdp(), 1e-5)
    result = Tuner(objective, space, privacy, mechanism=mechanism).run()  # seed=None: fresh OS entropy (privacy rule 6)
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "DATASETS",
    "DPSGD",
    "MODELS",
    "BudgetExceeded",
    "DPSGDMechanism",
    "DPSGDObjective",
    "DPSGDRun",
    "PerRecordSplit",
    "Splits",
    "TrainedModel",
    "check_budget",
    "default_model",
    "evaluate_accuracy",
    "load_dataset",
    "make_model",
    "private_accuracy",
    "private_score",
    "split_arrays",
]

_WHERE = {
    "DATASETS": "data",
    "Splits": "data",
    "load_dataset": "data",
    "PerRecordSplit": "data",
    "split_arrays": "data",
    "MODELS": "models",
    "default_model": "models",
    "make_model": "models",
    "DPSGD": "recipe",
    "BudgetExceeded": "mechanism",
    "DPSGDMechanism": "mechanism",
    "DPSGDRun": "mechanism",
    "check_budget": "mechanism",
    "private_accuracy": "mechanism",
    "private_score": "mechanism",
    "DPSGDObjective": "objective",
    "TrainedModel": "objective",
    "evaluate_accuracy": "objective",
}


def __getattr__(name: str) -> Any:
    if name == "make_private":
        raise AttributeError("dphypo.train.make_private was removed: use run.make_private(...) on the run your "
                             "objective receives (dphypo.train.DPSGDRun)")
    if name == "DPSGDPlan":
        raise AttributeError("dphypo.train.DPSGDPlan was renamed dphypo.train.DPSGDMechanism")
    if name not in _WHERE:
        raise AttributeError(f"module 'dphypo.train' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"dphypo.train.{_WHERE[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

"""DP-SGD training for private hyperparameter searches: datasets, models, the per-run plan and the objective.

Importing :mod:`dphypo.train` is light: names are loaded on first use, and only ``models`` and ``objective`` import
torch (``data`` imports it lazily; ``plan`` never does, ``opacus`` only inside :func:`make_private`).

Typical use::

    from dphypo.train import DPSGDObjective, DPSGDPlan, load_dataset

    splits = load_dataset("digits")
    plan = DPSGDPlan.from_splits(splits, sigma=1.0, batch_size=64, epochs=10, score_noise=5.0)
    objective = DPSGDObjective("digits", "digits-mlp", plan)
    privacy = PrivacyPlan(SearchSpec(geometric(0.1), C=2.0, c=0.75), plan.rdp(), 1e-5)
    result = Tuner(objective, space, privacy, plan=plan).run()  # seed=None: fresh OS entropy (privacy rule 6)
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "DATASETS",
    "DPSGD",
    "MODELS",
    "BudgetExceeded",
    "DPSGDObjective",
    "DPSGDPlan",
    "Splits",
    "TrainedModel",
    "check_budget",
    "default_model",
    "evaluate_accuracy",
    "load_dataset",
    "make_model",
    "make_private",
    "private_accuracy",
    "private_score",
]

_WHERE = {
    "DATASETS": "data",
    "Splits": "data",
    "load_dataset": "data",
    "MODELS": "models",
    "default_model": "models",
    "make_model": "models",
    "DPSGD": "recipe",
    "BudgetExceeded": "plan",
    "DPSGDPlan": "plan",
    "check_budget": "plan",
    "make_private": "opacus",
    "private_accuracy": "plan",
    "private_score": "plan",
    "DPSGDObjective": "objective",
    "TrainedModel": "objective",
    "evaluate_accuracy": "objective",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'dphypo.train' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"dphypo.train.{_WHERE[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

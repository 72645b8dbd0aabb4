"""Sampling strategies: rules that turn the observations so far into a density over the grid.

Every density a strategy returns is projected onto S_{C,c} (the strategy's own ``C`` and ``c``) by the search loop
before anything is drawn from it (privacy rule 3). :class:`Uniform` is the non-adaptive search (C = c = 1);
:class:`GPUCB` is DP-HyPO's GP-UCB softmax and :class:`GPTopSet` the GP top-set rule. Modules:
:mod:`~dphypo.strategies.base` (protocols, the batch capability, events, score orientation, release order),
:mod:`~dphypo.strategies.uniform` and the GP stack :mod:`~dphypo.strategies.gp` (imports torch when a GP session
opens).
"""

from __future__ import annotations

from dphypo.strategies.base import (
    SCALES,
    BatchSession,
    BatchStrategy,
    Direction,
    MemberSession,
    Scale,
    Strategy,
    StrategyEvent,
    StrategySession,
    best_runs,
    density_bounds,
    open_batch,
    orient,
    release_key,
)
from dphypo.strategies.gp import GPUCB, GPSession, GPTopSet, near_best_probability, tilted_softmax, ucb_scores
from dphypo.strategies.uniform import Uniform, UniformSession

__all__ = [
    "GPUCB",
    "SCALES",
    "BatchSession",
    "BatchStrategy",
    "Direction",
    "GPSession",
    "GPTopSet",
    "MemberSession",
    "Scale",
    "Strategy",
    "StrategyEvent",
    "StrategySession",
    "Uniform",
    "UniformSession",
    "best_runs",
    "density_bounds",
    "near_best_probability",
    "open_batch",
    "orient",
    "release_key",
    "tilted_softmax",
    "ucb_scores",
]


def __getattr__(name: str) -> object:
    """Names of the 0.1 layout fail with one line naming their replacement."""
    renamed = {"GPUCBSession": "dphypo.strategies.GPSession", "oriented_scores": "dphypo.strategies.orient"}
    if name in renamed:
        raise AttributeError(f"dphypo.strategies.{name} was renamed {renamed[name]}")
    raise AttributeError(f"module 'dphypo.strategies' has no attribute {name!r}")

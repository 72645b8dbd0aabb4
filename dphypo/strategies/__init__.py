"""Sampling strategies: rules that turn the observations so far into a density over the grid.

Every density a strategy returns is projected onto S_{C,c} (the strategy's own ``C`` and ``c``) by the tuner
before anything is drawn from it (privacy rule 3). :class:`Uniform` is the non-adaptive search (C = c = 1);
:class:`GPUCB` is DP-HyPO's GP-UCB softmax. Modules: :mod:`~dphypo.strategies.base` (protocols, events, score
orientation, release order), :mod:`~dphypo.strategies.uniform`, :mod:`~dphypo.strategies.gpucb` and
:mod:`~dphypo.strategies.surrogate` (the GP fit; imports torch, loaded on the first GP session).
"""

from __future__ import annotations

from dphypo.strategies.base import (
    SCALES,
    Direction,
    Scale,
    Strategy,
    StrategyEvent,
    StrategySession,
    best_runs,
    density_bounds,
    orient,
    oriented_scores,
    release_key,
)
from dphypo.strategies.gpucb import GPUCB, GPUCBSession, tilted_softmax, ucb_scores
from dphypo.strategies.top_set import GPTopSet, near_best_probability
from dphypo.strategies.uniform import Uniform, UniformSession

__all__ = [
    "GPUCB",
    "SCALES",
    "Direction",
    "GPTopSet",
    "GPUCBSession",
    "Scale",
    "Strategy",
    "StrategyEvent",
    "StrategySession",
    "Uniform",
    "UniformSession",
    "best_runs",
    "density_bounds",
    "near_best_probability",
    "orient",
    "oriented_scores",
    "release_key",
    "tilted_softmax",
    "ucb_scores",
]

"""Search spaces: axes (:mod:`dphypo.space.axes`), their grid and the prior over it (:mod:`dphypo.space.search_space`).

DP-HyPO (Wang et al. 2023, arXiv:2306.05734v2) works on a discretised hyperparameter space with the counting
measure; a :class:`SearchSpace` is the Cartesian product of its axes in C order with a strictly positive prior.
Axes that change a run's privacy (batch size, epochs, σ) are declared with ``privacy_roles``
(:mod:`dphypo.space.privacy_axes`).
Pure numpy; no torch.
"""

from __future__ import annotations

from dphypo.space.axes import Axis, Choice, Float, Grid, Int, IntGrid, LogFloat, clean_values
from dphypo.space.parsing import MAX_AXIS_VALUES, parse_grid
from dphypo.space.privacy_axes import PRIVACY_ROLES, candidate_runs
from dphypo.space.search_space import MAX_GRID_SIZE, PriorSpec, SearchSpace

__all__ = [
    "MAX_AXIS_VALUES",
    "MAX_GRID_SIZE",
    "PRIVACY_ROLES",
    "Axis",
    "Choice",
    "Float",
    "Grid",
    "Int",
    "IntGrid",
    "LogFloat",
    "PriorSpec",
    "SearchSpace",
    "candidate_runs",
    "clean_values",
    "parse_grid",
]

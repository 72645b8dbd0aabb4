"""Search spaces: axes (:mod:`dphypo.space.axes`), their grid and the prior over it (:mod:`dphypo.space.search_space`).

DP-HyPO (Wang et al. 2023, arXiv:2306.05734v2) works on a discretised hyperparameter space with the counting
measure; a :class:`SearchSpace` is the Cartesian product of its axes in C order with a strictly positive prior.
Pure numpy; no torch.
"""

from __future__ import annotations

from dphypo.space.axes import Axis, Choice, Float, Grid, Int, LogFloat, clean_values
from dphypo.space.parsing import MAX_AXIS_VALUES, parse_grid
from dphypo.space.search_space import MAX_GRID_SIZE, PriorSpec, SearchSpace

__all__ = [
    "MAX_AXIS_VALUES",
    "MAX_GRID_SIZE",
    "Axis",
    "Choice",
    "Float",
    "Grid",
    "Int",
    "LogFloat",
    "PriorSpec",
    "SearchSpace",
    "clean_values",
    "parse_grid",
]

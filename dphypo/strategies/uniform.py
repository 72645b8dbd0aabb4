"""Non-adaptive random search (DP-HyPO Algorithm 2; Papernot & Steinke 2022): every density is the prior π0."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from dphypo.strategies.base import (
    Direction,
    StrategyEvent,
    check_direction,
    check_seed,
    checked_prior,
    split_observations,
)

if TYPE_CHECKING:
    from dphypo.space import SearchSpace

__all__ = ["Uniform", "UniformSession"]


@dataclass(frozen=True)
class Uniform:
    """Non-adaptive random search: always the prior π0.

    Its densities never move, so its bounds are C = c = 1 (S_{1,1}(π0) = {π0}; log(C/c) = 0 in Theorems 1
    and 2). They are class constants, not arguments.
    """

    C: ClassVar[float] = 1.0
    c: ClassVar[float] = 1.0

    @property
    def name(self) -> str:
        """Strategy identifier."""
        return "uniform"

    def start(self, space: SearchSpace, direction: Direction, seed: int) -> UniformSession:
        """Open a session that always returns ``space.prior``.

        Args:
            space: Search space; its ``prior`` has shape ``(n,)``.
            direction: ``"maximize"`` or ``"minimize"`` (validated, otherwise unused).
            seed: Non-negative integer (validated, otherwise unused).

        Returns:
            A :class:`UniformSession`.
        """
        check_direction(direction)
        check_seed(seed)
        return UniformSession(checked_prior(space))


class UniformSession:
    """Session of :class:`Uniform`: the density is the prior whatever was observed."""

    def __init__(self, prior: np.ndarray) -> None:
        """Store the prior.

        Args:
            prior: Prior over the grid, shape ``(n,)``, summing to 1.
        """
        self._prior = prior

    @property
    def events(self) -> list[StrategyEvent]:
        """Always empty: uniform search has nothing to fall back from."""
        return []

    def density(self, observations: Sequence[tuple[int, float]]) -> np.ndarray:
        """Return the prior, shape ``(n,)``.

        Args:
            observations: ``(grid index, score)`` pairs (validated, otherwise ignored).

        Returns:
            A copy of the prior, shape ``(n,)``.
        """
        split_observations(observations, self._prior.size)
        return self._prior.copy()

"""Non-adaptive random search (DP-HyPO Algorithm 2; Papernot & Steinke 2022): every density is the prior π0.

It has the batch capability (:class:`~dphypo.strategies.base.BatchStrategy`): one session serves B searches.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np
from numpy.typing import ArrayLike

from dphypo.strategies.base import (
    Direction,
    MemberSession,
    StrategyEvent,
    check_direction,
    check_observations,
    check_seed,
    checked_prior,
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

    def start(self, space: SearchSpace, direction: Direction, seed: int) -> MemberSession:
        """Open a session for one search (member 0 of a batch of one); its density is always ``space.prior``.

        Args:
            space: Search space; its ``prior`` has shape ``(n,)``.
            direction: ``"maximize"`` or ``"minimize"`` (validated, otherwise unused).
            seed: Non-negative integer (validated, otherwise unused).

        Returns:
            A :class:`~dphypo.strategies.base.MemberSession`.
        """
        return MemberSession(self.start_batch(space, direction, [seed]))

    def start_batch(self, space: SearchSpace, direction: Direction, seeds: Sequence[int]) -> UniformSession:
        """Open one session for ``len(seeds)`` searches (:class:`~dphypo.strategies.base.BatchStrategy`).

        Args:
            space: Search space; its ``prior`` has shape ``(n,)``.
            direction: ``"maximize"`` or ``"minimize"`` (validated, otherwise unused).
            seeds: Non-negative integers (validated, otherwise unused).

        Returns:
            A :class:`UniformSession`.
        """
        check_direction(direction)
        for seed in seeds:
            check_seed(seed)
        return UniformSession(checked_prior(space), len(seeds))


class UniformSession:
    """Session of :class:`Uniform` for B searches: every density is the prior whatever was observed.

    Args:
        prior: Prior over the grid, shape ``(n,)``, summing to 1.
        members: Number of searches B.
    """

    def __init__(self, prior: np.ndarray, members: int = 1) -> None:
        self._prior = prior
        self._members = members
        self._given = np.zeros(members, dtype=bool)  # whether a member has had its (only) density

    @property
    def members(self) -> int:
        """Number of searches B."""
        return self._members

    def observe(self, members: ArrayLike, indices: ArrayLike, scores: ArrayLike) -> None:
        """Validate the runs; uniform search ignores them."""
        check_observations(members, indices, scores, self._prior.size, self._members)

    def densities(self, members: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        """The prior for every listed member, shape ``(m, n)``; changed only at a member's first density."""
        members = np.asarray(members, dtype=np.int64)
        changed = ~self._given[members]
        self._given[members] = True
        return np.tile(self._prior, (members.size, 1)), changed

    def member_events(self, member: int) -> list[StrategyEvent]:
        """Always empty: uniform search has nothing to fall back from."""
        return []

"""The Framework-1 loop of DP-HyPO for B searches at once: project each density, draw, observe (the tuner is B = 1).

:class:`SearchLoop` is the one implementation of a search's sampling: every density a strategy returns is projected
onto S_{C,c}(π0) and verified before anything is drawn from it (privacy rule 3, :func:`projected_density`); each
search draws from its own random stream with one uniform per candidate (inverse CDF, :func:`dphypo.density.draw`)
and observes its own runs. The tuner drives it with one search (:mod:`dphypo.search.run`: runs on an executor,
journaled), the batched simulator with hundreds (:mod:`dphypo.simulation.batched`: scores from a landscape), so
"the tuner and the simulator make the same runs" holds by construction, not by a test of two loops.

A strategy with the batch capability (:class:`~dphypo.strategies.base.BatchStrategy`) advances all searches in one
session; any other strategy runs one session per search behind :func:`~dphypo.strategies.base.open_batch`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

from dphypo.density import draw, in_bounded_set, project
from dphypo.search.records import Trial
from dphypo.space import SearchSpace
from dphypo.strategies.base import Direction, Strategy, StrategyEvent, best_runs, open_batch, release_key

__all__ = ["SearchLoop", "best_trial", "better", "projected_density"]


class SearchLoop:
    """DP-HyPO Framework 1 for B searches: each draw comes from its search's projected density (privacy rule 3).

    Args:
        space: The grid and prior π0.
        strategy: How densities adapt (its batch session, or one session per search).
        direction: ``"maximize"`` or ``"minimize"``.
        bounds: ``(C, c)``, the density-ratio bounds every sampling density is projected onto.
        strategy_seeds: One strategy seed per search, shape ``(B,)``.
        sampling: One random generator per search (its candidate draws), ``B`` of them.
        record_densities: Keep every projected density a search drew from (:attr:`densities`).
    """

    def __init__(
        self,
        space: SearchSpace,
        strategy: Strategy,
        direction: Direction,
        bounds: tuple[float, float],
        *,
        strategy_seeds: Sequence[int],
        sampling: Sequence[np.random.Generator],
        record_densities: bool = False,
    ) -> None:
        if len(strategy_seeds) != len(sampling):
            raise ValueError(f"strategy_seeds and sampling must have one entry per search, got {len(strategy_seeds)} "
                             f"and {len(sampling)}")
        self.space = space
        self.bounds = (float(bounds[0]), float(bounds[1]))
        self.session = open_batch(strategy, space, direction, [int(seed) for seed in strategy_seeds])
        self._sampling = list(sampling)
        self._projected = np.empty((len(self._sampling), space.size))
        self._record = record_densities
        #: Per search, the projected densities it drew from, in order (only with ``record_densities``).
        self.densities: list[list[np.ndarray]] = [[] for _ in self._sampling]
        # With C = c = 1 every projected density is the prior, whatever the strategy says: draws can be batched.
        self.static = self.bounds == (1.0, 1.0) or bool(getattr(self.session, "static", False))

    @property
    def searches(self) -> int:
        """Number of searches B."""
        return len(self._sampling)

    def draw(self, members: ArrayLike, counts: int | ArrayLike = 1) -> list[np.ndarray]:
        """Draw each listed search's next candidates from its current projected density.

        A search that draws k candidates before observing any of them draws them from one density (DP-HyPO §3:
        the update rule may keep π unchanged, so a batch is still Framework 1). Its k uniforms come from its own
        stream in order, so k draws now equal k single draws with no observation in between.

        Args:
            members: Which searches, shape ``(m,)``, distinct.
            counts: Candidates per listed search (an int for all, or shape ``(m,)``), ≥ 0.

        Returns:
            One int64 array of grid indices per listed search, of its count's length.
        """
        members = np.asarray(members, dtype=np.int64).reshape(-1)
        counts = np.broadcast_to(np.asarray(counts, dtype=np.int64), members.shape)
        densities, changed = self.session.densities(members)
        if np.any(changed):  # unchanged densities keep their projection (projecting is O(n log n) per search)
            fresh = densities[changed]
            if bool(np.all(fresh == fresh[0])):  # e.g. every search at the prior: one projection serves them all
                fresh = np.broadcast_to(projected_density(fresh[0], self.space, *self.bounds), fresh.shape)
            else:
                fresh = projected_density(fresh, self.space, *self.bounds)
            self._projected[members[changed]] = fresh
        draws = []
        for b, k in zip(members, counts, strict=True):
            projected = self._projected[b]
            if self._record:
                self.densities[b].append(projected.copy())
            draws.append(np.asarray(draw(projected, self._sampling[b].random(int(k))), dtype=np.int64))
        return draws

    def observe(self, members: ArrayLike, indices: ArrayLike, scores: ArrayLike) -> None:
        """Tell each listed search the outcome of one of its runs (grid index, score; failed: non-finite)."""
        self.session.observe(members, indices, scores)

    def events(self, member: int = 0) -> list[StrategyEvent]:
        """The strategy's events of one search (curator-only: fallbacks, fit warnings, failed runs)."""
        return self.session.member_events(member)


def projected_density(session_density: np.ndarray, space: SearchSpace, C: float, c: float) -> np.ndarray:
    """Project strategy densities onto S_{C,c}(π0) and verify the result (privacy rule 3).

    Every density the sampler draws from passes through here; a strategy can return anything, and an
    out-of-set result (which would void Theorem 1) raises instead of being sampled. Batch-native: densities
    of shape ``(..., n)`` are projected and checked one by one (the batched simulation engine's members).
    """
    prior = space.prior
    density = project(np.asarray(session_density, dtype=np.float64), prior, C, c)
    if not np.all(in_bounded_set(density, prior, C, c)):
        raise RuntimeError("projection produced a density outside S_{C,c}; refusing to sample from it")
    return density


def better(a: tuple[float, int], b: tuple[float, int], direction: Direction) -> bool:
    """The fixed, data-independent total order on run outputs ``(score, grid index)``.

    Higher (``maximize``) or lower (``minimize``) score wins; a failed run (non-finite score) loses to every
    finished one; ties go to the smaller grid index, so the order never depends on chance or on the data beyond
    the outputs themselves (Papernot & Steinke 2022, pitfall 11 of the notes). The score part is
    :func:`dphypo.strategies.base.release_key`, as in the batch-native :func:`dphypo.strategies.base.best_runs`.
    """
    key_a, key_b = release_key([a[0], b[0]], direction).tolist()
    return (key_a, -a[1]) > (key_b, -b[1])


def best_trial(trials: Sequence[Trial], direction: Direction) -> int | None:
    """Index of the run to release under :func:`better` (``None`` for no runs; :func:`best_runs` of one search)."""
    if not trials:
        return None
    return int(best_runs([t.grid_index for t in trials], [t.score for t in trials], direction))

"""What every sampling strategy shares: the protocols, events, score orientation and the release order.

A :class:`Strategy` is an immutable configuration carrying its density bounds ``C`` and ``c``;
:meth:`Strategy.start` opens a :class:`StrategySession` for one search. After every observed run the tuner calls
:meth:`StrategySession.density` with *all* observations so far and gets an **unprojected** density over the
grid. The tuner projects every density onto S_{C,c}(π0) (DP-HyPO eq. 3.1) before drawing from it, so a strategy
never samples and may return any density: the privacy guarantee of DP-HyPO Framework 1 holds for *any* update
rule, which is also why a strategy may fall back (e.g. to its previous density) whenever its model fails,
without privacy cost.

Observations are ``(grid index, score)`` pairs in the order the runs were made. A run that failed (e.g. a
diverged DP-SGD run) is passed with a non-finite score (``nan``; ``±inf`` are treated the same). Strategies
treat it as the *worst* run: its score is imputed as the worst finite score observed so far (minimum when
maximising, maximum when minimising; :func:`orient`); with no finite score yet the strategy keeps its previous
density (or the prior). Each newly seen failed run is recorded as a ``"failed-run"`` event.

Score arrays here are batch-native, shape ``(..., k)`` (k runs of each of a batch of searches), as in BoTorch:
a single search is the batch of one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

import numpy as np
from numpy.typing import ArrayLike

if TYPE_CHECKING:
    from dphypo.space import SearchSpace

__all__ = [
    "SCALES",
    "Direction",
    "Scale",
    "Strategy",
    "StrategyEvent",
    "StrategySession",
    "best_runs",
    "density_bounds",
    "orient",
    "oriented_scores",
    "release_key",
]

Direction = Literal["maximize", "minimize"]
Scale = Literal["raw", "standardized", "range"]
SCALES: tuple[str, ...] = ("raw", "standardized", "range")


@dataclass(frozen=True)
class StrategyEvent:
    """Something a strategy did that the curator may want to know (never released).

    Attributes:
        step: Number of observations the density was computed from (0 for the first density).
        kind: ``"fallback"`` (model unavailable, previous density or prior reused), ``"fit-warning"``
            (the fit succeeded but warned) or ``"failed-run"`` (a non-finite score was imputed).
        message: Human-readable detail.
    """

    step: int
    kind: str
    message: str


@runtime_checkable
class StrategySession(Protocol):
    """One search's adaptive state."""

    @property
    def events(self) -> list[StrategyEvent]:
        """Recorded fallbacks and warnings so far, in order (a copy)."""
        ...

    def density(self, observations: Sequence[tuple[int, float]]) -> np.ndarray:
        """Unprojected density over the grid given all observations so far.

        Args:
            observations: ``(grid index, score)`` pairs in the order the runs were made; failed runs have a
                non-finite score.

        Returns:
            Array of shape ``(n,)``, non-negative, summing to 1.
        """
        ...


@runtime_checkable
class Strategy(Protocol):
    """Immutable strategy configuration, carrying the density-ratio bounds its densities are projected onto."""

    @property
    def C(self) -> float:
        """Upper density-ratio bound, ≥ 1 (DP-HyPO eq. 3.1; the log(C/c) of Theorems 1 and 2 pays for it)."""
        ...

    @property
    def c(self) -> float:
        """Lower density-ratio bound, 0 < c ≤ 1."""
        ...

    @property
    def name(self) -> str:
        """Short identifier, e.g. ``"uniform"``."""
        ...

    def start(self, space: SearchSpace, direction: Direction, seed: int) -> StrategySession:
        """Open a session for one search.

        Args:
            space: The discretised search space (grid, unit coordinates, prior).
            direction: ``"maximize"`` or ``"minimize"`` the score.
            seed: Non-negative integer; a seeded session is deterministic.

        Returns:
            A fresh :class:`StrategySession`.
        """
        ...


# ------------------------------------------------------------------------------------------- orientation
def orient(scores: ArrayLike, direction: Direction) -> np.ndarray:
    """"Higher is better" scores with failed runs imputed as the worst finite score of their search.

    Scores are negated when minimising. Non-finite scores (failed runs) are replaced by the worst finite
    oriented score of the same search (row); a search with no finite score gets ``nan`` throughout.

    Args:
        scores: Shape ``(..., k)``: the k runs of each search of a batch.
        direction: ``"maximize"`` or ``"minimize"``.

    Returns:
        float64 utilities of shape ``(..., k)``.
    """
    check_direction(direction)
    scores = np.asarray(scores, dtype=np.float64)
    utilities = -scores if direction == "minimize" else scores.copy()
    bad = ~np.isfinite(utilities)
    if np.any(bad):
        worst = np.min(np.where(bad, np.inf, utilities), axis=-1, keepdims=True)
        utilities = np.where(bad, worst, utilities)
        utilities[np.all(bad, axis=-1)] = np.nan
    return utilities


def oriented_scores(
    observations: Sequence[tuple[int, float]], size: int, direction: Direction
) -> tuple[np.ndarray, np.ndarray, int]:
    """Grid indices and :func:`orient`-ed scores of one search's observations.

    Args:
        observations: ``(grid index, score)`` pairs.
        size: Number of grid points n.
        direction: ``"maximize"`` or ``"minimize"``.

    Returns:
        ``(indices, utilities, n_failed)``: int64 indices of shape ``(k,)``, float64 utilities of shape
        ``(k,)`` and the number of non-finite scores.
    """
    check_direction(direction)
    indices, scores = split_observations(observations, size)
    return indices, orient(scores, direction), int(np.count_nonzero(~np.isfinite(scores)))


# ----------------------------------------------------------------------------------------------- release
def release_key(scores: ArrayLike, direction: Direction) -> np.ndarray:
    """The score part of the release order: the oriented score, ``-inf`` for a failed (non-finite) run.

    Together with "ties go to the smaller grid index" this is the fixed, data-independent total order on run
    outputs (Papernot & Steinke 2022; :func:`dphypo.search.loop.better`, :func:`best_runs`).

    Args:
        scores: Any shape.
        direction: ``"maximize"`` or ``"minimize"``.

    Returns:
        float64 array of ``scores``' shape.
    """
    check_direction(direction)
    scores = np.asarray(scores, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        oriented = scores if direction == "maximize" else -scores
    return np.where(np.isfinite(scores), oriented, -np.inf)


def best_runs(
    indices: ArrayLike, scores: ArrayLike, direction: Direction, lengths: ArrayLike | None = None
) -> np.ndarray:
    """Position of the run each search releases: best :func:`release_key`, ties to the smaller grid index.

    Among runs equal in both, the first is released (the order is strict, so a later equal run never
    replaces the incumbent).

    Args:
        indices: Grid indices of the runs, shape ``(..., T)``, T ≥ 1.
        scores: Their scores, shape ``(..., T)``.
        direction: ``"maximize"`` or ``"minimize"``.
        lengths: Shape ``(...)``: each search's number of runs T_b ≥ 1 (only its first T_b count); default T.

    Returns:
        int64 positions in ``[0, T)``, shape ``(...)``.
    """
    indices = np.asarray(indices, dtype=np.int64)
    key = release_key(scores, direction)
    if key.shape != indices.shape or key.ndim == 0 or key.shape[-1] == 0:
        raise ValueError(f"indices and scores must have one shape (..., T) with T >= 1, got {indices.shape}")
    ran = np.ones(key.shape, dtype=bool)
    if lengths is not None:
        ran = np.arange(key.shape[-1]) < np.asarray(lengths)[..., None]
        key = np.where(ran, key, -np.inf)
    tied = ran & (key == key.max(axis=-1, keepdims=True))
    smallest = np.where(tied, indices, np.iinfo(np.int64).max).min(axis=-1, keepdims=True)
    return np.argmax(tied & (indices == smallest), axis=-1)


# -------------------------------------------------------------------------------------------- shared checks
def split_observations(observations: Sequence[tuple[int, float]], size: int) -> tuple[np.ndarray, np.ndarray]:
    """Validate ``(grid index, score)`` observations and split them into arrays.

    Args:
        observations: ``(grid index, score)`` pairs.
        size: Number of grid points n.

    Returns:
        int64 indices and float64 scores, each of shape ``(k,)``.
    """
    indices = np.empty(len(observations), dtype=np.int64)
    scores = np.empty(len(observations), dtype=np.float64)
    for position, pair in enumerate(observations):
        if len(pair) != 2:
            raise ValueError(f"observations must be (grid index, score) pairs, got {pair!r}")
        index, score = pair
        if isinstance(index, bool) or not isinstance(index, int | np.integer) or not 0 <= index < size:
            raise ValueError(f"observation grid index must be an integer in [0, {size}), got {index!r}")
        indices[position] = index
        scores[position] = float(score)
    return indices, scores


def checked_prior(space: SearchSpace) -> np.ndarray:
    """Return ``space.prior`` as float64 after checking it is a distribution, shape ``(n,)``."""
    prior = np.asarray(space.prior, dtype=np.float64)
    if prior.ndim != 1 or prior.size == 0 or np.any(prior < 0) or not np.isclose(prior.sum(), 1.0):
        raise ValueError(f"space.prior must be a non-negative vector summing to 1, got shape {prior.shape!r}")
    return prior


def check_direction(direction: str) -> None:
    """Raise unless ``direction`` is ``"maximize"`` or ``"minimize"``."""
    if direction not in ("maximize", "minimize"):
        raise ValueError(f"direction must be 'maximize' or 'minimize', got {direction!r}")


def check_seed(seed: int) -> None:
    """Raise unless ``seed`` is a non-negative integer."""
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")


def step_seed(seed: int, step: int) -> int:
    """Independent, reproducible seed for the fit at ``step`` of the session seeded with ``seed``."""
    return int(np.random.SeedSequence([int(seed), step]).generate_state(1, dtype=np.uint32)[0])


def density_bounds(strategy: Strategy, C: float | None = None, c: float | None = None) -> tuple[float, float]:
    """The (C, c) a search with ``strategy`` projects onto: the strategy's own, unless both are given.

    Research code (simulations, figures) may sweep the bounds of one strategy object; a private search never
    overrides them (the tuner refuses a strategy whose bounds differ from the accounted ones).

    Raises:
        ValueError: Only one of ``C``, ``c`` given.
    """
    if (C is None) != (c is None):
        raise ValueError(f"give both C and c or neither (the strategy's own), got C={C!r}, c={c!r}")
    if C is None or c is None:
        return float(strategy.C), float(strategy.c)
    return float(C), float(c)

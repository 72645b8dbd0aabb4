"""What every sampling strategy shares: the protocols, events, score orientation and the release order.

A :class:`Strategy` is an immutable configuration carrying its density bounds ``C`` and ``c``. It opens a session
per search that **observes incrementally**: after each run the loop calls ``observe`` with that run's grid index and
score, and asks for the next **unprojected** density over the grid. The loop projects every density onto
S_{C,c}(π0) (DP-HyPO eq. 3.1) before drawing from it, so a strategy never samples and may return any density: the
privacy guarantee of DP-HyPO Framework 1 holds for *any* update rule, which is also why a strategy may fall back
(e.g. to its previous density) whenever its model fails, without privacy cost.

Two shapes of session, one semantics:

* :class:`StrategySession` (``Strategy.start``): one search; ``observe(index, score)``, ``density()``. Enough to
  write a strategy.
* :class:`BatchSession` (``BatchStrategy.start_batch``, a capability): B searches advanced together, batch-native
  over the members (BoTorch's habit): ``observe(members, indices, scores)``, ``densities(members)``. The search
  loop (:class:`dphypo.search.loop.SearchLoop`) always drives a batch session; :func:`open_batch` gives it the
  strategy's own batch session, or B single sessions behind an adapter when the strategy has no batch capability,
  so every strategy runs in the tuner (B = 1) and in the batched simulator alike. A single search on a batch-capable
  strategy is member 0 of a batch of one (:class:`MemberSession`).

A run that failed (e.g. a diverged DP-SGD run) is observed with a non-finite score (``nan``; ``±inf`` are treated
the same). Strategies treat it as the *worst* run: its score is imputed as the worst finite score observed so far
(minimum when maximising, maximum when minimising; :func:`orient`); with no finite score yet the strategy keeps
its previous density (or the prior). Each failed run is recorded as a ``"failed-run"`` event.

Score arrays here are batch-native, shape ``(..., k)`` (k runs of each of a batch of searches), as in BoTorch:
a single search is the batch of one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

import numpy as np
from numpy.typing import ArrayLike

from dphypo.privacy.validation import check_non_negative_int

if TYPE_CHECKING:
    from dphypo.space import SearchSpace

__all__ = [
    "SCALES",
    "BatchSession",
    "BatchStrategy",
    "Direction",
    "MemberSession",
    "Scale",
    "Strategy",
    "StrategyEvent",
    "StrategySession",
    "best_runs",
    "check_strategy",
    "density_bounds",
    "open_batch",
    "orient",
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
    """One search's adaptive state: observe each run, then give the next (unprojected) density."""

    @property
    def events(self) -> list[StrategyEvent]:
        """Recorded fallbacks and warnings so far, in order (a copy)."""
        ...

    def observe(self, index: int, score: float) -> None:
        """Record one finished run.

        Args:
            index: Its grid index.
            score: Its score; non-finite for a failed run.
        """
        ...

    def density(self) -> np.ndarray:
        """The density for the next draw given every run observed so far.

        Returns:
            Shape ``(n,)``, non-negative, summing to 1 (projected by the loop before any draw).
        """
        ...


@runtime_checkable
class BatchSession(Protocol):
    """B searches' adaptive states, advanced together (batch-native over members)."""

    @property
    def members(self) -> int:
        """Number of searches B."""
        ...

    def observe(self, members: ArrayLike, indices: ArrayLike, scores: ArrayLike) -> None:
        """Record one finished run for each listed member.

        Args:
            members: Distinct member numbers in ``[0, B)``, shape ``(m,)``.
            indices: Their runs' grid indices, shape ``(m,)``.
            scores: Their runs' scores, shape ``(m,)``; non-finite for a failed run.
        """
        ...

    def densities(self, members: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        """The listed members' densities for their next draws.

        Args:
            members: Distinct member numbers, shape ``(m,)``.

        Returns:
            ``(densities, changed)``: unprojected densities, shape ``(m, n)``, each non-negative and summing to 1;
            and which of them differ from the member's previous density, shape ``(m,)`` (the loop re-projects
            only those; a member's first density counts as changed).
        """
        ...

    def member_events(self, member: int) -> list[StrategyEvent]:
        """Events of one member, in order (a copy)."""
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


@runtime_checkable
class BatchStrategy(Strategy, Protocol):
    """A strategy that can advance B searches as one batch (a capability: :func:`open_batch` checks for it)."""

    def start_batch(self, space: SearchSpace, direction: Direction, seeds: Sequence[int]) -> BatchSession:
        """Open one session for ``len(seeds)`` independent searches (member b seeded with ``seeds[b]``).

        Member b must behave exactly as ``start(space, direction, seeds[b])`` would, whatever the other members do.
        """
        ...


def open_batch(strategy: Strategy, space: SearchSpace, direction: Direction, seeds: Sequence[int]) -> BatchSession:
    """A batch session for ``strategy``: its own (:class:`BatchStrategy`), else one single session per member.

    Raises:
        TypeError: A session in the pre-0.2 form (``density(observations)`` without ``observe``), naming the new one.
    """
    start_batch = getattr(strategy, "start_batch", None)
    if callable(start_batch):
        session: BatchSession = start_batch(space, direction, seeds)
        return session
    return _SingleSessions([strategy.start(space, direction, int(seed)) for seed in seeds])


class _SingleSessions:
    """B single :class:`StrategySession` objects behind the :class:`BatchSession` interface (no batching)."""

    def __init__(self, sessions: Sequence[StrategySession]) -> None:
        for session in sessions:
            if not callable(getattr(session, "observe", None)):
                raise TypeError(
                    f"{type(session).__name__} is a strategy session without observe(index, score): sessions "
                    "observe each run incrementally and return density() (the form density(observations) was "
                    "removed); see dphypo.strategies.base.StrategySession"
                )
        self._sessions = list(sessions)
        self._fresh = np.ones(len(self._sessions), dtype=bool)

    @property
    def members(self) -> int:
        """Number of searches B."""
        return len(self._sessions)

    def observe(self, members: ArrayLike, indices: ArrayLike, scores: ArrayLike) -> None:
        """Record one run per listed member (one single session each)."""
        for b, index, score in zip(np.asarray(members), np.asarray(indices), np.asarray(scores), strict=True):
            self._sessions[int(b)].observe(int(index), float(score))
            self._fresh[int(b)] = True

    def densities(self, members: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        """Each listed member's density; a member counts as changed after any observation (no cheaper test)."""
        members = np.asarray(members, dtype=np.int64)
        out = np.stack([np.asarray(self._sessions[int(b)].density(), dtype=np.float64) for b in members])
        changed = self._fresh[members].copy()
        self._fresh[members] = False
        return out, changed

    def member_events(self, member: int) -> list[StrategyEvent]:
        """Events of one member's session."""
        return list(self._sessions[member].events)


class MemberSession:
    """One member of a :class:`BatchSession` as a :class:`StrategySession` (a single search is a batch of one).

    Args:
        batch: The batch session.
        member: Which member (default 0).
    """

    def __init__(self, batch: BatchSession, member: int = 0) -> None:
        self._batch = batch
        self._member = np.array([member], dtype=np.int64)

    @property
    def events(self) -> list[StrategyEvent]:
        """The member's events, in order (a copy)."""
        return self._batch.member_events(int(self._member[0]))

    def observe(self, index: int, score: float) -> None:
        """Record one finished run of this search."""
        # No dtype on the index: check_observations must see a float index to refuse it.
        self._batch.observe(self._member, np.array([index]), np.array([score], dtype=np.float64))

    def density(self) -> np.ndarray:
        """The next unprojected density of this search, shape ``(n,)``."""
        return self._batch.densities(self._member)[0][0]


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
def check_observations(
    members: ArrayLike, indices: ArrayLike, scores: ArrayLike, size: int, batch: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validate one observed run per member (the arguments of :meth:`BatchSession.observe`).

    Args:
        members: Distinct member numbers in ``[0, batch)``, shape ``(m,)``.
        indices: Grid indices in ``[0, size)``, shape ``(m,)``.
        scores: Scores (non-finite: failed run), shape ``(m,)``.
        size: Number of grid points n.
        batch: Number of members B.

    Returns:
        int64 members, int64 indices and float64 scores, each of shape ``(m,)``.
    """
    members = np.asarray(members, dtype=np.int64).reshape(-1)
    indices_raw = np.asarray(indices)
    if indices_raw.size and not np.issubdtype(indices_raw.dtype, np.integer):
        raise ValueError(f"observation grid index must be an integer, got {indices!r}")
    indices = indices_raw.astype(np.int64).reshape(-1)
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    if not members.size == indices.size == scores.size:
        raise ValueError(f"members, indices and scores must have one length, got {members.size}, {indices.size}, "
                         f"{scores.size}")
    if members.size and (members.min() < 0 or members.max() >= batch or np.unique(members).size != members.size):
        raise ValueError(f"members must be distinct integers in [0, {batch}), got {members.tolist()!r}")
    if indices.size and (indices.min() < 0 or indices.max() >= size):
        raise ValueError(f"observation grid index must be an integer in [0, {size}), got {indices.tolist()!r}")
    return members, indices, scores


def checked_prior(space: SearchSpace) -> np.ndarray:
    """Return ``space.prior`` as float64 after checking it is a distribution, shape ``(n,)``."""
    prior = np.asarray(space.prior, dtype=np.float64)
    if prior.ndim != 1 or prior.size == 0 or np.any(prior < 0) or not np.isclose(prior.sum(), 1.0):
        raise ValueError(f"space.prior must be a non-negative vector summing to 1, got shape {prior.shape!r}")
    return prior


def check_strategy(strategy: object) -> None:
    """Raise unless ``strategy`` is a :class:`Strategy` (what the loop calls: ``start``).

    Raises:
        TypeError: Anything else, naming its type.
    """
    if not callable(getattr(strategy, "start", None)):
        raise TypeError(f"strategy must be a Strategy (e.g. dphypo.GPUCB(C=2, c=0.75)), got {type(strategy).__name__}")


def check_direction(direction: str) -> None:
    """Raise unless ``direction`` is ``"maximize"`` or ``"minimize"``."""
    if direction not in ("maximize", "minimize"):
        raise ValueError(f"direction must be 'maximize' or 'minimize', got {direction!r}")


def check_seed(seed: int) -> None:
    """Raise unless ``seed`` is a non-negative integer."""
    check_non_negative_int("seed", seed)


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
        own = getattr(strategy, "C", None), getattr(strategy, "c", None)
        if own[0] is None or own[1] is None:
            raise ValueError(f"{type(strategy).__name__} has no density bounds of its own: give C and c")
        return float(own[0]), float(own[1])
    return float(C), float(c)

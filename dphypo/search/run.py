"""One search, run by run: the B = 1 driver of :class:`~dphypo.search.loop.SearchLoop` with journal and executor.

The tuner (:class:`~dphypo.search.tuner.Tuner`), the sequential simulation engine and the density figure all run a
search through :class:`SearchRun`: ``ask`` draws the next candidate from the projected density (replaying, on a
resumed search, the runs the journal already finished), ``tell`` records an outcome and lets the strategy observe
it, and ``run`` does both on an executor, ``runs_per_update`` candidates per density.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dphypo.privacy import PrivacyAccounting
from dphypo.search.evaluation import Objective, run_batch
from dphypo.search.execution import Executor, SequentialExecutor
from dphypo.search.loop import SearchLoop
from dphypo.search.recording import REPLAYED, Recorder
from dphypo.search.records import Run, RunMechanism, Trial
from dphypo.space import SearchSpace
from dphypo.strategies.base import Direction, Strategy, StrategyEvent

__all__ = ["SearchRun", "SearchStreams", "SearchTrace"]


@dataclass(frozen=True)
class SearchStreams:
    """The random streams of one search, all derived from its (secret) entropy.

    Attributes:
        sampling: Source of the candidate draws.
        strategy_seed: Seed of the strategy's session.
        run_seed: ``run_seed(number)``: the per-run seed (batches, DP-SGD noise, score noise).
    """

    sampling: np.random.Generator
    strategy_seed: int
    run_seed: Callable[[int], int]


@dataclass
class SearchTrace:
    """What a search did, in run order (**NOT PRIVATE — curator only**).

    Attributes:
        trials: Every run.
        artifacts: What each run's objective returned beside its score (:data:`REPLAYED` for a replayed run).
        densities: The projected densities the runs were drawn from (if recorded).
        events: The strategy's fallbacks and warnings.
    """

    trials: list[Trial] = field(default_factory=list)
    artifacts: list[Any] = field(default_factory=list)
    densities: list[np.ndarray] = field(default_factory=list)
    events: list[StrategyEvent] = field(default_factory=list)


class SearchRun:
    """One search of ``run_count`` runs (the tuner's path), candidate by candidate or on an executor.

    Args:
        objective: ``objective(params, run) -> score`` or ``(score, artifact)`` (``None`` for ask/tell only).
        space: The grid and prior π0.
        strategy: How densities adapt.
        direction: ``"maximize"`` or ``"minimize"``.
        bounds: ``(C, c)`` every sampling density is projected onto.
        run_count: T, the number of runs.
        streams: The search's random streams.
        recorder: Where attempts are journaled and replayed from (default: an in-memory journal).
        privacy: The search's privacy configuration, handed to every :class:`Run`.
        mechanism: Per-run mechanism handed to every :class:`Run` (see :attr:`Run.mechanism`).
        record_densities: Keep every projected density.
    """

    def __init__(
        self,
        objective: Objective | None,
        space: SearchSpace,
        strategy: Strategy,
        direction: Direction,
        bounds: tuple[float, float],
        run_count: int,
        streams: SearchStreams,
        *,
        recorder: Recorder | None = None,
        privacy: PrivacyAccounting | None = None,
        mechanism: RunMechanism | None = None,
        record_densities: bool = False,
    ) -> None:
        self.objective = objective
        self.space = space
        self.direction = direction
        self.run_count = int(run_count)
        self.streams = streams
        self.recorder = recorder if recorder is not None else Recorder(direction)
        self.privacy = privacy
        self.mechanism = mechanism
        self.loop = SearchLoop(space, strategy, direction, bounds, strategy_seeds=[streams.strategy_seed],
                               sampling=[streams.sampling], record_densities=record_densities)
        self.trace = SearchTrace()
        self._asked = 0  # runs drawn (handed out or replayed); the next one's number
        self._ready: list[Run] = []  # drawn from the current density, not handed out by ask() yet
        self._pending: dict[int, Run] = {}  # drawn and not told, by number
        self._told: dict[int, tuple[Trial, Any]] = {}  # told out of run order, waiting for the earlier ones

    @property
    def finished(self) -> bool:
        """Whether all T runs were told."""
        return len(self.trace.trials) >= self.run_count

    def ask(self, k: int = 1) -> Run | None:
        """The next run to make, or ``None`` once all T runs were handed out.

        Candidates are drawn ``k`` at a time from one projected density (Framework 1, DP-HyPO §3: the update rule
        may keep π unchanged for a batch); a new density is computed only when the previous batch is used up. On
        a resumed search, runs the journal already finished are replayed (told) instead of handed out.

        Args:
            k: Candidates to draw from the current density when a new batch is needed, ≥ 1.
        """
        while not self._ready and self._asked < self.run_count:
            self._ready = self._next_batch(k)
        return self._ready.pop(0) if self._ready else None

    def _next_batch(self, k: int) -> list[Run]:
        """Draw up to ``k`` candidates from one projected density; replay the journaled ones, return the others."""
        size = min(k, self.run_count - self._asked)
        runs = []
        for grid_index in self.loop.draw([0], size)[0].tolist():
            number = self._asked
            self._asked += 1
            run = Run(number, self.streams.run_seed(number), self.privacy, int(grid_index), self.mechanism)
            self._pending[number] = run
            replayed = self.recorder.replayed(number, run.grid_index)
            if replayed is not None:
                self.tell(number, replayed, REPLAYED)
            else:
                runs.append(run)
        return runs

    def tell(self, number: int, trial: Trial, artifact: Any = None) -> None:
        """Record run ``number``'s outcome; the strategy observes runs in run order (earlier ones first).

        Args:
            number: The run (handed out before, not told yet).
            trial: Its outcome (score NaN for a failed run).
            artifact: What the objective returned beside the score.
        """
        if number not in self._pending:
            raise ValueError(f"run {number} was not asked, or was told already")
        del self._pending[number]
        self._told[number] = (trial, artifact)
        while len(self.trace.trials) in self._told:
            trial, artifact = self._told.pop(len(self.trace.trials))
            self.trace.trials.append(trial)
            self.trace.artifacts.append(artifact)
            self.loop.observe([0], [trial.grid_index], [trial.score])

    def run(
        self, executor: Executor | None = None, *, runs_per_update: int = 1,
        progress: Callable[[int], None] | None = None,
    ) -> SearchTrace:
        """Make every remaining run on ``executor``, ``runs_per_update`` candidates per projected density.

        Each batch runs on the executor and the strategy sees every result in run order before the next density,
        so the release does not depend on the executor. An objective that trains in passes
        (:class:`~dphypo.search.evaluation.PassObjective`) trains each batch as one pass per worker, padded to
        ``runs_per_update`` candidates in all, so the last (partial) batch takes as long as a full one.

        Args:
            executor: Where runs execute (default: in this process).
            runs_per_update: Candidates drawn from one projected density, ≥ 1.
            progress: Called with the number of completed runs (counts only, never scores: privacy rule 1).
        """
        if self.objective is None:
            raise ValueError("this search has no objective: drive it with ask() and tell()")
        executor = executor if executor is not None else SequentialExecutor()
        while self._asked < self.run_count:
            before = len(self.trace.trials)
            batch = self._next_batch(runs_per_update)
            if progress is not None and len(self.trace.trials) > before:  # replayed from the journal
                progress(len(self.trace.trials))
            done = run_batch(self.objective, self.space, batch, executor, self.recorder, progress,
                             completed=len(self.trace.trials), pass_size=runs_per_update)
            for run in batch:
                trial, artifact = done[run.number]
                self.tell(run.number, trial, artifact)
        return self.result()

    def result(self) -> SearchTrace:
        """The trace so far, with the densities and the strategy's events."""
        self.trace.densities = self.loop.densities[0]
        self.trace.events = self.loop.events(0)
        return self.trace

    def trial_of(self, run: Run, score: float, seconds: float = 0.0, error: str | None = None) -> Trial:
        """The :class:`Trial` recording ``run``'s outcome (a non-finite score is a failed run)."""
        return Trial(run.number, run.grid_index, self.space.params(run.grid_index), score, not math.isfinite(score),
                     seconds, error)

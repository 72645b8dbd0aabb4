"""The Framework-1 loop shared by the tuner and the simulations: draw from projected densities, run, record.

:class:`~dphypo.search.tuner.Tuner` owns T and the release; :func:`run_loop` runs a search for a *given* T.
Every density it samples from is projected onto S_{C,c}(π0) and verified first (privacy rule 3); runs execute on
an executor (:mod:`dphypo.search.execution`) in batches drawn from one density; a :class:`Recorder` journals every
attempt (in memory, or in a file for the tuner) and replays the runs a resumed search already finished.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from dphypo.density import draw, in_bounded_set, project
from dphypo.privacy import PrivacyPlan
from dphypo.privacy.errors import DphypoError
from dphypo.search.execution import Executor, SequentialExecutor
from dphypo.search.plan import RunPlan
from dphypo.search.records import DataFailure, PrivateScore, Run, RunMisuse, Trial
from dphypo.search.storage import Journal, JournalMismatch, MemoryJournal
from dphypo.space import SearchSpace
from dphypo.strategies.base import Direction, Strategy, StrategyEvent, best_runs, release_key

__all__ = [
    "REPLAYED",
    "DataFailure",
    "LostAttemptsExceeded",
    "Objective",
    "PrivateScore",
    "Recorder",
    "Run",
    "Trial",
    "best_trial",
    "better",
    "evaluate_task",
    "projected_density",
    "run_loop",
]

#: ``objective(params, run) -> score`` or ``-> (score, artifact)``.
Objective = Callable[[dict[str, Any], Run], Any]


class LostAttemptsExceeded(DphypoError, RuntimeError):
    """More attempts were lost (dead worker or process) than the search's ``max_lost`` charged up front.

    The search stops without a release: charging the extra attempt would raise ε after the fact, and the
    number of losses must not move the reported ε (docs/parallel.md).
    """


def better(a: tuple[float, int], b: tuple[float, int], direction: Direction) -> bool:
    """The fixed, data-independent total order on run outputs ``(score, grid index)``.

    Higher (``maximize``) or lower (``minimize``) score wins; a failed run (non-finite score) loses to every
    finished one; ties go to the smaller grid index, so the order never depends on chance or on the data beyond
    the outputs themselves (Papernot & Steinke 2022, pitfall 11 of the notes). The score part is
    :func:`dphypo.strategies.base.release_key`, as in the batch-native :func:`dphypo.strategies.base.best_runs`.
    """
    key_a, key_b = release_key([a[0], b[0]], direction).tolist()
    return (key_a, -a[1]) > (key_b, -b[1])


def _draw(density: np.ndarray, rng: np.random.Generator) -> int:
    """One index from a probability vector (inverse CDF, :func:`dphypo.density.draw`; one uniform per sample)."""
    return int(draw(density, rng.random()))


#: Attempts per run before a run whose worker keeps dying stops the search (each lost attempt is charged).
MAX_ATTEMPTS = 3

#: Stands in for the artifact of a run replayed from a journal (only the incumbent's artifact is journaled).
REPLAYED: Any = type("Replayed", (), {"__repr__": lambda self: "REPLAYED"})()


class Recorder:
    """Journals every attempt of a search and replays what a resumed search already finished.

    Every attempt is written to a :class:`~dphypo.search.storage.Journal` when it starts and when it ends (an
    in-memory one by default, so simulations and the tuner share this one code path), the best finished run's
    artifact is kept in the same transaction as its result, and :meth:`resume` counts the attempts a dead process
    left in flight. Lost attempts are paid for up front (``max_lost``, in the accounted ε); one more than that
    stops the search.

    Args:
        direction: ``"maximize"`` or ``"minimize"``: which finished run is the incumbent.
        journal: An open journal (default: a new :class:`~dphypo.search.storage.MemoryJournal`).
        max_lost: Lost attempts the accounted ε already covers.
    """

    def __init__(self, direction: Direction, journal: Journal | None = None, max_lost: int = 0) -> None:
        self.direction = direction
        self.journal: Journal = MemoryJournal() if journal is None else journal
        self.max_lost = max_lost
        self.lost_attempts = 0
        self._finished: dict[int, Trial] = {}
        self._incumbent: tuple[float, int, int] | None = None  # (score, grid index, run number)

    def resume(self) -> None:
        """Count the attempts left in flight by a dead process and load the finished runs for replay.

        Raises:
            LostAttemptsExceeded: The journal holds more lost attempts than ``max_lost`` covers.
        """
        self.journal.charge_interrupted()
        self.lost_attempts = self.journal.charged_attempts()
        self.check_lost_budget()
        self._finished = self.journal.finished_runs()
        for trial in self._finished.values():
            self._update_incumbent(trial.score, trial.grid_index, trial.number)

    def replayed(self, number: int, grid_index: int) -> Trial | None:
        """The journaled result of run ``number``, or ``None`` if it must run.

        Raises:
            JournalMismatch: The replayed search drew another grid point than the journaled one.
        """
        trial = self._finished.get(number)
        if trial is None:
            return None
        if trial.grid_index != grid_index:
            raise JournalMismatch(
                f"replay diverged at run {number}: the journal ran grid point {trial.grid_index}, this search drew "
                f"{grid_index}; the strategy or library version differs from the one that wrote the journal"
            )
        return trial

    def started(self, number: int, grid_index: int, params: dict[str, Any]) -> int:
        """Record the start of an attempt; returns its handle."""
        return self.journal.start_attempt(number, grid_index, params)

    def finished(self, attempt: int, trial: Trial, artifact: Any) -> None:
        """Record a finished attempt (and keep its artifact if it is the new incumbent)."""
        improved = self._update_incumbent(trial.score, trial.grid_index, trial.number)
        self.journal.finish_attempt(
            attempt, "data_failure" if trial.failed else "done", trial.score, trial.seconds,
            incumbent=(trial.number, artifact) if improved else None, note=trial.error or "",
        )

    def lost(self, attempt: int, *, note: str, status: str = "lost") -> None:
        """An attempt that touched the data without a result (covered by ``max_lost``; re-run on resume)."""
        self.lost_attempts += 1
        self.journal.finish_attempt(attempt, status, note=note)

    def check_lost_budget(self) -> None:
        """Raise :class:`LostAttemptsExceeded` once more attempts were lost than ``max_lost`` covers."""
        if self.lost_attempts > self.max_lost:
            raise LostAttemptsExceeded(
                f"{self.lost_attempts} attempt(s) were lost (dead worker or process) but the search was accounted "
                f"with max_lost={self.max_lost}: it stops without a release, because charging the extra attempt "
                "would raise the epsilon after the fact; start a new search with a larger max_lost (--max-lost)"
            )

    def artifact(self, number: int, artifact: Any) -> Any:
        """The artifact of run ``number``: as returned, or the journaled incumbent's for a replayed run."""
        if artifact is not REPLAYED:
            return artifact
        stored = self.journal.incumbent()
        if stored is None or stored[0] != number:
            raise RuntimeError(f"the journal holds no artifact for the released run {number}")
        return stored[1]

    def _update_incumbent(self, score: float, grid_index: int, number: int) -> bool:
        current = self._incumbent
        if current is None or better((score, grid_index), current[:2], self.direction) or (
            not better(current[:2], (score, grid_index), self.direction) and number < current[2]
        ):
            self._incumbent = (score, grid_index, number)
            return True
        return False


def best_trial(trials: Sequence[Trial], direction: Direction) -> int | None:
    """Index of the run to release under :func:`better` (``None`` for no runs; :func:`best_runs` of one search)."""
    if not trials:
        return None
    return int(best_runs([t.grid_index for t in trials], [t.score for t in trials], direction))


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


def run_loop(
    objective: Objective,
    space: SearchSpace,
    bounds: tuple[float, float],
    strategy: Strategy,
    direction: Direction,
    run_count: int,
    *,
    sampling_rng: np.random.Generator,
    strategy_seed: int,
    run_seed: Callable[[int], int],
    privacy: PrivacyPlan | None = None,
    plan: RunPlan | None = None,
    runs_per_update: int = 1,
    record_densities: bool = False,
    progress: Callable[[int], None] | None = None,
    executor: Executor | None = None,
    recorder: Recorder | None = None,
) -> tuple[list[Trial], list[Any], list[np.ndarray], list[StrategyEvent]]:
    """The Framework-1 loop for a *given* T (the :class:`Tuner` draws T; simulations may fix it).

    Each update projects the strategy's density and draws ``runs_per_update`` candidates from it (DP-HyPO §3: the
    update rule may keep π unchanged, so a batch is still Framework 1); the batch runs on ``executor`` and the
    next update sees every result in run order, so the release does not depend on the executor.

    Args:
        objective: ``objective(params, run) -> score`` or ``(score, artifact)``.
        space: The grid and prior π0.
        bounds: ``(C, c)``, the density-ratio bounds every sampling density is projected onto.
        strategy: How densities adapt.
        direction: ``"maximize"`` or ``"minimize"``.
        run_count: T, the number of runs.
        sampling_rng: Source of the candidate draws.
        strategy_seed: Seed of the strategy's session.
        run_seed: ``run_seed(number)``: the per-run seed.
        privacy: The search's privacy configuration, handed to every :class:`Run`.
        plan: Per-run plan handed to every :class:`Run` (see :attr:`Run.plan`).
        runs_per_update: Candidates drawn from one projected density, ≥ 1.
        record_densities: Return every projected density, shape ``(grid size,)`` each.
        progress: Called with the number of completed runs (counts only, never scores).
        executor: A :class:`dphypo.search.execution.Executor` (default: in this process).
        recorder: Where runs are journaled and replayed from (default: an in-memory journal).

    Returns:
        ``(trials, artifacts, densities, events)``; densities only if ``record_densities``.
    """
    if executor is None:
        executor = SequentialExecutor()
    recorder = recorder if recorder is not None else Recorder(direction)
    session = strategy.start(space, direction, strategy_seed)
    trials: list[Trial] = []
    artifacts: list[Any] = []
    densities: list[np.ndarray] = []
    while len(trials) < run_count:
        observations = [(t.grid_index, t.score) for t in trials]
        density = projected_density(session.density(observations), space, *bounds)
        if record_densities:
            densities.append(density)
        batch = []
        for number in range(len(trials), min(len(trials) + runs_per_update, run_count)):
            grid_index = _draw(density, sampling_rng)
            batch.append(Run(number, run_seed(number), privacy, grid_index, plan))
        done = _run_batch(objective, space, batch, executor, recorder, progress, completed=len(trials))
        for run in batch:
            trial, artifact = done[run.number]
            trials.append(trial)
            artifacts.append(artifact)
    return trials, artifacts, densities, session.events


def _run_batch(
    objective: Objective, space: SearchSpace, batch: list[Run], executor: Executor, recorder: Recorder,
    progress: Callable[[int], None] | None, *, completed: int,
) -> dict[int, tuple[Trial, Any]]:
    """Evaluate one batch (replaying runs the journal already holds); returns ``{number: (trial, artifact)}``."""
    done: dict[int, tuple[Trial, Any]] = {}

    def finished(trial: Trial, artifact: Any) -> None:
        done[trial.number] = (trial, artifact)
        if progress is not None:
            progress(completed + len(done))  # counts only, never scores (privacy rule 1)

    pending = []
    for run in batch:
        replayed = recorder.replayed(run.number, run.grid_index)
        if replayed is not None:
            finished(replayed, REPLAYED)
        else:
            pending.append(run)
    attempts: dict[int, int] = {}  # item -> journaled attempt, for attempts handed to a worker and not finished

    def on_start(i: int, attempt: int) -> None:
        run = pending[i]
        attempts[i] = recorder.started(run.number, run.grid_index, space.params(run.grid_index))

    def on_result(i: int, outcome: tuple[float, Any, float, str | None]) -> None:
        score, artifact, seconds, error = outcome
        run = pending[i]
        trial = Trial(run.number, run.grid_index, space.params(run.grid_index), score, not math.isfinite(score),
                      seconds, error)
        recorder.finished(attempts.pop(i), trial, artifact)
        finished(trial, artifact)

    def on_lost(i: int, attempt: int) -> None:
        recorder.lost(attempts.pop(i), note=f"worker lost on attempt {attempt}")
        recorder.check_lost_budget()

    try:
        executor.run(evaluate_task, [(objective, space.params(run.grid_index), run) for run in pending],
                     on_result=on_result, on_lost=on_lost, max_attempts=MAX_ATTEMPTS, on_start=on_start)
    except BaseException as exc:
        # Attempts handed to a worker without a result touched the data: charged (and re-run on resume).
        for attempt in attempts.values():
            recorder.lost(attempt, note=f"stopped: {type(exc).__name__}: {exc}", status="error")
        raise
    return done


def evaluate_task(task: tuple[Objective, dict[str, Any], Run]) -> tuple[float, Any, float, str | None]:
    """One run, as executed by a worker: ``(score, artifact, seconds, error)``, NaN score for a failed run.

    The budget check runs here, in the worker, because that is where the run's Opacus engines live; it runs
    whether or not the objective failed (a failed run may still have trained).
    """
    objective, params, run = task
    outcome = _evaluate(objective, params, run)
    run.check_budget(finished=math.isfinite(outcome[0]))  # a misuse of the run stops the search (RunMisuse)
    return outcome


def _evaluate(objective: Objective, params: Mapping[str, Any], run: Run) -> tuple[float, Any, float, str | None]:
    start = time.perf_counter()
    try:
        with warnings.catch_warnings():
            # torch warns on every run when Opacus's per-sample hooks sit on a first layer whose input needs no
            # gradient (the usual case): harmless, and a search would print it once per run.
            warnings.filterwarnings("ignore", message="Full backward hook is firing")
            out = objective(dict(params), run)
    except RunMisuse:  # a bug of the objective against the plan, not a failure on the data: stop, loudly
        raise
    except Exception as exc:  # privacy rule 5: any failure on the data scores worst and is not retried
        return math.nan, None, time.perf_counter() - start, f"{type(exc).__name__}: {exc}"
    raw, artifact = out if isinstance(out, tuple) else (out, None)
    score = _checked_score(raw, out, run)
    if not math.isfinite(score):
        return math.nan, None, time.perf_counter() - start, "non-finite score"  # privacy rule 5
    return score, run.released_artifact(artifact), time.perf_counter() - start, None


def _checked_score(raw: Any, out: Any, run: Run) -> float:
    """The number inside an objective's score, refusing a bare number where the plan releases a noisy score."""
    if isinstance(raw, PrivateScore):
        if not any(raw is issued for issued in run.scores):
            raise TypeError(f"run {run.number} returned a PrivateScore made by run {raw.run_number}, not by its own "
                            "run.private_score(...)")
        return float(raw.value)
    if run.plan is not None and run.plan.score_noise is not None:
        raise TypeError(
            "the plan releases a noisy score (score_noise is set), so the objective must return "
            f"run.private_score(count) (count = correct validation predictions), not a bare number: got {out!r}"
        )
    try:
        return float(raw)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"objective must return a number or (number, artifact), got {out!r}") from exc

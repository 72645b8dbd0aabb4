"""The Framework-1 loop shared by the tuner and the simulations: draw from projected densities, run, record.

:class:`~dphypo.tuner.Tuner` owns T and the release; :func:`run_loop` runs a search for a *given* T. Every density
it samples from is projected onto S_{C,c}(π0) and verified first (privacy rule 3); runs execute on an executor
(:mod:`dphypo.executors`) in batches drawn from one density; a :class:`Recorder` journals every attempt and
replays the runs a resumed search already finished.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dphypo.density import in_bounded_set, project
from dphypo.privacy import PrivacyConfig
from dphypo.space import SearchSpace
from dphypo.strategies import Direction, Strategy, StrategyEvent

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
Objective = Callable[[dict[str, Any], "Run"], Any]

class DataFailure(Exception):
    """Raise from an objective when a run failed *because of the data* (e.g. the loss diverged).

    The run then scores worst and is not retried (privacy rule 5): retrying would make the number of runs, and so
    the release, depend on the data. A non-finite returned score, and *any* other exception the objective raises
    (an out-of-memory error driven by a Poisson batch's size, a failure on some record), are treated the same
    way, because code that runs on the data can fail because of the data (docs/parallel.md). Only what cannot
    depend on the data stops a search: the worker process or host dying (charged up front, see
    :attr:`~dphypo.privacy.PrivacyConfig.max_lost`), the curator's Ctrl-C, or a run that spent more privacy than
    planned.
    """


class LostAttemptsExceeded(RuntimeError):
    """More attempts were lost (dead worker or process) than the search's ``max_lost`` charged up front.

    The search stops without a release: charging the extra attempt would raise ε after the fact, and the
    number of losses must not move the reported ε (docs/parallel.md).
    """


class PrivateScore(float):
    """A run's score privatised by the mechanism its plan accounts for (made by :meth:`Run.private_score`).

    It is a ``float`` (compare and print it as one). When the run's plan releases a noisy score
    (``plan.score_noise``), the objective must return this object, not a bare number: a score that skipped the
    noise would be released while ε still claims it was privatised (privacy rule 4).

    Attributes:
        run_number: The run that made it.
    """

    run_number: int

    def __new__(cls, value: float, run_number: int) -> PrivateScore:
        score = super().__new__(cls, value)
        score.run_number = int(run_number)
        return score

    def __reduce__(self) -> tuple[Any, ...]:
        return (PrivateScore, (float(self), self.run_number))

    @property
    def value(self) -> float:
        """The noisy score as a plain float."""
        return float(self)


@dataclass(frozen=True)
class Run:
    """What an objective receives besides the hyperparameters.

    Attributes:
        number: 0-based index of this run within the search.
        seed: A per-run seed derived from the search seed (use it for data order, initialisation, noise).
        privacy: The search's privacy configuration (the per-run budget the run must stay within).
        grid_index: Flat index of the hyperparameters in the search space.
        plan: The DP-SGD plan (σ, sampling rate, steps, score noise) the per-run budget was computed from, when
            the search trains with DP-SGD (:class:`dphypo.train.DPSGDPlan`); ``None`` otherwise.
        engines: Opacus privacy engines created through :meth:`make_private`; the tuner checks each one's
            accountant history against the plan after the run.
        wrapped: ``(wrapped, plain)`` modules from :meth:`make_private`: a returned wrapper is released as the
            plain module.
        scores: The :class:`PrivateScore` objects this run made (only those are accepted as its score).
    """

    number: int
    seed: int
    privacy: PrivacyConfig | None
    grid_index: int
    plan: Any = None
    engines: list[Any] = field(default_factory=list, compare=False, repr=False)
    wrapped: list[tuple[Any, Any]] = field(default_factory=list, compare=False, repr=False)
    scores: list[PrivateScore] = field(default_factory=list, compare=False, repr=False)

    @property
    def rng(self) -> np.random.Generator:
        """A fresh generator seeded with :attr:`seed`."""
        return np.random.default_rng(self.seed)

    def make_private(self, module: Any, optimizer: Any, data_loader: Any, *, max_grad_norm: float) -> tuple:
        """Opacus ``make_private`` with this search's calibrated σ and Poisson sampling.

        Returns ``(module, optimizer, data_loader)`` wrapped by Opacus; see :func:`dphypo.train.make_private`.
        """
        from dphypo.train.private import make_private

        return make_private(self, module, optimizer, data_loader, max_grad_norm=max_grad_norm)

    def private_score(self, count: int) -> PrivateScore:
        """The privatised score of a count statistic: ``(count + N(0, plan.score_noise²)) / plan.n_val``.

        ``count`` must have sensitivity 1 under adding or removing one record (e.g. the number of correct
        validation predictions); the noise comes from this run's secret stream and is exactly the Gaussian
        mechanism the plan's per-run curve accounts for (:func:`dphypo.train.private.private_score`).

        Args:
            count: The raw statistic, an integer ≥ 0.

        Returns:
            The score to return from the objective.
        """
        from dphypo.train.private import private_score

        score = PrivateScore(private_score(self, count), self.number)
        self.scores.append(score)
        return score

    def released_artifact(self, artifact: Any) -> Any:
        """``artifact`` as it may be released: a module wrapped by :meth:`make_private` becomes the plain one."""
        for wrapped, plain in self.wrapped:
            if artifact is wrapped:
                return plain
        return artifact

    def check_budget(self) -> None:
        """Fail loudly if any engine of this run spent more than the plan's per-run budget."""
        if not self.engines:
            return
        from dphypo.train.private import check_budget

        for engine in self.engines:
            check_budget(engine, self.plan)


@dataclass(frozen=True)
class Trial:
    """One run, as the curator sees it (NOT private: its score, timing and error must not be published).

    ``error`` says why a failed run failed (the exception's type and message), for debugging only.
    """

    number: int
    grid_index: int
    params: dict[str, Any]
    score: float
    failed: bool
    seconds: float
    error: str | None = None


def better(a: tuple[float, int], b: tuple[float, int], direction: Direction) -> bool:
    """The fixed, data-independent total order on run outputs ``(score, grid index)``.

    Higher (``maximize``) or lower (``minimize``) score wins; a failed run (non-finite score) loses to every
    finished one; ties go to the smaller grid index, so the order never depends on chance or on the data beyond
    the outputs themselves (Papernot & Steinke 2022, pitfall 11 of the notes).
    """

    def key(out: tuple[float, int]) -> tuple[float, int]:
        score, index = out
        oriented = score if direction == "maximize" else -score
        return (oriented if math.isfinite(score) else -math.inf, -index)

    return key(a) > key(b)


def _draw(density: np.ndarray, rng: np.random.Generator) -> int:
    """One index from a probability vector (inverse CDF; one uniform draw per sample)."""
    cdf = np.cumsum(density)
    return int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), density.size - 1))

#: Attempts per run before a run whose worker keeps dying stops the search (each lost attempt is charged).
MAX_ATTEMPTS = 3

#: Stands in for the artifact of a run replayed from a journal (only the incumbent's artifact is journaled).
REPLAYED: Any = type("Replayed", (), {"__repr__": lambda self: "REPLAYED"})()


class Recorder:
    """Journals every attempt of a search and replays what a resumed search already finished.

    Without a journal it only counts lost attempts. With one (:class:`dphypo.storage.Journal`), each attempt is
    written when it starts and when it ends, the best finished run's artifact is kept in the same transaction
    as its result, and :meth:`resume` counts the attempts a dead process left in flight. Lost attempts are paid
    for up front (``max_lost``, in the accounted ε); one more than that stops the search.

    Args:
        direction: ``"maximize"`` or ``"minimize"``: which finished run is the incumbent.
        journal: An open journal, or ``None``.
        max_lost: Lost attempts the accounted ε already covers.
    """

    def __init__(self, direction: Direction, journal: Any = None, max_lost: int = 0) -> None:
        self.direction = direction
        self.journal = journal
        self.max_lost = max_lost
        self.lost_attempts = 0
        self._finished: dict[int, Any] = {}
        self._incumbent: tuple[float, int, int] | None = None  # (score, grid index, run number)
        self._next_attempt = 0

    def resume(self) -> None:
        """Count the attempts left in flight by a dead process and load the finished runs for replay.

        Raises:
            LostAttemptsExceeded: The journal holds more lost attempts than ``max_lost`` covers.
        """
        self.journal.charge_interrupted()
        self.lost_attempts = self.journal.charged_attempts()
        self.check_lost_budget()
        self._finished = self.journal.finished_runs()
        for record in self._finished.values():
            self._update_incumbent(record.score, record.grid_index, record.number)

    def replayed(self, number: int, grid_index: int) -> Trial | None:
        """The journaled result of run ``number``, or ``None`` if it must run.

        Raises:
            JournalMismatch: The replayed search drew another grid point than the journaled one.
        """
        record = self._finished.get(number)
        if record is None:
            return None
        if record.grid_index != grid_index:
            from dphypo.storage import JournalMismatch

            raise JournalMismatch(
                f"replay diverged at run {number}: the journal ran grid point {record.grid_index}, this search drew "
                f"{grid_index}; the strategy or library version differs from the one that wrote the journal"
            )
        return Trial(number, grid_index, record.params, record.score, record.status != "done", record.seconds,
                     record.note or None)

    def started(self, number: int, grid_index: int, params: dict[str, Any]) -> int:
        """Record the start of an attempt; returns its handle."""
        if self.journal is not None:
            return self.journal.start_attempt(number, grid_index, params)
        self._next_attempt += 1
        return self._next_attempt

    def finished(self, attempt: int, trial: Trial, artifact: Any) -> None:
        """Record a finished attempt (and keep its artifact if it is the new incumbent)."""
        improved = self._update_incumbent(trial.score, trial.grid_index, trial.number)
        if self.journal is not None:
            self.journal.finish_attempt(
                attempt, "data_failure" if trial.failed else "done", trial.score, trial.seconds,
                incumbent=(trial.number, artifact) if improved else None, note=trial.error or "",
            )

    def lost(self, attempt: int, *, note: str, status: str = "lost") -> None:
        """An attempt that touched the data without a result (covered by ``max_lost``; re-run on resume)."""
        self.lost_attempts += 1
        if self.journal is not None:
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
        stored = None if self.journal is None else self.journal.incumbent()
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
    """Index of the run to release under :func:`better` (``None`` for no runs)."""
    best: int | None = None
    for i, trial in enumerate(trials):
        if best is None or better((trial.score, trial.grid_index), (trials[best].score, trials[best].grid_index),
                                  direction):
            best = i
    return best


def projected_density(session_density: np.ndarray, space: SearchSpace, C: float, c: float) -> np.ndarray:
    """Project a strategy's density onto S_{C,c}(π0) and verify the result (privacy rule 3).

    Every density the sampler draws from passes through here; a strategy can return anything, and an
    out-of-set result (which would void Theorem 1) raises instead of being sampled.
    """
    prior = space.prior
    density = project(np.asarray(session_density, dtype=np.float64), prior, C, c)
    if not in_bounded_set(density, prior, C, c):
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
    privacy: PrivacyConfig | None = None,
    plan: Any = None,
    batch_size: int = 1,
    record_densities: bool = False,
    progress: Callable[[int], None] | None = None,
    executor: Any = None,
    recorder: Recorder | None = None,
) -> tuple[list[Trial], list[Any], list[np.ndarray], list[StrategyEvent]]:
    """The Framework-1 loop for a *given* T (the :class:`Tuner` draws T; simulations may fix it).

    Each update projects the strategy's density and draws ``batch_size`` candidates from it (DP-HyPO §3: the
    update rule may keep π unchanged, so a batch is still Framework 1); the batch runs on ``executor`` and the
    next update sees every result in run order, so the release does not depend on the executor.

    Args:
        bounds: ``(C, c)``, the density-ratio bounds every sampling density is projected onto.
        plan: DP-SGD plan handed to every :class:`Run` (see :attr:`Run.plan`).
        executor: A :class:`dphypo.executors.Executor` (default: in this process).
        recorder: Where runs are journaled and replayed from (default: memory only).

    Returns:
        ``(trials, artifacts, densities, events)``; densities only if ``record_densities``.
    """
    if executor is None:
        from dphypo.executors import SequentialExecutor

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
        for number in range(len(trials), min(len(trials) + batch_size, run_count)):
            grid_index = _draw(density, sampling_rng)
            batch.append(Run(number, run_seed(number), privacy, grid_index, plan))
        done = _run_batch(objective, space, batch, executor, recorder, progress, completed=len(trials))
        for run in batch:
            trial, artifact = done[run.number]
            trials.append(trial)
            artifacts.append(artifact)
    return trials, artifacts, densities, session.events


def _run_batch(
    objective: Objective, space: SearchSpace, batch: list[Run], executor: Any, recorder: Recorder,
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
    run.check_budget()
    return outcome


def _evaluate(objective: Objective, params: Mapping[str, Any], run: Run) -> tuple[float, Any, float, str | None]:
    start = time.perf_counter()
    try:
        with warnings.catch_warnings():
            # torch warns on every run when Opacus's per-sample hooks sit on a first layer whose input needs no
            # gradient (the usual case): harmless, and a search would print it once per run.
            warnings.filterwarnings("ignore", message="Full backward hook is firing")
            out = objective(dict(params), run)
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
    if getattr(run.plan, "score_noise", None) is not None:
        raise TypeError(
            "the plan releases a noisy score (score_noise is set), so the objective must return "
            f"run.private_score(count) (count = correct validation predictions), not a bare number: got {out!r}"
        )
    try:
        return float(raw)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"objective must return a number or (number, artifact), got {out!r}") from exc

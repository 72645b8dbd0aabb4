"""Evaluating runs: one objective call per run on a worker, its score checked, data failures scored worst.

:func:`evaluate_task` is what an executor (:mod:`dphypo.search.execution`) runs for each candidate; :func:`run_batch`
hands a batch of runs to the executor and journals every attempt through a
:class:`~dphypo.search.recording.Recorder` (replaying the runs a resumed search already finished).
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from dphypo.search.execution import Executor
from dphypo.search.recording import MAX_ATTEMPTS, REPLAYED, Recorder
from dphypo.search.records import PrivateScore, Run, RunContext, RunMisuse, Trial
from dphypo.space import SearchSpace

__all__ = ["Objective", "checked_score", "evaluate_task", "run_batch"]

#: ``objective(params, run) -> score`` or ``-> (score, artifact)``; ``run`` is the context its mechanism opened.
Objective = Callable[[dict[str, Any], RunContext], Any]


def run_batch(
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

    The run's context is opened here, in the worker (:meth:`~dphypo.search.records.Run.open`: the mechanism's training
    entry point), and checked here after the objective — where its privacy engines live — whether or not the
    objective failed (a failed run may still have trained).
    """
    objective, params, run = task
    context = run.open()
    outcome = _evaluate(objective, params, context)
    context.check(finished=math.isfinite(outcome[0]))  # a misuse of the run stops the search (RunMisuse)
    return outcome


def _evaluate(
    objective: Objective, params: Mapping[str, Any], run: RunContext
) -> tuple[float, Any, float, str | None]:
    start = time.perf_counter()
    try:
        with warnings.catch_warnings():
            # torch warns on every run when Opacus's per-sample hooks sit on a first layer whose input needs no
            # gradient (the usual case): harmless, and a search would print it once per run.
            warnings.filterwarnings("ignore", message="Full backward hook is firing")
            out = objective(dict(params), run)
    except RunMisuse:  # a bug of the objective against the mechanism, not a failure on the data: stop, loudly
        raise
    except Exception as exc:  # privacy rule 5: any failure on the data scores worst and is not retried
        return math.nan, None, time.perf_counter() - start, f"{type(exc).__name__}: {exc}"
    raw, artifact = out if isinstance(out, tuple) else (out, None)
    score = checked_score(raw, out, run)
    if not math.isfinite(score):
        return math.nan, None, time.perf_counter() - start, "non-finite score"  # privacy rule 5
    return score, run.released_artifact(artifact), time.perf_counter() - start, None


def checked_score(raw: Any, out: Any, run: RunContext) -> float:
    """The number inside an objective's score, refusing a bare number where the mechanism releases a noisy score.

    Raises:
        TypeError: A :class:`PrivateScore` of another run, a bare number where the mechanism privatises the score, or
            something that is not a number.
    """
    if isinstance(raw, PrivateScore):
        if not any(raw is issued for issued in run.scores):
            raise TypeError(f"run {run.number} returned a PrivateScore made by run {raw.run_number}, not by its own "
                            "run.private_score(...)")
        return float(raw.value)
    if run.mechanism is not None and run.mechanism.score_noise is not None:
        raise TypeError(
            "the mechanism releases a noisy score (score_noise is set), so the objective must return "
            f"run.private_score(count) (count = correct validation predictions), not a bare number: got {out!r}"
        )
    try:
        return float(raw)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"objective must return a number or (number, artifact), got {out!r}") from exc

"""Evaluating runs: one objective call per run on a worker, its score checked, data failures scored worst.

:func:`evaluate_task` is what an executor (:mod:`dphypo.search.execution`) runs for each candidate; :func:`run_batch`
hands a batch of runs to the executor and journals every attempt through a
:class:`~dphypo.search.recording.Recorder` (replaying the runs a resumed search already finished).

An objective that can train several runs in one call (:class:`PassObjective`, e.g. the built-in DP-SGD recipe with
its vectorised engine) gets each batch as *passes* (:func:`evaluate_pass`): one executor item per pass, every run
of it journaled as started before the pass and finished after it, each run still opened in its own context, scored
through its own ``private_score`` and checked by its own ``check``. A pass lost with its worker (kill -9) loses
every run of it (each one lost attempt, charged through ``max_lost``). A pass is padded with discarded dummy
candidates to ``pass_size`` so that its duration does not depend on how many real runs it holds (the last batch of
a search is partial: docs/parallel.md).
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from dphypo.search.execution import Executor
from dphypo.search.recording import MAX_ATTEMPTS, REPLAYED, LostAttemptsExceeded, Recorder
from dphypo.search.records import PrivateScore, Run, RunContext, RunMisuse, Trial
from dphypo.space import SearchSpace

__all__ = ["Objective", "PassObjective", "checked_score", "evaluate_pass", "evaluate_task", "pass_objective",
           "run_batch"]

#: ``objective(params, run) -> score`` or ``-> (score, artifact)``; ``run`` is the context its mechanism opened.
Objective = Callable[[dict[str, Any], RunContext], Any]

#: What an executor item of a run returns: ``(score, artifact, seconds, error)``, NaN score for a failed run.
Outcome = tuple[float, Any, float, str | None]


@runtime_checkable
class PassObjective(Protocol):
    """An objective that can also train several runs in one call (a *pass*), e.g. a vectorised DP-SGD engine.

    ``trains_in_passes`` says whether it wants to (an objective may support passes only in some configurations);
    when it is false the search calls it run by run as any objective.
    """

    @property
    def trains_in_passes(self) -> bool:
        """Whether :func:`run_batch` should hand this objective its runs as passes."""
        ...

    def __call__(self, params: dict[str, Any], run: RunContext) -> Any:
        """One run, as any :data:`Objective`."""
        ...

    def train_pass(self, tasks: Sequence[tuple[dict[str, Any], RunContext]], *, pad_to: int = 0) -> list[Any]:
        """Train every ``(params, run)`` of ``tasks`` at once; what each run's objective call would return.

        Every run books its own privacy on its context (its ``check`` compares it with the mechanism) and releases
        its score through its own ``run.private_score``.

        Args:
            tasks: The runs of the pass, each with its opened context.
            pad_to: Train dummy candidates (fresh secret seeds, results discarded) beside the real ones up to this
                many in all, so the pass's duration does not depend on ``len(tasks)``.

        Returns:
            One entry per task, in order: ``score`` or ``(score, artifact)``, or the exception instance that run
            failed with (a failure of that run only: it scores worst; a :class:`RunMisuse` stops the search).
        """
        ...


def pass_objective(objective: Objective) -> PassObjective | None:
    """``objective`` when it trains in passes (:class:`PassObjective` with ``trains_in_passes``), else ``None``."""
    if isinstance(objective, PassObjective) and objective.trains_in_passes:
        return objective
    return None


def run_batch(
    objective: Objective, space: SearchSpace, batch: list[Run], executor: Executor, recorder: Recorder,
    progress: Callable[[int], None] | None, *, completed: int, pass_size: int | None = None,
) -> dict[int, tuple[Trial, Any]]:
    """Evaluate one batch (replaying runs the journal already holds); returns ``{number: (trial, artifact)}``.

    Args:
        objective: The objective (a :class:`PassObjective` that trains in passes gets the batch as passes).
        space: The grid.
        batch: The runs, in run order.
        executor: Where they run.
        recorder: The journal.
        progress: Called with completed-run counts (never scores).
        completed: Runs completed before this batch.
        pass_size: Runs the batch's passes are padded to in all (default: the batch's size); a pass objective only.
    """
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
    trainer = pass_objective(objective)
    if trainer is None:
        groups = [[i] for i in range(len(pending))]
        fn: Callable[[Any], Any] = _single
        items: list[Any] = [(objective, space.params(run.grid_index), run) for run in pending]
    else:
        groups = pass_groups(len(pending), max(len(batch), pass_size or 0), executor.workers)
        fn = evaluate_pass
        items = [(trainer, [(space.params(pending[j].grid_index), pending[j]) for j in group], pad)
                 for group, pad in zip(groups, pass_pads(groups, max(len(batch), pass_size or 0)), strict=True)]
    attempts: dict[int, int] = {}  # run index -> journaled attempt, for attempts handed to a worker, not finished

    def on_start(i: int, attempt: int) -> None:
        for j in groups[i]:
            run = pending[j]
            attempts[j] = recorder.started(run.number, run.grid_index, space.params(run.grid_index))

    def on_result(i: int, outcomes: list[Outcome]) -> None:
        for j, (score, artifact, seconds, error) in zip(groups[i], outcomes, strict=True):
            run = pending[j]
            trial = Trial(run.number, run.grid_index, space.params(run.grid_index), score, not math.isfinite(score),
                          seconds, error)
            recorder.finished(attempts.pop(j), trial, artifact)
            finished(trial, artifact)

    def on_lost(i: int, attempt: int) -> None:
        for j in groups[i]:  # every run of a lost pass touched the data: one lost attempt each
            recorder.lost(attempts.pop(j), note=f"worker lost on attempt {attempt}")
        try:
            recorder.check_lost_budget()
        except LostAttemptsExceeded as exc:
            if len(groups[i]) > 1:
                raise lost_pass_error(exc, len(groups[i])) from exc
            raise

    try:
        executor.run(fn, items, on_result=on_result, on_lost=on_lost, max_attempts=MAX_ATTEMPTS, on_start=on_start)
    except BaseException as exc:
        # Attempts handed to a worker without a result touched the data: charged (and re-run on resume).
        for attempt in attempts.values():
            recorder.lost(attempt, note=f"stopped: {type(exc).__name__}: {exc}", status="error")
        raise
    return done


def lost_pass_error(exc: LostAttemptsExceeded, size: int) -> LostAttemptsExceeded:
    """``exc`` with the pass-size advice: a pass in flight loses all its runs, so ``max_lost`` must cover a pass."""
    return LostAttemptsExceeded(
        f"{exc}; runs trained in passes of {size} lose all {size} when the process dies mid-pass: set --max-lost "
        f"(max_lost) ≥ {size}, or train in smaller passes (--pass-size)"
    )


def pass_groups(pending: int, pass_size: int, workers: int) -> list[list[int]]:
    """The runs ``0..pending-1`` split into passes: one per worker (at most ``pass_size``), contiguous, in order.

    The number of passes depends only on ``pass_size`` and ``workers`` (public), never on ``pending``: a pass may
    hold no real run and train dummies only (:func:`pass_pads`), so neither the passes' count nor their sizes reveal
    how many runs a batch holds.
    """
    count = max(1, min(workers, pass_size))
    size = math.ceil(pass_size / count)
    return [list(range(g * size, min(pending, (g + 1) * size))) for g in range(count)]


def pass_pads(groups: list[list[int]], pass_size: int) -> list[int]:
    """The size every pass of ``groups`` is padded to: ``ceil(pass_size / len(groups))`` (public)."""
    size = math.ceil(pass_size / len(groups))
    return [max(size, len(group)) for group in groups]


def _single(task: tuple[Objective, dict[str, Any], Run]) -> list[Outcome]:
    """:func:`evaluate_task` as a pass of one (the shape :func:`run_batch` reads)."""
    return [evaluate_task(task)]


def evaluate_pass(task: tuple[PassObjective, list[tuple[dict[str, Any], Run]], int]) -> list[Outcome]:
    """One pass, as executed by a worker: one ``(score, artifact, seconds, error)`` per run, NaN for a failed run.

    Every run's context is opened here (as :func:`evaluate_task` does) and checked after the pass, whether or not
    its run failed. A pass that raises as a whole (not a :class:`RunMisuse`) fails every run in it: each scores
    worst and is not retried (privacy rule 5). ``seconds`` of each run is the pass's wall time divided by the
    padded pass size.
    """
    objective, runs, pad_to = task
    contexts = [run.open() for _, run in runs]
    start = time.perf_counter()
    outs: list[Any]
    if runs or pad_to:
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Full backward hook is firing")
                outs = objective.train_pass([(dict(params), context) for (params, _), context
                                             in zip(runs, contexts, strict=True)], pad_to=pad_to)
        except RunMisuse:
            raise
        except Exception as exc:  # privacy rule 5: the pass failed, so every run of it failed
            outs = [exc] * len(runs)
        if len(outs) != len(runs):
            raise RuntimeError(f"train_pass returned {len(outs)} outcomes for {len(runs)} runs")
    else:
        outs = []
    seconds = (time.perf_counter() - start) / max(1, pad_to, len(runs))
    outcomes = []
    for out, context in zip(outs, contexts, strict=True):
        if isinstance(out, RunMisuse):
            raise out
        outcome = _outcome(out, context, seconds)
        context.check(finished=math.isfinite(outcome[0]))  # a misuse of the run stops the search (RunMisuse)
        outcomes.append(outcome)
    return outcomes


def evaluate_task(task: tuple[Objective, dict[str, Any], Run]) -> Outcome:
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


def _evaluate(objective: Objective, params: Mapping[str, Any], run: RunContext) -> Outcome:
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
        out = exc
    return _outcome(out, run, time.perf_counter() - start)


def _outcome(out: Any, run: RunContext, seconds: float) -> Outcome:
    """What an objective returned (or the exception it failed with) as ``(score, artifact, seconds, error)``."""
    if isinstance(out, Exception):  # privacy rule 5: any failure on the data scores worst and is not retried
        return math.nan, None, seconds, f"{type(out).__name__}: {out}"
    raw, artifact = out if isinstance(out, tuple) else (out, None)
    score = checked_score(raw, out, run)
    if not math.isfinite(score):
        return math.nan, None, seconds, "non-finite score"  # privacy rule 5
    return score, run.released_artifact(artifact), seconds, None


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

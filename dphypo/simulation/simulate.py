"""Semi-real simulation of private searches on landscapes (cached mean/std of a score over a grid).

A visit to grid point λ returns q ~ N(mean_λ, std_λ); a search is judged by the *true* value mean_λ of the λ
it releases (DP-HyPO §4.2). Each repeat runs the same Framework-1 loop as :class:`~dphypo.search.tuner.Tuner`
(:class:`~dphypo.search.loop.SearchLoop`), so every density is projected exactly as in a real search.

Repeats are independent; repeat r of every strategy uses the same random streams for the landscape noise and
for T (common random numbers), which makes strategy differences less noisy without biasing either arm.

Two engines run the same searches through the same :class:`~dphypo.search.loop.SearchLoop`: ``"sequential"`` runs
each repeat as the tuner does (:class:`~dphypo.search.run.SearchRun`, a loop of one search, runs on an executor);
``"batched"`` (:mod:`dphypo.simulation.batched`) advances many repeats in one loop — one GP session and one batched
GP fit per step across those still running (a repeat leaves its batch at its own T) — and releases, repeat by
repeat, the same λ up to floating-point round-off in the GP fit, much faster. Either engine
spreads its work (chunks of repeats, or batches) over an :mod:`executor <dphypo.search.execution>`: a
local process pool by default, or Ray; each repeat uses only its own streams, so the values do not depend on the
executor or the number of workers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from scipy import stats

from dphypo.privacy import RunCountDistribution
from dphypo.privacy.validation import check_positive_int
from dphypo.search.execution import Executor, executor_scope
from dphypo.search.loop import best_trial
from dphypo.search.records import Trial
from dphypo.search.run import SearchRun, SearchStreams
from dphypo.simulation.batched import NOISE, RUN_COUNT, SAMPLING, STRATEGY, repeat_streams, simulate_batched
from dphypo.simulation.landscapes import Landscape
from dphypo.strategies import Direction, Strategy, density_bounds

__all__ = ["ENGINES", "ArmResult", "Engine", "mean_ci95", "simulate", "simulate_once"]

Engine = Literal["sequential", "batched"]
ENGINES: tuple[str, ...] = ("sequential", "batched")


@dataclass(frozen=True)
class ArmResult:
    """The outcome of many simulated searches with one strategy.

    Attributes:
        strategy: Strategy name.
        T: The fixed number of runs, or ``None`` when T was drawn from ``run_count``.
        run_count: Description of T's distribution when it was random.
        mean: Mean true value of the released λ over repeats.
        ci95: 95 % confidence interval of that mean (Student t).
        repeats: Number of independent searches.
        values: Shape ``(repeats,)``, the true value released by each search.
    """

    strategy: str
    T: int | None
    run_count: str | None
    mean: float
    ci95: tuple[float, float]
    repeats: int
    values: np.ndarray

    def to_dict(self) -> dict[str, object]:
        """JSON-ready summary (without the per-repeat values)."""
        return {
            "strategy": self.strategy,
            "T": self.T,
            "run_count": self.run_count,
            "mean": self.mean,
            "ci95": list(self.ci95),
            "repeats": self.repeats,
        }


def mean_ci95(values: np.ndarray) -> tuple[float, tuple[float, float]]:
    """Mean and two-sided 95 % Student-t confidence interval of i.i.d. values."""
    values = np.asarray(values, dtype=np.float64)
    mean = float(values.mean())
    if values.size < 2:
        return mean, (math.nan, math.nan)
    half = float(stats.t.ppf(0.975, values.size - 1) * values.std(ddof=1) / math.sqrt(values.size))
    return mean, (mean - half, mean + half)


def simulate_once(
    landscape: Landscape,
    strategy: Strategy,
    *,
    T: int | None = None,
    run_count: RunCountDistribution | None = None,
    C: float | None = None,
    c: float | None = None,
    seed: int = 0,
    repeat: int = 0,
) -> float:
    """One simulated search; returns the true value of the released λ (the landscape's worst mean if T = 0).

    Args:
        landscape: Mean/std of the score over the grid.
        strategy: Sampling strategy.
        T: Fixed number of runs (research mode: no privacy claim), or
        run_count: the distribution T is drawn from (as a private search does).
        C: Upper density-ratio bound (default: the strategy's own, :func:`~dphypo.strategies.density_bounds`).
        c: Lower density-ratio bound (given together with ``C``).
        seed: Study seed.
        repeat: Repeat number (selects independent streams).

    Returns:
        mean_λ of the released λ.
    """
    C, c = density_bounds(strategy, C, c)
    trials = _sequential_trials(
        landscape, strategy, T=T, run_count=run_count, C=C, c=c, seed=seed, repeat=repeat
    )
    best = best_trial(trials, landscape.direction)  # type: ignore[arg-type]
    return landscape.worst_value if best is None else landscape.true_value(trials[best].grid_index)


def _sequential_trials(
    landscape: Landscape,
    strategy: Strategy,
    *,
    T: int | None,
    run_count: RunCountDistribution | None,
    C: float,
    c: float,
    seed: int,
    repeat: int,
) -> list[Trial]:
    """Every run of one simulated search, made as the tuner makes them (:class:`~dphypo.search.run.SearchRun`)."""
    if (T is None) == (run_count is None):
        raise ValueError("give exactly one of T (fixed) or run_count (random)")
    streams = repeat_streams(seed, repeat)
    if T is None:
        T = run_count.sample(np.random.default_rng(streams[RUN_COUNT]))  # type: ignore[union-attr]
    else:
        check_positive_int("T", T)
    noise = np.random.default_rng(streams[NOISE])
    space = landscape.space

    def objective(params: dict, run: object) -> float:
        return landscape.sample(space.index(params), noise)

    search_streams = SearchStreams(np.random.default_rng(streams[SAMPLING]),
                                   int(streams[STRATEGY].generate_state(1)[0]), run_seed=lambda j: j)
    direction: Direction = landscape.direction  # type: ignore[assignment]
    trials = SearchRun(objective, space, strategy, direction, (C, c), int(T), search_streams).run().trials
    return trials


def _simulate_chunk(job: tuple) -> np.ndarray:
    """:func:`simulate_once` for a chunk of repeats (one executor item); returns shape ``(len(chunk),)``."""
    landscape, strategy, kwargs, repeats = job
    return np.array([simulate_once(landscape, strategy, repeat=r, **kwargs) for r in repeats])


def simulate(
    landscape: Landscape,
    strategies: Sequence[Strategy],
    *,
    repeats: int,
    T: int | None = None,
    run_count: RunCountDistribution | None = None,
    C: float | None = None,
    c: float | None = None,
    seed: int = 0,
    workers: int | None = None,
    engine: Engine = "batched",
    batch: int = 256,
    executor: Executor | str | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[ArmResult]:
    """Many independent simulated searches per strategy.

    Args:
        landscape: The landscape.
        strategies: Strategies to compare (each gets the same repeats' random streams).
        repeats: Independent searches per strategy.
        T: Fixed number of runs, or
        run_count: its distribution.
        C: Upper density-ratio bound for every strategy (default: each strategy's own; uniform search is
            unaffected either way: its density is the prior).
        c: Lower density-ratio bound (given together with ``C``).
        seed: Study seed.
        workers: Processes of the default executor (default: all cores, one torch thread each); 1 runs in this
            process. With ``executor`` given by name: its workers.
        engine: ``"batched"`` (default, as ``dphypo simulate``) or ``"sequential"`` (one :func:`simulate_once`
            per repeat through the tuner's loop); ``"batched"`` runs repeats
            together, each to its own T; :class:`~dphypo.strategies.Uniform` and
            :class:`~dphypo.strategies.GPUCB` only).
            Both release the same λ per repeat, up to round-off in the GP fit.
        batch: Batched engine only: GP searches fitted together, ≥ 1 (a few hundred amortise the per-step
            cost).
        executor: Where the work runs: an :class:`~dphypo.search.execution.Executor` (left open),
            ``"sequential"``, ``"process"`` or ``"ray"`` (created with ``workers`` and closed here), or ``None``: a
            local process pool of ``workers``. The values are the same with every executor.
        progress: Called with the number of searches finished since the last call (counts only).

    Returns:
        One :class:`ArmResult` per strategy.
    """
    check_positive_int("repeats", repeats)
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    density_bounds(strategies[0], C, c) if strategies else None  # both or neither, before any work
    results = []
    with executor_scope(executor, workers=workers) as spread:  # one set of workers for every strategy
        for strategy in strategies:
            bound_C, bound_c = density_bounds(strategy, C, c)
            kwargs: dict[str, Any] = dict(T=T, run_count=run_count, C=bound_C, c=bound_c, seed=seed)
            if engine == "batched":
                values = simulate_batched(
                    landscape, strategy, repeats=repeats, batch=batch, executor=spread, progress=progress, **kwargs
                )
            else:
                values = _simulate_sequential(landscape, strategy, repeats, kwargs, spread, progress)
            mean, ci = mean_ci95(values)
            description = None if run_count is None else repr(run_count)
            results.append(ArmResult(strategy.name, T, description, mean, ci, repeats, values))
    return results


def _simulate_sequential(
    landscape: Landscape, strategy: Strategy, repeats: int, kwargs: dict, executor: Executor,
    progress: Callable[[int], None] | None = None,
) -> np.ndarray:
    """Values of ``repeats`` :func:`simulate_once` calls, in chunks spread by ``executor`` (shape ``(repeats,)``)."""
    size = max(1, repeats // (4 * executor.workers))  # about 4 chunks per worker: balance vs per-item overhead
    jobs = [(landscape, strategy, kwargs, range(s, min(s + size, repeats))) for s in range(0, repeats, size)]
    on_result = None if progress is None else lambda _, values: progress(len(values))
    return np.concatenate(executor.run(_simulate_chunk, jobs, on_result=on_result))

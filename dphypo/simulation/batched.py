"""Batched simulation engine: many independent simulated searches on a landscape, advanced together.

Each repeat is the search :func:`dphypo.simulation.simulate.simulate_once` runs — DP-HyPO Framework 1 (Wang et al.
2023, Framework 1 / Algorithm 3) with the same per-repeat random streams (landscape noise, T, sampling, strategy
seed) — and both engines run it through the same :class:`~dphypo.search.loop.SearchLoop`: the tuner's path is
that loop with one search, this engine is that loop with a batch of searches. At step t every member that still
runs (t < its T; a repeat's path up to step t never depends on its T, so members simply leave the batch when their T
is reached) is updated together: the strategy's batch session (one batched GP fit for GP rules), the projection onto
S_{C,c}(π0) (DP-HyPO eq. 3.1) and the inverse-CDF draw, each member drawing its candidate and its noisy score from
its own streams. A search with C = c = 1 never adapts (every density is the projected prior), so each member draws
its T candidates at once.

A repeat makes the same runs in both engines, up to floating-point round-off between a batch of B and a batch of
one in the GP fit (measured: none changed a path; ``tests/simulation/test_batched.py`` compares path by path and in
distribution). Results do not depend on ``batch`` or ``workers`` beyond that round-off.

Memory: a GP member's posterior state is O(n·min(T, n)) (:mod:`dphypo.strategies.gp.memory`); each job holds at most
:func:`memory_batch` members, so that the jobs running at once fit in a share of the available memory whatever
``batch`` asks for (with 24 GB available, n = 2,500, T = 1,000 and two workers: 74 members per job, not 256).

The strategy's curator-only events (fallbacks, fit warnings) are not recorded: a simulation releases values
only.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import psutil

from dphypo.privacy import RunCountDistribution
from dphypo.privacy.tuning import check_density_bounds
from dphypo.privacy.validation import check_positive_int
from dphypo.search.execution import Executor, executor_scope
from dphypo.search.loop import SearchLoop
from dphypo.simulation.landscapes import Landscape
from dphypo.strategies import Direction, Strategy, best_runs, density_bounds
from dphypo.strategies.base import check_strategy

__all__ = [
    "MEMORY_SHARE",
    "BatchedSimulation",
    "incumbent_distance",
    "memory_batch",
    "release_batch",
    "repeat_streams",
    "run_counts",
    "search_paths",
    "simulate_batched",
    "simulate_many",
]

# Stream ids inside a repeat's SeedSequence (shared with dphypo.simulation.simulate.simulate_once).
NOISE, RUN_COUNT, SAMPLING, STRATEGY = range(4)
#: Repeats per job of a search that never adapts (no GP: only the job overhead matters) ...
_UNIFORM_JOB = 4096
#: ... as long as its (repeats, grid size) densities stay within this many float64 entries (32 MB).
_UNIFORM_JOB_ENTRIES = 1 << 22


#: Share of the available memory the GP sessions of all concurrent jobs may take together (the rest: the landscape,
#: the interpreter and torch of every worker, and other programs).
MEMORY_SHARE = 0.5


def memory_batch(size: int, max_runs: int, workers: int, *, available: int | None = None) -> int:
    """Most GP searches one job may advance together so that ``workers`` concurrent jobs fit in memory.

    Each job gets MEMORY_SHARE·available/workers bytes; a job of B members on a grid of n points whose searches
    make at most T runs peaks at B·8·n·(4·(min(T, 2n) + 1) + 4) bytes plus one fit chunk's temporaries
    (:func:`~dphypo.strategies.gp.memory.job_bytes`), so

        B = ⌊(MEMORY_SHARE·available/workers − chunk) / (8·n·(4·(min(T, 2n) + 1) + 4))⌋, at least 1.

    Args:
        size: Grid points n.
        max_runs: The longest search's T.
        workers: Jobs running at once.
        available: Bytes available (default: ``psutil.virtual_memory().available``).

    Returns:
        B ≥ 1 (one member even when the bound exceeds the memory: a single search cannot be split).
    """
    from dphypo.strategies.gp.memory import factor_bytes, job_bytes

    check_positive_int("workers", workers)
    free = psutil.virtual_memory().available if available is None else int(available)
    budget = MEMORY_SHARE * free / workers - job_bytes(0, size, max_runs)
    return max(1, int(budget // factor_bytes(size, max_runs)))


def repeat_streams(seed: int, repeat: int) -> list[np.random.SeedSequence]:
    """The four independent streams of one repeat: noise, T, sampling, strategy (indexed by the constants)."""
    return [np.random.SeedSequence(seed, spawn_key=(repeat, k)) for k in range(4)]


def run_counts(run_count: RunCountDistribution, seed: int, repeats: int, start: int = 0) -> np.ndarray:
    """T of repeats ``start .. start + repeats − 1``, each drawn from its own stream (as ``simulate_once``).

    Returns:
        int64 array of shape ``(repeats,)``.
    """
    return np.array(
        [run_count.sample(np.random.default_rng(repeat_streams(seed, r)[RUN_COUNT]))
         for r in range(start, start + repeats)],
        dtype=np.int64,
    )


def release_batch(
    indices: np.ndarray, scores: np.ndarray, direction: Direction, lengths: np.ndarray | None = None
) -> np.ndarray:
    """Grid index each search releases (:func:`~dphypo.strategies.base.best_runs`, the order of the tuner), ``(B,)``.

    Best score in ``direction``; a failed (non-finite) run loses to every finished one; ties go to the smaller
    grid index.

    Args:
        indices: Grid indices of the runs, shape ``(B, T)``, T ≥ 1.
        scores: Their scores, shape ``(B, T)``.
        direction: ``"maximize"`` or ``"minimize"``.
        lengths: Shape ``(B,)``, each search's number of runs T_b ≥ 1 (only its first T_b columns count);
            default: all T.

    Returns:
        int64 grid indices, shape ``(B,)``.
    """
    indices = np.asarray(indices)
    positions = best_runs(indices, scores, direction, lengths)
    return np.take_along_axis(indices, positions[..., None], axis=-1)[..., 0]


# ---------------------------------------------------------------------------------------------- searches
def search_paths(
    landscape: Landscape,
    strategy: Strategy,
    T: int | Sequence[int],
    repeats: Sequence[int],
    *,
    C: float,
    c: float,
    seed: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Run the given repeats as one batch.

    Args:
        landscape: Mean/std of the score over the grid.
        strategy: Any strategy: its batch session advances every repeat (a strategy without the batch capability
            runs one session per repeat, :func:`~dphypo.strategies.base.open_batch`).
        T: Number of runs of every repeat, ≥ 1, or one number per repeat (a member leaves the batch after its
            own T runs).
        repeats: Repeat numbers (select each repeat's streams).
        C: Upper density-ratio bound.
        c: Lower density-ratio bound.
        seed: Study seed.

    Returns:
        ``(indices, scores)``: the grid index and noisy score of every run, each of shape
        ``(len(repeats), max T)``; entries after a member's T are -1 and NaN.
    """
    lengths = np.broadcast_to(np.asarray(T, dtype=np.int64), (len(repeats),)).copy()
    if lengths.size and lengths.min() < 1:
        raise ValueError(f"T must be >= 1 for every repeat, got {T!r}")
    streams = [repeat_streams(seed, int(r)) for r in repeats]
    noise = [np.random.default_rng(s[NOISE]) for s in streams]
    loop = SearchLoop(landscape.space, strategy, landscape.direction, (C, c),  # type: ignore[arg-type]
                      strategy_seeds=[int(s[STRATEGY].generate_state(1)[0]) for s in streams],
                      sampling=[np.random.default_rng(s[SAMPLING]) for s in streams])
    mean, std = landscape.mean.ravel(), landscape.std.ravel()
    indices, scores = _empty_paths(lengths)
    members = np.arange(lengths.size)
    if loop.static:  # every density is the same projected prior: each search draws its T candidates at once
        for m, drawn in zip(members, loop.draw(members, lengths), strict=True):
            # Same values as T successive rng.random() / rng.normal(mean_i, std_i) calls of the tuner's loop.
            indices[m, : lengths[m]] = drawn
            scores[m, : lengths[m]] = noise[m].normal(mean[drawn], std[drawn])
        return indices, scores
    for t in range(indices.shape[1]):
        active = members[lengths > t]  # searches that make a run at step t (each leaves at its own T)
        drawn = np.concatenate(loop.draw(active))
        indices[active, t] = drawn
        scores[active, t] = [noise[m].normal(mean[i], std[i]) for m, i in zip(active, drawn, strict=True)]
        loop.observe(active, drawn, scores[active, t])
    return indices, scores


def _empty_paths(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Index and score arrays of shape ``(members, max T)``: -1 and NaN where a member made no run."""
    shape = (lengths.size, int(lengths.max()) if lengths.size else 0)
    return np.full(shape, -1, dtype=np.int64), np.full(shape, np.nan)


def _run_job(job: tuple) -> tuple[np.ndarray, np.ndarray]:
    """One batch of repeats (each with its own T); returns ``(repeats, released grid indices)``."""
    landscape, strategy, lengths, repeats, C, c, seed = job
    indices, scores = search_paths(landscape, strategy, lengths, repeats, C=C, c=c, seed=seed)
    released = release_batch(indices, scores, landscape.direction, np.asarray(lengths))
    return np.asarray(repeats), released


def _jobs(
    landscape: Landscape, strategy: Strategy, counts: np.ndarray, batch: int, C: float, c: float, seed: int,
    workers: int, start: int = 0,
) -> list[tuple]:
    """Batches of repeats with every range of T in each (repeats with T = 0 make no run and need no job).

    Repeats sorted by T are dealt round-robin into at least ``workers`` batches of at most ``batch`` members, so
    each batch holds a similar mix of short and long searches (members leave their batch when their own T is
    reached) and the workers finish together. ``counts[k]`` is the T of repeat ``start + k``; a job names its
    repeats by number.
    """
    runs = np.flatnonzero(counts > 0)
    order = runs[np.argsort(-counts[runs], kind="stable")]
    # A search with C = c = 1 never adapts: no GP, only the job overhead matters (and its (B, n) densities' memory).
    # An adaptive one holds a GP posterior per member: at most what the available memory allows (memory_batch).
    if (C, c) == (1.0, 1.0):
        size = min(_UNIFORM_JOB, max(1, _UNIFORM_JOB_ENTRIES // landscape.size))
    else:
        size = min(batch, memory_batch(landscape.size, int(counts.max()), workers))
    count = min(order.size, max(workers, -(-order.size // size)))
    parts = [order[k::count] for k in range(count)]
    return [(landscape, strategy, counts[part].tolist(), (part + start).tolist(), C, c, seed) for part in parts]


def simulate_batched(
    landscape: Landscape,
    strategy: Strategy,
    *,
    repeats: int,
    T: int | None = None,
    run_count: RunCountDistribution | None = None,
    C: float | None = None,
    c: float | None = None,
    seed: int = 0,
    batch: int = 256,
    workers: int | None = None,
    executor: Executor | str | None = None,
    progress: Callable[[int], None] | None = None,
    start: int = 0,
) -> np.ndarray:
    """True value of the λ released by each of ``repeats`` independent simulated searches.

    The searches are repeats ``start .. start + repeats − 1`` of the study (default: the first ``repeats``); as
    repeat r's streams depend on (seed, r) only, repeats 0..99 then 100..199 give the values of repeats 0..199.
    Repeat r equals ``simulate_once(landscape, strategy, T=T, run_count=run_count, C=C, c=c, seed=seed,
    repeat=r)`` (same streams, same rules; see the module docstring for the round-off caveat).

    Args:
        landscape: The landscape.
        strategy: Any strategy (batched natively when it has the batch capability).
        repeats: Number of searches, ≥ 1.
        T: Fixed number of runs, or
        run_count: its distribution (T drawn per repeat; a batch mixes repeats of different T).
        C: Upper density-ratio bound.
        c: Lower density-ratio bound.
        seed: Study seed.
        batch: GP searches fitted together (members of one batched GP), ≥ 1; at most :func:`memory_batch` are
            (the results do not depend on it).
        workers: Processes of the default executor (default: all cores, one torch thread each, at most one per
            job); 1 runs in this process. With ``executor`` given by name: its workers.
        executor: Where the jobs (batches of repeats) run: an :class:`~dphypo.search.execution.Executor`
            (left open), ``"sequential"``, ``"process"`` or ``"ray"`` (created here and closed), or ``None``: a
            local process pool of ``workers``. The values are the same with every executor.
        progress: Called with the number of searches each finished job held (public counts: simulations run on
            landscapes, not on private data).
        start: Number of the first repeat (≥ 0).

    Returns:
        Shape ``(repeats,)``; the landscape's worst mean for a repeat whose T is 0.
    """
    check_positive_int("repeats", repeats)
    check_positive_int("batch", batch)
    if not isinstance(start, (int, np.integer)) or isinstance(start, bool) or start < 0:
        raise ValueError(f"start must be a non-negative integer, got {start!r}")
    if (T is None) == (run_count is None):
        raise ValueError("give exactly one of T (fixed) or run_count (random)")
    if T is not None:
        check_positive_int("T", T)
    check_strategy(strategy)
    C, c = density_bounds(strategy, C, c)
    check_density_bounds(C, c)
    start = int(start)
    counts = (np.full(repeats, T, dtype=np.int64) if run_count is None
              else run_counts(run_count, seed, repeats, start))
    if executor is None:  # no more processes than searches (each process pays its imports)
        workers = min(workers or os.cpu_count() or 1, max(int(np.count_nonzero(counts)), 1))
    with executor_scope(executor, workers=workers) as spread:
        jobs = _jobs(landscape, strategy, counts, batch, C, c, seed, spread.workers, start)
        done = spread.run(_run_job, jobs, on_result=None if progress is None else
                          lambda _, job_result: progress(len(job_result[0])))
    values = np.full(repeats, landscape.worst_value)
    for members, released in done:
        values[members - start] = landscape.true_values(released)
    return values


@dataclass(frozen=True, eq=False)
class BatchedSimulation:
    """One simulation of :func:`simulate_many`: repeats ``start .. stop − 1`` of a strategy on a landscape.

    Attributes:
        landscape: The landscape.
        strategy: The strategy (projected onto, and run with, its own (C, c): :func:`density_bounds`).
        run_count: The law of T (drawn per repeat from the repeat's own stream).
        seed: Study seed.
        start: First repeat (≥ 0).
        stop: One past the last repeat (> ``start``).
    """

    landscape: Landscape
    strategy: Strategy
    run_count: RunCountDistribution
    seed: int
    start: int
    stop: int

    def __post_init__(self) -> None:
        """Validate eagerly."""
        check_strategy(self.strategy)
        if not (0 <= self.start < self.stop):
            raise ValueError(f"need 0 <= start < stop, got start={self.start!r}, stop={self.stop!r}")


def simulate_many(
    simulations: Sequence[BatchedSimulation], *, executor: Executor, batch: int = 256
) -> list[np.ndarray]:
    """Several batched simulations whose jobs share one executor: each equals its own :func:`simulate_batched`.

    Each simulation is split into as few jobs as memory allows (:func:`memory_batch`), not into one job per worker:
    a batched GP step costs about the same for 50 or 200 members, so the workers are kept busy with whole
    simulations instead, the costliest first (longest-processing-time order by the sum of T, a job's number of GP
    posterior updates), so that the last jobs to finish are short ones. Values are those of
    ``simulate_batched(landscape, strategy, repeats=stop − start, start=start, run_count=run_count, seed=seed)``
    (the same repeats and streams; up to the GP fit's round-off between batch compositions, module docstring).

    Args:
        simulations: The simulations.
        executor: Where the jobs run (left open).
        batch: GP searches fitted together at most (≥ 1).

    Returns:
        One array per simulation, shape ``(stop − start,)``, in order.
    """
    check_positive_int("batch", batch)
    jobs: list[tuple] = []
    owner: list[int] = []
    for k, sim in enumerate(simulations):
        if not isinstance(sim, BatchedSimulation):
            raise ValueError(f"simulations must be BatchedSimulation objects, got {sim!r}")
        C, c = density_bounds(sim.strategy)
        counts = run_counts(sim.run_count, sim.seed, sim.stop - sim.start, sim.start)
        parts = _jobs(sim.landscape, sim.strategy, counts, batch, C, c, sim.seed, 1, sim.start)
        jobs += parts
        owner += [k] * len(parts)
    order = sorted(range(len(jobs)), key=lambda j: -_job_cost(jobs[j]))
    done = executor.run(_run_job, [jobs[j] for j in order])
    out = [np.full(sim.stop - sim.start, sim.landscape.worst_value) for sim in simulations]
    for j, (members, released) in zip(order, done, strict=True):
        sim = simulations[owner[j]]
        out[owner[j]][members - sim.start] = sim.landscape.true_values(released)
    return out


def _job_cost(job: tuple) -> float:
    """A job's relative cost: its number of runs, times 100 when its strategy adapts (a GP update per run)."""
    lengths, C, c = job[2], job[4], job[5]
    return float(sum(lengths)) * (1.0 if (C, c) == (1.0, 1.0) else 100.0)


def incumbent_distance(landscape: Landscape, indices: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Per search: mean unit-cube distance between each GP-driven draw (t ≥ 2) and the best run before it.

    A statistic of how adaptive a strategy is, used to compare engines in distribution (the released value alone
    barely responds to the algorithm at small T).

    Args:
        landscape: The landscape the searches ran on.
        indices: Shape ``(repeats, T)``, grid indices drawn.
        scores: Shape ``(repeats, T)``, observed scores (maximised).

    Returns:
        Shape ``(repeats,)``.
    """
    coords, rows = landscape.space.unit_coordinates, np.arange(indices.shape[0])
    steps = [
        np.linalg.norm(coords[indices[:, t]] - coords[indices[rows, np.argmax(scores[:, :t], axis=1)]], axis=1)
        for t in range(2, indices.shape[1])
    ]
    return np.mean(steps, axis=0)


"""Batched simulation engine: many independent simulated searches on a landscape, advanced together.

Each repeat is the search :func:`dphypo.simulation.simulate.simulate_once` runs — the Framework-1 loop of
:func:`dphypo.search.loop.run_loop` (DP-HyPO, Wang et al. 2023, Framework 1 / Algorithm 3) with the same
per-repeat random streams (landscape noise, T, sampling, strategy seed) — but many repeats are computed as one
batch: one :class:`~dphypo.strategies.GPUCBSession` holds every member, and at step t every member that
still runs (t < its T; a repeat's path up to step t never depends on its T, so members simply leave the batch
when their T is reached) is updated together: one batched GP fit (:mod:`dphypo.strategies.surrogate`), UCB, the
tilted softmax, the projection onto S_{C,c}(π0) (DP-HyPO eq. 3.1, :func:`dphypo.search.loop.projected_density`)
and the inverse-CDF draw (:func:`dphypo.density.draw`) over all members, each member drawing its candidate and
its noisy score from its own streams. Uniform search needs no GP: each repeat's T draws are vectorised.

The tuner's sequential loop uses the same functions on a batch of one, so a repeat makes the same runs in both
engines, up to floating-point round-off between a batch of B and a batch of one in the GP fit (measured: none
changed a path; ``tests/simulation/test_batched.py`` compares path by path and in distribution). Results do not
depend on ``batch`` or ``workers`` beyond that round-off.

The strategy's curator-only events (fallbacks, fit warnings) are not recorded: a simulation releases values
only.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import numpy as np

from dphypo.density import draw
from dphypo.privacy import RunCountDistribution
from dphypo.privacy.tuning import check_density_bounds
from dphypo.search.execution import Executor, executor_scope
from dphypo.search.loop import projected_density
from dphypo.simulation.landscapes import Landscape
from dphypo.strategies import GPUCB, Direction, GPTopSet, Strategy, Uniform, best_runs, density_bounds

__all__ = [
    "incumbent_distance",
    "release_batch",
    "repeat_streams",
    "run_counts",
    "search_paths",
    "simulate_batched",
]

# Stream ids inside a repeat's SeedSequence (shared with dphypo.simulation.simulate.simulate_once).
NOISE, RUN_COUNT, SAMPLING, STRATEGY = range(4)
#: Repeats per job of uniform search (no GP: only the job overhead matters).
_UNIFORM_JOB = 4096


def repeat_streams(seed: int, repeat: int) -> list[np.random.SeedSequence]:
    """The four independent streams of one repeat: noise, T, sampling, strategy (indexed by the constants)."""
    return [np.random.SeedSequence(seed, spawn_key=(repeat, k)) for k in range(4)]


def run_counts(run_count: RunCountDistribution, seed: int, repeats: int) -> np.ndarray:
    """T of every repeat, each drawn from its own stream (as :func:`~dphypo.simulation.simulate.simulate_once`).

    Returns:
        int64 array of shape ``(repeats,)``.
    """
    return np.array(
        [run_count.sample(np.random.default_rng(repeat_streams(seed, r)[RUN_COUNT])) for r in range(repeats)],
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
        strategy: :class:`~dphypo.strategies.Uniform` or :class:`~dphypo.strategies.GPUCB`.
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
    sampling = [np.random.default_rng(s[SAMPLING]) for s in streams]
    if isinstance(strategy, Uniform):
        return _uniform_paths(landscape, lengths, noise, sampling, C, c)
    if isinstance(strategy, GPUCB | GPTopSet):
        strategy_seeds = [int(s[STRATEGY].generate_state(1)[0]) for s in streams]
        return _gpucb_paths(landscape, strategy, lengths, noise, sampling, strategy_seeds, C, c)
    raise ValueError(
        f"strategy must be Uniform or a GP rule (GPUCB, GPTopSet) for the batched engine, got {strategy!r}"
    )



def _uniform_paths(
    landscape: Landscape,
    lengths: np.ndarray,
    noise: list[np.random.Generator],
    sampling: list[np.random.Generator],
    C: float,
    c: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Uniform search: every run draws from the projected prior; one vectorised call per stream and repeat."""
    space = landscape.space
    projected = projected_density(np.asarray(space.prior, dtype=np.float64), space, C, c)
    mean, std = landscape.mean.ravel(), landscape.std.ravel()
    indices, scores = _empty_paths(lengths)
    for m, (noise_rng, sampling_rng) in enumerate(zip(noise, sampling, strict=True)):
        # Same values as T successive rng.random() / rng.normal(mean_i, std_i) calls of the sequential loop.
        T = int(lengths[m])
        indices[m, :T] = draw(projected, sampling_rng.random(T))
        scores[m, :T] = noise_rng.normal(mean[indices[m, :T]], std[indices[m, :T]])
    return indices, scores


def _empty_paths(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Index and score arrays of shape ``(members, max T)``: -1 and NaN where a member made no run."""
    shape = (lengths.size, int(lengths.max()) if lengths.size else 0)
    return np.full(shape, -1, dtype=np.int64), np.full(shape, np.nan)


def _gpucb_paths(
    landscape: Landscape,
    strategy: GPUCB | GPTopSet,
    lengths: np.ndarray,
    noise: list[np.random.Generator],
    sampling: list[np.random.Generator],
    strategy_seeds: list[int],
    C: float,
    c: float,
) -> tuple[np.ndarray, np.ndarray]:
    """GP-UCB (DP-HyPO Algorithm 3) for a batch of repeats: one :class:`GPUCBSession` drives every member."""
    space, members = landscape.space, len(noise)
    session = strategy.start_batch(space, landscape.direction, strategy_seeds)  # type: ignore[arg-type]
    mean, std = landscape.mean.ravel(), landscape.std.ravel()
    indices, scores = _empty_paths(lengths)
    prior = np.asarray(space.prior, dtype=np.float64)
    projected = np.tile(projected_density(prior, space, C, c), (members, 1))
    for t in range(indices.shape[1]):
        active = np.flatnonzero(lengths > t)  # members whose search makes a run at step t
        densities, refitted = session.update(active, indices[active, :t], scores[active, :t])
        if np.any(refitted):  # the others kept their density, so their projection is unchanged
            projected[active[refitted]] = projected_density(densities[refitted], space, C, c)
        uniforms = np.array([sampling[m].random() for m in active])
        indices[active, t] = draw(projected[active], uniforms)
        scores[active, t] = [noise[m].normal(mean[i], std[i]) for m, i in zip(active, indices[active, t], strict=True)]
    return indices, scores


def _run_job(job: tuple) -> tuple[np.ndarray, np.ndarray]:
    """One batch of repeats (each with its own T); returns ``(repeats, released grid indices)``."""
    landscape, strategy, lengths, repeats, C, c, seed = job
    indices, scores = search_paths(landscape, strategy, lengths, repeats, C=C, c=c, seed=seed)
    released = release_batch(indices, scores, landscape.direction, np.asarray(lengths))
    return np.asarray(repeats), released


def _jobs(
    landscape: Landscape, strategy: Strategy, counts: np.ndarray, batch: int, C: float, c: float, seed: int,
    workers: int,
) -> list[tuple]:
    """Batches of repeats with every range of T in each (repeats with T = 0 make no run and need no job).

    Repeats sorted by T are dealt round-robin into at least ``workers`` batches of at most ``batch`` members, so
    each batch holds a similar mix of short and long searches (members leave their batch when their own T is
    reached) and the workers finish together.
    """
    runs = np.flatnonzero(counts > 0)
    order = runs[np.argsort(-counts[runs], kind="stable")]
    size = _UNIFORM_JOB if isinstance(strategy, Uniform) else batch
    count = min(order.size, max(workers, -(-order.size // size)))
    parts = [order[k::count] for k in range(count)]
    return [(landscape, strategy, counts[part].tolist(), part.tolist(), C, c, seed) for part in parts]


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
) -> np.ndarray:
    """True value of the λ released by each of ``repeats`` independent simulated searches.

    Repeat r equals ``simulate_once(landscape, strategy, T=T, run_count=run_count, C=C, c=c, seed=seed,
    repeat=r)`` (same streams, same rules; see the module docstring for the round-off caveat).

    Args:
        landscape: The landscape.
        strategy: :class:`~dphypo.strategies.Uniform` or :class:`~dphypo.strategies.GPUCB`.
        repeats: Number of searches, ≥ 1.
        T: Fixed number of runs, or
        run_count: its distribution (T drawn per repeat; a batch mixes repeats of different T).
        C: Upper density-ratio bound.
        c: Lower density-ratio bound.
        seed: Study seed.
        batch: GP searches fitted together (members of one batched GP), ≥ 1.
        workers: Processes of the default executor (default: all cores, one torch thread each, at most one per
            job); 1 runs in this process. With ``executor`` given by name: its workers.
        executor: Where the jobs (batches of repeats) run: an :class:`~dphypo.search.execution.Executor`
            (left open), ``"sequential"``, ``"process"`` or ``"ray"`` (created here and closed), or ``None``: a
            local process pool of ``workers``. The values are the same with every executor.
        progress: Called with the number of searches each finished job held (public counts: simulations run on
            landscapes, not on private data).

    Returns:
        Shape ``(repeats,)``; the landscape's worst mean for a repeat whose T is 0.
    """
    if not (isinstance(repeats, int) and repeats >= 1):
        raise ValueError(f"repeats must be a positive integer, got {repeats!r}")
    if not (isinstance(batch, int) and batch >= 1):
        raise ValueError(f"batch must be a positive integer, got {batch!r}")
    if not isinstance(strategy, Uniform | GPUCB | GPTopSet):
        raise ValueError(f"strategy must be Uniform or a GP rule (GPUCB, GPTopSet) for the batched engine, got "
                         f"{strategy!r}")
    if (T is None) == (run_count is None):
        raise ValueError("give exactly one of T (fixed) or run_count (random)")
    if T is not None and not (isinstance(T, int | np.integer) and T >= 1):
        raise ValueError(f"T must be a positive integer, got {T!r}")
    C, c = density_bounds(strategy, C, c)
    check_density_bounds(C, c)
    counts = np.full(repeats, T, dtype=np.int64) if run_count is None else run_counts(run_count, seed, repeats)
    if executor is None:  # no more processes than searches (each process pays its imports)
        workers = min(workers or os.cpu_count() or 1, max(int(np.count_nonzero(counts)), 1))
    with executor_scope(executor, workers=workers) as spread:
        jobs = _jobs(landscape, strategy, counts, batch, C, c, seed, spread.workers)
        done = spread.run(_run_job, jobs, on_result=None if progress is None else
                          lambda _, job_result: progress(len(job_result[0])))
    values = np.full(repeats, landscape.worst_value)
    for members, released in done:
        values[members] = landscape.true_values(released)
    return values


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


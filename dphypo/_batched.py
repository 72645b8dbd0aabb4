"""Batched simulation engine: many independent simulated searches on a landscape, advanced together.

Each repeat is the search :func:`dphypo.simulate.simulate_once` runs — the Framework-1 loop of
:func:`dphypo.tuner.run_loop` (DP-HyPO, Wang et al. 2023, Framework 1 / Algorithm 3) with the same per-repeat
random streams (landscape noise, T, sampling, strategy seed) — but many repeats are computed as one batch: at
step t every member that still runs (t < its T; a repeat's path up to step t never depends on its T, so
members simply leave the batch when their T is reached) gets its GP fitted in one batched BoTorch fit
(:mod:`dphypo._batched_gp`), UCB,
the tilted softmax and the projection onto S_{C,c}(π0) (DP-HyPO eq. 3.1) are vectorised over members, and each
member draws its candidate and its noisy score from its own streams. Uniform search needs no GP: each repeat's
T draws are vectorised.

Because the streams and every decision rule are those of the sequential loop (GP-UCB's fallbacks to the
previous density or the prior, the projection, the inverse-CDF draw, the release order
:func:`dphypo.tuner.better`), a repeat releases the same grid point in both engines, up to floating-point
round-off in the GP fit (measured: the fitted hyperparameters agree to ~1e-8 relative; see
``tests/test_batched.py`` for the path-by-path and the two-sample comparisons). Results do not depend on
``batch`` or ``workers`` beyond that round-off.

The strategy's curator-only events (fallbacks, fit warnings) are not recorded: a simulation releases values
only.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from dphypo.density import _BRACKET_TOL, MAX_SPREAD, _check_bounds, project, validate_prior
from dphypo.executors import Executor, executor_scope
from dphypo.landscapes import Landscape
from dphypo.privacy import RunCountDistribution
from dphypo.strategies import GPUCB, Direction, Strategy, Uniform, _step_seed

__all__ = [
    "in_bounded_set_batch",
    "project_batch",
    "release_batch",
    "repeat_streams",
    "run_counts",
    "search_paths",
    "simulate_batched",
    "tilted_softmax_batch",
    "ucb_scores_batch",
]

# Stream ids inside a repeat's SeedSequence (shared with dphypo.simulate.simulate_once).
NOISE, RUN_COUNT, SAMPLING, STRATEGY = range(4)
#: Repeats per job of uniform search (no GP: only the job overhead matters).
_UNIFORM_JOB = 4096


def repeat_streams(seed: int, repeat: int) -> list[np.random.SeedSequence]:
    """The four independent streams of one repeat: noise, T, sampling, strategy (indexed by the constants)."""
    return [np.random.SeedSequence(seed, spawn_key=(repeat, k)) for k in range(4)]


def run_counts(run_count: RunCountDistribution, seed: int, repeats: int) -> np.ndarray:
    """T of every repeat, each drawn from its repeat's own stream (as :func:`~dphypo.simulate.simulate_once`).

    Returns:
        int64 array of shape ``(repeats,)``.
    """
    return np.array(
        [run_count.sample(np.random.default_rng(repeat_streams(seed, r)[RUN_COUNT])) for r in range(repeats)],
        dtype=np.int64,
    )


# ------------------------------------------------------------------------------------------ projection
def project_batch(densities: np.ndarray, prior: np.ndarray, C: float, c: float) -> np.ndarray:
    """Row-wise :func:`dphypo.density.project`: Euclidean projection onto S_{C,c}(π0) (DP-HyPO eq. 3.1).

    The same algorithm, vectorised over rows: shift each row by its upper median, sort its 2n breakpoints
    p − C·π0 and p − c·π0, find the segment where Σ clip(p − τ, c·π0, C·π0) crosses 1 with prefix sums, solve
    τ in closed form from that segment's free set, then spread the rounding residual as ``project`` does. Rows
    whose bracket is distrusted (|Σf − 1| > 1e-9, extreme inputs only) are projected by ``project`` itself.

    Args:
        densities: Shape ``(B, n)``, finite; each row's spread max − min at most ``MAX_SPREAD``.
        prior: π0, shape ``(n,)``, strictly positive, summing to 1.
        C: Upper ratio bound, ≥ 1.
        c: Lower ratio bound, 0 < c ≤ 1.

    Returns:
        Shape ``(B, n)``: row b equals ``project(densities[b], prior, C, c)`` up to a few ulps.
    """
    p = np.array(densities, dtype=np.float64)
    if p.ndim != 2 or p.shape[1] == 0 or not np.all(np.isfinite(p)):
        raise ValueError(f"densities must be a finite (B, n) array, got shape {p.shape!r}")
    pi0 = validate_prior(prior, (p.shape[1],))
    C, c = _check_bounds(C, c)
    if c == C:  # S is the single point π0
        return np.tile(pi0, (p.shape[0], 1))
    if p.shape[0] == 0:
        return p
    spread = p.max(axis=1) - p.min(axis=1)
    if not np.all(spread <= MAX_SPREAD):
        raise ValueError(f"each density's spread max - min must be <= {MAX_SPREAD:g}; rescale it")
    half = p.shape[1] // 2
    centred = p - np.partition(p, half, axis=1)[:, half : half + 1]
    lo, hi = c * pi0, C * pi0
    f = _project_exact_batch(centred, lo, hi)
    distrusted = np.abs(1.0 - f.sum(axis=1)) > _BRACKET_TOL
    f = _remove_drift_batch(f, lo, hi)
    for row in np.flatnonzero(distrusted):
        f[row] = project(p[row], pi0, C, c)
    return f


def _project_exact_batch(p: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``density._project_exact`` on every row of the centred densities ``p`` (shape ``(B, n)``)."""
    rows, n = p.shape
    upper, lower = p - hi, p - lo  # coordinate i is at hi for τ ≤ upper_i and at lo for τ ≥ lower_i
    breaks = np.concatenate((upper, lower), axis=1)
    order = np.argsort(breaks, axis=1)
    sorted_breaks = np.take_along_axis(breaks, order, axis=1)
    n_free = 2 * np.cumsum(order[:, :-1] < n, axis=1) - np.arange(1, 2 * n)
    mass = np.empty((rows, 2 * n))
    mass[:, 0] = hi.sum()
    np.cumsum(n_free * np.diff(sorted_breaks, axis=1), axis=1, out=mass[:, 1:])
    mass[:, 1:] = mass[:, :1] - mass[:, 1:]
    # mass is non-increasing (a running sum of non-negative terms), so counting equals searchsorted.
    j = np.count_nonzero(mass > 1.0, axis=1)
    t0 = sorted_breaks[np.arange(rows), np.maximum(j - 1, 0)]
    t1 = sorted_breaks[np.arange(rows), np.minimum(j, 2 * n - 1)]
    edge = (j == 0) | (j == 2 * n)  # everything at hi (C = 1) or at lo (c = 1), up to round-off
    t_edge = np.where(j == 0, sorted_breaks[:, 0], sorted_breaks[:, -1])
    at_hi = upper >= t1[:, None]
    at_lo = (lower <= t0[:, None]) & ~at_hi
    free = ~(at_hi | at_lo)
    count = np.count_nonzero(free, axis=1)
    degenerate = edge | (count == 0) | (t0 == t1)
    safe = np.maximum(count, 1)
    # τ = m + τ_rel, m the mean of the free p's, as density._solve_in_segment (keeps f's relative accuracy).
    m = np.sum(p, axis=1, where=free) / safe
    shifted = p - m[:, None]
    fixed = np.sum(np.broadcast_to(hi, p.shape), axis=1, where=at_hi)
    fixed += np.sum(np.broadcast_to(lo, p.shape), axis=1, where=at_lo)
    tau_rel = (np.sum(shifted, axis=1, where=free) + fixed - 1.0) / safe
    tau_rel = np.minimum(np.maximum(tau_rel, t0 - m), t1 - m)
    f = np.clip(shifted - tau_rel[:, None], lo, hi)
    t_clip = np.where(edge, t_edge, t0)
    f[degenerate] = np.clip(p[degenerate] - t_clip[degenerate, None], lo, hi)
    return f


def _remove_drift_batch(f: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``density._remove_drift`` on every row: spread 1 − Σf without crossing a bound."""
    f = np.clip(f, lo, hi)
    residual = 1.0 - f.sum(axis=1)
    weights = np.minimum(np.where(residual[:, None] > 0, hi - f, f - lo), f)
    total = weights.sum(axis=1)
    move = (residual != 0.0) & (total > 0)
    if np.any(move):
        step = residual[move, None] * (
            weights[move] / np.maximum(total[move], np.abs(residual[move]))[:, None]
        )
        f[move] = np.clip(f[move] + step, lo, hi)
    return f


def in_bounded_set_batch(
    f: np.ndarray, prior: np.ndarray, C: float, c: float, atol: float = 1e-12
) -> np.ndarray:
    """Row-wise :func:`dphypo.density.in_bounded_set` of ``f`` (shape ``(B, n)``); returns shape ``(B,)``."""
    pi0 = validate_prior(prior)
    within = np.all(f >= c * pi0 - atol, axis=1) & np.all(f <= C * pi0 + atol, axis=1)
    return within & np.all(np.isfinite(f), axis=1) & (np.abs(f.sum(axis=1) - 1.0) <= atol)


def _checked_projection(densities: np.ndarray, prior: np.ndarray, C: float, c: float) -> np.ndarray:
    """Project and verify every row (privacy rule 3, as :func:`dphypo.tuner.projected_density`)."""
    projected = project_batch(densities, prior, C, c)
    if not np.all(in_bounded_set_batch(projected, prior, C, c)):
        raise RuntimeError("projection produced a density outside S_{C,c}; refusing to sample from it")
    return projected


def _projected_prior(prior: np.ndarray, C: float, c: float) -> np.ndarray:
    """The first density of every search, projected by ``project`` itself (bit-identical to the tuner's)."""
    projected = project(prior, prior, C, c)
    if not np.all(in_bounded_set_batch(projected[None, :], prior, C, c)):
        raise RuntimeError("projection produced a density outside S_{C,c}; refusing to sample from it")
    return projected


# ------------------------------------------------------------------------------------------- GP-UCB rules
def ucb_scores_batch(
    mean: np.ndarray, std: np.ndarray, loc: np.ndarray, scale: np.ndarray, tau: float, kind: str
) -> np.ndarray:
    """Row-wise :func:`dphypo.strategies.ucb_scores`: s = μ + τσ in the requested scale.

    Args:
        mean: Posterior means, shape ``(B, n)``.
        std: Posterior standard deviations, shape ``(B, n)``.
        loc: Mean of each row's observed scores, shape ``(B,)``.
        scale: Their sample standard deviation, shape ``(B,)``.
        tau: Exploration weight τ ≥ 0.
        kind: The score scale, ``"raw"``, ``"standardized"`` or ``"range"``.

    Returns:
        Shape ``(B, n)``.
    """
    if kind == "standardized":
        return (mean - loc[:, None]) / scale[:, None] + tau * std / scale[:, None]
    s = mean + tau * std
    if kind == "raw":
        return s
    if kind == "range":
        low, spread = s.min(axis=1, keepdims=True), np.ptp(s, axis=1, keepdims=True)
        flat = ~(spread > 0)
        return np.where(flat, 0.0, (s - low) / np.where(flat, 1.0, spread))
    raise ValueError(f"kind must be 'raw', 'standardized' or 'range', got {kind!r}")


def tilted_softmax_batch(s: np.ndarray, beta: float, prior: np.ndarray) -> np.ndarray:
    """Row-wise :func:`dphypo.strategies.tilted_softmax`: π ∝ π0·exp(β s) (DP-HyPO Alg. 3), ``(B, n)``."""
    if not np.all(np.isfinite(s)):
        raise ValueError("s must be finite")
    support = prior > 0
    top = np.max(np.where(support, s, -np.inf), axis=1, keepdims=True)
    weights = np.where(support, prior * np.exp(np.minimum(beta * (s - top), 0.0)), 0.0)
    return weights / weights.sum(axis=1, keepdims=True)


def _oriented(scores: np.ndarray, direction: Direction) -> np.ndarray:
    """Row-wise :func:`dphypo.strategies.oriented_scores`: higher is better, failed runs imputed worst."""
    utilities = -scores if direction == "minimize" else scores.copy()
    bad = ~np.isfinite(utilities)
    if np.any(bad):
        worst = np.min(np.where(bad, np.inf, utilities), axis=1)
        utilities = np.where(bad, worst[:, None], utilities)
        utilities[np.all(bad, axis=1)] = np.nan
    return utilities


def _draw_batch(densities: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
    """Row-wise :func:`dphypo._loop._draw` with the given uniforms: inverse CDF, shape ``(B,)``."""
    cdf = np.cumsum(densities, axis=1)
    # cdf is non-decreasing, so counting entries ≤ x is searchsorted(cdf, x, side="right").
    found = np.count_nonzero(cdf <= (uniforms * cdf[:, -1])[:, None], axis=1)
    return np.minimum(found, densities.shape[1] - 1)


def release_batch(
    indices: np.ndarray, scores: np.ndarray, direction: Direction, lengths: np.ndarray | None = None
) -> np.ndarray:
    """Grid index each search releases under :func:`dphypo.tuner.better`, shape ``(B,)``.

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
    oriented = scores if direction == "maximize" else -scores
    oriented = np.where(np.isfinite(scores), oriented, -np.inf)
    ran = np.ones(scores.shape, dtype=bool)
    if lengths is not None:
        ran = np.arange(scores.shape[1]) < np.asarray(lengths)[:, None]
        oriented = np.where(ran, oriented, -np.inf)
    tied = ran & (oriented == oriented.max(axis=1, keepdims=True))
    return np.where(tied, indices, np.iinfo(np.int64).max).min(axis=1)


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
    if isinstance(strategy, GPUCB):
        strategy_seeds = [int(s[STRATEGY].generate_state(1)[0]) for s in streams]
        return _gpucb_paths(landscape, strategy, lengths, noise, sampling, strategy_seeds, C, c)
    raise ValueError(f"strategy must be Uniform or GPUCB for the batched engine, got {strategy!r}")


def _uniform_paths(
    landscape: Landscape,
    lengths: np.ndarray,
    noise: list[np.random.Generator],
    sampling: list[np.random.Generator],
    C: float,
    c: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Uniform search: every run draws from the projected prior; one vectorised call per stream and repeat."""
    prior = np.asarray(landscape.space.prior, dtype=np.float64)
    cdf = np.cumsum(_projected_prior(prior, C, c))
    mean, std = landscape.mean.ravel(), landscape.std.ravel()
    indices, scores = _empty_paths(lengths)
    for m, (noise_rng, sampling_rng) in enumerate(zip(noise, sampling, strict=True)):
        # Same values as T successive rng.random() / rng.normal(mean_i, std_i) calls of the sequential loop.
        T = int(lengths[m])
        found = np.searchsorted(cdf, sampling_rng.random(T) * cdf[-1], side="right")
        indices[m, :T] = np.minimum(found, cdf.size - 1)
        scores[m, :T] = noise_rng.normal(mean[indices[m, :T]], std[indices[m, :T]])
    return indices, scores


def _empty_paths(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Index and score arrays of shape ``(members, max T)``: -1 and NaN where a member made no run."""
    shape = (lengths.size, int(lengths.max()) if lengths.size else 0)
    return np.full(shape, -1, dtype=np.int64), np.full(shape, np.nan)


def _gpucb_paths(
    landscape: Landscape,
    strategy: GPUCB,
    lengths: np.ndarray,
    noise: list[np.random.Generator],
    sampling: list[np.random.Generator],
    strategy_seeds: list[int],
    C: float,
    c: float,
) -> tuple[np.ndarray, np.ndarray]:
    """GP-UCB (DP-HyPO Algorithm 3) for a batch of repeats, with the fallbacks of ``GPUCBSession.density``."""
    from dphypo._batched_gp import GridFactors, fit_surrogate_batch

    space, members = landscape.space, len(noise)
    prior = np.asarray(space.prior, dtype=np.float64)
    factors = GridFactors(space.unit_coordinates)
    mean, std = landscape.mean.ravel(), landscape.std.ravel()
    indices, scores = _empty_paths(lengths)
    # The unprojected density of the last step (a fallback reuses it) and its projection.
    density = np.tile(prior, (members, 1))
    projected = np.tile(_projected_prior(prior, C, c), (members, 1))
    for t in range(indices.shape[1]):
        active = np.flatnonzero(lengths > t)  # members whose search makes a run at step t
        # t = 0: the prior; t = 1: one observation cannot be fitted, so the previous density (prior) is kept.
        if t >= 2:
            utilities = _oriented(scores[active, :t], landscape.direction)  # type: ignore[arg-type]
            finite = np.all(np.isfinite(utilities), axis=1)
            fittable = active[finite]
            seeds = np.array([_step_seed(strategy_seeds[m], t) for m in fittable], dtype=np.int64)
            fit = fit_surrogate_batch(factors, indices[fittable, :t], utilities[finite], seeds=seeds)
            updated = fittable[fit.ok]
            if updated.size:
                s = ucb_scores_batch(
                    fit.mean[fit.ok],
                    fit.std[fit.ok],
                    fit.score_loc[fit.ok],
                    fit.score_scale[fit.ok],
                    strategy.tau,
                    strategy.scale,
                )
                density[updated] = tilted_softmax_batch(s, strategy.beta, prior)
                projected[updated] = _checked_projection(density[updated], prior, C, c)
        uniforms = np.array([sampling[m].random() for m in active])
        indices[active, t] = _draw_batch(projected[active], uniforms)
        scores[active, t] = [noise[m].normal(mean[i], std[i]) for m, i in zip(active, indices[active, t], strict=True)]
    return indices, scores


def _run_job(job: tuple) -> tuple[np.ndarray, np.ndarray]:
    """One batch of repeats (each with its own T); returns ``(repeats, released grid indices)``."""
    landscape, strategy, lengths, repeats, C, c, seed = job
    indices, scores = search_paths(landscape, strategy, lengths, repeats, C=C, c=c, seed=seed)
    released = release_batch(indices, scores, landscape.direction, np.asarray(lengths))  # type: ignore[arg-type]
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
    C: float = 1.0,
    c: float = 1.0,
    seed: int = 0,
    batch: int = 256,
    workers: int | None = None,
    executor: Executor | str | None = None,
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
        executor: Where the jobs (batches of repeats) run: an :class:`~dphypo.executors.Executor`
            (left open), ``"sequential"``, ``"process"`` or ``"ray"`` (created here and closed), or ``None``: a
            local process pool of ``workers``. The values are the same with every executor.

    Returns:
        Shape ``(repeats,)``; the landscape's worst mean for a repeat whose T is 0.
    """
    if not (isinstance(repeats, int) and repeats >= 1):
        raise ValueError(f"repeats must be a positive integer, got {repeats!r}")
    if not (isinstance(batch, int) and batch >= 1):
        raise ValueError(f"batch must be a positive integer, got {batch!r}")
    if not isinstance(strategy, Uniform | GPUCB):
        raise ValueError(f"strategy must be Uniform or GPUCB for the batched engine, got {strategy!r}")
    if (T is None) == (run_count is None):
        raise ValueError("give exactly one of T (fixed) or run_count (random)")
    if T is not None and not (isinstance(T, int | np.integer) and T >= 1):
        raise ValueError(f"T must be a positive integer, got {T!r}")
    _check_bounds(C, c)
    counts = np.full(repeats, T, dtype=np.int64) if T is not None else run_counts(run_count, seed, repeats)
    if executor is None:  # no more processes than searches (each process pays its imports)
        workers = min(workers or os.cpu_count() or 1, max(int(np.count_nonzero(counts)), 1))
    with executor_scope(executor, workers=workers) as spread:
        jobs = _jobs(landscape, strategy, counts, batch, C, c, seed, spread.workers)
        done = spread.run(_run_job, jobs)
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


"""Time the batched simulation engine against the sequential tuner loop (GP-UCB, T = 20, 2,500-point grid).

Run: ``OMP_NUM_THREADS=1 python benchmarks/simulate.py [--searches 500] [--sequential 4] [--workers 2]``
     ``OMP_NUM_THREADS=1 python benchmarks/simulate.py --compare 600 [--workers 2]``  (distribution check)
     ``OMP_NUM_THREADS=1 python benchmarks/simulate.py --random-T 400 [--workers 2]``  (batching with random T)

Timing: synthetic smooth bump on a 50 x 50 grid (lr 1e-4..1 log x clip 0.1..5 linear), GP-UCB (τ = 0.1, β = 1,
standardized), C = 2, c = 0.75 (the paper's values), fixed T = 20. The batched engine runs ``--searches``
searches with ``--workers`` processes (wall time, process start-up included). The sequential loop runs
``--sequential`` searches in this process after a warm-up; its time for ``--workers`` processes is
extrapolated assuming perfect scaling (which favours the sequential loop). Both are extrapolated linearly to
10,000 searches. The repeats both engines ran are compared: the released value should be identical. The
machine is shared: the load average (``os.getloadavg``) is printed beside every number.

``--random-T N``: N GP searches with geometric T (E[T] = 20) on the shipped digits landscape, batched two ways:
repeats grouped by equal T (the engine before session 2) and repeats of every T mixed in one batch, members
leaving it at their own T (now). Prints both wall times, their ratio, and both means (they must be equal).

``--compare N``: the two-sample comparison of ``tests/simulation/test_batched.py`` with larger samples (N sequential
searches in a pool of ``--workers``, 10 N batched ones, independent seeds), against the unchanged batched
engine and two deliberately changed algorithms (projection skipped, β × 10). Prints each statistic's mean per
arm, the Welch z and p-value, and the KS p-value on released values.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np
from scipy import stats

from dphypo.simulation.batched import incumbent_distance, release_batch, search_paths, simulate_batched
from dphypo.simulation.landscapes import Landscape
from dphypo.simulation.simulate import _sequential_trials, simulate
from dphypo.simulation.synthetic import smooth_landscape
from dphypo.strategies import GPUCB

TIMED_T, TIMED_C, TIMED_c = 20, 2.0, 0.75
TARGET_SEARCHES = 10_000


def load() -> str:
    """The 1-minute load average, for printing beside a timing."""
    return f"load {os.getloadavg()[0]:.2f}"


def timing_landscape() -> Landscape:
    """Smooth bump on the 50 x 50 grid (2,500 points)."""
    axes = {"lr": np.geomspace(1e-4, 1.0, 50), "clip": np.linspace(0.1, 5.0, 50)}
    return smooth_landscape(axes, {"lr": "log", "clip": "linear"})


def cpu_seconds() -> float:
    """CPU time of this process and of its reaped children (pool workers), user + system."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def run_timing(args: argparse.Namespace) -> None:
    land, strategy = timing_landscape(), GPUCB()
    kwargs = dict(T=TIMED_T, C=TIMED_C, c=TIMED_c, seed=args.seed)
    print(
        f"GP-UCB {strategy}, T={TIMED_T}, grid {land.size} points, C={TIMED_C}, c={TIMED_c}; "
        f"{os.cpu_count()} cores; {load()}"
    )

    print(f"batched: {args.searches} searches, batch {args.batch}, {args.workers} process(es) ... ({load()})")
    start, cpu = time.perf_counter(), cpu_seconds()
    batched = simulate_batched(
        land, strategy, repeats=args.searches, batch=args.batch, workers=args.workers, **kwargs
    )
    batched_wall, batched_cpu = time.perf_counter() - start, cpu_seconds() - cpu
    per_batched = batched_wall / args.searches
    print(
        f"  wall {batched_wall:.1f} s = {per_batched * 1e3:.1f} ms/search; "
        f"{TARGET_SEARCHES} searches ≈ {per_batched * TARGET_SEARCHES:.0f} s ({load()})"
    )
    idle = batched_cpu / args.searches * TARGET_SEARCHES / args.workers
    print(
        f"  CPU {batched_cpu / args.searches * 1e3:.1f} ms/search (all processes, start-up included); "
        f"on an idle machine {TARGET_SEARCHES} searches ≈ {idle:.0f} s"
    )

    # The tuner's own path, one search at a time (engine="sequential"); before issue #21 this arm ran the batched
    # engine on a batch of --sequential searches, which understated the batched speed-up about 2.6x.
    print(f"sequential (the tuner's loop): {args.sequential} searches in 1 process after a warm-up ... ({load()})")
    simulate(land, [strategy], repeats=1, T=3, C=TIMED_C, c=TIMED_c, seed=args.seed + 1, workers=1,
             engine="sequential")
    start, cpu = time.perf_counter(), cpu_seconds()
    sequential = simulate(land, [strategy], repeats=args.sequential, workers=1, engine="sequential",
                          **kwargs)[0].values
    per_sequential = (time.perf_counter() - start) / args.sequential
    sequential_cpu = (cpu_seconds() - cpu) / args.sequential
    per_sequential_pool = per_sequential / args.workers
    print(
        f"  {per_sequential:.2f} s/search in 1 process (CPU {sequential_cpu:.2f} s); with {args.workers} "
        f"processes (ideal) {per_sequential_pool:.2f} s/search; {TARGET_SEARCHES} searches ≈ "
        f"{per_sequential_pool * TARGET_SEARCHES:.0f} s ({load()})"
    )

    same = int(np.sum(batched[: args.sequential] == sequential))
    print(
        f"ratio batched/sequential (wall s/search, {args.workers} processes each): "
        f"{per_batched / per_sequential_pool:.4f} (speed-up {per_sequential_pool / per_batched:.0f}x); "
        f"CPU per search: {batched_cpu / args.searches / sequential_cpu:.4f}"
    )
    print(f"released value identical in {same}/{args.sequential} repeats run by both engines")


# ------------------------------------------------------------------------------------------ distribution
def tilted_plane(size: int = 6, noise: float = 0.01) -> Landscape:
    """mean = 0.2 + 0.3 u + 0.2 v on a size x size unit grid (as tests/simulation/test_batched.py)."""
    u = np.linspace(0.0, 1.0, size)
    mean = 0.2 + 0.3 * u[:, None] + 0.2 * u[None, :]
    return Landscape.from_axes(
        mean, np.full(mean.shape, noise), {"u": u, "v": u}, {"u": "linear", "v": "linear"}
    )


COMPARE_STRATEGY, COMPARE_T, COMPARE_C, COMPARE_c = GPUCB(tau=0.1, beta=4.0), 5, 3.0, 1.0 / 3.0


def _sequential_path(repeat: int) -> tuple[list[int], list[float]]:
    trials = _sequential_trials(
        tilted_plane(),
        COMPARE_STRATEGY,
        T=COMPARE_T,
        run_count=None,
        C=COMPARE_C,
        c=COMPARE_c,
        seed=11,
        repeat=repeat,
    )
    return [t.grid_index for t in trials], [t.score for t in trials]


def run_compare(args: argparse.Namespace) -> None:
    land, n = tilted_plane(), args.compare
    print(f"sequential arm: {n} searches, {args.workers} processes ... ({load()})")
    start = time.perf_counter()
    with ProcessPoolExecutor(args.workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        paths = list(pool.map(_sequential_path, range(n), chunksize=max(1, n // (8 * args.workers))))
    reference = (np.array([p[0] for p in paths]), np.array([p[1] for p in paths]))
    print(f"  {time.perf_counter() - start:.0f} s ({load()})")
    arms = {
        "batched (unchanged)": (COMPARE_STRATEGY, COMPARE_C, COMPARE_c),
        "batched, projection skipped": (COMPARE_STRATEGY, 1e6, 1e-6),
        "batched, beta x 10": (GPUCB(tau=0.1, beta=10 * COMPARE_STRATEGY.beta), COMPARE_C, COMPARE_c),
    }
    ref_released = land.true_values(release_batch(*reference, land.direction))  # type: ignore[arg-type]
    ref_distance = incumbent_distance(land, *reference)
    print(
        f"sequential: released mean {ref_released.mean():.4f}, incumbent distance {ref_distance.mean():.4f}"
    )
    for name, (strategy, C, c) in arms.items():
        indices, scores = search_paths(land, strategy, COMPARE_T, range(10 * n), C=C, c=c, seed=12)
        released = land.true_values(release_batch(indices, scores, land.direction))  # type: ignore[arg-type]
        distance = incumbent_distance(land, indices, scores)
        line = [f"{name} ({10 * n} searches)"]
        for label, a, b in (("released", ref_released, released), ("distance", ref_distance, distance)):
            test = stats.ttest_ind(a, b, equal_var=False)
            line.append(f"{label} {b.mean():.4f} (z {-test.statistic:+.2f}, p {test.pvalue:.2g})")
        line.append(f"released KS p {stats.ks_2samp(ref_released, released).pvalue:.2g}")
        print("  " + "; ".join(line))


def _jobs_grouped_by_T(
    landscape: Landscape, strategy: GPUCB, counts: np.ndarray, batch: int, C: float, c: float, seed: int,
    workers: int,
) -> list[tuple]:
    """The previous batching: one batch per distinct T (the engine still accepts it: lengths are all equal)."""
    jobs = []
    for T in sorted(set(counts.tolist()) - {0}, reverse=True):
        repeats = np.flatnonzero(counts == T)
        for start in range(0, repeats.size, batch):
            part = repeats[start : start + batch]
            jobs.append((landscape, strategy, [int(T)] * part.size, part.tolist(), C, c, seed))
    return jobs


def run_random_T(args: argparse.Namespace) -> None:
    import dphypo.simulation.batched as batched
    from dphypo.privacy import geometric
    from dphypo.simulation.synthetic import resolve_landscape

    land = resolve_landscape("landscapes/digits_mlp_sigma1.7673.npz")
    mixed = batched._jobs
    seconds, means = {}, {}
    for name, jobs in (("grouped by T", _jobs_grouped_by_T), ("mixed T", mixed)):
        batched._jobs = jobs
        start = time.perf_counter()
        values = simulate_batched(land, GPUCB(), repeats=args.random_T, run_count=geometric(0.05), C=TIMED_C,
                                  c=TIMED_c, seed=args.seed, workers=args.workers, batch=args.batch)
        seconds[name], means[name] = time.perf_counter() - start, float(values.mean())
        print(f"{name:>13}: {seconds[name]:6.1f} s, mean released value {means[name]:.4f}  [{load()}]")
    batched._jobs = mixed
    print(f"mixed-T batching is {seconds['grouped by T'] / seconds['mixed T']:.2f}x faster; "
          f"same values: {means['grouped by T'] == means['mixed T']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--searches", type=int, default=500, help="Batched GP searches to time.")
    parser.add_argument("--sequential", type=int, default=4, help="Sequential GP searches to time.")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--batch", type=int, default=256, help="Members of one batched GP.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--compare", type=int, default=0, help="Run the distribution check with N sequential."
    )
    parser.add_argument("--random-T", type=int, default=0, help="Time N searches with geometric T, two batchings.")
    args = parser.parse_args()
    if args.random_T:
        run_random_T(args)
    elif args.compare:
        run_compare(args)
    else:
        run_timing(args)


if __name__ == "__main__":
    main()

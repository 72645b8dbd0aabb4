"""Time the projection onto S_{C,c}(π0): exact (sort) vs bisection vs cvxpy, on realistic softmax inputs.

Run: ``OMP_NUM_THREADS=1 python benchmarks/projection.py [--seeds 3] [--cvxpy-repeats 3]``.

Inputs are p = softmax(β·z) with z ~ N(0, 1) (a standardised UCB on the grid) for β ∈ {1, 10}, on the
paper's grid sizes n = 320 (MNIST) and n = 2500 (CIFAR-10), with the paper's (C, c) = (2, 0.75) and a harder
(10, 0.1), uniform prior and a random non-uniform prior. Each timing is the median of repeated calls of
``dphypo.density.project`` (including validation); the speed-up is the ratio of medians from this one run.
The largest relative difference |f_exact − f_cvxpy| / f_exact is printed as a sanity check.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from functools import partial

import numpy as np

from dphypo.density import project, softmax


def median_seconds(fn: Callable[[], object], repeats: int) -> float:
    """Median wall time of ``repeats`` calls of ``fn`` (after one warm-up call)."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def time_case(n: int, C: float, c: float, beta: float, prior_kind: str, args: argparse.Namespace,
              have_cvxpy: bool) -> tuple[float, float, float, float]:
    """Median seconds (exact, bisection, cvxpy) over seeds, and the largest relative exact-vs-cvxpy gap."""
    t_exact, t_bisect, t_cvx, gaps = [], [], [], []
    for seed in range(args.seeds):
        rng = np.random.default_rng(seed)
        p = softmax(rng.normal(size=n), beta)
        w = np.ones(n) if prior_kind == "uniform" else rng.uniform(0.5, 2.0, size=n)
        prior = w / w.sum()
        t_exact.append(median_seconds(partial(project, p, prior, C, c), args.fast_repeats))
        t_bisect.append(median_seconds(partial(project, p, prior, C, c, solver="bisection"), args.fast_repeats))
        if have_cvxpy:
            t_cvx.append(median_seconds(partial(project, p, prior, C, c, solver="cvxpy"), args.cvxpy_repeats))
            exact, reference = project(p, prior, C, c), project(p, prior, C, c, solver="cvxpy")
            gaps.append(float(np.max(np.abs(exact - reference) / exact)))
    t_c = statistics.median(t_cvx) if t_cvx else float("nan")
    return statistics.median(t_exact), statistics.median(t_bisect), t_c, max(gaps, default=float("nan"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--fast-repeats", type=int, default=50)
    parser.add_argument("--cvxpy-repeats", type=int, default=3)
    args = parser.parse_args()
    try:
        import cvxpy  # noqa: F401

        have_cvxpy = True
    except ImportError:
        have_cvxpy = False
        print("cvxpy not installed: timing exact and bisection only (pip install 'dphypo[cvx]')")

    print(f"{'n':>5} {'C':>4} {'c':>5} {'beta':>4} {'prior':>8} | {'exact':>9} {'bisect':>9} {'cvxpy':>9} | "
          f"{'cvx/exact':>9} {'bis/exact':>9} {'max rel gap':>11}")
    ratios = []
    for n in (320, 2500):
        for C, c in ((2.0, 0.75), (10.0, 0.1)):
            for beta in (1.0, 10.0):
                for prior_kind in ("uniform", "random"):
                    te, tb, tc, gap = time_case(n, C, c, beta, prior_kind, args, have_cvxpy)
                    ratios.append(tc / te)
                    print(f"{n:>5} {C:>4g} {c:>5g} {beta:>4g} {prior_kind:>8} | {te * 1e6:>7.0f}µs "
                          f"{tb * 1e6:>7.0f}µs {tc * 1e3:>7.1f}ms | {tc / te:>8.0f}x {tb / te:>8.1f}x {gap:>11.1e}")
    if have_cvxpy:
        print(f"speed-up cvxpy/exact over all cases: min {min(ratios):.0f}x, median {statistics.median(ratios):.0f}x")


if __name__ == "__main__":
    main()

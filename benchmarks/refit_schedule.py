"""Does the GP refit schedule change what a search releases? Paired comparison of ``refit_growth`` values.

Run: ``OMP_NUM_THREADS=1 python benchmarks/refit_schedule.py [--mean-runs 20] [--repeats 200] [--growth 0,0.1,0.2]``

GP-UCB (C = 2, c = 0.75) on ``landscapes/digits_mlp_sigma1.7673.npz``, geometric T, batched engine, one process.
Every schedule runs the same repeats with the same random streams, so the differences to the first schedule are
paired. Prints each schedule's mean released value [95 % CI] and CPU seconds, and the paired differences.

Measured (issue #15, seed 0, load ≈ 2-3 from a landscape build), the evidence behind the default 0.1:

    E[T] = 20, 200 repeats:  r=0 0.8610 (14 s CPU), r=0.1 0.8605 (5 s), r=0.2 0.8602 (4 s)
                             r=0.1 − r=0: −0.0006 [−0.0020, +0.0009];  r=0.2 − r=0: −0.0008 [−0.0029, +0.0013]
    E[T] = 100, 100 repeats: r=0 0.9058 (91 s CPU), r=0.1 0.9064 (16 s), r=0.2 0.9067 (10 s)
                             r=0.1 − r=0: +0.0006 [−0.0012, +0.0024];  r=0.2 − r=0: +0.0009 [−0.0017, +0.0035]
"""

from __future__ import annotations

import argparse
import time

from dphypo.privacy import make_run_count
from dphypo.simulation.batched import simulate_batched
from dphypo.simulation.landscapes import load_landscape
from dphypo.simulation.simulate import mean_ci95
from dphypo.strategies import GPUCB

LANDSCAPE = "landscapes/digits_mlp_sigma1.7673.npz"


def main() -> None:
    """Simulate every schedule on the same repeats and print the paired differences."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mean-runs", type=float, default=20.0)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--growth", default="0,0.1,0.2", help="Comma-separated refit_growth values.")
    args = parser.parse_args()
    landscape = load_landscape(LANDSCAPE)
    run_count = make_run_count("geometric", mean=args.mean_runs)
    growths = [float(g) for g in args.growth.split(",")]
    values = {}
    for growth in growths:
        start = time.process_time()
        values[growth] = simulate_batched(landscape, GPUCB(refit_growth=growth), repeats=args.repeats,
                                          run_count=run_count, seed=0, workers=1)
        mean, (low, high) = mean_ci95(values[growth])
        print(f"E[T]={args.mean_runs:g} r={growth:g}: {mean:.4f} [{low:.4f}, {high:.4f}], "
              f"{time.process_time() - start:.0f} s CPU", flush=True)
    for growth in growths[1:]:
        mean, (low, high) = mean_ci95(values[growth] - values[growths[0]])
        print(f"r={growth:g} − r={growths[0]:g}: {mean:+.4f} [{low:+.4f}, {high:+.4f}]")


if __name__ == "__main__":
    main()

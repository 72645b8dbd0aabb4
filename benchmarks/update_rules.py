"""Equal-ε comparison of update rules on the shipped digits family (issue #15, item 3).

Run: ``OMP_NUM_THREADS=1 python benchmarks/update_rules.py [--epsilon 8] [--mean-runs 20] [--repeats 1000]``

Each arm calibrates its own σ for total ε (δ = 1e-5, geometric T) with the accountant's best valid bound
(``dphypo.simulation.equal_epsilon.arm_sigma``: profile bounds and Theorem B at C = c = 1 for uniform, Theorem B for
C > c; the measurement below predates Theorem B and used Theorem A), runs on the family's landscape at that σ
(``LandscapeFamily.at``), and all arms share the repeats' random streams (paired differences). Arms: uniform;
GP-UCB softmax with DP-HyPO's C = 2, c = 0.75; the GP top-set rule (``GPTopSet``) with C = 2 and c derived from its
target mass (5 % and 10 %).

Measured (session 4, family σ 0.7–4.0, ε = 8, E[T] = 20, 1000 repeats, seed 0, loaded 2-core machine):

    uniform                  σ 1.1143           mean 0.8829 [0.8731, 0.8926]
    gp-ucb C=2 c=0.75        σ 1.7128 c 0.7500  mean 0.8610 [0.8509, 0.8710]  vs uniform -0.0219 [-0.0246, -0.0192]
    top-set C=2 mass=5%      σ 1.5678 c 0.9474  mean 0.8633 [0.8532, 0.8733]  vs uniform -0.0196 [-0.0220, -0.0172]
    top-set C=2 mass=10%     σ 1.6034 c 0.8889  mean 0.8627 [0.8526, 0.8727]  vs uniform -0.0202 [-0.0228, -0.0176]

The derived c buys a smaller σ than DP-HyPO's c = 0.75 and the top-set rule gains ≈ 0.002 over the softmax, but
uniform search still wins at this budget: the σ each adaptive arm must add costs more than adaptivity finds.
"""

from __future__ import annotations

import argparse
import glob
import time

import numpy as np

from dphypo.privacy.run_counts import TruncatedNegativeBinomial
from dphypo.simulation.equal_epsilon import arm_sigma
from dphypo.simulation.family import load_family
from dphypo.simulation.simulate import mean_ci95, simulate
from dphypo.strategies import GPUCB, GPTopSet, Strategy, Uniform


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epsilon", type=float, default=8.0)
    parser.add_argument("--mean-runs", type=float, default=20.0)
    parser.add_argument("--repeats", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    family = load_family(sorted(glob.glob("landscapes/digits_mlp_sigma*.npz")))
    runs = TruncatedNegativeBinomial.from_mean(1.0, args.mean_runs)
    arms: list[tuple[str, Strategy]] = [
        ("uniform", Uniform()),
        ("gp-ucb C=2 c=0.75", GPUCB(C=2.0, c=0.75)),
        ("top-set C=2 mass=5%", GPTopSet(C=2.0, top_mass=0.05)),
        ("top-set C=2 mass=10%", GPTopSet(C=2.0, top_mass=0.10)),
    ]
    print(f"family σ {family.sigmas}; ε = {args.epsilon:g}, E[T] = {args.mean_runs:g}, {args.repeats} repeats")
    values: dict[str, np.ndarray] = {}
    for label, strategy in arms:
        started = time.perf_counter()
        sigma = arm_sigma(args.epsilon, 1e-5, runs, strategy.C, strategy.c, family.mechanism_metadata)
        if not family.sigma_range[0] <= sigma <= family.sigma_range[1]:
            print(f"{label:24s} σ {sigma:.4f} outside the family's range {family.sigma_range}: not run")
            continue
        (result,) = simulate(family.at(sigma), [strategy], repeats=args.repeats, run_count=runs, seed=0,
                             workers=args.workers)
        values[label] = result.values
        line = f"{label:24s} σ {sigma:.4f} c {strategy.c:.4f}  mean {result.mean:.4f} [{result.ci95[0]:.4f}, " \
               f"{result.ci95[1]:.4f}]"
        if label != "uniform" and "uniform" in values:
            diff, ci = mean_ci95(values[label] - values["uniform"])
            line += f"  vs uniform {diff:+.4f} [{ci[0]:+.4f}, {ci[1]:+.4f}]"
        print(f"{line}  ({time.perf_counter() - started:.0f} s)", flush=True)


if __name__ == "__main__":
    main()

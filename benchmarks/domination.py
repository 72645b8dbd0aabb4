"""The domination lemma's privacy comparison (docs/proofs/domination.md, Corollary 5): total ε of uniform searches
with more runs against one DP-HyPO search, with dphypo's own accountant.

Setting (issue #24): MNIST-like DP-SGD, σ = 0.71, q = 256/60000, 2,344 steps, δ = 1e-5, geometric T. Rows: uniform
search (C = c = 1) at E[T] ∈ {20, 40, 100, 1000} and DP-HyPO (C = 2, c = 0.75) at E[T] = 20, each under the default
accounting (``adaptive_theorem="B"``: Theorem B for C > c; the minimum of Papernot-Steinke Theorem 2 and Theorem B
at C = c = 1 for a uniform search) and under ``adaptive_theorem="A"`` (Theorem A for C > c; Papernot-Steinke alone
for a uniform search). RDP accounting only (no privacy profile), so every number is recomputable from the curve.

With ``--simulate`` it also measures Theorem 4 and its noisy-score caveat on the shipped digits landscape at one σ
(the same σ for every arm: compute, not privacy): GP-UCB (C = 2, c = 0.75) at geometric E[T] = 20 against uniform search
at E[T] = 20, 40 and (C/c)·20 = 53.3, each over ``--repeats`` searches (mean true value of the released point with a
95 % Student-t interval; arms are independent samples), with the landscape's score noise and noise-free (std 0).

Run: OMP_NUM_THREADS=1 .venv/bin/python benchmarks/domination.py                          (seconds)
     OMP_NUM_THREADS=1 .venv/bin/python benchmarks/domination.py --simulate --repeats 500   (minutes)
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from dphypo.privacy import RepeatAndSelect, TruncatedNegativeBinomial, account, dpsgd_rdp, geometric
from dphypo.simulation.batched import simulate_batched
from dphypo.simulation.coupling import adaptive_hit_bound, uniform_miss_probability
from dphypo.simulation.landscapes import load_landscape
from dphypo.simulation.simulate import mean_ci95
from dphypo.strategies import GPUCB, Uniform

DELTA = 1e-5
MNIST = dict(sigma=0.71, sample_rate=256 / 60000, steps=2344)
#: (label, E[T], C, c): the coupled uniform search of a C = 2 DP-HyPO search at E[T] = 20 has E[T] = 40.
ROWS = (
    ("uniform", 20, 1.0, 1.0),
    ("uniform", 40, 1.0, 1.0),
    ("uniform", 20 * 2.0 / 0.75, 1.0, 1.0),  # (C/c)·E[T]: dominates the DP-HyPO row at every level (Theorem 4)
    ("uniform", 100, 1.0, 1.0),
    ("uniform", 200, 1.0, 1.0),
    ("uniform", 500, 1.0, 1.0),
    ("uniform", 1000, 1.0, 1.0),
    ("DP-HyPO", 20, 2.0, 0.75),
)


def domination_table() -> list[dict[str, float | str]]:
    """Total ε of every row under the default accounting (Theorem B) and under Theorem A.

    Returns:
        One dict per row of :data:`ROWS`: ``design``, ``mean_runs``, ``C``, ``c``, ``epsilon_default``,
        ``method_default``, ``epsilon_theorem_a``, ``method_theorem_a``.
    """
    base = dpsgd_rdp(**MNIST)
    table: list[dict[str, float | str]] = []
    for design, mean, C, c in ROWS:
        search = RepeatAndSelect(geometric(1.0 / mean), C, c)
        default = account(base, search, DELTA)
        theorem_a = account(base, search, DELTA, adaptive_theorem="A")
        table.append({"design": design, "mean_runs": float(mean), "C": C, "c": c,
                      "epsilon_default": default.epsilon, "method_default": default.method,
                      "epsilon_theorem_a": theorem_a.epsilon, "method_theorem_a": theorem_a.method})
    return table


def equal_epsilon_uniform_mean(theorem: str) -> float:
    """The uniform E[T] whose total ε equals DP-HyPO's (C = 2, c = 0.75, E[T] = 20) under ``theorem``, by bisection."""
    base = dpsgd_rdp(**MNIST)
    target = account(base, RepeatAndSelect(geometric(1 / 20), 2.0, 0.75), DELTA, adaptive_theorem=theorem).epsilon
    lo, hi = 20.0, 1e7
    for _ in range(60):  # ε is increasing in the mean: bisect in log space
        mid = (lo * hi) ** 0.5
        eps = account(base, RepeatAndSelect(geometric(1 / mid)), DELTA, adaptive_theorem=theorem).epsilon
        lo, hi = (mid, hi) if eps <= target else (lo, mid)
    return lo


def dominating_uniform_epsilon(theorem: str) -> float:
    """Total ε of the uniform search of E[T] = (C/c)·20 = 53.3 that dominates every such DP-HyPO search (Theorem 4)."""
    search = RepeatAndSelect(geometric(0.75 / (2.0 * 20)))
    return account(dpsgd_rdp(**MNIST), search, DELTA, adaptive_theorem=theorem).epsilon


def tnb_dominating_mean(theta: float, mean: float = 20.0, C: float = 2.0, c: float = 0.75) -> float:
    """Smallest mean of a TNB(θ) uniform search that misses every set no more often than the best TNB(θ) DP-HyPO
    search of mean ``mean`` (Theorem 4: f_N(1 − q) ≤ f_T(1 − h(q)) on a grid of 6,000 prior masses q), by bisection.
    """
    q = np.concatenate([np.geomspace(1e-6, 0.5, 3000), np.linspace(0.5, 1 - 1e-6, 3000)])
    adaptive_best = TruncatedNegativeBinomial.from_mean(theta, mean).pgf(1 - adaptive_hit_bound(q, C, c))
    lo, hi = mean, 50.0 * mean
    for _ in range(60):
        mid = (lo * hi) ** 0.5
        uniform = uniform_miss_probability(TruncatedNegativeBinomial.from_mean(theta, mid), q)
        lo, hi = (lo, mid) if np.all(uniform <= adaptive_best * (1 + 1e-12)) else (mid, hi)
    return hi


def simulated_arms(repeats: int, noise_free: bool, sigma: str = "1.7673") -> list[tuple[str, float, tuple]]:
    """Mean released true value of GP-UCB at E[T] = 20 and of uniform search at E[T] = 20, 40, 53.3 (same σ).

    Returns:
        ``(arm, mean, 95 % interval)`` per arm.
    """
    path = Path(__file__).resolve().parents[1] / "landscapes" / f"digits_mlp_sigma{sigma}.npz"
    landscape = load_landscape(path)
    if noise_free:
        landscape = landscape.with_std(0.0, note="noise-free check of Theorem 4")
    arms = [("gp-ucb C=2 c=0.75, E[T]=20", GPUCB(C=2.0, c=0.75), 20.0)]
    arms += [(f"uniform, E[T]={m:.4g}", Uniform(), m) for m in (20.0, 40.0, 20.0 * 2.0 / 0.75)]
    out = []
    for label, strategy, mean in arms:
        values = simulate_batched(landscape, strategy, repeats=repeats, run_count=geometric(1.0 / mean), seed=11,
                                  workers=1)
        out.append((label, *mean_ci95(values)))
    return out


def main() -> None:
    """Print the table as markdown (the one in docs/proofs/domination.md)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--simulate", action="store_true", help="also run the digits simulations")
    parser.add_argument("--repeats", type=int, default=500)
    args = parser.parse_args()
    print("| design | E[T] | C, c | total ε, default (Theorem B) | method | total ε, Theorem A | method |")
    print("|---|---|---|---|---|---|---|")
    for row in domination_table():
        print(f"| {row['design']} | {row['mean_runs']:.4g} | {row['C']:g}, {row['c']:g} | {row['epsilon_default']:.2f} "
              f"| {row['method_default']} | {row['epsilon_theorem_a']:.2f} | {row['method_theorem_a']} |")
    for theorem in ("B", "A"):
        print(f"theorem {theorem}: uniform at equal ε has E[T] = {equal_epsilon_uniform_mean(theorem):.0f}; the "
              f"dominating uniform search (E[T] = (C/c)·20 = 53.3) costs ε = {dominating_uniform_epsilon(theorem):.2f}")

    for theta in (0.0, 0.5, 1.0, 2.0):
        m = tnb_dominating_mean(theta)
        print(f"TNB theta = {theta:g}: uniform E[T] = {m:.1f} ({m / 20:.2f}x) dominates DP-HyPO C = 2, c = 0.75, "
              "E[T] = 20 at every level")
    if not args.simulate:
        return
    for noise_free in (True, False):
        tick = time.perf_counter()
        print(f"\ndigits σ 1.7673, {'noise-free' if noise_free else 'noisy'} scores, {args.repeats} searches per arm:")
        for label, mean, (low, high) in simulated_arms(args.repeats, noise_free):
            print(f"| {label} | {mean:.4f} [{low:.4f}, {high:.4f}] |")
        print(f"({time.perf_counter() - tick:.0f} s)")


if __name__ == "__main__":
    main()

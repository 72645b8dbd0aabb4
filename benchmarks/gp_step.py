"""Cost of one GP-UCB step (GP fit + posterior on the grid) at t = 100 and t = 1,000 observations (issue #15).

Run: ``OMP_NUM_THREADS=1 python benchmarks/gp_step.py [--steps 3] [--old-members 4]``
     ``OMP_NUM_THREADS=1 python benchmarks/gp_step.py --estimate [--gp-repeats 200] [--workers 2]``
     ``OMP_NUM_THREADS=1 python benchmarks/gp_step.py --schedule [--members 16]``

Grid: the 320-point digits landscape (``landscapes/digits_mlp_sigma1.2226.npz``). Observations: t grid points
drawn uniformly, scored by the landscape's noise model, for B = 1 and B = 64 independent members. Three ways
of fitting the same GP (same loss function, same Standardize, priors and bounds):

* ``old``: the exact refit before issue #15 — the loss on all t observations (O(t³) per evaluation; a copy of
  that loss is kept here, not in the package) from BoTorch's default start;
* ``reduced``: :func:`dphypo.strategies.surrogate.fit_surrogate` from the default start (replicated-point
  reduction only: O(u³) with u ≤ 320 distinct points);
* ``warm``: the same, started from the member's fit at t − 1 observations (what a GP-UCB session does).

Each timing is the median of ``--steps`` steps (different data, t − 1 fit outside the timer). ``old`` at
t = 1,000, B = 64 would need ~1 GB blocks and minutes: it is timed on ``--old-members`` members and scaled
linearly to 64 (``*``). The machine is shared: the load average is printed beside every number.

Measured (issue #15, load 3.3-4.2 from other jobs, ``--steps 2``), wall ms per step:

| B, t | old | reduced | warm (reduced + warm start) |
|---|---|---|---|
| 1, 100 (u ≈ 88) | 130 | 85 | 84 |
| 1, 1000 (u ≈ 309) | 7,820 | 505 | 136 |
| 64, 100 (u ≈ 85) | 1,985 | 1,662 | 923 |
| 64, 1000 (u ≈ 306) | 337,000* | 17,819 | 3,581 |

Cost t=1000 / t=100: B = 1: old 60, warm 1.6; B = 64: old 170, warm 3.9 (per eval O(u³), u grows 85 → 306;
the warm start cuts the evaluations to ~9). Speed-up of warm over old at t = 1000: 58× (B = 1), 94× (B = 64).
Posterior means agree with the old fit to 3e-5 of the score range (optimiser tolerance).
``--estimate`` (CPU per member-step, B = 32: 3 ms at t = 10, 13 ms at 100, 34 ms at 300, 69 ms at 1000): the
Table-1 GP arm with 200 repeats per γ ≈ 290 CPU-min, ≥ 2.4 h wall on 2 idle cores (γ = 0.001 alone 2.8 CPU-h);
the longest search ≈ 14 min.

``--schedule`` (issue #15, refit schedule; B = 16 searches in lockstep, fixed T, load 1.5-1.8), CPU per
member-step of whole searches (fits, exact conditioning in between, densities, projections, draws):

| refit_growth | T = 100 | T = 1,000 | ratio 1,000 / 100 |
|---|---|---|---|
| 0 (refit every step) | 7.43 ms | (≈ 69 ms, ``--estimate``) | ≈ 9 |
| 0.1 (default) | 1.78 ms | 1.99 ms | 1.11 |
| 0.2 | 1.44 ms | 1.29 ms | 0.90 |

so the default's cost per step at t = 1,000 is within 2× of t = 100 at any B (the fits, O(u³) each, happen at
a geometric rate; a step in between costs O(R·n)). The whole Table-1 analogue at equal ε (200 repeats per arm
and γ) ran in 453 s (``benchmarks/table1.py``).

``--estimate``: CPU seconds per member-step of a warm-started step (B = 32) at t = 10 … 1,000 (u saturates
near 320 beyond), integrated over geometric T: a search with P(T = t) = γ(1 − γ)^(t−1) costs
Σ_t P(T ≥ t)·c(t). Prints the estimated CPU time of the Table-1 analogue's GP arm (``dphypo simulate … --sweep
table1 --gp-repeats γ=R`` for every γ), its wall time on ``--workers`` idle cores, and the longest search's
sequential time (99.9th percentile of T over all γ's repeats).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from botorch.models import SingleTaskGP
from botorch.models.transforms.outcome import Standardize
from botorch.optim.batched_lbfgs_b import fmin_l_bfgs_b_batched
from botorch.optim.utils import get_parameters_and_bounds
from gpytorch.mlls import ExactMarginalLogLikelihood
from linear_operator.utils.errors import NanError

from dphypo._threads import torch_threads
from dphypo.simulation.landscapes import load_landscape
from dphypo.strategies import surrogate

LANDSCAPE = Path(__file__).resolve().parents[1] / "landscapes" / "digits_mlp_sigma1.2226.npz"


def load() -> str:
    """The 1-minute load average, for printing beside a timing."""
    return f"load {os.getloadavg()[0]:.2f}"


class UnreducedLoss:
    """The loss before issue #15 (copied from the package at commit 8a9d29c): all k observations, O(k³)."""

    def __init__(self, model: SingleTaskGP) -> None:
        x = model.train_inputs[0]
        self._targets = model.train_targets
        self._squared = (x[:, :, None, :] - x[:, None, :, :]) ** 2
        self._k = x.shape[-2]
        self._eye = torch.eye(self._k, dtype=x.dtype)
        priors = {name: prior for name, _, prior, _, _ in model.named_priors()}
        self._noise_prior, self._lengthscale_prior = (priors[name] for name in surrogate._PRIORS)

    def __call__(self, state: np.ndarray, batch_indices: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """Loss and gradient of the members ``batch_indices`` at ``state``."""
        rows = torch.as_tensor(np.asarray(batch_indices, dtype=np.int64))
        theta = torch.as_tensor(state)
        noise, constant, lengthscale = theta[:, 0], theta[:, 1], theta[:, 2:]
        squared, targets = self._squared[rows], self._targets[rows]
        rbf = torch.exp(-0.5 * torch.einsum("aijd,ad->aij", squared, lengthscale**-2))
        chol = torch.linalg.cholesky(rbf + noise[:, None, None] * self._eye)
        residual = (targets - constant[:, None]).unsqueeze(-1)
        alpha = torch.cholesky_solve(residual, chol)
        log_det = 2.0 * torch.log(torch.diagonal(chol, dim1=-2, dim2=-1)).sum(-1)
        log_likelihood = -0.5 * ((residual * alpha).sum((-1, -2)) + log_det + self._k * math.log(2.0 * math.pi))
        w = alpha @ alpha.transpose(-1, -2) - torch.cholesky_inverse(chol)
        grad_noise = 0.5 * torch.diagonal(w, dim1=-2, dim2=-1).sum(-1)
        grad_constant = alpha.squeeze(-1).sum(-1)
        grad_lengthscale = 0.5 * torch.einsum("aij,aijd->ad", w * rbf, squared) / lengthscale**3
        prior_noise, dprior_noise = surrogate._log_normal_prior(self._noise_prior, noise)
        prior_ls, dprior_ls = surrogate._log_normal_prior(self._lengthscale_prior, lengthscale)
        loss = -(log_likelihood + prior_noise + prior_ls.sum(-1)) / self._k
        grad = torch.cat(
            [(grad_noise + dprior_noise)[:, None], grad_constant[:, None], grad_lengthscale + dprior_ls], dim=1
        )
        if not (torch.isfinite(loss).all() and torch.isfinite(grad).all()):
            raise NanError("non-finite marginal log-likelihood or gradient")
        return loss.numpy(), (-grad / self._k).numpy()


def old_step(factors: surrogate.GridFactors, idx: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The exact refit before issue #15: all observations, default start; returns the posterior mean."""
    train_x = factors.grid[torch.as_tensor(idx)]
    batch = torch.Size([idx.shape[0]])
    with torch_threads(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        transform = Standardize(m=1, batch_shape=batch)
        model = SingleTaskGP(train_x, torch.as_tensor(y).unsqueeze(-1), outcome_transform=transform)
        parameters, bounds = get_parameters_and_bounds(ExactMarginalLogLikelihood(model.likelihood, model))
        parameters = {name: p for name, p in parameters.items() if p.requires_grad}
        start = np.concatenate([p.detach().reshape(batch[0], -1).numpy() for p in parameters.values()], axis=1)
        hyper, _, _ = fmin_l_bfgs_b_batched(
            UnreducedLoss(model),
            start,
            bounds=surrogate._per_member_bounds(parameters, bounds, batch[0]),
            pass_batch_indices=True,
        )
        with torch.no_grad():
            posterior, _ = surrogate._marginal_posterior(
                factors,
                train_x,
                model.train_targets,
                transform.means.reshape(-1),
                transform.stdvs.reshape(-1),
                torch.as_tensor(hyper),
            )
    return posterior.score_moments()[0]


def observations(landscape, t: int, members: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """t uniform draws per member and their noisy scores, shapes ``(members, t)``."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, landscape.size, size=(members, t))
    return idx, landscape.sample_many(idx, rng).reshape(members, t)


def timed(fn, *args, **kwargs) -> tuple[float, object]:
    """Wall seconds of one call ``fn(*args, **kwargs)`` and its result."""
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return time.perf_counter() - start, out


def estimate(landscape, factors: surrogate.GridFactors, gp_repeats: int, workers: int) -> None:
    """Estimate the Table-1 analogue's GP cost from measured CPU seconds per warm-started member-step."""
    from dphypo.simulation.studies import TABLE1_GAMMAS

    members, points = 32, np.array([10, 30, 100, 300, 1000])
    costs = []
    for t in points:
        idx, y = observations(landscape, int(t), members, seed=int(t))
        previous = surrogate.fit_surrogate(factors, idx[:, :-1], y[:, :-1], seed=np.arange(members))
        start = time.process_time()
        surrogate.fit_surrogate(factors, idx, y, seed=np.arange(members), start=previous.hyper)
        costs.append((time.process_time() - start) / members)
        print(f"t={t:5d}: {1e3 * costs[-1]:6.1f} ms CPU per member-step (B={members}); {load()}", flush=True)
    total, longest = 0.0, 0.0
    for gamma in TABLE1_GAMMAS:
        t = np.arange(1, int(20 / gamma))
        cost = np.interp(np.log(t), np.log(points), costs)  # constant beyond t = 1000: u stays near 320
        per_search = float(np.sum((1 - gamma) ** (t - 1) * cost))
        tail = math.log(1 - (1 - 0.001) ** (1 / max(1, gp_repeats))) / math.log(1 - gamma)
        longest = max(longest, float(np.sum(cost[: int(tail)])))
        total += gp_repeats * per_search
        print(
            f"γ={gamma:<6}: E[T]={1 / gamma:6.0f}, {per_search:7.1f} s CPU per search, x{gp_repeats} = "
            f"{gp_repeats * per_search / 60:6.1f} min"
        )
    print(
        f"GP arm: {total / 60:.0f} min CPU; on {workers} idle cores ≥ {total / workers / 60:.0f} min wall; "
        f"longest search (T at the 99.9th percentile of the largest run) ≈ {longest / 60:.1f} min"
    )


def schedule(landscape, members: int) -> None:
    """Amortised CPU per member-step of whole GP-UCB searches of T = 100 and 1,000 runs, by refit schedule.

    Each search is a batched-engine simulation (``dphypo.simulation.batched.search_paths``, B = ``members``
    repeats in lockstep, fixed T): fits, conditioning, densities, projections and draws, i.e. everything a step
    costs. r = 0 (refit every step) at T = 1,000 is left out: the warm-fit table above gives its cost per step.
    """
    from dphypo.simulation.batched import search_paths
    from dphypo.strategies import GPUCB

    costs: dict[tuple[float, int], float] = {}
    for growth in (0.0, 0.1, 0.2):
        for T in (100, 1000):
            if growth == 0.0 and T == 1000:
                continue
            start = time.process_time()
            search_paths(landscape, GPUCB(refit_growth=growth), T, list(range(members)), C=2.0, c=0.75, seed=0)
            costs[(growth, T)] = (time.process_time() - start) / (members * T)
            print(f"r={growth:3.1f} T={T:5d}: {1e3 * costs[(growth, T)]:6.2f} ms CPU per member-step "
                  f"(B={members}); {load()}", flush=True)
    for growth in (0.1, 0.2):
        print(f"r={growth:3.1f}: cost per step T=1000 / T=100 = {costs[(growth, 1000)] / costs[(growth, 100)]:.2f}; "
              f"speed-up over r=0 at T=100: {costs[(0.0, 100)] / costs[(growth, 100)]:.1f}x")


def main() -> None:
    """Print the cost per GP step and the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3, help="Steps timed per cell (median).")
    parser.add_argument("--old-members", type=int, default=4, help="Members of the old fit at t=1000, B=64.")
    parser.add_argument("--estimate", action="store_true", help="Estimate the Table-1 analogue's GP cost.")
    parser.add_argument("--gp-repeats", type=int, default=200)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--schedule", action="store_true", help="Amortised cost per step by refit schedule.")
    parser.add_argument("--members", type=int, default=16, help="--schedule: searches in lockstep.")
    args = parser.parse_args()
    landscape = load_landscape(LANDSCAPE)
    factors = surrogate.GridFactors(np.asarray(landscape.space.unit_coordinates))
    if args.schedule:
        schedule(landscape, args.members)
        return
    if args.estimate:
        estimate(landscape, factors, args.gp_repeats, args.workers)
        return
    print(f"grid {landscape.size} points, torch threads via dphypo._threads; {load()}")
    results: dict[tuple[str, int, int], float] = {}
    for members in (1, 64):
        for t in (100, 1000):
            cells: dict[str, list[float]] = {"old": [], "reduced": [], "warm": []}
            agree = 0.0
            for step in range(args.steps):
                idx, y = observations(landscape, t, members, seed=1000 * t + 10 * members + step)
                seeds = np.arange(members)
                previous = surrogate.fit_surrogate(factors, idx[:, :-1], y[:, :-1], seed=seeds)
                elapsed, reduced = timed(surrogate.fit_surrogate, factors, idx, y, seed=seeds)
                cells["reduced"].append(elapsed)
                elapsed, warm = timed(surrogate.fit_surrogate, factors, idx, y, seed=seeds, start=previous.hyper)
                cells["warm"].append(elapsed)
                old_members = members if t < 1000 or members == 1 else min(members, args.old_members)
                elapsed, old = timed(old_step, factors, idx[:old_members], y[:old_members])
                cells["old"].append(elapsed * members / old_members)
                spread = np.ptp(y[:old_members], axis=1, keepdims=True)
                agree = max(agree, float(np.max(np.abs(old - reduced.mean[:old_members]) / spread)))
                agree = max(agree, float(np.max(np.abs(warm.mean - reduced.mean) / np.ptp(y, 1)[:, None])))
            unique = np.mean([np.unique(row).size for row in idx])
            scaled = "*" if t == 1000 and members > args.old_members else ""
            line = ", ".join(f"{name} {1e3 * statistics.median(v):8.1f} ms" for name, v in cells.items())
            print(f"B={members:3d} t={t:5d} (u≈{unique:5.1f}): {line}{scaled}; max |Δmean|/range {agree:.1e}; {load()}")
            for name, values in cells.items():
                results[(name, members, t)] = statistics.median(values)
    for members in (1, 64):
        for name in ("old", "reduced", "warm"):
            ratio = results[(name, members, 1000)] / results[(name, members, 100)]
            print(f"B={members:3d} {name:8s}: cost t=1000 / t=100 = {ratio:6.2f}")
        for t in (100, 1000):
            speedup = results[("old", members, t)] / results[("warm", members, t)]
            print(f"B={members:3d} t={t:5d}: speed-up of warm+reduced over the old exact refit {speedup:6.1f}x")


if __name__ == "__main__":
    main()

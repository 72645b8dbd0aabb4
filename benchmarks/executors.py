"""Wall time of one private search (a fixed number of DP-SGD runs on digits) with each executor.

Run: ``OMP_NUM_THREADS=1 python benchmarks/executors.py [--runs 16] [--workers 2] [--epochs 10]``

The search is a :class:`~dphypo.search.tuner.Tuner` over a 4 x 4 grid of (lr, clip) with uniform sampling and
``batch_size=2`` (two candidates per projected density, whichever the executor, so every executor makes the
same runs and releases the same one). T is drawn from Poisson(``--runs``) as in a real search; the benchmark
picks the first seed whose T equals ``--runs`` (T is a function of the seed alone, no data involved). Each run
is ``DPSGDObjective("digits", "digits-mlp")`` (σ = 1, batch 64, ``--epochs`` epochs). The search runs twice
on each executor: the first time includes the executor's start (Ray's ``ray.init``, shown alone too, and the
workers' spawn and imports of torch/Opacus/the data), the second reuses the warm workers. The ratios are
sequential time / executor time from this one run. A control prints the speed-up ``--workers`` warm worker
processes get on pure-CPU items (no data, no imports) right after: on a shared machine that ceiling, not the
executor, bounds the ratios. The load average is printed beside every number.
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from dphypo._threads import default_threads

torch.set_num_threads(default_threads())  # this benchmark process: one thread unless DPHYPO_TORCH_THREADS

from dphypo.privacy import PrivacyAccounting, RepeatAndSelect  # noqa: E402
from dphypo.privacy.run_counts import Poisson  # noqa: E402
from dphypo.search.execution import Executor, make_executor  # noqa: E402
from dphypo.search.tuner import Tuner  # noqa: E402
from dphypo.space import Grid, SearchSpace  # noqa: E402
from dphypo.train import DPSGDMechanism, DPSGDObjective, load_dataset  # noqa: E402


def load() -> str:
    """The 1-minute load average, for printing beside a timing."""
    return f"load {os.getloadavg()[0]:.2f}"


def search(runs: int, epochs: int) -> Tuner:
    """A Tuner (without executor) whose drawn T equals ``runs``."""
    mechanism = DPSGDMechanism.from_splits(load_dataset("digits"), sigma=1.0, batch_size=64, epochs=epochs,
                                           score_noise=5.0)
    space = SearchSpace({"lr": Grid((0.25, 0.5, 1.0, 2.0), scale="log"), "clip": Grid((0.25, 0.5, 1.0, 2.0))})
    privacy = PrivacyAccounting(RepeatAndSelect(Poisson(runs), C=1.0, c=1.0), mechanism.rdp(), 1e-5)
    objective = DPSGDObjective("digits", "digits-mlp", mechanism, device="cpu")
    for seed in range(10_000):
        tuner = Tuner(objective, space, privacy, mechanism=mechanism, seed=seed, batch_size=2)
        if tuner.draw_run_count() == runs:
            return tuner
    raise RuntimeError(f"no seed below 10000 draws T = {runs}")


def timed_search(tuner: Tuner, name: str, workers: int) -> tuple[float, float, float, dict]:
    """The search twice on one executor.

    Returns:
        ``(seconds to start the executor, first search including that start, second search (warm workers),
        released params)``.
    """
    start = time.perf_counter()
    executor: Executor = make_executor(name, workers=None if name == "sequential" else workers)
    started = time.perf_counter() - start
    try:
        tuner.executor = executor
        first = tuner.run()
        cold = time.perf_counter() - start
        start = time.perf_counter()
        second = tuner.run()
        warm = time.perf_counter() - start
    finally:
        executor.close()
    assert len(first.history.trials) == tuner.draw_run_count()
    assert first.release.params == second.release.params
    return started, cold, warm, first.release.params


def spin(seconds: float) -> float:
    """Burn ``seconds`` of CPU time (the control workload: no data, no imports, no I/O)."""
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
    return seconds


def parallel_ceiling(workers: int, items: int = 16, seconds: float = 0.2) -> float:
    """Sequential / warm-ProcessExecutor wall time for pure-CPU items: the speed-up the machine allows now."""
    with make_executor("process", workers=workers) as pool:
        pool.run(spin, [0.01] * workers)  # warm-up: spawn the workers
        start = time.perf_counter()
        make_executor("sequential").run(spin, [seconds] * items)
        sequential = time.perf_counter() - start
        start = time.perf_counter()
        pool.run(spin, [seconds] * items)
        return sequential / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--executors", nargs="+", default=["sequential", "process", "ray"])
    args = parser.parse_args()
    tuner = search(args.runs, args.epochs)
    print(f"{args.runs} DP-SGD runs on digits ({args.epochs} epochs each), batch_size=2, seed {tuner.seed}, "
          f"{os.cpu_count()} cores")
    times: dict[str, tuple[float, float]] = {}
    released = {}
    for name in args.executors:
        try:
            started, cold, warm, params = timed_search(tuner, name, args.workers)
        except ImportError as error:
            print(f"{name:>10}: skipped ({error})")
            continue
        times[name], released[name] = (cold, warm), params
        workers = 1 if name == "sequential" else args.workers
        print(f"{name:>10} ({workers} worker{'s' * (workers > 1)}): first search {cold:6.1f} s "
              f"(executor start {started:4.1f} s), second search on the same workers {warm:6.1f} s  [{load()}]")
    if "sequential" in times:
        base_cold, base_warm = times["sequential"]
        for name, (cold, warm) in times.items():
            if name != "sequential":
                print(f"speed-up {name} vs sequential: first search {base_cold / cold:.2f}x, "
                      f"second search {base_warm / warm:.2f}x")
    print(f"control: {args.workers} warm processes vs 1 on pure-CPU items: {parallel_ceiling(args.workers):.2f}x "
          f"(the speed-up this machine allowed at the time)  [{load()}]")
    print("same release with every executor:", len({repr(sorted(p.items())) for p in released.values()}) == 1)


if __name__ == "__main__":
    main()

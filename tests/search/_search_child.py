"""A journaled search run as a child process by tests/search/test_faults.py (it may kill itself on request).

Usage: ``python _search_child.py JOURNAL LOG [--kill-after-run N] [--kill-inside-run N] [--nan-run N] [--slow]
[--C C] [--max-lost K] [--strategy gp|uniform|top-set] [--runs geometric|negbin|logarithmic|poisson]``. Prints one
JSON line with the release (and the curator-only T, for the test) on success; exits 3 with the exception's name on
stderr when the journal is refused or the lost attempts exceed ``--max-lost`` (default 1).

A uniform search is accounted with a DP-SGD run's PLD profile next to its RDP curve, exactly as ``dphypo tune``
does: the profile is part of the sealed configuration, so a resume must reproduce its description in a new process.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

import numpy as np

from dphypo.privacy import PrivacyAccounting, RepeatAndSelect, gaussian_rdp, geometric, make_run_count
from dphypo.privacy.dpsgd_run import dpsgd_run_profile, dpsgd_run_rdp
from dphypo.search.recording import LostAttemptsExceeded
from dphypo.search.records import DataFailure
from dphypo.search.storage import JournalError, JournalMismatch
from dphypo.search.tuner import Tuner
from dphypo.space import Grid, SearchSpace
from dphypo.strategies import GPUCB, GPTopSet, Uniform

SPACE = SearchSpace({"x": Grid([i / 11 for i in range(12)]), "y": Grid([1.0, 2.0, 3.0])})


class DyingObjective:
    """Kills its own worker process (SIGKILL) on the first attempt of run ``die_at``; picklable for workers."""

    def __init__(self, marker: str, die_at: int) -> None:
        self.marker, self.die_at = marker, die_at

    def __call__(self, params: dict, run) -> tuple[float, str]:
        if run.number == self.die_at and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        score = -(params["x"] - 0.6) ** 2 + 0.05 * params["y"] + run.rng.normal(0.0, 0.02)
        return score, f"model-{run.number}-{run.seed}"


def report_pid_and_sleep(path: str) -> None:
    """A long item for a pool worker: writes the worker's pid, then sleeps (the test kills the parent)."""
    with open(path, "w") as handle:
        handle.write(str(os.getpid()))
    time.sleep(120)


STRATEGIES = ("gp", "uniform", "top-set")
LAWS = ("geometric", "negbin", "logarithmic", "poisson")


def privacy_accounting(strategy: str, runs: str, C: float, max_lost: int) -> PrivacyAccounting:
    """The accounted mechanism of a child search (uniform: DP-SGD curve and PLD profile, as dphypo tune seals them)."""
    if runs == "geometric":
        run_count = geometric(0.1)
    else:
        run_count = make_run_count(runs, theta=0.5 if runs == "negbin" else None, mean=8.0)
    if strategy == "uniform":
        curve, profile = dpsgd_run_rdp(1.0, 0.1, 10, score_noise=5.0), dpsgd_run_profile(1.0, 0.1, 10, score_noise=5.0)
        return PrivacyAccounting(RepeatAndSelect(run_count), curve, 1e-5, profile=profile, max_lost=max_lost)
    lower = GPTopSet(C=C).c if strategy == "top-set" else 0.75
    return PrivacyAccounting(RepeatAndSelect(run_count, C, lower), gaussian_rdp(4.0), 1e-5, max_lost=max_lost)


def make_strategy(strategy: str, C: float) -> GPUCB | GPTopSet | Uniform:
    return {"gp": lambda: GPUCB(C=C, c=0.75), "uniform": Uniform, "top-set": lambda: GPTopSet(C=C)}[strategy]()


def score(params: dict, run) -> tuple[float, str]:
    """The child's objective without the fault injection (an uninterrupted reference runs it in-process)."""
    value = -(params["x"] - 0.6) ** 2 + 0.05 * params["y"] + run.rng.normal(0.0, 0.02)
    return value, f"model-{run.number}-{run.seed}"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("journal")
    parser.add_argument("log")
    parser.add_argument("--kill-after-run", type=int, default=-1)
    parser.add_argument("--kill-inside-run", type=int, default=-1)
    parser.add_argument("--nan-run", type=int, default=-1)
    parser.add_argument("--slow", action="store_true")
    parser.add_argument("--C", type=float, default=2.0)
    parser.add_argument("--max-lost", type=int, default=1)
    parser.add_argument("--strategy", choices=STRATEGIES, default="gp")
    parser.add_argument("--runs", choices=LAWS, default="geometric")
    args = parser.parse_args()

    def objective(params: dict, run) -> tuple[float, str]:
        with open(args.log, "a") as log:
            log.write(f"start {run.number}\n")
        if run.number == args.kill_inside_run and not os.path.exists(args.log + ".killed"):
            open(args.log + ".killed", "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        if args.slow:
            time.sleep(0.2)
        if run.number == args.nan_run:
            raise DataFailure("diverged")
        return score(params, run)

    def progress(done: int) -> None:  # called after run done-1 is journaled
        if done - 1 == args.kill_after_run and not os.path.exists(args.log + ".killed"):
            open(args.log + ".killed", "w").close()
            os.kill(os.getpid(), signal.SIGKILL)

    privacy = privacy_accounting(args.strategy, args.runs, args.C, args.max_lost)
    tuner = Tuner(objective, SPACE, privacy, strategy=make_strategy(args.strategy, args.C), seed=11,
                  journal=args.journal, objective_id="tests/search/_search_child", progress=progress)
    try:
        result = tuner.run()
    except (JournalError, JournalMismatch, LostAttemptsExceeded) as exc:
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 3
    release = result.release
    print(json.dumps({
        "release": {"params": release.params, "score": _finite(release.score), "epsilon": release.epsilon,
                    "artifact": release.artifact},
        "run_count": result.history.run_count,
        "lost_attempts": result.history.lost_attempts,
        "max_lost": release.privacy.charged_runs,
    }))
    return 0


def _finite(x: float | None) -> float | None:
    return None if x is None or not np.isfinite(x) else float(x)


if __name__ == "__main__":
    sys.exit(main())

"""A journaled vectorised search run as a child process by tests/train/test_passes.py (it may kill itself).

Usage: ``python _pass_child.py OUT_JSON [--journal PATH] [--die-at-pass N] [--marker PATH] [--max-lost K]``. The
objective is the built-in recipe trained in passes of 2; with ``--die-at-pass N`` it SIGKILLs its own process when
its N-th pass starts (the runs of that pass are already journaled as started: a pass in flight), unless the marker
file exists (created just before the kill, so the resumed child trains normally). Writes the release (and the
curator-only T and lost attempts, for the test) as JSON to OUT_JSON; exits 3 with the error on stderr when the
search stops without a release.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from dataclasses import dataclass
from typing import Any

from dphypo import DPSGD, SearchSpace, tune
from dphypo.exceptions import DphypoError
from dphypo.privacy import geometric
from dphypo.space import Grid
from dphypo.train import DPSGDObjective, load_dataset

SPACE = SearchSpace({"lr": Grid([0.05, 0.2, 0.5, 1.0], scale="log"), "clip": Grid([0.5, 1.0, 2.0], scale="linear")})
PASSES = [0]


@dataclass(frozen=True)
class DyingPasses(DPSGDObjective):
    """The built-in recipe, killing its process (SIGKILL) when pass ``die_at_pass`` starts and no marker exists."""

    marker: str = ""
    die_at_pass: int = -1

    def train_pass(self, tasks: Any, *, pad_to: int = 0) -> list[Any]:
        PASSES[0] += 1
        if PASSES[0] == self.die_at_pass and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        return super().train_pass(tasks, pad_to=pad_to)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--journal")
    parser.add_argument("--die-at-pass", type=int, default=-1)
    parser.add_argument("--marker", default="")
    parser.add_argument("--max-lost", type=int, default=2)
    args = parser.parse_args()
    splits = load_dataset("digits")
    training = DPSGD(batch_size=64, epochs=1, n_train=len(splits.y_train), n_val=len(splits.y_val), score_noise=7.0)
    objective = DyingPasses("digits", device="cpu", pass_size=2, marker=args.marker, die_at_pass=args.die_at_pass)
    try:
        result = tune(objective, SPACE, training, sigma=1.0, runs=geometric(0.1), seed=11, max_lost=args.max_lost,
                      journal=args.journal)
    except DphypoError as exc:
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(3)
    release = result.release
    with open(args.out, "w") as handle:
        json.dump({"params": release.params, "score": release.score, "epsilon": release.epsilon,
                   "T": result.history.run_count, "lost": result.history.lost_attempts}, handle)


if __name__ == "__main__":
    main()

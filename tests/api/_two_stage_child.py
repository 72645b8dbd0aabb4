"""A journaled two-stage search run as a child process by tests/api/test_two_stage.py (it may kill itself).

Usage: ``python _two_stage_child.py JOURNAL [--kill probe:N | between | final:N] [--max-lost K]``. ``probe:N`` kills
the process (SIGKILL) inside probe N, ``between`` once every probe is journaled and before the final stage starts,
``final:N`` inside final run N; each kill happens once (a marker file next to the journal). Prints one JSON line with
the release and the curator-only counts on success; exits 3 with the exception's name on stderr when the journal
is refused or a stage lost more attempts than ``--max-lost``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import signal
import sys
from pathlib import Path

from dphypo import FinalRun, ProbeRelease, TwoStage, tune_two_stage
from dphypo.search.recording import LostAttemptsExceeded
from dphypo.search.storage import JournalError, JournalMismatch
from dphypo.space import Grid, SearchSpace
from dphypo.train import DPSGD, DPSGDObjective
from dphypo.train.data import split_sizes

N_TRAIN, N_VAL = split_sizes("digits")  # public sizes: the child reads the data once, in its objective
#: The smallest configuration that trains both stages: 2 epochs for the final run, 1 for a probe.
TRAINING = DPSGD(batch_size=128, epochs=2, n_train=N_TRAIN, n_val=N_VAL, score_noise=0.02 * N_VAL)
SPACE = SearchSpace({"lr": Grid((0.1, 0.5, 2.0), scale="log"), "clip": Grid((0.5, 2.0), scale="linear")})
DESIGN = TwoStage(ProbeRelease(3), FinalRun(), split=0.5)
SIGMAS = (3.0, 1.5)
SEED = 13


class Dying:
    """The digits objective (one Opacus run at a time) that SIGKILLs its own process once, where asked."""

    def __init__(self, kill: str, marker: str) -> None:
        self.inner = DPSGDObjective("digits", engine="opacus")
        self.kill, self.marker = kill, marker

    def _die(self) -> None:
        if not os.path.exists(self.marker):
            Path(self.marker).touch()
            os.kill(os.getpid(), signal.SIGKILL)

    def __call__(self, params, run):
        stage = "probe" if run.mechanism.epochs < TRAINING.epochs else "final"
        if self.kill == f"{stage}:{run.number}":
            self._die()
        return self.inner(params, run)


def search(journal: str | None, kill: str, max_lost: int, marker: str, progress=None):
    """The search every child (and the in-process reference, without a journal) runs."""
    return tune_two_stage(Dying(kill, marker), SPACE, TRAINING, DESIGN, probe_epochs=1, sigmas=SIGMAS,
                          max_lost=max_lost, seed=SEED, journal=journal, objective_id="tests/api/_two_stage_child",
                          progress=progress)


def model_digest(artifact) -> str | None:
    """SHA-256 of the released model's weights (equal for the same model in any process)."""
    if artifact is None:
        return None
    digest = hashlib.sha256()
    for name, tensor in sorted(artifact.state_dict.items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().numpy().tobytes())
    return digest.hexdigest()


def summary(result) -> dict:
    """The release, and the curator-only counts the test checks."""
    release = result.release
    return {
        "params": release.params, "score": None if not math.isfinite(release.score) else release.score,
        "epsilon": release.epsilon, "model": model_digest(release.artifact),
        "probes": [[p.params, p.score] for p in result.two_stage.probes],
        "lost": [result.history.lost_attempts, result.final_history.lost_attempts],
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("journal")
    parser.add_argument("--kill", default="")
    parser.add_argument("--max-lost", type=int, default=1)
    args = parser.parse_args()
    marker = f"{args.journal}.{args.kill}.killed"

    def progress(done: int) -> None:  # counts only: `between` dies once the last probe is journaled
        if args.kill == "between" and done == DESIGN.stage1.probes:
            Dying("", marker)._die()

    try:
        result = search(args.journal, args.kill, args.max_lost, marker, progress)
    except (JournalError, JournalMismatch, LostAttemptsExceeded) as exc:
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 3
    print(json.dumps(summary(result)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

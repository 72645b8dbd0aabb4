"""How long does the full default ``dphypo plan`` of issue #31 take, and where does the time go?

Run: ``OMP_NUM_THREADS=1 python benchmarks/plan_time.py [--workers 2] [--no-race] [--repeats 200]``

Runs ``dphypo plan`` in a subprocess on the digits family (``landscapes/vectorized/digits_mlp_sigma{0.7, 1.0, 1.2226,
1.45, 2.1}.npz``, probes ``landscapes/multifidelity/digits_mlp_epochs2_sigma{1.0, 1.45, 2.1, 2.9, 4.0}.npz``) with
``--design uniform --design dp-hypo --design two-stage --epsilon 8`` and the defaults (``--mean`` 10, 20 and 50,
``--repeats`` 200, ``--evaluate-repeats`` = ``--repeats``, the race on), and prints its wall time, its CPU time
(user + system of the command and every worker process it started), the plan's own phases (``phases`` of the
``--json`` output: calibration, each race round, the fresh evaluation; the rest is interpreter start and imports),
and the rows the race stopped.

Measured on the 2-core development machine (issue #31 item 5 target: < 60 s wall), calibrations cached on disk,
seed 0, two workers, load average 1-2 from other jobs (the numbers move with the load: at load 5-8 the same "before"
plan took 492 s wall, 258 s CPU):

    before (every row on 200 searches; each DP-HyPO row split into one job per worker):
        103.6 s wall, 186.2 s CPU; plan_search 97.3 s. In one process (cProfile, --workers 1) the GP fits of the
        DP-HyPO rows are ~90 % of the simulation (per row on 200 searches: E[T]=10 7 s, 20 9 s, 50 21 s CPU),
        a calibration (a certified cache read) ~0.4-0.6 s, imports ~7 s.
    --no-race (each DP-HyPO row one job, the costliest first, on the two workers: lever 3 alone):
        80.6 s wall, 150.0 s CPU; calibration 12.1 s, selection 61.2 s, evaluation 0.1 s.
    after (default: the race and the job layout):
        47.9 s wall, 83.6 s CPU; calibration 13.4 s, selection (round 1, repeats 0-49) 25.4 s, evaluation 0.2 s,
        interpreter start and imports 6.2 s. All 15 DP-HyPO rows stop after 50 searches (through their uniform
        twins); the pick (two-stage: release 50 probes, split 0.7; selection 0.9381) and its fresh evaluation
        (0.9395; pick − uniform E[T]=50 +0.0334 [+0.0165, +0.0504]) are those of the plan without the race.
    after, --workers 1: 57.7 s wall, 57.7 s CPU (calibration 14.9 s, round 1 37.9 s): the two workers save 10 s of
        wall time but cost 26 s more CPU (each worker imports torch and BoTorch, ~7 s, and they compete with the
        machine's other jobs).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FINAL = [f"landscapes/vectorized/digits_mlp_sigma{s}.npz" for s in ("0.7", "1.0", "1.2226", "1.45", "2.1")]
PROBES = [f"landscapes/multifidelity/digits_mlp_epochs2_sigma{s}.npz" for s in ("1.0", "1.45", "2.1", "2.9", "4.0")]


def command(workers: int | None, race: bool, repeats: int | None) -> list[str]:
    """The ``dphypo plan`` command line of issue #31 item 5, with ``--json``."""
    argv = [sys.executable, "-m", "dphypo.cli.main", "plan"]
    argv += [arg for path in FINAL for arg in ("--landscape", path)]
    argv += [arg for path in PROBES for arg in ("--probe-landscape", path)]
    argv += ["--design", "uniform", "--design", "dp-hypo", "--design", "two-stage", "--epsilon", "8", "--json"]
    if workers is not None:
        argv += ["--workers", str(workers)]
    if repeats is not None:
        argv += ["--repeats", str(repeats)]
    return argv if race else [*argv, "--no-race"]


def main() -> None:
    """Time the plan and print where the time went."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=None, help="--workers of the plan (default: all cores)")
    parser.add_argument("--repeats", type=int, default=None, help="--repeats of the plan (default: its own, 200)")
    parser.add_argument("--no-race", action="store_true", help="run every row on every selection search")
    args = parser.parse_args()
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command(args.workers, not args.no_race, args.repeats), cwd=ROOT, env=env,
                          capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"dphypo plan failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    payload = json.loads(done.stdout)
    print(f"wall {wall:.1f} s, CPU {cpu:.1f} s (command and its workers), load average {os.getloadavg()[0]:.1f}")
    print(f"plan_search {payload['seconds']:.1f} s; interpreter start, imports and output "
          f"{wall - payload['seconds']:.1f} s")
    for name, seconds in payload["phases"]:
        print(f"  {name}: {seconds:.1f} s")
    ran = [row for row in payload["rows"] if row["status"] == "ok"]
    stopped = [row for row in ran if row["eliminated"]]
    print(f"{len(ran)} rows simulated, {len(stopped)} stopped by the race "
          f"({', '.join(sorted({str(row['repeats']) for row in stopped})) or '-'} searches); race: {payload['race']}")
    evaluation = payload["evaluation"]
    print(f"pick: {payload['best']} (selection {evaluation['selection_mean']:.4f}, fresh "
          f"{evaluation['pick']['mean']:.4f})")
    cmp = evaluation["difference_vs_uniform"]
    if cmp is not None:
        print(f"pick − {cmp['second']}: {cmp['difference']:+.4f} [{cmp['ci95'][0]:+.4f}, {cmp['ci95'][1]:+.4f}]")


if __name__ == "__main__":
    main()

"""Worst-case wall time and peak memory of ``dphypo account`` / ``dphypo calibrate`` (issue #12, item 2).

Each input runs as its own ``python -m dphypo ... --json`` process (one thread, a time limit per process); the
table shows its wall time, its peak resident memory (``os.wait4``'s ``ru_maxrss`` of that child alone), the
method that gave ε and, when the PLD was too large to build, that the profile was skipped (RDP fallback). The
last line is the worst case over all inputs. The inputs are the issue's: uniform geometric search with
E[T] = 100 over 10 MNIST epochs (q = 0.0042667, 2344 steps), σ from 1 down to 1e-6, 10¹² steps, and a
calibration to ε = 10⁶ (the σ search then walks down to tiny σ).

Before the size cap (commit 2714b50, measured on this 2-core box): σ = 0.1 took 28 s and 2.0 GB; σ = 0.05 125 s
and 7.9 GB; σ = 0.01 was killed after 150 s at 3.3 GB; σ ≤ 0.001 and 10¹² steps ended in MemoryError; calibrate
to ε = 10⁶ > 90 s.

Run: ``OMP_NUM_THREADS=1 python benchmarks/accountant_worst_case.py [--timeout 120]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

SEARCH = ["--sample-rate", "0.0042667", "--runs", "geometric", "--gamma", "0.01", "--C", "1", "--c", "1",
          "--delta", "1e-5", "--json"]
INPUTS = [  # (label, dphypo arguments)
    ("account sigma=1", ["account", "--sigma", "1", "--steps", "2344", *SEARCH]),
    ("account sigma=0.1", ["account", "--sigma", "0.1", "--steps", "2344", *SEARCH]),
    ("account sigma=0.05", ["account", "--sigma", "0.05", "--steps", "2344", *SEARCH]),
    ("account sigma=0.01", ["account", "--sigma", "0.01", "--steps", "2344", *SEARCH]),
    ("account sigma=0.001", ["account", "--sigma", "0.001", "--steps", "2344", *SEARCH]),
    ("account sigma=1e-6", ["account", "--sigma", "1e-6", "--steps", "2344", *SEARCH]),
    ("account steps=1e12", ["account", "--sigma", "1", "--steps", str(10**12), *SEARCH]),
    ("calibrate epsilon=1e6", ["calibrate", "--epsilon", "1e6", "--steps", "2344", *SEARCH]),
    ("calibrate epsilon=8", ["calibrate", "--epsilon", "8", "--steps", "2344", *SEARCH]),
]


def run_one(args: list[str], timeout: float) -> tuple[float, float, int, str]:
    """Wall seconds, peak RSS in MB (this child alone, ``os.wait4``), exit code and output of one process."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "dphypo", *args], stdout=out, stderr=err, env=env)
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        wall = time.perf_counter() - started
        code = os.waitstatus_to_exitcode(status)
        proc.returncode = code  # reaped by wait4 already
        out.seek(0)
        err.seek(0)
        text = out.read() if code == 0 else (err.read().strip().splitlines() or ["killed (time limit)"])[-1]
    return wall, usage.ru_maxrss / 1024.0, code, text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=120.0, help="Seconds allowed per process.")
    args = parser.parse_args()
    print(f"{'input':24s} {'wall s':>7s} {'peak MB':>8s}  result")
    worst_wall, worst_mem = 0.0, 0.0
    for label, argv in INPUTS:
        wall, mem, status, out = run_one(argv, args.timeout)
        worst_wall, worst_mem = max(worst_wall, wall), max(worst_mem, mem)
        if status == 0:
            payload = json.loads(out)
            note = f"epsilon={payload['epsilon']:.6g} by {payload['method']}"
            if "sigma" in payload:
                note += f", sigma={payload['sigma']:.6g}"
            if payload.get("profile_skipped"):
                note += " (profile skipped: PLD over the size cap)"
        else:
            note = f"exit {status}: {out[:100]}"
        print(f"{label:24s} {wall:7.1f} {mem:8.0f}  {note}", flush=True)
    print(f"{'worst case':24s} {worst_wall:7.1f} {worst_mem:8.0f}")


if __name__ == "__main__":
    main()

"""Paired GP-placement / GP-recommendation study on one two-stage cell (issue #31 item 6, docs/studies.md).

Run: ``OMP_NUM_THREADS=1 python benchmarks/gp_placement.py --family digits|mnist|fourd --epsilon E --probes N
[--split S] --repeats R --seed K --probe-strategy gp --probe-strategy gp-ucb --recommend best-probe
--recommend gp-mean ... [--schedule START:BATCH[:START_SHARE:BATCH_SHARE] ...]`` (one JSON object on stdout; logs in
``docs/studies/gp_placement_*.log`` and ``docs/studies/gp_schedule_*.log``).

``--schedule`` (repeatable) runs every GP placement once per batch schedule
(:class:`~dphypo.strategies.gp.placement.ProbePlacement`'s ``start``, ``batch``, ``start_share``, ``batch_share``:
a start of max(START, ⌈START_SHARE·n⌉) probes, then batches of max(BATCH, ⌈BATCH_SHARE·n⌉)); without it, the
library's default schedule. Every schedule shares the placement stream, so arms stay paired.

Runs exactly what ``dphypo simulate --design two-stage --probe-mode release --probe-strategy ... --recommend ...
--json`` runs (calibrate_design, the family at each σ, two_stage_arm_values' streams: placement, noise, recommend with
``seed``), but places the probes once per placement and applies every recommendation rule to the same released
probes (identical numbers, fewer GP fits), and keeps every search's value so tails can be reported.
"""
from __future__ import annotations

import argparse
import glob
import json
import subprocess
import sys
import time

import numpy as np

from dphypo.cli.two_stage import two_stage_design
from dphypo.privacy.two_stage import FinalRun
from dphypo.simulation.family import load_family
from dphypo.simulation.simulate import mean_ci95
from dphypo.simulation.two_stage import _NOISE, _PLACE, _member_at, calibrate_design
from dphypo.strategies.gp.placement import ProbePlacement, place_probes
from dphypo.strategies.recommend import Recommendation, recommend

FAMILIES = {
    "digits": ("landscapes/digits_mlp_sigma*.npz", "landscapes/multifidelity/digits_mlp_epochs2_sigma*.npz", 0.2),
    "mnist": ("landscapes/mnist/mnist_subset_cnn_sigma*.npz landscapes/mnist_subset_cnn_sigma1.3716.npz",
              "landscapes/mnist/probes/mnist_subset_cnn_epochs2_sigma*.npz", 0.2),
    "fourd": ("landscapes/fourd/*.npz", None, 1.0),
}


def files(pattern: str) -> list[str]:
    """The files of space-separated glob patterns, each pattern sorted."""
    return [f for p in pattern.split() for f in sorted(glob.glob(p))]


def placement_of(name: str, schedule: str | None = None) -> ProbePlacement:
    """``--probe-strategy``'s mapping (:func:`dphypo.cli.simulate.probe_arms`): uniform, gp (= log-nei), gp-ucb.

    ``schedule``: ``"START:BATCH"`` or ``"START:BATCH:START_SHARE:BATCH_SHARE"`` (None: the library default).
    """
    if name == "uniform":
        return ProbePlacement("uniform")
    acquisition = "ucb" if name == "gp-ucb" else "log-nei"
    if schedule is None:
        return ProbePlacement("gp", acquisition)
    parts = schedule.split(":")
    if len(parts) not in (2, 4):
        raise SystemExit(f"--schedule must be START:BATCH or START:BATCH:START_SHARE:BATCH_SHARE, got {schedule!r}")
    shares = (float(parts[2]), float(parts[3])) if len(parts) == 4 else (0.0, 0.0)
    return ProbePlacement("gp", acquisition, start=int(parts[0]), batch=int(parts[1]), start_share=shares[0],
                          batch_share=shares[1])


def main() -> None:
    """Simulate every arm of one cell with shared streams and print the JSON (values per search included)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--family", required=True, choices=sorted(FAMILIES))
    ap.add_argument("--epsilon", type=float, required=True)
    ap.add_argument("--probes", type=int, required=True)
    ap.add_argument("--split", type=float, default=0.5)
    ap.add_argument("--repeats", type=int, default=300)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--probe-strategy", action="append", required=True)
    ap.add_argument("--recommend", action="append", required=True)
    ap.add_argument("--delta", type=float, default=1e-5)
    ap.add_argument("--schedule", action="append", default=None)
    a = ap.parse_args()
    final_pat, probe_pat, cost = FAMILIES[a.family]
    final_files = files(final_pat)
    probe_files = None if probe_pat is None else files(probe_pat)
    cli = (["dphypo", "simulate", "--design", "two-stage", "--probe-mode", "release", "--epsilon", f"{a.epsilon:g}",
            "--probes", str(a.probes), "--split", f"{a.split:g}", "--repeats", str(a.repeats), "--seed", str(a.seed)]
           + [x for f in final_files for x in ("--landscape", f)]
           + [x for f in (probe_files or []) for x in ("--probe-landscape", f)]
           + [x for s in a.probe_strategy for x in ("--probe-strategy", s)]
           + [x for r in a.recommend for x in ("--recommend", r)] + ["--json"])
    family = load_family(final_files)
    probes_family = family if probe_files is None else load_family(probe_files)
    design = two_stage_design(a.probes, "release", a.split, 1, None)
    assert isinstance(design.stage2, FinalRun)
    cal = calibrate_design(design, a.epsilon, a.delta, family.mechanism_metadata, probes_family.mechanism_metadata)
    probes = _member_at(probes_family, cal.probe_sigma, "probe", design, a.epsilon)
    final = _member_at(family, cal.final_sigma, "final", design, a.epsilon)
    R, n = a.repeats, a.probes
    best_final = float(final.mean.max())
    out = {"family": a.family, "epsilon": a.epsilon, "probes": n, "split": a.split, "repeats": R, "seed": a.seed,
           "run_equivalents": n * cost + 1, "probe_cost_run_equivalents": cost,
           "equivalent_cli": " ".join(cli), "probe_sigma": cal.probe_sigma, "final_sigma": cal.final_sigma,
           "accounted_epsilon": getattr(cal.report, "epsilon", None),
           "calibration": repr(cal)[:600], "best_grid_value_at_final_sigma": best_final,
           "git_diff_stat": subprocess.run(["git", "diff", "--stat"], capture_output=True, text=True).stdout,
           "arms": []}
    values: dict[str, np.ndarray] = {}
    schedules = a.schedule or [None]
    arms = [("uniform", None)] + [(p, s) for p in dict.fromkeys(a.probe_strategy) if p != "uniform" for s in schedules]
    for pname, schedule in arms:
        placement = placement_of(pname, schedule)
        place_rng = np.random.default_rng(np.random.SeedSequence(a.seed, spawn_key=(_PLACE,)))
        noise = np.random.default_rng(np.random.SeedSequence(a.seed, spawn_key=(_NOISE,))).standard_normal((R, n))
        mean, std = probes.mean.ravel(), probes.std.ravel()

        def score(indices: np.ndarray, first: int, mean=mean, std=std, noise=noise) -> np.ndarray:
            return mean[indices] + std[indices] * noise[:, first: first + indices.shape[1]]

        t0 = time.process_time()
        released = place_probes(placement, probes.space, n, R, score, place_rng, probes.direction)
        t_place = time.process_time() - t0
        rules = dict.fromkeys(["best-probe", *a.recommend]) if pname == "uniform" else dict.fromkeys(a.recommend)
        for rule in rules:
            t1 = time.process_time()
            chosen = recommend(Recommendation(rule), probes.space, released, probes.direction, top_k=1, seed=a.seed)
            v = np.where(chosen.available > 0, final.true_values(chosen.indices[:, 0]), final.worst_value)
            label = f"{placement.name}{'' if schedule is None else f'[{schedule}]'} + {rule}"
            values[label] = v
            spent = time.process_time() - t1
            out["arms"].append({"label": label, "cpu_s_placement": t_place, "cpu_s_recommend": spent,
                                "placement": placement.describe(), "schedule": list(placement.schedule(n)),
                                "uniform_counts": list(placement.uniform_counts(n))})
            print(f"{label}: {v.mean():.4f} ({t_place:.0f}+{spent:.0f} cpu s)", file=sys.stderr, flush=True)
    base = values["uniform + best-probe"]
    out["headroom_best_grid_minus_uniform_best_probe"] = best_final - float(base.mean())
    k = max(1, round(0.05 * R))
    for arm in out["arms"]:
        v = values[arm["label"]]
        m, ci = mean_ci95(v)
        d = None if arm["label"] == "uniform + best-probe" else mean_ci95(v - base)
        arm.update({"mean": m, "ci95": list(ci),
                    "difference_vs_uniform": None if d is None else {"mean": d[0], "ci95": list(d[1])},
                    "worst5pct_mean": float(np.sort(v)[:k].mean()), "p05": float(np.quantile(v, 0.05)),
                    "below_0.5": int((v < 0.5).sum()),
                    "below_best_minus_0.1": int((v < best_final - 0.1).sum()),
                    "values": [round(float(x), 5) for x in v]})
    print(json.dumps(out))


if __name__ == "__main__":
    main()

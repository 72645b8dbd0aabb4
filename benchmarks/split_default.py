"""What a per-record split buys at the default design (issue #32 item 5): σ and simulated released accuracy.

Run from the repository root, one process at a time (the logs and JSON in ``docs/studies/split_default_*``)::

    OMP_NUM_THREADS=1 python benchmarks/split_default.py --family F --epsilon 8 4 2 --repeats 400 --seed 2 \
        --out docs/studies/split_default_F
    OMP_NUM_THREADS=1 python benchmarks/split_default.py --family F --epsilon 8 4 2 --repeats 4000 --seed 3 \
        --no-gp --out docs/studies/split_default_F_uniform
    OMP_NUM_THREADS=1 python benchmarks/split_default.py --family mnist --epsilon 8 --repeats 400 --seed 2 \
        --design-split 0.6 --out docs/studies/split_default_mnist_eps8_split0.6   (and --repeats 4000 --seed 3 --no-gp)

for F in digits, mnist, fourd (the ``_uniform`` JSON files keep means and intervals, not per-search values).

Per (family, ε): the design ``dphypo tune`` picks by default (``auto_design`` on the family's DP-SGD mechanism, with
and without the per-record rule; the 4-D family has no 2-epoch probe family, so it uses the GP study's 4-D cell:
10 released full-fidelity probes, split 0.7), calibrated by ``calibrate_design`` (the calibration ``tune`` runs)
under ``permutation`` (sum of the two parts) and ``per-record`` (Theorem S, the worse side). Then the design's arm
(its placement + recommendation) and the uniform + best-probe arm are simulated on the family at both σ pairs with
the same seed (common random numbers: same placement draws and standard normals), so the per-record − permutation
difference is paired (Student-t 95 % CI on the paired differences; the Welch interval is printed too).
"""
from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import math
import subprocess
import sys
import time
from typing import Any

import numpy as np
from scipy import stats

from dphypo.api.design import TwoStageSearch, auto_design
from dphypo.privacy.calibration import CalibrationError
from dphypo.privacy.split import SplitRule
from dphypo.privacy.two_stage import FinalRun, ProbeRelease, TwoStage, TwoStageDesignError
from dphypo.simulation.equal_epsilon import metadata_mechanism
from dphypo.simulation.family import load_family
from dphypo.simulation.simulate import mean_ci95
from dphypo.simulation.two_stage import (
    BASELINE_ARM,
    ProbeArm,
    _member_at,
    calibrate_design,
    probe_noise_landscape,
    two_stage_arm_values,
    two_stage_values,
)
from dphypo.strategies.gp.placement import ProbePlacement
from dphypo.strategies.recommend import Recommendation
from dphypo.train.recipe import DPSGD

FAMILIES = {
    "digits": ("landscapes/digits_mlp_sigma*.npz", "landscapes/multifidelity/digits_mlp_epochs2_sigma*.npz"),
    "mnist": ("landscapes/mnist/mnist_subset_cnn_sigma*.npz landscapes/mnist_subset_cnn_sigma1.3716.npz",
              "landscapes/mnist/probes/mnist_subset_cnn_epochs2_sigma*.npz"),
    "fourd": ("landscapes/fourd/*.npz", None),
}
#: The rule ``dphypo tune --data-split per-record`` builds for digits and mnist-subset (no official test set).
RULE = SplitRule("draw", 0.6, 0.2, 0.2)


def files(pattern: str) -> list[str]:
    """The files of space-separated glob patterns, each pattern sorted."""
    return [f for p in pattern.split() for f in sorted(glob.glob(p))]


def welch(a: np.ndarray, b: np.ndarray) -> tuple[float, tuple[float, float]]:
    """Mean of a − b with Welch's 95 % interval."""
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    se = math.sqrt(va + vb)
    dof = (va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1)) if se > 0 else 1.0
    d = float(a.mean() - b.mean())
    h = float(stats.t.ppf(0.975, dof) * se)
    return d, (d - h, d + h)


def design_for(family: str, training: DPSGD, epsilon: float) -> tuple[TwoStageSearch, str]:
    """The default design ``tune`` runs (auto), or the GP study's 4-D cell (no 2-epoch 4-D family)."""
    if family == "fourd":
        two = TwoStage(ProbeRelease(10), FinalRun(), split=0.7)
        return (TwoStageSearch(two, probe_epochs=training.epochs, placement=ProbePlacement("gp", "log-nei"),
                               recommend="gp-mean"), "4-D: GP study's cell (10 full-fidelity probes, split 0.7)")
    design, reason = auto_design(training, epsilon)
    if not isinstance(design, TwoStageSearch):
        raise SystemExit(f"auto picked a single-stage design at epsilon={epsilon}: {design.label()} (not simulated)")
    return design, reason


def main() -> None:
    """Calibrate and simulate every ε of one family under both splits; write ``OUT.log`` and ``OUT.json``."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--family", required=True, choices=sorted(FAMILIES))
    ap.add_argument("--epsilon", type=float, nargs="+", required=True)
    ap.add_argument("--repeats", type=int, default=400)
    ap.add_argument("--seed", type=int, default=2)
    ap.add_argument("--delta", type=float, default=1e-5)
    ap.add_argument("--no-gp", action="store_true", help="simulate uniform + best probe only")
    ap.add_argument("--design-split", type=float, default=None,
                    help="override the design's budget split (e.g. 0.6 where 0.5 needs a final sigma below the family)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    final_pat, probe_pat = FAMILIES[a.family]
    family = load_family(files(final_pat))
    probe_family = family if probe_pat is None else load_family(files(probe_pat))
    meta, pmeta = family.mechanism_metadata, probe_family.mechanism_metadata
    mech = metadata_mechanism(meta)
    base = DPSGD(batch_size=mech.batch_size, epochs=mech.epochs, n_train=mech.n_train, n_val=mech.n_val,
                 score_noise=mech.score_noise)
    with open(a.out + ".log", "w") as log:

        def say(text: str) -> None:
            print(text, file=sys.stderr, flush=True)
            log.write(text + "\n")
            log.flush()

        say(f"# {a.family}: final family {files(final_pat)}\n# probe family {probe_pat}\n# mechanism {mech}\n"
            f"# sigma range final {family.sigma_range}, probes {probe_family.sigma_range}; rule {RULE}; "
            f"repeats {a.repeats}, seed {a.seed}, delta {a.delta:g}")
        out: dict[str, Any] = {"family": a.family, "repeats": a.repeats, "seed": a.seed, "delta": a.delta,
                               "rule": RULE.describe(), "mechanism": repr(mech),
                               "git_diff_stat": subprocess.run(["git", "diff", "--stat"], capture_output=True,
                                                               text=True).stdout,
                               "cells": []}
        for eps in a.epsilon:
            cell: dict[str, Any] = {"epsilon": eps, "splits": {}}
            values: dict[str, dict[str, np.ndarray]] = {}
            for split, rule in (("permutation", None), ("per-record", RULE)):
                training = dataclasses.replace(base, split_rule=rule)
                t0 = time.process_time()
                try:
                    design, reason = design_for(a.family, training, eps)
                except (ValueError, SystemExit) as exc:
                    say(f"eps {eps:g} {split}: no design: {exc}")
                    cell["splits"][split] = {"error": str(exc)}
                    continue
                if a.design_split is not None:  # not the default: named in the design's label
                    design = dataclasses.replace(design, two_stage=dataclasses.replace(design.two_stage,
                                                                                       split=a.design_split))
                    reason = f"{reason}; budget split overridden to {a.design_split:g}"
                factor = design.probe_score_noise_factor
                try:
                    cal = calibrate_design(design.two_stage, eps, a.delta, meta, pmeta,
                                           probe_score_noise_factor=factor, split_rule=rule)
                except CalibrationError as exc:  # e.g. the fixed 4-D cell at a small epsilon
                    say(f"eps {eps:g} {split}: {design.label()} does not calibrate: {exc}")
                    cell["splits"][split] = {"design": design.label(), "error": str(exc)}
                    continue
                t_cal = time.process_time() - t0
                rep = cal.report
                info: dict[str, Any] = {"design": design.label(), "reason": reason, "probe_sigma": cal.probe_sigma,
                                        "final_sigma": cal.final_sigma, "accounted_epsilon": rep.epsilon,
                                        "method": rep.method, "cpu_s_calibration": t_cal,
                                        "probe_score_noise_factor": factor}
                if rule is not None:
                    info["train_side_epsilon"] = rep.train.epsilon  # type: ignore[attr-defined]
                    info["val_side_epsilon"] = rep.val.epsilon  # type: ignore[attr-defined]
                say(f"eps {eps:g} {split}: {design.label()} | probe sigma {cal.probe_sigma:.4f}, final sigma "
                    f"{cal.final_sigma:.4f}, eps {rep.epsilon:.4f} ({rep.method}) [{t_cal:.0f} cpu s]")
                cell["splits"][split] = info
                try:
                    probes = _member_at(probe_family, cal.probe_sigma, "probe", design.two_stage, eps)
                    final = _member_at(family, cal.final_sigma, "final", design.two_stage, eps)
                except TwoStageDesignError as exc:
                    say(f"   not simulated: {exc}")
                    info["simulated"] = f"no: {exc}"
                    continue
                built = float(pmeta.get("score_noise", 0.0))
                probes = probe_noise_landscape(probes, built, factor * float(meta.get("score_noise", 0.0)))
                info["best_grid_value_at_final_sigma"] = float(final.mean.max())
                values[split] = {}
                arms: list[tuple[str, ProbeArm | None]] = []
                if isinstance(design.two_stage.stage1, ProbeRelease):
                    default_arm = ProbeArm(design.placement or ProbePlacement("uniform"),
                                           Recommendation(design.recommend))
                    arms.append(("uniform + best-probe", BASELINE_ARM))
                    if not a.no_gp and default_arm != BASELINE_ARM:
                        arms.append((default_arm.label + " (default)", default_arm))
                else:
                    arms.append((design.label(), None))
                for label, arm in arms:
                    t1 = time.process_time()
                    if arm is None:  # a probe selection: two_stage_values on one seeded stream
                        v = two_stage_values(design.two_stage, probes, final, a.repeats, np.random.default_rng(a.seed))
                    else:
                        v = two_stage_arm_values(design.two_stage, probes, final, a.repeats, a.seed, arm)
                    spent = time.process_time() - t1
                    values[split][label] = v
                    m, ci = mean_ci95(v)
                    say(f"   {label}: {m:.4f} [{ci[0]:.4f}, {ci[1]:.4f}] ({spent:.0f} cpu s)")
                    info.setdefault("arms", {})[label] = {"mean": m, "ci95": list(ci), "cpu_s": spent,
                                                           "values": [round(float(x), 5) for x in v]}
            if len(values) == 2:
                cell["per_record_minus_permutation"] = {}
                same_design = cell["splits"]["permutation"]["design"] == cell["splits"]["per-record"]["design"]
                for label in values["per-record"]:
                    if label not in values["permutation"]:
                        continue
                    a1, b1 = values["per-record"][label], values["permutation"][label]
                    paired = mean_ci95(a1 - b1) if same_design else None
                    w = welch(a1, b1)
                    cell["per_record_minus_permutation"][label] = {
                        "paired": None if paired is None else {"mean": paired[0], "ci95": list(paired[1])},
                        "welch": {"mean": w[0], "ci95": list(w[1])}}
                    ptxt = "" if paired is None else (
                        f"paired {paired[0]:+.4f} [{paired[1][0]:+.4f}, {paired[1][1]:+.4f}]; ")
                    say(f"   per-record - permutation, {label}: {ptxt}"
                        f"welch {w[0]:+.4f} [{w[1][0]:+.4f}, {w[1][1]:+.4f}]")
            out["cells"].append(cell)
        with open(a.out + ".json", "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()

"""The default design (``auto_design``) against the best uniform search at equal total ε, per compute cap (issue #31).

Run: ``OMP_NUM_THREADS=1 python benchmarks/default_vs_uniform.py --family digits|mnist|fourd --epsilon 8
[--caps 10 20 50] [--means 2 5 10 20 50] [--select 1000] [--evaluate 3000] [--default-repeats 1000]
[--data-split per-record|permutation] [--json-out docs/studies/default_vs_uniform_digits_eps8.json]``
(a table on stdout, one JSON object in ``--json-out``; logs in ``docs/studies/default_vs_uniform_*.log``).

Per family (the globs of ``benchmarks/gp_placement.py``) and ε:

* **the default design**: :func:`dphypo.api.design.auto_design` for the family's training (the DP-SGD run its
  metadata states: batch size, epochs, split sizes, score noise, as ``dphypo simulate`` builds the mechanism), once
  without a budget and once per cap (``budget=cap``: what it would pick under that cap), with its compute
  (``expected_runs``: a probe counts its share of the final run's epochs). Its pick is simulated as ``dphypo
  simulate --design two-stage --probe-mode release --probe-strategy gp --recommend gp-mean
  [--probe-score-noise-accuracy ...]`` runs it (:func:`dphypo.simulation.two_stage.simulate_two_stage_arms`: the
  calibration ``tune`` runs, qLogNEI placement, posterior-mean commit) on ``--default-repeats`` fresh searches (seed
  ``--evaluate-seed``), probes on the family's 2-epoch probe family (digits, CNN) or on the family itself
  (full-fidelity probes: the 4-D family has no cheaper members, so its simulated compute is n + 1 runs, not the
  n/5 + 1 the default would spend). The same design with uniform placement + best probe (the paired baseline
  ``simulate_two_stage_arms`` adds) is reported beside it. Where a calibrated σ of the pick lies outside its family
  (never extrapolated), the same design is simulated at the first split of ``--proxy-splits`` that fits and
  reported as a PROXY (``proxy_split`` in the JSON), as the GP placement study did (MNIST ε = 8: split 0.6); with
  ``--proxy-probes 10`` also with 10 released probes (the 4-D family's full-fidelity probes: 10 at split 0.7).
* **the best uniform search**: single-stage uniform search at each E[T] of ``--means`` (geometric T), σ by
  :func:`dphypo.simulation.equal_epsilon.arm_calibration` (tune's calibration: the on-disk cached
  ``calibrate_sigma`` with the privacy profiles; the heterogeneous σ_ref calibration on the 4-D family), the best
  with E[T] ≤ cap *chosen* on ``--select`` repeats (seed ``--select-seed``) and *reported* on ``--evaluate`` fresh
  repeats (seed ``--evaluate-seed``).

Both are calibrated with the split rule of ``dphypo tune``'s default (``--data-split``; default: per-record where
the family has score noise, as ``dphypo simulate``/``plan``). Reported per cap: both means [95 % CI], the Welch 95 %
interval of default − uniform (independent streams), and the mean of the worst 5 % of searches of each.
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

from dphypo.api.design import SingleStage, TwoStageSearch, auto_design
from dphypo.cli.privacy import split_rule_option
from dphypo.privacy import CalibrationError, geometric
from dphypo.privacy.two_stage import ProbeRelease, TwoStageDesignError
from dphypo.simulation.equal_epsilon import arm_calibration, metadata_mechanism
from dphypo.simulation.family import LandscapeFamily, load_family
from dphypo.simulation.planner import welch_ci95
from dphypo.simulation.simulate import mean_ci95, simulate
from dphypo.simulation.two_stage import ProbeArm, simulate_two_stage, simulate_two_stage_arms
from dphypo.strategies import Uniform
from dphypo.strategies.gp.placement import ProbePlacement
from dphypo.strategies.recommend import Recommendation
from dphypo.train.recipe import DPSGD

DELTA = 1e-5
#: Final-run members and probe members (``None``: full-fidelity probes on the family itself), as gp_placement.py.
FAMILIES = {
    "digits": ("landscapes/digits_mlp_sigma*.npz", "landscapes/multifidelity/digits_mlp_epochs2_sigma*.npz"),
    "mnist": ("landscapes/mnist/mnist_subset_cnn_sigma*.npz landscapes/mnist_subset_cnn_sigma1.3716.npz",
              "landscapes/mnist/probes/mnist_subset_cnn_epochs2_sigma*.npz"),
    "fourd": ("landscapes/fourd/*.npz", None),
}


def files(pattern: str) -> list[str]:
    """The files of space-separated glob patterns, each pattern sorted."""
    return [f for p in pattern.split() for f in sorted(glob.glob(p))]


def training_of(family: LandscapeFamily) -> DPSGD:
    """The family's training (its metadata's DP-SGD run, the reference run of a heterogeneous family)."""
    m = metadata_mechanism(family.mechanism_metadata)
    return DPSGD(batch_size=m.batch_size, epochs=m.epochs, n_train=m.n_train, n_val=m.n_val,
                 score_noise=m.score_noise)


def worst5(values: np.ndarray) -> float:
    """Mean of the worst 5 % of searches (at least one)."""
    k = max(1, round(0.05 * values.size))
    return float(np.sort(values)[:k].mean())


def summary(values: np.ndarray) -> dict[str, Any]:
    m, ci = mean_ci95(values)
    return {"mean": m, "ci95": list(ci), "worst5pct_mean": worst5(values), "repeats": int(values.size)}


def uniform_arms(family: LandscapeFamily, epsilon: float, means: list[int], split_rule: Any, select: tuple[int, int],
                 evaluate: tuple[int, int]) -> dict[int, dict[str, Any]]:
    """Per E[T]: σ (tune's calibration) and the values on the selection and the fresh repeats, or why not."""
    out: dict[int, dict[str, Any]] = {}
    for mean in means:
        law = geometric(1 / mean)
        try:
            sigma = arm_calibration(epsilon, DELTA, law, 1.0, 1.0, family.mechanism_metadata,
                                    split_rule=split_rule).sigma
        except CalibrationError as error:
            out[mean] = {"unreachable": " ".join(str(error).split())[:200]}
            print(f"  uniform E[T]={mean}: unreachable ({out[mean]['unreachable'][:120]})", flush=True)
            continue
        low, high = family.sigma_range
        if not low <= sigma <= high:
            out[mean] = {"sigma": sigma, "unreachable": f"sigma {sigma:.4g} outside the family's [{low:g}, {high:g}]"}
            print(f"  uniform E[T]={mean}: {out[mean]['unreachable']}", flush=True)
            continue
        landscape = family.at(sigma)
        vals = {name: simulate(landscape, [Uniform()], repeats=r, run_count=law, seed=s, workers=1)[0].values
                for name, (r, s) in (("select", select), ("evaluate", evaluate))}
        out[mean] = {"sigma": sigma, **vals}
        print(f"  uniform E[T]={mean}: sigma {sigma:.4f}, select {vals['select'].mean():.4f}, "
              f"fresh {vals['evaluate'].mean():.4f}", flush=True)
    return out


def simulate_default(design: Any, family: LandscapeFamily, probes: LandscapeFamily | None, epsilon: float,
                     split_rule: Any, repeats: int, seed: int, training: DPSGD,
                     uniform: dict[int, dict[str, Any]], proxy_splits: list[float],
                     proxy_probes: list[int]) -> dict[str, Any]:
    """The pick's values on fresh searches, or, where a σ leaves the family, the same design at the first (probe
    count, split) of ``[its own, *proxy_probes] × proxy_splits`` whose σ stay inside (reported as a proxy), or why it
    cannot be simulated."""
    info = _simulate_design(design, family, probes, epsilon, split_rule, repeats, seed, training, uniform)
    if "cannot_simulate" not in info or not isinstance(design, TwoStageSearch):
        return info
    stage1 = design.two_stage.stage1
    counts = [stage1.probes, *proxy_probes] if isinstance(stage1, ProbeRelease) else [None]
    for n in counts:
        first = stage1 if n is None else dataclasses.replace(stage1, probes=n)
        for split in proxy_splits:
            proxy = dataclasses.replace(design, two_stage=dataclasses.replace(design.two_stage, stage1=first,
                                                                              split=split))
            print(f"  default cannot be simulated ({info['cannot_simulate'][:150]}); proxy {proxy.label()}",
                  flush=True)
            alt = _simulate_design(proxy, family, probes, epsilon, split_rule, repeats, seed, training, uniform)
            if "cannot_simulate" not in alt:
                return {**alt, "label": design.label(), "describe": design.describe(),
                        "run_equivalents": design.expected_runs(training), "proxy_split": split,
                        "proxy_probes": n, "proxy_label": proxy.label(),
                        "default_cannot_simulate": info["cannot_simulate"]}
    return info


def _simulate_design(design: Any, family: LandscapeFamily, probes: LandscapeFamily | None, epsilon: float,
                     split_rule: Any, repeats: int, seed: int, training: DPSGD,
                     uniform: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """One design's values on fresh searches (and the uniform-placement baseline), or why it cannot be simulated."""
    final_epochs = int(family.mechanism_metadata["epochs"])
    probe_epochs = final_epochs if probes is None else int(probes.mechanism_metadata["epochs"])
    info: dict[str, Any] = {"label": design.label(), "describe": design.describe(),
                            "run_equivalents": design.expected_runs(training)}
    if isinstance(design, SingleStage):
        arm = uniform.get(int(design.runs.mean), {})
        if "evaluate" not in arm:
            return {**info, "cannot_simulate": arm.get("unreachable", "E[T] not simulated")}
        return {**info, "simulated_run_equivalents": design.runs.mean, "values": arm["evaluate"]}
    assert isinstance(design, TwoStageSearch)
    if design.epochs_of_probes(training) != probe_epochs:
        info["probe_fidelity_note"] = (f"the default trains {design.epochs_of_probes(training)}-epoch probes; the "
                                       f"family has {probe_epochs}-epoch probes only, simulated with those")
    stage1 = design.two_stage.stage1
    share = probe_epochs / final_epochs
    t0 = time.process_time()
    try:
        if isinstance(stage1, ProbeRelease):
            arm = ProbeArm(design.placement or ProbePlacement("uniform"), Recommendation(design.recommend))
            result = simulate_two_stage_arms(design.two_stage, family, epsilon, DELTA, repeats, seed, (arm,),
                                             probe_family=probes,
                                             probe_score_noise_factor=design.probe_score_noise_factor,
                                             split_rule=split_rule)
            index = result.arms.index(arm)
            values, baseline = result.values[index], result.values[result.baseline]
            calibration = result.calibration
        else:
            single = simulate_two_stage(design.two_stage, family, epsilon, DELTA, repeats, np.random.default_rng(seed),
                                        probe_family=probes, probe_score_noise_factor=design.probe_score_noise_factor,
                                        split_rule=split_rule)
            values, baseline, calibration = single.values, None, single.calibration
    except (TwoStageDesignError, CalibrationError) as error:
        return {**info, "cannot_simulate": " ".join(str(error).split())[:300]}
    n_probes, n_final = calibration.report.expected_runs
    info.update({"simulated_run_equivalents": n_probes * share + n_final, "probe_sigma": calibration.probe_sigma,
                 "final_sigma": calibration.final_sigma, "accounted_epsilon": calibration.report.epsilon,
                 "cpu_s": time.process_time() - t0, "values": values})
    if baseline is not None:
        info["uniform_placement_best_probe"] = summary(baseline)
    print(f"  default {design.label()}: probe sigma {calibration.probe_sigma:.4f}, final "
          f"{calibration.final_sigma:.4f}, {values.mean():.4f} on {repeats} ({info['cpu_s']:.0f} cpu s)", flush=True)
    return info


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", required=True, choices=sorted(FAMILIES))
    ap.add_argument("--epsilon", type=float, nargs="+", required=True)
    ap.add_argument("--caps", type=float, nargs="+", default=[10.0, 20.0, 50.0])
    ap.add_argument("--means", type=int, nargs="+", default=[2, 5, 10, 20, 50])
    ap.add_argument("--select", type=int, default=1000)
    ap.add_argument("--evaluate", type=int, default=3000)
    ap.add_argument("--default-repeats", type=int, default=1000)
    ap.add_argument("--select-seed", type=int, default=31)
    ap.add_argument("--evaluate-seed", type=int, default=41)
    ap.add_argument("--data-split", choices=("per-record", "permutation"), default=None)
    ap.add_argument("--proxy-splits", type=float, nargs="*", default=[0.6, 0.7],
                    help="splits tried, as a labelled proxy, where the default's σ leave the family")
    ap.add_argument("--proxy-probes", type=int, nargs="*", default=[],
                    help="released-probe counts also tried as a labelled proxy (e.g. 10 on the 4-D family)")
    ap.add_argument("--json-out", default=None)
    a = ap.parse_args()
    final_pat, probe_pat = FAMILIES[a.family]
    family = load_family(files(final_pat))
    probes = None if probe_pat is None else load_family(files(probe_pat))
    training = training_of(family)
    noise = family.mechanism_metadata.get("score_noise")
    data_split = a.data_split or ("per-record" if noise else "permutation")
    split_rule = split_rule_option(data_split, float(noise) if noise else None)
    print(f"{a.family}: sigma range {family.sigma_range}, training {training}, data split {data_split}", flush=True)
    git = subprocess.run(["git", "diff", "--stat"], capture_output=True, text=True).stdout
    out: dict[str, Any] = {"family": a.family, "command": " ".join(["python", *sys.argv]), "training": repr(training),
                           "data_split": data_split, "delta": DELTA, "git_head": subprocess.run(
                               ["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip(),
                           "git_diff_stat": git, "settings": vars(a), "cells": []}
    for epsilon in a.epsilon:
        print(f"\nepsilon = {epsilon:g}", flush=True)
        uniform = uniform_arms(family, epsilon, a.means, split_rule, (a.select, a.select_seed),
                               (a.evaluate, a.evaluate_seed))
        picks: dict[str, Any] = {}
        for cap in [None, *a.caps]:
            try:
                design, reason = auto_design(training, epsilon, DELTA, budget=cap)
            except ValueError as error:
                picks[str(cap)] = {"error": " ".join(str(error).split())[:300]}
                continue
            picks[str(cap)] = {"design": design, "reason": reason}
            print(f"  auto_design(budget={cap}): {design.label()} ({design.expected_runs(training):g} run-eq.); "
                  f"{reason}", flush=True)
        simulated: dict[str, dict[str, Any]] = {}
        for pick in picks.values():
            if "design" in pick and pick["design"].label() not in simulated:
                simulated[pick["design"].label()] = simulate_default(
                    pick["design"], family, probes, epsilon, split_rule, a.default_repeats, a.evaluate_seed,
                    training, uniform, a.proxy_splits, a.proxy_probes)
        for cap in a.caps:
            cell: dict[str, Any] = {"epsilon": epsilon, "cap": cap}
            fits = {m: u for m, u in uniform.items() if m <= cap and "select" in u}
            if fits:
                best = max(fits, key=lambda m: float(fits[m]["select"].mean()))
                u = fits[best]
                cell["uniform"] = {"E[T]": best, "sigma": u["sigma"], "select_mean": float(u["select"].mean()),
                                   **summary(u["evaluate"])}
                cell["uniform_candidates"] = {str(m): {"sigma": v.get("sigma"), "select_mean": float(
                    v["select"].mean()), "fresh_mean": float(v["evaluate"].mean())} if "select" in v else
                    {"unreachable": v["unreachable"]} for m, v in uniform.items() if m <= cap}
            pick = picks[str(cap)]
            if "design" not in pick:
                cell["default"] = {"does_not_fit": pick["error"]}
            else:
                sim = simulated[pick["design"].label()]
                d = {k: v for k, v in sim.items() if k != "values"}
                d["reason"] = pick["reason"]
                d["same_as_unbudgeted"] = ("design" in picks["None"]
                                           and picks["None"]["design"].label() == pick["design"].label())
                if "values" in sim:
                    d.update(summary(sim["values"]))
                    if sim.get("simulated_run_equivalents", 0) > cap:
                        d["simulated_over_cap"] = True
                    if fits:
                        diff, (low, high) = welch_ci95(sim["values"], u["evaluate"])
                        cell["difference"] = {"mean": diff, "ci95": [low, high]}
                cell["default"] = d
            out["cells"].append(cell)
            _print_cell(cell)
    if a.json_out:
        with open(a.json_out, "w") as fh:
            json.dump(out, fh, indent=1, default=lambda x: x.tolist() if isinstance(x, np.ndarray) else repr(x))


def _print_cell(cell: dict[str, Any]) -> None:
    u, d, diff = cell.get("uniform"), cell["default"], cell.get("difference")
    ucol = "—" if u is None else (f"E[T]={u['E[T]']}, σ {u['sigma']:.3f}: {u['mean']:.4f} "
                                  f"(worst 5 % {u['worst5pct_mean']:.4f})")
    if "mean" in d:
        over = " (simulated over the cap)" if d.get("simulated_over_cap") else ""
        over += f" (PROXY: simulated as {d['proxy_label']})" if "proxy_split" in d else ""
        dcol = (f"{d['label']}, {d['run_equivalents']:g} run-eq. (simulated {d['simulated_run_equivalents']:g})"
                f"{over}: {d['mean']:.4f} (worst 5 % {d['worst5pct_mean']:.4f})")
    else:
        dcol = d.get("does_not_fit") or d.get("cannot_simulate", "?")
    dd = "—" if diff is None else f"{diff['mean']:+.4f} [{diff['ci95'][0]:+.4f}, {diff['ci95'][1]:+.4f}]"
    cap = cell["cap"]
    print(f"  | {cell['epsilon']:g} | {'∞' if math.isinf(cap) else f'{cap:g}'} | {ucol} | {dcol} | {dd} |",
          flush=True)


if __name__ == "__main__":
    main()

"""Two-stage designs against single-stage uniform search at equal total ε on the shipped digits family.

Run: ``OMP_NUM_THREADS=1 python benchmarks/two_stage.py [--epsilon 4 8] [--max-runs 20 inf] [--select 1000]
[--evaluate 3000]``

Every arm is calibrated to the same total (ε, δ = 1e-5) under the family's DP-SGD mechanism (10 epochs, batch 64,
score noise 0.02 accuracy): the uniform arms by :func:`dphypo.simulation.equal_epsilon.arm_sigma` (the smallest
valid bound), the two-stage designs by :func:`dphypo.privacy.two_stage.calibrate_two_stage` (RDP composition of
the two stages). The shipped family varies σ only, so every probe is a full-fidelity run at a larger σ.

``--probe-epochs 1 2 5 10`` adds probes at lower fidelity: the ``landscapes/multifidelity`` families (same grid,
mechanism and seeds, 1, 2 or 5 epochs; each probe then costs that share of a full run in compute and is accounted
with its own steps). Per compute budget (``--max-runs``: expected training runs in full-run units; a two-stage
design may add its one final run), the best
uniform E[T] and the best two-stage design within it are *chosen* on ``--select`` repeats and *compared* on
``--evaluate`` fresh repeats (independent streams, Welch 95 % interval), so the choice among many designs does not
flatter either side (no winner's curse in the comparison).
Designs that cannot meet ε (a stage's σ-independent floor, or a σ outside the family's range) are listed as such.
"""

from __future__ import annotations

import argparse
import glob
import os
from collections.abc import Callable

import numpy as np

from dphypo.privacy import CalibrationError, RepeatAndSelect, geometric
from dphypo.privacy.two_stage import FinalRun, FinalSelection, ProbeRelease, ProbeSelection, TwoStageDesignError
from dphypo.simulation.equal_epsilon import arm_sigma
from dphypo.simulation.family import LandscapeFamily, load_family
from dphypo.simulation.planner import welch_ci95
from dphypo.simulation.simulate import simulate
from dphypo.simulation.two_stage import TwoStageDesign, simulate_two_stage, two_stage_values
from dphypo.strategies import Uniform

DELTA = 1e-5
EXPECTED_RUNS = (10, 20, 50, 100, 200)
#: Epochs of the final runs (the shipped family's).
FULL_EPOCHS = 10
ROOT = os.path.join(os.path.dirname(__file__), "..", "landscapes")


def designs() -> list[TwoStageDesign]:
    """The two-stage grid: probe count / E[T] × split, released or selected probes, one final run or a selection."""
    out = []
    for n in EXPECTED_RUNS:
        for split in (0.3, 0.5, 0.7):
            out.append(TwoStageDesign(ProbeRelease(n), FinalRun(), split))
            out.append(TwoStageDesign(ProbeSelection(RepeatAndSelect(geometric(1 / n))), FinalRun(), split))
        out.append(TwoStageDesign(ProbeRelease(n, top_k=3), FinalSelection(RepeatAndSelect(geometric(1 / 3))), 0.5))
    return out


Sampler = Callable[[int, int], np.ndarray]
#: An arm: its expected number of training runs and its simulation ``(repeats, seed) -> values``.
Arm = tuple[float, Sampler]


def uniform_arms(family: LandscapeFamily, epsilon: float) -> dict[str, Arm]:
    """Uniform single-stage searches at every E[T] the family covers, as ``(repeats, seed) -> values``."""
    arms: dict[str, Arm] = {}
    for mean in EXPECTED_RUNS:
        try:
            sigma = arm_sigma(epsilon, DELTA, geometric(1 / mean), 1.0, 1.0, family.mechanism_metadata)
        except CalibrationError as error:
            print(f"  uniform E[T]={mean}: unreachable ({error})")
            continue
        if not family.sigma_range[0] <= sigma <= family.sigma_range[1]:
            print(f"  uniform E[T]={mean}: sigma {sigma:.4g} outside the family")
            continue
        landscape, law = family.at(sigma), geometric(1 / mean)

        def run(repeats: int, seed: int, landscape=landscape, law=law) -> np.ndarray:
            return simulate(landscape, [Uniform()], repeats=repeats, run_count=law, seed=seed, workers=1)[0].values

        arms[f"uniform E[T]={mean} (sigma {sigma:.3f})"] = (float(mean), run)
    return arms


def two_stage_arms(
    family: LandscapeFamily, epsilon: float, probe_families: dict[int, LandscapeFamily] | None = None
) -> dict[str, Arm]:
    """Every design of :func:`designs` that meets ε inside the families, as ``(repeats, seed) -> values``.

    ``probe_families`` maps probe epochs to a lower-fidelity family on the same grid (``None``: full-fidelity probes
    on ``family`` only). An arm's expected runs count a probe of e epochs as e/10 of a full run (compute).
    """
    arms: dict[str, Arm] = {}
    for epochs, probes in (probe_families or {10: family}).items():
        for design in designs():
            try:
                probe = simulate_two_stage(design, family, epsilon, DELTA, 2, np.random.default_rng(0),
                                           probe_family=probes)
            except (CalibrationError, TwoStageDesignError) as error:
                print(f"  {design.label()} ({epochs}-epoch probes): cannot run ({str(error)[:90]})")
                continue
            sigmas = f"probe sigma {probe.calibration.probe_sigma:.3f}, final {probe.calibration.final_sigma:.3f}"

            at = (probes.at(probe.calibration.probe_sigma), family.at(probe.calibration.final_sigma))

            def run(repeats: int, seed: int, design=design, at=at) -> np.ndarray:  # calibrated once, above
                return two_stage_values(design, *at, repeats, np.random.default_rng(seed))

            n_probes, n_final = probe.calibration.report.expected_runs
            cost = n_probes * epochs / FULL_EPOCHS + n_final  # in full-run units
            arms[f"{design.label()}, {epochs}-epoch probes ({sigmas})"] = (cost, run)
    return arms


def probe_family(family: LandscapeFamily, epochs: int) -> LandscapeFamily:
    """The ``epochs``-epoch digits family of ``landscapes/multifidelity`` (``family`` itself for full epochs)."""
    if epochs == FULL_EPOCHS:
        return family
    return load_family(sorted(glob.glob(os.path.join(ROOT, "multifidelity", f"digits_mlp_epochs{epochs}_sigma*.npz"))))


def best(arms: dict[str, Arm], repeats: int, seed: int, max_runs: float = float("inf")) -> str | None:
    """The arm with the highest mean on ``repeats`` selection repeats among those with E[runs] ≤ ``max_runs``."""
    means = {name: float(run(repeats, seed).mean()) for name, (runs, run) in arms.items() if runs <= max_runs}
    for name, value in sorted(means.items(), key=lambda item: -item[1])[:3]:
        print(f"    {value:.4f}  {name}")
    return max(means, key=means.__getitem__) if means else None


def compare(uniform: dict[str, Arm], staged: dict[str, Arm], args: argparse.Namespace, max_runs: float) -> None:
    """Choose the best of each kind within ``max_runs`` on selection repeats, compare them on fresh repeats."""
    print(f"  E[runs] <= {max_runs:g}: best uniform, then best two-stage, on {args.select} selection repeats")
    u_name = best(uniform, args.select, seed=11, max_runs=max_runs)
    t_name = best(staged, args.select, seed=12, max_runs=max_runs + 1)  # + the final run
    if u_name is None or t_name is None:
        print("    (one kind has no arm within this compute)")
        return
    u, t = uniform[u_name][1](args.evaluate, 21), staged[t_name][1](args.evaluate, 22)
    diff, (low, high) = welch_ci95(t, u)
    print(f"  -> on {args.evaluate} fresh repeats: uniform {u.mean():.4f} ({u_name}); two-stage {t.mean():.4f} "
          f"({t_name}); two-stage - uniform {diff:+.4f} [{low:+.4f}, {high:+.4f}]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epsilon", type=float, nargs="+", default=[4.0, 8.0])
    parser.add_argument("--select", type=int, default=1000)
    parser.add_argument("--evaluate", type=int, default=3000)
    parser.add_argument("--max-runs", type=float, nargs="+", default=[20.0, float("inf")],
                        help="compute budgets in expected runs (a two-stage design may add its final run)")
    parser.add_argument("--probe-epochs", type=int, nargs="+", default=None,
                        help="probe fidelities: epochs of the landscapes/multifidelity families (10: the full family)")
    args = parser.parse_args()
    family = load_family(sorted(glob.glob(os.path.join(ROOT, "digits_mlp_sigma*.npz"))))
    print(family)
    probe_families = None if args.probe_epochs is None else {e: probe_family(family, e) for e in args.probe_epochs}
    for epsilon in args.epsilon:
        print(f"\nepsilon = {epsilon:g}, delta = {DELTA:g}")
        uniform, staged = uniform_arms(family, epsilon), two_stage_arms(family, epsilon, probe_families)
        for max_runs in args.max_runs:
            compare(uniform, staged, args, max_runs)


if __name__ == "__main__":
    main()

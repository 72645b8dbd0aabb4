"""Best uniform, best DP-HyPO (GP-UCB) and best two-stage search at equal total ε, per compute budget.

Run: ``OMP_NUM_THREADS=1 python benchmarks/two_stage.py [--family digits|mnist] [--epsilon 2 4 8]
[--max-runs 10 20 50 inf] [--probe-epochs 1 2 5 10] [--select 1000] [--evaluate 3000] [--select-adaptive 1000]``

Any family, not only the shipped ones: ``--landscape`` names the final runs' members (files or glob patterns, e.g. a
family built by ``dphypo landscape build`` on your own model) and ``--probe-landscape`` the members of its cheaper
probe families (grouped by the ``epochs`` of their metadata; same grid, fewer epochs), e.g.
``--landscape 'runs/cnn_sigma*.npz' --probe-landscape 'runs/cnn_epochs2_sigma*.npz'``. Full-fidelity probes run
on the family itself when ``--probe-epochs`` names its own epochs (the default for a family of your own).

Every arm costs the same total (ε, δ = 1e-5) under the family's DP-SGD mechanism (10 epochs; digits: batch 64,
MNIST subset: batch 256; score noise 0.02 accuracy):
- uniform single-stage search at E[T] ∈ {10, 20, 50, 100, 200} (geometric T), σ by
  :func:`dphypo.simulation.equal_epsilon.arm_sigma` (the smallest valid bound);
- DP-HyPO: GP-UCB projected onto S_{C,c} for (C, c) ∈ :data:`dphypo.simulation.planner.DEFAULT_GPUCB_BOUNDS` at the
  same E[T], σ by the same :func:`~dphypo.simulation.equal_epsilon.arm_sigma` with that (C, c) (Theorem B, as
  ``dphypo plan --design dp-hypo``); an arm whose σ is unreachable or outside the family is listed as such;
- two-stage designs (:func:`designs`), σ of both stages by :func:`dphypo.privacy.two_stage.calibrate_two_stage`
  (RDP composition of the stages).

``--probe-epochs 1 2 5 10`` gives the probes their own fidelity (the family's ``probes`` families: same grid,
mechanism and seeds at fewer epochs, each probe accounted with its own steps and counted as e/E of a full run of E
epochs in compute); E (10 for the shipped families) means full-fidelity probes on the family itself. Full-fidelity
and cheaper-probe designs are reported as two separate kinds (``two-stage (full-fidelity probes)`` and
``two-stage (cheap probes)``). Calibrated σ come from the on-disk cache where a plan or an earlier run of this script
put them (:func:`dphypo.simulation.planner.two_stage_calibration`, :func:`~dphypo.simulation.equal_epsilon.arm_sigma`).

Per compute budget (``--max-runs``: expected training runs in full-run units; a two-stage design may add its one
final run), the best arm of each kind is *chosen* on selection repeats and *compared* with the best uniform arm on
``--evaluate`` fresh repeats (independent streams, Welch 95 % interval), so the choice among many arms does not
flatter any kind (no winner's curse in the comparison). The GP-UCB arms are chosen on ``--select-adaptive`` repeats
and evaluated on ``--evaluate-adaptive`` (they cost seconds per 100 repeats, the others milliseconds). Each kind
uses its own fixed seeds (uniform 11 / 21, two-stage 12 / 22, DP-HyPO 13 / 23), so the uniform and two-stage numbers
of an earlier run of this script reproduce.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from dphypo.privacy import CalibrationError, RepeatAndSelect, geometric
from dphypo.privacy.run_counts import TruncatedNegativeBinomial as TNB
from dphypo.privacy.two_stage import (
    FinalRun,
    FinalSelection,
    ProbeRelease,
    ProbeSelection,
    TwoStage,
    TwoStageDesignError,
)
from dphypo.simulation.equal_epsilon import arm_sigma
from dphypo.simulation.family import LandscapeFamily, load_family
from dphypo.simulation.landscapes import Landscape, load_landscape
from dphypo.simulation.planner import DEFAULT_GPUCB_BOUNDS, two_stage_calibration, welch_ci95
from dphypo.simulation.simulate import simulate
from dphypo.simulation.two_stage import two_stage_values
from dphypo.strategies import GPUCB, Strategy, Uniform

DELTA = 1e-5
EXPECTED_RUNS = (10, 20, 50, 100, 200)
#: Epochs of the final runs (both families').
FULL_EPOCHS = 10
ROOT = os.path.join(os.path.dirname(__file__), "..", "landscapes")
#: Per family: the 10-epoch members and the pattern of the cheaper-probe members (``{epochs}`` filled in).
FAMILIES: dict[str, tuple[tuple[str, ...], str]] = {
    "digits": (("digits_mlp_sigma*.npz",), os.path.join("multifidelity", "digits_mlp_epochs{epochs}_sigma*.npz")),
    "mnist": (("mnist_subset_cnn_sigma*.npz", os.path.join("mnist", "mnist_subset_cnn_sigma*.npz")),
              os.path.join("mnist", "probes", "mnist_subset_cnn_epochs{epochs}_sigma*.npz")),
}
#: (selection seed, evaluation seed) per kind of arm.
SEEDS = {"uniform": (11, 21), "dp-hypo": (13, 23), "two-stage": (12, 22)}


def designs() -> list[TwoStage]:
    """The two-stage grid: probe count / E[T] × split, released or selected probes, one final run or a selection."""
    out = []
    for n in EXPECTED_RUNS:
        for split in (0.3, 0.5, 0.7):
            out.append(TwoStage(ProbeRelease(n), FinalRun(), split))
            out.append(TwoStage(ProbeSelection(RepeatAndSelect(geometric(1 / n))), FinalRun(), split))
        out.append(TwoStage(ProbeRelease(n, top_k=3), FinalSelection(RepeatAndSelect(geometric(1 / 3))), 0.5))
    return out


Sampler = Callable[[int, int], np.ndarray]


@dataclass
class Arm:
    """One configuration: its expected training runs (full-run units) and its simulation ``(repeats, seed)``.

    Values are cached per ``(repeats, seed)``: every compute budget re-chooses among the same arms.
    """

    runs: float
    sampler: Sampler
    cache: dict[tuple[int, int], np.ndarray] = field(default_factory=dict)

    def values(self, repeats: int, seed: int) -> np.ndarray:
        """Released true values of ``repeats`` simulated searches on stream ``seed``, shape ``(repeats,)``."""
        if (repeats, seed) not in self.cache:
            self.cache[(repeats, seed)] = self.sampler(repeats, seed)
        return self.cache[(repeats, seed)]


def single_stage_arms(
    family: LandscapeFamily, epsilon: float, bounds: tuple[tuple[float, float], ...]
) -> dict[str, Arm]:
    """Single-stage searches at every E[T] and (C, c) the family covers; (1, 1) is uniform search, else GP-UCB."""
    arms: dict[str, Arm] = {}
    for C, c in bounds:
        kind = "uniform" if C == c == 1.0 else f"GP-UCB C={C:g} c={c:.3g}"
        for mean in EXPECTED_RUNS:
            try:
                sigma = arm_sigma(epsilon, DELTA, geometric(1 / mean), C, c, family.mechanism_metadata)
            except CalibrationError as error:
                print(f"  {kind} E[T]={mean}: unreachable ({' '.join(str(error).split())[:90]})")
                continue
            if not family.sigma_range[0] <= sigma <= family.sigma_range[1]:
                print(f"  {kind} E[T]={mean}: sigma {sigma:.4g} outside the family {family.sigma_range}")
                continue
            strategy: Strategy = Uniform() if kind == "uniform" else GPUCB(C=C, c=c)
            landscape, law = family.at(sigma), geometric(1 / mean)

            def run(
                repeats: int, seed: int, landscape: Landscape = landscape, law: TNB = law, strategy: Strategy = strategy
            ) -> np.ndarray:
                return simulate(landscape, [strategy], repeats=repeats, run_count=law, seed=seed, workers=1)[0].values

            arms[f"{kind} E[T]={mean} (sigma {sigma:.3f})"] = Arm(float(mean), run)
    return arms


def two_stage_arms(family: LandscapeFamily, epsilon: float, probes: LandscapeFamily, epochs: int) -> dict[str, Arm]:
    """Every design of :func:`designs` with ``epochs``-epoch probes on ``probes`` that meets ε inside the families.

    An arm's expected runs count a probe of e epochs as e/E of a full run of the family's E epochs (compute).
    """
    arms: dict[str, Arm] = {}
    final_epochs = int(family.mechanism_metadata["epochs"])
    final_metadata, probe_metadata = (json.dumps(dict(f.mechanism_metadata), sort_keys=True, default=repr)
                                      for f in (family, probes))
    for design in designs():
        try:
            calibration = two_stage_calibration(design, epsilon, DELTA, final_metadata, probe_metadata)
            for what, fam, sigma in (("probe", probes, calibration.probe_sigma),
                                     ("final", family, calibration.final_sigma)):
                if not fam.sigma_range[0] <= sigma <= fam.sigma_range[1]:
                    raise ValueError(f"{what} sigma {sigma:.4g} outside the family's range {fam.sigma_range}")
        except (CalibrationError, TwoStageDesignError, ValueError) as error:
            print(f"  {design.label()} ({epochs}-epoch probes): cannot run ({' '.join(str(error).split())[:90]})")
            continue
        sigmas = f"probe sigma {calibration.probe_sigma:.3f}, final {calibration.final_sigma:.3f}"
        at = (probes.at(calibration.probe_sigma), family.at(calibration.final_sigma))

        def run(  # calibrated once, above
            repeats: int, seed: int, design: TwoStage = design, at: tuple[Landscape, Landscape] = at
        ) -> np.ndarray:
            return two_stage_values(design, at[0], at[1], repeats, np.random.default_rng(seed))

        n_probes, n_final = calibration.report.expected_runs
        cost = n_probes * epochs / final_epochs + n_final  # in full-run units
        arms[f"{design.label()}, {epochs}-epoch probes ({sigmas})"] = Arm(cost, run)
    return arms


def load(name: str, epochs: int = FULL_EPOCHS) -> LandscapeFamily:
    """The family ``name`` of :data:`FAMILIES` at ``epochs`` (10: its final-run members)."""
    members, probe_pattern = FAMILIES[name]
    patterns = members if epochs == FULL_EPOCHS else (probe_pattern.format(epochs=epochs),)
    paths = sorted(path for pattern in patterns for path in glob.glob(os.path.join(ROOT, pattern)))
    if not paths:
        raise FileNotFoundError(f"no {epochs}-epoch members of the {name} family under {ROOT}")
    return load_family(paths)


def expand(patterns: Sequence[str]) -> list[str]:
    """The files the paths or glob patterns name, sorted; a pattern that names none is an error."""
    paths = []
    for pattern in patterns:
        found = sorted(glob.glob(pattern))
        if not found:
            raise FileNotFoundError(f"no landscape file matches {pattern!r}")
        paths += found
    return sorted(set(paths))


def families(args: argparse.Namespace) -> tuple[LandscapeFamily, dict[int, LandscapeFamily]]:
    """The final runs' family and the probe families by epochs: ``--landscape`` / ``--probe-landscape`` (any family,
    probe members grouped by their metadata's epochs) or the shipped ``--family``; full-fidelity probes (the family
    itself) when ``--probe-epochs`` names the family's own epochs."""
    if not args.landscape:
        if args.probe_landscape:
            raise ValueError("--probe-landscape needs --landscape (the final runs' family it is cheaper than)")
        family = load(args.family)
        wanted = args.probe_epochs or [FULL_EPOCHS]
        return family, {e: (family if e == FULL_EPOCHS else load(args.family, e)) for e in wanted}
    family = load_family(expand(args.landscape))
    final_epochs = int(family.mechanism_metadata["epochs"])
    grouped: dict[int, list[str]] = {}
    for path in expand(args.probe_landscape or []):
        epochs = int(load_landscape(path).metadata["epochs"])
        grouped.setdefault(epochs, []).append(path)
    probes = {e: load_family(paths) for e, paths in sorted(grouped.items())}
    wanted = args.probe_epochs if args.probe_epochs else [final_epochs, *probes]
    missing = [e for e in wanted if e != final_epochs and e not in probes]
    if missing:
        raise ValueError(f"--probe-epochs {missing} have no --probe-landscape members (given: {sorted(probes)})")
    return family, {e: (family if e == final_epochs else probes[e]) for e in wanted}


def best(arms: dict[str, Arm], repeats: int, seed: int, max_runs: float) -> str | None:
    """The arm with the highest mean on ``repeats`` selection repeats among those with E[runs] ≤ ``max_runs``."""
    means = {name: float(arm.values(repeats, seed).mean()) for name, arm in arms.items() if arm.runs <= max_runs}
    for name, value in sorted(means.items(), key=lambda item: -item[1])[:3]:
        print(f"    {value:.4f}  {name}")
    return max(means, key=means.__getitem__) if means else None


def compare(kinds: dict[str, dict[str, Arm]], args: argparse.Namespace, epsilon: float, max_runs: float) -> list[str]:
    """Choose the best arm of each kind within ``max_runs``, compare each with the best uniform arm on fresh repeats.

    Returns:
        Markdown table cells: ε, budget, then per kind "mean (arm)" and, after uniform, "kind − uniform [CI]".
    """
    print(f"  E[runs] <= {max_runs:g}: best of each kind on selection repeats")
    cells = [f"{epsilon:g}", "∞" if math.isinf(max_runs) else f"{max_runs:g}"]
    uniform: np.ndarray | None = None
    for kind, arms in kinds.items():
        seed_kind = "dp-hypo" if kind == "dp-hypo" else ("uniform" if kind == "uniform" else "two-stage")
        select_seed, evaluate_seed = SEEDS[seed_kind]
        repeats = args.select_adaptive if kind == "dp-hypo" else args.select
        slack = 1.0 if kind.startswith("two-stage") else 0.0  # + the final run
        print(f"   {kind} ({repeats} repeats):")
        name = best(arms, repeats, select_seed, max_runs + slack)
        if name is None:
            cells += ["—"] + ([] if kind == "uniform" else ["—"])
            continue
        evaluate = args.evaluate_adaptive if kind == "dp-hypo" and args.evaluate_adaptive else args.evaluate
        values = arms[name].values(evaluate, evaluate_seed)
        cells.append(f"{values.mean():.4f} ({name})")
        if kind == "uniform":
            uniform = values
        elif uniform is not None:
            diff, (low, high) = welch_ci95(values, uniform)
            cells.append(f"{diff:+.4f} [{low:+.4f}, {high:+.4f}]")
            print(f"  -> {kind} {values.mean():.4f} ({name}) - uniform {uniform.mean():.4f}: "
                  f"{diff:+.4f} [{low:+.4f}, {high:+.4f}] on {evaluate} / {args.evaluate} fresh repeats")
    print("  | " + " | ".join(cells) + " |")
    return cells


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", choices=sorted(FAMILIES), default="digits")
    parser.add_argument("--epsilon", type=float, nargs="+", default=[4.0, 8.0])
    parser.add_argument("--select", type=int, default=1000)
    parser.add_argument("--select-adaptive", type=int, default=1000, help="selection repeats of the GP-UCB arms")
    parser.add_argument("--evaluate", type=int, default=3000)
    parser.add_argument("--evaluate-adaptive", type=int, default=None,
                        help="fresh repeats of the chosen GP-UCB arm (default: --evaluate)")
    parser.add_argument("--max-runs", type=float, nargs="+", default=[20.0, float("inf")],
                        help="compute budgets in expected runs (a two-stage design may add its final run)")
    parser.add_argument("--probe-epochs", type=int, nargs="+", default=None,
                        help="probe fidelities in epochs (the family's own: full-fidelity probes on the family "
                             "itself; default: the shipped family's 10, or every fidelity given)")
    parser.add_argument("--landscape", action="extend", nargs="+", default=[],
                        help="members of any final-run family (files or glob patterns), instead of --family")
    parser.add_argument("--probe-landscape", action="extend", nargs="+", default=[],
                        help="members of its cheaper probe families (files or patterns; grouped by epochs)")
    parser.add_argument("--no-dp-hypo", action="store_true", help="leave the GP-UCB arms out")
    return parser


def main() -> None:
    args = build_parser().parse_args()
    family, probe_families = families(args)
    print(family)
    final_epochs = int(family.mechanism_metadata["epochs"])
    rows = []
    for epsilon in args.epsilon:
        print(f"\nepsilon = {epsilon:g}, delta = {DELTA:g}")
        kinds = {"uniform": single_stage_arms(family, epsilon, ((1.0, 1.0),))}
        if not args.no_dp_hypo:
            kinds["dp-hypo"] = single_stage_arms(family, epsilon, DEFAULT_GPUCB_BOUNDS)
        for label, fidelities in (("two-stage (full-fidelity probes)", [final_epochs]),
                                  ("two-stage (cheap probes)", [e for e in probe_families if e != final_epochs])):
            staged = {k: v for e in fidelities if e in probe_families
                      for k, v in two_stage_arms(family, epsilon, probe_families[e], e).items()}
            if staged or any(e in probe_families for e in fidelities):
                kinds[label] = staged
        for max_runs in args.max_runs:
            rows.append(compare(kinds, args, epsilon, max_runs))
    print("\n| ε | E[runs] ≤ | " + " | ".join(f"{k} | {k} − uniform" if k != "uniform" else k for k in kinds) + " |")
    for cells in rows:
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()

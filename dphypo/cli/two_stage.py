"""``dphypo simulate --design two-stage``: one two-stage design, calibrated to a total ε on a landscape family.

Parse → build → run → render, as the other commands: :class:`TwoStageArgs` holds the design options as typed,
:func:`build_design` checks them and builds the :class:`~dphypo.privacy.two_stage.TwoStage` before the
family is read, :func:`run_two_stage` calibrates both stages' σ (:func:`~dphypo.simulation.two_stage.calibrate_design`)
and simulates the design on the family (:func:`~dphypo.simulation.two_stage.simulate_two_stage`), and
:func:`render_two_stage` prints one table or one JSON object.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.table import Table

from dphypo.cli.common import _emit, out_console, simulated_split_rule
from dphypo.privacy.validation import check_non_negative_int, check_positive, check_positive_int

if TYPE_CHECKING:
    from dphypo.privacy.two_stage import TwoStage
    from dphypo.simulation.two_stage import TwoStageResult

__all__ = ["PROBE_MODES", "TwoStageArgs", "build_design", "render_two_stage", "run_two_stage", "two_stage_design"]

#: ``--probe-mode``: a private selection of the best probe, or every probe's score released.
PROBE_MODES: tuple[str, ...] = ("select", "release")


@dataclass(frozen=True)
class TwoStageArgs:
    """The options of ``dphypo simulate --design two-stage`` as typed.

    Attributes:
        landscape: The family's member files (at least 2).
        epsilon: Total ε of the whole design.
        delta: δ.
        probes: Number of released probes, or E[T] of the probe selection (geometric T).
        probe_mode: ``"select"`` or ``"release"``.
        split: Fraction of ε for the probes, in (0, 1).
        top_k: Probes handed to stage 2 (``"release"`` only; > 1 needs ``final_mean``).
        final_mean: E[T′] of a uniform selection among the top k, or ``None`` for one final run.
        repeats: Simulated searches.
        seed: Study seed.
        as_json: Print one JSON object.
        data_split: ``--data-split`` as given (``None``: ``dphypo tune``'s default,
            :func:`~dphypo.cli.common.simulated_split_rule`).
    """

    landscape: list[str]
    epsilon: float | None
    delta: float
    probes: float
    probe_mode: str
    split: float
    top_k: int
    final_mean: float | None
    repeats: int
    seed: int
    as_json: bool
    data_split: str | None = None


def build_design(args: TwoStageArgs) -> TwoStage:
    """Check every option and build the design, before any file is read.

    Raises:
        ValueError: An invalid option, named by its option (``TwoStageDesignError`` for a design no theorem covers).
    """
    if args.epsilon is None:
        raise ValueError("--design two-stage needs --epsilon: both stages are calibrated to one total ε")
    check_positive("epsilon", args.epsilon)
    check_positive_int("repeats", args.repeats)
    check_non_negative_int("seed", args.seed)
    return two_stage_design(args.probes, args.probe_mode, args.split, args.top_k, args.final_mean)


#: The design's parameter names -> the options that set them: the privacy layer names its parameters, the CLI
#: translates them (:func:`~dphypo.cli.common.option_names`).
DESIGN_OPTION_NAMES = {"probes": "--probes", "top_k": "--top-k", "split": "--split", "final_mean": "--final-mean"}


def two_stage_design(probes: float, probe_mode: str, split: float, top_k: int, final_mean: float | None, *,
                     C: float = 1.0, c: float = 1.0) -> TwoStage:
    """The design ``--probes --probe-mode --split --top-k --final-mean`` describe (``simulate`` and ``tune``).

    Args:
        probes: Number of released probes, or E[T] of the probe selection (geometric T).
        probe_mode: ``"select"`` or ``"release"``.
        split: Fraction of ε for the probes.
        top_k: Probes handed to stage 2 (``"release"`` only).
        final_mean: E[T′] of a uniform selection among the top k, or ``None`` for one final run.
        C: Upper density bound of a probe selection (``tune --strategy gp``).
        c: Lower density bound of a probe selection.

    Raises:
        ValueError: An invalid option, named by its option (the design's own checks, translated by
            :data:`DESIGN_OPTION_NAMES`).
    """
    from dphypo.cli.common import option_names

    if probe_mode not in PROBE_MODES:
        raise ValueError(f"--probe-mode must be one of {', '.join(PROBE_MODES)}, got {probe_mode!r}")
    _check_design_options(probes, probe_mode, top_k, final_mean)
    with option_names(**DESIGN_OPTION_NAMES):
        return _design(probes, probe_mode, split, top_k, final_mean, C, c)


def _check_design_options(probes: float, probe_mode: str, top_k: int, final_mean: float | None) -> None:
    """The refusals whose library wording names classes, not options: said here in the options' words."""
    from dphypo.search.limits import MAX_EXPECTED_RUNS

    for option, value in (("--probes", probes), ("--final-mean", final_mean)):
        if value is not None and value > MAX_EXPECTED_RUNS:  # a dry run would otherwise plan what no run can train
            raise ValueError(f"{option} must be at most {MAX_EXPECTED_RUNS:,} runs for a search that trains or "
                             f"simulates, got {value:g}")
    if probe_mode == "release" and not float(probes).is_integer():
        raise ValueError(f"--probes must be an integer with --probe-mode release, got {probes!r}")
    if probe_mode == "select":
        if top_k != 1:
            raise ValueError("--top-k needs --probe-mode release: a private selection releases its best probe only")
        if not (math.isfinite(probes) and probes > 1.0):
            raise ValueError(f"--probes must be a finite number > 1 with --probe-mode select (E[T] of the probe "
                             f"selection), got {probes!r}")
    if final_mean is not None:
        if not (math.isfinite(final_mean) and final_mean > 1.0):
            raise ValueError(f"--final-mean must be a finite number > 1 (E[T′] of the final selection), "
                             f"got {final_mean!r}")
        if top_k < 2:
            raise ValueError(f"--final-mean needs --top-k >= 2 with --probe-mode release (the final selection chooses "
                             f"among the top k probes; without --final-mean one final run trains the best), "
                             f"got --top-k {top_k}")


def _design(probes: float, probe_mode: str, split: float, top_k: int, final_mean: float | None, C: float,
            c: float) -> TwoStage:
    """The :class:`~dphypo.privacy.two_stage.TwoStage` of checked options."""
    from dphypo.privacy import RepeatAndSelect, geometric
    from dphypo.privacy.two_stage import FinalRun, FinalSelection, ProbeRelease, ProbeSelection, TwoStage

    stage1: ProbeRelease | ProbeSelection
    if probe_mode == "release":
        stage1 = ProbeRelease(int(probes), top_k=top_k)
    else:
        stage1 = ProbeSelection(RepeatAndSelect(geometric(1.0 / probes), C, c))
    if final_mean is None:
        return TwoStage(stage1, FinalRun(), split)
    return TwoStage(stage1, FinalSelection(RepeatAndSelect(geometric(1.0 / final_mean))), split)


def run_two_stage(args: TwoStageArgs, design: TwoStage) -> TwoStageResult:
    """Calibrate ``design`` on the family and simulate ``args.repeats`` searches (public landscapes only)."""
    import numpy as np

    from dphypo.simulation.family import load_family
    from dphypo.simulation.two_stage import simulate_two_stage

    if len(args.landscape) < 2:
        raise ValueError(f"--design two-stage needs a landscape family: repeat --landscape for at least 2 members, "
                         f"got {len(args.landscape)}")
    family = load_family(args.landscape)
    assert args.epsilon is not None  # build_design checked it
    return simulate_two_stage(design, family, args.epsilon, args.delta, args.repeats,
                              np.random.default_rng(args.seed),
                              split_rule=simulated_split_rule(args.data_split, family))


def two_stage_payload(args: TwoStageArgs, result: TwoStageResult) -> dict[str, Any]:
    """The JSON of a simulated two-stage design: the design, both σ, the accounting and the mean [95 % CI]."""
    from dphypo.simulation.simulate import mean_ci95

    report = result.calibration.report
    mean, (low, high) = mean_ci95(result.values)
    return {
        "design": result.design.describe(), "landscape": list(args.landscape), "repeats": int(result.values.size),
        "seed": args.seed, "epsilon": report.epsilon, "delta": report.delta, "method": report.method,
        "methods": report.methods, "stage1_epsilon": report.stage1_epsilon, "stage2_epsilon": report.stage2_epsilon,
        "stage1_theorem": report.stage1_theorem, "stage2_theorem": report.stage2_theorem,
        "probe_sigma": result.calibration.probe_sigma, "final_sigma": result.calibration.final_sigma,
        "expected_runs": list(report.expected_runs), "mean": mean, "ci95": [low, high],
        **({"bound": bound} if (bound := getattr(report, "bound", None)) else {}),
    }


def render_two_stage(args: TwoStageArgs, result: TwoStageResult) -> None:
    """One JSON object (``--json``) or a two-column table."""
    payload = two_stage_payload(args, result)
    if args.as_json:
        _emit(payload, Table(), True)
        return
    table = Table(title=f"Two-stage design at total ε = {args.epsilon:g}, δ = {args.delta:g}: "
                        f"{payload['repeats']} simulated searches")
    table.add_column("")
    table.add_column("value")
    rows = [
        ("design", result.design.label()),
        ("σ of the probes, of the final run", f"{payload['probe_sigma']:.4f}, {payload['final_sigma']:.4f}"),
        ("total ε (bound)", f"{payload['epsilon']:.4f} ({payload['method']})"),
        ("  stage 1 alone", f"{payload['stage1_epsilon']:.4f} ({payload['stage1_theorem']})"),
        ("  stage 2 alone", f"{payload['stage2_epsilon']:.4f} ({payload['stage2_theorem']})"),
        ("expected runs (probes, final)", ", ".join(f"{x:g}" for x in payload["expected_runs"])),
        ("mean true value released [95% CI]", f"{payload['mean']:.4f} [{payload['ci95'][0]:.4f}, "
                                              f"{payload['ci95'][1]:.4f}]"),
    ]
    for key, value in rows:
        table.add_row(key, value)
    out_console().print(table)

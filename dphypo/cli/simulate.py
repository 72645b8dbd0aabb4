"""``dphypo simulate``: simulated private searches on landscapes (studies: :mod:`dphypo.simulation.studies`).

With ``--epsilon E`` and several ``--landscape`` (the members of one landscape family,
:mod:`dphypo.simulation.family`), the comparison is at equal total ε: every arm calibrates its own σ for total ε = E
(:func:`dphypo.simulation.equal_epsilon.arm_sigma`: its run count, its C and c) and runs on the family's landscape at
that σ.

``--strategy top-set`` is :class:`~dphypo.strategies.GPTopSet` (outputs name it ``gp-top-set``): C from ``--C`` (or
each ``--bounds`` / ``--sweep table2`` row), c derived from C and ``--top-mass`` p, c = (1 − C·p)/(1 − p)
(:func:`dphypo.density.lower_bound_for_top_mass`); every cell simulates and accounts exactly that (C, c)
(:func:`dphypo.simulation.studies.cell_strategy`).

``--design two-stage`` simulates one two-stage design calibrated to ``--epsilon`` (``--probe-mode release`` by
default, as ``dphypo tune``; the probes on the ``--probe-landscape`` family, e.g. 2-epoch runs). With released
probes, every ``--probe-strategy`` × ``--recommend`` pair is an arm
(:class:`~dphypo.simulation.two_stage.ProbeArm`: the placement and recommendation ``tune`` runs), all arms sharing
their random streams, each reported with its paired ``difference_vs_uniform`` against uniform placement +
best-probe (:func:`~dphypo.simulation.two_stage.simulate_two_stage_arms`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeGuard

import typer
from rich.table import Table

from dphypo.cli.common import (
    DEFAULT_LOWER_C,
    STRATEGY_NAMES,
    AdaptiveTheoremOpt,
    FinalMeanOpt,
    JsonOpt,
    SimulatedDataSplitOpt,
    SplitOpt,
    TopKOpt,
    UpperOpt,
    _emit,
    app,
    make_strategy,
    option_names,
    out_console,
    simulated_split_rule,
)
from dphypo.privacy.validation import check_non_negative_int

if TYPE_CHECKING:
    from dphypo.cli.two_stage import TwoStageArgs
    from dphypo.privacy.two_stage import TwoStage
    from dphypo.simulation.family import LandscapeFamily
    from dphypo.simulation.simulate import Engine
    from dphypo.simulation.studies import ArmSpec, CellLandscape, Setting, StudyConfig, StudyResult
    from dphypo.simulation.two_stage import ProbeArm, TwoStageArmsResult, TwoStageResult

SWEEPS = ("table1", "table2")
#: ``dphypo simulate --help``.
SIMULATE_HELP = "Compare strategies by simulated searches: mean true value of the released λ and each arm's total ε."

#: Library parameter names -> the simulate options that set them (for one-line errors naming the option).
OPTION_NAMES = {
    "landscape": "--landscape", "strategy": "--strategy", "repeats": "--repeats", "C": "--C", "c": "--c",
    "tau": "--tau", "beta": "--beta", "scale": "--scale", "runs": "--runs", "theta": "--theta", "gamma": "--gamma",
    "mean": "--mean", "bounds": "--bounds", "gp-repeats": "--gp-repeats", "sweep": "--sweep", "engine": "--engine",
    "batch": "--batch", "workers": "--workers", "executor": "--executor", "delta": "--delta", "seed": "--seed",
    "fixed T": "--fixed-T", "epsilon": "--epsilon", "top_mass": "--top-mass", "tolerance": "--tolerance",
    "refit_growth": "--refit-growth", "probes": "--probes", "split": "--split", "top_k": "--top-k",
    "final_mean": "--final-mean", "data_split": "--data-split", "probe_landscape": "--probe-landscape",
    "probe_strategy": "--probe-strategy",
    "recommend": "--recommend", "probe_mode": "--probe-mode",
}
#: ``--probe-strategy``: where released probes go (``gp`` is ``gp-log-nei``; :mod:`dphypo.strategies.gp.placement`).
PROBE_STRATEGIES = ("uniform", "gp", "gp-ucb", "gp-log-nei")


def _bounds(
    texts: list[str] | None, sweep: str | None, C: float, c: float | None, takes_c: bool
) -> list[tuple[float, float | None]]:
    """``--bounds C:c`` pairs, the Table-2 sweep (c = 1/C), or the single ``--C/--c``.

    Without a gp arm (``takes_c`` False) no row carries a c: a top-set arm derives its own, so ``--bounds`` is
    ``C`` alone and a ``C:c`` is refused (the c would be silently ignored).
    """
    from dphypo.simulation.studies import TABLE2_UPPER_BOUNDS

    if texts:
        pairs: list[tuple[float, float | None]] = []
        for text in texts:
            parts = text.split(":")
            try:
                values = [float(x) for x in parts]
            except ValueError as exc:
                raise ValueError(f"bounds must look like C:c (e.g. 1.25:0.8), got {text!r}") from exc
            if takes_c and len(values) == 2:
                pairs.append((values[0], values[1]))
            elif not takes_c and len(values) == 1:
                pairs.append((values[0], None))
            elif takes_c:
                raise ValueError(f"bounds must look like C:c (e.g. 1.25:0.8), got {text!r}")
            else:
                raise ValueError(f"--bounds takes C alone for --strategy top-set (its c follows from C: c = "
                                 f"(1 - C p)/(1 - p), p = --top-mass), got {text!r}")
        return pairs
    if sweep == "table2":
        return [(upper, 1.0 / upper if takes_c else None) for upper in TABLE2_UPPER_BOUNDS]
    return [(C, (DEFAULT_LOWER_C if c is None else c) if takes_c else None)]


def _adaptive_repeats(texts: list[str] | None) -> dict[float, int]:
    out: dict[float, int] = {}
    for text in texts or []:
        try:
            key, value = text.split("=")
            out[float(key)] = int(value)
        except ValueError as exc:
            raise ValueError(
                f"gp-repeats must look like KEY=N (KEY a γ, E[T], C or T), got {text!r}"
            ) from exc
    return out


def _settings(
    fixed_T: str | None, runs: str | None, theta: float | None, gamma: list[float] | None, mean: float | None,
    sweep: str | None, bounds: list[tuple[float, float | None]], overrides: dict[float, int], any_adaptive: bool,
) -> tuple[Setting, ...]:
    from dphypo.privacy import make_run_count
    from dphypo.simulation.studies import TABLE1_GAMMAS, fixed_T_settings, parse_T_values, run_count_settings

    if sweep is not None and sweep not in SWEEPS:
        raise ValueError(f"sweep must be one of {SWEEPS}, got {sweep!r}")
    if sweep == "table1":
        if gamma or mean is not None or fixed_T is not None:
            raise ValueError("--sweep table1 sets γ itself: drop --gamma/--mean/--fixed-T")
        runs, gamma = runs or "geometric", list(TABLE1_GAMMAS)
    if (fixed_T is None) == (runs is None):
        raise ValueError("give exactly one of --fixed-T or --runs (T drawn per search from its distribution)")
    if not any_adaptive:
        bounds = [(1.0, 1.0)]  # uniform search only: C, c play no role (and Poisson T stays allowed)
    if fixed_T is not None:
        if len(bounds) != 1:
            raise ValueError("--fixed-T takes one pair of bounds (--C/--c)")
        Ts = parse_T_values(fixed_T)
        return tuple(
            dataclasses.replace(s, adaptive_repeats=overrides.get(float(T)))
            for T, s in zip(Ts, fixed_T_settings(Ts, *bounds[0]), strict=True)
        )
    assert runs is not None  # exactly one of fixed_T and runs (checked above)
    gammas: list[float | None] = list(gamma) if gamma else [None]
    run_counts = [make_run_count(runs, theta=theta, gamma=g, mean=mean) for g in gammas]
    return run_count_settings(run_counts, bounds, overrides)


@app.command("simulate", help=SIMULATE_HELP)
def simulate_command(
    landscape: Annotated[
        list[str],
        typer.Option(
            "--landscape",
            help="A landscape .npz file, or synthetic:smooth|ridge|multimodal. With --epsilon: repeat it for "
            "every member of one landscape family (same grid and plan, different σ).",
        ),
    ],
    strategy: Annotated[
        list[str] | None,
        typer.Option(
            "--strategy",
            help="uniform, gp (GP-UCB softmax, C and c from --C/--c) or top-set (GP top-set rule: C·π⁰ on the "
            "points most likely near the best; C from --C, c derived from C and --top-mass); repeat the option to "
            "compare several.",
        ),
    ] = None,
    gp_landscape: Annotated[
        str | None,
        typer.Option(
            "--gp-landscape",
            help="White box: landscape of the GP arm (e.g. built at the "
            "larger σ a GP search may use for the same total ε).",
        ),
    ] = None,
    epsilon: Annotated[
        float | None,
        typer.Option(
            "--epsilon",
            help="Equal ε: every arm runs on the family (the --landscape members) at the σ at which its own "
            "search (--runs/--gamma/--mean, its C and c) costs this total ε.",
        ),
    ] = None,
    fixed_T: Annotated[
        str | None,
        typer.Option("--fixed-T", help="Runs of every search (research mode, no ε): N, 1..20 or 1,5,10."),
    ] = None,
    runs: Annotated[
        str | None, typer.Option("--runs", help="Draw T per search: negbin, geometric, logarithmic, poisson.")
    ] = None,
    theta: Annotated[float | None, typer.Option("--theta", help="θ of negbin runs.")] = None,
    gamma: Annotated[
        list[float] | None, typer.Option("--gamma", help="γ of the TNB family; repeat for one row per γ.")
    ] = None,
    mean: Annotated[float | None, typer.Option("--mean", help="E[T].")] = None,
    sweep: Annotated[
        str | None,
        typer.Option(
            "--sweep",
            help="table1: geometric γ ∈ {0.001,...,0.03} (DP-HyPO Table 1); "
            "table2: C ∈ {1.25, 1.33, 1.5}, c = 1/C (Table 2, black box; a top-set arm derives its c).",
        ),
    ] = None,
    bounds: Annotated[
        list[str] | None,
        typer.Option(
            "--bounds",
            help="C:c of the gp arm (a top-set arm takes the C and derives its c; C alone when every adaptive arm "
            "is top-set); repeat for one row per pair.",
        ),
    ] = None,
    repeats: Annotated[
        int, typer.Option("--repeats", help="Independent searches per strategy and row.")
    ] = 200,
    gp_repeats: Annotated[
        list[str] | None,
        typer.Option(
            "--gp-repeats",
            help="KEY=N: N searches for the GP arm in rows whose γ, "
            "E[T], C or T is KEY (0: not simulated; stated in the output).",
        ),
    ] = None,
    C: UpperOpt = 2.0,
    c: Annotated[
        float | None,
        typer.Option(
            "--c",
            help="Lower density-ratio bound c ∈ (0, 1] of the gp arm (default 0.75). Not for top-set, which "
            "derives c = (1 − C·p)/(1 − p) from --C and --top-mass p.",
        ),
    ] = None,
    top_mass: Annotated[
        float,
        typer.Option("--top-mass", help="top-set: prior mass p ∈ (0, 1/C) of the favoured set (fixes its c)."),
    ] = 0.05,
    tolerance: Annotated[
        float,
        typer.Option("--tolerance", help="top-set: how far below the best counts as near, in score std units."),
    ] = 0.5,
    refit_growth: Annotated[
        float,
        typer.Option(
            "--refit-growth",
            help="gp, top-set: refit the GP's hyperparameters once a search's observations grew by this fraction "
            "since its last fit, conditioning the fitted GP exactly in between (0: refit every step, DP-HyPO).",
        ),
    ] = 0.1,
    tau: Annotated[float, typer.Option("--tau", help="GP-UCB exploration weight τ (s = μ + τσ).")] = 0.1,
    beta: Annotated[float, typer.Option("--beta", help="Softmax inverse temperature β.")] = 1.0,
    scale: Annotated[
        str,
        typer.Option(
            "--scale", help="GP score scale before the softmax: standardized, range or raw (paper)."
        ),
    ] = "standardized",
    delta: Annotated[float, typer.Option("--delta", help="δ of the total ε printed per arm.")] = 1e-5,
    seed: Annotated[int, typer.Option("--seed", help="Study seed.")] = 0,
    workers: Annotated[int | None, typer.Option("--workers", help="Processes (default: all cores).")] = None,
    engine: Annotated[
        str, typer.Option("--engine", help="batched (one batched GP per step across repeats) or sequential.")
    ] = "batched",
    batch: Annotated[int, typer.Option("--batch", help="Batched engine: searches per batched GP.")] = 256,
    executor: Annotated[
        str | None,
        typer.Option("--executor", help="Where searches run: process (local pool, default), ray or sequential."),
    ] = None,
    address: Annotated[
        str | None, typer.Option("--address", help="Ray cluster address for --executor ray (default: a local Ray).")
    ] = None,
    table: Annotated[
        bool, typer.Option("--table", help="Print the grid: rows = settings, columns = arms.")
    ] = False,
    table_out: Annotated[
        str | None,
        typer.Option("--table-out", help="Write the grid to PREFIX.csv and PREFIX.md (implies --table)."),
    ] = None,
    as_json: JsonOpt = False,
    adaptive_theorem: AdaptiveTheoremOpt = "B",
    design: Annotated[
        str, typer.Option("--design", help="single (the --strategy arms) or two-stage (probes, then one committed "
                          "run; needs --epsilon and a family).")
    ] = "single",
    probes: Annotated[
        float, typer.Option("--probes", help="two-stage: released probes, or E[T] of the probe selection.")
    ] = 20.0,
    probe_mode: Annotated[
        str | None, typer.Option("--probe-mode", help="two-stage: release (default, as dphypo tune: every probe's "
                                 "score, paid by composition) or select (the best probe, random T).")
    ] = None,
    probe_landscape: Annotated[
        list[str] | None,
        typer.Option("--probe-landscape", help="two-stage: the probes' family (same grid, e.g. 2-epoch runs: "
                     "landscapes/multifidelity/); repeat for every member. Default: the --landscape family.")
    ] = None,
    probe_strategy: Annotated[
        list[str] | None,
        typer.Option("--probe-strategy", help="two-stage, released probes: uniform (default) or gp (= gp-log-nei: "
                     "BoTorch qLogNEI batches on the GP of the released probes; gp-ucb: qUCB); repeat to compare "
                     "(paired, against uniform + best-probe).")
    ] = None,
    recommend: Annotated[
        list[str] | None,
        typer.Option("--recommend", help="two-stage, released probes: the committed point: best-probe (default), "
                     "gp-mean (posterior mean's argmax among the probed points), gp-mean-grid (over the grid) or "
                     "gp-near-best; repeat to compare.")
    ] = None,
    split: SplitOpt = 0.5,
    top_k: TopKOpt = 1,
    final_mean: FinalMeanOpt = None,
    probe_score_noise_accuracy: Annotated[
        float | None,
        typer.Option("--probe-score-noise-accuracy", help="two-stage, released probes: std of the noise on each "
                     "probe's released accuracy (default: the family's score noise), as dphypo tune's option; the "
                     "calibration and the probes' simulated scores use it.")
    ] = None,
    data_split: SimulatedDataSplitOpt = None,
) -> None:
    """``dphypo simulate`` (help: :data:`SIMULATE_HELP`).

    Typer declares one parameter per option; the body only collects them into one :class:`SimulateArgs`, builds
    the study (:func:`build_study`: every option checked before the first simulated search), runs it, writes the
    tables and renders the result. ``--design two-stage`` goes to :mod:`dphypo.cli.two_stage` instead.
    """
    with option_names(**OPTION_NAMES):
        args = SimulateArgs(**locals())  # every local is a parameter
        if args.design != "single":
            _simulate_two_stage(args)
            return
        study = build_study(args)
        result = run_simulation(study, args)
        write_tables(args.table_out, result)
        render_simulation(args, study, result)


def _simulate_two_stage(options: SimulateArgs) -> None:
    """``--design two-stage``: build the design, simulate it on the family, render (single-stage options refused)."""
    from dphypo.cli.two_stage import TwoStageArgs, build_design, run_two_stage

    if options.design != "two-stage":
        raise ValueError(f"--design must be single or two-stage, got {options.design!r}")
    if options.strategy:
        raise ValueError("--strategy is for --design single; a two-stage design places its probes with "
                         "--probe-strategy")
    if options.runs not in (None, "geometric"):
        raise ValueError(f"--runs must be geometric with --design two-stage (the law of a probe selection's T, as "
                         f"dphypo tune and plan), got {options.runs!r}")
    probe_mode = options.probe_mode or "release"
    args = TwoStageArgs(options.landscape, options.epsilon, options.delta, options.probes, probe_mode,
                        options.split, options.top_k, options.final_mean, options.repeats, options.seed,
                        options.as_json, options.data_split)
    design = build_design(args)
    arms = probe_arms(options.probe_strategy, options.recommend, probe_mode)
    noise = options.probe_score_noise_accuracy
    if noise is not None and (probe_mode != "release" or not noise > 0):
        raise ValueError(f"--probe-score-noise-accuracy must be > 0 and needs --probe-mode release, got {noise!r}")
    if probe_mode == "select" and not options.probe_landscape:
        from dphypo.cli.two_stage import render_two_stage

        render_two_stage(args, run_two_stage(args, design))
        return
    render_two_stage_arms(args, options.probe_landscape, run_two_stage_arms(args, design, arms,
                                                                             options.probe_landscape, noise))


def probe_arms(strategies: list[str] | None, rules: list[str] | None, probe_mode: str) -> tuple[ProbeArm, ...]:
    """The arms ``--probe-strategy`` × ``--recommend`` (uniform + best-probe first), checked before any file is read.

    Raises:
        ValueError: An unknown name, or a placement/GP rule with a probe selection (it releases its best probe only).
    """
    from dphypo.simulation.two_stage import BASELINE_ARM, ProbeArm
    from dphypo.strategies.gp.placement import ProbePlacement
    from dphypo.strategies.recommend import RECOMMENDATIONS, Recommendation

    for name in strategies or []:
        if name not in PROBE_STRATEGIES:
            raise ValueError(f"--probe-strategy must be one of {', '.join(PROBE_STRATEGIES)}, got {name!r}")
    for name in rules or []:
        if name not in RECOMMENDATIONS:
            raise ValueError(f"--recommend must be one of {', '.join(RECOMMENDATIONS)}, got {name!r}")
    placements = [ProbePlacement("uniform") if name == "uniform" else
                  ProbePlacement("gp", "ucb" if name == "gp-ucb" else "log-nei")
                  for name in dict.fromkeys(strategies or ["uniform"])]
    arms = [BASELINE_ARM] + [ProbeArm(p, Recommendation(r)) for p in placements
                             for r in dict.fromkeys(rules or ["best-probe"])]
    arms = list(dict.fromkeys(arms))
    if probe_mode != "release" and len(arms) > 1:
        raise ValueError("--probe-strategy and --recommend need --probe-mode release: a probe selection releases its "
                         "best probe only, so nothing is left to place or recommend from")
    return tuple(arms)


def run_two_stage_arms(args: TwoStageArgs, design: TwoStage, arms: tuple[ProbeArm, ...],
                       probe_landscape: list[str] | None, probe_score_noise_accuracy: float | None = None
                       ) -> TwoStageArmsResult | TwoStageResult:
    """Calibrate ``design`` on the family (probes on ``--probe-landscape``) and simulate every arm, paired.

    ``probe_score_noise_accuracy`` (``--probe-score-noise-accuracy``): the probes' score noise, as a multiple of the
    family's (the final runs') score noise in the design (``dphypo tune``'s probe score-noise factor).
    """
    import numpy as np

    from dphypo.simulation.family import load_family
    from dphypo.simulation.two_stage import simulate_two_stage, simulate_two_stage_arms

    if len(args.landscape) < 2:
        raise ValueError(f"--design two-stage needs a landscape family: repeat --landscape for at least 2 members, "
                         f"got {len(args.landscape)}")
    if probe_landscape is not None and len(probe_landscape) < 2:
        raise ValueError(f"--probe-landscape needs the probes' family: repeat it for at least 2 members, got "
                         f"{len(probe_landscape)}")
    family = load_family(args.landscape)
    probe_family = None if probe_landscape is None else load_family(probe_landscape)
    assert args.epsilon is not None  # build_design checked it
    split_rule = simulated_split_rule(args.data_split, family)
    if args.probe_mode != "release":
        return simulate_two_stage(design, family, args.epsilon, args.delta, args.repeats,
                                  np.random.default_rng(args.seed), probe_family=probe_family, split_rule=split_rule)
    factor = 1.0
    if probe_score_noise_accuracy is not None:
        factor = probe_score_noise_accuracy / float(family.mechanism_metadata["score_noise"])
    return simulate_two_stage_arms(design, family, args.epsilon, args.delta, args.repeats, args.seed, arms,
                                   probe_family=probe_family, probe_score_noise_factor=factor, split_rule=split_rule)


def render_two_stage_arms(args: TwoStageArgs, probe_landscape: list[str] | None,
                          result: TwoStageArmsResult | TwoStageResult) -> None:
    """One JSON object (``--json``) or a table with one row per arm.

    The JSON is the design's payload (the baseline arm's mean) with every arm and its paired
    ``difference_vs_uniform`` (against uniform placement + best-probe).
    """
    from dphypo.cli.two_stage import render_two_stage, two_stage_payload
    from dphypo.simulation.simulate import mean_ci95
    from dphypo.simulation.two_stage import TwoStageResult

    if isinstance(result, TwoStageResult):  # a probe selection: one arm
        payload = {**two_stage_payload(args, result), "probe_landscape": probe_landscape}
        if args.as_json:
            _emit(payload, Table(), True)
        else:
            render_two_stage(args, result)
        return
    baseline = TwoStageResult(result.design, result.calibration, result.values[result.baseline])
    arms = []
    for i, arm in enumerate(result.arms):
        mean, ci = mean_ci95(result.values[i])
        difference = result.difference(i)
        arms.append({**arm.describe(), "mean": mean, "ci95": list(ci),
                     "difference_vs_uniform": None if difference is None else {
                         "mean": difference[0], "ci95": list(difference[1])}})
    payload = {**two_stage_payload(args, baseline), "probe_landscape": probe_landscape,
               "baseline": result.arms[result.baseline].label, "arms": arms}
    if args.as_json:
        _emit(payload, Table(), True)
        return
    table = Table(title=f"{result.design.label()} at total ε = {payload['epsilon']:.4g} ({payload['method']}), "
                        f"δ = {args.delta:g}: probe σ {payload['probe_sigma']:.4f}, final σ "
                        f"{payload['final_sigma']:.4f}; {payload['repeats']} simulated searches per arm")
    for column in ("probe placement + recommendation", "mean true value [95% CI]",
                   "− uniform + best-probe (paired) [95% CI]"):
        table.add_column(column)
    for row in arms:
        difference = row["difference_vs_uniform"]
        table.add_row(row["label"], f"{row['mean']:.4f} [{row['ci95'][0]:.4f}, {row['ci95'][1]:.4f}]",
                      "-" if difference is None else
                      f"{difference['mean']:+.4f} [{difference['ci95'][0]:+.4f}, {difference['ci95'][1]:+.4f}]")
    out_console().print(table)


@dataclass(frozen=True)
class SimulateArgs:
    """The options of ``dphypo simulate`` as typed (fields: the command's parameter names; checked by the build)."""

    landscape: list[str]
    strategy: list[str] | None
    gp_landscape: str | None
    epsilon: float | None
    fixed_T: str | None
    runs: str | None
    theta: float | None
    gamma: list[float] | None
    mean: float | None
    sweep: str | None
    bounds: list[str] | None
    repeats: int
    gp_repeats: list[str] | None
    C: float
    c: float | None
    top_mass: float
    tolerance: float
    refit_growth: float
    tau: float
    beta: float
    scale: str
    delta: float
    seed: int
    workers: int | None
    engine: str
    batch: int
    executor: str | None
    address: str | None
    table: bool
    table_out: str | None
    as_json: bool
    adaptive_theorem: str
    design: str = "single"
    probes: float = 20.0
    probe_mode: str | None = None
    probe_landscape: list[str] | None = None
    probe_strategy: list[str] | None = None
    recommend: list[str] | None = None
    split: float = 0.5
    top_k: int = 1
    final_mean: float | None = None
    probe_score_noise_accuracy: float | None = None
    data_split: str | None = None

    @property
    def strategies(self) -> list[str]:
        """``--strategy``, required for a single-stage study.

        Raises:
            ValueError: It was not given.
        """
        if not self.strategy:
            raise ValueError("--strategy is required with --design single: uniform, gp or top-set (repeat it to "
                             "compare several)")
        return self.strategy


@dataclass(frozen=True)
class SimulateStudy:
    """What ``dphypo simulate`` runs, and what its output reports beside the study's result.

    Attributes:
        config: The study (settings × arms, repeats, seed, engine, the equal-ε target).
        pairs: The ``(C, c)`` of every row (``c`` ``None`` where only top-set arms adapt: each derives its own).
        family: The landscape family of an equal-ε study, else ``None``.
        landscapes: Every cell's landscape at its calibrated σ (equal-ε studies only).
    """

    config: StudyConfig
    pairs: list[tuple[float, float | None]]
    family: LandscapeFamily | None
    landscapes: Mapping[tuple[str, str], CellLandscape] | None


def _is_engine(name: str) -> TypeGuard[Engine]:
    from dphypo.simulation.simulate import ENGINES

    return name in ENGINES


def build_study(args: SimulateArgs) -> SimulateStudy:
    """Check every option (and the landscape files and ``--table-out``), then build the study.

    Raises:
        ValueError: An invalid option or file, named by its option.
    """
    from dphypo.simulation.simulate import ENGINES
    from dphypo.simulation.studies import StudyConfig

    _check_arm_options(args)
    # Rows carry a c unless every adaptive arm is top-set (gp takes the row's c, top-set derives its own).
    takes_c = "gp" in args.strategies or "top-set" not in args.strategies
    pairs = _bounds(args.bounds, args.sweep, args.C, args.c, takes_c)
    family = _check_landscapes(args.landscape, args.gp_landscape, args.epsilon, args.fixed_T)
    if args.table_out is not None:  # both files proven writable before any simulation runs
        from dphypo._paths import check_output_file

        for suffix in (".csv", ".md"):
            check_output_file(f"{args.table_out}{suffix}", "--table-out", create_parents=True)
    arms = _arms(args, pairs[0][0], family)
    any_adaptive = any(a.adaptive for a in arms)
    settings = _settings(args.fixed_T, args.runs, args.theta, args.gamma, args.mean, args.sweep, pairs,
                         _adaptive_repeats(args.gp_repeats), any_adaptive)
    if not _is_engine(args.engine):
        raise ValueError(f"engine must be one of {ENGINES}, got {args.engine!r}")
    if family is None and args.data_split is not None:
        raise ValueError("--data-split sets how σ is calibrated: it needs --epsilon and a landscape family")
    config = StudyConfig(_study_kind(args, family, any_adaptive), settings, arms, args.repeats, seed=args.seed,
                         delta=args.delta, engine=args.engine, batch=args.batch, workers=args.workers,
                         epsilon=args.epsilon, adaptive_theorem=args.adaptive_theorem,
                         split_rule=None if family is None else simulated_split_rule(args.data_split, family))
    if args.address is not None and args.executor != "ray":
        raise ValueError("--address needs --executor ray")
    landscapes = None
    if family is not None:  # every cell's σ calibrated and checked against the family before any search
        from dphypo.simulation.equal_epsilon import cell_landscapes

        landscapes = cell_landscapes(config)
    return SimulateStudy(config, pairs, family, landscapes)


def _check_arm_options(args: SimulateArgs) -> None:
    """The seed, the strategy names and the options that only some strategies take, before any file is read."""
    check_non_negative_int("seed", args.seed)
    defaults = SimulateArgs.__dataclass_fields__
    stray = [f"--{name.replace('_', '-')}" for name in ("probes", "probe_mode", "probe_landscape", "probe_strategy",
                                                         "recommend", "split", "top_k", "final_mean")
             if getattr(args, name) != defaults[name].default]
    if stray:
        raise ValueError(f"{', '.join(stray)} {'is' if len(stray) == 1 else 'are'} for --design two-stage")
    if args.gp_landscape is not None and all(name == "uniform" for name in args.strategies):
        raise ValueError("--gp-landscape is the landscape of the gp arm: add --strategy gp, or drop it")
    if args.c is not None and "gp" not in args.strategies and "top-set" in args.strategies:
        raise ValueError("--c is not used by --strategy top-set: its c follows from --C and --top-mass p, "
                         "c = (1 - C p)/(1 - p); drop --c (or add --strategy gp, which takes it)")
    for name in args.strategies:  # an unknown name fails before any file is read
        if name not in STRATEGY_NAMES:
            raise ValueError(f"strategy must be one of {', '.join(repr(n) for n in STRATEGY_NAMES)}, got {name!r}")


def _arms(args: SimulateArgs, first_C: float, family: LandscapeFamily | None) -> tuple[ArmSpec, ...]:
    """One arm per ``--strategy``: its strategy (a top-set arm built at the first row's C) and its landscape."""
    from dphypo.simulation.studies import ArmSpec

    arm_landscape: str | tuple[str, ...] = args.landscape[0] if family is None else tuple(args.landscape)
    arms = []
    for name in args.strategies:
        # a top-set arm is built at its first row's C (each row gives it its own C: studies.cell_strategy)
        strategy = make_strategy(name, C=first_C, tau=args.tau, beta=args.beta, scale=args.scale,
                                 top_mass=args.top_mass, tolerance=args.tolerance, refit_growth=args.refit_growth)
        arms.append(ArmSpec(name, strategy,
                            args.gp_landscape if (args.gp_landscape and name != "uniform") else arm_landscape))
    return tuple(arms)


def _study_kind(args: SimulateArgs, family: LandscapeFamily | None, any_adaptive: bool) -> str:
    """The study's name: fixed-T, equal-epsilon, white-box (a GP landscape), black-box or run-count."""
    if args.fixed_T is not None:
        return "fixed-T"
    if family is not None:
        return "equal-epsilon"
    return "white-box" if args.gp_landscape else "black-box" if any_adaptive else "run-count"


def run_simulation(study: SimulateStudy, args: SimulateArgs) -> StudyResult:
    """Run every cell's searches on ``--executor`` (default: a local pool) with a progress bar on a terminal."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn, TimeRemainingColumn

    from dphypo.search.execution import make_executor
    from dphypo.simulation.studies import run_study, study_searches

    pool = None if args.executor is None else make_executor(args.executor, workers=args.workers,
                                                             address=args.address)
    status = out_console(stderr=True)
    columns = ("{task.description}", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn())
    # Counts of simulated searches are public (landscapes, not private data). On a terminal only: piped or logged,
    # a bar would leave blank lines around the output.
    try:
        with Progress(*columns, console=status, transient=True, disable=not status.is_terminal) as bar:
            task = bar.add_task("simulated searches", total=study_searches(study.config))
            return run_study(study.config, executor=pool, landscapes=study.landscapes,
                             searches_done=lambda n: bar.advance(task, n))
    finally:
        if pool is not None:
            pool.close()


def write_tables(table_out: str | None, result: StudyResult) -> None:
    """Write the grid to ``PREFIX.csv`` and ``PREFIX.md`` (``--table-out``), if asked."""
    if table_out is None:
        return
    from dphypo.simulation.tables import table_csv, table_markdown

    prefix = Path(table_out)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{prefix}.csv").write_text(table_csv(result))
    Path(f"{prefix}.md").write_text(table_markdown(result))


def render_simulation(args: SimulateArgs, study: SimulateStudy, result: StudyResult) -> None:
    """Print one JSON object (``--json``), the grid (``--table``, ``--table-out``) or one row per cell."""
    if args.as_json:
        _emit(_payload(args, study, result), Table(), True)
    elif args.table or args.table_out is not None:
        out_console().print(_grid_table(result))
    else:
        out_console().print(_long_table(result, args.landscape[0] if study.family is None
                                        else " + ".join(args.landscape)))


def _payload(args: SimulateArgs, study: SimulateStudy, result: StudyResult) -> dict[str, Any]:
    """The JSON of a simulation: the study's result and the options that shaped it."""
    family = study.family
    return {
        **result.to_dict(),
        "landscape": args.landscape[0] if family is None else list(args.landscape),
        "gp_landscape": args.gp_landscape,
        "direction": _direction(args.landscape[0]),
        "epsilon_target": args.epsilon,
        "family_sigmas": None if family is None else list(family.sigmas),
        **_payload_bounds(study.pairs, result),
        "top_mass": args.top_mass,
        "tolerance": args.tolerance,
        "refit_growth": args.refit_growth,
        "tau": args.tau,
        "beta": args.beta,
        "scale": args.scale,
        "engine": args.engine,
        "executor": args.executor or "process",
    }


def _payload_bounds(pairs: list[tuple[float, float | None]], result: StudyResult) -> dict[str, float | None]:
    """The run's single (C, c) for the JSON payload (``None`` with several rows); a derived c when no row has one."""
    if len(pairs) != 1:
        return {"C": None, "c": None}
    C, c = pairs[0]
    if c is None:  # every adaptive arm is top-set: its one derived c (the cells report it too)
        derived = {cell.c for cell in result.cells if cell.arm.adaptive}
        c = derived.pop() if len(derived) == 1 else None
    return {"C": C, "c": c}


def _check_landscapes(
    landscape: list[str], gp_landscape: str | None, epsilon: float | None, fixed_T: str | None
) -> LandscapeFamily | None:
    """Check the landscape options before any simulation; the family of an equal-ε study, else ``None``."""
    from dphypo.simulation.family import load_family
    from dphypo.simulation.synthetic import resolve_landscape

    if epsilon is None:
        if len(landscape) != 1:
            raise ValueError(f"{len(landscape)} --landscape files form a landscape family, which is for an equal-ε "
                             "comparison: add --epsilon E, or give one --landscape")
        for spec in (landscape[0], gp_landscape):
            if spec is not None:
                resolve_landscape(spec)  # a missing or unreadable file fails now, not after the simulations
        return None
    if gp_landscape is not None:
        raise ValueError("--epsilon calibrates every arm's σ on the family of the --landscape files: drop "
                         "--gp-landscape")
    if fixed_T is not None:
        raise ValueError("--epsilon needs T drawn per search (--runs): fixed T (--fixed-T) has no privacy claim")
    if len(landscape) < 2:
        raise ValueError(f"--epsilon needs a landscape family: repeat --landscape for at least 2 members of one grid "
                         f"and plan at different σ, got {len(landscape)}")
    return load_family(landscape)  # one line naming the files if they are not one family


def _direction(spec: str) -> str:
    from dphypo.simulation.synthetic import resolve_landscape

    return resolve_landscape(spec).direction


def _grid_table(result: StudyResult) -> Table:
    from dphypo.simulation.tables import format_difference, format_epsilon, format_mean_ci, format_sigma

    config = result.config
    target = "" if config.epsilon is None else f", each arm's σ for total ε = {config.epsilon:g}"
    table = Table(
        title=f"{config.name}: mean true value of the released λ [95% CI], total ε (δ = {config.delta:g}{target})"
    )
    table.add_column("setting")
    table.add_column("runs")
    equal = config.epsilon is not None
    for arm in config.arms:
        if equal:
            table.add_column(f"{arm.label} σ")
        table.add_column(f"{arm.label}")
        table.add_column(f"{arm.label} ε")
        if arm.adaptive:
            table.add_column(f"{arm.label} − uniform (paired)")
    for setting in config.settings:
        row = [setting.label, setting.describe_runs()]
        for arm in config.arms:
            cell = result.cell(setting.label, arm.label)
            n = (
                ""
                if cell.result is None or cell.result.repeats == config.repeats
                else f" (n={cell.result.repeats})"
            )
            row += [format_sigma(cell)] if equal else []
            row += [format_mean_ci(cell) + n, format_epsilon(cell)]
            row += [format_difference(cell)] if arm.adaptive else []
        table.add_row(*row)
    return table


def _long_table(result: StudyResult, landscape: str) -> Table:
    from dphypo.simulation.tables import format_difference, format_epsilon, format_sigma

    config = result.config
    equal = config.epsilon is not None
    best = ", ".join(f"{v:.4f}" for v in result.best_values.values())
    if equal:
        title = (f"Equal-ε searches (total ε = {config.epsilon:g}, δ = {config.delta:g}: every arm at its own σ) on "
                 f"the family {landscape} (best value {best})")
    else:
        title = f"Simulated searches on {landscape} (best value {best})"
    table = Table(title=title)
    columns = ["setting", "strategy", "landscape", "T", "C, c"]
    columns += ["σ"] if equal else []
    columns += ["mean true value", "95% CI", "repeats", "total ε"]
    columns += ["− uniform (paired) [95% CI]"] if equal else []
    for col in columns:
        table.add_column(col)
    for cell in result.cells:
        r = cell.result
        ci = "-" if r is None else f"[{r.ci95[0]:.4f}, {r.ci95[1]:.4f}]"
        name = "family" if cell.arm.is_family else Path(cell.arm.landscape_name).name
        row = [cell.setting.label, cell.arm.strategy.name, name, cell.setting.describe_runs(),
               f"{cell.C:g}, {cell.c:.4g}"]
        row += [format_sigma(cell)] if equal else []
        row += ["not run" if r is None else f"{r.mean:.4f}", ci, str(0 if r is None else r.repeats),
                format_epsilon(cell)]
        row += [format_difference(cell) if cell.arm.adaptive else "-"] if equal else []
        table.add_row(*row)
    return table

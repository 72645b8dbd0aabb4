"""``dphypo plot``: landscape (N-D: slices, marginals), value vs T, densities, ε breakdown, a plan's Pareto front."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from dphypo.cli.common import GammaOpt, LowerOpt, MeanOpt, RunsOpt, ThetaOpt, UpperOpt, app, option_names

#: ``dphypo plot --help``.
PLOT_HELP = "Draw a figure (data extraction and rendering live in dphypo.visualization)."

OutOpt = Annotated[str, typer.Option("--out", help="Output file: .png or .svg.")]
LandscapeOpt = Annotated[
    str | None, typer.Option("--landscape", help="A landscape .npz, or synthetic:smooth|ridge|multimodal.")
]


#: Per figure kind: library parameter names -> the plot options that set them (one-line errors name the option).
_COMMON_NAMES = {"landscape": "--landscape", "path": "--out", "C": "--C", "c": "--c", "seed": "--seed"}
_OPTION_NAMES: dict[str, dict[str, str]] = {
    "landscape": {**_COMMON_NAMES, "axes": "--axes", "keep": "--axes"},
    "marginals": _COMMON_NAMES,
    "accuracy": {**_COMMON_NAMES, "Ts": "--T", "repeats": "--repeats", "strategy": "--strategy", "tau": "--tau",
                 "beta": "--beta", "scale": "--scale", "workers": "--workers"},
    "density": {**_COMMON_NAMES, "runs": "--fixed-T", "steps": "--step", "tau": "--tau", "beta": "--beta",
                "scale": "--scale"},
    "epsilon": {**_COMMON_NAMES, "sigma": "--sigma", "sample_rate": "--sample-rate", "steps": "--steps",
                "runs": "--runs", "theta": "--theta", "gamma": "--gamma", "mean": "--mean", "delta": "--delta",
                "bounds": "--bounds"},
    "pareto": {"path": "--from", "out": "--out"},
}


def _naming_options(command: Callable[..., None]) -> Callable[..., None]:
    """Errors of ``plot KIND`` name the option the user typed (``--step``, not ``steps``)."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        with option_names(**_OPTION_NAMES.get(kwargs.get("kind", ""), _COMMON_NAMES)):
            command(*args, **kwargs)

    return wrapper


@app.command("plot", help=PLOT_HELP)
@_naming_options
def plot_command(
    kind: Annotated[
        str, typer.Argument(metavar="KIND", help="landscape | marginals | accuracy | density | epsilon | pareto")
    ],
    out: OutOpt,
    landscape: LandscapeOpt = None,
    from_json: Annotated[
        list[str] | None, typer.Option("--from", help="accuracy: `dphypo simulate --json` outputs to plot; pareto: one "
                                       "`dphypo plan --json` output.")
    ] = None,
    strategy: Annotated[list[str] | None, typer.Option("--strategy", help="uniform / gp (repeatable).")] = None,
    T: Annotated[list[int] | None, typer.Option("--T", help="accuracy: fixed T values (repeatable).")] = None,
    repeats: Annotated[int, typer.Option("--repeats", help="accuracy: searches per (strategy, T).")] = 100,
    runs_fixed: Annotated[int, typer.Option("--fixed-T", help="density: runs of the GP search.")] = 20,
    step: Annotated[list[int] | None, typer.Option("--step", help="density: updates to show (repeatable).")] = None,
    C: UpperOpt = 2.0,
    c: LowerOpt = 0.75,
    tau: Annotated[float, typer.Option("--tau", help="GP-UCB exploration weight.")] = 0.1,
    beta: Annotated[float, typer.Option("--beta", help="Softmax inverse temperature.")] = 1.0,
    scale: Annotated[str, typer.Option("--scale", help="GP score scale.")] = "standardized",
    seed: Annotated[int, typer.Option("--seed", help="Seed.")] = 0,
    workers: Annotated[int | None, typer.Option("--workers", help="Processes for simulations.")] = None,
    sigma: Annotated[float | None, typer.Option("--sigma", help="epsilon: DP-SGD noise multiplier.")] = None,
    sample_rate: Annotated[float | None, typer.Option("--sample-rate", help="epsilon: sampling rate.")] = None,
    steps: Annotated[int | None, typer.Option("--steps", help="epsilon: DP-SGD steps per run.")] = None,
    runs: RunsOpt = "geometric",
    theta: ThetaOpt = None,
    gamma: GammaOpt = None,
    mean: MeanOpt = None,
    bounds: Annotated[
        list[str] | None, typer.Option("--bounds", help="epsilon: C:c pairs to compare (repeatable).")
    ] = None,
    delta: Annotated[float, typer.Option("--delta", help="epsilon: δ.")] = 1e-5,
    axes: Annotated[
        str | None, typer.Option("--axes", help="landscape: the two axes to draw, e.g. lr,clip (an N-D landscape is "
                                 "sliced through its best grid point; default: its first two axes).")
    ] = None,
) -> None:
    """``dphypo plot KIND`` (help: :data:`PLOT_HELP`).

    Typer declares one parameter per option; the body only collects them into one :class:`PlotArgs`, proves
    ``--out`` writable and hands them to the figure's function (:data:`FIGURES`), which builds and draws it.
    """
    args = PlotArgs(**locals())  # first: every local is a parameter
    from dphypo._paths import check_output_file

    check_output_file(out, "--out", create_parents=True)  # before a simulation spends minutes on the figure
    if kind not in FIGURES:
        raise ValueError(f"plot kind must be landscape, marginals, accuracy, density, epsilon or pareto, got {kind!r}")
    if axes is not None and kind != "landscape":  # never ignored silently
        why = " (it draws one panel per axis of the landscape)" if kind == "marginals" else ""
        raise ValueError(f"--axes is an option of plot landscape only: plot {kind} does not take it{why}, "
                         f"got --axes {axes!r}")
    typer.echo(f"wrote {FIGURES[kind](args)}")


@dataclass(frozen=True)
class PlotArgs:
    """The options of ``dphypo plot`` as typed (fields: the command's parameter names; each figure reads its own)."""

    kind: str
    out: str
    landscape: str | None
    from_json: list[str] | None
    strategy: list[str] | None
    T: list[int] | None
    repeats: int
    runs_fixed: int
    step: list[int] | None
    C: float
    c: float
    tau: float
    beta: float
    scale: str
    seed: int
    workers: int | None
    sigma: float | None
    sample_rate: float | None
    steps: int | None
    runs: str
    theta: float | None
    gamma: float | None
    mean: float | None
    bounds: list[str] | None
    delta: float
    axes: str | None

    def need_landscape(self) -> str:
        """``--landscape``, which every figure but ``epsilon`` (and ``accuracy --from``) draws from.

        Raises:
            ValueError: It was not given.
        """
        if self.landscape is None:
            raise ValueError(f"plot {self.kind} needs --landscape")
        return self.landscape


def _landscape_figure(args: PlotArgs) -> Path:
    """``plot landscape``: the landscape's heatmap (an N-D landscape's slice through its best point)."""
    from dphypo import visualization as plots

    axes = None if args.axes is None else [name.strip() for name in args.axes.split(",")]
    return plots.plot_landscape_file(args.need_landscape(), args.out, axes)


def _marginals_figure(args: PlotArgs) -> Path:
    """``plot marginals``: per axis, the best and the average mean over the other axes."""
    from dphypo import visualization as plots

    return plots.plot_marginals_file(args.need_landscape(), args.out)


def _accuracy_figure(args: PlotArgs) -> Path:
    """``plot accuracy``: value vs T, from ``dphypo simulate --json`` outputs or simulated here."""
    from dphypo import visualization as plots
    from dphypo.cli.common import make_strategy

    if args.from_json:
        return plots.plot_accuracy_vs_T_json(args.from_json, args.out)
    if not args.T:
        raise ValueError("plot accuracy needs --T values (or --from simulate JSON files)")
    chosen = [make_strategy(s, C=args.C, c=args.c, tau=args.tau, beta=args.beta, scale=args.scale)
              for s in (args.strategy or ["uniform", "gp"])]
    return plots.plot_accuracy_vs_T_simulated(args.need_landscape(), args.out, chosen, args.T, repeats=args.repeats,
                                              C=args.C, c=args.c, seed=args.seed, workers=args.workers)


def _density_figure(args: PlotArgs) -> Path:
    """``plot density``: snapshots of a GP search's densities."""
    from dphypo import visualization as plots
    from dphypo.cli.common import make_strategy

    landscape = args.need_landscape()
    strategy = make_strategy("gp", C=args.C, c=args.c, tau=args.tau, beta=args.beta, scale=args.scale)
    return plots.plot_density_run(landscape, args.out, strategy=strategy, runs=args.runs_fixed, C=args.C, c=args.c,
                                  seed=args.seed, steps=args.step or None)


def _epsilon_figure(args: PlotArgs) -> Path:
    """``plot epsilon``: the ε breakdown of a DP-SGD search at several density bounds."""
    from dphypo import visualization as plots
    from dphypo.privacy import dpsgd_rdp, make_run_count
    from dphypo.privacy.profiles import dpsgd_profile_or_skip

    sigma, sample_rate, steps = args.sigma, args.sample_rate, args.steps
    if sigma is None or sample_rate is None or steps is None:
        raise ValueError("plot epsilon needs --sigma, --sample-rate and --steps")
    mean = 20.0 if args.gamma is None and args.mean is None and args.runs != "negbin" else args.mean
    pairs = [_bound_pair(b) for b in (args.bounds or ["1:1", "1.25:0.8", "1.5:0.6667", "2:0.75"])]
    # The same accounting as `dphypo account` (RDP and, for the uniform bar, the run's privacy profile).
    return plots.plot_epsilon_breakdown_bounds(
        dpsgd_rdp(sigma, sample_rate, steps), make_run_count(args.runs, theta=args.theta, gamma=args.gamma, mean=mean),
        pairs, args.delta, args.out, profile=dpsgd_profile_or_skip(sigma, sample_rate, steps),
    )


def _pareto_figure(args: PlotArgs) -> Path:
    """``plot pareto``: utility vs compute of a saved ``dphypo plan --json`` output, with its Pareto front."""
    from dphypo import visualization as plots

    if not args.from_json or len(args.from_json) != 1:
        raise ValueError(f"plot pareto needs exactly one --from (a `dphypo plan --json` output), got "
                         f"{len(args.from_json or [])}")
    return plots.plot_pareto_json(args.from_json[0], args.out)


#: The figure of every ``plot`` KIND.
FIGURES: dict[str, Callable[[PlotArgs], Path]] = {
    "landscape": _landscape_figure,
    "marginals": _marginals_figure,
    "accuracy": _accuracy_figure,
    "density": _density_figure,
    "epsilon": _epsilon_figure,
    "pareto": _pareto_figure,
}


def _bound_pair(text: str) -> tuple[float, float]:
    try:
        C, c = (float(x) for x in text.split(":"))
    except ValueError as exc:
        raise ValueError(f"bounds must look like C:c (e.g. 2:0.75), got {text!r}") from exc
    return C, c

"""``dphypo plot``: landscape heatmaps, value vs T, density snapshots, ε breakdown (PNG or SVG by suffix)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Annotated, Any

import typer

from dphypo.cli.common import GammaOpt, LowerOpt, MeanOpt, RunsOpt, ThetaOpt, UpperOpt, app, option_names

OutOpt = Annotated[str, typer.Option("--out", help="Output file: .png or .svg.")]
LandscapeOpt = Annotated[
    str | None, typer.Option("--landscape", help="A landscape .npz, or synthetic:smooth|ridge|multimodal.")
]


#: Per figure kind: library parameter names -> the plot options that set them (one-line errors name the option).
_COMMON_NAMES = {"landscape": "--landscape", "path": "--out", "C": "--C", "c": "--c", "seed": "--seed"}
_OPTION_NAMES: dict[str, dict[str, str]] = {
    "landscape": _COMMON_NAMES,
    "accuracy": {**_COMMON_NAMES, "Ts": "--T", "repeats": "--repeats", "strategy": "--strategy", "tau": "--tau",
                 "beta": "--beta", "scale": "--scale", "workers": "--workers"},
    "density": {**_COMMON_NAMES, "runs": "--fixed-T", "steps": "--step", "tau": "--tau", "beta": "--beta",
                "scale": "--scale"},
    "epsilon": {**_COMMON_NAMES, "sigma": "--sigma", "sample_rate": "--sample-rate", "steps": "--steps",
                "runs": "--runs", "theta": "--theta", "gamma": "--gamma", "mean": "--mean", "delta": "--delta",
                "bounds": "--bounds"},
}


def _naming_options(command: Callable[..., None]) -> Callable[..., None]:
    """Errors of ``plot KIND`` name the option the user typed (``--step``, not ``steps``)."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        with option_names(**_OPTION_NAMES.get(kwargs.get("kind", ""), _COMMON_NAMES)):
            command(*args, **kwargs)

    return wrapper


@app.command("plot")
@_naming_options
def plot_command(
    kind: Annotated[str, typer.Argument(metavar="KIND", help="landscape | accuracy | density | epsilon")],
    out: OutOpt,
    landscape: LandscapeOpt = None,
    from_json: Annotated[
        list[str] | None, typer.Option("--from", help="accuracy: `dphypo simulate --json` outputs to plot.")
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
) -> None:
    """Draw a figure (data extraction and rendering live in dphypo.visualization)."""
    from dphypo import visualization as plots
    from dphypo._paths import check_output_file
    from dphypo.cli.common import make_strategy

    check_output_file(out, "--out", create_parents=True)  # before a simulation spends minutes on the figure

    def need_landscape() -> str:
        if landscape is None:
            raise ValueError(f"plot {kind} needs --landscape")
        return landscape

    if kind == "landscape":
        path = plots.plot_landscape_file(need_landscape(), out)
    elif kind == "accuracy":
        if from_json:
            path = plots.plot_accuracy_vs_T_json(from_json, out)
        else:
            if not T:
                raise ValueError("plot accuracy needs --T values (or --from simulate JSON files)")
            chosen = [make_strategy(s, C=C, c=c, tau=tau, beta=beta, scale=scale)
                      for s in (strategy or ["uniform", "gp"])]
            path = plots.plot_accuracy_vs_T_simulated(need_landscape(), out, chosen, T, repeats=repeats, C=C, c=c,
                                                      seed=seed, workers=workers)
    elif kind == "density":
        path = plots.plot_density_run(need_landscape(), out, strategy=make_strategy("gp", C=C, c=c, tau=tau, beta=beta,
                                      scale=scale), runs=runs_fixed, C=C, c=c, seed=seed, steps=step or None)
    elif kind == "epsilon":
        from dphypo.privacy import dpsgd_rdp, make_run_count
        from dphypo.privacy.profiles import dpsgd_profile_or_skip

        if sigma is None or sample_rate is None or steps is None:
            raise ValueError("plot epsilon needs --sigma, --sample-rate and --steps")
        if gamma is None and mean is None and runs != "negbin":
            mean = 20.0
        pairs = [_bound_pair(b) for b in (bounds or ["1:1", "1.25:0.8", "1.5:0.6667", "2:0.75"])]
        # The same accounting as `dphypo account` (RDP and, for the uniform bar, the run's privacy profile).
        path = plots.plot_epsilon_breakdown_bounds(
            dpsgd_rdp(sigma, sample_rate, steps), make_run_count(runs, theta=theta, gamma=gamma, mean=mean), pairs,
            delta, out, profile=dpsgd_profile_or_skip(sigma, sample_rate, steps),
        )
    else:
        raise ValueError(f"plot kind must be landscape, accuracy, density or epsilon, got {kind!r}")
    typer.echo(f"wrote {path}")


def _bound_pair(text: str) -> tuple[float, float]:
    try:
        C, c = (float(x) for x in text.split(":"))
    except ValueError as exc:
        raise ValueError(f"bounds must look like C:c (e.g. 2:0.75), got {text!r}") from exc
    return C, c

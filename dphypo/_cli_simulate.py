"""``dphypo simulate``: simulated private searches on landscapes (GP vs uniform studies)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from dphypo._cli_common import JsonOpt, LowerOpt, UpperOpt, _emit, app


def _strategy(name: str, tau: float, beta: float, scale: str):
    from dphypo.strategies import GPUCB, Uniform

    if name == "uniform":
        return Uniform()
    if name == "gp":
        return GPUCB(tau=tau, beta=beta, scale=scale)  # type: ignore[arg-type]
    raise ValueError(f"strategy must be 'uniform' or 'gp', got {name!r}")


@app.command("simulate")
def simulate_command(
    landscape: Annotated[
        str, typer.Option("--landscape", help="A landscape .npz file, or synthetic:smooth|ridge|multimodal.")
    ],
    strategy: Annotated[
        list[str], typer.Option("--strategy", help="uniform or gp; repeat the option to compare several.")
    ],
    fixed_T: Annotated[
        int | None, typer.Option("--fixed-T", help="Number of runs of every search (research mode), or give --runs.")
    ] = None,
    runs: Annotated[
        str | None, typer.Option("--runs", help="Draw T per search: negbin, geometric, logarithmic, poisson.")
    ] = None,
    theta: Annotated[float | None, typer.Option("--theta", help="θ of negbin runs.")] = None,
    gamma: Annotated[float | None, typer.Option("--gamma", help="γ of the TNB family.")] = None,
    mean: Annotated[float | None, typer.Option("--mean", help="E[T].")] = None,
    repeats: Annotated[int, typer.Option("--repeats", help="Independent searches per strategy.")] = 200,
    C: UpperOpt = 2.0,
    c: LowerOpt = 0.75,
    tau: Annotated[float, typer.Option("--tau", help="GP-UCB exploration weight τ (s = μ + τσ).")] = 0.1,
    beta: Annotated[float, typer.Option("--beta", help="Softmax inverse temperature β.")] = 1.0,
    scale: Annotated[
        str, typer.Option("--scale", help="GP score scale before the softmax: standardized, range or raw (paper).")
    ] = "standardized",
    seed: Annotated[int, typer.Option("--seed", help="Study seed.")] = 0,
    workers: Annotated[int | None, typer.Option("--workers", help="Processes (default: all cores).")] = None,
    engine: Annotated[
        str, typer.Option("--engine", help="batched (one batched GP per step across repeats) or sequential.")
    ] = "batched",
    batch: Annotated[int, typer.Option("--batch", help="Batched engine: searches per batched GP.")] = 256,
    as_json: JsonOpt = False,
) -> None:
    """Compare strategies by simulated searches on a landscape: mean true value of the released λ."""
    from dphypo.landscapes import resolve_landscape
    from dphypo.privacy import make_run_count
    from dphypo.simulate import simulate

    if (fixed_T is None) == (runs is None):
        raise ValueError("give exactly one of --fixed-T or --runs (T drawn per search from its distribution)")
    run_count = None if runs is None else make_run_count(runs, theta=theta, gamma=gamma, mean=mean)
    land = resolve_landscape(landscape)
    strategies = [_strategy(name, tau, beta, scale) for name in strategy]
    results = simulate(land, strategies, repeats=repeats, T=fixed_T, run_count=run_count, C=C, c=c, seed=seed,
                       workers=workers,
                       engine=engine, batch=batch)  # type: ignore[arg-type]
    payload = {
        "landscape": landscape,
        "direction": land.direction,
        "best_value": land.best_value,
        "C": C,
        "c": c,
        "tau": tau,
        "beta": beta,
        "scale": scale,
        "seed": seed,
        "engine": engine,
        "results": [r.to_dict() for r in results],
    }
    table = Table(title=f"Simulated searches on {landscape} (best value {land.best_value:.4f}, {land.direction})")
    for col in ("strategy", "T", "mean true value", "95% CI", "repeats"):
        table.add_column(col)
    for r in results:
        T = str(r.T) if r.T is not None else f"~ {runs} (E[T] = {run_count.mean:.3g})"  # type: ignore[union-attr]
        table.add_row(r.strategy, T, f"{r.mean:.4f}", f"[{r.ci95[0]:.4f}, {r.ci95[1]:.4f}]", str(r.repeats))
    _emit(payload, table, as_json)

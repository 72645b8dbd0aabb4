"""``dphypo simulate``: simulated private searches on landscapes (studies: :mod:`dphypo.simulation.studies`).

With ``--epsilon E`` and several ``--landscape`` (the members of one landscape family,
:mod:`dphypo.simulation.family`), the comparison is at equal total ε: every arm calibrates its own σ for total ε = E
(:func:`dphypo.simulation.equal_epsilon.arm_sigma`: its run count, its C and c) and runs on the family's landscape at
that σ.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeGuard

import typer
from rich.table import Table

from dphypo.cli.common import JsonOpt, LowerOpt, UpperOpt, _emit, app, option_names, out_console, parse_scale

if TYPE_CHECKING:
    from dphypo.simulation.family import LandscapeFamily
    from dphypo.simulation.simulate import Engine
    from dphypo.simulation.studies import Setting, StudyResult
    from dphypo.strategies import Strategy

SWEEPS = ("table1", "table2")

#: Library parameter names -> the simulate options that set them (for one-line errors naming the option).
OPTION_NAMES = {
    "landscape": "--landscape", "strategy": "--strategy", "repeats": "--repeats", "C": "--C", "c": "--c",
    "tau": "--tau", "beta": "--beta", "scale": "--scale", "runs": "--runs", "theta": "--theta", "gamma": "--gamma",
    "mean": "--mean", "bounds": "--bounds", "gp-repeats": "--gp-repeats", "sweep": "--sweep", "engine": "--engine",
    "batch": "--batch", "workers": "--workers", "executor": "--executor", "delta": "--delta", "seed": "--seed",
    "fixed T": "--fixed-T", "epsilon": "--epsilon",
}


def _strategy(name: str, tau: float, beta: float, scale: str) -> Strategy:
    from dphypo.strategies import GPUCB, Uniform

    if name == "uniform":
        return Uniform()
    if name == "gp":
        return GPUCB(tau=tau, beta=beta, scale=parse_scale(scale))
    raise ValueError(f"strategy must be 'uniform' or 'gp', got {name!r}")


def _bounds(texts: list[str] | None, sweep: str | None, C: float, c: float) -> list[tuple[float, float]]:
    """``--bounds C:c`` pairs, the Table-2 sweep (c = 1/C), or the single ``--C/--c``."""
    from dphypo.simulation.studies import TABLE2_UPPER_BOUNDS

    if texts:
        pairs: list[tuple[float, float]] = []
        for text in texts:
            try:
                upper, lower = (float(x) for x in text.split(":"))
            except ValueError as exc:
                raise ValueError(f"bounds must look like C:c (e.g. 1.25:0.8), got {text!r}") from exc
            pairs.append((upper, lower))
        return pairs
    if sweep == "table2":
        return [(upper, 1.0 / upper) for upper in TABLE2_UPPER_BOUNDS]
    return [(C, c)]


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
    sweep: str | None, bounds: list[tuple[float, float]], overrides: dict[float, int], any_adaptive: bool,
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


@app.command("simulate")
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
        list[str], typer.Option("--strategy", help="uniform or gp; repeat the option to compare several.")
    ],
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
            "table2: C ∈ {1.25, 1.33, 1.5}, c = 1/C (Table 2, black box).",
        ),
    ] = None,
    bounds: Annotated[
        list[str] | None, typer.Option("--bounds", help="C:c of the GP arm; repeat for one row per pair.")
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
    c: LowerOpt = 0.75,
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
) -> None:
    """Compare strategies by simulated searches: mean true value of the released λ and each arm's total ε."""
    with option_names(**OPTION_NAMES):
        _simulate(**locals())


def _is_engine(name: str) -> TypeGuard[Engine]:
    from dphypo.simulation.simulate import ENGINES

    return name in ENGINES


def _simulate(
    landscape: list[str], strategy: list[str], gp_landscape: str | None, epsilon: float | None,
    fixed_T: str | None, runs: str | None,
    theta: float | None, gamma: list[float] | None, mean: float | None, sweep: str | None, bounds: list[str] | None,
    repeats: int, gp_repeats: list[str] | None, C: float, c: float, tau: float, beta: float, scale: str,
    delta: float, seed: int, workers: int | None, engine: str, batch: int, executor: str | None,
    address: str | None, table: bool, table_out: str | None, as_json: bool,
) -> None:
    """The body of ``dphypo simulate``: every option is checked before the first simulated search."""
    from dphypo.search.execution import make_executor
    from dphypo.simulation.simulate import ENGINES
    from dphypo.simulation.studies import ArmSpec, StudyConfig, run_study
    from dphypo.simulation.tables import table_csv, table_markdown

    if not (isinstance(seed, int) and seed >= 0):
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    if gp_landscape is not None and all(name == "uniform" for name in strategy):
        raise ValueError("--gp-landscape is the landscape of the gp arm: add --strategy gp, or drop it")
    family = _check_landscapes(landscape, gp_landscape, epsilon, fixed_T)
    arm_landscape: str | tuple[str, ...] = landscape[0] if family is None else tuple(landscape)
    if table_out is not None:  # the output directory must exist (or be creatable) before any simulation runs
        Path(table_out).parent.mkdir(parents=True, exist_ok=True)
    arms: list[ArmSpec] = []
    for name in strategy:
        arm_strategy = _strategy(name, tau, beta, scale)
        arms.append(ArmSpec(name, arm_strategy,
                            gp_landscape if (gp_landscape and name != "uniform") else arm_landscape))
    any_adaptive = any(a.adaptive for a in arms)
    pairs = _bounds(bounds, sweep, C, c)
    settings = _settings(
        fixed_T, runs, theta, gamma, mean, sweep, pairs, _adaptive_repeats(gp_repeats), any_adaptive
    )
    if fixed_T is not None:
        kind = "fixed-T"
    elif family is not None:
        kind = "equal-epsilon"
    else:
        kind = "white-box" if gp_landscape else "black-box" if any_adaptive else "run-count"
    if not _is_engine(engine):
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    config = StudyConfig(
        kind,
        settings,
        tuple(arms),
        repeats,
        seed=seed,
        delta=delta,
        engine=engine,
        batch=batch,
        workers=workers,
        epsilon=epsilon,
    )
    if address is not None and executor != "ray":
        raise ValueError("--address needs --executor ray")
    landscapes = None
    if family is not None:  # every cell's σ calibrated and checked against the family before any search
        from dphypo.simulation.equal_epsilon import cell_landscapes

        landscapes = cell_landscapes(config)
    pool = None if executor is None else make_executor(executor, workers=workers, address=address)
    try:
        result = run_study(config, executor=pool, landscapes=landscapes)
    finally:
        if pool is not None:
            pool.close()
    if table_out is not None:
        prefix = Path(table_out)
        prefix.parent.mkdir(parents=True, exist_ok=True)
        Path(f"{prefix}.csv").write_text(table_csv(result))
        Path(f"{prefix}.md").write_text(table_markdown(result))
    payload = {
        **result.to_dict(),
        "landscape": landscape[0] if family is None else list(landscape),
        "gp_landscape": gp_landscape,
        "direction": _direction(landscape[0]),
        "epsilon_target": epsilon,
        "family_sigmas": None if family is None else list(family.sigmas),
        "C": pairs[0][0] if len(pairs) == 1 else None,
        "c": pairs[0][1] if len(pairs) == 1 else None,
        "tau": tau,
        "beta": beta,
        "scale": scale,
        "engine": engine,
        "executor": executor or "process",
    }
    if as_json:
        _emit(payload, Table(), True)
    elif table or table_out is not None:
        out_console().print(_grid_table(result))
    else:
        out_console().print(_long_table(result, landscape[0] if family is None else " + ".join(landscape)))


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

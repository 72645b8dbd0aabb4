"""The ``dphypo`` command line.

Every command prints a readable table, or exactly one JSON object with ``--json``. Invalid input exits with
status 2 and a one-line ``error: ...`` message naming the parameter (no traceback).
"""

from __future__ import annotations

import json
import math
import sys
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from dphypo.privacy import (
    RUN_COUNT_FAMILIES,
    PrivacyReport,
    SearchPrivacy,
    account,
    account_pure,
    calibrate_dpsgd_sigma,
    dpsgd_rdp,
    make_run_count,
    pure_dp_rdp,
)

app = typer.Typer(
    name="dphypo",
    help="Adaptive differentially private hyperparameter optimisation (DP-HyPO) with one honest (ε, δ).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Shared option declarations (typer reads them from the annotations).
RunsOpt = Annotated[
    str,
    typer.Option("--runs", help=f"Distribution of the number of runs T: {', '.join(RUN_COUNT_FAMILIES)}."),
]
ThetaOpt = Annotated[float | None, typer.Option("--theta", help="Shape θ > -1 (negbin only).")]
GammaOpt = Annotated[
    float | None, typer.Option("--gamma", help="γ ∈ (0,1) of the TNB family (or give --mean).")
]
MeanOpt = Annotated[
    float | None, typer.Option("--mean", help="E[T] (TNB family: instead of --gamma; poisson).")
]
UpperOpt = Annotated[float, typer.Option("--C", help="Upper density-ratio bound C ≥ 1 (C = c = 1: uniform).")]
LowerOpt = Annotated[float, typer.Option("--c", help="Lower density-ratio bound c ∈ (0, 1].")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of a table.")]


def _search(runs: str, theta: float | None, gamma: float | None, mean: float | None, C: float, c: float):
    return SearchPrivacy(make_run_count(runs, theta=theta, gamma=gamma, mean=mean), C, c)


def _fmt(x: float, digits: int = 4) -> str:
    if isinstance(x, float) and math.isnan(x):
        return "-"
    if isinstance(x, float) and math.isinf(x):
        return "∞"
    return f"{x:.{digits}g}"


def _report_table(report: PrivacyReport, title: str, extra: dict[str, str] | None = None) -> Table:
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column("quantity", style="bold")
    table.add_column("value")
    table.add_row("total ε", f"[bold green]{_fmt(report.epsilon)}[/]")
    table.add_row("δ", _fmt(report.delta))
    for key, value in (extra or {}).items():
        table.add_row(key, value)
    table.add_row("  ε of one run", _fmt(report.base_epsilon))
    table.add_row("  + random repetition", _fmt(report.repetition_epsilon))
    table.add_row("  + adaptivity log(C/c)", _fmt(report.adaptivity_epsilon))
    search = report.search.describe()
    dist = search["runs"] + "".join(f", {k}={_fmt(search[k], 6)}" for k in ("theta", "gamma") if k in search)
    table.add_row("run count T", f"{dist}; E[T] = {_fmt(report.expected_runs)}")
    table.add_row("density bounds", f"C = {_fmt(report.search.C)}, c = {_fmt(report.search.c)}")
    table.add_row("orders (α, α̂)", f"{_fmt(report.order)}, {_fmt(report.order_hat)}")
    table.add_row("theorem", report.theorem)
    table.add_row("per-run mechanism", report.base_label)
    return table


def _emit(payload: dict[str, Any], table: Table, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(payload, sort_keys=True))
    else:
        Console().print(table)


@app.command("account")
def account_command(
    runs: RunsOpt,
    sigma: Annotated[float | None, typer.Option("--sigma", help="DP-SGD noise multiplier σ > 0.")] = None,
    sample_rate: Annotated[
        float | None, typer.Option("--sample-rate", help="Poisson sampling rate q ∈ (0,1].")
    ] = None,
    steps: Annotated[int | None, typer.Option("--steps", help="DP-SGD steps per run (≥ 1).")] = None,
    pure_epsilon: Annotated[
        float | None,
        typer.Option("--pure-epsilon", help="Each run is ε-DP (pure); reports DP-HyPO Theorem 2."),
    ] = None,
    theta: ThetaOpt = None,
    gamma: GammaOpt = None,
    mean: MeanOpt = None,
    C: UpperOpt = 1.0,
    c: LowerOpt = 1.0,
    delta: Annotated[
        float | None, typer.Option("--delta", help="δ ∈ (0,1) (default 1e-5; pure mode: 0 unless given).")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Total (ε, δ) of a private hyperparameter search, with its breakdown."""
    search = _search(runs, theta, gamma, mean, C, c)
    if pure_epsilon is not None:
        if any(v is not None for v in (sigma, sample_rate, steps)):
            raise ValueError("--pure-epsilon cannot be combined with --sigma/--sample-rate/--steps")
        report = (
            account_pure(pure_epsilon, search)
            if delta is None
            else account(pure_dp_rdp(pure_epsilon), search, delta)
        )
    else:
        missing = [
            n
            for n, v in (("--sigma", sigma), ("--sample-rate", sample_rate), ("--steps", steps))
            if v is None
        ]
        if missing:
            raise ValueError(f"missing {', '.join(missing)} (or give --pure-epsilon)")
        report = account(dpsgd_rdp(sigma, sample_rate, steps), search, 1e-5 if delta is None else delta)
    _emit(report.to_dict(), _report_table(report, "Privacy of the whole search"), as_json)


@app.command("calibrate")
def calibrate_command(
    epsilon: Annotated[float, typer.Option("--epsilon", help="Target total ε of the search.")],
    sample_rate: Annotated[float, typer.Option("--sample-rate", help="Poisson sampling rate q ∈ (0,1].")],
    steps: Annotated[int, typer.Option("--steps", help="DP-SGD steps per run (≥ 1).")],
    runs: RunsOpt,
    delta: Annotated[float, typer.Option("--delta", help="δ ∈ (0,1).")] = 1e-5,
    theta: ThetaOpt = None,
    gamma: GammaOpt = None,
    mean: MeanOpt = None,
    C: UpperOpt = 1.0,
    c: LowerOpt = 1.0,
    as_json: JsonOpt = False,
) -> None:
    """Smallest DP-SGD noise multiplier σ whose whole search meets a total (ε, δ)."""
    search = _search(runs, theta, gamma, mean, C, c)
    result = calibrate_dpsgd_sigma(epsilon, delta, sample_rate, steps, search)
    payload = {
        **result.report.to_dict(),
        "sigma": result.sigma,
        "sigma_tolerance": result.sigma_tolerance,
        "target_epsilon": epsilon,
    }
    extra = {"σ (noise multiplier)": f"[bold]{result.sigma:.5g}[/] (within +{result.sigma_tolerance:.1g})"}
    table = _report_table(result.report, f"Calibrated for ε ≤ {epsilon:g}", extra)
    _emit(payload, table, as_json)


def run(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit status; user errors become one ``error:`` line on stderr (status 2)."""
    try:
        status = app(args=argv, prog_name="dphypo", standalone_mode=False)
    except (ValueError, TypeError) as exc:
        typer.echo(f"error: {' '.join(str(exc).split())}", err=True)
        return 2
    except typer.Exit as exc:
        return int(exc.exit_code or 0)
    except typer.Abort:
        typer.echo("error: aborted", err=True)
        return 130
    except Exception as exc:
        # Usage errors from click (vendored by recent typer): they carry their own one-line message.
        if hasattr(exc, "format_message"):
            typer.echo(f"error: {' '.join(exc.format_message().split())}", err=True)
            return int(getattr(exc, "exit_code", 2) or 2)
        raise
    return status if isinstance(status, int) else 0


def main() -> None:
    """Console-script entry point."""
    sys.exit(run())


if __name__ == "__main__":
    main()

"""Shared pieces of the ``dphypo`` command line: the typer app, option types and output helpers."""

from __future__ import annotations

import json
import math
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from dphypo.privacy import RUN_COUNT_FAMILIES, PrivacyReport, SearchPrivacy, make_run_count

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
GammaOpt = Annotated[float | None, typer.Option("--gamma", help="γ ∈ (0,1) of the TNB family (or give --mean).")]
MeanOpt = Annotated[float | None, typer.Option("--mean", help="E[T] (TNB family: instead of --gamma; poisson).")]
UpperOpt = Annotated[float, typer.Option("--C", help="Upper density-ratio bound C ≥ 1 (C = c = 1: uniform).")]
LowerOpt = Annotated[float, typer.Option("--c", help="Lower density-ratio bound c ∈ (0, 1].")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of a table.")]


MaxRunsOpt = Annotated[int | None, typer.Option("--max-runs", help="n of binomial runs, T ~ Bin(n, mean/n).")]


def _search(
    runs: str, theta: float | None, gamma: float | None, mean: float | None, C: float, c: float,
    max_runs: int | None = None,
) -> SearchPrivacy:
    return SearchPrivacy(make_run_count(runs, theta=theta, gamma=gamma, mean=mean, max_runs=max_runs), C, c)


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
    if report.charged_runs:
        table.add_row(f"  + {report.charged_runs} lost attempt(s) charged", _fmt(report.charged_epsilon))
    search = report.search.describe()
    dist = search["runs"] + "".join(f", {k}={_fmt(search[k], 6)}" for k in ("theta", "gamma") if k in search)
    table.add_row("run count T", f"{dist}; E[T] = {_fmt(report.expected_runs)}")
    table.add_row("density bounds", f"C = {_fmt(report.search.C)}, c = {_fmt(report.search.c)}")
    table.add_row("orders (α, α̂)", f"{_fmt(report.order)}, {_fmt(report.order_hat)}")
    if len(report.methods) > 1:
        for name, eps in sorted(report.methods.items(), key=lambda kv: kv[1]):
            table.add_row(f"  ε by {name}", _fmt(eps) + ("  ← used (smallest valid bound)" if name == report.method
                                                          else ""))
    table.add_row("theorem", report.theorem)
    table.add_row("per-run mechanism", report.base_label)
    return table


def _emit(payload: dict[str, Any], table: Table, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(payload, sort_keys=True))
    else:
        Console().print(table)


# Options shared by the training commands (tune, landscape build).
DatasetOpt = Annotated[
    str, typer.Option("--dataset", help="digits (embedded), mnist-subset, mnist, fashion-mnist, cifar10.")
]
DataDirOpt = Annotated[
    str | None, typer.Option("--data-dir", help="Where full datasets live on disk (never downloaded).")
]
ModelOpt = Annotated[str | None, typer.Option("--model", help="Model name (default: the dataset's).")]
LrGridOpt = Annotated[
    str | None,
    typer.Option(
        "--lr-grid", help="Learning rates, low:high:num:log|linear or a list (default: the paper's 1e-4:10:16:log)."
    ),
]
ClipGridOpt = Annotated[str | None, typer.Option("--clip-grid", help="Clipping norms (default: 0.3:6:20:linear).")]

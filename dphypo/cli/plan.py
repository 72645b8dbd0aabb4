"""``dphypo plan``: choose a search's configuration (strategy, C and c, E[T]) at equal total ε on a landscape family.

Every candidate of :func:`dphypo.simulation.planner.default_candidates` calibrates its own σ for the total (ε, δ)
and is simulated on the family at that σ (:func:`dphypo.simulation.planner.plan_search`); the table ranks them by
the mean true value of the released point and the verdict names the best, the runner-up and whether the difference
is significant, and per E[T] the best uniform against the best adaptive configuration.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from dphypo.cli.common import AdaptiveTheoremOpt, JsonOpt, _emit, app, option_names, out_console
from dphypo.privacy.validation import check_non_negative_int, check_positive_int

if TYPE_CHECKING:
    from dphypo.simulation.planner import Comparison, PlanResult, PlanRow

__all__ = ["DEFAULT_MEANS", "PLAN_HELP", "plan_command", "verdict"]

#: Library parameter names -> the plan options that set them (for one-line errors naming the option).
OPTION_NAMES = {
    "landscape": "--landscape", "epsilon": "--epsilon", "delta": "--delta", "mean": "--mean", "means": "--mean",
    "runs": "--runs", "repeats": "--repeats", "seed": "--seed", "workers": "--workers",
}

#: ``dphypo plan --help``: one string per paragraph (typer keeps a docstring's line breaks in the help).
PLAN_HELP = (
    "Plan a private search: the strategy, (C, c) and E[T] with the best expected released value at total ε.\n\n"
    "Sweeps uniform search, GP-UCB at (C, c) ∈ {(2, 0.75), (1.5, 1/1.5), (1.25, 0.8)} and GP top-set (C = 2, "
    "favoured prior mass 5 % and 10 %, c derived from them) × every --mean. Each candidate calibrates its own σ "
    "for the same total (ε, δ) (its own C, c and T; the accountant's best valid bound) and runs --repeats "
    "simulated searches on the family's landscape at that σ. The table ranks them by the mean true value of the "
    "released point [95 % CI]; the verdict names the best, the runner-up, whether their difference is "
    "significant, and per E[T] the best uniform vs the best adaptive configuration. Candidates whose ε is "
    "unreachable, or whose σ lies outside the family, are listed with the reason, never extrapolated.\n\n"
    "The plan is computed from the landscapes (public data, or data whose privacy was already paid for), not from "
    "the private data of the search it plans: choose the configuration here, then run `dphypo tune` with it."
)
#: E[T] of the candidates when no ``--mean`` is given.
DEFAULT_MEANS: tuple[float, ...] = (10.0, 20.0, 50.0)


@app.command("plan", help=PLAN_HELP)
def plan_command(
    landscape: Annotated[
        list[str],
        typer.Option(
            "--landscape",
            help="A member .npz of one landscape family (same grid and DP-SGD plan, different σ); repeat for every "
            "member (at least 2).",
        ),
    ],
    epsilon: Annotated[float, typer.Option("--epsilon", help="Total ε of the search being planned.")],
    delta: Annotated[float, typer.Option("--delta", help="δ of the total (ε, δ).")] = 1e-5,
    mean: Annotated[
        list[float] | None,
        typer.Option("--mean", help="A candidate E[T]; repeat for several (default: 10, 20 and 50)."),
    ] = None,
    runs: Annotated[
        str, typer.Option("--runs", help="Law of T: geometric (dphypo tune's default) or logarithmic.")
    ] = "geometric",
    repeats: Annotated[int, typer.Option("--repeats", help="Simulated searches per candidate.")] = 200,
    seed: Annotated[int, typer.Option("--seed", help="Study seed (the same for every candidate).")] = 0,
    workers: Annotated[int | None, typer.Option("--workers", help="Processes (default: all cores).")] = None,
    as_json: JsonOpt = False,
    adaptive_theorem: AdaptiveTheoremOpt = "B",
) -> None:
    """Plan a private search (help: :data:`PLAN_HELP`)."""
    with option_names(**OPTION_NAMES):
        _plan(landscape, epsilon, delta, mean, runs, repeats, seed, workers, as_json, adaptive_theorem)


def _plan(
    landscape: list[str], epsilon: float, delta: float, mean: list[float] | None, runs: str, repeats: int,
    seed: int, workers: int | None, as_json: bool, adaptive_theorem: str = "B",
) -> None:
    """The body of ``dphypo plan``: every option is checked before the first calibration."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from dphypo.simulation.family import load_family
    from dphypo.simulation.planner import default_candidates, plan_search

    if len(landscape) < 2:
        raise ValueError(f"--landscape must be repeated for at least 2 members of one landscape family, got "
                         f"{len(landscape)}")
    if workers is not None:
        check_positive_int("workers", workers)
    check_positive_int("repeats", repeats)
    check_non_negative_int("seed", seed)
    family = load_family(landscape)  # one line naming the files if they are not one family
    candidates = default_candidates(mean or DEFAULT_MEANS, runs)
    columns = ("{task.description}", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    status = out_console(stderr=True)
    # A progress bar on a terminal only: piped or logged, it would leave blank lines around the errors and output.
    with Progress(*columns, console=status, transient=True, disable=not status.is_terminal) as bar:
        task = bar.add_task("planning", total=len(candidates))
        result = plan_search(family, epsilon, delta, candidates, repeats=repeats, seed=seed, workers=workers,
                             adaptive_theorem=adaptive_theorem,
                             progress=lambda row: bar.advance(task))
    payload = {**result.to_dict(), "landscape": list(landscape), "runs": runs, "verdict": verdict(result)}
    if as_json:
        _emit(payload, Table(), True)
    else:
        console = out_console()
        console.print(_table(result))
        console.print(verdict(result), markup=False, highlight=False)
    if result.best is None:  # the table says why per candidate; a script must not read this as a plan
        raise typer.Exit(code=1)


def _mean_ci(row: PlanRow) -> str:
    if row.mean is None:
        return "-"
    ci = "" if row.ci95 is None else f" [{row.ci95[0]:.4f}, {row.ci95[1]:.4f}]"
    return f"{row.mean:.4f}{ci}"


def _difference(cmp: Comparison) -> str:
    low, high = cmp.ci95
    return f"{cmp.difference:+.4f} [{low:+.4f}, {high:+.4f}]"


def _table(result: PlanResult) -> Table:
    """Every candidate, simulated ones by mean (best first), then those that could not run with the reason."""
    from rich.markup import escape

    sigmas = ", ".join(f"{s:g}" for s in result.family_sigmas)
    table = Table(title=escape(f"Plan at total ε = {result.epsilon:g}, δ = {result.delta:g}, every candidate at its "
                               f"own σ, on the landscape family σ ∈ {{{sigmas}}}: mean true value of the released "
                               f"point over {result.repeats} simulated searches [95% CI]"))
    for column in ("", "configuration", "E[T]", "C, c", "σ", "total ε (bound)", "mean [95% CI]", "status"):
        table.add_column(column)
    best, second = result.best, result.runner_up
    ranked = list(result.ranked)
    others = [r for r in result.rows if not r.feasible]
    for row in ranked + others:
        cand = row.candidate
        mark = "★ best" if row is best else "runner-up" if row is second else ""
        C, c = cand.bounds
        sigma = "-" if row.sigma is None else f"{row.sigma:.4f}"
        eps = "-" if row.epsilon is None else f"{row.epsilon:.4f} ({row.method})"
        status = row.status if row.feasible else f"{row.status}: {row.reason}"
        cells = [mark, cand.label, f"{cand.expected_runs:g}", f"{C:g}, {c:.4g}", sigma, eps, _mean_ci(row), status]
        table.add_row(*(escape(cell) for cell in cells))  # reasons hold brackets ("narrow [c, C]"): not markup
    return table


def verdict(result: PlanResult) -> str:
    """One paragraph: the best configuration, the runner-up, their difference and, per E[T], uniform vs adaptive.

    Args:
        result: The plan.

    Returns:
        The paragraph (plain text).
    """
    best, second, diff = result.best, result.runner_up, result.difference
    if best is None:
        return (f"No candidate can run at total ε = {result.epsilon:g}: every one is unreachable or needs a σ outside "
                f"the family (see the status column).")
    parts = [f"Best: {best.candidate.name} (σ = {best.sigma:.4f}, ε = {best.epsilon:.4f}): {_mean_ci(best)}."]
    if second is None or diff is None:
        parts.append("No runner-up: it is the only candidate that could run.")
    else:
        judged = ("significantly better" if result.significant else
                  "not significantly better: the simulations do not separate them")
        parts.append(f"Runner-up: {second.candidate.name}: {_mean_ci(second)}. Best − runner-up "
                     f"{_difference(diff)} ({diff.pairing}): {judged}.")
    for m, uniform, adaptive, cmp in result.by_expected_runs():
        if uniform is None or adaptive is None or cmp is None:
            missing = "uniform" if uniform is None else "adaptive"
            parts.append(f"E[T] = {m:g}: no {missing} candidate could run.")
            continue
        judged = ("adaptive search wins" if cmp.ci95[0] > 0 else "uniform search wins" if cmp.ci95[1] < 0 else
                  "not significant")
        parts.append(f"E[T] = {m:g}: best uniform {_mean_ci(uniform)} vs best adaptive {adaptive.candidate.label} "
                     f"{_mean_ci(adaptive)}, adaptive − uniform {_difference(cmp)} ({cmp.pairing}): {judged}.")
    parts.append("Computed from the landscapes (public or already-paid data), not from the private data.")
    return " ".join(parts)

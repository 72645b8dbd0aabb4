"""``dphypo plan``: choose a search's configuration (strategy, C and c, E[T]) at equal total ε on a landscape family.

Every candidate of :func:`dphypo.simulation.planner.default_candidates` calibrates its own σ for the total (ε, δ)
and is simulated on the family at that σ (:func:`dphypo.simulation.planner.plan_search`); the table ranks them by
the mean true value of the released point and the verdict names the best, the runner-up and whether the difference
is significant, and per E[T] the best uniform against the best adaptive configuration. With a compute budget
(``--max-mean-runs``, ``--compute-budget`` in seconds of expected training, a run's seconds from the family's metadata
or ``--run-seconds``) the plan picks only among configurations within it, marks the others, and prints the
utility-vs-compute Pareto front at the fixed ε.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from dphypo.cli.common import (
    AdaptiveTheoremOpt,
    JsonOpt,
    SimulatedDataSplitOpt,
    _emit,
    app,
    option_names,
    out_console,
    simulated_split_rule,
)
from dphypo.privacy.validation import check_non_negative_int, check_positive, check_positive_int

if TYPE_CHECKING:
    from dphypo.simulation.family import LandscapeFamily
    from dphypo.simulation.planner import Candidate, Comparison, ComputeBudget, PlanResult, PlanRow

__all__ = ["DEFAULT_DESIGNS", "DEFAULT_MEANS", "DESIGNS", "PLAN_HELP", "Budget", "Evaluation", "check_designs",
           "evaluation_sentences", "plan_candidates", "plan_command", "unreachable_message", "verdict"]

#: Library parameter names -> the plan options that set them (for one-line errors naming the option).
OPTION_NAMES = {
    "landscape": "--landscape", "epsilon": "--epsilon", "delta": "--delta", "mean": "--mean", "means": "--mean",
    "runs": "--runs", "repeats": "--repeats", "seed": "--seed", "workers": "--workers",
    "max_mean_runs": "--max-mean-runs", "run_seconds": "--run-seconds", "budget_seconds": "--compute-budget",
    "designs": "--design", "probe_family": "--probe-landscape", "evaluate_repeats": "--evaluate-repeats",
    "evaluate_seed": "--evaluate-seed", "split": "--split", "splits": "--split", "data_split": "--data-split",
    "race first repeats": "--race-repeats",
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
    "Compute: every row reports its expected runs and expected compute (E[runs] × seconds per run: the family's "
    "seconds_per_run_mean metadata, or --run-seconds). With --max-mean-runs and/or --compute-budget (seconds of "
    "expected training) the plan picks only configurations within the budget; the others are simulated and marked, "
    "and the utility-vs-compute Pareto front at the fixed ε is printed (and in --json; draw it with "
    "`dphypo plot pareto`).\n\n"
    "--design two-stage adds two-stage designs (dphypo.privacy.two_stage): the best of E[T] uniform probes, or "
    "E[T] released probe scores, at their own larger σ, then one final run, at budget splits 0.3, 0.5 and 0.7 "
    "(--split); "
    "their total ε is the RDP composition of the two stages. --probe-landscape gives the probes a cheaper "
    "family (same grid, fewer epochs: each probe is accounted with its own steps and counts as its share of a run "
    "in E[runs] and compute).\n\n"
    "The pick is chosen on the --repeats selection searches, whose best mean is biased upwards by the choice, then "
    "reported on --evaluate-repeats fresh searches (default: as many; 0 turns this off) from streams no selection "
    "search used, against the best uniform search with at least its expected runs on the same fresh searches "
    "(paired where both are single-stage searches): the verdict and --json (`evaluation`) give its fresh mean, "
    "the comparator and their difference with 95 % intervals.\n\n"
    "Race (default; --no-race turns it off): DP-HyPO rows, whose simulated GP searches are costly, run the "
    "selection searches in rounds (--race-repeats, then doubling up to --repeats); after each round a row whose "
    "mean is significantly below the leader's (the best row within the budget so far: its one-sided upper "
    "confidence bound of the difference below 0, paired t or Welch, Bonferroni over the rounds: a row at least as "
    "good as a given leader is dropped by it with probability at most 1 %) stops, keeps the searches it ran and is "
    "never picked; the table and --json (`eliminated`) say so. Uniform and two-stage rows run every search. "
    "Calibrated σ are cached on disk by the mechanism's "
    "description ($DPHYPO_CACHE_DIR; re-certified when read), so a plan repeated runs no calibration twice.\n\n"
    "The plan is computed from the landscapes (public data, or data whose privacy was already paid for), not from "
    "the private data of the search it plans: choose the configuration here, then run `dphypo tune` with it."
)
#: ``--race-repeats`` default: :data:`dphypo.simulation.planner.RACE_FIRST_REPEATS` (not imported here: the CLI
#: imports the planner only when a plan runs; a test checks they agree).
RACE_FIRST_REPEATS = 50
#: E[T] of the candidates when no ``--mean`` is given.
DEFAULT_MEANS: tuple[float, ...] = (10.0, 20.0, 50.0)

#: The designs ``--design`` accepts, and those a plan compares by default.
DESIGNS: tuple[str, ...] = ("uniform", "dp-hypo", "two-stage")
DEFAULT_DESIGNS: tuple[str, ...] = ("uniform", "dp-hypo")


def check_designs(designs: tuple[str, ...]) -> None:
    """Refuse an unknown or repeated ``--design`` in one line."""
    unknown = [d for d in designs if d not in DESIGNS]
    if unknown or len(set(designs)) != len(designs):
        raise ValueError(f"--design must be distinct values among {', '.join(DESIGNS)}, got {', '.join(designs)}")


def plan_candidates(
    designs: tuple[str, ...], means: list[float], runs: str, *, probe_family: LandscapeFamily | None = None,
    final_epochs: int = 10, splits: tuple[float, ...] | None = None,
) -> tuple[Candidate, ...]:
    """The candidates of the chosen designs, uniform and DP-HyPO first, then two-stage.

    :func:`~dphypo.simulation.planner.default_candidates` filtered by design, then
    :func:`~dphypo.simulation.planner.default_two_stage_candidates` when ``two-stage`` is asked for.

    ``splits``: the two-stage budget splits (default
    :data:`~dphypo.simulation.planner.DEFAULT_TWO_STAGE_SPLITS`), each in (0, 1), distinct.

    Raises:
        ValueError: An unknown or repeated design (one line naming ``--design``), or a bad split.
    """
    from dphypo.privacy.two_stage import check_split
    from dphypo.simulation.planner import DEFAULT_TWO_STAGE_SPLITS, default_candidates, default_two_stage_candidates

    check_designs(designs)
    splits = DEFAULT_TWO_STAGE_SPLITS if not splits else tuple(splits)
    for split in splits:
        check_split(split)
    if len(set(splits)) != len(splits):
        raise ValueError(f"split must be distinct values, got {', '.join(f'{x:g}' for x in splits)}")
    out: list[Candidate] = [x for x in default_candidates(means, runs) if x.design in designs]
    if "two-stage" in designs:
        out += default_two_stage_candidates(means, runs, splits, probe_family=probe_family, final_epochs=final_epochs)
    return tuple(out)


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
    max_mean_runs: Annotated[
        float | None, typer.Option("--max-mean-runs", help="Pick only configurations with E[runs] at most this.")
    ] = None,
    run_seconds: Annotated[
        float | None,
        typer.Option("--run-seconds", help="Seconds one training run takes (default: the family's metadata)."),
    ] = None,
    compute_budget: Annotated[
        float | None,
        typer.Option("--compute-budget", help="Seconds of expected training compute a configuration may use."),
    ] = None,
    design: Annotated[
        list[str] | None,
        typer.Option("--design", help="A search design to compare: uniform, dp-hypo or two-stage; repeat for "
                     "several (default: uniform and dp-hypo)."),
    ] = None,
    probe_landscape: Annotated[
        list[str] | None,
        typer.Option("--probe-landscape", help="two-stage: a member of the probes' cheaper landscape family (same "
                     "grid, fewer epochs); repeat for every member (default: full-fidelity probes on --landscape)."),
    ] = None,
    evaluate_repeats: Annotated[
        int | None,
        typer.Option("--evaluate-repeats", help="Fresh simulated searches the pick and its uniform comparators are "
                     "reported on (default: --repeats; 0: report the selection repeats only)."),
    ] = None,
    evaluate_seed: Annotated[
        int | None,
        typer.Option("--evaluate-seed", help="Seed of the fresh searches, not --seed (default: --seed + 2^32)."),
    ] = None,
    split: Annotated[
        list[float] | None,
        typer.Option("--split", help="two-stage: a fraction of ε for the probes, in (0, 1); repeat for several "
                     "(default: 0.3, 0.5 and 0.7)."),
    ] = None,
    data_split: SimulatedDataSplitOpt = None,
    race: Annotated[
        bool,
        typer.Option("--race/--no-race", help="Stop simulating DP-HyPO rows significantly below the leader after "
                     "a round (see above); --no-race runs --repeats searches for every row."),
    ] = True,
    race_repeats: Annotated[
        int, typer.Option("--race-repeats", help="Selection searches of the race's first round (≥ 2).")
    ] = RACE_FIRST_REPEATS,
) -> None:
    """Plan a private search (help: :data:`PLAN_HELP`)."""
    with option_names(**OPTION_NAMES):
        budget = Budget(max_mean_runs, run_seconds, compute_budget)
        if split and "two-stage" not in (design or DEFAULT_DESIGNS):
            raise ValueError("--split is the budget split of a two-stage design: add --design two-stage")
        if not (isinstance(race_repeats, int) and race_repeats >= 2):
            raise ValueError(f"--race-repeats must be an integer >= 2, got {race_repeats!r}")
        _plan(landscape, epsilon, delta, mean, runs, repeats, seed, workers, as_json, adaptive_theorem, budget,
              tuple(design or DEFAULT_DESIGNS), probe_landscape, Evaluation(evaluate_repeats, evaluate_seed),
              tuple(split or ()), data_split, race_repeats if race else None)


@dataclass(frozen=True)
class Evaluation:
    """The fresh-repeat options as typed: ``--evaluate-repeats`` and ``--evaluate-seed``."""

    repeats: int | None = None
    seed: int | None = None

    def check(self, seed: int) -> None:
        """Refuse a negative count or seed, or fresh repeats on the selection seed, in one line."""
        if self.repeats is not None:
            check_non_negative_int("evaluate_repeats", self.repeats)
        if self.seed is not None:
            check_non_negative_int("evaluate_seed", self.seed)
            if self.seed == seed:
                raise ValueError(f"--evaluate-seed must differ from --seed (fresh searches draw fresh streams), got "
                                 f"{seed} for both")


@dataclass(frozen=True)
class Budget:
    """The compute options as typed: ``--max-mean-runs``, ``--run-seconds``, ``--compute-budget``."""

    max_mean_runs: float | None = None
    run_seconds: float | None = None
    budget_seconds: float | None = None

    def check(self) -> None:
        """Refuse a non-positive or non-finite value in one line (before the family is read)."""
        check_positive("run_seconds", self.run_seconds, optional=True)
        check_positive("budget_seconds", self.budget_seconds, optional=True)
        check_positive("max_mean_runs", self.max_mean_runs, optional=True)

    def resolve(self, family: LandscapeFamily) -> ComputeBudget:
        """The library's budget: ``--run-seconds``, else the family's metadata (:func:`family_run_seconds`)."""
        from dphypo.simulation.planner import ComputeBudget, family_run_seconds

        seconds: float | None
        if self.run_seconds is not None:
            seconds, source = self.run_seconds, "--run-seconds"
        else:
            seconds, source = family_run_seconds(family), "family metadata seconds_per_run_mean"
        if self.budget_seconds is not None and seconds is None:
            raise ValueError("--compute-budget needs the seconds one run takes: the family's metadata has no "
                             "seconds_per_run_mean, give --run-seconds")
        return ComputeBudget(seconds, self.budget_seconds, self.max_mean_runs, source if seconds is not None else "")


def _plan(
    landscape: list[str], epsilon: float, delta: float, mean: list[float] | None, runs: str, repeats: int,
    seed: int, workers: int | None, as_json: bool, adaptive_theorem: str = "B", budget: Budget | None = None,
    designs: tuple[str, ...] = DEFAULT_DESIGNS, probe_landscape: list[str] | None = None,
    evaluation: Evaluation | None = None, splits: tuple[float, ...] = (), data_split: str | None = None,
    race_repeats: int | None = RACE_FIRST_REPEATS,
) -> None:
    """The body of ``dphypo plan``: every option is checked before the first calibration (no race: ``None``)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from dphypo.simulation.family import load_family
    from dphypo.simulation.planner import Race, plan_search

    budget = budget or Budget()
    budget.check()
    check_designs(designs)
    if probe_landscape and "two-stage" not in designs:
        raise ValueError("--probe-landscape is the probes' family of a two-stage design: add --design two-stage")
    plan_candidates(designs, list(mean or DEFAULT_MEANS), runs, splits=splits)  # checked before a file is read
    if len(landscape) < 2:
        raise ValueError(f"--landscape must be repeated for at least 2 members of one landscape family, got "
                         f"{len(landscape)}")
    if workers is not None:
        check_positive_int("workers", workers)
    check_positive_int("repeats", repeats)
    check_non_negative_int("seed", seed)
    evaluation = evaluation or Evaluation()
    evaluation.check(seed)
    family = load_family(landscape)  # one line naming the files if they are not one family
    split_rule = simulated_split_rule(data_split, family)
    compute = budget.resolve(family)
    probes = None if not probe_landscape else load_family(probe_landscape)
    candidates = plan_candidates(designs, list(mean or DEFAULT_MEANS), runs, probe_family=probes,
                                 final_epochs=int(family.mechanism_metadata.get("epochs", 10)), splits=splits)
    columns = ("{task.description}", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    status = out_console(stderr=True)
    # A progress bar on a terminal only: piped or logged, it would leave blank lines around the errors and output.
    with Progress(*columns, console=status, transient=True, disable=not status.is_terminal) as bar:
        task = bar.add_task("planning", total=len(candidates))
        result = plan_search(family, epsilon, delta, candidates, repeats=repeats, seed=seed, workers=workers,
                             adaptive_theorem=adaptive_theorem, compute=compute,
                             progress=lambda row: bar.advance(task), evaluate_repeats=evaluation.repeats,
                             evaluate_seed=evaluation.seed, comparator_runs=runs, split_rule=split_rule,
                             race=None if race_repeats is None else Race(race_repeats))
    if not any(row.feasible for row in result.rows):  # nothing to rank: one line saying why and what would run
        raise ValueError(unreachable_message(result))
    payload = {**result.to_dict(), "landscape": list(landscape), "runs": runs, "verdict": verdict(result),
               "data_split": "permutation" if split_rule is None else "per-record"}
    if as_json:
        _emit(payload, Table(), True)
    else:
        console = out_console()
        console.print(_table(result))
        console.print(_front_table(result))
        console.print(verdict(result), markup=False, highlight=False)
    if result.best is None:  # the table says why per candidate; a script must not read this as a plan
        raise typer.Exit(code=1)


def unreachable_message(result: PlanResult) -> str:
    """Why no candidate of a plan could run at its ε, and what would (one line, for a plan with no simulated row).

    A candidate whose σ lies outside the family is the closest to running: the one nearest the family's range (in
    log σ) is named with the member to build. Otherwise every candidate is unreachable at any σ, and the one whose
    floor (its ε with unlimited noise: run count, density bounds, score releases) is lowest is named with it.

    Args:
        result: A plan whose rows are all ``"unreachable"`` or ``"outside family"``.

    Returns:
        The message (plain text, one line).
    """
    import math
    import re

    low, high = min(result.family_sigmas), max(result.family_sigmas)
    head = f"no design reaches total ε = {result.epsilon:g} on this family (σ from {low:g} to {high:g})"

    def distance(row: PlanRow) -> float:
        sigmas = [s for s in (row.sigma, row.probe_sigma) if s is not None]
        return max(abs(math.log(s / min(max(s, low), high))) for s in sigmas) if sigmas else math.inf

    outside = [row for row in result.rows if row.status == "outside family"]
    if outside:
        row = min(outside, key=distance)
        reason = row.reason.replace("total epsilon=", "total ε = ")  # the planner's words, not an option's
        return f"{head}: the closest, {row.candidate.name}, {reason}; or raise --epsilon"

    def floor(row: PlanRow) -> float:
        found = re.search(r"(?:costs at least|gives) (?:epsilon=|ε = )([0-9.eE+-]+)", row.reason)
        return float(found.group(1)) if found else math.inf

    row = min(result.rows, key=floor)
    if math.isinf(floor(row)):
        return f"{head}: {row.candidate.name}: {row.reason}"
    return (f"{head}: even with unlimited noise the cheapest, {row.candidate.name}, costs ε = {floor(row):.4g} "
            f"(its run count and score releases): raise --epsilon above it, or give a smaller --mean")


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

    from dphypo.simulation.planner import TwoStageCandidate

    sigmas = ", ".join(f"{s:g}" for s in result.family_sigmas)
    table = Table(title=escape(f"Plan at total ε = {result.epsilon:g}, δ = {result.delta:g}, every candidate at its "
                               f"own σ, on the landscape family σ ∈ {{{sigmas}}}: mean true value of the released "
                               f"point over {result.repeats} simulated searches [95% CI]"
                               f"{_race_title(result)}"))
    for column in ("", "configuration", "E[runs]", "E[compute]", "C, c", "σ", "total ε (bound)", "mean [95% CI]",
                   "status"):
        table.add_column(escape(column))  # "E[runs]" is not markup
    best, second = result.best, result.runner_up
    ranked = list(result.ranked)
    others = [r for r in result.rows if not r.feasible]
    for row in ranked + others:
        cand = row.candidate
        mark = "★ best" if row is best else "runner-up" if row is second else ""
        bounds = "two-stage" if isinstance(cand, TwoStageCandidate) else "{:g}, {:.4g}".format(*cand.bounds)
        sigma = "-" if row.sigma is None else f"{row.sigma:.4f}"
        if row.probe_sigma is not None:
            sigma = f"probes {row.probe_sigma:.4f}, final {sigma}"
        eps = "-" if row.epsilon is None else f"{row.epsilon:.4f} ({row.method})"
        status = row.status if row.feasible else f"{row.status}: {row.reason}"
        if row.eliminated:
            status = f"{row.eliminated} (not picked)"
        if not row.within_budget:
            status += f"; over budget: {row.budget_reason}"
        cells = [mark, cand.label, f"{cand.expected_runs:g}", _compute(row), bounds, sigma, eps,
                 _mean_ci(row), status]
        table.add_row(*(escape(cell) for cell in cells))  # reasons hold brackets ("narrow [c, C]"): not markup
    return table


def _race_title(result: PlanResult) -> str:
    """The table title's note on the race: how many rows it stopped early (empty without a race)."""
    if result.race is None:
        return ""
    stopped = sum(bool(row.eliminated) for row in result.rows)
    rounds = ", ".join(str(n) for n in result.race.schedule(result.repeats))
    return (f"; race over rounds of {rounds} searches: {stopped} DP-HyPO row(s) eliminated with fewer searches "
            f"(status)")


def _race_sentence(result: PlanResult) -> str:
    """The verdict's sentence on the race (empty without one)."""
    race = result.race
    if race is None:
        return ""
    stopped = [row for row in result.rows if row.eliminated]
    if not stopped:
        return (f"Race (rounds of {', '.join(str(n) for n in race.schedule(result.repeats))} searches): no row was "
                f"eliminated.")
    low, high = min(r.repeats for r in stopped), max(r.repeats for r in stopped)
    searches = f"{low}" if low == high else f"{low} to {high}"
    return (f"Race: {len(stopped)} DP-HyPO row(s) stopped early as significantly below the leader (one-sided bounds, "
            f"error at most {race.alpha:g} per row and leader over all rounds), after {searches} searches instead of "
            f"{result.repeats}; never picked.")


def _compute(row: PlanRow) -> str:
    """Expected compute of a row: seconds (with hours when long), or ``-`` without a cost per run."""
    seconds = row.expected_compute
    if seconds is None:
        return "-"
    return f"{seconds:.4g} s" if seconds < 3600 else f"{seconds:.4g} s ({seconds / 3600:.3g} h)"


def _front_table(result: PlanResult) -> Table:
    """The utility-vs-compute Pareto front at the plan's ε, cheapest first."""
    from rich.markup import escape

    table = Table(title=escape(f"Pareto front at total ε = {result.epsilon:g}: the configurations no cheaper one "
                               f"matches in mean released value"))
    for column in ("configuration", "design", "E[runs]", "E[compute]", "mean [95% CI]", "within budget"):
        table.add_column(escape(column))
    for row in result.pareto_front:
        cand = row.candidate
        cells = [cand.name, cand.design, f"{cand.expected_runs:g}", _compute(row), _mean_ci(row),
                 "yes" if row.within_budget else f"no: {row.budget_reason}"]
        table.add_row(*(escape(cell) for cell in cells))
    return table


def _budget_sentence(result: PlanResult) -> str:
    """What the compute budget excluded, and what the best excluded row would have given (empty without one)."""
    compute = result.compute
    if not compute.bounded:
        return ""
    limits = [f"E[runs] ≤ {compute.max_mean_runs:g}" if compute.max_mean_runs is not None else "",
              f"expected compute ≤ {compute.budget_seconds:g} s" if compute.budget_seconds is not None else ""]
    excluded = [r for r in result.ranked if not r.within_budget]
    sentence = f"Compute budget: {' and '.join(x for x in limits if x)}; {len(excluded)} simulated row(s) over it."
    best = result.best
    if excluded and best is not None and float(excluded[0].mean or 0.0) > float(best.mean or 0.0):
        sentence += (f" Over budget, {excluded[0].candidate.name} would release {_mean_ci(excluded[0])} "
                     f"({_compute(excluded[0])}).")
    return sentence


def _two_stage_sentences(result: PlanResult) -> list[str]:
    """The best two-stage design against the best single-stage row of at most its expected compute, if both ran."""
    from dphypo.simulation.planner import compare_rows

    ranked = result.ranked
    staged = next((r for r in ranked if r.candidate.design == "two-stage"), None)
    if staged is None:
        return []
    budget = staged.candidate.expected_runs
    single = next((r for r in ranked if r.candidate.design != "two-stage" and r.candidate.expected_runs <= budget),
                  None)
    if single is None:
        return [f"Best two-stage design: {staged.candidate.name}: {_mean_ci(staged)}; no single-stage candidate with "
                f"at most its {budget:g} expected runs ran."]
    cmp = compare_rows(staged, single)
    judged = ("two-stage wins" if cmp.ci95[0] > 0 else "single-stage wins" if cmp.ci95[1] < 0 else
              "not significant")
    return [f"At most {budget:g} expected runs: best two-stage {staged.candidate.name} {_mean_ci(staged)} vs "
            f"{single.candidate.name} {_mean_ci(single)}, two-stage − single-stage {_difference(cmp)} "
            f"({cmp.pairing}): {judged}."]


def evaluation_sentences(result: PlanResult) -> list[str]:
    """The pick on fresh searches and its difference against the best uniform search of at least its compute."""
    evaluation = result.evaluation
    if evaluation is None:
        return []
    pick = evaluation.pick
    out = [f"On {evaluation.repeats} fresh searches (seed {evaluation.seed}, not the selection's) the pick releases "
           f"{_mean_ci(pick)} (selection: {float(evaluation.selected.mean or 0.0):.4f})."]
    cmp, comparator = evaluation.comparison, evaluation.comparator
    if cmp is None or comparator is None:
        out.append(f"No uniform comparator: {evaluation.reason}.")
        return out
    judged = ("the pick wins" if cmp.ci95[0] > 0 else "uniform search wins" if cmp.ci95[1] < 0 else
              "not significant")
    considered = ", ".join(row.candidate.name for row in evaluation.uniform)
    out.append(f"Best uniform search with at least its {pick.candidate.expected_runs:g} expected runs (of "
               f"{considered}, on the same fresh searches): {comparator.candidate.name} {_mean_ci(comparator)}; "
               f"pick − uniform {_difference(cmp)} ({cmp.pairing}): {judged}.")
    return out


def verdict(result: PlanResult) -> str:
    """One paragraph: the best configuration, the runner-up, their difference and, per E[T], uniform vs adaptive.

    Args:
        result: The plan.

    Returns:
        The paragraph (plain text).
    """
    best, second, diff = result.best, result.runner_up, result.difference
    if best is None:
        return (f"No candidate can run at total ε = {result.epsilon:g} within the compute budget: every one is "
                f"unreachable, needs a σ outside the family or is over budget (see the status column).")
    parts = [f"Best: {best.candidate.name} (σ = {best.sigma:.4f}, ε = {best.epsilon:.4f}, expected compute "
             f"{_compute(best)}): {_mean_ci(best)} on the {result.repeats} selection searches."]
    parts += evaluation_sentences(result)
    if second is None or diff is None:
        parts.append("No runner-up: it is the only candidate that could run.")
    else:
        judged = ("significantly better" if result.significant else
                  "not significantly better: the simulations do not separate them")
        parts.append(f"Runner-up: {second.candidate.name}: {_mean_ci(second)}. Best − runner-up "
                     f"{_difference(diff)} ({diff.pairing}): {judged}.")
    designs = {row.candidate.design for row in result.rows}
    per_mean = result.by_expected_runs() if {"uniform", "dp-hypo"} <= designs else []  # both designs were asked for
    for m, uniform, adaptive, cmp in per_mean:
        if uniform is None or adaptive is None or cmp is None:
            missing = "uniform" if uniform is None else "adaptive"
            parts.append(f"E[T] = {m:g}: no {missing} candidate could run.")
            continue
        judged = ("adaptive search wins" if cmp.ci95[0] > 0 else "uniform search wins" if cmp.ci95[1] < 0 else
                  "not significant")
        parts.append(f"E[T] = {m:g}: best uniform {_mean_ci(uniform)} vs best adaptive {adaptive.candidate.label} "
                     f"{_mean_ci(adaptive)}, adaptive − uniform {_difference(cmp)} ({cmp.pairing}): {judged}.")
    parts += _two_stage_sentences(result)
    race = _race_sentence(result)
    if race:
        parts.append(race)
    budget = _budget_sentence(result)
    if budget:
        parts.append(budget)
    parts.append("Computed from the landscapes (public or already-paid data), not from the private data.")
    return " ".join(parts)

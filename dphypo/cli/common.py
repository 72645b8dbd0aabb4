"""Shared pieces of the ``dphypo`` command line: the typer app, option types and output helpers."""

from __future__ import annotations

import contextlib
import functools
import json
import math
import re
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Annotated, Any, TypeGuard

import typer
from rich.console import Console
from rich.table import Table
from typer.core import TyperGroup

from dphypo.privacy import RUN_COUNT_FAMILIES, PrivacyReport, RepeatAndSelect, make_run_count
from dphypo.privacy.split import SplitRule

if TYPE_CHECKING:
    from dphypo.strategies import Scale, Strategy

#: Order of the commands in ``dphypo --help``: the workflow (search, publish, account, then research tools).
COMMAND_ORDER = ("tune", "release", "account", "calibrate", "landscape", "simulate", "plan", "plot")

#: Width of a console that is not a terminal (piped, redirected): wide enough that no cell is ever cut.
PIPE_WIDTH = 10_000


def _without_type_placeholder(command: Any) -> None:
    """Plain usage: no ``<bool>`` placeholder for on/off flags (``--json``), no braces around arguments.

    Recent typer writes a required argument as ``{JOURNAL}`` in the usage line, which reads like a template
    placeholder; ``dphypo release JOURNAL`` is what a user types.
    """
    for param in getattr(command, "params", []):
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
        if getattr(param, "param_type_name", "") == "argument" and hasattr(param, "_usage_display_name"):
            param._usage_display_name = functools.partial(_usage_name, param)


def _usage_name(param: Any) -> str:
    name = str(param.display_name_raw)
    return (name if param.required else f"[{name}]") + ("..." if param.nargs != 1 else "")


class _Group(TyperGroup):
    """The ``dphypo`` group: workflow order, flags without a ``<bool>`` placeholder, EOFError as a bad input.

    Commands are listed in :data:`COMMAND_ORDER`, flags show no ``<bool>`` placeholder in ``--help``, and an
    EOFError inside a command is reported as a bad input, not as Ctrl-C.
    """

    # typer vendors click privately (typer._click), so its Context/Command types are not importable: Any.
    def list_commands(self, ctx: Any) -> list[str]:
        names = super().list_commands(ctx)
        rank = {name: k for k, name in enumerate(COMMAND_ORDER)}
        return sorted(names, key=lambda name: (rank.get(name, len(rank)), names.index(name)))

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            _without_type_placeholder(command)
            help_option = command.get_help_option(ctx)
            if help_option is not None and help_option.metavar is None:
                help_option.metavar = ""
        return command

    def invoke(self, ctx: Any) -> Any:
        # click reports an EOFError raised anywhere in a command (numpy reading an empty file, say) exactly like
        # Ctrl-C: a blank line and "Aborted". It is a bad input, so say so in one line.
        try:
            return super().invoke(ctx)
        except EOFError as exc:
            detail = " ".join(str(exc).split()) or "no data left"
            raise ValueError(f"unexpected end of input ({detail}); is an input file empty or truncated?") from exc

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)
        if option is not None and option.metavar is None:
            option.metavar = ""
        return option


app = typer.Typer(
    name="dphypo",
    cls=_Group,
    help="Adaptive differentially private hyperparameter optimisation (DP-HyPO) with one honest (ε, δ).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",  # paragraphs reflow; ``--option`` shows as code
)

#: Density-ratio bounds of ``--strategy gp`` (DP-HyPO's GP instantiation, Wang et al. 2023, Sec. 5).
DEFAULT_C, DEFAULT_LOWER_C = 2.0, 0.75

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
SearchUpperOpt = Annotated[
    float | None,
    typer.Option(
        "--C",
        help="Upper density-ratio bound C ≥ 1 of the search (default 1: a uniform search, dphypo tune's default; "
        "tune --strategy gp uses --C 2 --c 0.75).",
    ),
]
SearchLowerOpt = Annotated[
    float | None,
    typer.Option("--c", help="Lower density-ratio bound c ∈ (0, 1] of the search (default 1: uniform search)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of a table.")]
#: ``--data-split`` of ``simulate``/``plan``: calibrate as ``dphypo tune`` does with that split (its default:
#: per-record, Theorem S), so a simulated σ is the σ tune runs.
SimulatedDataSplitOpt = Annotated[
    str | None,
    typer.Option("--data-split", help="Calibrate as dphypo tune --data-split does: per-record (default, as tune's: "
                 "each run charged the worse of its DP-SGD and its score release, docs/proofs/split.md Theorem S; "
                 "permutation when the family has no score noise) or permutation (the sum of both)."),
]
AdaptiveTheoremOpt = Annotated[
    str,
    typer.Option(
        "--adaptive-theorem",
        help="Bound for C > c: B (default; proven, numerical, docs/proofs/adaptive.md; also a uniform RDP bound), A "
        "(proven, closed form; for a uniform search: Papernot-Steinke alone) or published (DP-HyPO Theorem 1 as "
        "printed; its proof has a known gap; implied by Theorem A).",
    ),
]


MaxRunsOpt = Annotated[int | None, typer.Option("--max-runs", help="n of binomial runs, T ~ Bin(n, mean/n).")]


def _search(
    runs: str, theta: float | None, gamma: float | None, mean: float | None, C: float | None, c: float | None,
    max_runs: int | None = None,
) -> RepeatAndSelect:
    """The search ``account``/``calibrate`` describe; a bound not given is 1 (a uniform search, like ``tune``)."""
    with option_names(**{"n": "--max-runs", "max-runs": "--max-runs", "theta": "--theta", "gamma": "--gamma",
                         "mean": "--mean", "C": "--C", "c": "--c"}):
        run_count = make_run_count(runs, theta=theta, gamma=gamma, mean=mean, max_runs=max_runs)
        return RepeatAndSelect(run_count, 1.0 if C is None else C, 1.0 if c is None else c)


def _rename(message: str, names: dict[str, str]) -> str:
    """``message`` with each parameter name of ``names`` that starts a clause replaced by its CLI option."""
    others = "|".join(re.escape(name) for name in sorted(names, key=len, reverse=True))
    for name, option in names.items():
        # The parameter as the subject of a clause ("n must be ...", "lr_grid values must ...", "sigma=2", "gamma
        # or mean"), not inside another word, an option name, a quoted value or a computed "at least x=...".
        pattern = (
            rf"(?<![\w\-'\"./,])(?<!least ){re.escape(name)}"
            rf"(?=(?: values)? (?:must|is|has)\b|=| or (?:{others})\b|(?<= or {re.escape(name)}) for\b)"
        )
        message = re.sub(pattern, option, message)
    return message


@contextlib.contextmanager
def option_names(**names: str) -> Iterator[None]:
    """Re-raise a ValueError from inside the block with library parameter names replaced by CLI options.

    Args:
        **names: Parameter name -> the option that sets it, e.g. ``n="--max-runs"``.
    """
    try:
        yield
    except ValueError as exc:
        renamed = _rename(str(exc), names)
        if renamed == str(exc):
            raise
        raise ValueError(renamed) from exc


def naming_options(**names: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Decorate a command so that its ValueErrors name CLI options (see :func:`option_names`)."""

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(command)
        def wrapper(*args: Any, **kwargs: Any) -> None:
            with option_names(**names):
                command(*args, **kwargs)

        return wrapper

    return decorate


def out_console(*, stderr: bool = False) -> Console:
    """A rich console for results: the terminal's width on a terminal, otherwise wide enough for every cell.

    Piped or redirected, the console is :data:`PIPE_WIDTH` wide, so no table cell (a setting, a confidence
    interval, a file path) is ever cut with "…".

    Args:
        stderr: Write to standard error.
    """
    console = Console(stderr=stderr)
    return console if console.is_terminal else Console(stderr=stderr, width=PIPE_WIDTH)


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
    table.add_row("  + adaptivity (C > c)", _fmt(report.adaptivity_epsilon))
    if report.charged_runs:
        table.add_row(f"  + up to {report.charged_runs} lost attempt(s), charged up front",
                      _fmt(report.charged_epsilon))
    search = report.search.describe()
    dist = search["runs"] + "".join(f", {k}={_fmt(search[k], 6)}" for k in ("theta", "gamma") if k in search)
    table.add_row("run count T", f"{dist}; E[T] = {_fmt(report.expected_runs)}")
    table.add_row("density bounds", f"C = {_fmt(report.search.C)}, c = {_fmt(report.search.c)}")
    table.add_row("orders (α, α̂)", f"{_fmt(report.order)}, {_fmt(report.order_hat)}")
    if len(report.methods) > 1:
        for name, eps in sorted(report.methods.items(), key=lambda kv: kv[1]):
            table.add_row(f"  ε by {name}", _fmt(eps) + ("  ← used (smallest valid bound)" if name == report.method
                                                          else ""))
    if report.profile_skipped:
        table.add_row("profile bounds", f"skipped ({report.profile_skipped}); RDP only")
    table.add_row("theorem", report.theorem)
    table.add_row("per-run mechanism", report.base_label)
    return table


def _emit(payload: dict[str, Any], table: Table, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(payload, sort_keys=True))
    else:
        out_console().print(table)


# Options of a two-stage design shared by tune and simulate.
SplitOpt = Annotated[
    float, typer.Option("--split", help="Two-stage: fraction of ε for the probes before both σ are scaled together.")
]
TopKOpt = Annotated[
    int, typer.Option("--top-k", help="Two-stage, --probe-mode release: the best probes handed to the final stage.")
]
FinalMeanOpt = Annotated[
    float | None, typer.Option("--final-mean", help="Two-stage: E[T′] of a uniform selection among the top k "
                               "(default: one final run).")
]

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


def typed_grids(lr_grid: str | None, clip_grid: str | None) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The learning rates and clipping norms of ``--lr-grid`` and ``--clip-grid``, each the paper's when not given.

    Both are parsed by :func:`dphypo.space.parse_grid` (values > 0), the one parser of typed grids.

    Raises:
        ValueError: A malformed grid, named by its option.
    """
    from dphypo.simulation.builder import paper_grid
    from dphypo.space import parse_grid

    default_lr, default_clip = paper_grid()
    lrs = parse_grid(lr_grid, "--lr-grid", positive=True) if lr_grid is not None else default_lr
    clips = parse_grid(clip_grid, "--clip-grid", positive=True) if clip_grid is not None else default_clip
    return lrs, clips


#: Largest ``--pass-size``: candidates trained at once in one vectorised pass, which is padded to this size with
#: dummy candidates (each holds a model copy); CUDA's default is at most 256, so 1024 leaves room for small models.
MAX_PASS_SIZE = 1024
#: Largest ``--epochs`` (and ``--epochs-grid`` value): one DP-SGD run of more epochs trains for days on the built-in
#: recipes (a digits MLP epoch takes ~0.1 s, an MNIST CNN epoch tens of seconds, and a search trains ~20 runs).
MAX_EPOCHS = 1000


def check_pass_size(value: int | None, option: str = "--pass-size") -> None:
    """Refuse a pass size that is not an integer in [1, :data:`MAX_PASS_SIZE`] in one line naming ``option``."""
    from dphypo.privacy.validation import check_positive_int

    if value is None:
        return
    check_positive_int(option, value)
    if value > MAX_PASS_SIZE:
        raise ValueError(f"{option} must be at most {MAX_PASS_SIZE} (candidates trained at once: every pass is padded "
                         f"to this many model copies), got {value}")


def check_epochs(value: int, option: str = "--epochs") -> None:
    """Refuse an epoch count that is not an integer in [1, :data:`MAX_EPOCHS`] in one line naming ``option``."""
    from dphypo.privacy.validation import check_positive_int

    check_positive_int(option, value)
    if value > MAX_EPOCHS:
        raise ValueError(f"{option} must be at most {MAX_EPOCHS} (beyond it a single DP-SGD run trains for days), "
                         f"got {value}")


def is_scale(name: str) -> TypeGuard[Scale]:
    """Whether a ``--scale`` value names a GP score scale (narrows the option's ``str`` to :data:`Scale`)."""
    from dphypo.strategies import SCALES  # not at import time: ``dphypo --help`` loads no strategy code

    return name in SCALES


def parse_scale(name: str) -> Scale:
    """The GP score scale a ``--scale`` value names.

    Raises:
        ValueError: Not one of :data:`~dphypo.strategies.SCALES` (GPUCB's own message).
    """
    if not is_scale(name):
        from dphypo.strategies import SCALES

        raise ValueError(f"scale must be one of {SCALES}, got {name!r}")
    return name


#: ``--strategy`` names: uniform search, GP-UCB softmax (DP-HyPO), the GP top-set rule (c derived from C).
STRATEGY_NAMES = ("uniform", "gp", "top-set")


def make_strategy(
    name: str,
    *,
    C: float = 2.0,
    c: float = 0.75,
    tau: float = 0.1,
    beta: float = 1.0,
    scale: str = "standardized",
    top_mass: float = 0.05,
    tolerance: float = 0.5,
    refit_growth: float = 0.1,
) -> Strategy:
    """The strategy a ``--strategy`` name selects (the one parser of strategy names in the CLI).

    ``"gp"`` → ``GPUCB(C, c, tau, beta, scale, refit_growth)``; ``"top-set"`` → ``GPTopSet(C, top_mass,
    tolerance, refit_growth)`` (its c follows from C and ``top_mass``; ``c`` is not used); ``"uniform"`` →
    ``Uniform()`` (C = c = 1 whatever ``C``, ``c`` say: a uniform search never adapts).
    """
    from dphypo.strategies import GPUCB, GPTopSet, Uniform

    if name == "uniform":
        return Uniform()
    if name == "gp":
        return GPUCB(C=C, c=c, tau=tau, beta=beta, scale=parse_scale(scale), refit_growth=refit_growth)
    if name == "top-set":
        return GPTopSet(C=C, top_mass=top_mass, tolerance=tolerance, refit_growth=refit_growth)
    raise ValueError(f"strategy must be one of {', '.join(repr(n) for n in STRATEGY_NAMES)}, got {name!r}")


def simulated_split_rule(data_split: str | None, family: Any) -> SplitRule | None:
    """The split rule ``simulate``/``plan`` calibrate with (``None``: permutation, each run charged the sum).

    ``None`` (not given) is ``dphypo tune``'s default: per-record where the family's runs release a noisy score (its
    metadata's ``score_noise`` > 0), else permutation (a validation record in an exact score has no bound).

    Args:
        data_split: ``--data-split`` as given, or ``None``.
        family: The landscape family (:class:`~dphypo.simulation.family.LandscapeFamily`) being simulated.

    Raises:
        ValueError: An unknown value, or ``per-record`` for a family without score noise (one line).
    """
    noise = family.mechanism_metadata.get("score_noise")
    count_noise = float(noise) if noise else None
    if data_split is None:
        data_split = "per-record" if count_noise else "permutation"
    return split_rule_option(data_split, count_noise)


#: ``--data-split`` values: a seeded permutation (each run charged the sum), or a per-record split (Theorem S).
DATA_SPLITS = ("permutation", "per-record")
#: A per-record rule for ``account``/``calibrate``: Theorem S's max bound does not depend on the kind or the shares,
#: so these only satisfy :class:`SplitRule`; the release names the rule ``"per-record"`` (``dphypo.cli.privacy``).
_CLI_RULE = SplitRule("draw", 0.6, 0.2, 0.2)


def split_rule_option(data_split: str, count_noise: float | None) -> SplitRule | None:
    """The rule ``--data-split`` names (``None``: permutation, the sum), refused in one line where no bound applies.

    Raises:
        ValueError: An unknown value, or ``per-record`` without a score noise (a validation record is then in an
            exact count that no bound covers).
    """
    if data_split not in DATA_SPLITS:
        raise ValueError(f"--data-split must be one of {', '.join(DATA_SPLITS)}, got {data_split!r}")
    if data_split == "permutation":
        return None
    if count_noise is None:
        raise ValueError("--data-split per-record needs a private score (--score-noise, or --score-noise-accuracy "
                         "with --n-val): without one no bound covers a record in the validation split")
    return _CLI_RULE

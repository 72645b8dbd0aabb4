"""``dphypo tune``: the main job — a private lr × clip search on a dataset, printing only the release."""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, TypeGuard, Unpack

import typer
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from dphypo._paths import check_output_dir, check_output_file
from dphypo.cli.common import DEFAULT_C, DEFAULT_LOWER_C, _report_table, make_strategy, option_names, out_console

if TYPE_CHECKING:
    from dphypo.api import SubsampledTuning
    from dphypo.privacy import RunCountDistribution
    from dphypo.privacy.transfer import Variant
    from dphypo.search.execution import Executor
    from dphypo.search.tuner import Release, SearchHistory
    from dphypo.strategies import Strategy
    from dphypo.train.plan import DPSGDPlan

#: Total ε of the default search.
DEFAULT_EPSILON = 8.0
#: GP-UCB exploration weight and softmax inverse temperature of ``--strategy gp`` (DP-HyPO §5's τ = 0.1, β = 1).
DEFAULT_TAU, DEFAULT_BETA = 0.1, 1.0
#: Default E[T] when no run-count parameter is given.
DEFAULT_MEAN_RUNS = 20.0


class TuneOptions(TypedDict):
    """The options of ``dphypo tune`` as the command parsed them (keys: its parameter names)."""

    dataset: str
    data_dir: str | None
    model: str | None
    lr_grid: str | None
    clip_grid: str | None
    strategy: str
    runs: str
    theta: float | None
    gamma: float | None
    mean: float | None
    C: float | None
    c: float | None
    tau: float | None
    beta: float | None
    epsilon: float | None
    sigma: float | None
    delta: float
    epochs: int
    batch_size: int
    score_noise_accuracy: float
    score_noise: float | None
    seed: int | None
    max_lost: int
    secure_mode: bool
    out: str
    show_trials: bool
    as_json: bool
    tune_fraction: float | None
    variant: int
    journal: str | None
    executor: str
    workers: int | None
    address: str | None
    runs_per_update: int | None


class _SearchArguments(TypedDict):
    """Keyword arguments :func:`dphypo.tune` and :func:`dphypo.tune_subsampled` share."""

    epsilon: float | None
    sigma: float | None
    delta: float
    runs: RunCountDistribution
    strategy: Strategy
    seed: int | None
    progress: Callable[[int], None]
    executor: Executor
    runs_per_update: int | None
    max_lost: int


def _is_variant(variant: int) -> TypeGuard[Variant]:
    return variant in (1, 2)


#: Library parameter names in error messages → the ``dphypo tune`` option that sets them.
TUNE_OPTION_NAMES = {
    "name": "--dataset", "dataset_name": "--dataset", "dataset": "--dataset", "data_dir": "--data-dir",
    "model": "--model", "tuning_rate": "--tune-fraction", "fraction": "--tune-fraction", "variant": "--variant",
    "runs": "--runs", "theta": "--theta", "gamma": "--gamma", "mean": "--mean", "C": "--C", "c": "--c",
    "tau": "--tau", "beta": "--beta", "epsilon": "--epsilon", "target_epsilon": "--epsilon", "sigma": "--sigma",
    "delta": "--delta", "epochs": "--epochs", "batch_size": "--batch-size", "max_lost": "--max-lost",
    "seed": "--seed", "executor": "--executor", "workers": "--workers", "address": "--address",
    "runs_per_update": "--runs-per-update", "journal": "--journal", "out": "--out",
}
#: Run-count families ``dphypo tune`` draws T from (binomial T is for ``account``/``calibrate``).
TUNE_RUNS = ("negbin", "geometric", "logarithmic", "poisson")


def run_tune(**opts: Unpack[TuneOptions]) -> None:
    """Implementation of ``dphypo tune`` (options as parsed by the command); errors name tune's options."""
    with option_names(**TUNE_OPTION_NAMES):
        _run_tune(opts)


def _run_tune(opts: TuneOptions) -> None:
    from dphypo.api import SubsampledSearchResult, tune, tune_subsampled
    from dphypo.privacy import make_run_count
    from dphypo.search.execution import make_executor
    from dphypo.search.tuner import SearchResult
    from dphypo.simulation.builder import paper_grid
    from dphypo.space import Grid, SearchSpace, parse_grid
    from dphypo.train import DPSGD, DPSGDObjective, default_model, load_dataset

    o = opts.copy()
    C, c = _check_options_and_paths(o)  # before any data is touched or any noise calibrated
    if o["seed"] is not None:  # privacy rule 6: a seed the curator chose is a secret, and we say so once
        typer.echo(f"warning: --seed {o['seed']} makes this search reproducible: anyone who knows the seed can "
                   "recompute T and subtract the DP-SGD and score noise, so keep it as secret as the data",
                   err=True)
    if o["epsilon"] is None and o["sigma"] is None:
        o["epsilon"] = DEFAULT_EPSILON
    if o["gamma"] is None and o["mean"] is None and o["runs"] != "negbin":
        o["mean"] = DEFAULT_MEAN_RUNS
    runs = make_run_count(o["runs"], theta=o["theta"], gamma=o["gamma"], mean=o["mean"])
    noise = o["score_noise_accuracy"]
    if not (math.isfinite(noise) and noise >= 0):
        raise ValueError(f"--score-noise-accuracy must be a finite number >= 0, got {noise!r}")
    default_lr, default_clip = paper_grid()
    lrs = parse_grid(o["lr_grid"], "--lr-grid", positive=True) if o["lr_grid"] is not None else default_lr
    clips = parse_grid(o["clip_grid"], "--clip-grid", positive=True) if o["clip_grid"] is not None else default_clip
    space = SearchSpace({"lr": Grid(lrs, scale="log"), "clip": Grid(clips, scale="linear")})

    splits = load_dataset(o["dataset"], data_dir=o["data_dir"])
    n_train, n_val = len(splits.y_train), len(splits.y_val)
    model = o["model"] or default_model(o["dataset"])
    count_noise = noise * n_val if noise > 0 else None  # the mechanism's unit: counts (sensitivity 1)

    training = DPSGD(batch_size=o["batch_size"], epochs=o["epochs"], n_train=n_train, n_val=n_val,
                     score_noise=count_noise, secure_mode=o["secure_mode"])
    tau = DEFAULT_TAU if o["tau"] is None else o["tau"]
    beta = DEFAULT_BETA if o["beta"] is None else o["beta"]
    strategy = make_strategy(o["strategy"], C=C, c=c, tau=tau, beta=beta)
    objective = DPSGDObjective(o["dataset"], model, data_dir=o["data_dir"])  # trains under run.plan
    console = Console(stderr=True)
    started = time.perf_counter()
    pool = make_executor(o["executor"], workers=o["workers"], address=o["address"])
    columns = (SpinnerColumn(), TextColumn(progress_label(o["show_trials"])), TimeElapsedColumn())
    with pool, Progress(*columns, console=console, transient=True) as bar, _interrupt_explained(o):
        task = bar.add_task("search", total=None)
        common: _SearchArguments = {
            "epsilon": o["epsilon"], "sigma": o["sigma"], "delta": o["delta"], "runs": runs, "strategy": strategy,
            "seed": o["seed"], "progress": lambda done: bar.update(task, completed=done), "executor": pool,
            "runs_per_update": o["runs_per_update"], "max_lost": o["max_lost"],
        }
        fraction, variant = o["tune_fraction"], o["variant"]
        if fraction is None:
            result: SearchResult = tune(objective, space, training, journal=o["journal"], **common)
        else:
            if not _is_variant(variant):
                raise ValueError(f"variant must be 1 or 2, got {variant!r}")
            result = tune_subsampled(objective, space, training, fraction=fraction, variant=variant, **common)
    elapsed = time.perf_counter() - started
    release = result.release
    out_dir = Path(o["out"])
    model_path, test_accuracy, model_sha256 = None, None, None
    if release.artifact is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        model_path = out_dir / "released_model.pt"
        release.artifact.save(model_path)
        model_sha256 = file_sha256(model_path)
        test_accuracy = release.artifact.test_accuracy(splits)
    subsampling = result.subsampling if isinstance(result, SubsampledSearchResult) else None
    payload = _release_payload(release, o, model, test_accuracy, model_path, model_sha256)
    if subsampling is not None:
        payload["subsampled"] = subsampling.to_dict()
    if o["show_trials"]:  # the search's wall time reveals T roughly: curator-only, like T itself
        payload["NOT_PRIVATE_curator_only"] = {**_trials_payload(result.history), "search_seconds": round(elapsed, 1)}
    if model_path is not None:
        (out_dir / "release.json").write_text(json.dumps(_without_trials(payload), indent=2, sort_keys=True))
    if o["journal"] is not None:
        _journal_release_extras(o["journal"], test_accuracy, model_path, model_sha256)
    if o["as_json"]:
        typer.echo(json.dumps(payload, sort_keys=True))
        return
    out = out_console()
    extra = {
        "dataset / model": f"{o['dataset']} / {model}",
        "strategy": o["strategy"] + ("" if o["strategy"] == "uniform" else f" (τ={tau:g}, β={beta:g})"),
        "released lr, clip": "-" if release.params is None else
        f"{release.params['lr']:.4g}, {release.params['clip']:.4g}",
        "released score (private val. acc.)": "-" if release.score is None else f"{release.score:.4f}",
        "test accuracy of released model": "-" if test_accuracy is None else f"{test_accuracy:.4f}",
        "σ (noise multiplier)": f"{_dpsgd_plan(release).sigma:.4g}",
        "lost attempts charged up front": f"{o['max_lost']} (one more stops the search without a release)",
        "saved model": str(model_path) if model_path else "- (no run: T = 0)",
    }
    if subsampling is not None:
        extra.update(_subsampled_rows(subsampling))
    out.print(_report_table(release.privacy, "Release of the private search", extra))
    out.print(
        "[dim]Only this release may be published. Test accuracy uses the dataset's test split, which the "
        "embedded datasets treat as public; it is not covered by ε.[/]"
    )
    if o["show_trials"]:
        _print_trials(out, result.history)


@contextlib.contextmanager
def _interrupt_explained(o: TuneOptions) -> Iterator[None]:
    """Ctrl-C during a search: say what it cost and whether (and how) it resumes, then exit with status 130."""
    try:
        yield
    except KeyboardInterrupt:
        typer.echo(interrupted_message(o["journal"], o["max_lost"]), err=True)
        raise typer.Exit(code=130) from None


def interrupted_message(journal: str | None, max_lost: int) -> str:
    """What an interrupted search tells the curator (one line).

    A run in flight when Ctrl-C arrived touched the data: the journal charges it as a lost attempt, so whether the
    search can resume depends on ``--max-lost``.

    Args:
        journal: The ``--journal`` file, if any.
        max_lost: The search's ``--max-lost``.
    """
    if journal is None:
        return ("interrupted: nothing was released, and the runs so far cannot be resumed (no --journal); the "
                "privacy they spent on the data is not released either")
    from dphypo.search.storage import JournalError, SQLiteJournal

    try:
        with SQLiteJournal.open(journal, read_only=True) as opened:
            charged = opened.charged_attempts()
    except (JournalError, OSError):
        charged = 0  # nothing journaled yet (stopped before the search was sealed)
    if charged > max_lost:
        return (f"interrupted: the run in flight was charged as a lost attempt ({charged} so far, --max-lost "
                f"{max_lost} covers {max_lost}), so {journal!r} cannot be resumed: its epsilon would have to grow; "
                "start a new journal (a larger --max-lost makes a search survive interruptions)")
    return (f"interrupted: {charged} lost attempt(s) charged so far (--max-lost {max_lost} covers them); resume "
            f"with the same command and --journal {journal}: T is not redrawn and no finished run repeats")


def progress_label(show_trials: bool) -> str:
    """The progress line's text (a rich template).

    Privacy rule 1: in release mode it shows elapsed time only. A count of completed runs ends at T, and a
    terminal transcript keeps it; only ``--show-trials`` (curator-only) shows the count, labelled as such.
    """
    return "runs completed (NOT PRIVATE, curator-only): {task.completed}" if show_trials else "searching"


def file_sha256(path: Path) -> str:
    """SHA-256 of a file's bytes (the released model's fingerprint in ``release.json`` and the journal)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _check_options_and_paths(o: TuneOptions) -> tuple[float, float]:
    """Refuse bad options and unusable output paths before any data is read (nothing is spent on a doomed run).

    Returns:
        The GP strategy's density bounds ``(C, c)``, the defaults filled in.
    """
    if o["tune_fraction"] is None and o["variant"] != 1:
        raise ValueError("--variant needs --tune-fraction (it selects the final run of subsampled tuning)")
    if o["tune_fraction"] is not None and o["journal"] is not None:
        raise ValueError("--journal is not supported with --tune-fraction yet: the final run on the rest of the data "
                         "would not be journaled, so a crash during it could not be charged")
    if o["score_noise"] is not None:
        raise ValueError("--score-noise was renamed --score-noise-accuracy (the std of the noise on the validation "
                         "accuracy; dphypo.tune's score_noise is the same noise in counts, i.e. times n_val)")
    if o["strategy"] not in ("uniform", "gp"):  # before any data is read (top-set: dphypo simulate / dphypo.tune)
        raise ValueError(f"--strategy must be 'uniform' or 'gp', got {o['strategy']!r}")
    if o["strategy"] == "uniform" and (o["C"], o["c"]) not in ((None, None), (1.0, 1.0)):
        raise ValueError("--strategy uniform never adapts (C = c = 1 is what it is accounted with): drop --C/--c, "
                         "or use --strategy gp")
    if o["strategy"] == "uniform" and (o["tau"], o["beta"]) != (None, None):
        raise ValueError("--tau and --beta set the GP-UCB score of --strategy gp; uniform search has none: drop "
                         "them, or use --strategy gp")
    C = DEFAULT_C if o["C"] is None else o["C"]
    c = DEFAULT_LOWER_C if o["c"] is None else o["c"]
    if o["runs"] not in TUNE_RUNS:
        also = " (binomial is for `dphypo account`/`calibrate` only)" if o["runs"] == "binomial" else ""
        raise ValueError(f"--runs must be one of {', '.join(TUNE_RUNS)}{also}, got {o['runs']!r}")
    for name, count in (("runs_per_update", o["runs_per_update"]), ("workers", o["workers"])):
        if count is not None and count < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be a positive integer, got {count}")
    if o["max_lost"] < 0:
        raise ValueError(f"--max-lost must be a non-negative integer, got {o['max_lost']}")
    if o["seed"] is not None and o["seed"] < 0:
        raise ValueError(f"--seed must be a non-negative integer, got {o['seed']}")
    if o["secure_mode"]:
        from dphypo.train.opacus import require_csprng

        require_csprng()
    # Every output path is proven writable now: a search that fails to save its release has spent its budget.
    out = check_output_dir(o["out"], "--out")
    if o["journal"] is not None:
        check_output_file(o["journal"], "--journal")
    _check_out_is_free(out, o["journal"])
    return C, c


def _check_out_is_free(out: Path, journal: str | None) -> None:
    """Never let one search overwrite another's release.

    ``--out`` must hold no release, except the same journaled search's own (a resume of a finished search
    rewrites identical files).
    """
    existing = out / "release.json"
    if not existing.exists():
        return
    if journal is not None and Path(journal).is_file() and Path(journal).stat().st_size > 0:
        from dphypo.search.storage import SQLiteJournal

        with SQLiteJournal.open(journal, read_only=True) as opened:
            released = opened.release() or {}
        try:
            written = json.loads(existing.read_text()).get("release", {})
        except (OSError, ValueError, AttributeError):
            written = {}
        if released.get("model_sha256") and written.get("model_sha256") == released["model_sha256"]:
            return
    raise ValueError(f"--out {str(out)!r} already holds the release of another search (release.json); choose "
                     "another --out or move that release away first")


def _journal_release_extras(journal: str, test_accuracy: float | None, model_path: Path | None,
                            model_sha256: str | None) -> None:
    """Add the released model's file, its SHA-256 and the public test accuracy to the journal's release."""
    from dphypo.search.storage import SQLiteJournal

    with SQLiteJournal.open(journal) as opened:
        release = opened.release()
        if release is not None:
            opened.write_release({**release, "test_accuracy": test_accuracy,
                                  # resolved: `dphypo release` may run from another directory
                                  "model_path": None if model_path is None else str(model_path.resolve()),
                                  "model_sha256": model_sha256})


def _dpsgd_plan(release: Release) -> DPSGDPlan:
    """The release's per-run plan: every search ``dphypo tune`` runs (plain or subsampled) has a DP-SGD plan."""
    from dphypo.train.plan import DPSGDPlan

    if not isinstance(release.plan, DPSGDPlan):
        raise TypeError(f"release.plan must be a DPSGDPlan, got {release.plan!r}")
    return release.plan


def _release_payload(release: Release, o: TuneOptions, model: str, test_accuracy: float | None,
                     model_path: Path | None, model_sha256: str | None) -> dict[str, Any]:
    plan = _dpsgd_plan(release)
    return {
        "release": {
            "params": release.params,
            "score": release.score,
            "test_accuracy": test_accuracy,
            "model_path": None if model_path is None else str(model_path),
            "model_sha256": model_sha256,
        },
        "privacy": {**release.privacy.to_dict(), "sigma": plan.sigma,
                    "sample_rate": plan.sample_rate, "steps": plan.steps, "max_lost": o["max_lost"]},
        "dataset": o["dataset"],
        "model": model,
        "strategy": o["strategy"],
    }


def _subsampled_rows(info: SubsampledTuning) -> dict[str, str]:
    """Table rows of a subsampled release (method, q, transfer, nominal set sizes)."""
    final = "X minus X1" if info.variant == 1 else "X"
    return {
        "method": info.method,
        "tuning fraction q": f"{info.tuning_rate:g} (search on X1 only)",
        "lr tuned on X1 → transferred": f"{info.tuned_lr:.4g} → {info.transferred_lr:.4g}",
        "set sizes (nominal)": f"X1: {info.tuning_set_size}, final run on {final}: {info.final_set_size}",
        "batch size tuning → final": f"{info.tuning_plan.batch_size} → {info.final_plan.batch_size}",
        "ε of the same search on all data": f"{info.report.full_data_epsilon:.4g} (no final run)",
        "released score": "best tuning run's private score on X1's validation part",
    }


def _trials_payload(history: SearchHistory) -> dict[str, Any]:
    return {
        "run_count": history.run_count,
        "trials": [
            {"number": t.number, "params": t.params, "score": None if t.failed else t.score, "failed": t.failed,
             "seconds": round(t.seconds, 3)}
            for t in history.trials
        ],
        "strategy_events": [f"step {e.step}: {e.kind}: {e.message}" for e in history.events],
    }


def _without_trials(payload: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in payload.items() if k != "NOT_PRIVATE_curator_only"}


def _print_trials(console: Console, history: SearchHistory) -> None:
    table = Table(title=f"NOT PRIVATE — curator only: T = {history.run_count} runs", title_style="bold red")
    for col in ("run", "lr", "clip", "score", "seconds"):
        table.add_column(col)
    for t in history.trials:
        table.add_row(str(t.number), f"{t.params['lr']:.4g}", f"{t.params['clip']:.4g}",
                      "failed" if t.failed else f"{t.score:.4f}", f"{t.seconds:.2f}")
    console.print(table)

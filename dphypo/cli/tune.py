"""``dphypo tune``: the main job — a private lr × clip search on a dataset, printing only the release."""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, TypeGuard, Unpack

import typer
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from dphypo.cli.common import _report_table, make_strategy, out_console

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
#: Density-ratio bounds of the default GP search (DP-HyPO §4's C = 2, c = 0.75).
DEFAULT_C, DEFAULT_LOWER_C = 2.0, 0.75
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
    tau: float
    beta: float
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


def run_tune(**opts: Unpack[TuneOptions]) -> None:
    """Implementation of ``dphypo tune`` (options as parsed by the command)."""
    from dphypo.api import SubsampledSearchResult, tune, tune_subsampled
    from dphypo.privacy import make_run_count
    from dphypo.search.execution import make_executor
    from dphypo.search.tuner import SearchResult
    from dphypo.simulation.builder import paper_grid, parse_grid
    from dphypo.space import Grid, SearchSpace
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
    lrs = parse_grid(o["lr_grid"], "--lr-grid") if o["lr_grid"] is not None else default_lr
    clips = parse_grid(o["clip_grid"], "--clip-grid") if o["clip_grid"] is not None else default_clip
    space = SearchSpace({"lr": Grid(lrs, scale="log"), "clip": Grid(clips, scale="linear")})

    splits = load_dataset(o["dataset"], data_dir=o["data_dir"])
    n_train, n_val = len(splits.y_train), len(splits.y_val)
    model = o["model"] or default_model(o["dataset"])
    count_noise = noise * n_val if noise > 0 else None  # the mechanism's unit: counts (sensitivity 1)

    training = DPSGD(batch_size=o["batch_size"], epochs=o["epochs"], n_train=n_train, n_val=n_val,
                     score_noise=count_noise, secure_mode=o["secure_mode"])
    strategy = make_strategy(o["strategy"], C=C, c=c, tau=o["tau"], beta=o["beta"])
    objective = DPSGDObjective(o["dataset"], model, data_dir=o["data_dir"])  # trains under run.plan
    console = Console(stderr=True)
    started = time.perf_counter()
    pool = make_executor(o["executor"], workers=o["workers"], address=o["address"])
    columns = (SpinnerColumn(), TextColumn(progress_label(o["show_trials"])), TimeElapsedColumn())
    with pool, Progress(*columns, console=console, transient=True) as bar:
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
        "strategy": o["strategy"] + ("" if o["strategy"] == "uniform" else f" (τ={o['tau']:g}, β={o['beta']:g})"),
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
    C = DEFAULT_C if o["C"] is None else o["C"]
    c = DEFAULT_LOWER_C if o["c"] is None else o["c"]
    if o["runs"] == "binomial":
        raise ValueError("--runs binomial is for `dphypo account`/`calibrate` only; tune takes negbin, geometric, "
                         "logarithmic or poisson")
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
    out = Path(o["out"])
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out must be a directory for the released model, but {str(out)!r} is a file")
    if o["journal"] is not None and Path(o["journal"]).is_dir():
        raise ValueError(f"--journal must be a file, but {o['journal']!r} is a directory")
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
    if journal is not None and Path(journal).is_file():
        from dphypo.search.storage import SQLiteJournal

        with SQLiteJournal.open(journal) as opened:
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
                                  "model_path": None if model_path is None else str(model_path),
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

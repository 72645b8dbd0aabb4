"""``dphypo tune``: the main job — a private lr × clip search on a dataset, printing only the release."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from dphypo._cli_common import _report_table

#: Total ε of the default search.
DEFAULT_EPSILON = 8.0
#: Default E[T] when no run-count parameter is given.
DEFAULT_MEAN_RUNS = 20.0


def run_tune(**opts: Any) -> None:
    """Implementation of ``dphypo tune`` (options as parsed by the command)."""
    from dphypo.api import tune
    from dphypo.executors import make_executor
    from dphypo.privacy import make_run_count
    from dphypo.space import Grid, SearchSpace
    from dphypo.train import DPSGDObjective, default_model, load_dataset
    from dphypo.train.build import paper_grid, parse_grid

    o = dict(opts)
    if o["tune_fraction"] is None and o["variant"] != 1:
        raise ValueError("--variant needs --tune-fraction (it selects the final run of subsampled tuning)")
    if o["epsilon"] is None and o["sigma"] is None:
        o["epsilon"] = DEFAULT_EPSILON
    if o["gamma"] is None and o["mean"] is None and o["runs"] != "negbin":
        o["mean"] = DEFAULT_MEAN_RUNS
    runs = make_run_count(o["runs"], theta=o["theta"], gamma=o["gamma"], mean=o["mean"])
    if not (math.isfinite(o["score_noise"]) and o["score_noise"] >= 0):
        raise ValueError(f"score-noise must be a finite number >= 0, got {o['score_noise']!r}")
    default_lr, default_clip = paper_grid()
    lrs = parse_grid(o["lr_grid"]) if o["lr_grid"] else default_lr
    clips = parse_grid(o["clip_grid"]) if o["clip_grid"] else default_clip
    space = SearchSpace({"lr": Grid(lrs, scale="log"), "clip": Grid(clips, scale="linear")})

    splits = load_dataset(o["dataset"], data_dir=o["data_dir"])
    n_train, n_val = len(splits.y_train), len(splits.y_val)
    model = o["model"] or default_model(o["dataset"])
    count_noise = o["score_noise"] * n_val if o["score_noise"] > 0 else None

    console = Console(stderr=True)
    started = time.perf_counter()
    pool = make_executor(o["executor"], workers=o["workers"], address=o["address"])
    columns = (SpinnerColumn(), TextColumn("runs completed: {task.completed}"), TimeElapsedColumn())
    # Privacy rule 1: the display shows counts and time only, never scores, and no total (T is secret).
    with pool, Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("search", total=None)
        result = tune(
            DPSGDObjective(o["dataset"], model, data_dir=o["data_dir"]),  # trains under run.plan
            space,
            n_train=n_train,
            batch_size=o["batch_size"],
            epochs=o["epochs"],
            epsilon=o["epsilon"],
            sigma=o["sigma"],
            delta=o["delta"],
            score_noise=count_noise,
            n_val=n_val,
            runs=runs,
            strategy=o["strategy"],
            C=o["C"],
            c=o["c"],
            tau=o["tau"],
            beta=o["beta"],
            seed=o["seed"],
            progress=lambda done: bar.update(task, completed=done),
            tune_fraction=o["tune_fraction"],
            subsampled_variant=o["variant"],
            executor=pool,
            journal=o["journal"],
            runs_per_update=o["runs_per_update"],
        )
    elapsed = time.perf_counter() - started
    release = result.release
    out_dir = Path(o["out"])
    model_path, test_accuracy = None, None
    if release.artifact is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        model_path = out_dir / "released_model.pt"
        release.artifact.save(model_path)
        test_accuracy = release.artifact.test_accuracy(splits)
    subsampling = getattr(result, "subsampling", None)
    payload = _release_payload(release, o, model, test_accuracy, model_path)
    if subsampling is not None:
        payload["subsampled"] = subsampling.to_dict()
    if o["show_trials"]:  # the search's wall time reveals T roughly: curator-only, like T itself
        payload["NOT_PRIVATE_curator_only"] = {**_trials_payload(result.history), "search_seconds": round(elapsed, 1)}
    if model_path is not None:
        (out_dir / "release.json").write_text(json.dumps(_without_trials(payload), indent=2, sort_keys=True))
    if o["journal"] is not None:
        _journal_release_extras(o["journal"], test_accuracy, model_path)
    if o["as_json"]:
        typer.echo(json.dumps(payload, sort_keys=True))
        return
    out = Console()
    extra = {
        "dataset / model": f"{o['dataset']} / {model}",
        "strategy": o["strategy"] + ("" if o["strategy"] == "uniform" else f" (τ={o['tau']:g}, β={o['beta']:g})"),
        "released lr, clip": "-" if release.params is None else
        f"{release.params['lr']:.4g}, {release.params['clip']:.4g}",
        "released score (private val. acc.)": "-" if release.score is None else f"{release.score:.4f}",
        "test accuracy of released model": "-" if test_accuracy is None else f"{test_accuracy:.4f}",
        "σ (noise multiplier)": f"{release.plan.sigma:.4g}",
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


def _journal_release_extras(journal: str, test_accuracy: float | None, model_path: Path | None) -> None:
    """Add the released model's file and public test accuracy to the journal's release (``dphypo release``)."""
    from dphypo.storage import Journal

    with Journal.open(journal) as opened:
        release = opened.release()
        if release is not None:
            opened.write_release({**release, "test_accuracy": test_accuracy,
                                  "model_path": None if model_path is None else str(model_path)})


def _release_payload(release: Any, o: dict[str, Any], model: str, test_accuracy: float | None,
                     model_path: Path | None) -> dict[str, Any]:
    return {
        "release": {
            "params": release.params,
            "score": release.score,
            "test_accuracy": test_accuracy,
            "model_path": None if model_path is None else str(model_path),
        },
        "privacy": {**release.privacy.to_dict(), "sigma": release.plan.sigma,
                    "sample_rate": release.plan.sample_rate, "steps": release.plan.steps},
        "dataset": o["dataset"],
        "model": model,
        "strategy": o["strategy"],
    }


def _subsampled_rows(info: Any) -> dict[str, str]:
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


def _trials_payload(history: Any) -> dict[str, Any]:
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


def _print_trials(console: Console, history: Any) -> None:
    table = Table(title=f"NOT PRIVATE — curator only: T = {history.run_count} runs", title_style="bold red")
    for col in ("run", "lr", "clip", "score", "seconds"):
        table.add_column(col)
    for t in history.trials:
        table.add_row(str(t.number), f"{t.params['lr']:.4g}", f"{t.params['clip']:.4g}",
                      "failed" if t.failed else f"{t.score:.4f}", f"{t.seconds:.2f}")
    console.print(table)

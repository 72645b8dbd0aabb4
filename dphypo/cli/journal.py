"""``dphypo release FILE``: print the publishable part of a journaled search (and nothing else)."""

from __future__ import annotations

import json
import math
from typing import Annotated, Any

import typer
from rich.table import Table

from dphypo.cli.common import JsonOpt, _fmt, app, out_console


@app.command("release")
def release_command(
    journal: Annotated[
        str, typer.Argument(metavar="JOURNAL", help="Journal file of a search (dphypo tune --journal FILE).")
    ],
    as_json: JsonOpt = False,
) -> None:
    """Print only what may be published from a journaled search.

    That is the best run's hyperparameters, its private score and the accounted (ε, δ). The journal itself is
    curator-only (it holds T and every run's score).
    """
    from pathlib import Path

    from dphypo.search.storage import SQLiteJournal

    if not Path(journal).is_file():
        raise ValueError(f"journal must be an existing file, got {journal!r}")
    with SQLiteJournal.open(journal, read_only=True) as opened:  # a read-only command writes nothing
        payload = opened.release()
    if payload is None:
        raise ValueError(
            f"the search in {journal!r} has not finished, so there is nothing to release yet; resume it with "
            f"`dphypo tune --journal {journal}` and the same options"
        )
    _check_model_file(payload)
    if as_json:
        typer.echo(json.dumps(payload, sort_keys=True))
        return
    console = out_console()
    console.print(_release_table(payload, journal))
    console.print("[dim]Only this release may be published; the journal file itself is curator-only.[/]")


def _check_model_file(payload: dict[str, Any]) -> None:
    """Refuse to describe a model file that is not the released one (moved, deleted, or overwritten since)."""
    from pathlib import Path

    from dphypo.cli.tune import file_sha256

    path, expected = payload.get("model_path"), payload.get("model_sha256")
    if path is None or expected is None:
        return
    if not Path(path).is_file():
        raise ValueError(f"the released model file {path!r} is missing; this release cannot be shown without it")
    if file_sha256(Path(path)) != expected:
        raise ValueError(f"the model file {path!r} is not the released model any more (its SHA-256 differs from the "
                         "release's): another search or a person overwrote it")


def _release_table(payload: dict[str, Any], journal: str) -> Table:
    privacy = payload["privacy"]
    table = Table(title=f"Release of the private search in {journal}", show_header=False, title_justify="left")
    table.add_column("quantity", style="bold")
    table.add_column("value")
    table.add_row("total ε", f"[bold green]{_fmt(_number(payload['epsilon']))}[/]")
    table.add_row("δ", _fmt(payload["delta"]))
    params = payload.get("params")
    table.add_row("released hyperparameters", "- (no run: T = 0)" if params is None else
                  ", ".join(f"{k} = {_fmt(v) if isinstance(v, float) else v}" for k, v in params.items()))
    table.add_row("released score (private)", "-" if payload.get("score") is None else _fmt(payload["score"]))
    for key, label in (("test_accuracy", "test accuracy (public test split)"), ("model_path", "saved model")):
        if payload.get(key) is not None:
            table.add_row(label, str(payload[key]) if key == "model_path" else _fmt(payload[key]))
    staged = payload.get("two_stage")
    if isinstance(staged, dict):  # a two-stage search: what stage 1 released is part of the release
        table.add_row("design", str((staged.get("design") or {}).get("label")))
        table.add_row("method", f"{privacy.get('method')} (stage 1: {privacy.get('stage1_theorem')}; stage 2: "
                      f"{privacy.get('stage2_theorem')})")
        table.add_row("released by stage 1", f"{len(staged.get('released_probes') or [])} probe(s) with their noisy "
                      "scores (`--json` lists them)")
        if payload.get("max_lost"):
            table.add_row("lost attempts charged up front (max, per stage)", str(payload["max_lost"]))
    else:
        table.add_row("method", f"{privacy.get('method')} ({privacy.get('theorem')})")
    if privacy.get("charged_runs"):
        table.add_row("lost attempts charged up front (max)", str(privacy["charged_runs"]))
    plan = payload.get("plan")
    if isinstance(plan, dict) and "sigma" in plan:
        table.add_row("DP-SGD plan", ", ".join(f"{k} = {_fmt(plan[k]) if isinstance(plan[k], float) else plan[k]}"
                                              for k in ("sigma", "sample_rate", "steps", "score_noise") if k in plan))
    return table


def _number(x: Any) -> float:
    return math.nan if x is None else float(x)

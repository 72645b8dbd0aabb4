"""Utility vs compute of a plan at its fixed total ε: every simulated configuration and the Pareto front.

The data come from a ``dphypo plan --json`` output (:meth:`dphypo.simulation.planner.PlanResult.to_dict`): one point
per simulated configuration at (expected compute, mean released value) with its 95 % interval, coloured by search
design, hollow when over the plan's compute budget; the front (no cheaper configuration matches its mean) is joined
by a step line and the budget is a vertical line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from matplotlib.figure import Figure

from dphypo.visualization._common import new_figure, save_figure

__all__ = ["ParetoInfo", "pareto_info", "plot_pareto", "plot_pareto_json"]

_DESIGN_COLORS = {"uniform": "#4c72b0", "dp-hypo": "#c44e52"}
_OTHER_COLOR = "#55a868"  # designs added later (e.g. two-stage) until they get their own colour


class ParetoInfo(NamedTuple):
    """What :func:`plot_pareto` draws; arrays have shape ``(k,)``, one entry per simulated configuration.

    Attributes:
        names: Configuration names (``"uniform, E[T]=20"``), in the plan's row order.
        designs: Search design of each (``"uniform"``, ``"dp-hypo"``, ...).
        compute: Expected compute, in ``unit``.
        means: Mean true value of the released point.
        ci_low: Lower end of its 95 % interval (``nan`` when unknown).
        ci_high: Upper end.
        within_budget: Whether each fits the plan's compute budget.
        on_front: Whether each is on the Pareto front.
        epsilon: The plan's total ε.
        unit: ``"s"`` (seconds of expected training) or ``"runs"`` (no cost per run known).
        budget: The compute budget in ``unit`` (seconds budget, or the max mean runs in runs), or ``None``.
    """

    names: tuple[str, ...]
    designs: tuple[str, ...]
    compute: np.ndarray
    means: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    within_budget: np.ndarray
    on_front: np.ndarray
    epsilon: float
    unit: str
    budget: float | None


def pareto_info(plan: Mapping[str, Any]) -> ParetoInfo:
    """Extract the utility-vs-compute points of a plan.

    Args:
        plan: A ``dphypo plan --json`` payload (:meth:`~dphypo.simulation.planner.PlanResult.to_dict`).

    Returns:
        The info (simulated rows only).

    Raises:
        ValueError: Not a plan payload, or no simulated row.
    """
    rows = plan.get("rows") if isinstance(plan, Mapping) else None
    if not isinstance(rows, list) or "pareto_front" not in plan or "compute" not in plan:
        raise ValueError("plan must be the output of `dphypo plan --json` (rows, compute and pareto_front)")
    simulated = [r for r in rows if r.get("status") == "ok" and r.get("mean") is not None]
    if not simulated:
        raise ValueError("plan has no simulated configuration to draw")
    compute = plan["compute"]
    seconds = [r.get("expected_compute") for r in simulated]
    in_seconds = all(s is not None for s in seconds)
    values = seconds if in_seconds else [r["expected_runs"] for r in simulated]
    budget = compute.get("budget_seconds") if in_seconds else compute.get("max_mean_runs")
    front = {entry["name"] for entry in plan["pareto_front"]}
    ci = np.array([r.get("ci95") or [None, None] for r in simulated], dtype=np.float64)
    return ParetoInfo(
        names=tuple(r["name"] for r in simulated), designs=tuple(r.get("design", "uniform") for r in simulated),
        compute=np.asarray(values, dtype=np.float64), means=np.array([r["mean"] for r in simulated], dtype=np.float64),
        ci_low=ci[:, 0], ci_high=ci[:, 1],
        within_budget=np.array([bool(r.get("within_budget", True)) for r in simulated]),
        on_front=np.array([r["name"] in front for r in simulated]), epsilon=float(plan["epsilon"]),
        unit="s" if in_seconds else "runs", budget=None if budget is None else float(budget),
    )


def plot_pareto(info: ParetoInfo) -> Figure:
    """Mean released value against expected compute (log scale), per design; the front as a step line.

    Args:
        info: From :func:`pareto_info`.

    Returns:
        The figure.
    """
    fig = new_figure((6.4, 4.4))
    ax = fig.subplots()
    for design in dict.fromkeys(info.designs):
        mine = np.array([d == design for d in info.designs])
        color = _DESIGN_COLORS.get(design, _OTHER_COLOR)
        err = np.abs(np.vstack([info.means - info.ci_low, info.ci_high - info.means]))[:, mine]
        ax.errorbar(info.compute[mine], info.means[mine], yerr=np.nan_to_num(err), fmt="none", ecolor=color,
                    alpha=0.4, capsize=2)
        for within, face in ((True, color), (False, "none")):  # hollow markers: over the compute budget
            chosen = mine & (info.within_budget == within)
            if np.any(chosen):
                ax.scatter(info.compute[chosen], info.means[chosen], facecolors=face, edgecolors=color, zorder=3,
                           label=design if within or not np.any(mine & info.within_budget) else None)
    order = np.argsort(info.compute[info.on_front], kind="stable")
    ax.step(info.compute[info.on_front][order], info.means[info.on_front][order], where="post", color="black",
            linewidth=1.0, label="Pareto front")
    if info.budget is not None:
        ax.axvline(info.budget, color="grey", linestyle="--", linewidth=1.0, label="compute budget")
    ax.set_xscale("log")
    ax.set_xlabel("expected compute (seconds of training)" if info.unit == "s" else "expected runs E[T]")
    ax.set_ylabel("mean true value of the released point")
    ax.set_title(f"Utility vs compute at total ε = {info.epsilon:g} (hollow: over budget)", fontsize="medium")
    ax.legend(fontsize="small", loc="lower right")
    ax.grid(True, alpha=0.3)
    return fig


def plot_pareto_json(path: str | os.PathLike[str], out: str | os.PathLike[str]) -> Path:
    """``dphypo plot pareto --from plan.json``: the figure of a saved ``dphypo plan --json`` output.

    Args:
        path: The plan's JSON file.
        out: Output ``.png`` or ``.svg``.

    Returns:
        The path written.
    """
    try:
        plan = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"plan file {str(path)!r} could not be read as JSON ({err})") from None
    return save_figure(plot_pareto(pareto_info(plan)), out)

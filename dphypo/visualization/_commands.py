"""One function per ``dphypo plot ...`` subcommand: build the inputs, draw, save; returns the path written."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dphypo.privacy import PrivacyReport, RdpCurve, RepeatAndSelect, RunCountDistribution, account
from dphypo.privacy.profiles import PrivacyProfile, ProfileSkipped
from dphypo.privacy.validation import check_positive_int, is_integer
from dphypo.simulation.synthetic import resolve_landscape
from dphypo.strategies import Strategy
from dphypo.visualization._accuracy import plot_accuracy_vs_T
from dphypo.visualization._common import save_figure
from dphypo.visualization._density import plot_density_snapshots
from dphypo.visualization._epsilon import plot_epsilon_breakdown
from dphypo.visualization._landscape import plot_landscape, plot_marginals

__all__ = [
    "epsilon_breakdown_reports",
    "plot_accuracy_vs_T_json",
    "plot_accuracy_vs_T_simulated",
    "plot_density_run",
    "plot_epsilon_breakdown_bounds",
    "plot_landscape_file",
    "plot_marginals_file",
]

PathLike = str | os.PathLike[str]


def plot_landscape_file(landscape: PathLike, out: PathLike, axes: Sequence[str] | None = None) -> Path:
    """``dphypo plot landscape``: mean/std heatmaps of a landscape file or ``synthetic:<name>``.

    Args:
        landscape: A landscape ``.npz`` path or ``synthetic:smooth|ridge|multimodal``.
        out: Output ``.png`` or ``.svg``.
        axes: The two axes to draw; an N-D landscape is sliced through its best grid point (default: the first
            two axes).

    Returns:
        The path written.
    """
    return save_figure(plot_landscape(resolve_landscape(landscape), axes), out)


def plot_marginals_file(landscape: PathLike, out: PathLike) -> Path:
    """``dphypo plot marginals``: per axis, the best and average mean over the other axes.

    Args:
        landscape: A landscape ``.npz`` path or ``synthetic:smooth|ridge|multimodal``.
        out: Output ``.png`` or ``.svg``.

    Returns:
        The path written.
    """
    return save_figure(plot_marginals(resolve_landscape(landscape)), out)


def plot_accuracy_vs_T_simulated(
    landscape: PathLike,
    out: PathLike,
    strategies: Sequence[Strategy],
    Ts: Sequence[int],
    *,
    repeats: int = 100,
    C: float = 2.0,
    c: float = 0.75,
    seed: int = 0,
    workers: int | None = None,
) -> Path:
    """``dphypo plot accuracy``: simulate every strategy at every fixed T, plot value vs T (research mode).

    Args:
        landscape: A landscape ``.npz`` path or ``synthetic:<name>``.
        out: Output ``.png`` or ``.svg``.
        strategies: Strategies to compare (e.g. ``Uniform()``, ``GPUCB()``); names must be distinct.
        Ts: Fixed numbers of runs, each ≥ 1.
        repeats: Simulated searches per (strategy, T).
        C: Upper density-ratio bound.
        c: Lower density-ratio bound.
        seed: Study seed (the same for every T).
        workers: Processes for :func:`dphypo.simulation.simulate.simulate`.

    Returns:
        The path written.
    """
    from dphypo.simulation.simulate import simulate

    names = [s.name for s in strategies]
    if not names or len(set(names)) != len(names):
        raise ValueError(f"strategies must be non-empty with distinct names, got {names}")
    if not Ts or not all(is_integer(T) and int(T) >= 1 for T in Ts):
        raise ValueError(f"Ts must be positive integers, got {list(Ts)!r}")
    land = resolve_landscape(landscape)
    results = [arm for T in sorted(set(Ts)) for arm in simulate(land, strategies, repeats=repeats, T=T, C=C,
                                                                    c=c, seed=seed, workers=workers)]
    return save_figure(plot_accuracy_vs_T(results, land.best_value), out)


@dataclass(frozen=True)
class _ArmRecord:
    """An arm as ``dphypo simulate --json`` stores it (no per-repeat values)."""

    strategy: str
    T: int | None
    mean: float
    ci95: tuple[float, float]
    repeats: int


def _read_simulation(path: PathLike) -> dict[str, Any]:
    try:
        payload = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"simulation file {str(path)!r} could not be read as JSON ({err})") from None
    if not isinstance(payload, dict) or not isinstance(payload.get("results"), list):
        raise ValueError(f"simulation file {str(path)!r} must be the output of `dphypo simulate --json`")
    return payload


def plot_accuracy_vs_T_json(paths: Sequence[PathLike], out: PathLike) -> Path:
    """``dphypo plot accuracy --from a.json ...``: value vs T from saved ``dphypo simulate --json`` outputs.

    GP curves from files with different (C, c) are labelled with their bounds so they stay apart; an arm
    repeated exactly in several files (e.g. the same uniform search saved with each C) is drawn once.

    Args:
        paths: Outputs of ``dphypo simulate --json`` on one landscape, typically one per fixed T.
        out: Output ``.png`` or ``.svg``.

    Returns:
        The path written.
    """
    arms, labels, best_value = _simulation_arms(paths)
    return save_figure(plot_accuracy_vs_T(arms, best_value, labels=labels), out)


def _simulation_arms(paths: Sequence[PathLike]) -> tuple[list[_ArmRecord], list[str], float | None]:
    """Arms, curve labels and the landscape's best value from ``dphypo simulate --json`` files."""
    payloads = [_read_simulation(p) for p in paths]
    if not payloads:
        raise ValueError("paths must name at least one simulation file, got none")
    best = {p.get("best_value") for p in payloads}
    if len(best) != 1:
        raise ValueError(f"simulation files must come from one landscape, got best values {sorted(best, key=repr)}")
    several_bounds = len({(p.get("C"), p.get("c")) for p in payloads}) > 1
    arms: list[_ArmRecord] = []
    labels: list[str] = []
    seen: set[str] = set()
    for p in payloads:
        for r in p["results"]:
            low, high = (math.nan if v is None else float(v) for v in r["ci95"][:2])  # JSON null: nan
            arm = _ArmRecord(r["strategy"], r["T"], float(r["mean"]), (low, high), int(r["repeats"]))
            adaptive = several_bounds and r["strategy"] != "uniform"
            label = f"{r['strategy']} (C={p['C']:g}, c={p['c']:g})" if adaptive else r["strategy"]
            key = repr((label, arm))  # repr, not ==: a single-repeat arm's interval is nan
            if key not in seen:
                seen.add(key)
                arms.append(arm)
                labels.append(label)
    best_value = best.pop()
    return arms, labels, None if best_value is None else float(best_value)


def plot_density_run(
    landscape: PathLike,
    out: PathLike,
    *,
    strategy: Strategy | None = None,
    runs: int = 20,
    C: float = 2.0,
    c: float = 0.75,
    seed: int = 0,
    steps: Sequence[int] | None = None,
) -> Path:
    """``dphypo plot density``: one simulated search with a fixed number of runs, its densities drawn.

    Research mode (T fixed, every density recorded): the figure is curator-only, like the history.

    Args:
        landscape: A landscape ``.npz`` path or ``synthetic:<name>`` (its grid is the space).
        out: Output ``.png`` or ``.svg``.
        strategy: Sampling strategy (default :class:`~dphypo.strategies.gpucb.GPUCB` with its defaults).
        runs: Fixed number of runs T ≥ 1.
        C: Upper density-ratio bound.
        c: Lower density-ratio bound.
        seed: Seed of the landscape noise, the sampling and the strategy.
        steps: Update steps to draw (default 4 evenly spaced).

    Returns:
        The path written.
    """
    from dphypo.search.loop import best_trial
    from dphypo.search.run import SearchRun, SearchStreams
    from dphypo.search.tuner import SearchHistory
    from dphypo.strategies import GPUCB

    check_positive_int("runs", runs)
    land = resolve_landscape(landscape)
    space = land.space
    noise, sampling, strategy_stream = (np.random.SeedSequence(seed, spawn_key=(k,)) for k in range(3))
    streams = SearchStreams(np.random.default_rng(sampling), int(strategy_stream.generate_state(1)[0]), lambda j: j)
    trace = SearchRun(land.objective(np.random.default_rng(noise)), space,
                      strategy if strategy is not None else GPUCB(), land.direction,  # type: ignore[arg-type]
                      (C, c), runs, streams, record_densities=True).run()
    trials, densities, events = trace.trials, trace.densities, trace.events
    history = SearchHistory(runs, tuple(trials), best_trial(trials, land.direction),  # type: ignore[arg-type]
                            tuple(densities), tuple(events), seed)
    return save_figure(plot_density_snapshots(history, space, steps, C, c), out)


def bounds_label(C: float, c: float) -> str:
    """Bar label of a configuration: ``uniform`` for C = c = 1, else ``C=2`` over ``c=0.75`` (two lines)."""
    return "uniform" if C == c == 1 else f"C={C:.3g}\nc={c:.3g}"


def epsilon_breakdown_reports(
    base: RdpCurve,
    run_count: RunCountDistribution,
    bounds: Sequence[tuple[float, float]],
    delta: float,
    *,
    profile: PrivacyProfile | ProfileSkipped | None = None,
) -> list[tuple[str, PrivacyReport]]:
    """The accounting behind ``dphypo plot epsilon``: one :func:`~dphypo.privacy.account` report per (C, c).

    Each bar is exactly what ``dphypo account`` reports for that search: the minimum over every valid bound
    (with ``profile``, the privacy-profile bounds of a uniform search too) and, for every bar, ε of one run =
    min(RDP, profile) of that run, so the "one run" segment is the same in every bar.

    Args:
        base: Per-run RDP curve.
        run_count: Distribution of T.
        bounds: ``(C, c)`` per bar.
        delta: δ ∈ (0, 1) of every bar.
        profile: Privacy profile of one run (e.g. :func:`~dphypo.privacy.profiles.dpsgd_profile_or_skip`), or
            ``None`` for RDP only.

    Returns:
        ``(bar label, report)`` pairs.
    """
    if not bounds:
        raise ValueError("bounds must hold at least one (C, c) pair, got none")
    return [(bounds_label(C, c), account(base, RepeatAndSelect(run_count, C, c), delta, profile=profile))
            for C, c in bounds]


def plot_epsilon_breakdown_bounds(
    base: RdpCurve,
    run_count: RunCountDistribution,
    bounds: Sequence[tuple[float, float]],
    delta: float,
    out: PathLike,
    *,
    profile: PrivacyProfile | ProfileSkipped | None = None,
) -> Path:
    """``dphypo plot epsilon``: total-ε breakdown for one base mechanism and T, at several (C, c).

    Every bar is the bound ``dphypo account`` reports (:func:`epsilon_breakdown_reports`), labelled with the
    method that gave it.

    Args:
        base: Per-run RDP curve (e.g. ``dpsgd_rdp(σ, q, steps)``).
        run_count: Distribution of T (TNB family; adaptive Poisson has no theorem and raises).
        bounds: ``(C, c)`` per bar, e.g. ``[(1, 1), (1.25, 0.8), (1.33, 0.75), (1.5, 2/3), (2, 0.75)]``.
        delta: δ ∈ (0, 1) of every bar.
        out: Output ``.png`` or ``.svg``.
        profile: Privacy profile of one run (the same mechanism as ``base``), as ``dphypo account`` builds it.

    Returns:
        The path written.
    """
    reports = epsilon_breakdown_reports(base, run_count, bounds, delta, profile=profile)
    return save_figure(plot_epsilon_breakdown(reports), out)

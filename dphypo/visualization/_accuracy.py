"""Value of the released λ against a fixed number of runs T, with 95 % intervals (DP-HyPO Fig. 1 style)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple, Protocol

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

from dphypo.visualization._common import new_figure, tick_label

__all__ = ["AccuracyVsTInfo", "ArmSummary", "StrategyCurve", "accuracy_vs_T_info", "plot_accuracy_vs_T"]

#: A log T axis once the largest T is at least this multiple of the smallest.
_LOG_T_RATIO = 8.0


class ArmSummary(Protocol):
    """What the plot reads from a simulation arm (:class:`dphypo.simulation.simulate.ArmResult` satisfies it)."""

    # Read-only members: frozen dataclasses (ArmResult) and plain records both satisfy them.
    @property
    def strategy(self) -> str: ...
    @property
    def T(self) -> int | None: ...
    @property
    def mean(self) -> float: ...
    @property
    def ci95(self) -> tuple[float, float]: ...
    @property
    def repeats(self) -> int: ...


class StrategyCurve(NamedTuple):
    """One line of the plot: a strategy's mean released value per T, sorted by T.

    Attributes:
        label: Legend label (the strategy name unless relabelled).
        T: Fixed numbers of runs, shape ``(k,)``, strictly increasing.
        mean: Mean true value of the released λ, shape ``(k,)``.
        lower: Lower end of the 95 % interval, shape ``(k,)`` (``nan`` for a single repeat).
        upper: Upper end, shape ``(k,)``.
        repeats: Searches behind each mean, shape ``(k,)``.
    """

    label: str
    T: np.ndarray
    mean: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    repeats: np.ndarray


class AccuracyVsTInfo(NamedTuple):
    """What :func:`plot_accuracy_vs_T` draws.

    Attributes:
        curves: One curve per label, in order of first appearance in the input.
        best_value: The landscape's best mean (dashed reference line), or ``None``.
        log_T: Whether the T axis is log-scaled (T spans a factor of 8 or more).
    """

    curves: tuple[StrategyCurve, ...]
    best_value: float | None
    log_T: bool


def accuracy_vs_T_info(
    results: Sequence[ArmSummary],
    best_value: float | None = None,
    labels: Sequence[str] | None = None,
) -> AccuracyVsTInfo:
    """Group simulation arms by strategy (or label) and sort each group by T.

    Args:
        results: Arms from :func:`dphypo.simulation.simulate.simulate` run at several fixed T (each must have
            ``T`` set).
        best_value: The landscape's best mean, drawn as a reference line.
        labels: Curve label per result (same length), e.g. to tell GP runs with different C apart;
            default the strategy names.

    Returns:
        The info.
    """
    results = list(results)
    if not results:
        raise ValueError("results must hold at least one ArmResult, got none")
    if labels is None:
        labels = [r.strategy for r in results]
    elif len(labels) != len(results):
        raise ValueError(f"labels must give one label per result ({len(results)}), got {len(labels)}")
    if best_value is not None and not math.isfinite(best_value):
        raise ValueError(f"best_value must be finite or None, got {best_value!r}")
    groups: dict[str, list[tuple[int, ArmSummary]]] = {}  # (fixed T, arm) per label
    for label, result in zip(labels, results, strict=True):
        if result.T is None:
            drawn = getattr(result, "run_count", None)
            raise ValueError(f"every result needs a fixed T, got T=None for {label!r} (T drawn from "
                             f"{drawn!r}); simulate with T=... at several values instead")
        groups.setdefault(str(label), []).append((int(result.T), result))
    curves = tuple(_curve(label, arms) for label, arms in groups.items())
    all_T = np.concatenate([c.T for c in curves])
    return AccuracyVsTInfo(curves, None if best_value is None else float(best_value),
                           bool(all_T.max() >= _LOG_T_RATIO * all_T.min()))


def _curve(label: str, arms_by_T: list[tuple[int, ArmSummary]]) -> StrategyCurve:
    ordered = sorted(arms_by_T, key=lambda pair: pair[0])
    T = np.array([t for t, _ in ordered])
    arms = [arm for _, arm in ordered]
    if np.any(np.diff(T) == 0):
        repeated = T[:-1][np.diff(T) == 0].tolist()
        raise ValueError(f"results must hold one arm per (label, T); {label!r} repeats T={repeated}")
    mean = np.array([float(r.mean) for r in arms])
    lower = np.array([float(r.ci95[0]) for r in arms])
    upper = np.array([float(r.ci95[1]) for r in arms])
    if not np.all(np.isfinite(mean)):
        raise ValueError(f"results of {label!r} must have finite means, got {mean.tolist()}")
    bad = np.isfinite(lower) & np.isfinite(upper) & ~((lower <= mean) & (mean <= upper))
    if np.any(bad):
        raise ValueError(f"ci95 must contain the mean; {label!r} violates it at T={T[bad].tolist()}")
    return StrategyCurve(label, T, mean, lower, upper, np.array([int(r.repeats) for r in arms]))


def _legend_label(curve: StrategyCurve) -> str:
    low, high = int(curve.repeats.min()), int(curve.repeats.max())
    return f"{curve.label}; {low if low == high else f'{low}–{high}'} searches per T"


def plot_accuracy_vs_T(
    results: Sequence[ArmSummary],
    best_value: float | None = None,
    *,
    labels: Sequence[str] | None = None,
    ylabel: str = "true value of the released λ",
) -> Figure:
    """Mean released value against T per strategy, 95 % intervals shaded, the grid's best dashed.

    Args:
        results: Simulation arms at several fixed T (see :func:`accuracy_vs_T_info`).
        best_value: The landscape's best mean, or ``None``.
        labels: Curve label per result; default the strategy names.
        ylabel: Label of the value axis.

    Returns:
        The figure.
    """
    return plot_accuracy_vs_T_info(accuracy_vs_T_info(results, best_value, labels), ylabel=ylabel)


def plot_accuracy_vs_T_info(info: AccuracyVsTInfo, *, ylabel: str = "true value of the released λ") -> Figure:
    """Render an :class:`AccuracyVsTInfo` (see :func:`plot_accuracy_vs_T`)."""
    fig = new_figure((6.4, 4.4))
    ax = fig.subplots()
    for curve in info.curves:
        (line,) = ax.plot(curve.T, curve.mean, marker="o", markersize=4, label=_legend_label(curve))
        ax.fill_between(curve.T, curve.lower, curve.upper, color=line.get_color(), alpha=0.2, linewidth=0)
    if info.best_value is not None:
        ax.axhline(info.best_value, color="black", linestyle="--", linewidth=1,
                   label=f"best on grid ({info.best_value:.4g})")
    all_T = np.unique(np.concatenate([c.T for c in info.curves]))
    if info.log_T:
        ax.set_xscale("log")
    # Tick exactly the simulated T values: they are the design points, and few.
    ax.xaxis.set_major_locator(FixedLocator(all_T[:: math.ceil(all_T.size / 12)].tolist()))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: tick_label(v)))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("number of runs T (fixed)")
    ax.set_ylabel(ylabel)
    ax.set_title("mean over simulated searches, 95 % CI shaded", fontsize="medium")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    return fig

"""Stacked bars of a search's total ε: one run, + random repetition, + adaptivity (per configuration).

Each total is the report's ε, i.e. the smallest valid bound that :func:`~dphypo.privacy.account` found (what
``dphypo account`` prints); the method that gave it is written under the total on each bar.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from matplotlib.figure import Figure

from dphypo.privacy import PrivacyReport
from dphypo.visualization._common import new_figure

__all__ = ["EpsilonBreakdownInfo", "epsilon_breakdown_info", "plot_epsilon_breakdown"]

# Tolerated mismatch between total ε and the sum of its parts (they are differences of one pipeline).
_SUM_RTOL = 1e-9
_SEGMENTS = (("base", "one run", "#4c72b0"), ("repetition", "+ random repetition (T)", "#dd8452"),
             ("adaptivity", "+ adaptivity (C/c)", "#c44e52"))


class EpsilonBreakdownInfo(NamedTuple):
    """What :func:`plot_epsilon_breakdown` draws; arrays have shape ``(k,)``, one entry per configuration.

    Attributes:
        labels: Configuration labels, in input order.
        base: ε of one candidate run (``PrivacyReport.base_epsilon``).
        repetition: What the random number of runs adds.
        adaptivity: What adaptivity adds (0 for a uniform search).
        total: Total ε (= base + repetition + adaptivity).
        delta: The common δ of all reports.
        run_counts: Distribution of T per configuration, e.g. ``'geometric, E[T] = 20'``.
        methods: The method that gave each total (``PrivacyReport.method``, e.g. ``'profile-tnb'``, ``'rdp'``).
    """

    labels: tuple[str, ...]
    base: np.ndarray
    repetition: np.ndarray
    adaptivity: np.ndarray
    total: np.ndarray
    delta: float
    run_counts: tuple[str, ...]
    methods: tuple[str, ...] = ()


def _run_count_text(report: PrivacyReport) -> str:
    return f"{report.search.run_count.name}, E[T] = {report.expected_runs:.3g}"


def epsilon_breakdown_info(reports: Sequence[tuple[str, PrivacyReport]]) -> EpsilonBreakdownInfo:
    """Extract the ε breakdown of several accounted configurations.

    Args:
        reports: ``(label, report)`` pairs, e.g. ``("uniform", ...), ("GP C=2", ...)``; all at the same δ
            so the bars are comparable.

    Returns:
        The info.
    """
    reports = list(reports)
    if not reports:
        raise ValueError("reports must hold at least one (label, PrivacyReport) pair, got none")
    for item in reports:
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], PrivacyReport)):
            raise TypeError(f"reports must be (label, PrivacyReport) pairs, got {item!r}")
    labels = tuple(str(label) for label, _ in reports)
    deltas = sorted({r.delta for _, r in reports})
    if len(deltas) > 1:
        raise ValueError(f"reports must share one delta to be compared, got deltas {deltas}")
    parts = np.array([[r.base_epsilon, r.repetition_epsilon, r.adaptivity_epsilon, r.epsilon]
                      for _, r in reports], dtype=np.float64)
    if not np.all(np.isfinite(parts)):
        bad = [labels[k] for k in np.flatnonzero(~np.all(np.isfinite(parts), axis=1))]
        raise ValueError(f"reports must have finite ε parts to be drawn, got non-finite ones for {bad}")
    base, repetition, adaptivity, total = parts.T
    if np.any(parts[:, :3] < -_SUM_RTOL * np.maximum(total, 1.0)[:, None]):
        raise ValueError("reports must have non-negative ε parts (a stacked bar cannot show a negative part)")
    if not np.allclose(base + repetition + adaptivity, total, rtol=_SUM_RTOL, atol=0.0):
        raise ValueError("every report's total ε must equal base + repetition + adaptivity")
    run_counts = tuple(_run_count_text(r) for _, r in reports)
    methods = tuple(r.method for _, r in reports)
    return EpsilonBreakdownInfo(labels, base, repetition, adaptivity, total, float(deltas[0]), run_counts, methods)


def plot_epsilon_breakdown(reports: Sequence[tuple[str, PrivacyReport]]) -> Figure:
    """One stacked bar per configuration: ε of one run, + random repetition, + adaptivity.

    Totals on top, each labelled with the method that gave it (the smallest valid bound, as ``dphypo account``
    reports).

    Args:
        reports: ``(label, report)`` pairs at a common δ.

    Returns:
        The figure.
    """
    return plot_epsilon_breakdown_info(epsilon_breakdown_info(reports))


def plot_epsilon_breakdown_info(info: EpsilonBreakdownInfo) -> Figure:
    """Render an :class:`EpsilonBreakdownInfo` (see :func:`plot_epsilon_breakdown`)."""
    k = len(info.labels)
    fig = new_figure((max(4.8, 1.1 * k + 2.6), 4.4))
    ax = fig.subplots()
    x = np.arange(k)
    bottom = np.zeros(k)
    for field, label, color in _SEGMENTS:
        height = np.maximum(getattr(info, field), 0.0)
        if field == "adaptivity" and not np.any(height > 0):
            continue  # all uniform: no empty legend entry
        ax.bar(x, height, bottom=bottom, width=0.6, color=color, label=label)
        bottom += height
    methods = info.methods or ("",) * k
    for xi, total, method in zip(x, info.total, methods, strict=True):
        text = f"{total:.3g}\n{method}" if method else f"{total:.3g}"
        ax.annotate(text, (xi, total), xytext=(0, 3), textcoords="offset points", ha="center",
                    va="bottom", fontsize="small", linespacing=1.0)
    longest = max(len(line) for label in info.labels for line in label.splitlines() or [""])
    if longest > 12:  # long one-line labels would run into each other
        ax.set_xticks(x, info.labels, rotation=20, ha="right", rotation_mode="anchor")
    else:
        ax.set_xticks(x, info.labels)
    top = float(info.total.max())
    ax.set_ylim(0, 1.25 * top if top > 0 else 1.0)  # headroom for the total and method labels
    delta = "0 (pure DP)" if info.delta == 0 else f"{info.delta:g}"
    ax.set_ylabel(f"total ε at δ = {delta} (smallest valid bound)")
    shared = f"; T ~ {info.run_counts[0]}" if len(set(info.run_counts)) == 1 else ""
    ax.set_title(f"ε of the whole search, by source{shared}", fontsize="medium")
    ax.legend(fontsize="small", loc="upper left", reverse=True)  # same top-to-bottom order as the stack
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    return fig

"""Landscape heatmaps (DP-HyPO Figs. 2/3 style) and, for N-D grids, 2-D slices and 1-D marginals.

A landscape with more than two axes is drawn as its 2-D slice through the best grid point (the other axes fixed at
the best point's values, :meth:`~dphypo.simulation.landscapes.Landscape.slice`), and its marginals show, per axis and
value, the best and the average mean over every other axis.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from dphypo.simulation.landscapes import Landscape
from dphypo.visualization._common import GridAxis, check_2d, format_grid_axis, new_figure

__all__ = ["LandscapeInfo", "MarginalInfo", "landscape_info", "marginals_info", "plot_landscape", "plot_marginals"]


class LandscapeInfo(NamedTuple):
    """What a landscape heatmap draws; arrays are oriented for drawing (rows = y, columns = x).

    Attributes:
        x: Horizontal axis (the landscape's first axis, e.g. ``lr``), ``nx`` values.
        y: Vertical axis (the second axis, e.g. ``clip``), ``ny`` values.
        mean: Mean score, shape ``(ny, nx)``: ``mean[j, i] = landscape.mean[i, j]``.
        std: Score standard deviation, shape ``(ny, nx)``.
        best: ``(x value, y value)`` of the best grid point in the landscape's direction.
        best_value: Its mean score.
        direction: ``'maximize'`` or ``'minimize'``.
        title: Figure title built from the metadata (dataset, model, σ).
    """

    x: GridAxis
    y: GridAxis
    mean: np.ndarray
    std: np.ndarray
    best: tuple[float, float]
    best_value: float
    direction: str
    title: str


def landscape_title(metadata: dict) -> str:
    """A one-line title from a landscape's metadata: ``dataset · model · σ = 1.2226`` (or the generator).

    Args:
        metadata: The landscape's JSON metadata.

    Returns:
        The title; ``'landscape'`` if the metadata names none of these.
    """
    parts = [str(metadata[k]) for k in ("dataset", "model") if metadata.get(k) not in (None, "")]
    if metadata.get("sigma") is not None:
        parts.append(f"σ = {metadata['sigma']:g}" if isinstance(metadata["sigma"], int | float)
                     else f"σ = {metadata['sigma']}")
    if not parts and metadata.get("synthetic"):
        generator = str(metadata.get("generator", "")).rsplit(".", 1)[-1]
        parts.append(f"synthetic ({generator})" if generator else "synthetic")
    if "std_replaced" in metadata:
        parts.append("std replaced")
    return " · ".join(parts) or "landscape"


def _two_d(landscape: Landscape, axes: Sequence[str] | None) -> Landscape:
    """``landscape`` itself (2-D, no ``axes``), or its slice over ``axes`` (default: the first two) through the best."""
    if not isinstance(landscape, Landscape):
        raise TypeError(f"landscape must be a Landscape, got {type(landscape).__name__}")
    if axes is None and len(landscape.shape) == 2:
        return landscape
    keep = tuple(axes) if axes is not None else landscape.axis_names[:2]
    if len(keep) != 2:
        raise ValueError(f"axes must name the 2 axes of the heatmap, got {list(keep)}")
    return landscape.slice(keep)


def landscape_info(landscape: Landscape, axes: Sequence[str] | None = None) -> LandscapeInfo:
    """Extract and validate what :func:`plot_landscape` draws.

    Args:
        landscape: A landscape; with more than 2 axes its slice through the best grid point is drawn.
        axes: The two axes to draw (horizontal, vertical); default: the first two.

    Returns:
        The info; the first axis is drawn horizontally, and the title names the fixed axes' values.
    """
    landscape = _two_d(landscape, axes)
    check_2d(landscape.shape, "landscape")
    x, y = (GridAxis(n, np.asarray(v), s) for n, v, s in
            zip(landscape.axis_names, landscape.axis_values, landscape.axis_scales, strict=True))
    i, j = np.unravel_index(landscape.best_index, landscape.shape)
    return LandscapeInfo(
        x=x,
        y=y,
        mean=np.asarray(landscape.mean).T,
        std=np.asarray(landscape.std).T,
        best=(float(x.values[i]), float(y.values[j])),
        best_value=landscape.best_value,
        direction=landscape.direction,
        title=_sliced_title(landscape.metadata),
    )


def _sliced_title(metadata: dict) -> str:
    """The landscape title, plus the values a slice fixed (``· slice at batch=64, epochs=10``)."""
    fixed = metadata.get("slice") or {}
    where = ", ".join(f"{name}={value:g}" for name, value in fixed.items())
    return landscape_title(metadata) + (f" · slice at {where}" if where else "")


def _heatmap(fig: Figure, ax: Axes, info: LandscapeInfo, values: np.ndarray, cmap: str, label: str) -> None:
    mesh = ax.pcolormesh(info.x.edges, info.y.edges, values, cmap=cmap, shading="flat")
    fig.colorbar(mesh, ax=ax, label=label, shrink=0.95)
    format_grid_axis(ax, info.x, "x")
    format_grid_axis(ax, info.y, "y")
    ax.plot(*info.best, marker="*", markersize=15, color="white", markeredgecolor="black", linestyle="none")


def plot_landscape(landscape: Landscape, axes: Sequence[str] | None = None) -> Figure:
    """Two heatmaps of a landscape: mean score and its std, with the best grid point starred.

    The colour maps put good scores bright whatever the direction (reversed for ``'minimize'``).

    Args:
        landscape: A landscape (first drawn axis horizontal, log axes log-scaled); an N-D one is sliced through
            its best grid point.
        axes: The two axes to draw (default: the first two).

    Returns:
        The figure.
    """
    info = landscape_info(landscape, axes)
    return plot_landscape_info(info)


def plot_landscape_info(info: LandscapeInfo) -> Figure:
    """Render a :class:`LandscapeInfo` (see :func:`plot_landscape`)."""
    fig = new_figure((11.0, 4.4))
    ax_mean, ax_std = fig.subplots(1, 2)
    mean_cmap = "viridis" if info.direction == "maximize" else "viridis_r"
    _heatmap(fig, ax_mean, info, info.mean, mean_cmap, f"mean score ({info.direction})")
    _heatmap(fig, ax_std, info, info.std, "magma", "score std")
    best_x, best_y = info.best
    # The best point goes in the title rather than a legend, which would hide part of the grid.
    ax_mean.set_title(f"mean; ★ best {info.best_value:.4g} at {info.x.name}={best_x:.3g}, "
                      f"{info.y.name}={best_y:.3g}", fontsize="medium")
    ax_std.set_title("std (★ = best mean)", fontsize="medium")
    fig.suptitle(info.title)
    return fig


class MarginalInfo(NamedTuple):
    """One axis of a landscape's marginals.

    Attributes:
        axis: The axis.
        best: Shape ``(len(axis),)``: per value, the best mean over every other axis (the direction's best).
        average: Shape ``(len(axis),)``: per value, the average mean over every other axis.
    """

    axis: GridAxis
    best: np.ndarray
    average: np.ndarray


def marginals_info(landscape: Landscape) -> tuple[MarginalInfo, ...]:
    """Per axis, the best and the average mean over every other axis (what :func:`plot_marginals` draws).

    Args:
        landscape: A landscape with any number of axes.

    Returns:
        One :class:`MarginalInfo` per axis, in axis order.
    """
    if not isinstance(landscape, Landscape):
        raise TypeError(f"landscape must be a Landscape, got {type(landscape).__name__}")
    reduce_best = np.max if landscape.direction == "maximize" else np.min
    out = []
    for k, (name, values, scale) in enumerate(
            zip(landscape.axis_names, landscape.axis_values, landscape.axis_scales, strict=True)):
        others = tuple(j for j in range(len(landscape.shape)) if j != k)
        out.append(MarginalInfo(GridAxis(name, np.asarray(values), scale),
                                np.asarray(reduce_best(landscape.mean, axis=others)),
                                np.asarray(np.mean(landscape.mean, axis=others))))
    return tuple(out)


def plot_marginals(landscape: Landscape) -> Figure:
    """One panel per axis: the best and the average mean over every other axis, per value.

    Args:
        landscape: A landscape with any number of axes.

    Returns:
        The figure.
    """
    return plot_marginals_info(marginals_info(landscape), landscape_title(landscape.metadata), landscape.direction)


def plot_marginals_info(info: Sequence[MarginalInfo], title: str, direction: str) -> Figure:
    """Render :func:`marginals_info` (see :func:`plot_marginals`)."""
    fig = new_figure((3.6 * len(info), 3.4))
    panels = np.atleast_1d(fig.subplots(1, len(info)))
    for ax, marginal in zip(panels, info, strict=True):
        ax.plot(marginal.axis.values, marginal.best, marker="o", label=f"best over the other axes ({direction})")
        ax.plot(marginal.axis.values, marginal.average, marker=".", linestyle="--", label="average over the others")
        ax.set_xscale("log" if marginal.axis.scale == "log" else "linear")
        ax.set_xlabel(marginal.axis.name)
    panels[0].set_ylabel("mean score")
    panels[0].legend(fontsize="small")
    fig.suptitle(title)
    return fig

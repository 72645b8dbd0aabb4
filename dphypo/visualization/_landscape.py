"""Landscape heatmaps: mean and std of the score over a 2-D grid (DP-HyPO Figs. 2/3 style)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from dphypo.simulation.landscapes import Landscape
from dphypo.visualization._common import GridAxis, check_2d, format_grid_axis, new_figure

__all__ = ["LandscapeInfo", "landscape_info", "plot_landscape"]


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


def landscape_info(landscape: Landscape) -> LandscapeInfo:
    """Extract and validate what :func:`plot_landscape` draws.

    Args:
        landscape: A landscape on a 2-D grid.

    Returns:
        The info; the first axis is drawn horizontally.
    """
    if not isinstance(landscape, Landscape):
        raise TypeError(f"landscape must be a Landscape, got {type(landscape).__name__}")
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
        title=landscape_title(landscape.metadata),
    )


def _heatmap(fig: Figure, ax: Axes, info: LandscapeInfo, values: np.ndarray, cmap: str, label: str) -> None:
    mesh = ax.pcolormesh(info.x.edges, info.y.edges, values, cmap=cmap, shading="flat")
    fig.colorbar(mesh, ax=ax, label=label, shrink=0.95)
    format_grid_axis(ax, info.x, "x")
    format_grid_axis(ax, info.y, "y")
    ax.plot(*info.best, marker="*", markersize=15, color="white", markeredgecolor="black", linestyle="none")


def plot_landscape(landscape: Landscape) -> Figure:
    """Two heatmaps of a landscape: mean score and its std, with the best grid point starred.

    The colour maps put good scores bright whatever the direction (reversed for ``'minimize'``).

    Args:
        landscape: A landscape on a 2-D grid (first axis horizontal, log axes log-scaled).

    Returns:
        The figure.
    """
    info = landscape_info(landscape)
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

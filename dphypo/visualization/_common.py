"""Shared plotting helpers: Agg figures without pyplot, saving, grid axes (cell edges, log tick labels)."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import matplotlib
import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter

__all__ = ["SAVE_FORMATS", "GridAxis", "new_figure", "save_figure"]

#: Output formats of :func:`save_figure`, chosen by the file suffix.
SAVE_FORMATS = ("png", "svg")
_PNG_DPI = 150


class GridAxis(NamedTuple):
    """One axis of a 2-D grid as it is drawn.

    Attributes:
        name: Hyperparameter name (the axis label).
        values: Grid values, shape ``(n,)``; numbers for ``'log'``/``'linear'``, any objects for
            ``'categorical'`` (drawn at positions ``0 .. n-1``).
        scale: ``'log'``, ``'linear'`` or ``'categorical'``.
    """

    name: str
    values: np.ndarray
    scale: str

    @property
    def positions(self) -> np.ndarray:
        """Plot coordinates of the grid values, shape ``(n,)`` (indices for a categorical axis)."""
        if self.scale == "categorical":
            return np.arange(len(self.values), dtype=np.float64)
        return np.asarray(self.values, dtype=np.float64)

    @property
    def edges(self) -> np.ndarray:
        """Cell boundaries around the grid values, shape ``(n + 1,)``, midway in the axis's own scale.

        A log axis uses geometric midpoints, so every cell has the same width on the log-scaled plot; the
        outer cells extend half a step beyond the first and last values.
        """
        x = self.positions
        if self.scale == "log":
            return np.exp(_midpoint_edges(np.log(x)))
        return _midpoint_edges(x)


def _midpoint_edges(x: np.ndarray) -> np.ndarray:
    inner = (x[:-1] + x[1:]) / 2.0
    return np.concatenate([[x[0] - (inner[0] - x[0])], inner, [x[-1] + (x[-1] - inner[-1])]])


def new_figure(figsize: tuple[float, float]) -> Figure:
    """A figure on its own Agg canvas: no pyplot, so no global figure registry and no GUI backend.

    Args:
        figsize: Width and height in inches.

    Returns:
        The figure (constrained layout, so colorbars and labels do not overlap).
    """
    fig = Figure(figsize=figsize, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig: Figure, path: str | os.PathLike[str]) -> Path:
    """Write ``fig`` as PNG or SVG, chosen by the suffix of ``path``; creates missing parent directories.

    Args:
        fig: The figure.
        path: Destination ending in ``.png`` or ``.svg`` (case-insensitive).

    Returns:
        The path written.
    """
    if not isinstance(fig, Figure):
        raise TypeError(f"fig must be a matplotlib Figure, got {type(fig).__name__}")
    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in SAVE_FORMATS:
        raise ValueError(f"path must end in .png or .svg, got {str(path)!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    # No creation date and fixed SVG element ids: the same figure gives the same bytes (reproducible files).
    metadata: dict[str, Any] = {"Date": None} if fmt == "svg" else {"Software": None}
    with matplotlib.rc_context({"svg.hashsalt": "dphypo"}):
        fig.savefig(path, format=fmt, dpi=_PNG_DPI, metadata=metadata)
    return path


def tick_label(x: float) -> str:
    """Compact label of a tick value: ``1e-4``, ``0.001``, ``0.01``, ``0.1``, ``1``, ``10``, ``1e+03``."""
    if x == 0 or 1e-3 <= abs(x) < 1e3:
        return f"{x:g}"
    exponent = math.floor(math.log10(abs(x)) + 1e-9)
    mantissa = x / 10.0**exponent
    head = "" if math.isclose(mantissa, 1.0, rel_tol=1e-6) else f"{mantissa:g}×"
    return f"{head}1e{exponent}"


def format_grid_axis(ax: Axes, axis: GridAxis, which: str) -> None:
    """Scale, limits, ticks and label of one side of a grid plot.

    Args:
        ax: The axes.
        axis: The grid axis drawn along ``which``.
        which: ``'x'`` or ``'y'``.
    """
    target = ax.xaxis if which == "x" else ax.yaxis
    # x and y setters differ only in their keyword names; only the positional forms are used here.
    set_scale: Callable[[str], object]
    set_lim: Callable[[float, float], object]
    set_label: Callable[[str], object]
    if which == "x":
        set_scale, set_lim, set_label = ax.set_xscale, ax.set_xlim, ax.set_xlabel
    else:
        set_scale, set_lim, set_label = ax.set_yscale, ax.set_ylim, ax.set_ylabel
    edges = axis.edges
    if axis.scale == "log":
        set_scale("log")
        # Whole decades only: a log grid's own values (e.g. 2.15e-4) make unreadable tick labels.
        target.set_major_locator(LogLocator(base=10.0))
        target.set_major_formatter(FuncFormatter(lambda v, _: tick_label(v)))
        target.set_minor_formatter(NullFormatter())
    elif axis.scale == "categorical":
        target.set_major_locator(FixedLocator(axis.positions.tolist()))
        target.set_major_formatter(FuncFormatter(lambda v, _: _category_label(axis.values, v)))
    set_lim(edges[0], edges[-1])
    set_label(f"{axis.name} ({axis.scale})" if axis.scale == "log" else axis.name)


def _category_label(values: np.ndarray, position: float) -> str:
    k = round(position)
    return str(values[k]) if 0 <= k < len(values) else ""


def grid_coordinates(x: GridAxis, y: GridAxis, indices: Sequence[int] | np.ndarray,
                     shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Plot coordinates of flat grid indices (C order over ``(len(x), len(y))``).

    Args:
        x: First grid axis (drawn horizontally).
        y: Second grid axis (drawn vertically).
        indices: Flat grid indices, shape ``(m,)``.
        shape: ``(len(x.values), len(y.values))``.

    Returns:
        ``(xs, ys)``, each of shape ``(m,)``.
    """
    i, j = np.unravel_index(np.asarray(indices, dtype=np.int64), shape)
    return x.positions[i], y.positions[j]


def check_2d(shape: tuple[int, ...], what: str) -> tuple[int, int]:
    """Raise unless ``shape`` is a 2-D grid (the heatmaps draw one axis per side); return it as a pair."""
    if len(shape) != 2:
        raise ValueError(f"{what} must be a 2-D grid (one axis per side of the heatmap), got shape {shape}")
    return shape[0], shape[1]

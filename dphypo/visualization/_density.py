"""Small multiples of the projected sampling density of one search, as a ratio to the prior π⁽⁰⁾.

DP-HyPO (Wang et al. 2023, eq. 3.1) keeps every sampling density f in S_{C,c}(π⁽⁰⁾), i.e. c ≤ f/π⁽⁰⁾ ≤ C.
Drawing f/π⁽⁰⁾ on a colour scale fixed to [c, C] shows directly where the projection binds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from matplotlib.colors import Normalize, TwoSlopeNorm
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from dphypo.density import in_bounded_set
from dphypo.privacy.validation import check_positive_int
from dphypo.search.tuner import SearchHistory
from dphypo.space import SearchSpace
from dphypo.visualization._common import GridAxis, check_2d, format_grid_axis, grid_coordinates, new_figure

__all__ = ["DensitySnapshot", "DensitySnapshotsInfo", "density_snapshots_info", "plot_density_snapshots"]

_DEFAULT_PANELS = 4


class DensitySnapshot(NamedTuple):
    """The density of one update step and the runs around it.

    Attributes:
        step: Index of the density in ``history.densities`` (0: the first, drawn before any run).
        ratio: f/π⁽⁰⁾ on the grid, shape ``(ny, nx)`` (rows = second axis).
        observed: Flat grid indices of the runs finished before this density was computed, shape ``(m,)``.
        drawn: Flat grid indices of the runs drawn from this density, shape ``(runs_per_update,)`` or fewer.
    """

    step: int
    ratio: np.ndarray
    observed: np.ndarray
    drawn: np.ndarray


class DensitySnapshotsInfo(NamedTuple):
    """What :func:`plot_density_snapshots` draws.

    Attributes:
        x: Horizontal axis (the space's first axis).
        y: Vertical axis (the second axis).
        shape: Grid shape ``(nx, ny)`` (for flat-index lookups).
        snapshots: One per requested step, in the order given.
        vmin: Lower end of the colour scale (``c`` when given).
        vmax: Upper end (``C`` when given).
        bounds_given: Whether ``(vmin, vmax)`` are the search's ``(c, C)`` rather than the data range.
    """

    x: GridAxis
    y: GridAxis
    shape: tuple[int, int]
    snapshots: tuple[DensitySnapshot, ...]
    vmin: float
    vmax: float
    bounds_given: bool


def _default_steps(count: int) -> list[int]:
    """First and last update and evenly spaced ones between (e.g. 0, 6, 13, 19 of 20)."""
    return sorted({round(s) for s in np.linspace(0, count - 1, min(count, _DEFAULT_PANELS))})


def _checked_steps(steps: Sequence[int] | None, count: int) -> list[int]:
    if steps is None:
        return _default_steps(count)
    steps = list(steps)
    if not steps:
        raise ValueError("steps must name at least one update step, got []")
    for s in steps:
        if isinstance(s, bool) or not isinstance(s, int | np.integer) or not 0 <= s < count:
            raise ValueError(f"steps must be integers in [0, {count}) (one per recorded density), got {s!r}")
    if len(set(steps)) != len(steps):
        raise ValueError(f"steps must be distinct, got {steps}")
    return [int(s) for s in steps]


def _space_axes(space: SearchSpace) -> tuple[GridAxis, GridAxis]:
    check_2d(space.shape, "space")
    x, y = (GridAxis(name, np.asarray(axis.values, dtype=object if axis.scale == "categorical" else None),
                     axis.scale) for name, axis in space.axes.items())
    return x, y


def density_snapshots_info(
    history: SearchHistory,
    space: SearchSpace,
    steps: Sequence[int] | None = None,
    C: float | None = None,
    c: float | None = None,
    *,
    runs_per_update: int = 1,
) -> DensitySnapshotsInfo:
    """Extract the density/prior ratios of chosen update steps and the runs seen before each.

    Args:
        history: A search history recorded with ``record_densities=True`` (curator-only data).
        space: The search's space (2-D grid; its prior is π⁽⁰⁾).
        steps: Indices into ``history.densities``; default 4 evenly spaced from the first to the last.
        C: Upper ratio bound the search used; with ``c`` it fixes the colour scale to [c, C] and every
            recorded density is checked to lie in S_{C,c}(π⁽⁰⁾).
        c: Lower ratio bound (give both or neither).
        runs_per_update: Runs drawn per density (the tuner's ``runs_per_update``); density k served runs
            ``k·runs_per_update .. (k+1)·runs_per_update − 1``.

    Returns:
        The info.
    """
    if not isinstance(history, SearchHistory):
        raise TypeError(f"history must be a SearchHistory, got {type(history).__name__}")
    if not isinstance(space, SearchSpace):
        raise TypeError(f"space must be a SearchSpace, got {type(space).__name__}")
    if not history.densities:
        raise ValueError("history has no recorded densities; run the search with record_densities=True "
                         "(e.g. Tuner(..., record_densities=True)) to plot them")
    check_positive_int("runs_per_update", runs_per_update)
    count, runs = len(history.densities), len(history.trials)
    if math.ceil(runs / runs_per_update) != count:
        raise ValueError(f"runs_per_update={runs_per_update} does not match the history: {runs} runs would use "
                         f"{math.ceil(runs / runs_per_update)} densities, but {count} were recorded")
    x, y = _space_axes(space)
    prior = np.asarray(space.prior)
    densities = [np.asarray(d, dtype=np.float64) for d in history.densities]
    if any(d.shape != prior.shape for d in densities):
        raise ValueError(f"space must be the search's space: densities have {densities[0].size} points, "
                         f"the space has {prior.size}")
    if (C is None) != (c is None):
        raise ValueError(f"give both C and c or neither, got C={C!r}, c={c!r}")
    bounds = None if C is None or c is None else (C, c)
    bounds_given = bounds is not None
    if bounds is not None:
        outside = [k for k, d in enumerate(densities) if not in_bounded_set(d, prior, *bounds)]
        if outside:
            raise ValueError(f"densities {outside[:5]} lie outside S_(C,c) for C={C!r}, c={c!r}; pass the "
                             "bounds the search used")
    indices = np.array([t.grid_index for t in history.trials], dtype=np.int64)
    snapshots = []
    for s in _checked_steps(steps, count):
        ratio = (densities[s] / prior).reshape(space.shape).T
        start = s * runs_per_update
        snapshots.append(DensitySnapshot(s, ratio, indices[:start], indices[start:start + runs_per_update]))
    if bounds is not None:
        vmin, vmax = float(bounds[1]), float(bounds[0])
    else:
        # The prior (ratio 1) stays on the scale, so colours mean "above"/"below" the prior.
        vmin = min(1.0, *(float(sn.ratio.min()) for sn in snapshots))
        vmax = max(1.0, *(float(sn.ratio.max()) for sn in snapshots))
    shape = check_2d(space.shape, "space")
    return DensitySnapshotsInfo(x, y, shape, tuple(snapshots), vmin, vmax, bounds_given)


def plot_density_snapshots(
    history: SearchHistory,
    space: SearchSpace,
    steps: Sequence[int] | None = None,
    C: float | None = None,
    c: float | None = None,
    *,
    runs_per_update: int = 1,
) -> Figure:
    """Heatmaps of f/π⁽⁰⁾ at several update steps of one search, with the runs sampled so far.

    Args:
        history: A history recorded with ``record_densities=True``.
        space: The search's 2-D space.
        steps: Update steps to draw (default 4 evenly spaced).
        C: Upper ratio bound of the search (fixes the colour scale with ``c``).
        c: Lower ratio bound.
        runs_per_update: Runs drawn per density.

    Returns:
        The figure.
    """
    info = density_snapshots_info(history, space, steps, C, c, runs_per_update=runs_per_update)
    return plot_density_snapshots_info(info)


def _norm(vmin: float, vmax: float) -> Normalize:
    if vmin < 1.0 < vmax:
        return TwoSlopeNorm(vcenter=1.0, vmin=vmin, vmax=vmax)  # white = the prior
    if vmin == vmax:  # uniform search: C = c = 1
        return Normalize(vmin - 0.05, vmax + 0.05)
    return Normalize(vmin, vmax)


def plot_density_snapshots_info(info: DensitySnapshotsInfo) -> Figure:
    """Render a :class:`DensitySnapshotsInfo` (see :func:`plot_density_snapshots`)."""
    panels = len(info.snapshots)
    if panels == 0:
        raise ValueError("info.snapshots must hold at least one density snapshot, got none")
    ncols = min(panels, _DEFAULT_PANELS)
    nrows = math.ceil(panels / ncols)
    fig = new_figure((3.3 * ncols + 1.2, 3.2 * nrows + 0.6))
    axes = np.atleast_1d(fig.subplots(nrows, ncols, sharex=True, sharey=True, squeeze=False)).ravel()
    norm = _norm(info.vmin, info.vmax)
    mesh = None
    for ax, snap in zip(axes, info.snapshots, strict=False):
        mesh = ax.pcolormesh(info.x.edges, info.y.edges, snap.ratio, cmap="RdBu_r", norm=norm, shading="flat")
        format_grid_axis(ax, info.x, "x")
        format_grid_axis(ax, info.y, "y")
        if snap.observed.size:
            unique, counts = np.unique(snap.observed, return_counts=True)
            xs, ys = grid_coordinates(info.x, info.y, unique, info.shape)
            ax.scatter(xs, ys, s=14 + 10 * (counts - 1), facecolor="black", edgecolor="white", linewidth=0.6,
                       label="runs so far (size ∝ visits)")
        if snap.drawn.size:
            xs, ys = grid_coordinates(info.x, info.y, snap.drawn, info.shape)
            ax.scatter(xs, ys, s=70, marker="X", facecolor="gold", edgecolor="black", linewidth=0.7,
                       label="drawn from this density")
        ax.set_title(f"update {snap.step}: {snap.observed.size} runs seen", fontsize="medium")
        ax.label_outer()
    for ax in axes[panels:]:
        ax.set_visible(False)
    # Ticks at the ends, the prior and half-way between: the bounds c and C are read off directly.
    ticks = np.unique([info.vmin, (info.vmin + 1) / 2, 1.0, (1 + info.vmax) / 2, info.vmax])
    ticks = ticks[(ticks >= info.vmin) & (ticks <= info.vmax)]
    bounds = f"c = {info.vmin:g}, C = {info.vmax:g}" if info.bounds_given else "colours span the data"
    assert mesh is not None  # at least one panel was drawn (checked above)
    fig.colorbar(mesh, ax=axes[:panels].tolist(), ticks=ticks, format=FuncFormatter(lambda v, _: f"{v:.3g}"),
                 shrink=0.9, label=f"density / prior  ({bounds})")
    handles, labels = axes[0].get_legend_handles_labels()
    for ax in axes[1:panels]:  # the first panel has no runs yet: collect the markers from any panel
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncols=len(handles), fontsize="small")
    fig.suptitle("projected sampling density relative to the prior (1 = prior)")
    return fig

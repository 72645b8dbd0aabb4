"""The shared figure plumbing (dphypo/visualization/_common.py): grid axes, tick labels, saving."""

from __future__ import annotations

import numpy as np
import pytest

from dphypo.visualization import plot_landscape, save_figure
from dphypo.visualization._common import GridAxis, tick_label
from tests.visualization._helpers import _landscape


def test_log_axis_edges_are_geometric_midpoints() -> None:
    axis = GridAxis("lr", np.array([1e-4, 1e-3, 1e-2]), "log")
    assert axis.edges == pytest.approx([10**-4.5, 10**-3.5, 10**-2.5, 10**-1.5])
    linear = GridAxis("clip", np.array([0.3, 0.6, 1.2]), "linear")
    assert linear.edges == pytest.approx([0.15, 0.45, 0.9, 1.5])


def test_tick_labels_are_compact() -> None:
    assert [tick_label(x) for x in (1e-4, 1e-3, 0.01, 1.0, 10.0, 2e-5, 1e4)] == [
        "1e-4", "0.001", "0.01", "1", "10", "2×1e-5", "1e4"]


def test_save_figure_checks_suffix_and_is_reproducible(tmp_path) -> None:
    fig = plot_landscape(_landscape())
    with pytest.raises(ValueError, match=r"\.png or \.svg"):
        save_figure(fig, tmp_path / "fig.pdf")
    with pytest.raises(TypeError, match="Figure"):
        save_figure("not a figure", tmp_path / "fig.png")  # type: ignore[arg-type]
    for fmt in ("png", "svg"):
        a = save_figure(plot_landscape(_landscape()), tmp_path / f"a.{fmt}").read_bytes()
        b = save_figure(plot_landscape(_landscape()), tmp_path / "sub" / f"b.{fmt}").read_bytes()
        assert a == b  # no timestamp in the file


"""The landscape heatmaps (dphypo/visualization/_landscape.py)."""

from __future__ import annotations

import numpy as np
import pytest

from dphypo.simulation.landscapes import Landscape
from dphypo.visualization import landscape_info, plot_landscape
from tests.visualization._helpers import _check_saved, _landscape


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_landscape_info_orientation_and_best_point(direction: str) -> None:
    land = _landscape(direction)
    info = landscape_info(land)
    assert (info.x.name, info.y.name, info.x.scale, info.y.scale) == ("lr", "clip", "log", "linear")
    assert info.mean.shape == info.std.shape == (3, 4)
    for i in range(4):
        for j in range(3):
            assert info.mean[j, i] == land.mean[i, j] and info.std[j, i] == land.std[i, j]
    pick = np.argmax if direction == "maximize" else np.argmin
    i, j = np.unravel_index(pick(land.mean), land.shape)
    assert info.best == (land.axis_values[0][i], land.axis_values[1][j])
    assert info.best_value == land.mean[i, j]
    assert all(s in info.title for s in ("digits", "mlp", "σ = 1.5"))


def test_landscape_needs_two_axes() -> None:
    axes = {"a": [1, 2], "b": [1, 2], "d": [1, 2]}
    land = Landscape.from_axes(np.zeros((2, 2, 2)), np.zeros((2, 2, 2)), axes, dict.fromkeys(axes, "linear"))
    with pytest.raises(ValueError, match="2-D grid"):
        landscape_info(land)


def test_plot_landscape_draws_both_panels_with_colorbars(tmp_path) -> None:
    fig = plot_landscape(_landscape())
    panels = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    assert len(panels) == 2 and len(fig.axes) == 4
    assert all(ax.get_xscale() == "log" and ax.get_yscale() == "linear" for ax in panels)
    mesh = panels[0].collections[0]
    assert np.asarray(mesh.get_array()).reshape(3, 4) == pytest.approx(landscape_info(_landscape()).mean)
    _check_saved(fig, tmp_path, "landscape")


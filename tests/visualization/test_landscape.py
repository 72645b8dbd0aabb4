"""The landscape heatmaps (dphypo/visualization/_landscape.py)."""

from __future__ import annotations

import numpy as np
import pytest

from dphypo.simulation.landscapes import Landscape
from dphypo.visualization import landscape_info, marginals_info, plot_landscape, plot_marginals
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


def _four_d() -> Landscape:
    axes = {"lr": [1e-3, 1e-2, 1e-1], "clip": [0.5, 1.0], "batch": [32, 64, 128, 256], "epochs": [5, 10]}
    rng = np.random.default_rng(1)
    mean = rng.uniform(0.1, 0.9, size=(3, 2, 4, 2))
    scales = {"lr": "log", "clip": "linear", "batch": "log", "epochs": "linear"}
    return Landscape.from_axes(mean, mean / 10, axes, scales, metadata={"dataset": "digits"})


def test_an_n_d_landscape_is_drawn_as_its_slice_through_the_best_point() -> None:
    land = _four_d()
    best = np.unravel_index(land.best_index, land.shape)
    info = landscape_info(land, ["batch", "lr"])
    assert (info.x.name, info.y.name) == ("batch", "lr") and info.mean.shape == (3, 4)
    # rows = lr, columns = batch, at the best point's clip and epochs
    np.testing.assert_array_equal(info.mean, land.mean[:, best[1], :, best[3]])
    assert info.best_value == land.best_value
    clip, epochs = land.axis_values[1][best[1]], land.axis_values[3][best[3]]
    assert info.title.endswith(f"slice at clip={clip:g}, epochs={epochs:g}")
    default = landscape_info(land)  # the first two axes
    assert (default.x.name, default.y.name) == ("lr", "clip")
    with pytest.raises(ValueError, match="the 2 axes of the heatmap"):
        landscape_info(land, ["lr"])


def test_marginals_are_the_best_and_average_over_the_other_axes(tmp_path) -> None:
    land = _four_d()
    info = marginals_info(land)
    assert [m.axis.name for m in info] == ["lr", "clip", "batch", "epochs"]
    np.testing.assert_allclose(info[2].best, land.mean.max(axis=(0, 1, 3)))
    np.testing.assert_allclose(info[2].average, land.mean.mean(axis=(0, 1, 3)))
    assert max(m.best.max() for m in info) == land.best_value  # every axis's best curve reaches the best point
    fig = plot_marginals(land)
    assert len(fig.axes) == 4 and fig.axes[2].get_xscale() == "log"
    _check_saved(fig, tmp_path, "marginals")


def test_plot_landscape_draws_both_panels_with_colorbars(tmp_path) -> None:
    fig = plot_landscape(_landscape())
    panels = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    assert len(panels) == 2 and len(fig.axes) == 4
    assert all(ax.get_xscale() == "log" and ax.get_yscale() == "linear" for ax in panels)
    mesh = panels[0].collections[0]
    assert np.asarray(mesh.get_array()).reshape(3, 4) == pytest.approx(landscape_info(_landscape()).mean)
    _check_saved(fig, tmp_path, "landscape")


"""What the figure tests share: a small landscape and a check that a figure saves."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from dphypo.simulation.landscapes import Landscape
from dphypo.visualization import save_figure

# A rendered figure much smaller than this is empty or failed to draw.
MIN_BYTES = {"png": 10_000, "svg": 10_000}


def _landscape(direction: str = "maximize") -> Landscape:
    rng = np.random.default_rng(0)
    return Landscape.from_axes(
        rng.uniform(0.1, 0.9, size=(4, 3)),
        rng.uniform(0.01, 0.05, size=(4, 3)),
        {"lr": [1e-4, 1e-3, 1e-2, 1e-1], "clip": [0.5, 1.0, 1.5]},
        {"lr": "log", "clip": "linear"},
        direction=direction,
        metadata={"dataset": "digits", "model": "mlp", "sigma": 1.5},
    )


def _check_saved(fig: Figure, tmp_path, name: str) -> None:
    for fmt in ("png", "svg"):
        path = save_figure(fig, tmp_path / f"{name}.{fmt}")
        data = path.read_bytes()
        assert len(data) > MIN_BYTES[fmt], (name, fmt, len(data))
        assert data.startswith(b"\x89PNG") if fmt == "png" else b"<svg" in data[:1000]


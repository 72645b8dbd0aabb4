"""Grids as a user types them: ``low:high:num:log|linear`` or a comma list (the CLI's ``--*-grid`` options)."""

from __future__ import annotations

import itertools
import math

import numpy as np

from dphypo.space.axes import clean_values

__all__ = ["MAX_AXIS_VALUES", "parse_grid"]

#: Most values one typed axis may hold (a grid of two such axes is already 10⁸ points; the GP and the
#: densities are dense over the grid).
MAX_AXIS_VALUES = 10_000


def parse_grid(text: str, option: str = "grid", *, positive: bool = False) -> tuple[float, ...]:
    """``"1e-4:10:16:log"`` (low:high:num:scale) or a comma list ``"0.1,0.5,1"`` → grid values.

    Computed values are rounded to 12 significant digits (:func:`dphypo.space.clean_values`), so ``0.3:6:20:linear``
    holds 2.1, not 2.0999999999999996.

    Args:
        text: The grid as typed.
        option: How errors name it (e.g. ``"--lr-grid"``).
        positive: Every value must be > 0 (a learning rate, a clipping norm, a batch size).

    Returns:
        At least two (at most :data:`MAX_AXIS_VALUES`) strictly increasing, finite values.

    Raises:
        ValueError: A one-line message naming ``option`` for anything else.
    """
    usage = "low:high:num:log|linear (e.g. 1e-4:10:16:log) or a comma list (e.g. 0.1,0.5,1)"
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{option} is empty; give {usage}, got {text!r}")
    if ":" in text:
        parts = [part.strip() for part in text.split(":")]
        if len(parts) != 4 or parts[3] not in ("log", "linear"):
            raise ValueError(f"{option} must be {usage}, got {text!r}")
        try:
            low, high = float(parts[0]), float(parts[1])
        except ValueError:
            raise ValueError(f"{option}: low and high must be numbers, got {text!r}") from None
        try:
            num = int(parts[2])
        except ValueError:
            raise ValueError(f"{option}: num must be an integer >= 2, got {parts[2]!r} in {text!r}") from None
        if not (math.isfinite(low) and math.isfinite(high)):
            raise ValueError(f"{option}: low and high must be finite, got {text!r}")
        if num < 2:
            raise ValueError(f"{option}: num must be an integer >= 2 (a grid needs two values), got {num} in {text!r}")
        if num > MAX_AXIS_VALUES:  # checked before numpy allocates the axis
            raise ValueError(f"{option}: num must be at most {MAX_AXIS_VALUES} values per axis, got {num} in {text!r}")
        if low >= high:
            raise ValueError(f"{option}: low must be < high, got {text!r}")
        if parts[3] == "log" and low <= 0:
            raise ValueError(f"{option}: a log grid needs low > 0, got {text!r}")
        points = np.geomspace(low, high, num) if parts[3] == "log" else np.linspace(low, high, num)
        cleaned = list(clean_values(points))
        cleaned[0], cleaned[-1] = low, high
        return _checked_sign(tuple(cleaned), option, text, positive)
    if text.count(",") >= MAX_AXIS_VALUES:
        raise ValueError(f"{option}: at most {MAX_AXIS_VALUES} values per axis, got {text.count(',') + 1}")
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        raise ValueError(f"{option} must be {usage}, got {text!r}") from None
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"{option} values must be finite, got {text!r}")
    if len(values) < 2 or any(b <= a for a, b in itertools.pairwise(values)):
        raise ValueError(f"{option} must list at least 2 strictly increasing values, got {text!r}")
    return _checked_sign(values, option, text, positive)


def _checked_sign(values: tuple[float, ...], option: str, text: str, positive: bool) -> tuple[float, ...]:
    if positive and values[0] <= 0:
        raise ValueError(f"{option} values must be > 0, got {values[0]:g} in {text!r}")
    return values

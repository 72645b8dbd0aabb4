"""Axes of a search space: the values one hyperparameter can take, and their unit coordinates.

* :class:`Grid` — an explicit, strictly increasing list of numbers on a ``'linear'`` or ``'log'`` scale;
* :class:`LogFloat`, :class:`Float` — ``num`` log- or linearly spaced values between ``low`` and ``high``;
* :class:`Int` — the inclusive integer range ``low, low + step, ..., high``;
* :class:`IntGrid` — an explicit, strictly increasing list of integers on a ``'linear'`` or ``'log'`` scale (e.g.
  batch sizes 32, 64, 128 on a log scale, so that each doubling is one equal step for the GP);
* :class:`Choice` — categorical values (any hashable objects) in the order given.

Degenerate axes: numeric axes need at least two distinct values (``low < high``, ``num >= 2``), because a
hyperparameter that never varies is not a search dimension and a one-point numeric axis has no unit scale.
To keep a fixed value in every ``params`` dict, use ``Choice((value,))`` explicitly; its unit coordinate is
0.5 (a constant column, which a GP ignores).

Pure numpy; no torch.
"""

from __future__ import annotations

import itertools
import math
import numbers
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal, TypeAlias

import numpy as np

from dphypo.privacy.validation import is_integer, is_real

__all__ = [
    "AXIS_TYPES",
    "INDEX_RTOL",
    "Axis",
    "Choice",
    "Float",
    "Grid",
    "Int",
    "IntGrid",
    "LogFloat",
    "clean_values",
]

#: A float matches a grid value if it lies within this fraction of the axis span (in the axis's own scale).
INDEX_RTOL = 1e-9

Scale: TypeAlias = Literal["linear", "log", "categorical"]


#: Significant digits kept by :func:`clean_values` (float64 carries ~15.9; 12 drops only round-off).
CLEAN_DIGITS = 12


def clean_values(values: Sequence[float] | np.ndarray) -> tuple[float, ...]:
    """Computed grid values as a person would write them: each rounded to 12 significant digits.

    ``numpy.linspace(0.3, 6, 20)`` holds ``2.0999999999999996`` where the grid means ``2.1``; released
    hyperparameters should print as the grid defines them. Rounding moves a value by at most 5e-13 of itself,
    far below any meaningful hyperparameter difference; if it would merge two values (a grid finer than that),
    the values are returned unrounded.

    Args:
        values: Finite numbers, strictly increasing.

    Returns:
        The rounded values as python floats.
    """
    raw = tuple(float(v) for v in values)
    clean = tuple(float(f"{v:.{CLEAN_DIGITS}g}") for v in raw)
    if any(b <= a for a, b in itertools.pairwise(clean)):
        return raw
    return clean


def _readonly(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


def _real(value: Any, name: str) -> float:
    if not is_real(value):
        raise TypeError(f"{name} must be a real number, got {value!r}")
    result = float(value)
    if not math.isfinite(result):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return result


def _integer(value: Any, name: str) -> int:
    if not is_integer(value):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    return int(value)


class _NumericAxis:
    """Shared behaviour of numeric axes; subclasses provide ``values`` (sorted) and ``scale``."""

    values: tuple[float, ...] | tuple[int, ...]
    scale: Scale

    def __len__(self) -> int:
        return len(self.values)

    def _transform(self, values: np.ndarray) -> np.ndarray:
        return np.log(values) if self.scale == "log" else values

    def grid_unit(self) -> np.ndarray:
        """Unit coordinates of the axis's own values (:meth:`unit` of :attr:`values`), shape ``(len(self),)``."""
        return self.unit(self.values)

    def unit(self, values: Sequence[float] | np.ndarray) -> np.ndarray:
        """Map values to [0, 1]: affine in the axis's scale (log axes in log space), endpoints to 0 and 1.

        Args:
            values: numbers, shape ``(k,)``; values outside ``[low, high]`` map outside ``[0, 1]``.

        Returns:
            float64 array, shape ``(k,)``.
        """
        x = np.asarray(values, dtype=np.float64)
        if self.scale == "log" and np.any(x <= 0):
            raise ValueError(f"values on a log axis must be positive, got {values!r}")
        t = self._transform(x)
        ends = self._transform(np.array([self.values[0], self.values[-1]], dtype=np.float64))
        return (t - ends[0]) / (ends[1] - ends[0])

    def index_of(self, value: Any) -> int:
        """Position of ``value`` on the axis, allowing float round-off of ``INDEX_RTOL`` × span (ValueError)."""
        x = _real(value, "value")
        grid = self._transform(np.asarray(self.values, dtype=np.float64))
        if self.scale == "log" and x <= 0:
            raise ValueError(f"{value!r} is not on this log axis (values must be positive)")
        t = float(self._transform(np.asarray(x, dtype=np.float64)))
        i = int(np.argmin(np.abs(grid - t)))
        if abs(grid[i] - t) > INDEX_RTOL * (grid[-1] - grid[0]):
            raise ValueError(f"{value!r} is not a grid value of {self!r}")
        return i


def _check_range(low: Any, high: Any, num: Any, *, log: bool) -> None:
    lo, hi, k = _real(low, "low"), _real(high, "high"), _integer(num, "num")
    if log and lo <= 0:
        raise ValueError(f"low must be > 0 on a log axis, got {low!r}")
    if lo >= hi:
        raise ValueError(f"low must be < high, got low={low!r}, high={high!r}")
    if k < 2:
        raise ValueError(f"num must be >= 2, got {k}; fix a single value with Choice((x,))")


@dataclass(frozen=True, repr=False)
class Grid(_NumericAxis):
    """An explicit numeric axis: strictly increasing, finite values (positive on a log scale).

    Args:
        values: at least two numbers, strictly increasing; stored as a tuple of floats.
        scale: ``'linear'`` or ``'log'`` — how :meth:`unit` (and hence the GP) measures distances.
    """

    values: tuple[float, ...]
    scale: Literal["linear", "log"] = "linear"

    def __post_init__(self) -> None:
        _set_explicit_values(self, _real, "numbers")

    def __repr__(self) -> str:
        v = self.values
        shown = [f"{x:g}" for x in v] if len(v) <= 4 else [*(f"{x:g}" for x in v[:3]), "...", f"{v[-1]:g}"]
        return f"Grid(({', '.join(shown)}), scale={self.scale!r}, num={len(v)})"


@dataclass(frozen=True)
class _Range(_NumericAxis):
    low: float
    high: float
    num: int

    def __post_init__(self) -> None:
        _check_range(self.low, self.high, self.num, log=self.scale == "log")


@dataclass(frozen=True)
class LogFloat(_Range):
    """``num`` log-spaced floats from ``low`` > 0 to ``high`` > ``low`` inclusive (``numpy.geomspace``).

    Interior values are rounded to 12 significant digits (:func:`clean_values`), the endpoints kept as given.
    """

    @property
    def scale(self) -> Scale:  # type: ignore[override]
        """The axis scale: ``'linear'``, ``'log'`` or ``'categorical'``."""
        return "log"

    @cached_property
    def values(self) -> tuple[float, ...]:  # type: ignore[override]
        """The axis values in grid order."""
        vals = list(clean_values(np.geomspace(float(self.low), float(self.high), int(self.num))))
        vals[0], vals[-1] = float(self.low), float(self.high)  # exact endpoints
        return tuple(vals)


@dataclass(frozen=True)
class Float(_Range):
    """``num`` >= 2 evenly spaced floats from ``low`` to ``high`` > ``low`` inclusive (``numpy.linspace``).

    Values are rounded to 12 significant digits (:func:`clean_values`: ``Float(0.3, 6, 20)`` holds 2.1, not
    2.0999999999999996).
    """

    @property
    def scale(self) -> Scale:  # type: ignore[override]
        """The axis scale: ``'linear'``, ``'log'`` or ``'categorical'``."""
        return "linear"

    @cached_property
    def values(self) -> tuple[float, ...]:  # type: ignore[override]
        """The axis values in grid order."""
        vals = list(clean_values(np.linspace(float(self.low), float(self.high), int(self.num))))
        vals[0], vals[-1] = float(self.low), float(self.high)  # exact endpoints
        return tuple(vals)


@dataclass(frozen=True)
class Int(_NumericAxis):
    """The inclusive integer range ``low, low + step, ..., high``.

    Args:
        low: smallest value.
        high: largest value; ``high - low`` must be a positive multiple of ``step``.
        step: spacing, >= 1.
        log: measure distances in log space (e.g. batch sizes); needs ``low >= 1``.
    """

    low: int
    high: int
    step: int = 1
    log: bool = False

    def __post_init__(self) -> None:
        low, high, step = _integer(self.low, "low"), _integer(self.high, "high"), _integer(self.step, "step")
        if step < 1:
            raise ValueError(f"step must be >= 1, got {step}")
        if low >= high:
            raise ValueError(f"low must be < high, got low={low}, high={high}; fix a value with Choice((x,))")
        if (high - low) % step:
            raise ValueError(f"high - low must be a multiple of step, got {low=}, {high=}, {step=}")
        if self.log and low < 1:
            raise ValueError(f"low must be >= 1 when log=True, got {low}")

    @property
    def scale(self) -> Scale:  # type: ignore[override]
        """The axis scale: ``'linear'``, ``'log'`` or ``'categorical'``."""
        return "log" if self.log else "linear"

    @cached_property
    def values(self) -> tuple[int, ...]:  # type: ignore[override]
        """The axis values in grid order."""
        return tuple(range(int(self.low), int(self.high) + 1, int(self.step)))

    def index_of(self, value: Any) -> int:
        """Position of an integer (or integral float) ``value`` on the axis; exact match required."""
        x = _real(value, "value")
        if not x.is_integer() or (x - self.low) % self.step or not self.low <= x <= self.high:
            raise ValueError(f"{value!r} is not a grid value of {self!r}")
        return int((int(x) - self.low) // self.step)


@dataclass(frozen=True, repr=False)
class IntGrid(_NumericAxis):
    """An explicit integer axis: strictly increasing integers (positive on a log scale), kept as python ints.

    What a privacy-affecting axis of batch sizes or epochs is (:class:`~dphypo.space.SearchSpace`'s
    ``privacy_roles``): ``params`` returns ``int`` values a data loader takes as is, and ``scale='log'`` measures
    distances in log space (32 → 64 is as far as 64 → 128).

    Args:
        values: at least two integers (bools refused; integral floats such as ``64.0`` accepted), strictly
            increasing; stored as a tuple of ints.
        scale: ``'linear'`` or ``'log'``.
    """

    values: tuple[int, ...]
    scale: Literal["linear", "log"] = "linear"

    def __post_init__(self) -> None:
        _set_explicit_values(self, _integral, "integers")

    def __repr__(self) -> str:
        v = self.values
        shown = [str(x) for x in v] if len(v) <= 4 else [*(str(x) for x in v[:3]), "...", str(v[-1])]
        return f"IntGrid(({', '.join(shown)}), scale={self.scale!r}, num={len(v)})"

    def index_of(self, value: Any) -> int:
        """Position of an integer (or integral float) ``value`` on the axis; exact match required."""
        x = _real(value, "value")
        if not x.is_integer() or int(x) not in self.values:
            raise ValueError(f"{value!r} is not a grid value of {self!r}")
        return self.values.index(int(x))


def _set_explicit_values(axis: Grid | IntGrid, convert: Callable[[Any, str], Any], kind: str) -> None:
    """Validate and store an explicit axis's ``scale`` and ``values`` (≥ 2, strictly increasing, > 0 on log).

    Args:
        axis: The axis being constructed (frozen: set with ``object.__setattr__``).
        convert: ``(value, name) -> number``: :func:`_real` or :func:`_integral`, raising on a bad value.
        kind: ``"numbers"`` or ``"integers"``, for the messages.
    """
    if axis.scale not in ("linear", "log"):
        raise ValueError(f"scale must be 'linear' or 'log', got {axis.scale!r}")
    object.__setattr__(axis, "scale", str(axis.scale))
    if isinstance(axis.values, str | bytes) or not isinstance(axis.values, Sequence | np.ndarray):
        raise TypeError(f"values must be a sequence of {kind}, got {axis.values!r}")
    vals = tuple(convert(v, f"values[{i}]") for i, v in enumerate(axis.values))
    if len(vals) < 2:
        raise ValueError(f"values must hold at least 2 {kind}, got {len(vals)}; fix one with Choice((x,))")
    for i, (a, b) in enumerate(itertools.pairwise(vals)):
        if b <= a:
            raise ValueError(f"values must be strictly increasing, got values[{i}]={a!r} >= values[{i + 1}]={b!r}")
    if axis.scale == "log" and vals[0] <= 0:
        raise ValueError(f"values on a log scale must be positive, got values[0]={vals[0]!r}")
    object.__setattr__(axis, "values", vals)


def _integral(value: Any, name: str) -> int:
    """An integer, or a float with an integral value, as an int (bools and non-integral values refused)."""
    if is_integer(value):
        return int(value)
    if is_real(value) and math.isfinite(float(value)) and float(value).is_integer():
        return int(float(value))
    raise TypeError(f"{name} must be an integer, got {value!r}")


@dataclass(frozen=True)
class Choice:
    """A categorical axis: distinct hashable values in the order given.

    The unit coordinate of value ``k`` of ``K`` is ``k / (K - 1)`` (an ordinal embedding — order the values
    so that neighbours are similar, or accept that the GP sees an arbitrary order); a one-value Choice maps
    to 0.5. This is the only axis allowed to hold a single value.

    Args:
        values: non-empty tuple of distinct hashable values; float values must be finite.
    """

    values: tuple[Hashable, ...]

    def __post_init__(self) -> None:
        if isinstance(self.values, str | bytes) or not isinstance(self.values, Sequence):
            raise TypeError(f"values must be a tuple of choices, got {self.values!r}")
        vals = tuple(self.values)
        if not vals:
            raise ValueError("values must not be empty")
        seen: dict[Hashable, int] = {}
        for i, v in enumerate(vals):
            if not isinstance(v, Hashable):
                raise TypeError(f"values[{i}] must be hashable, got {v!r}")
            if isinstance(v, numbers.Real) and not isinstance(v, numbers.Integral) and not math.isfinite(v):
                raise ValueError(f"values[{i}] must be finite, got {v!r}")
            if v in seen:
                raise ValueError(f"values must be distinct, got {v!r} at positions {seen[v]} and {i}")
            seen[v] = i
        object.__setattr__(self, "values", vals)

    @property
    def scale(self) -> Scale:
        """The axis scale: ``'linear'``, ``'log'`` or ``'categorical'``."""
        return "categorical"

    def __len__(self) -> int:
        return len(self.values)

    def index_of(self, value: Any) -> int:
        """Position of ``value`` among the choices (equality, as in a dict lookup)."""
        try:
            return self.values.index(value)
        except ValueError:
            raise ValueError(f"{value!r} is not one of the choices {self.values!r}") from None

    def grid_unit(self) -> np.ndarray:
        """Unit coordinates of the axis's own values (:meth:`unit` of :attr:`values`), shape ``(len(self),)``."""
        return self.unit(self.values)

    def unit(self, values: Sequence[Hashable]) -> np.ndarray:
        """Ordinal unit coordinates ``k / (K - 1)`` of the choices (0.5 if ``K == 1``), shape ``(k,)``."""
        idx = np.array([self.index_of(v) for v in values], dtype=np.float64)
        if len(self.values) == 1:
            return np.full(idx.shape, 0.5)
        return idx / (len(self.values) - 1)


#: Any axis of a :class:`~dphypo.space.SearchSpace`.
Axis: TypeAlias = Grid | LogFloat | Float | Int | IntGrid | Choice
#: The axis classes, for ``isinstance`` checks.
AXIS_TYPES = (Grid, LogFloat, Float, Int, IntGrid, Choice)

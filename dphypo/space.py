"""Search spaces: axes, the grid of all their combinations, and the prior π⁽⁰⁾ over that grid.

DP-HyPO (Wang et al. 2023, Sec. 3.2 and App. C.2) works on a discretised hyperparameter space Λ with the
counting measure: every density is a vector over the grid points. A :class:`SearchSpace` is the Cartesian
product of its axes in C order (the last axis varies fastest, as in ``numpy.ravel``), so grid point ``i`` is
``np.unravel_index(i, space.shape)``.

Axes:
    * :class:`Grid` — an explicit, strictly increasing list of numbers on a ``'linear'`` or ``'log'`` scale;
    * :class:`LogFloat`, :class:`Float` — ``num`` log- or linearly spaced values between ``low`` and ``high``;
    * :class:`Int` — the inclusive integer range ``low, low + step, ..., high``;
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
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from types import MappingProxyType
from typing import Any, Literal, TypeAlias

import numpy as np

__all__ = [
    "MAX_GRID_SIZE",
    "Axis",
    "Choice",
    "Float",
    "Grid",
    "Int",
    "LogFloat",
    "PriorSpec",
    "SearchSpace",
    "clean_values",
]

#: Largest grid a SearchSpace accepts; densities are dense float64 vectors over the grid.
MAX_GRID_SIZE = 10_000_000

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
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {value!r}")
    result = float(value)
    if not math.isfinite(result):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return result


def _integer(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
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
        t = float(self._transform(np.float64(x)))
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
        if self.scale not in ("linear", "log"):
            raise ValueError(f"scale must be 'linear' or 'log', got {self.scale!r}")
        object.__setattr__(self, "scale", str(self.scale))
        if isinstance(self.values, str | bytes) or not isinstance(self.values, Sequence | np.ndarray):
            raise TypeError(f"values must be a sequence of numbers, got {self.values!r}")
        vals = tuple(_real(v, f"values[{i}]") for i, v in enumerate(self.values))
        if len(vals) < 2:
            raise ValueError(f"values must hold at least 2 numbers, got {len(vals)}; fix one with Choice((x,))")
        diffs = np.diff(np.asarray(vals))
        if np.any(diffs <= 0):
            i = int(np.argmax(diffs <= 0))
            pair = f"values[{i}]={vals[i]!r} >= values[{i + 1}]={vals[i + 1]!r}"
            raise ValueError(f"values must be strictly increasing, got {pair}")
        if self.scale == "log" and vals[0] <= 0:
            raise ValueError(f"values on a log scale must be positive, got values[0]={vals[0]!r}")
        object.__setattr__(self, "values", vals)

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
    """``num`` log-spaced floats from ``low`` > 0 to ``high`` > ``low`` inclusive (``numpy.geomspace``), interior
    values rounded to 12 significant digits (:func:`clean_values`), the endpoints exactly as given."""

    @property
    def scale(self) -> Scale:  # type: ignore[override]
        return "log"

    @cached_property
    def values(self) -> tuple[float, ...]:  # type: ignore[override]
        vals = list(clean_values(np.geomspace(float(self.low), float(self.high), int(self.num))))
        vals[0], vals[-1] = float(self.low), float(self.high)  # exact endpoints
        return tuple(vals)


@dataclass(frozen=True)
class Float(_Range):
    """``num`` >= 2 evenly spaced floats from ``low`` to ``high`` > ``low`` inclusive (``numpy.linspace``), rounded
    to 12 significant digits (:func:`clean_values`: ``Float(0.3, 6, 20)`` holds 2.1, not 2.0999999999999996)."""

    @property
    def scale(self) -> Scale:  # type: ignore[override]
        return "linear"

    @cached_property
    def values(self) -> tuple[float, ...]:  # type: ignore[override]
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
        return "log" if self.log else "linear"

    @cached_property
    def values(self) -> tuple[int, ...]:  # type: ignore[override]
        return tuple(range(int(self.low), int(self.high) + 1, int(self.step)))

    def index_of(self, value: Any) -> int:
        """Position of an integer (or integral float) ``value`` on the axis; exact match required."""
        x = _real(value, "value")
        if not x.is_integer() or (x - self.low) % self.step or not self.low <= x <= self.high:
            raise ValueError(f"{value!r} is not a grid value of {self!r}")
        return int((int(x) - self.low) // self.step)


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
        return "categorical"

    def __len__(self) -> int:
        return len(self.values)

    def index_of(self, value: Any) -> int:
        """Position of ``value`` among the choices (equality, as in a dict lookup)."""
        try:
            return self.values.index(value)
        except ValueError:
            raise ValueError(f"{value!r} is not one of the choices {self.values!r}") from None

    def unit(self, values: Sequence[Hashable]) -> np.ndarray:
        """Ordinal unit coordinates ``k / (K - 1)`` of the choices (0.5 if ``K == 1``), shape ``(k,)``."""
        idx = np.array([self.index_of(v) for v in values], dtype=np.float64)
        if len(self.values) == 1:
            return np.full(idx.shape, 0.5)
        return idx / (len(self.values) - 1)


Axis: TypeAlias = Grid | LogFloat | Float | Int | Choice
_AXIS_TYPES = (Grid, LogFloat, Float, Int, Choice)

#: A prior: None (uniform), an array shaped like the grid or flat ``(n,)``, or ``params -> weight``.
PriorSpec: TypeAlias = np.ndarray | Sequence[float] | Callable[[dict[str, Any]], float] | None


class SearchSpace:
    """The grid Λ of all combinations of the axes (C order) and a prior π⁽⁰⁾ over it.

    Args:
        axes: mapping from hyperparameter name to axis; its order fixes the grid order.
        prior: π⁽⁰⁾ up to normalisation (DP-HyPO App. D). ``None`` gives the uniform prior; otherwise an
            array shaped like the grid (``shape``) or flat ``(size,)``, or a callable ``prior(params) ->
            float`` evaluated at every grid point. It must be finite and **strictly positive** everywhere:
            the bounded set S_{C,c}(π⁽⁰⁾) = {f : c·π⁽⁰⁾ ≤ f ≤ C·π⁽⁰⁾, Σf = 1} forces f = 0 wherever
            π⁽⁰⁾ = 0, so such a point could never be sampled and only inflates the grid, and the privacy
            analysis (App. D, f ≪ π⁽⁰⁾, ratio bounds f/π⁽⁰⁾ ∈ [c, C]) needs the ratio defined everywhere.
            Drop such points from the axes instead.

    The object is immutable: cached arrays are read-only.
    """

    __slots__ = ("_axes", "_prior", "_shape", "_uniform_prior", "_unit")

    def __init__(self, axes: Mapping[str, Axis], prior: PriorSpec = None) -> None:
        if not isinstance(axes, Mapping):
            raise TypeError(f"axes must be a mapping from name to axis, got {axes!r}")
        if not axes:
            raise ValueError("axes must contain at least one axis")
        for name, axis in axes.items():
            if not isinstance(name, str) or not name:
                raise ValueError(f"axis names must be non-empty strings, got {name!r}")
            if not isinstance(axis, _AXIS_TYPES):
                raise TypeError(f"axes[{name!r}] must be Grid, LogFloat, Float, Int or Choice, got {axis!r}")
        shape = tuple(len(axis) for axis in axes.values())
        size = math.prod(shape)
        if size > MAX_GRID_SIZE:
            raise ValueError(f"the grid has {size} points (shape {shape}); at most {MAX_GRID_SIZE} allowed")
        set_ = object.__setattr__
        set_(self, "_axes", MappingProxyType(dict(axes)))
        set_(self, "_shape", shape)
        set_(self, "_unit", None)
        set_(self, "_uniform_prior", prior is None)
        set_(self, "_prior", _readonly(self._normalised_prior(prior)))

    # -- immutability --------------------------------------------------------------------------------------
    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"SearchSpace is immutable; cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"SearchSpace is immutable; cannot delete {name!r}")

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickle by construction (mappingproxy is not picklable); needed to hand a space to worker processes.
        prior = None if self._uniform_prior else np.array(self._prior)
        return (SearchSpace, (dict(self._axes), prior))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SearchSpace):
            return NotImplemented
        return dict(self._axes) == dict(other._axes) and np.array_equal(self._prior, other._prior)

    def __hash__(self) -> int:
        return hash((tuple(self._axes.items()), self._prior.tobytes()))

    def __repr__(self) -> str:
        axes = ", ".join(f"{name}={axis!r}" for name, axis in self._axes.items())
        prior = "uniform" if self._uniform_prior else "custom"
        return f"SearchSpace({axes}; shape={self.shape}, size={self.size}, prior={prior})"

    # -- constructors --------------------------------------------------------------------------------------
    @classmethod
    def from_grid(
        cls,
        axis_values: Mapping[str, Sequence[Any] | np.ndarray],
        scales: Mapping[str, str],
        prior: PriorSpec = None,
    ) -> SearchSpace:
        """Build a space from explicit per-axis values (e.g. a landscape ``.npz``'s ``axis_<name>`` arrays).

        Args:
            axis_values: name -> values (sorted, not necessarily evenly spaced), in grid order.
            scales: name -> ``'linear'`` / ``'log'`` (a :class:`Grid`) or ``'categorical'`` (:class:`Choice`).
            prior: as in :class:`SearchSpace`.

        Returns:
            The search space.
        """
        if set(axis_values) != set(scales):
            names = f"{sorted(scales)} != {sorted(axis_values)}"
            raise ValueError(f"scales must name the same axes as axis_values, got {names}")
        axes: dict[str, Axis] = {}
        for name, values in axis_values.items():
            scale = scales[name]
            try:
                if scale == "categorical":
                    axes[name] = Choice(tuple(np.asarray(values).tolist()))
                else:
                    axes[name] = Grid(tuple(np.asarray(values).tolist()), scale=str(scale))  # type: ignore
            except (TypeError, ValueError) as err:
                raise type(err)(f"axis {name!r}: {err}") from err
        return cls(axes, prior=prior)

    # -- structure -----------------------------------------------------------------------------------------
    @property
    def axes(self) -> Mapping[str, Axis]:
        """Read-only mapping name -> axis, in grid order."""
        return self._axes

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._axes)

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def size(self) -> int:
        """Number of grid points n."""
        return math.prod(self._shape)

    # -- points --------------------------------------------------------------------------------------------
    def params(self, index: int) -> dict[str, Any]:
        """The hyperparameters of grid point ``index``: python floats, ints or the choice objects.

        Args:
            index: flat grid index in ``[0, size)``.

        Returns:
            ``{name: value}`` in axis order.
        """
        i = _integer(index, "index")
        if not 0 <= i < self.size:
            raise ValueError(f"index must be in [0, {self.size}), got {index!r}")
        position = np.unravel_index(i, self._shape)
        pairs = zip(self._axes.items(), position, strict=True)
        return {name: axis.values[int(k)] for (name, axis), k in pairs}

    def index(self, params: Mapping[str, Any]) -> int:
        """Flat grid index of ``params``; floats match within ``INDEX_RTOL`` × axis span (in axis scale).

        Raises ValueError on missing or unknown names, or on a value that is not on its axis.
        """
        missing = [n for n in self._axes if n not in params]
        extra = [n for n in params if n not in self._axes]
        if missing or extra:
            raise ValueError(f"params must name exactly {self.names}; missing {missing}, unknown {extra}")
        position = []
        for name, axis in self._axes.items():
            try:
                position.append(axis.index_of(params[name]))
            except (TypeError, ValueError) as err:
                raise ValueError(f"params[{name!r}]: {err}") from err
        return int(np.ravel_multi_index(tuple(position), self._shape))

    def grid_values(self, name: str) -> np.ndarray:
        """Value of hyperparameter ``name`` at every grid point (the axis's values are ``axes[name].values``).

        Returns:
            array of shape ``(size,)`` (float64, int64, or object for a :class:`Choice`), read-only.
        """
        if name not in self._axes:
            raise ValueError(f"name must be one of {self.names}, got {name!r}")
        axis = self._axes[name]
        k = self.names.index(name)
        if isinstance(axis, Choice):
            values = np.empty(len(axis), dtype=object)
            values[:] = list(axis.values)
        else:
            values = np.asarray(axis.values)
        reps = math.prod(self._shape[k + 1 :])
        tiles = math.prod(self._shape[:k])
        return _readonly(np.tile(np.repeat(values, reps), tiles))

    @property
    def unit_coordinates(self) -> np.ndarray:
        """Grid points in [0, 1]^d (log axes in log space; Choice ordinal), shape ``(size, ndim)``, cached."""
        if self._unit is None:
            per_axis = [axis.unit(axis.values) for axis in self._axes.values()]
            mesh = np.meshgrid(*per_axis, indexing="ij")
            unit = np.stack([m.ravel() for m in mesh], axis=1).astype(np.float64)
            object.__setattr__(self, "_unit", _readonly(unit))
        return self._unit

    @property
    def prior(self) -> np.ndarray:
        """π⁽⁰⁾ over the grid, shape ``(size,)``, strictly positive, sums to 1 (round-off), read-only."""
        return self._prior

    @property
    def is_uniform_prior(self) -> bool:
        return self._uniform_prior

    # -- prior ---------------------------------------------------------------------------------------------
    def _normalised_prior(self, prior: PriorSpec) -> np.ndarray:
        n = self.size
        if prior is None:
            return np.full(n, 1.0 / n)
        if callable(prior):
            weights = np.empty(n, dtype=np.float64)
            for i in range(n):
                w = prior(self.params(i))
                if isinstance(w, bool) or not isinstance(w, numbers.Real):
                    raise TypeError(f"prior({self.params(i)!r}) must return a real number, got {w!r}")
                weights[i] = float(w)
        else:
            weights = np.array(prior, dtype=np.float64)
            if weights.shape not in (self._shape, (n,)):
                raise ValueError(f"prior must have shape {self._shape} or ({n},), got {weights.shape}")
            weights = weights.ravel()
        bad = np.flatnonzero(~np.isfinite(weights) | (weights <= 0))
        if bad.size:
            i = int(bad[0])
            raise ValueError(
                f"prior must be finite and strictly positive at every grid point (S_C,c(π0) forces f = 0"
                f" where π0 = 0; drop such points from the axes), got {weights[i]!r} at {self.params(i)!r}"
                f" ({bad.size} bad point(s))"
            )
        total = float(np.sum(weights))
        if not math.isfinite(total):
            raise ValueError("prior weights overflow when summed; rescale them")
        return weights / total

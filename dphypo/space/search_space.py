"""Search spaces: the grid of all combinations of the axes and the prior π⁽⁰⁾ over that grid.

DP-HyPO (Wang et al. 2023, arXiv:2306.05734v2, Sec. 3.2 and App. C.2) works on a discretised hyperparameter
space Λ with the counting measure: every density is a vector over the grid points. A :class:`SearchSpace` is the
Cartesian product of its axes (:mod:`dphypo.space.axes`) in C order (the last axis varies fastest, as in
``numpy.ravel``), so grid point ``i`` is ``np.unravel_index(i, space.shape)``.

Pure numpy; no torch.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, TypeAlias

import numpy as np

from dphypo.space.axes import AXIS_TYPES, Axis, Choice, Grid, _integer, _readonly

__all__ = ["MAX_GRID_SIZE", "PriorSpec", "SearchSpace"]

#: Largest grid a SearchSpace accepts; densities are dense float64 vectors over the grid.
MAX_GRID_SIZE = 10_000_000

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

    Example:
        Three learning rates × two batch sizes, grid points in C order (the last axis varies fastest):

        >>> from dphypo.space import Choice, LogFloat, SearchSpace
        >>> space = SearchSpace({"lr": LogFloat(1e-3, 1e-1, 3), "batch": Choice((64, 256))})
        >>> space.shape, space.size
        ((3, 2), 6)
        >>> space.params(3)
        {'lr': 0.01, 'batch': 256}
        >>> space.index({"lr": 0.01, "batch": 256})
        3
        >>> space.prior.round(3).tolist()
        [0.167, 0.167, 0.167, 0.167, 0.167, 0.167]
    """

    __slots__ = ("_axes", "_prior", "_shape", "_uniform_prior", "_unit")
    # Set once in __init__ through object.__setattr__ (the class refuses assignment); declared for type checkers.
    _axes: Mapping[str, Axis]
    _prior: np.ndarray
    _shape: tuple[int, ...]
    _uniform_prior: bool
    _unit: np.ndarray | None

    def __init__(self, axes: Mapping[str, Axis], prior: PriorSpec = None) -> None:
        if not isinstance(axes, Mapping):
            raise TypeError(f"axes must be a mapping from name to axis, got {axes!r}")
        if not axes:
            raise ValueError("axes must contain at least one axis")
        for name, axis in axes.items():
            if not isinstance(name, str) or not name:
                raise ValueError(f"axis names must be non-empty strings, got {name!r}")
            if not isinstance(axis, AXIS_TYPES):
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
        """Axis names in grid order."""
        return tuple(self._axes)

    @property
    def shape(self) -> tuple[int, ...]:
        """Number of values per axis, in grid order."""
        return self._shape

    @property
    def ndim(self) -> int:
        """Number of axes."""
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
        unit = self._unit
        if unit is None:
            per_axis = [axis.grid_unit() for axis in self._axes.values()]
            mesh = np.meshgrid(*per_axis, indexing="ij")
            unit = _readonly(np.stack([m.ravel() for m in mesh], axis=1).astype(np.float64))
            object.__setattr__(self, "_unit", unit)
        return unit

    @property
    def prior(self) -> np.ndarray:
        """π⁽⁰⁾ over the grid, shape ``(size,)``, strictly positive, sums to 1 (round-off), read-only."""
        return self._prior

    @property
    def is_uniform_prior(self) -> bool:
        """Whether the prior was left uniform (``prior=None``)."""
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

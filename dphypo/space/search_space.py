"""Search spaces: the grid of all combinations of the axes and the prior π⁽⁰⁾ over that grid.

DP-HyPO (Wang et al. 2023, arXiv:2306.05734v2, Sec. 3.2 and App. C.2) works on a discretised hyperparameter
space Λ with the counting measure: every density is a vector over the grid points. A :class:`SearchSpace` is the
Cartesian product of its axes (:mod:`dphypo.space.axes`) in C order (the last axis varies fastest, as in
``numpy.ravel``), so grid point ``i`` is ``np.unravel_index(i, space.shape)``.

Pure numpy; no torch.
"""

from __future__ import annotations

import decimal
import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, TypeAlias

import numpy as np

from dphypo.privacy.validation import is_integer, is_real
from dphypo.space.axes import AXIS_TYPES, Axis, Choice, Float, Grid, Int, IntGrid, LogFloat, _integer, _readonly
from dphypo.space.parsing import MAX_AXIS_VALUES
from dphypo.space.privacy_axes import INTEGER_ROLES, check_privacy_roles, settings_of

__all__ = ["DEFAULT_OPTUNA_POINTS", "MAX_GRID_SIZE", "PriorSpec", "SearchSpace"]

#: Largest grid a SearchSpace accepts; densities are dense float64 vectors over the grid.
MAX_GRID_SIZE = 10_000_000

#: Values a continuous Optuna distribution is discretised to by :meth:`SearchSpace.from_optuna` (per-axis
#: override: ``points={name: k}``).
DEFAULT_OPTUNA_POINTS = 16

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
        privacy_roles: axis name → the privacy role it plays (``"batch_size"``, ``"epochs"`` or
            ``"noise_multiplier"``, :mod:`dphypo.space.privacy_axes`): axes that change a run's privacy, so that
            each grid point gets its own σ (:mod:`dphypo.privacy.heterogeneous`). Batch sizes and epochs must be
            integers ≥ 1 (e.g. an :class:`~dphypo.space.IntGrid` on a log scale), σ values > 0.

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

    __slots__ = ("_axes", "_prior", "_privacy_roles", "_shape", "_uniform_prior", "_unit")
    # Set once in __init__ through object.__setattr__ (the class refuses assignment); declared for type checkers.
    _axes: Mapping[str, Axis]
    _prior: np.ndarray
    _privacy_roles: Mapping[str, str]
    _shape: tuple[int, ...]
    _uniform_prior: bool
    _unit: np.ndarray | None

    def __init__(self, axes: Mapping[str, Axis], prior: PriorSpec = None,
                 privacy_roles: Mapping[str, str] | None = None) -> None:
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
        set_(self, "_privacy_roles", MappingProxyType(check_privacy_roles(axes, privacy_roles)))

    # -- immutability --------------------------------------------------------------------------------------
    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"SearchSpace is immutable; cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"SearchSpace is immutable; cannot delete {name!r}")

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickle by construction (mappingproxy is not picklable); needed to hand a space to worker processes.
        prior = None if self._uniform_prior else np.array(self._prior)
        return (SearchSpace, (dict(self._axes), prior, dict(self._privacy_roles) or None))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SearchSpace):
            return NotImplemented
        return (dict(self._axes) == dict(other._axes) and np.array_equal(self._prior, other._prior)
                and dict(self._privacy_roles) == dict(other._privacy_roles))

    def __hash__(self) -> int:
        return hash((tuple(self._axes.items()), self._prior.tobytes(), tuple(self._privacy_roles.items())))

    def __repr__(self) -> str:
        axes = ", ".join(f"{name}={axis!r}" for name, axis in self._axes.items())
        prior = "uniform" if self._uniform_prior else "custom"
        roles = f", privacy_roles={dict(self._privacy_roles)}" if self._privacy_roles else ""
        return f"SearchSpace({axes}; shape={self.shape}, size={self.size}, prior={prior}{roles})"

    def describe(self) -> dict[str, Any]:
        """The exact, JSON-ready identity of the space (every axis value, and the prior's digest).

        Unlike ``repr`` it abridges nothing, so two spaces with the same description are the same space; a
        journal seals it.

        Returns:
            ``{"axes": {name: {"type", "scale", "values"}}, "prior": "uniform" | {"sha256"}}``, and with
            privacy-affecting axes also ``"privacy_roles": {name: role}`` (absent otherwise, so a space without
            them describes itself as before).
        """
        axes = {name: {"type": type(axis).__name__, "scale": axis.scale, "values": list(axis.values)}
                for name, axis in self._axes.items()}
        out: dict[str, Any] = {"axes": axes, "prior": "uniform"}
        if not self._uniform_prior:
            digest = hashlib.sha256(np.ascontiguousarray(self._prior, dtype=np.float64).tobytes()).hexdigest()
            out["prior"] = {"sha256": digest}
        if self._privacy_roles:
            out["privacy_roles"] = dict(self._privacy_roles)
        return out

    # -- constructors --------------------------------------------------------------------------------------
    @classmethod
    def from_grid(
        cls,
        axis_values: Mapping[str, Sequence[Any] | np.ndarray],
        scales: Mapping[str, str],
        prior: PriorSpec = None,
        privacy_roles: Mapping[str, str] | None = None,
    ) -> SearchSpace:
        """Build a space from explicit per-axis values (e.g. a landscape ``.npz``'s ``axis_<name>`` arrays).

        Args:
            axis_values: name -> values (sorted, not necessarily evenly spaced), in grid order.
            scales: name -> ``'linear'`` / ``'log'`` (a :class:`Grid`) or ``'categorical'`` (:class:`Choice`).
            prior: as in :class:`SearchSpace`.
            privacy_roles: as in :class:`SearchSpace`; a numeric axis playing ``"batch_size"`` or ``"epochs"``
                becomes an :class:`~dphypo.space.IntGrid` (its values are then ints).

        Returns:
            The search space.
        """
        roles = dict(privacy_roles or {})
        if set(axis_values) != set(scales):
            names = f"{sorted(scales)} != {sorted(axis_values)}"
            raise ValueError(f"scales must name the same axes as axis_values, got {names}")
        axes: dict[str, Axis] = {}
        for name, values in axis_values.items():
            scale = scales[name]
            try:
                if scale == "categorical":
                    axes[name] = Choice(tuple(np.asarray(values).tolist()))
                elif roles.get(name) in INTEGER_ROLES:
                    axes[name] = IntGrid(tuple(np.asarray(values).tolist()), scale=str(scale))  # type: ignore
                else:
                    axes[name] = Grid(tuple(np.asarray(values).tolist()), scale=str(scale))  # type: ignore
            except (TypeError, ValueError) as err:
                raise type(err)(f"axis {name!r}: {err}") from err
        return cls(axes, prior=prior, privacy_roles=privacy_roles)

    @classmethod
    def from_optuna(
        cls,
        distributions: Mapping[str, Any],
        *,
        points: int | Mapping[str, int] = DEFAULT_OPTUNA_POINTS,
        prior: PriorSpec = None,
    ) -> SearchSpace:
        """Build a space from Optuna distributions (what ``trial.suggest_*`` declares), name by name.

        DP-HyPO samples a finite grid (every density is a vector over it), so each distribution becomes an axis:

        * ``FloatDistribution(low, high, log=True)`` (legacy ``LogUniformDistribution``) → :class:`LogFloat`
          with ``points`` values; without ``log`` (legacy ``UniformDistribution``) → :class:`Float`;
        * ``FloatDistribution(low, high, step=s)`` (legacy ``DiscreteUniformDistribution(q=s)``) → a linear
          :class:`Grid` of exactly ``low, low + s, ..., high``;
        * ``IntDistribution(low, high, step=s, log=...)`` (legacy ``IntUniformDistribution``,
          ``IntLogUniformDistribution``) → :class:`Int` with every value of the range;
        * ``CategoricalDistribution(choices)`` → :class:`Choice` in the order given;
        * a distribution with a single value (``low == high``) → ``Choice((low,))``; a dphypo axis is kept as is.

        Distributions are recognised by their class names and attributes (``low``, ``high``, ``log``, ``step``,
        ``q``, ``choices``): this layer never imports Optuna.

        Args:
            distributions: name → Optuna distribution (or dphypo axis); its order fixes the grid order.
            points: Values of each *continuous* distribution (≥ 2, at most ``MAX_AXIS_VALUES``), or a mapping
                name → values overriding the default (:data:`DEFAULT_OPTUNA_POINTS`) for the continuous
                distributions it names. A stepped, integer or categorical distribution keeps its exact values.
            prior: As in :class:`SearchSpace`.

        Returns:
            The search space.

        Raises:
            ValueError: An unknown distribution, ``points`` naming a parameter that is not continuous (or not
                there), or a stepped/integer distribution with more than ``MAX_AXIS_VALUES`` values (one line
                naming the parameter).

        Example:
            >>> from types import SimpleNamespace
            >>> from dphypo.space import SearchSpace
            >>> class FloatDistribution(SimpleNamespace): ...  # stands in for optuna.distributions's class
            >>> space = SearchSpace.from_optuna(
            ...     {"lr": FloatDistribution(low=1e-3, high=1e-1, log=True, step=None)}, points={"lr": 3})
            >>> space.axes["lr"]
            LogFloat(low=0.001, high=0.1, num=3)
        """
        if not isinstance(distributions, Mapping):
            raise TypeError(f"distributions must be a mapping from name to Optuna distribution, got {distributions!r}")
        per_axis = _optuna_points(points, distributions)
        axes: dict[str, Axis] = {}
        for name, distribution in distributions.items():
            try:
                axes[name] = _axis_from_optuna(name, distribution, per_axis.get(name))
            except (TypeError, ValueError) as err:
                raise type(err)(f"distributions[{name!r}]: {err}") from err
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

    # -- privacy-affecting axes ----------------------------------------------------------------------------
    @property
    def privacy_roles(self) -> Mapping[str, str]:
        """Read-only mapping axis name → privacy role (:mod:`dphypo.space.privacy_axes`), in axis order."""
        return self._privacy_roles

    @property
    def changes_privacy(self) -> bool:
        """Whether some axis changes a run's privacy (then every distinct setting needs its own σ)."""
        return bool(self._privacy_roles)

    def privacy_settings(self) -> tuple[tuple[dict[str, int | float], ...], np.ndarray]:
        """The grid's distinct privacy settings and the setting of each grid point.

        What part of the pipeline computes each grid point's (q_i, steps_i) from: one
        :class:`~dphypo.privacy.heterogeneous.CandidateRun` per setting
        (:func:`~dphypo.space.privacy_axes.candidate_runs`), one σ_i per setting, and ``point_setting`` maps a grid
        index to it (hyperparameters that do not change privacy, e.g. lr × clip, share a setting).

        Returns:
            ``(settings, point_setting)``: settings as ``{role: value}`` dicts (ints for batch size and epochs,
            floats for σ) in first-seen grid order (one empty dict without privacy axes), and an int64 array of
            shape ``(size,)``, read-only.
        """
        columns = {name: self.grid_values(name) for name in self._privacy_roles}
        settings, point_setting = settings_of(self._privacy_roles, columns)
        if not self._privacy_roles:
            point_setting = np.zeros(self.size, dtype=np.int64)
        return settings, _readonly(point_setting)

    # -- prior ---------------------------------------------------------------------------------------------
    def _normalised_prior(self, prior: PriorSpec) -> np.ndarray:
        n = self.size
        if prior is None:
            return np.full(n, 1.0 / n)
        if callable(prior):
            weights = np.empty(n, dtype=np.float64)
            for i in range(n):
                w = prior(self.params(i))
                if not is_real(w):
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


# -- Optuna distributions (duck-typed: this layer never imports optuna) ----------------------------------------
_OPTUNA_FLOATS = frozenset({"FloatDistribution", "UniformDistribution", "LogUniformDistribution",
                            "DiscreteUniformDistribution"})
_OPTUNA_INTS = frozenset({"IntDistribution", "IntUniformDistribution", "IntLogUniformDistribution"})
_OPTUNA_LOG = frozenset({"LogUniformDistribution", "IntLogUniformDistribution"})
_OPTUNA_KNOWN = "FloatDistribution, IntDistribution, CategoricalDistribution (or a legacy Uniform/LogUniform/" \
                "DiscreteUniform/IntUniform/IntLogUniformDistribution) or a dphypo axis"


def _optuna_points(points: int | Mapping[str, int], distributions: Mapping[str, Any]) -> dict[str, int | None]:
    """Per parameter: the number of values of a continuous distribution, ``None`` where ``points`` has no say."""
    if isinstance(points, Mapping):
        default, given = DEFAULT_OPTUNA_POINTS, dict(points)
        unknown = [name for name in given if name not in distributions]
        if unknown:
            raise ValueError(f"points names {unknown[0]!r}, which is not one of the distributions "
                             f"{list(distributions)}")
    else:
        default, given = points, {}
    result: dict[str, int | None] = {}
    for name, distribution in distributions.items():
        k = given.get(name, default)
        if not (is_integer(k) and 2 <= int(k) <= MAX_AXIS_VALUES):
            what = f"points[{name!r}]" if name in given else "points"
            raise ValueError(f"{what} must be an integer in [2, {MAX_AXIS_VALUES}], got {k!r}")
        continuous = _optuna_kind(distribution) == "float" and _optuna_step(distribution) is None
        if name in given and not continuous:
            raise ValueError(f"points[{name!r}] applies to a continuous distribution only; {name!r} is "
                             f"{type(distribution).__name__}, whose values are exact")
        result[name] = int(k) if continuous else None
    return result


def _optuna_kind(distribution: Any) -> str | None:
    """``"float"``, ``"int"``, ``"categorical"`` or ``"axis"`` by the class names of ``distribution`` (MRO)."""
    if isinstance(distribution, AXIS_TYPES):
        return "axis"
    names = {klass.__name__ for klass in type(distribution).__mro__}
    if names & _OPTUNA_FLOATS:
        return "float"
    if names & _OPTUNA_INTS:
        return "int"
    if "CategoricalDistribution" in names:
        return "categorical"
    return None


def _optuna_step(distribution: Any) -> Any:
    """The distribution's step (legacy ``q``), ``None`` for a continuous one."""
    step = getattr(distribution, "step", None)
    return getattr(distribution, "q", None) if step is None else step


def _optuna_log(distribution: Any) -> bool:
    names = {klass.__name__ for klass in type(distribution).__mro__}
    return bool(getattr(distribution, "log", bool(names & _OPTUNA_LOG)))


def _axis_from_optuna(name: str, distribution: Any, points: int | None) -> Axis:
    """The dphypo axis of one Optuna distribution (see :meth:`SearchSpace.from_optuna`)."""
    kind = _optuna_kind(distribution)
    if kind == "axis":
        return distribution
    if kind == "categorical":
        choices = getattr(distribution, "choices", None)
        if isinstance(choices, str | bytes) or not isinstance(choices, Sequence):
            raise ValueError(f"{type(distribution).__name__} has no sequence of choices")
        return Choice(tuple(choices))
    if kind is None or not (hasattr(distribution, "low") and hasattr(distribution, "high")):
        raise ValueError(f"unsupported distribution {type(distribution).__name__}; expected {_OPTUNA_KNOWN}")
    low, high, log, step = distribution.low, distribution.high, _optuna_log(distribution), _optuna_step(distribution)
    if kind == "int":
        return _int_axis(name, low, high, 1 if step is None else step, log)
    if step is not None:
        if log:
            raise ValueError("a float distribution cannot have both log=True and a step")
        return _stepped_axis(low, high, step)
    if low == high:
        return Choice((float(low),))
    return (LogFloat if log else Float)(low, high, points if points is not None else DEFAULT_OPTUNA_POINTS)


def _integral(value: Any, what: str) -> int:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return _integer(value, what)


def _int_axis(name: str, low: Any, high: Any, step: Any, log: bool) -> Axis:
    lo, hi, s = _integral(low, "low"), _integral(high, "high"), _integral(step, "step")
    if s < 1:
        raise ValueError(f"step must be >= 1, got {s}")
    if hi < lo:
        raise ValueError(f"low must be <= high, got low={lo}, high={hi}")
    count = (hi - lo) // s + 1  # Optuna's own rounding: high becomes the last value of the lattice
    if count > MAX_AXIS_VALUES:
        raise ValueError(f"the integer range {lo}..{hi} (step {s}) has {count} values; at most {MAX_AXIS_VALUES} "
                         f"per axis (use a larger step, or pass a dphypo axis for {name!r})")
    if count == 1:
        return Choice((lo,))
    return Int(lo, lo + (count - 1) * s, s, log=log)


def _stepped_axis(low: Any, high: Any, step: Any) -> Axis:
    """The exact lattice ``low, low + step, ..., ≤ high``, in decimal arithmetic (0.1 · 3 is 0.3, not 0.30…04)."""
    try:
        lo, hi, s = (decimal.Decimal(repr(float(v))) for v in (low, high, step))
    except (TypeError, ValueError, decimal.InvalidOperation):
        raise ValueError(f"low, high and step must be finite numbers, got {low!r}, {high!r}, {step!r}") from None
    if not (lo.is_finite() and hi.is_finite() and s.is_finite()) or s <= 0 or hi < lo:
        raise ValueError(f"needs finite low <= high and step > 0, got low={low!r}, high={high!r}, step={step!r}")
    if hi - lo >= s * MAX_AXIS_VALUES:  # refused before the exact count (a huge quotient overflows the context)
        raise ValueError(f"low={low!r}..high={high!r} in steps of {step!r} has about {(hi - lo) / s + 1:.4g} "
                         f"values; at most {MAX_AXIS_VALUES} per axis (use a larger step)")
    count = int((hi - lo) // s) + 1
    values = tuple(float(lo + k * s) for k in range(count))
    return Choice(values) if count == 1 else Grid(values, scale="linear")

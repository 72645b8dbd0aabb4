"""Tests for SearchSpace.from_optuna: Optuna distributions → dphypo axes, read by class name and attributes only.

The stand-in classes below carry the names and attributes of ``optuna.distributions``'s classes (the legacy ones as
Optuna < 3 defined them, without ``log``/``step``), so these tests need no Optuna and prove that the space layer
never imports it; tests/integrations/test_optuna.py converts the real classes.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from dphypo.space import MAX_AXIS_VALUES, Choice, Float, Grid, Int, LogFloat, SearchSpace
from dphypo.space.search_space import DEFAULT_OPTUNA_POINTS


class BaseDistribution:
    def __init__(self, **attributes: object) -> None:
        vars(self).update(attributes)


class FloatDistribution(BaseDistribution):
    def __init__(self, low: float, high: float, log: bool = False, step: float | None = None) -> None:
        super().__init__(low=float(low), high=float(high), log=log, step=step)


class IntDistribution(BaseDistribution):
    def __init__(self, low: int, high: int, log: bool = False, step: int = 1) -> None:
        super().__init__(low=low, high=high, log=log, step=step)


class CategoricalDistribution(BaseDistribution):
    def __init__(self, choices: tuple) -> None:
        super().__init__(choices=tuple(choices))


# Optuna < 3: separate classes with only low/high (and q or step).
class UniformDistribution(BaseDistribution):
    pass


class LogUniformDistribution(BaseDistribution):
    pass


class DiscreteUniformDistribution(BaseDistribution):
    pass


class IntUniformDistribution(BaseDistribution):
    pass


class IntLogUniformDistribution(BaseDistribution):
    pass


@pytest.mark.parametrize(
    ("distribution", "axis"),
    [
        (FloatDistribution(1e-4, 1e-1, log=True), LogFloat(1e-4, 1e-1, DEFAULT_OPTUNA_POINTS)),
        (FloatDistribution(0.1, 2.0), Float(0.1, 2.0, DEFAULT_OPTUNA_POINTS)),
        (FloatDistribution(0.0, 0.5, step=0.1), Grid((0.0, 0.1, 0.2, 0.3, 0.4, 0.5))),
        (IntDistribution(8, 64, step=8), Int(8, 64, 8)),
        (IntDistribution(16, 256, log=True), Int(16, 256, log=True)),
        (CategoricalDistribution(("sgd", "adam", None)), Choice(("sgd", "adam", None))),
        (UniformDistribution(low=0.0, high=1.0), Float(0.0, 1.0, DEFAULT_OPTUNA_POINTS)),
        (LogUniformDistribution(low=1e-3, high=1.0), LogFloat(1e-3, 1.0, DEFAULT_OPTUNA_POINTS)),
        (DiscreteUniformDistribution(low=0.0, high=1.0, q=0.25), Grid((0.0, 0.25, 0.5, 0.75, 1.0))),
        (IntUniformDistribution(low=1, high=9, step=2), Int(1, 9, 2)),
        (IntLogUniformDistribution(low=1, high=8, step=1), Int(1, 8, log=True)),
        (FloatDistribution(3.0, 3.0), Choice((3.0,))),  # a single value: a fixed parameter
        (IntDistribution(5, 5), Choice((5,))),
        (LogFloat(1e-3, 1.0, 4), LogFloat(1e-3, 1.0, 4)),  # a dphypo axis is kept
    ],
    ids=lambda x: type(x).__name__,
)
def test_each_distribution_becomes_its_axis(distribution: object, axis: object) -> None:
    space = SearchSpace.from_optuna({"x": distribution})
    assert space.axes["x"] == axis


def test_a_stepped_float_is_its_exact_lattice_and_high_is_rounded_down_like_optuna() -> None:
    values = SearchSpace.from_optuna({"d": FloatDistribution(0.0, 1.0, step=0.3)}).axes["d"].values
    assert values == (0.0, 0.3, 0.6, 0.9)  # decimal arithmetic: 0.3, not 0.30000000000000004
    assert SearchSpace.from_optuna({"n": IntDistribution(0, 10, step=3)}).axes["n"].values == (0, 3, 6, 9)


def test_points_discretise_continuous_distributions_globally_or_per_name() -> None:
    distributions = {"lr": FloatDistribution(1e-3, 1.0, log=True), "clip": FloatDistribution(0.5, 2.0),
                     "units": IntDistribution(1, 3), "opt": CategoricalDistribution(("a", "b"))}
    assert SearchSpace.from_optuna(distributions, points=5).shape == (5, 5, 3, 2)
    space = SearchSpace.from_optuna(distributions, points={"lr": 20})
    assert space.shape == (20, DEFAULT_OPTUNA_POINTS, 3, 2) and space.names == ("lr", "clip", "units", "opt")
    assert space.axes["lr"] == LogFloat(1e-3, 1.0, 20)


def test_the_prior_is_passed_on() -> None:
    space = SearchSpace.from_optuna({"opt": CategoricalDistribution(("a", "b"))}, prior=[3.0, 1.0])
    assert space.prior.tolist() == [0.75, 0.25] and not space.is_uniform_prior


@pytest.mark.parametrize(
    ("distributions", "points", "error", "message"),
    [
        ({"x": object()}, 16, ValueError, r"^distributions\['x'\]: unsupported distribution object; expected "),
        ({"x": BaseDistribution(low=0, high=1)}, 16, ValueError, r"^distributions\['x'\]: unsupported distribution"),
        ({"x": FloatDistribution(0.0, 1.0, step=1e-9)}, 16, ValueError,
         rf"^distributions\['x'\]: .* about 1\.000e\+9 values; at most {MAX_AXIS_VALUES} per axis"),
        ({"x": FloatDistribution(0.0, 1e300, step=1e-300)}, 16, ValueError, r"^distributions\['x'\]: .* 1\.000e\+600"),
        ({"n": IntDistribution(0, 10**6)}, 16, ValueError,
         rf"^distributions\['n'\]: the integer range 0\.\.1000000 \(step 1\) has 1000001 values; at most "
         rf"{MAX_AXIS_VALUES}"),
        ({"x": FloatDistribution(1e-3, 1.0, log=True, step=0.1)}, 16, ValueError,
         r"^distributions\['x'\]: a float distribution cannot have both log=True and a step"),
        ({"x": FloatDistribution(0.0, float("inf"))}, 16, ValueError, r"^distributions\['x'\]: high must be finite"),
        ({"x": CategoricalDistribution((1, 1))}, 16, ValueError, r"^distributions\['x'\]: values must be distinct"),
        ({"x": FloatDistribution(0.0, 1.0)}, 1, ValueError, r"^points must be an integer in \[2, 10000\], got 1$"),
        ({"x": FloatDistribution(0.0, 1.0)}, True, ValueError, r"^points must be an integer"),
        ({"x": FloatDistribution(0.0, 1.0)}, {"y": 4}, ValueError, r"^points names 'y', which is not one of"),
        ({"x": FloatDistribution(0.0, 1.0)}, {"x": 10**6}, ValueError, r"^points\['x'\] must be an integer"),
        ({"n": IntDistribution(1, 9)}, {"n": 4}, ValueError,
         r"^points\['n'\] applies to a continuous distribution only; 'n' is IntDistribution"),
        ({"x": FloatDistribution(0.0, 1.0, step=0.5)}, {"x": 4}, ValueError, r"^points\['x'\] applies to a continuous"),
        ([FloatDistribution(0.0, 1.0)], 16, TypeError, r"^distributions must be a mapping"),
    ],
)
def test_refusals_are_one_line_and_name_the_parameter(distributions: object, points: object, error: type,
                                                      message: str) -> None:
    with pytest.raises(error, match=message) as caught:
        SearchSpace.from_optuna(distributions, points=points)  # type: ignore[arg-type]
    assert "\n" not in str(caught.value)


def test_a_grid_too_large_in_all_is_refused_by_the_space() -> None:
    big = {f"x{k}": FloatDistribution(0.0, 1.0) for k in range(4)}
    with pytest.raises(ValueError, match="the grid has 100000000 points"):
        SearchSpace.from_optuna(big, points=100)


def test_from_optuna_imports_no_optuna() -> None:
    code = ("import sys; from dphypo.space import SearchSpace; from types import SimpleNamespace as N\n"
            "class CategoricalDistribution(N): pass\n"
            "SearchSpace.from_optuna({'o': CategoricalDistribution(choices=('a', 'b'))})\n"
            "print('optuna' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"

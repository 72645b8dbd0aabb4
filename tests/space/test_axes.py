"""Tests for dphypo.space.axes: values, unit coordinates, validation and the cleaning of computed grid values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dphypo.space import Choice, Float, Grid, Int, LogFloat, clean_values


# -- axes ----------------------------------------------------------------------------------------------------
def test_mnist_axes_match_the_paper() -> None:
    # DP-HyPO App. E.1: lr 1e-4..10 by 10^(1/3) (16 values), clip 0.3..6 by 0.3 (20 values)
    lr = np.array(LogFloat(1e-4, 10.0, 16).values)
    # 12 significant digits (clean_values)
    np.testing.assert_allclose(lr, 1e-4 * 10.0 ** (np.arange(16) / 3), rtol=1e-12)
    np.testing.assert_allclose(Float(0.3, 6.0, 20).values, 0.3 * np.arange(1, 21), rtol=1e-12)
    assert (lr[0], lr[-1]) == (1e-4, 10.0)
    assert len(LogFloat(1e-4, 10.0, 16)) == 16 and len(Float(0.3, 6.0, 20)) == 20


def test_int_and_choice_values() -> None:
    assert Int(2, 10, step=4).values == (2, 6, 10)
    assert Int(1, 3).values == (1, 2, 3)
    assert Choice(("sgd", "adam", None)).values == ("sgd", "adam", None)
    assert Grid([1, 2.5, 7]).values == (1.0, 2.5, 7.0)


def test_unit_maps_log_axes_in_log_space() -> None:
    np.testing.assert_allclose(LogFloat(1e-4, 1.0, 5).unit(LogFloat(1e-4, 1.0, 5).values), [0, 0.25, 0.5, 0.75, 1])
    np.testing.assert_allclose(Grid([1.0, 10.0, 1000.0], scale="log").unit([1.0, 10.0, 1000.0]), [0, 1 / 3, 1])
    np.testing.assert_allclose(Grid([1.0, 10.0, 1000.0]).unit([1.0, 10.0, 1000.0]), [0, 9 / 999, 1])
    np.testing.assert_allclose(Int(64, 256, 64, log=True).unit([64, 128, 256]), [0, 0.5, 1])
    np.testing.assert_allclose(Choice(("a", "b", "c")).unit(["c", "a"]), [1.0, 0.0])
    np.testing.assert_array_equal(Choice(("only",)).unit(["only"]), [0.5])


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: LogFloat(0.0, 1.0, 3), "low must be > 0"),
        (lambda: LogFloat(-1.0, 1.0, 3), "low must be > 0"),
        (lambda: LogFloat(1.0, 1.0, 3), "low must be < high"),
        (lambda: Float(2.0, 1.0, 3), "low must be < high"),
        (lambda: Float(0.0, 1.0, 1), "num must be >= 2"),
        (lambda: Float(0.0, math.inf, 3), "high must be finite"),
        (lambda: Float(math.nan, 1.0, 3), "low must be finite"),
        (lambda: Int(1, 10, step=2), "multiple of step"),
        (lambda: Int(5, 5), "low must be < high"),
        (lambda: Int(1, 5, step=0), "step must be >= 1"),
        (lambda: Int(0, 8, log=True), "low must be >= 1"),
        (lambda: Choice(()), "must not be empty"),
        (lambda: Choice((1, 2, 1)), "distinct"),
        (lambda: Choice((0.5, math.nan)), "finite"),
        (lambda: Grid([1.0]), "at least 2"),
        (lambda: Grid([1.0, 3.0, 2.0]), "strictly increasing"),
        (lambda: Grid([1.0, 1.0]), "strictly increasing"),
        (lambda: Grid([0.0, 1.0], scale="log"), "must be positive"),
        (lambda: Grid([1.0, math.inf]), "finite"),
        (lambda: Grid([1.0, 2.0], scale="cubic"), "scale must be"),  # type: ignore[arg-type]
    ],
)
def test_axis_errors_are_friendly(make: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make()  # type: ignore[operator]


@pytest.mark.parametrize(
    "make", [lambda: Float(0, 1, 2.5), lambda: Int(0.0, 3), lambda: Choice("abc"), lambda: Choice(([1],))]
)
def test_axis_type_errors(make: object) -> None:
    with pytest.raises(TypeError):
        make()  # type: ignore[operator]


def test_computed_grid_values_print_as_the_grid_defines_them() -> None:
    # issue #12: a released clipping norm printed as 2.0999999999999996 (numpy.linspace round-off).
    clip = Float(0.3, 6.0, 20).values
    assert clip[6] == 2.1 and repr(clip[6]) == "2.1"
    assert all(len(repr(v)) <= 5 for v in clip)  # 0.3, 0.6, ..., 6.0 exactly as typed
    lr = LogFloat(1e-4, 10.0, 16).values
    assert lr[3] == 0.001 and lr[6] == 0.01 and repr(lr[1]) == "0.000215443469003"
    assert (lr[0], lr[-1]) == (1e-4, 10.0)
    assert clean_values([0.1 + 0.2, 1.0]) == (0.3, 1.0)
    # Values closer than the rounding are left alone rather than merged.
    tight = (1.0, 1.0 + 1e-14, 1.0 + 2e-14)
    assert clean_values(tight) == tight

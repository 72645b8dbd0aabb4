"""Tests for dphypo.space.SearchSpace: grid order, params/index, unit coordinates, prior handling and errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dphypo.space import Choice, Float, Grid, Int, LogFloat, SearchSpace


def mnist_space(prior: object = None) -> SearchSpace:
    """The DP-HyPO MNIST grid (App. E.1): lr 1e-4..10 by 10^(1/3) (16) × clip 0.3..6 by 0.3 (20)."""
    return SearchSpace({"lr": LogFloat(1e-4, 10.0, 16), "clip": Float(0.3, 6.0, 20)}, prior=prior)


def test_mnist_grid_shape_and_names() -> None:
    space = mnist_space()
    assert space.shape == (16, 20) and space.size == 320 and space.ndim == 2
    assert space.names == ("lr", "clip")


# -- grid order, params and index ----------------------------------------------------------------------------
def small_space() -> SearchSpace:
    return SearchSpace(
        {"lr": LogFloat(1e-3, 1e-1, 3), "bs": Int(16, 64, 16), "opt": Choice(("sgd", "adam"))}
    )


def test_grid_order_matches_numpy_ravel() -> None:
    space = small_space()
    assert space.shape == (3, 4, 2)
    mesh = np.meshgrid(*(np.array(a.values, dtype=object) for a in space.axes.values()), indexing="ij")
    for i in range(space.size):
        expected = {name: m.ravel()[i] for name, m in zip(space.names, mesh, strict=True)}
        assert space.params(i) == expected
        np.testing.assert_array_equal(np.unravel_index(i, space.shape), [
            space.axes[name].index_of(expected[name]) for name in space.names])
    for name, m in zip(space.names, mesh, strict=True):
        assert list(space.grid_values(name)) == list(m.ravel())


def test_params_return_python_scalars() -> None:
    params = small_space().params(7)
    assert type(params["lr"]) is float and type(params["bs"]) is int and params["opt"] in ("sgd", "adam")


def test_params_index_round_trip() -> None:
    space = small_space()
    assert [space.index(space.params(i)) for i in range(space.size)] == list(range(space.size))


def test_index_tolerates_float_round_off_only() -> None:
    space = mnist_space()
    assert space.index({"lr": 1e-4 * 10 ** (5 / 3), "clip": 0.1 + 0.2}) == 5 * 20 + 0
    assert space.index({"lr": 10.0 * (1 + 1e-12), "clip": 6}) == 319
    with pytest.raises(ValueError, match=r"params\['lr'\].*not a grid value"):
        space.index({"lr": 1.01e-4, "clip": 0.3})
    with pytest.raises(ValueError, match=r"params\['clip'\].*not a grid value"):
        space.index({"lr": 1e-4, "clip": 0.45})


def test_index_errors() -> None:
    space = small_space()
    with pytest.raises(ValueError, match=r"missing \['opt'\], unknown \['momentum'\]"):
        space.index({"lr": 1e-3, "bs": 16, "momentum": 0.9})
    with pytest.raises(ValueError, match=r"params\['bs'\]"):
        space.index({"lr": 1e-3, "bs": 20, "opt": "sgd"})
    with pytest.raises(ValueError, match=r"params\['opt'\].*not one of the choices"):
        space.index({"lr": 1e-3, "bs": 16, "opt": "rmsprop"})
    with pytest.raises(ValueError, match=r"params\['lr'\]"):
        space.index({"lr": -1.0, "bs": 16, "opt": "sgd"})
    assert space.index({"lr": 1e-2, "bs": 32.0, "opt": "adam"}) == space.index({"lr": 1e-2, "bs": 32, "opt": "adam"})
    with pytest.raises(ValueError, match="index must be in"):
        space.params(space.size)
    with pytest.raises(ValueError, match="index must be in"):
        space.params(-1)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=4), st.data())
def test_round_trip_on_random_spaces(sizes: list[int], data: st.DataObject) -> None:
    axes: dict[str, object] = {}
    for k, size in enumerate(sizes):
        if size == 1:
            axes[f"x{k}"] = Choice((f"v{k}",))
        elif data.draw(st.booleans()):
            axes[f"x{k}"] = LogFloat(1e-3, 10.0 ** data.draw(st.integers(-2, 3)), size)
        else:
            axes[f"x{k}"] = Int(0, 3 * (size - 1), 3)
    space = SearchSpace(axes)  # type: ignore[arg-type]
    assert space.size == math.prod(sizes)
    for i in range(space.size):
        assert space.index(space.params(i)) == i
    u = space.unit_coordinates
    assert u.shape == (space.size, len(sizes)) and np.all((u >= 0) & (u <= 1))


# -- unit coordinates ----------------------------------------------------------------------------------------
def test_unit_coordinates_endpoints_and_log_spacing() -> None:
    space = mnist_space()
    u = space.unit_coordinates
    assert u.shape == (320, 2) and u.dtype == np.float64
    assert u[0].tolist() == [0.0, 0.0] and u[-1].tolist() == [1.0, 1.0]
    lr_units = u[::20, 0]  # lr varies slowest: every 20th point steps lr
    np.testing.assert_allclose(np.diff(lr_units), 1 / 15, rtol=1e-11)  # log-spaced -> even in log space (12 digits)
    np.testing.assert_allclose(u[:20, 1], np.arange(20) / 19, rtol=1e-12, atol=1e-15)
    assert space.unit_coordinates is u  # cached


def test_cached_arrays_are_read_only_and_space_is_immutable() -> None:
    space = mnist_space()
    with pytest.raises(ValueError, match="read-only"):
        space.unit_coordinates[0, 0] = 0.5
    with pytest.raises(ValueError, match="read-only"):
        space.prior[0] = 0.5
    with pytest.raises(AttributeError, match="immutable"):
        space.foo = 1  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        space.axes["lr"] = Float(0, 1, 2)  # type: ignore[index]
    with pytest.raises(AttributeError):
        space.axes["lr"].num = 3  # type: ignore[misc]


# -- prior ---------------------------------------------------------------------------------------------------
def test_uniform_prior_by_default() -> None:
    space = mnist_space()
    np.testing.assert_allclose(space.prior, 1 / 320, rtol=1e-15)
    assert space.prior.shape == (320,) and space.is_uniform_prior


def test_prior_array_grid_shaped_flat_and_callable_agree_and_normalise() -> None:
    lr = np.array(LogFloat(1e-4, 10.0, 16).values)
    weights = np.outer(1.0 / (1.0 + np.abs(np.log10(lr) + 2)), np.ones(20))  # favour lr near 1e-2
    grid_shaped = mnist_space(prior=weights * 7.0)
    flat = mnist_space(prior=weights.ravel())
    func = mnist_space(prior=lambda p: 1.0 / (1.0 + abs(math.log10(p["lr"]) + 2)))
    expected = weights.ravel() / weights.sum()
    for space in (grid_shaped, flat, func):
        np.testing.assert_allclose(space.prior, expected, rtol=1e-12)
        assert abs(space.prior.sum() - 1.0) <= 1e-15 and not space.is_uniform_prior


@pytest.mark.parametrize(
    ("prior", "match"),
    [
        (np.r_[0.0, np.ones(319)], "strictly positive"),
        (np.r_[-1.0, np.ones(319)], "strictly positive"),
        (np.r_[np.nan, np.ones(319)], "strictly positive"),
        (np.ones(319), "prior must have shape"),
        (np.ones((20, 16)), "prior must have shape"),
        (lambda p: 0.0 if p["clip"] > 5 else 1.0, r"strictly positive.*'clip': 5\.1"),
    ],
)
def test_bad_priors_are_rejected(prior: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        mnist_space(prior=prior)


def test_prior_callable_must_return_a_number() -> None:
    with pytest.raises(TypeError, match="must return a real number"):
        mnist_space(prior=lambda p: "high")


# -- constructors, equality, repr ----------------------------------------------------------------------------
def test_from_grid_accepts_uneven_grids_like_landscapes() -> None:
    space = SearchSpace.from_grid(
        {"lr": np.array([1e-4, 3e-4, 1e-2, 1.0]), "clip": np.array([0.0, 0.5, 2.0]), "opt": ["sgd", "adam"]},
        {"lr": np.str_("log"), "clip": "linear", "opt": "categorical"},
    )
    assert space.shape == (4, 3, 2)
    assert isinstance(space.axes["lr"], Grid) and space.axes["lr"].scale == "log"
    assert type(space.axes["lr"].scale) is str
    np.testing.assert_allclose(space.axes["lr"].unit([1e-4, 1e-2, 1.0]), [0, 0.5, 1])
    assert space.params(space.size - 1) == {"lr": 1.0, "clip": 2.0, "opt": "adam"}


def test_from_grid_errors_name_the_axis() -> None:
    with pytest.raises(ValueError, match="same axes"):
        SearchSpace.from_grid({"lr": [1.0, 2.0]}, {"clip": "linear"})
    with pytest.raises(ValueError, match=r"axis 'lr'.*strictly increasing"):
        SearchSpace.from_grid({"lr": [2.0, 1.0]}, {"lr": "log"})
    with pytest.raises(ValueError, match=r"axis 'lr'.*scale must be"):
        SearchSpace.from_grid({"lr": [1.0, 2.0]}, {"lr": "ln"})


def test_space_errors() -> None:
    with pytest.raises(ValueError, match="at least one axis"):
        SearchSpace({})
    with pytest.raises(TypeError, match="must be Grid, LogFloat"):
        SearchSpace({"lr": (1e-3, 1e-1)})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="non-empty strings"):
        SearchSpace({"": Float(0, 1, 2)})
    with pytest.raises(ValueError, match="at most"):
        SearchSpace({f"x{k}": Int(0, 99) for k in range(4)})


def test_equality_hash_and_repr() -> None:
    a, b = mnist_space(), mnist_space()
    assert a == b and hash(a) == hash(b)
    assert a != mnist_space(prior=np.arange(1.0, 321.0))
    text = repr(small_space())
    assert text.startswith("SearchSpace(lr=LogFloat(low=0.001, high=0.1, num=3), bs=Int(")
    assert "shape=(3, 4, 2), size=24, prior=uniform" in text
    assert repr(Grid(np.linspace(1, 2, 50))) == "Grid((1, 1.02041, 1.04082, ..., 2), scale='linear', num=50)"


def test_grid_values_errors_and_dtypes() -> None:
    space = small_space()
    assert space.grid_values("opt").dtype == object
    assert space.grid_values("bs").dtype.kind == "i"
    with pytest.raises(ValueError, match="name must be one of"):
        space.grid_values("momentum")


def test_search_space_pickles_by_construction() -> None:
    import pickle

    space = SearchSpace({"lr": LogFloat(1e-3, 1.0, 4), "opt": Choice(("sgd", "adam"))}, prior=np.arange(1.0, 9.0))
    clone = pickle.loads(pickle.dumps(space))
    assert clone == space and clone.params(5) == space.params(5)
    np.testing.assert_array_equal(clone.prior, space.prior)

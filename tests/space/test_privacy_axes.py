"""Privacy-affecting axes: IntGrid, roles on a SearchSpace, their checks, settings and unit coordinates."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from dphypo.privacy.heterogeneous import opacus_sample_rate, opacus_steps
from dphypo.space import Choice, Grid, Int, IntGrid, LogFloat, SearchSpace, candidate_runs


def _space(**roles: str) -> SearchSpace:
    axes = {
        "lr": LogFloat(1e-3, 1e-1, 3),
        "batch": IntGrid((32, 64, 128), scale="log"),
        "epochs": IntGrid((5, 10, 20), scale="log"),
    }
    return SearchSpace(axes, privacy_roles=roles or {"batch": "batch_size", "epochs": "epochs"})


def test_int_grid_keeps_ints_and_measures_log_distances() -> None:
    axis = IntGrid((32, 64.0, 128), scale="log")
    assert axis.values == (32, 64, 128) and all(type(v) is int for v in axis.values)
    np.testing.assert_allclose(axis.grid_unit(), [0.0, 0.5, 1.0])  # each doubling one equal step
    np.testing.assert_allclose(IntGrid((1, 2, 4)).grid_unit(), [0.0, 1 / 3, 1.0])  # linear by default
    assert axis.index_of(64) == 1 and axis.index_of(64.0) == 1
    with pytest.raises(ValueError, match="not a grid value"):
        axis.index_of(65)


@pytest.mark.parametrize(
    ("values", "scale", "error", "message"),
    [
        ((32, 32), "linear", ValueError, "strictly increasing"),
        ((1.5, 3), "linear", TypeError, r"values\[0\] must be an integer, got 1.5"),
        ((True, 3), "linear", TypeError, r"values\[0\] must be an integer, got True"),
        ((0, 4), "log", ValueError, "positive"),
        ((4,), "linear", ValueError, "at least 2"),
    ],
)
def test_int_grid_refuses_bad_values(values: tuple, scale: str, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        IntGrid(values, scale=scale)  # type: ignore[arg-type]


def test_roles_are_exposed_described_and_pickled() -> None:
    space = _space()
    assert dict(space.privacy_roles) == {"batch": "batch_size", "epochs": "epochs"}
    assert space.changes_privacy
    description = space.describe()
    assert description["privacy_roles"] == {"batch": "batch_size", "epochs": "epochs"}
    assert description["axes"]["batch"] == {"type": "IntGrid", "scale": "log", "values": [32, 64, 128]}
    assert "privacy_roles" not in SearchSpace({"lr": LogFloat(1e-3, 1e-1, 3)}).describe()  # unchanged without
    assert pickle.loads(pickle.dumps(space)) == space
    assert space != SearchSpace(dict(space.axes))  # the roles are part of the space's identity
    assert "privacy_roles" in repr(space)


def test_privacy_settings_are_the_distinct_combinations_in_grid_order() -> None:
    space = _space()
    settings, point_setting = space.privacy_settings()
    assert len(settings) == 9
    assert settings[0] == {"batch_size": 32, "epochs": 5}
    assert all(type(v) is int for s in settings for v in s.values())
    for index in range(space.size):  # every grid point maps to its own batch and epochs
        params = space.params(index)
        assert settings[point_setting[index]] == {"batch_size": params["batch"], "epochs": params["epochs"]}
    assert not point_setting.flags.writeable


def test_candidate_runs_use_opacus_arithmetic_and_fixed_values() -> None:
    settings, _ = _space().privacy_settings()
    runs = candidate_runs(settings, 1437)
    assert runs[0].name == "batch_size=32, epochs=5"
    assert runs[0].sample_rate == opacus_sample_rate(1437, 32) and runs[0].steps == opacus_steps(1437, 32, 5)
    only_batch = SearchSpace({"batch": IntGrid((64, 128))}, privacy_roles={"batch": "batch_size"})
    runs = candidate_runs(only_batch.privacy_settings()[0], 1437, epochs=10)
    assert [r.steps for r in runs] == [opacus_steps(1437, 64, 10), opacus_steps(1437, 128, 10)]
    with pytest.raises(ValueError, match="epochs must be given when no axis plays the 'epochs' role"):
        candidate_runs(only_batch.privacy_settings()[0], 1437)
    with pytest.raises(ValueError, match=r"batch_size must be <= n_train \(100\), got 128"):
        candidate_runs(only_batch.privacy_settings()[0], 100, epochs=1)


def test_a_space_without_privacy_axes_has_one_setting() -> None:
    space = SearchSpace({"lr": LogFloat(1e-3, 1e-1, 3)})
    settings, point_setting = space.privacy_settings()
    assert settings == ({},) and point_setting.tolist() == [0, 0, 0] and not space.changes_privacy


@pytest.mark.parametrize(
    ("axis", "role", "message"),
    [
        (Int(0, 4), "batch_size", r"axis 'x' \(batch_size\) must hold integers >= 1, got 0"),
        (Grid((-2.0, 4.0)), "epochs", r"axis 'x' \(epochs\) must hold integers >= 1, got -2.0"),
        (Grid((1.0, 2.5)), "batch_size", r"axis 'x' \(batch_size\) must hold integers >= 1, got 2.5"),
        (Choice(("a", "b")), "epochs", r"axis 'x' \(epochs\) must hold integers >= 1, got 'a'"),
        (Grid((0.0, 1.0)), "noise_multiplier", r"axis 'x' \(noise_multiplier\) must hold finite numbers > 0, got 0.0"),
    ],
)
def test_bad_values_are_refused_in_one_line_naming_the_axis(axis: object, role: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        SearchSpace({"x": axis}, privacy_roles={"x": role})  # type: ignore[dict-item]
    assert "\n" not in str(info.value)


def test_bad_role_declarations_are_refused() -> None:
    axes = {"a": IntGrid((1, 2)), "b": IntGrid((1, 2))}
    with pytest.raises(ValueError, match="unknown axis 'c'"):
        SearchSpace(axes, privacy_roles={"c": "epochs"})
    with pytest.raises(ValueError, match=r"privacy_roles\['a'\] must be one of"):
        SearchSpace(axes, privacy_roles={"a": "lr"})
    with pytest.raises(ValueError, match="'epochs' must be played by one axis, got \\['a', 'b'\\]"):
        SearchSpace(axes, privacy_roles={"a": "epochs", "b": "epochs"})


def test_from_grid_makes_integer_role_axes_int_grids() -> None:
    space = SearchSpace.from_grid({"lr": [0.01, 0.1], "batch": [32.0, 64.0]}, {"lr": "log", "batch": "log"},
                                  privacy_roles={"batch": "batch_size"})
    assert isinstance(space.axes["batch"], IntGrid) and space.params(1)["batch"] == 64
    assert type(space.params(1)["batch"]) is int


def test_unit_coordinates_of_a_mixed_4d_space() -> None:
    space = SearchSpace({
        "lr": LogFloat(1e-3, 1e-1, 3),
        "clip": Grid((0.5, 1.0, 1.5)),
        "batch": IntGrid((32, 64, 128), scale="log"),
        "epochs": Int(5, 15, 5),
    }, privacy_roles={"batch": "batch_size", "epochs": "epochs"})
    unit = space.unit_coordinates
    assert unit.shape == (81, 4) and unit.min() == 0.0 and unit.max() == 1.0
    point = space.index({"lr": 1e-2, "clip": 1.0, "batch": 64, "epochs": 10})
    np.testing.assert_allclose(unit[point], [0.5, 0.5, 0.5, 0.5])

"""Tests for dphypo.simulation.landscapes (file format, validation, simulation) and dphypo.simulation.synthetic."""

from __future__ import annotations

import itertools
import json
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dphypo.simulation.landscapes import Landscape, load_landscape, save_landscape
from dphypo.simulation.synthetic import (
    SYNTHETIC_LANDSCAPES,
    AccuracyLevels,
    mnist_grid,
    multimodal_landscape,
    resolve_landscape,
    ridge_landscape,
    smooth_landscape,
    synthetic_landscape,
)


def small_landscape(direction: str = "maximize", seed: int = 0) -> Landscape:
    """A 3 × 4 landscape with distinct random means and positive stds."""
    rng = np.random.default_rng(seed)
    return Landscape(
        mean=rng.uniform(0.0, 1.0, size=(3, 4)),
        std=rng.uniform(0.01, 0.1, size=(3, 4)),
        axis_names=("lr", "clip"),
        axis_values=(np.array([1e-3, 1e-2, 1e-1]), np.array([0.5, 1.0, 1.5, 2.0])),
        axis_scales=("log", "linear"),
        direction=direction,
        metadata={"dataset": "toy", "seeds": [0, 1, 2], "sigma": 1.1},
    )


def landscape_arrays(landscape: Landscape) -> dict[str, np.ndarray]:
    """The .npz key -> array mapping of a valid file, to be corrupted by the tests."""
    arrays = {
        "mean": np.array(landscape.mean),
        "std": np.array(landscape.std),
        "axis_names": np.array(landscape.axis_names),
        "axis_scales": np.array(landscape.axis_scales),
        "direction": np.array(landscape.direction),
        "metadata": np.array(json.dumps(landscape.metadata)),
    }
    for name, values in zip(landscape.axis_names, landscape.axis_values, strict=True):
        arrays[f"axis_{name}"] = np.array(values)
    return arrays


def assert_same(a: Landscape, b: Landscape) -> None:
    np.testing.assert_array_equal(a.mean, b.mean)
    np.testing.assert_array_equal(a.std, b.std)
    assert a.axis_names == b.axis_names
    for x, y in zip(a.axis_values, b.axis_values, strict=True):
        np.testing.assert_array_equal(x, y)
    assert a.axis_scales == b.axis_scales
    assert a.direction == b.direction
    assert a.metadata == b.metadata


# --- file format ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("as_str", [False, True])
def test_save_load_round_trip_is_exact(tmp_path: Path, as_str: bool) -> None:
    landscape = small_landscape(direction="minimize")
    path = tmp_path / "toy.landscape"  # no .npz suffix: it must be written exactly here
    landscape.save(str(path) if as_str else path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["toy.landscape"]  # no temp file left behind
    loaded = load_landscape(str(path) if as_str else path)
    assert_same(landscape, loaded)
    with np.load(path, allow_pickle=False) as archive:
        assert sorted(archive.files) == sorted(landscape_arrays(landscape))


def test_synthetic_round_trip_and_overwrite(tmp_path: Path) -> None:
    path = tmp_path / "m.npz"
    save_landscape(smooth_landscape(), path)
    landscape = multimodal_landscape(seed=3)
    save_landscape(landscape, path)  # replaces the previous file
    assert_same(landscape, load_landscape(path))


def test_arrays_are_read_only_copies() -> None:
    mean = np.full((3, 4), 0.5)
    landscape = Landscape(mean, np.zeros((3, 4)), ("a", "b"), ([1.0, 2.0, 3.0], [1.0, 2.0, 3.0, 4.0]),
                          ("linear", "linear"))
    mean[0, 0] = 0.0
    assert landscape.mean[0, 0] == 0.5
    for array in (landscape.mean, landscape.std, *landscape.axis_values):
        with pytest.raises(ValueError, match="read-only"):
            array[0] = 1.0


def test_metadata_is_stored_as_its_json_round_trip() -> None:
    landscape = small_landscape()
    data = Landscape(landscape.mean, landscape.std, landscape.axis_names, landscape.axis_values,
                     landscape.axis_scales, metadata={"seeds": (1, 2), "nested": {"x": 1.5}})
    assert data.metadata == {"seeds": [1, 2], "nested": {"x": 1.5}}
    with pytest.raises(ValueError, match="metadata must be JSON-serialisable"):
        Landscape(landscape.mean, landscape.std, landscape.axis_names, landscape.axis_values,
                  landscape.axis_scales, metadata={"bad": {1, 2}})
    with pytest.raises(ValueError, match="metadata must be JSON-serialisable"):
        Landscape(landscape.mean, landscape.std, landscape.axis_names, landscape.axis_values,
                  landscape.axis_scales, metadata={"bad": float("nan")})


def _set(key: str, value: Any) -> Any:
    def corrupt(arrays: dict[str, np.ndarray]) -> None:
        arrays[key] = value(arrays) if callable(value) else value

    return corrupt


def _drop(key: str) -> Any:
    return lambda arrays: arrays.pop(key)


BAD_FILES = {
    "missing std": (_drop("std"), r"missing keys \['std'\]"),
    "missing metadata": (_drop("metadata"), r"missing keys \['metadata'\]"),
    "missing axis": (_drop("axis_clip"), r"missing keys \['axis_clip'\] for axes"),
    "unknown key": (_set("runs", np.zeros(3)), r"unknown keys \['runs'\]"),
    "stray axis": (_set("axis_momentum", np.array([0.0, 0.9])), r"unknown keys \['axis_momentum'\]"),
    "mean shape": (_set("mean", np.zeros((3, 5))), r"mean must have the grid shape \(3, 4\)"),
    "std shape": (_set("std", np.zeros((4, 3))), r"std must have the grid shape \(3, 4\)"),
    "transposed axes": (_set("axis_names", np.array(["clip", "lr"])), r"mean must have the grid shape \(4, "),
    "negative std": (_set("std", lambda a: a["std"] - 0.05), r"std must be >= 0"),
    "nan mean": (_set("mean", lambda a: np.where(a["mean"] > 0.5, np.nan, a["mean"])), "'mean' array must be finite"),
    "inf std": (_set("std", lambda a: np.where(a["std"] > 0.05, np.inf, a["std"])), "'std' array must be finite"),
    "string mean": (_set("mean", np.full((3, 4), "x")), r"mean must be a real numeric array"),
    "bool std": (_set("std", np.ones((3, 4), dtype=bool)), r"std must be a real numeric array"),
    "not increasing": (_set("axis_clip", np.array([0.5, 1.0, 1.0, 2.0])), "axis_clip must be strictly"),
    "decreasing": (_set("axis_lr", np.array([1e-1, 1e-2, 1e-3])), r"axis_lr must be strictly increasing"),
    "nan axis": (_set("axis_clip", np.array([0.5, np.nan, 1.5, 2.0])), r"axis_clip must be finite"),
    "2-d axis": (_set("axis_clip", np.ones((2, 2))), r"axis_clip must be a 1-D array"),
    "log axis <= 0": (_set("axis_lr", np.array([0.0, 1e-2, 1e-1])), r"axis_lr is a log axis and must be > 0"),
    "bad scale": (_set("axis_scales", np.array(["log", "logit"])), r"axis_scales must give one of"),
    "scales length": (_set("axis_scales", np.array(["log"])), r"axis_scales must give one of"),
    "scales 0-d": (_set("axis_scales", np.array("log")), r"axis_scales must be a 1-d string array"),
    "numeric names": (_set("axis_names", np.array([1, 2])), r"axis_names must be a 1-d string array"),
    "duplicate names": (_set("axis_names", np.array(["lr", "lr"])), r"axis_names must be unique"),
    "bad name": (_set("axis_names", np.array(["lr", "clip norm"])), r"axis_names entries must match"),
    "bad direction": (_set("direction", np.array("max")), r"direction must be one of \('maximize', "),
    "direction 1-d": (_set("direction", np.array(["maximize"])), r"direction must be a 0-d string array"),
    "metadata not json": (_set("metadata", np.array("{'a': 1}")), r"metadata must be a JSON object string"),
    "metadata list": (_set("metadata", np.array("[1, 2]")), "must be a JSON object, got a JSON list"),
    "metadata pickled": (_set("metadata", np.array({"a": 1}, dtype=object)), r"metadata could not be read"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_load_rejects_malformed_files_with_one_line_errors(tmp_path: Path, case: str) -> None:
    corrupt, message = BAD_FILES[case]
    arrays = landscape_arrays(small_landscape())
    corrupt(arrays)
    path = tmp_path / "bad.npz"
    np.savez(path, **arrays)
    with pytest.raises(ValueError, match=message) as info:
        load_landscape(path)
    assert "\n" not in str(info.value)
    assert str(path) in str(info.value)


def test_load_rejects_files_that_are_not_npz_archives(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("not a landscape\n")
    with pytest.raises(ValueError, match=r"is not a readable \.npz archive"):
        load_landscape(text)
    single = tmp_path / "mean.npy"
    np.save(single, np.zeros(3))
    with pytest.raises(ValueError, match=r"must be an \.npz archive"):
        load_landscape(single)
    with pytest.raises(FileNotFoundError):
        load_landscape(tmp_path / "missing.npz")


def test_constructor_rejects_reserved_or_missing_axes() -> None:
    with pytest.raises(ValueError, match="axis_names entries must match"):
        Landscape(np.zeros((2,)), np.zeros((2,)), ("names",), ([1.0, 2.0],), ("linear",))
    with pytest.raises(ValueError, match="axis_values must hold one array per axis"):
        Landscape(np.zeros((2,)), np.zeros((2,)), ("a",), ([1.0, 2.0], [1.0, 2.0]), ("linear",))
    with pytest.raises(ValueError, match="axis_a must be a 1-D array of at least 2 values"):
        Landscape(np.zeros((1,)), np.zeros((1,)), ("a",), ([1.0],), ("linear",))
    with pytest.raises(ValueError, match="scales must name exactly the axes"):
        Landscape.from_axes(np.zeros(2), np.zeros(2), {"a": [1.0, 2.0]}, {"b": "log"})


# --- simulation -------------------------------------------------------------------------------------------


def test_sample_many_matches_mean_and_std_within_clt_bounds() -> None:
    landscape = small_landscape()
    rng = np.random.default_rng(123)
    n = 20_000
    for index in (0, 5, 11):
        q = landscape.sample_many(np.full(n, index), rng)
        m, s = landscape.true_value(index), float(landscape.std.flat[index])
        # 5 standard errors: the sample mean has sd s/√n, the sample std about s/√(2n) for normal data.
        assert abs(q.mean() - m) < 5 * s / np.sqrt(n)
        assert abs(q.std(ddof=1) - s) < 5 * s / np.sqrt(2 * n)


def test_sample_standardised_residuals_are_standard_normal_across_the_grid() -> None:
    landscape = small_landscape(seed=4)
    rng = np.random.default_rng(7)
    indices = rng.integers(landscape.size, size=(200, 60))
    q = landscape.sample_many(indices, rng)
    assert q.shape == indices.shape
    z = (q - landscape.true_values(indices)) / landscape.std.ravel()[indices]
    n = z.size
    assert abs(z.mean()) < 5 / np.sqrt(n)
    assert abs(z.var() - 1.0) < 5 * np.sqrt(2 / n)


def test_sample_and_sample_many_agree_from_the_same_state() -> None:
    landscape = small_landscape()
    singles = [landscape.sample(i, np.random.default_rng(99)) for i in (3, 7)]
    batched = [landscape.sample_many(np.array([i]), np.random.default_rng(99))[0] for i in (3, 7)]
    assert singles == batched
    rng = np.random.default_rng(5)
    loop = [landscape.sample(int(i), rng) for i in range(12)]
    np.testing.assert_array_equal(loop, landscape.sample_many(np.arange(12), np.random.default_rng(5)))


def test_zero_std_samples_are_exact_and_indices_are_validated() -> None:
    landscape = small_landscape().with_std(0.0, note="deterministic")
    assert landscape.metadata["std_replaced"] == {"scalar": 0.0, "note": "deterministic"}
    rng = np.random.default_rng(0)
    assert landscape.sample(6, rng) == landscape.true_value(6)
    with pytest.raises(ValueError, match=r"index must lie in \[0, 12\)"):
        landscape.sample(12, rng)
    with pytest.raises(ValueError, match="index must be integers"):
        landscape.true_value(1.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="index must be integers"):
        landscape.true_value(True)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"indices must lie in \[0, 12\)"):
        landscape.sample_many(np.array([0, -1]), rng)
    with pytest.raises(ValueError, match=r"rng must be a numpy\.random\.Generator"):
        landscape.sample(0, 0)  # type: ignore[arg-type]


def test_objective_samples_the_grid_point_of_its_params() -> None:
    base = small_landscape()
    exact = base.with_std(0.0)
    objective = exact.objective(np.random.default_rng(0))
    for index in range(exact.size):
        params = exact.space.params(index)
        assert objective(params) == exact.true_value(index)
        assert objective(params, run="ignored") == exact.true_value(index)
    # With noise: the same draws as sampling the index directly from the same generator state.
    noisy = base.objective(np.random.default_rng(11))
    params = {"lr": 1e-2, "clip": 1.5}
    expected = base.sample(base.space.index(params), np.random.default_rng(11))
    assert noisy(params) == expected
    with pytest.raises(ValueError):
        noisy({"lr": 2e-2, "clip": 1.5})


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_best_worst_regret_follow_the_direction(direction: str) -> None:
    landscape = small_landscape(direction=direction, seed=2)
    flat = landscape.mean.ravel()
    best = int(np.argmax(flat)) if direction == "maximize" else int(np.argmin(flat))
    assert landscape.best_index == best
    assert landscape.best_value == flat[best]
    assert landscape.worst_value == (flat.min() if direction == "maximize" else flat.max())
    regrets = landscape.regret(landscape.mean)
    assert np.all(regrets >= 0) and regrets.ravel()[best] == 0
    assert landscape.regret(landscape.worst_value) == pytest.approx(abs(flat.max() - flat.min()))
    assert landscape.is_better(landscape.best_value, landscape.worst_value)
    assert not landscape.is_better(landscape.worst_value, landscape.best_value)
    assert not landscape.is_better(0.5, 0.5)


def test_best_index_takes_the_first_tie_in_c_order_and_near_optimal_fraction() -> None:
    mean = np.array([[0.2, 0.9, 0.5], [0.9, 0.85, 0.1]])
    landscape = Landscape(mean, np.zeros_like(mean), ("a", "b"), ([1.0, 2.0], [1.0, 2.0, 3.0]),
                          ("linear", "linear"))
    assert landscape.best_index == 1
    assert landscape.near_optimal_fraction(0.0) == 2 / 6
    assert landscape.near_optimal_fraction(0.06) == 3 / 6
    assert landscape.near_optimal_fraction(1.0) == 1.0
    with pytest.raises(ValueError, match="tolerance must be >= 0"):
        landscape.near_optimal_fraction(-0.1)


# --- synthetic landscapes -----------------------------------------------------------------------------------


def test_mnist_grid_matches_the_paper() -> None:
    values, scales = mnist_grid()
    assert list(values) == ["lr", "clip"] and scales == {"lr": "log", "clip": "linear"}
    lr, clip = values["lr"], values["clip"]
    assert lr.shape == (16,) and clip.shape == (20,)
    assert lr[0] == 1e-4 and lr[-1] == 10.0 and 1e-3 in lr and 1.0 in lr
    np.testing.assert_allclose(lr[1:] / lr[:-1], 10 ** (1 / 3), rtol=1e-10)
    assert clip[0] == 0.3 and clip[-1] == 6.0 and 0.9 in clip
    np.testing.assert_allclose(np.diff(clip), 0.3, rtol=1e-10)


@pytest.mark.parametrize("name", sorted(SYNTHETIC_LANDSCAPES))
def test_synthetic_landscapes_are_accuracy_like_and_documented(name: str) -> None:
    landscape = synthetic_landscape(name)
    levels = AccuracyLevels()
    assert landscape.shape == (16, 20) and landscape.axis_names == ("lr", "clip")
    assert landscape.direction == "maximize"
    assert np.all(landscape.mean >= levels.floor - 1e-12) and np.all(landscape.mean <= levels.peak + 1e-12)
    assert landscape.std.min() >= levels.std_min - 1e-12 and landscape.std.max() <= levels.std_max + 1e-12
    assert landscape.best_value > 0.9 and landscape.worst_value < 0.15
    meta = landscape.metadata
    assert meta["synthetic"] is True
    assert meta["generator"] == f"dphypo.simulation.synthetic.{SYNTHETIC_LANDSCAPES[name].__name__}"
    assert meta["parameters"]["levels"] == {"peak": 0.95, "floor": 0.1, "std_min": 0.005, "std_max": 0.05}
    # Reproducible: a second call builds identical arrays.
    assert_same(landscape, synthetic_landscape(name))


def test_smooth_has_a_unique_argmax_at_the_stated_optimum_and_decays_with_distance() -> None:
    landscape = smooth_landscape()
    assert landscape.best_value == 0.95
    assert np.sum(landscape.mean == landscape.best_value) == 1
    assert landscape.space.params(landscape.best_index) == {"lr": 1.0, "clip": 1.5}
    u = landscape.space.unit_coordinates
    distance = np.linalg.norm(u - u[landscape.best_index], axis=1)
    by_distance = landscape.mean.ravel()[np.argsort(distance, kind="stable")]
    assert np.all(np.diff(by_distance) <= 1e-15)
    # 0.033 lies between the grid's 0.0215 and 0.0464: nearer 0.0464 in log, nearer 0.0215 linearly.
    snapped = smooth_landscape(optimum={"lr": 0.033, "clip": 5.0}, width=0.1)
    params = snapped.space.params(snapped.best_index)
    assert params["clip"] == 5.1 and params["lr"] == pytest.approx(10 ** (-4 + 8 / 3))


def test_ridge_is_high_along_lr_times_clip_and_low_off_it() -> None:
    landscape = ridge_landscape()  # effective step lr·clip = 0.5
    lr, clip = landscape.axis_values
    log_step = np.log10(lr[1] / lr[0])
    for j, c in enumerate(clip):
        on = int(np.argmin(np.abs(np.log10(lr * c / 0.5))))
        column = landscape.mean[:, j]
        assert column[on] > 0.9
        assert abs(int(np.argmax(column)) - on) <= 1  # the column's best lr sits on the ridge
        for off in (on - 3, on + 3):  # one decade off the ridge
            if 0 <= off < len(lr):
                assert column[on] - column[off] > 0.1
    assert np.log10(lr[landscape.best_index // len(clip)] * clip[landscape.best_index % len(clip)] / 0.5) == (
        pytest.approx(0.0, abs=log_step)
    )


def test_ridge_depends_only_on_the_product_without_along_preference() -> None:
    steps = 10.0 ** (np.arange(9) / 4)
    grid = {"lr": 1e-2 * steps, "clip": 0.1 * steps}  # lr[k]·clip[j] = 1e-3·10^((k + j)/4)
    scales = {"lr": "log", "clip": "log"}
    landscape = ridge_landscape(grid, scales, along_drop=0.0)
    assert np.ptp(landscape.mean) > 0.5
    for k, j in itertools.product(range(8), range(1, 9)):
        assert landscape.mean[k, j] == pytest.approx(landscape.mean[k + 1, j - 1], abs=1e-12)
    # The ridge k + j = 10 (lr·clip = 10^-0.5) prefers clip = 1 (j = 4) when along_drop > 0.
    tilted = ridge_landscape(grid, scales, effective_step=10**-0.5, along_drop=0.2, best_clip=1.0)
    for j in range(2, 9):  # on the ridge the profile is 1: mean = peak − along_drop·log10(clip)²
        expected = 0.95 - 0.2 * np.log10(grid["clip"][j]) ** 2
        assert tilted.mean[10 - j, j] == pytest.approx(expected, abs=1e-12)
    assert tilted.best_index == 6 * 9 + 4
    # Off the ridge at clip = 1: half a decade above (width 0.6) and one decade below (width 0.9).
    assert tilted.mean[8, 4] == pytest.approx(0.1 + 0.85 * np.exp(-0.5 * (0.5 / 0.6) ** 4), abs=1e-12)
    assert tilted.mean[2, 4] == pytest.approx(0.1 + 0.85 * np.exp(-0.5 * (1.0 / 0.9) ** 4), abs=1e-12)


def strict_local_maxima(mean: np.ndarray) -> list[int]:
    """Flat indices of points strictly above all their (up to 8) grid neighbours."""
    padded = np.pad(mean, 1, constant_values=-np.inf)
    found = []
    for i, j in itertools.product(range(mean.shape[0]), range(mean.shape[1])):
        window = padded[i : i + 3, j : j + 3].copy()
        window[1, 1] = -np.inf
        if mean[i, j] > window.max():
            found.append(i * mean.shape[1] + j)
    return found


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_multimodal_has_the_advertised_strict_local_maxima(seed: int) -> None:
    landscape = multimodal_landscape(seed=seed)
    optima = landscape.metadata["optima"]
    maxima = strict_local_maxima(landscape.mean)
    assert len(maxima) >= 2
    assert sorted(maxima) == sorted(o["index"] for o in optima)
    assert len(optima) == 4 and optima[0]["height"] == 0.95 == landscape.best_value
    assert landscape.best_index == optima[0]["index"]
    heights = sorted(o["height"] for o in optima)
    assert len(set(heights)) == 4 and heights[0] >= 0.6 and heights[-2] <= 0.88
    for o in optima:
        assert landscape.true_value(o["index"]) == pytest.approx(o["height"])
        assert landscape.space.index(o["params"]) == o["index"]


def test_multimodal_seeds_are_reproducible_and_distinct() -> None:
    a, b = multimodal_landscape(seed=5), multimodal_landscape(seed=5)
    assert_same(a, b)
    assert not np.array_equal(a.mean, multimodal_landscape(seed=6).mean)
    from_generator = multimodal_landscape(seed=np.random.default_rng(5))
    np.testing.assert_array_equal(a.mean, from_generator.mean)
    assert from_generator.metadata["parameters"]["seed"] == "generator"
    with pytest.raises(ValueError, match="could not place 30 optima"):
        multimodal_landscape(n_local=29, min_separation=0.5)


def test_synthetic_parameters_are_validated() -> None:
    with pytest.raises(ValueError, match="levels need 0 <= floor < peak <= 1"):
        AccuracyLevels(peak=0.1, floor=0.2)
    with pytest.raises(ValueError, match="width must be > 0"):
        smooth_landscape(width=0.0)
    with pytest.raises(ValueError, match="optimum must only name axes"):
        smooth_landscape(optimum={"momentum": 0.9})
    with pytest.raises(ValueError, match="scales must give a scale for every axis"):
        smooth_landscape({"lr": [0.1, 1.0]})
    with pytest.raises(ValueError, match="the grid must have a positive-valued axis 'clip'"):
        ridge_landscape({"lr": [0.1, 1.0], "c": [1.0, 2.0]}, {"lr": "log", "c": "linear"})
    with pytest.raises(ValueError, match="local_heights must satisfy"):
        multimodal_landscape(local_heights=(0.5, 0.97))
    with pytest.raises(ValueError, match="name must be one of"):
        synthetic_landscape("wavy")


def test_resolve_landscape_accepts_synthetic_names_and_paths(tmp_path: Path) -> None:
    assert_same(resolve_landscape("synthetic:ridge"), ridge_landscape())
    path = tmp_path / "toy.npz"
    small_landscape().save(path)
    assert_same(resolve_landscape(str(path)), small_landscape())
    assert_same(resolve_landscape(path), small_landscape())
    for spec in ("synthetic:wavy", str(tmp_path / "absent.npz")):
        with pytest.raises(ValueError, match="synthetic:smooth, synthetic:ridge, synthetic:multimodal"):
            resolve_landscape(spec)


def test_landscape_pickles_after_its_space_was_built() -> None:
    # Process pools pickle the landscape; the cached SearchSpace must not travel with it.
    landscape = multimodal_landscape(seed=1)
    assert landscape.space.size == landscape.size
    copy = pickle.loads(pickle.dumps(landscape))
    assert_same(landscape, copy)
    assert not copy.mean.flags.writeable
    assert copy.space.index(copy.space.params(17)) == 17


def test_repr_is_short() -> None:
    assert repr(smooth_landscape()) == "Landscape(lr[16, log] x clip[20, linear], maximize, best=0.95)"


def test_load_rejects_empty_and_truncated_files(tmp_path: Path) -> None:
    # issue #12: numpy raises EOFError on an empty file, which the CLI (click) reported as Ctrl-C ("aborted").
    empty = tmp_path / "empty.npz"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match="is empty"):
        load_landscape(empty)
    cut = tmp_path / "cut.npz"
    cut.write_bytes(b"PK\x03\x04" + b"\0" * 10)  # a zip header and nothing else
    with pytest.raises(ValueError, match=r"is not a readable \.npz archive"):
        load_landscape(cut)


def test_a_slice_fixes_the_other_axes_at_the_best_point_or_at_given_values() -> None:
    axes = {"lr": [1e-3, 1e-2, 1e-1], "clip": [0.5, 1.0], "batch": [32, 64, 128]}
    mean = np.arange(18, dtype=float).reshape(3, 2, 3) / 20
    land = Landscape.from_axes(mean, mean / 10, axes, {"lr": "log", "clip": "linear", "batch": "log"})
    through_best = land.slice(["batch", "lr"])  # best = the last point: clip 1.0
    assert through_best.axis_names == ("batch", "lr") and through_best.shape == (3, 3)
    np.testing.assert_array_equal(through_best.mean, mean[:, 1, :].T)
    assert through_best.metadata["slice"] == {"clip": 1.0} and through_best.axis_scales == ("log", "log")
    at = land.slice(["lr"], at={"clip": 0.5, "batch": 64})
    np.testing.assert_array_equal(at.mean, mean[:, 0, 1])
    for keep, fixed, message in ((["lr", "lr"], None, "distinct axes"), (["x"], None, "distinct axes"),
                                 (["lr"], {"lr": 0.01}, "only axes that are not kept"),
                                 (["lr"], {"batch": 48}, "not a grid value of axis 'batch'")):
        with pytest.raises(ValueError, match=message):
            land.slice(keep, at=fixed)

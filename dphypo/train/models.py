"""Small Opacus-compatible classifiers (no BatchNorm: per-example gradients must not mix examples).

Every model accepts ``(batch, C, H, W)`` float32 images and returns ``(batch, num_classes)`` logits.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from dphypo.privacy.validation import check_int_at_least, check_non_negative_int

__all__ = ["MODELS", "MODEL_INPUT_SHAPES", "default_model", "make_model"]


def _digits_mlp(num_classes: int) -> nn.Module:
    """Flatten → Linear(64, 64) → Tanh → Linear(64, K): about 0.93 accuracy under DP-SGD at ε ≈ 4.5 (notes §2)."""
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, num_classes))


def _digits_cnn(num_classes: int) -> nn.Module:
    """A tiny CNN for 1×8×8 inputs: two 3×3 convolutions with GroupNorm and tanh (about 6k parameters)."""
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1),
        nn.GroupNorm(4, 16),
        nn.Tanh(),
        nn.AvgPool2d(2),  # 16×4×4
        nn.Conv2d(16, 32, 3, padding=1),
        nn.GroupNorm(4, 32),
        nn.Tanh(),
        nn.AvgPool2d(2),  # 32×2×2
        nn.Flatten(),
        nn.Linear(128, num_classes),
    )


def _mnist_cnn(num_classes: int) -> nn.Module:
    """The DP-HyPO (App. E) / Opacus MNIST example CNN for 1×28×28 inputs (26,010 parameters for K = 10)."""
    return nn.Sequential(
        nn.Conv2d(1, 16, 8, stride=2, padding=3),  # 16×14×14
        nn.ReLU(),
        nn.MaxPool2d(2, 1),  # 16×13×13
        nn.Conv2d(16, 32, 4, stride=2),  # 32×5×5
        nn.ReLU(),
        nn.MaxPool2d(2, 1),  # 32×4×4
        nn.Flatten(),
        nn.Linear(32 * 4 * 4, 32),
        nn.ReLU(),
        nn.Linear(32, num_classes),
    )


def _cifar_cnn(num_classes: int) -> nn.Module:
    """A small CNN for 3×32×32 inputs in the style of Opacus's CIFAR-10 tutorial: GroupNorm + tanh, no BatchNorm.

    Tanh rather than ReLU because bounded activations behave better under clipping (Papernot et al. 2021,
    "Tempered sigmoid activations for deep learning with differential privacy").
    """

    def block(c_in: int, c_out: int) -> list[nn.Module]:
        return [nn.Conv2d(c_in, c_out, 3, padding=1), nn.GroupNorm(8, c_out), nn.Tanh(), nn.AvgPool2d(2)]

    return nn.Sequential(
        *block(3, 32),  # 32×16×16
        *block(32, 64),  # 64×8×8
        *block(64, 64),  # 64×4×4
        nn.Flatten(),
        nn.Linear(64 * 4 * 4, 128),
        nn.Tanh(),
        nn.Linear(128, num_classes),
    )


_BUILDERS: dict[str, Callable[[int], nn.Module]] = {
    "digits-mlp": _digits_mlp,
    "digits-cnn": _digits_cnn,
    "mnist-cnn": _mnist_cnn,
    "cifar-cnn": _cifar_cnn,
}

#: Names accepted by :func:`make_model`.
MODELS: tuple[str, ...] = tuple(_BUILDERS)

#: The ``(C, H, W)`` input each model expects.
MODEL_INPUT_SHAPES: dict[str, tuple[int, int, int]] = {
    "digits-mlp": (1, 8, 8),
    "digits-cnn": (1, 8, 8),
    "mnist-cnn": (1, 28, 28),
    "cifar-cnn": (3, 32, 32),
}

_DEFAULTS = {
    "digits": "digits-mlp",
    "mnist-subset": "mnist-cnn",
    "mnist": "mnist-cnn",
    "fashion-mnist": "mnist-cnn",
    "cifar10": "cifar-cnn",
}


def make_model(name: str, *, num_classes: int = 10, seed: int = 0) -> nn.Module:
    """Build a model with a seeded initialisation, without touching the global torch RNG.

    Args:
        name: One of :data:`MODELS`.
        num_classes: Number of output logits, ≥ 2.
        seed: Initialisation seed (≥ 0); the same seed gives identical parameters.

    Returns:
        The module (float32, on CPU, in training mode).
    """
    if name not in _BUILDERS:
        raise ValueError(f"name must be one of {', '.join(MODELS)}; got {name!r}")
    check_int_at_least("num_classes", num_classes, 2)
    check_non_negative_int("seed", seed)
    # fork_rng restores the global CPU RNG afterwards; devices=[] because models are built on CPU.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        return _BUILDERS[name](int(num_classes))


def default_model(dataset_name: str) -> str:
    """The model dphypo trains on a dataset by default (e.g. ``"mnist-subset"`` → ``"mnist-cnn"``)."""
    if dataset_name not in _DEFAULTS:
        raise ValueError(f"dataset_name must be one of {', '.join(_DEFAULTS)}; got {dataset_name!r}")
    return _DEFAULTS[dataset_name]


def check_model_for_dataset(model: str, dataset: str) -> None:
    """Refuse an unknown model, or one whose input shape is not the dataset's (one line, naming both).

    Raises:
        ValueError: The model is unknown or does not take the dataset's images.
    """
    from dphypo.train.data import DATASET_INPUT_SHAPES

    if model not in MODELS:
        raise ValueError(f"model must be one of {', '.join(MODELS)}, got {model!r}")
    if MODEL_INPUT_SHAPES[model] != DATASET_INPUT_SHAPES[dataset]:
        raise ValueError(
            f"model {model!r} takes inputs {MODEL_INPUT_SHAPES[model]} but dataset {dataset!r} has "
            f"{DATASET_INPUT_SHAPES[dataset]}"
        )

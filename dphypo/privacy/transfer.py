"""Hyperparameter transfer after subsampled tuning (Koskela & Kulkarni 2023, "KK", Sec. 3.2).

Tuning on a subset X₁ of size m and training the final model on n′ records changes what a good learning rate
is; KK transfer it with a data-independent rule that uses only the public, nominal set sizes.

References (docs/references.md): Koskela & Kulkarni 2023 arXiv:2301.11989; van der Veen et al. 2018 arXiv:1812.02890
(versions unverified).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from dphypo.privacy.validation import check_int_at_least, check_positive, check_probability

__all__ = [
    "DpSgdHyperparameters",
    "Optimizer",
    "Variant",
    "check_variant",
    "nominal_set_sizes",
    "transfer_hyperparameters",
    "transfer_learning_rate",
]

Variant = Literal[1, 2]
Optimizer = Literal["sgd", "adam"]


def check_variant(variant: Any) -> Variant:
    """``variant`` as a :data:`Variant`: 1 (final run on X minus X₁) or 2 (final run on X).

    Raises:
        ValueError: ``variant`` is neither.
    """
    if variant not in (1, 2):
        raise ValueError(f"variant must be 1 or 2, got {variant!r}")
    return 1 if variant == 1 else 2


@dataclass(frozen=True)
class DpSgdHyperparameters:
    """DP-SGD hyperparameters that KK's transfer rule touches.

    Attributes:
        learning_rate: η > 0.
        noise_multiplier: σ > 0.
        sample_rate: Poisson batch sampling ratio γ ∈ (0, 1] (expected batch = γ·|dataset|).
        steps: Number of iterations T ≥ 1 (epochs = T·γ).
        clip_norm: Clipping constant C > 0.
    """

    learning_rate: float
    noise_multiplier: float
    sample_rate: float
    steps: int
    clip_norm: float

    def __post_init__(self) -> None:
        for name in ("learning_rate", "noise_multiplier", "clip_norm"):
            check_positive(name, getattr(self, name))
        check_probability("sample_rate", self.sample_rate, allow_one=True)
        check_int_at_least("steps", self.steps, 1)

    def expected_batch_size(self, dataset_size: float) -> float:
        """γ·|dataset| (Poisson sampling: the *expected* batch size)."""
        return self.sample_rate * dataset_size


def nominal_set_sizes(dataset_size: float, tuning_rate: float, variant: Variant) -> tuple[float, float]:
    r"""Public, data-independent sizes (m, n′) of the tuning set and the final training set.

    |X₁| and |X \ X₁| are data-dependent under add/remove (KK notes pitfall 8), so the transfer uses nominal
    sizes m = q·n and n′ = (1−q)·n (variant 1) or n (variant 2), with n the public dataset size.
    """
    if not (isinstance(dataset_size, (int, float)) and dataset_size > 0):
        raise ValueError(f"dataset_size must be > 0, got {dataset_size!r}")
    check_probability("tuning_rate", tuning_rate)
    check_variant(variant)
    m = tuning_rate * dataset_size
    return m, (1.0 - tuning_rate) * dataset_size if variant == 1 else float(dataset_size)


def transfer_learning_rate(
    learning_rate: float, *, tuning_set_size: float, final_set_size: float, optimizer: Optimizer = "sgd"
) -> float:
    r"""Learning rate transferred from the tuning set (size m) to the full set (size n), KK 2023 Sec. 3.2.

    "if we carry out the hyperparameter tuning using a subset of size m and find an
    optimal value η*, we multiply η* by n/m when transferring to the dataset of size n" (van der Veen 2018);
    for DP-Adam "keeping the value of the learning rate fixed ... lead to better results", so η is unchanged.

    With γ, σ, C and T fixed this keeps the total injected noise Σ_j η Z_j ~ N(0, T η*² σ² C²/(γm)² I) equal
    to the tuning run's (KK Sec. 3.2). Variant 1 transfers to X \ X₁ (n′ ≈ (1−q)n, factor ≈ (1−q)/q; the
    paper's batch example 128 → 1152 at q = 0.1), variant 2 to X (factor ≈ 1/q; 128 → 1280).

    Args:
        learning_rate: η* found on the tuning set, > 0.
        tuning_set_size: m (use a public nominal size, :func:`nominal_set_sizes`).
        final_set_size: n (likewise).
        optimizer: ``"sgd"`` (scale) or ``"adam"`` (keep).

    Returns:
        The learning rate for the final run.
    """
    check_positive("learning_rate", learning_rate)
    check_positive("tuning_set_size", tuning_set_size)
    check_positive("final_set_size", final_set_size)
    if optimizer == "adam":
        return float(learning_rate)
    if optimizer != "sgd":
        raise ValueError(f"optimizer must be 'sgd' or 'adam', got {optimizer!r}")
    return float(learning_rate) * final_set_size / tuning_set_size


def transfer_hyperparameters(
    tuned: DpSgdHyperparameters,
    *,
    tuning_set_size: float,
    final_set_size: float,
    optimizer: Optimizer = "sgd",
) -> DpSgdHyperparameters:
    """KK 2023 Sec. 3.2 transfer t₁ → t₂ of the DP-SGD hyperparameters from the tuning set to the full set.

    C, σ, γ and T are kept (so the final run has exactly one candidate's privacy cost and the expected batch
    grows by n/m); η follows :func:`transfer_learning_rate`.

    Args:
        tuned: The best hyperparameters found on the tuning set.
        tuning_set_size: m (public nominal size).
        final_set_size: n (public nominal size).
        optimizer: ``"sgd"`` or ``"adam"``.

    Returns:
        The hyperparameters of the final run.
    """
    lr = transfer_learning_rate(
        tuned.learning_rate,
        tuning_set_size=tuning_set_size,
        final_set_size=final_set_size,
        optimizer=optimizer,
    )
    return replace(tuned, learning_rate=lr)

"""How every candidate of a search trains, before σ is known: a :class:`DPSGDMechanism` without its noise multiplier.

:func:`dphypo.tune` calibrates σ so that the *whole search* meets its total ε, so the user gives everything else
that fixes the per-run privacy (batch size, epochs, public set sizes, score noise) and the search builds the mechanism.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from dphypo.privacy.split import SplitRule

if TYPE_CHECKING:
    from dphypo.train.data import Splits
    from dphypo.train.mechanism import DPSGDMechanism

__all__ = ["DPSGD"]


@dataclass(frozen=True, kw_only=True)
class DPSGD:
    """The privacy-relevant DP-SGD settings of every candidate run, except σ (fixed by the search).

    Args:
        batch_size: Expected (Poisson) batch size ≥ 1.
        epochs: Passes over the training split ≥ 1.
        n_train: Training-set size ≥ 1 (public; fixes Opacus's sampling rate).
        n_val: Nominal (public) validation-set size that turns the noisy count of correct predictions into an
            accuracy; required with ``score_noise``.
        score_noise: Standard deviation (in examples) of the Gaussian noise on each run's count of correct
            validation predictions (sensitivity 1). ``None``: the score is not privatised, which is only correct
            when the validation data is public (privacy rule 4).
        secure_mode: Opacus's cryptographically secure noise and batches (needs ``torchcsprng``).
        split_rule: The public rule of the per-record split the runs use (docs/proofs/split.md; ``n_train`` and
            ``n_val`` are then its nominal sizes), or ``None`` (a seeded permutation split): what an accountant reads
            to choose the bound.

    Example:
        >>> from dphypo.train import DPSGD
        >>> recipe = DPSGD(batch_size=64, epochs=2, n_train=1000, n_val=300, score_noise=5.0)
        >>> mechanism = recipe.mechanism(sigma=1.5)
        >>> mechanism.sigma, mechanism.batch_size, round(mechanism.sample_rate, 4)
        (1.5, 64, 0.0625)
    """

    batch_size: int
    epochs: int
    n_train: int
    n_val: int | None = None
    score_noise: float | None = None
    secure_mode: bool = False
    split_rule: SplitRule | None = None

    def __post_init__(self) -> None:
        self.mechanism(1.0)  # one validation, the mechanism's: fail at construction, before any data is read

    @classmethod
    def from_splits(cls, splits: Splits, *, batch_size: int, epochs: int, score_noise: float | None = None,
                    secure_mode: bool = False) -> DPSGD:
        """The settings whose ``n_train`` and ``n_val`` are the accounted sizes of ``splits``.

        :attr:`~dphypo.train.data.Splits.accounted_sizes` (nominal under a per-record split, docs/proofs/split.md
        §5) and the splits' ``split_rule``.
        """
        n_train, n_val = splits.accounted_sizes
        return cls(batch_size=batch_size, epochs=epochs, n_train=n_train, n_val=n_val, score_noise=score_noise,
                   secure_mode=secure_mode, split_rule=splits.split_rule)

    def mechanism(self, sigma: float) -> DPSGDMechanism:
        """The per-run mechanism at noise multiplier ``sigma``."""
        from dphypo.train import DPSGDMechanism

        return DPSGDMechanism(sigma=sigma, **{f.name: getattr(self, f.name) for f in fields(self)})

"""The GP model of GP-UCB, stated once: BoTorch's default ``SingleTaskGP`` written down as constants.

GP-UCB (DP-HyPO Algorithm 3) fits BoTorch's default single-task GP: constant mean, RBF kernel without outputscale
whose lengthscales have the dimension-scaled LogNormal(√2 + log(d)/2, √3) prior (Hvarfner, Hellsten & Nardi 2024,
"Vanilla Bayesian optimization performs great in high dimensions", BoTorch's default since 0.12), homoskedastic
Gaussian noise with a LogNormal(−4, 1) prior, both bounded below without a transform, started at the priors'
modes, on scores standardised by ``Standardize`` (mean, sample standard deviation, floored at ``min_stdv``).

dphypo evaluates that model's marginal likelihood and posterior in closed form (:mod:`.likelihood`,
:mod:`.posterior`) instead of building a BoTorch model per step, so the constants live here rather than being read
from a freshly built model at run time; ``tests/strategies/gp/test_model.py`` checks them against the installed
BoTorch's ``SingleTaskGP`` once. The priors are gpytorch ``LogNormalPrior`` objects built exactly as BoTorch builds
them (float32 location and scale), so the loss is the same function to the last bit.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from gpytorch.priors import LogNormalPrior

from dphypo.privacy.validation import check_positive_int

__all__ = [
    "LENGTHSCALE_LOWER_BOUND",
    "MIN_SCORE_STD",
    "NOISE_LOWER_BOUND",
    "bounds",
    "initial_hyper",
    "lengthscale_prior",
    "noise_prior",
    "standardize",
]

#: Observed scores whose standard deviation is below this are treated as all equal: BoTorch's ``Standardize``
#: ``min_stdv``, below which it stops scaling (the GP would then see raw units).
MIN_SCORE_STD = 1e-8
#: Lower bound of the noise variance σ² (BoTorch's ``MIN_INFERRED_NOISE_LEVEL``, a ``GreaterThan`` without transform;
#: GPyTorch stores the bound in float32, so the optimiser sees 1e-4 rounded to float32).
NOISE_LOWER_BOUND = float(np.float32(1e-4))
#: Lower bound of every lengthscale (BoTorch's ``GreaterThan(2.5e-2)`` without transform, float32 like the above).
LENGTHSCALE_LOWER_BOUND = float(np.float32(2.5e-2))
# LogNormal prior parameters: noise σ² ~ LogNormal(−4, 1); lengthscale ℓ_d ~ LogNormal(√2 + log(d)/2, √3).
_NOISE_PRIOR = (-4.0, 1.0)
_LENGTHSCALE_PRIOR = (math.sqrt(2.0), math.sqrt(3.0))


def noise_prior() -> LogNormalPrior:
    """The noise variance's prior, LogNormal(−4, 1), exactly as BoTorch builds it."""
    return LogNormalPrior(loc=_NOISE_PRIOR[0], scale=_NOISE_PRIOR[1])


def lengthscale_prior(dim: int) -> LogNormalPrior:
    """The lengthscales' dimension-scaled prior, LogNormal(√2 + log(d)/2, √3), exactly as BoTorch builds it.

    Args:
        dim: Input dimension d ≥ 1.
    """
    check_positive_int("dim", dim)
    return LogNormalPrior(loc=_LENGTHSCALE_PRIOR[0] + math.log(dim) * 0.5, scale=_LENGTHSCALE_PRIOR[1])


def initial_hyper(dim: int) -> np.ndarray:
    """BoTorch's initial ``(noise, constant, lengthscale_1..d)``: the priors' modes, a zero constant; ``(2 + d,)``."""
    noise = float(noise_prior().mode)
    lengthscale = float(lengthscale_prior(dim).mode)
    return np.array([noise, 0.0] + [lengthscale] * dim, dtype=np.float64)


def bounds(dim: int) -> np.ndarray:
    """Box bounds of ``(noise, constant, lengthscale_1..d)`` for L-BFGS-B, shape ``(2 + d, 2)``."""
    rows = [(NOISE_LOWER_BOUND, np.inf), (-np.inf, np.inf)] + [(LENGTHSCALE_LOWER_BOUND, np.inf)] * dim
    return np.array(rows, dtype=np.float64)


def standardize(scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """BoTorch's ``Standardize(m=1)`` of each member's scores: ``(targets, loc, scale)``.

    As ``Standardize.forward``: loc = mean, scale = sample standard deviation (ddof = 1) where it is at least
    :data:`MIN_SCORE_STD`, else 1.

    Args:
        scores: Shape ``(m, k)``, float64, k ≥ 2.

    Returns:
        Standardised scores ``(m, k)``, offsets ``(m,)`` and scales ``(m,)``.
    """
    loc = scores.mean(dim=-1, keepdim=True)
    spread = scores.std(dim=-1, keepdim=True)
    scale = spread.where(spread >= MIN_SCORE_STD, torch.full_like(spread, 1.0))
    return (scores - loc) / scale, loc[..., 0], scale[..., 0]

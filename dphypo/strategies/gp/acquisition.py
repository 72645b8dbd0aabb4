r"""BoTorch's acquisition functions over the grid, on the project's GP posterior (used by :mod:`.placement`).

:class:`GridModel` exposes the GP fitted by :func:`~dphypo.strategies.gp.fit.fit_surrogate` (its
:class:`~dphypo.strategies.gp.posterior.GridPosterior`) to BoTorch as a model whose one input is a grid index, batch
shape ``(B,)``; :func:`greedy` picks a batch of points per member by sequential greedy maximisation of BoTorch's
``qUpperConfidenceBound`` or ``qLogNoisyExpectedImprovement`` over the grid's points (each pick joins
``X_pending``, no point twice in one batch), as ``botorch.optim.optimize_acqf_discrete`` does for one model, but for
B members in one vectorised pass per pick.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from botorch.acquisition.logei import qLogNoisyExpectedImprovement
from botorch.acquisition.monte_carlo import qUpperConfidenceBound
from botorch.models.model import Model
from botorch.posteriors.gpytorch import GPyTorchPosterior
from botorch.sampling.normal import SobolQMCNormalSampler
from gpytorch.distributions import MultivariateNormal

__all__ = ["GridModel", "acquisition_function", "greedy"]

# Relative jitter on the joint covariance's diagonal (standardised space) before BoTorch's Cholesky.
_JITTER = 1e-8
# Largest number of float64 entries of one chunk of MC samples (sample × candidates × members × points).
_CHUNK_ENTRIES = 1 << 22


class GridModel(Model):
    """A GP posterior over the grid as a BoTorch model whose one input is a grid index (batch shape ``(B,)``).

    The posterior is the project's fitted GP (:class:`~dphypo.strategies.gp.posterior.GridPosterior`): mean μ and
    covariance K − VᵀV in the standardised space, mapped to score units as BoTorch's ``Standardize`` does. The joint
    posterior of any grid points ``X`` (``(..., B, q, 1)`` float indices, or ``(..., 1, q, 1)`` for all members) is
    gathered, never the whole grid's covariance, so BoTorch's MC acquisitions evaluate it directly.

    Args:
        coordinates: Unit coordinates of the grid, shape ``(n, d)``.
        mean: Posterior means in score units, shape ``(B, n)``.
        rows: Rows V of each member's posterior covariance (standardised space), shape ``(B, R, n)``.
        lengthscale: RBF lengthscales, shape ``(B, d)``.
        scale: ``Standardize`` scales (score units), shape ``(B,)``.
    """

    def __init__(self, coordinates: torch.Tensor, mean: torch.Tensor, rows: torch.Tensor, lengthscale: torch.Tensor,
                 scale: torch.Tensor) -> None:
        super().__init__()
        self._coordinates, self._mean, self._rows = coordinates, mean, rows
        self._lengthscale, self._scale = lengthscale, scale

    @property
    def num_outputs(self) -> int:
        """One output: the score."""
        return 1

    @property
    def batch_shape(self) -> torch.Size:
        """``(B,)``."""
        return torch.Size([self._mean.shape[0]])

    def posterior(self, X: torch.Tensor, output_indices: Any = None, observation_noise: Any = False,
                  posterior_transform: Any = None, **kwargs: Any) -> GPyTorchPosterior:
        """The latent function's joint posterior at the grid points ``X`` (float indices), shape ``(..., B, q, 1)``."""
        if posterior_transform is not None or observation_noise is not False:
            raise ValueError("GridModel gives the latent posterior only (no transform, no observation noise)")
        members, size = self._mean.shape
        idx = X[..., 0].round().long()
        batch = torch.Size(np.broadcast_shapes(tuple(idx.shape[:-1]), (members,)))
        idx = idx.expand(*batch, idx.shape[-1])
        mean = torch.gather(self._mean.expand(*batch, size), -1, idx)
        rows = self._rows.expand(*batch, *self._rows.shape[-2:])
        at = torch.gather(rows, -1, idx[..., None, :].expand(*batch, rows.shape[-2], idx.shape[-1]))
        x = self._coordinates[idx] / self._lengthscale[:, None, :]  # (..., B, q, d)
        prior = torch.exp(-0.5 * ((x[..., :, None, :] - x[..., None, :, :]) ** 2).sum(-1))
        covariance = prior - at.transpose(-1, -2) @ at
        eye = torch.eye(idx.shape[-1], dtype=covariance.dtype)
        covariance = (covariance + _JITTER * eye) * (self._scale[:, None, None] ** 2)
        return GPyTorchPosterior(MultivariateNormal(mean, covariance))


def acquisition_function(name: str, model: GridModel, baseline: torch.Tensor, pending: torch.Tensor | None,
                         seed: int, *, beta: float = 2.0, mc_samples: int = 128) -> Any:
    """BoTorch's acquisition ``name`` on ``model`` (quasi-MC with ``seed``), with the batch's ``pending`` points.

    Args:
        name: ``"ucb"`` (``qUpperConfidenceBound``) or ``"log-nei"`` (``qLogNoisyExpectedImprovement``, its
            baseline the observed points, not pruned: BoTorch's pruning takes no batched model).
        model: B members' posteriors.
        baseline: Observed points (float grid indices), shape ``(B, t, 1)``.
        pending: Points of the batch already chosen, shape ``(B, p, 1)``, or ``None``.
        seed: Seed of the Sobol base samples.
        beta: UCB's β.
        mc_samples: Quasi-MC samples.
    """
    sampler = SobolQMCNormalSampler(sample_shape=torch.Size([mc_samples]), seed=seed)
    if name == "ucb":
        return qUpperConfidenceBound(model, beta=beta, sampler=sampler, X_pending=pending)
    return qLogNoisyExpectedImprovement(model, X_baseline=baseline, sampler=sampler, X_pending=pending,
                                        prune_baseline=False, cache_root=False)


def greedy(name: str, model: GridModel, baseline: torch.Tensor, fixed: torch.Tensor, count: int,
           allowed: torch.Tensor, seed: int, *, beta: float = 2.0, mc_samples: int = 128) -> torch.Tensor:
    """Sequential greedy maximisation of the acquisition over the grid: ``count`` new points per member.

    Args:
        name: The acquisition (:func:`acquisition_function`).
        model: B members' posteriors.
        baseline: Observed points (float indices), shape ``(B, t, 1)``.
        fixed: Points of the batch already chosen (the uniform share), shape ``(B, u, 1)``.
        count: Points to choose.
        allowed: Grid points with positive prior mass, bool, shape ``(n,)``.
        seed: Quasi-MC seed (one per batch: every greedy step uses the same base samples).
        beta: UCB's β.
        mc_samples: Quasi-MC samples.

    Returns:
        Float indices, shape ``(B, count)``.
    """
    members = model.batch_shape[0]
    size = int(allowed.numel())
    candidates = torch.arange(size, dtype=torch.float64)
    chosen = fixed
    width = baseline.shape[1] + fixed.shape[1] + count
    per_chunk = max(1, _CHUNK_ENTRIES // (mc_samples * members * width))
    for _ in range(count):
        acquisition = acquisition_function(name, model, baseline, chosen if chosen.shape[1] else None, seed,
                                           beta=beta, mc_samples=mc_samples)
        values = torch.empty(size, members, dtype=torch.float64)
        for first in range(0, size, per_chunk):
            part = candidates[first : first + per_chunk]
            X = part.view(-1, 1, 1, 1).expand(-1, members, 1, 1)
            values[first : first + per_chunk] = acquisition(X)
        taken = torch.zeros(size, members, dtype=torch.bool)
        taken[chosen[..., 0].long().T, torch.arange(members)] = True  # no point twice in one batch
        values[taken | ~allowed[:, None]] = -torch.inf
        best = values.argmax(dim=0).to(torch.float64)  # (B,): ties go to the smaller index
        chosen = torch.cat([chosen, best.view(members, 1, 1)], dim=1)
    return chosen[:, fixed.shape[1] :, 0]

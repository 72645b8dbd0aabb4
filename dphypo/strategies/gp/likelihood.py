"""The GP's fitting loss on a grid: replicated observations reduced exactly, the marginal likelihood in closed form.

On a grid, a search of T runs re-evaluates points, and the marginal likelihood of t observations at u ≤ n distinct
points factorises exactly into a heteroskedastic GP on the u point means (noise σ²/n_i) times a term in σ² alone
(derivation and source in :class:`NegativeMarginalLogLikelihood`); the posterior depends on the data only through
the point means and counts (:class:`Replicates`). The loss is BoTorch's (negative exact marginal log-likelihood of
the model of :mod:`.model`, with its priors, per observation), at O(u³) instead of O(t³) per evaluation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from gpytorch.priors import LogNormalPrior
from linear_operator.utils.errors import NanError

from dphypo.strategies.gp.model import lengthscale_prior, noise_prior
from dphypo.strategies.gp.posterior import GridFactors

__all__ = ["NegativeMarginalLogLikelihood", "Replicates"]


@dataclass(frozen=True)
class Replicates:
    """Each member's observations reduced to its distinct grid points (padded to the batch's largest count).

    With u_b distinct points among member b's k observations, row b holds them in grid order in its first u_b
    entries; the remaining (padding) entries have weight 0 and are neutralised by the loss and the posterior.

    Attributes:
        x: Unit coordinates of the distinct points, shape ``(m, u, d)`` (padding: any grid point).
        means: Mean standardised score ȳ_i at each distinct point, shape ``(m, u)`` (padding: 0).
        weights: 1/n_i, the inverse number of observations at each point, shape ``(m, u)`` (padding: 0).
        unique: u_b, shape ``(m,)``, int64.
        within: Within-point sum of squares Σ_i SS_i of the standardised scores, shape ``(m,)``.
        log_counts: Σ_i log n_i, shape ``(m,)``.
        total: k, the number of observations of every member.
    """

    x: torch.Tensor
    means: torch.Tensor
    weights: torch.Tensor
    unique: torch.Tensor
    within: torch.Tensor
    log_counts: torch.Tensor
    total: int

    @staticmethod
    def of(factors: GridFactors, idx: np.ndarray, targets: torch.Tensor) -> Replicates:
        """Reduce observations at grid indices ``idx`` ``(m, k)`` with standardised scores ``targets`` ``(m, k)``."""
        members, k = idx.shape
        # O(m·k log k) with no (m, n) arrays: small t on a large grid costs no more than before the reduction.
        order = np.argsort(idx, axis=1, kind="stable")  # stable: each point's scores stay in observation order
        ordered = np.take_along_axis(idx, order, axis=1)
        y = np.take_along_axis(targets.detach().numpy(), order, axis=1)
        first = np.ones((members, k), dtype=bool)
        first[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
        position = np.cumsum(first, axis=1) - 1  # rank of each observation's point among the member's points
        unique = position[:, -1] + 1
        width = int(unique.max())
        flat = (position + width * np.arange(members)[:, None]).ravel()
        # bincount sums each point's scores in observation order: a member's statistics do not depend on
        # the other members of the batch.
        counts = np.bincount(flat, minlength=members * width).reshape(members, width)
        sums = np.bincount(flat, weights=y.ravel(), minlength=members * width).reshape(members, width)
        present = counts > 0
        point_means = np.where(present, sums / np.maximum(counts, 1), 0.0)
        deviation = y - np.take_along_axis(point_means, position, axis=1)
        points = np.zeros((members, width), dtype=np.int64)  # padding: grid point 0 (its weight is 0)
        rows, columns = np.nonzero(first)
        points[rows, position[rows, columns]] = ordered[rows, columns]
        return Replicates(
            x=factors.grid[torch.as_tensor(points)],
            means=torch.as_tensor(point_means),
            weights=torch.as_tensor(np.where(present, 1.0 / np.maximum(counts, 1), 0.0)),
            unique=torch.as_tensor(unique.astype(np.int64)),
            within=torch.as_tensor((deviation**2).sum(axis=1)),
            log_counts=torch.as_tensor(np.log(np.maximum(counts, 1)).sum(axis=1)),
            total=k,
        )

    def rows(self, rows: torch.Tensor) -> Replicates:
        """The members ``rows``, padding trimmed to their largest number of distinct points."""
        width = int(self.unique[rows].max())
        return Replicates(
            x=self.x[rows, :width],
            means=self.means[rows, :width],
            weights=self.weights[rows, :width],
            unique=self.unique[rows],
            within=self.within[rows],
            log_counts=self.log_counts[rows],
            total=self.total,
        )


class NegativeMarginalLogLikelihood:
    """BoTorch's fitting loss of every member and its gradient in closed form, on replicate-reduced data.

    BoTorch's loss is −[log N(ỹ | c·1, K + σ²I) + log p(σ²) + Σ_d log p(ℓ_d)] / k over the k standardised
    scores ỹ, with K_ij = exp(−½ Σ_d (x_id − x_jd)²/ℓ_d²) and the model's LogNormal priors (GPyTorch's
    ``ExactMarginalLogLikelihood`` divided by k). On a grid, observations repeat points: let the u distinct
    points have n_i observations each, mean ȳ_i and within-point sum of squares SS_i = Σ_j (ỹ_ij − ȳ_i)².
    Then, exactly (Binois, Gramacy & Ludkovski 2018, "Practical heteroskedastic Gaussian process modeling for
    large simulation experiments", JCGS 27(4): the "Woodbury" identities of its homoskedastic part; the
    constants below are re-derived here and tested against GPyTorch on the replicated data)::

        log N(ỹ | c, K + σ²I) = log N(ȳ | c, K_u + σ² N⁻¹)
                                − (k − u)/2 · log(2πσ²) − ½ Σ_i log n_i − Σ_i SS_i / (2σ²),

    with N = diag(n_i) and K_u the kernel on the distinct points. Derivation: write K = U K_u Uᵀ with U the
    k×u incidence matrix (UᵀU = N) and split ỹ − c = U(ȳ − c) + r, r ⊥ range(U) (r holds the deviations
    from the point means, rᵀr = Σ_i SS_i). Σ = K + σ²I maps range(U) to itself, ΣU = U(σ²I + K_u N), and is
    σ²I on its complement (dimension k − u). Hence (ỹ − c)ᵀΣ⁻¹(ỹ − c) = rᵀr/σ² + (ȳ − c)ᵀN(σ²I + K_u N)⁻¹(ȳ − c)
    = rᵀr/σ² + (ȳ − c)ᵀ(K_u + σ²N⁻¹)⁻¹(ȳ − c), and log det Σ = (k − u) log σ² + log det(σ²I + K_u N)
    = (k − u) log σ² + Σ_i log n_i + log det(K_u + σ²N⁻¹); the k log 2π splits into u + (k − u). The loss is
    therefore the same function of (σ², c, ℓ), constants included, at O(u³) instead of O(k³) per evaluation.

    Gradients (Rasmussen & Williams 2006, eq. 5.9, on A = K_u + σ²N⁻¹): with α = A⁻¹(ȳ − c) and
    W = ααᵀ − A⁻¹: ∂/∂σ² = ½ Σ_i W_ii/n_i − (k − u)/(2σ²) + Σ_i SS_i/(2σ⁴), ∂/∂c = Σα,
    ∂/∂ℓ_d = ½ Σ_ij W_ij K_ij (x_id − x_jd)²/ℓ_d³. Padding entries (weight 0) get A_ii = 1 and no coupling,
    residual 0: they add exactly nothing.

    Args:
        data: The members' replicate-reduced observations.
    """

    def __init__(self, data: Replicates) -> None:
        self._data = data
        x = data.x
        self._squared = (x[:, :, None, :] - x[:, None, :, :]) ** 2  # (m, u, u, d); fit_surrogate bounds m·u²
        self._present = (data.weights > 0).to(x.dtype)
        self._everyone = list(range(x.shape[0]))
        self._noise_prior, self._lengthscale_prior = noise_prior(), lengthscale_prior(int(x.shape[-1]))

    def __call__(self, state: np.ndarray, batch_indices: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """Loss and gradient of the members ``batch_indices`` at ``state`` (shape ``(a, 2 + d)``)."""
        data, squared, present = self._data, self._squared, self._present
        if list(batch_indices) != self._everyone:  # members still iterating: trim their padding
            rows = torch.as_tensor(np.asarray(batch_indices, dtype=np.int64))
            data = data.rows(rows)
            width = data.x.shape[1]
            squared, present = squared[rows, :width, :width], present[rows, :width]
        theta = torch.as_tensor(state)
        noise, constant, lengthscale = theta[:, 0], theta[:, 1], theta[:, 2:]
        x, weights = data.x, data.weights
        rbf = torch.exp(-0.5 * torch.einsum("aijd,ad->aij", squared, lengthscale**-2))
        padded = not bool(present.all())
        if padded:  # padding entries are uncoupled from everything
            rbf.mul_(present[:, :, None] * present[:, None, :])
        # In-place updates of (a, u, u) blocks: at u ≈ 300 these elementwise passes cost as much as the Cholesky.
        matrix = rbf.clone()
        matrix.diagonal(dim1=-2, dim2=-1).add_(noise[:, None] * weights + (1.0 - present))
        chol = torch.linalg.cholesky(matrix)  # raises LinAlgError if not p.d.
        residual = ((data.means - constant[:, None]) * present).unsqueeze(-1)
        alpha = torch.cholesky_solve(residual, chol)
        log_det = 2.0 * torch.log(torch.diagonal(chol, dim1=-2, dim2=-1)).sum(-1)
        unique = data.unique.to(x.dtype)
        repeated = data.total - unique  # k − u
        log_likelihood = -0.5 * (
            (residual * alpha).sum((-1, -2))
            + log_det
            + unique * math.log(2.0 * math.pi)
            + repeated * torch.log(2.0 * math.pi * noise)
            + data.log_counts
            + data.within / noise
        )
        w = torch.cholesky_inverse(chol).neg_().baddbmm_(alpha, alpha.transpose(-1, -2))  # ααᵀ − A⁻¹
        grad_noise = 0.5 * (
            (torch.diagonal(w, dim1=-2, dim2=-1) * weights).sum(-1) - repeated / noise + data.within / noise**2
        )
        grad_constant = alpha.squeeze(-1).sum(-1)
        grad_lengthscale = 0.5 * torch.einsum("aij,aijd->ad", w.mul_(rbf), squared) / lengthscale**3
        prior_noise, dprior_noise = _log_normal_prior(self._noise_prior, noise)
        prior_lengthscale, dprior_lengthscale = _log_normal_prior(self._lengthscale_prior, lengthscale)
        loss = -(log_likelihood + prior_noise + prior_lengthscale.sum(-1)) / data.total
        grad = torch.cat(
            [
                (grad_noise + dprior_noise)[:, None],
                grad_constant[:, None],
                grad_lengthscale + dprior_lengthscale,
            ],
            dim=1,
        )
        if not (torch.isfinite(loss).all() and torch.isfinite(grad).all()):
            # GPyTorch would raise or steer scipy elsewhere: let fit_surrogate replay that member exactly.
            raise NanError("non-finite marginal log-likelihood or gradient")
        return loss.numpy(), (-grad / data.total).numpy()


def _log_normal_prior(prior: LogNormalPrior, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-density log p(v) by the prior itself (float32 loc/scale included) and d log p/dv.

    d log p/dv = −1/v − (log v − μ)/(s² v) for the LogNormal(μ, s) prior.
    """
    return prior.log_prob(value), -1.0 / value - (value.log() - prior.loc) / prior.scale.pow(2) / value

"""The GP posterior on the grid at fixed hyperparameters, conditioned exactly on one observation at a time.

:func:`dphypo.strategies.gp.fit.fit_surrogate` fits a GP's hyperparameters and returns its posterior as a
:class:`GridPosterior`; between two fits, a GP session (:class:`dphypo.strategies.gp.session.GPSession`) conditions
that posterior on each new observation instead of refitting. At fixed hyperparameters and a fixed ``Standardize``
transform this is exact: the result equals the posterior computed from scratch on all observations (Rasmussen &
Williams 2006, Alg. 2.1) up to round-off (``tests/strategies/test_posterior.py``), at O(R·n) per observation
instead of O(u³ + u²n).

Representation, per member, in the GP's standardised space (latent g ~ GP(c, k_ℓ), observations g + N(0, σ²),
score = loc + scale·g): the posterior mean μ over the n grid points, its variance v, and rows V (R × n) with
posterior covariance Σ = K − VᵀV, K the prior covariance of the grid. A fit gives V = L⁻¹k(X, grid) (L the
Cholesky factor of the training covariance). Observing y at grid point i is the Gaussian update (the Kalman /
sequential Bayes form of the same posterior, Rasmussen & Williams 2006 §2.2 applied to one new point)::

    s = Σ[:, i] = k(grid, x_i) − Vᵀ V[:, i],   d = s_i + σ²,
    μ ← μ + s (y − μ_i)/d,   v ← v − s²/d,   V ← [V; sᵀ/√d],

so Σ ← Σ − ssᵀ/d. V grows by one row per observation.

**Bounded memory (low rank).** Every row of V lies in the span of the prior covariances k(x_j, ·) of the member's
*distinct* observed points x_j (a fit's rows are L⁻¹k(X, grid); an appended row is k(·, x_i) − Vᵀ V[:, i]), so
VᵀV has rank at most u, the number of distinct points the member has observed (u ≤ min(n, t) after t
observations). Once a member holds 2u rows they are compressed to u: with G = VVᵀ = UΛUᵀ (R × R), the rows U_uᵀV
(top-u eigenvectors) have the same Gram matrix VᵀV exactly (the other eigenvalues are 0 in exact arithmetic). So a
member holds at most min(t, 2u) + 1 ≤ min(t, 2n) + 1 rows of n float64s: O(n·min(t, n)) per member, however long
the search and however often a sampler returns to the same points (:mod:`dphypo.strategies.gp.memory` states the
bound; the batched simulator sizes its batches by it, :func:`dphypo.simulation.batched.memory_batch`).
"""

from __future__ import annotations

import gpytorch
import numpy as np
import torch

from dphypo._threads import torch_threads

__all__ = ["GridFactors", "GridPosterior"]

# Rounding slack allowed on unit coordinates (e.g. log-space maps that land at 1 + 1e-16).
_UNIT_TOL = 1e-9


class GridFactors:
    """The grid's distinct coordinates per dimension, for cheap batched RBF cross-covariances.

    Args:
        grid: Unit coordinates, shape ``(n, d)``, float, in ``[0, 1]``.
    """

    def __init__(self, grid: np.ndarray) -> None:
        grid = np.asarray(grid, dtype=np.float64)
        if grid.ndim != 2 or grid.shape[0] == 0 or grid.shape[1] == 0:
            raise ValueError(f"grid must have shape (n, d) with n, d >= 1, got shape {grid.shape!r}")
        if not np.all(np.isfinite(grid)) or grid.min() < -_UNIT_TOL or grid.max() > 1.0 + _UNIT_TOL:
            raise ValueError("grid must hold finite unit coordinates in [0, 1], got values outside [0, 1]")
        grid = np.clip(grid, 0.0, 1.0)  # as fit_surrogate does
        self.grid = torch.as_tensor(grid.copy())
        uniques = [np.unique(grid[:, d], return_inverse=True) for d in range(grid.shape[1])]
        self.values = [torch.as_tensor(values) for values, _ in uniques]
        self.codes = [torch.as_tensor(codes.reshape(-1)) for _, codes in uniques]
        mesh = np.meshgrid(*(values for values, _ in uniques), indexing="ij")
        product = np.stack([m.ravel() for m in mesh], axis=1)
        # A C-order product grid (every landscape) is an outer product of the factors: no gather needed.
        self.is_product = product.shape == grid.shape and bool(np.array_equal(product, grid))

    def cross_kernel(self, train_x: torch.Tensor, lengthscale: torch.Tensor) -> torch.Tensor:
        """RBF covariance between training points and every grid point.

        Args:
            train_x: Shape ``(c, k, d)``.
            lengthscale: Shape ``(c, d)``.

        Returns:
            exp(−½ Σ_d (x_d − g_d)²/ℓ_d²), shape ``(c, k, n)``.
        """
        factors = [
            torch.exp(-0.5 * ((train_x[:, :, d, None] - values) / lengthscale[:, d, None, None]) ** 2)
            for d, values in enumerate(self.values)
        ]
        c, k = train_x.shape[:2]
        if self.is_product:
            kernel = factors[0]
            for factor in factors[1:]:
                kernel = (kernel[..., :, None] * factor[..., None, :]).reshape(c, k, -1)
            return kernel
        kernel = factors[0][:, :, self.codes[0]]
        for factor, codes in zip(factors[1:], self.codes[1:], strict=True):
            kernel = kernel * factor[:, :, codes]
        return kernel


class GridPosterior:
    """Posteriors of m members' GPs over the grid at fixed hyperparameters (module docstring), batch-native.

    Mutable: :meth:`condition` and :meth:`put` update it in place (the factor V is large; copying it per step
    would cost as much as the update).

    Args:
        factors: The grid (its ``cross_kernel``).
        hyper: ``(noise, constant, lengthscale_1..d)`` in the standardised space, shape ``(m, 2 + d)``.
        loc: ``Standardize`` offsets (score units), shape ``(m,)``.
        scale: ``Standardize`` scales (score units), shape ``(m,)``.
        mean: Latent posterior means μ (standardised), shape ``(m, n)``.
        variance: Latent posterior variances v (standardised, before any clamp), shape ``(m, n)``.
        factor: Rows V, shape ``(m, R, n)``; zero rows are allowed (they add nothing to VᵀV).
    """

    def __init__(
        self,
        factors: GridFactors,
        hyper: torch.Tensor,
        loc: torch.Tensor,
        scale: torch.Tensor,
        mean: torch.Tensor,
        variance: torch.Tensor,
        factor: torch.Tensor,
    ) -> None:
        members, size = mean.shape
        if variance.shape != mean.shape or factor.shape[0] != members or factor.shape[2] != size:
            raise ValueError(f"mean, variance and factor must have shapes (m, n), (m, n), (m, R, n); got "
                             f"{tuple(mean.shape)}, {tuple(variance.shape)}, {tuple(factor.shape)}")
        if hyper.shape[0] != members or loc.shape != (members,) or scale.shape != (members,):
            raise ValueError(f"hyper, loc and scale must have {members} rows, got shapes {tuple(hyper.shape)}, "
                             f"{tuple(loc.shape)}, {tuple(scale.shape)}")
        self._factors = factors
        self.hyper, self.loc, self.scale = hyper, loc, scale
        self.mean, self.variance = mean, variance
        self._factor = factor
        # Rows in use per member: a new row goes after them (all rows beyond are zero).
        self._rows = np.full(members, factor.shape[1], dtype=np.int64)
        # Grid points each member's rows are built from (mark_observed, condition): their count bounds VᵀV's rank.
        # A member with none marked (a posterior built directly from its factor) is bounded by n instead.
        self._seen = np.zeros((members, size), dtype=bool)

    @property
    def members(self) -> int:
        """Number of members m."""
        return int(self.mean.shape[0])

    @property
    def size(self) -> int:
        """Number of grid points n."""
        return int(self.mean.shape[1])

    @classmethod
    def empty(cls, factors: GridFactors, members: int, size: int, parameters: int) -> GridPosterior:
        """A posterior of ``members`` members that have no model yet (``nan`` hyperparameters, no rows)."""
        nan = torch.full((members, parameters), float("nan"), dtype=torch.float64)
        flat = torch.full((members,), float("nan"), dtype=torch.float64)
        grid = torch.full((members, size), float("nan"), dtype=torch.float64)
        no_rows = torch.zeros(members, 0, size, dtype=torch.float64)
        return cls(factors, nan, flat, flat.clone(), grid, grid.clone(), no_rows)

    def score_moments(self, members: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and standard deviation of the latent function in score units.

        As BoTorch's ``Standardize.untransform_posterior`` and GPyTorch's ``MultivariateNormal.variance``:
        loc + scale·μ and √max(scale²·v, min_variance).

        Args:
            members: Which members, shape ``(k,)`` (default: all).

        Returns:
            ``(mean, std)``, each of shape ``(k, n)``.
        """
        rows = slice(None) if members is None else torch.as_tensor(np.asarray(members, dtype=np.int64))
        loc, scale = self.loc[rows, None], self.scale[rows, None]
        min_variance = gpytorch.settings.min_variance.value(torch.float64)
        variance = (self.variance[rows] * scale**2).clamp_min(min_variance)
        return (loc + scale * self.mean[rows]).numpy(), variance.sqrt().numpy()

    def standardization(self, members: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The members' ``Standardize`` offsets and scales (score units), each of shape ``(k,)``."""
        at = torch.as_tensor(np.asarray(members, dtype=np.int64))
        return self.loc[at].numpy(), self.scale[at].numpy()

    def factor_rows(self, members: np.ndarray) -> torch.Tensor:
        """The members' rows V (posterior covariance K − VᵀV, standardised space), shape ``(k, R, n)``.

        Zero rows beyond a member's own count add nothing to VᵀV. A copy (for joint covariances, e.g. BoTorch
        acquisitions over grid points: :mod:`dphypo.strategies.gp.acquisition`).

        Args:
            members: Shape ``(k,)``.
        """
        members = np.asarray(members, dtype=np.int64)
        width = int(self._rows[members].max()) if members.size else 0
        return self._factor[torch.as_tensor(members), :width].clone()

    def mark_observed(self, indices: np.ndarray) -> None:
        """Record the grid points each member's factor was built from (a fit's training points), in order.

        Args:
            indices: Shape ``(m, k)``: member j's observed grid indices (repeats allowed).
        """
        indices = np.asarray(indices, dtype=np.int64)
        self._seen[np.arange(self.members)[:, None], indices] = True

    def put(self, members: np.ndarray, other: GridPosterior, rows: np.ndarray | None = None) -> None:
        """Replace members ``members`` by the members ``rows`` of ``other`` (default: all of them, in order).

        Args:
            members: Shape ``(k,)``, distinct integers in ``[0, m)``.
            other: A posterior on the same grid.
            rows: Shape ``(k,)``: which of ``other``'s members (default ``arange(k)``).
        """
        members = np.asarray(members, dtype=np.int64)
        rows = np.arange(members.size) if rows is None else np.asarray(rows, dtype=np.int64)
        if members.size == 0:
            return
        at, src = torch.as_tensor(members), torch.as_tensor(rows)
        for name in ("hyper", "loc", "scale", "mean", "variance"):
            getattr(self, name)[at] = getattr(other, name)[src]
        width = int(other._rows[rows].max())
        self._reserve(width)
        self._factor[at] = 0.0
        self._factor[at, :width] = other._factor[src, :width]
        self._rows[members] = other._rows[rows]
        self._seen[members] = other._seen[rows]

    def condition(self, members: np.ndarray, indices: np.ndarray, values: np.ndarray) -> None:
        """Condition each member on one new observation (module docstring), in place.

        Args:
            members: Shape ``(k,)``, distinct integers in ``[0, m)``.
            indices: Grid index of each member's observation, shape ``(k,)``.
            values: Its score in score units (oriented, imputed), shape ``(k,)``, finite.
        """
        members = np.asarray(members, dtype=np.int64)
        if members.size == 0:
            return
        with torch_threads():  # one thread by default, restored afterwards (see dphypo._threads)
            self._condition(members, np.asarray(indices, dtype=np.int64), np.asarray(values, dtype=np.float64))

    def _condition(self, members: np.ndarray, indices: np.ndarray, values: np.ndarray) -> None:
        """:meth:`condition` on validated arrays."""
        at = torch.as_tensor(members)
        point = torch.as_tensor(indices)
        observed = (torch.as_tensor(values) - self.loc[at]) / self.scale[at]
        noise, lengthscale = self.hyper[at, 0], self.hyper[at, 2:]
        factors = self._factors
        prior_column = factors.cross_kernel(factors.grid[point][:, None, :], lengthscale)[:, 0]
        width = int(self._rows[members].max())
        factor = self._member_rows(members, width)  # (k, R, n)
        at_point = factor[torch.arange(members.size), :, point]  # V[:, i] of each member, (k, R)
        column = prior_column - torch.bmm(at_point[:, None, :], factor)[:, 0]
        picked = column.gather(1, point[:, None])[:, 0]
        spread = picked + noise  # > 0: the noise is bounded below (BoTorch's GreaterThan(1e-4))
        mean, variance = self.mean[at], self.variance[at]
        residual = observed - mean.gather(1, point[:, None])[:, 0]
        self.mean[at] = mean + column * (residual / spread)[:, None]
        self.variance[at] = variance - column**2 / spread[:, None]
        self._seen[members, indices] = True
        self._append(members, column / spread.sqrt()[:, None])

    def _member_rows(self, members: np.ndarray, width: int) -> torch.Tensor:
        """The members' first ``width`` rows of V, shape ``(k, width, n)``: a view when they are consecutive.

        The batched engine conditions its still-running members, a consecutive range; indexing by a tensor would
        copy the whole (k, R, n) factor on every step (as much work as the update itself).
        """
        first, last = int(members[0]), int(members[-1])
        if last - first + 1 == members.size and bool(np.all(np.diff(members) == 1)):
            return self._factor[first : last + 1, :width]
        return self._factor[torch.as_tensor(members), :width]

    def _append(self, members: np.ndarray, rows: torch.Tensor) -> None:
        """Add one row to each member's factor, compressing members whose rows reach twice their rank bound."""
        bound = self._rank_bound(members)
        full = members[(self._rows[members] >= 2 * bound) & (self._rows[members] > bound)]
        if full.size:
            self._compress(full)
        self._reserve(int(self._rows[members].max()) + 1)
        self._factor[torch.as_tensor(members), torch.as_tensor(self._rows[members])] = rows
        self._rows[members] += 1

    def _rank_bound(self, members: np.ndarray) -> np.ndarray:
        """Upper bound on rank(VᵀV) per member: its distinct observed points (n if none are recorded)."""
        seen = self._seen[members].sum(axis=1)
        return np.where(seen > 0, np.minimum(seen, self.size), self.size).astype(np.int64)

    def _compress(self, members: np.ndarray) -> None:
        """Replace each member's R rows V by its rank bound u rows U_uᵀV (module docstring; same VᵀV)."""
        bound = self._rank_bound(members)
        for keep in np.unique(bound):  # members with the same bound compress together
            group = members[bound == keep]
            at = torch.as_tensor(group)
            width = int(self._rows[group].max())
            rows = self._factor[at, :width]
            gram = torch.bmm(rows, rows.transpose(1, 2))  # (k, R, R); zero padding rows add zero eigenvalues
            top = torch.linalg.eigh(gram).eigenvectors[:, :, width - int(keep):]  # ascending: the last u
            compressed = torch.bmm(top.transpose(1, 2), rows)  # (k, u, n)
            self._factor[at] = 0.0
            self._factor[at, : int(keep)] = compressed
            self._rows[group] = int(keep)

    def _reserve(self, rows: int) -> None:
        """Grow the factor's row capacity to at least ``rows`` (by half again, so appends amortise)."""
        capacity = self._factor.shape[1]
        if rows <= capacity:
            return
        grown = max(rows, capacity + capacity // 2, 8)
        factor = torch.zeros(self.members, grown, self.size, dtype=self._factor.dtype)
        factor[:, :capacity] = self._factor
        self._factor = factor

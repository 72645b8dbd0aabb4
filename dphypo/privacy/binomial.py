r"""Binomial number of runs ``T ~ Bin(n, p)`` (Koskela, Redberg & Wang 2024, Section 5.2, Theorem 5.7).

Compared with Poisson(m) at the same mean m = np, Bin(n, p) is more concentrated (Var = m(1 − p) < m) and
caps the compute at n runs; n → ∞ with np = m recovers Poisson (KRW 2024, Corollary 5.8).

**T = 0.** The support includes 0 (probability (1 − p)^n). As for Poisson T (Papernot & Steinke 2022,
Theorem 6), the search must then release a fixed, data-independent default output. KRW 2024 (App. B, proof of
Theorem 4.1) takes the PGF over k ≥ 1 and drops the K = 0 term: for the hockey-stick divergence it contributes
``[P(K=0) − e^ε P(K=0)]_+ = 0`` for every ε ≥ 0, which is why Theorem 5.7 is stated "for all ε > 0". The
distribution is *not* conditioned on T ≥ 1 (that would be a different law, covered by no theorem).

**Scope.** Only the privacy-profile bound of KRW 2024 Theorem 5.7 covers binomial T, and only for a *uniform*
(non-adaptive, C = c = 1) search: there is no RDP theorem for it in dphypo (Papernot & Steinke analyse TNB and
Poisson T; DP-HyPO Theorem 1 is TNB-only). See :mod:`dphypo.privacy.profile_tuning`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from scipy import special

from dphypo.privacy.distributions import RunCountDistribution

__all__ = ["Binomial"]


def _check_unit_interval(x: np.ndarray | float) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if np.any(~np.isfinite(x)) or np.any(x < 0.0) or np.any(x > 1.0):
        raise ValueError(f"pgf argument must lie in [0, 1], got {x!r}")
    return x


@dataclass(frozen=True)
class Binomial(RunCountDistribution):
    """``Bin(n, p)`` on {0, 1, ..., n}: ``P[T=k] = C(n,k) p^k (1−p)^{n−k}``, E[T] = np.

    Args:
        n: Number of trials n ≥ 1 (the largest possible number of runs).
        p: Success probability p ∈ (0, 1) (KRW 2024 Theorem 5.7 assumes 0 < p < 1).
    """

    n: int
    p: float
    support_min: ClassVar[int] = 0

    def __post_init__(self) -> None:
        if not (isinstance(self.n, (int, np.integer)) and not isinstance(self.n, bool) and self.n >= 1):
            raise ValueError(f"n must be an integer >= 1, got {self.n!r}")
        if not (isinstance(self.p, (int, float)) and 0.0 < self.p < 1.0):
            raise ValueError(f"p must be in (0, 1), got {self.p!r}")
        object.__setattr__(self, "n", int(self.n))
        object.__setattr__(self, "p", float(self.p))

    @classmethod
    def from_mean(cls, n: int, mean: float) -> Binomial:
        """``Bin(n, mean/n)``; the mean must lie in (0, n).

        Args:
            n: Number of trials n ≥ 1.
            mean: Target E[T] ∈ (0, n).

        Returns:
            The distribution.
        """
        if not (isinstance(n, (int, np.integer)) and n >= 1):
            raise ValueError(f"n must be an integer >= 1, got {n!r}")
        if not (isinstance(mean, (int, float)) and math.isfinite(mean) and 0.0 < mean < n):
            raise ValueError(f"mean must be in (0, n={n}) for a binomial run count, got {mean!r}")
        return cls(int(n), float(mean) / int(n))

    @property
    def name(self) -> str:
        return "binomial"

    @property
    def mean(self) -> float:  # type: ignore[override]
        """E[T] = np."""
        return self.n * self.p

    @property
    def variance(self) -> float:
        """Var[T] = np(1 − p)."""
        return self.n * self.p * (1.0 - self.p)

    def log_pmf(self, k: np.ndarray | int) -> np.ndarray:
        k = np.asarray(k, dtype=np.float64)
        n = float(self.n)
        with np.errstate(invalid="ignore"):
            out = (
                special.gammaln(n + 1.0)
                - special.gammaln(k + 1.0)
                - special.gammaln(n - k + 1.0)
                + k * math.log(self.p)
                + (n - k) * math.log1p(-self.p)
            )
        valid = (k >= 0) & (k <= n) & (k == np.floor(k))
        return np.where(valid, out, -np.inf)

    def pgf(self, x: np.ndarray | float) -> np.ndarray:
        """KRW 2024 eq. (C.7): ``f(x) = (1 − p + px)^n``."""
        x = _check_unit_interval(x)
        return np.exp(self.n * np.log1p(self.p * (x - 1.0)))

    def pgf_derivative(self, x: np.ndarray | float) -> np.ndarray:
        """``f'(x) = np (1 − p + px)^{n−1}`` (≤ np = E[T] on [0, 1], KRW 2024 eq. (C.10))."""
        x = _check_unit_interval(x)
        return self.n * self.p * np.exp((self.n - 1) * np.log1p(self.p * (x - 1.0)))

    def tail_bound(self, k: int) -> float:
        """P[T > k], summed exactly over the finite support (0 for k ≥ n), rounded up by a relative 1e-12."""
        if k < 0:
            return 1.0
        if k >= self.n:
            return 0.0
        log_tail = float(special.logsumexp(self.log_pmf(np.arange(k + 1, self.n + 1))))
        return min(1.0, math.exp(log_tail) * (1.0 + 1e-12))

    def sample(self, rng: np.random.Generator) -> int:
        """Draw T once by inverse-CDF sampling over the finite support (one uniform draw, as for other laws).

        Args:
            rng: The generator to draw from.

        Returns:
            A sample of T in {0, ..., n}.
        """
        if not isinstance(rng, np.random.Generator):
            raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
        u = rng.random()
        cdf = np.cumsum(self.pmf(np.arange(self.n + 1)))
        # A summed pmf a hair below 1 must not push T outside the support.
        return int(min(int(np.searchsorted(cdf, u, side="right")), self.n))

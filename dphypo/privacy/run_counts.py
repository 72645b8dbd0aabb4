r"""Distributions of the number of runs T of a private hyperparameter search.

The run count must be random, drawn once and independently of the data, and never released (Papernot &
Steinke 2022, §3.3; DP-HyPO Framework 1). The accountant and the sampler must use the *same* distribution
object, so every quantity here is computed from the parameters actually stored (a user who asks for a mean gets
the γ that realises it, and the mean reported back is recomputed from that γ).

Families:

* :class:`TruncatedNegativeBinomial` ``TNB(θ, γ)``, θ ∈ (−1, ∞), γ ∈ (0, 1), support {1, 2, ...}
  (Papernot & Steinke 2022, Definition 1; DP-HyPO §3.2). θ = 0 is the logarithmic distribution,
  θ = 1 the geometric distribution.
* :class:`Poisson` ``Poisson(μ)``, support {0, 1, ...} (Papernot & Steinke 2022, Theorem 6). T = 0 has positive
  probability; the search then releases a fixed, data-independent default output.
* :class:`Binomial` ``Bin(n, p)``, support {0, ..., n} (Koskela, Redberg & Wang 2024, Section 5.2, Theorem 5.7),
  described below.

**Binomial T.** Compared with Poisson(m) at the same mean m = np, Bin(n, p) is more concentrated
(Var = m(1 − p) < m) and caps the compute at n runs; n → ∞ with np = m recovers Poisson (KRW 2024, Corollary 5.8).

**T = 0.** The support includes 0 (probability (1 − p)^n). As for Poisson T (Papernot & Steinke 2022,
Theorem 6), the search must then release a fixed, data-independent default output. KRW 2024 (App. B, proof of
Theorem 4.1) takes the PGF over k ≥ 1 and drops the K = 0 term: for the hockey-stick divergence it contributes
``[P(K=0) − e^ε P(K=0)]_+ = 0`` for every ε ≥ 0, which is why Theorem 5.7 is stated "for all ε > 0". The
distribution is *not* conditioned on T ≥ 1 (that would be a different law, covered by no theorem).

**Scope.** Only the privacy-profile bound of KRW 2024 Theorem 5.7 covers binomial T, and only for a *uniform*
(non-adaptive, C = c = 1) search: there is no RDP theorem for it in dphypo (Papernot & Steinke analyse TNB and
Poisson T; DP-HyPO Theorem 1 is TNB-only). See :mod:`dphypo.privacy.profile_tuning`.

References (docs/references.md): Papernot & Steinke 2022 arXiv:2110.03620v2; Koskela, Redberg & Wang 2024
arXiv:2402.06701 (version unverified); Wang et al. 2023 arXiv:2306.05734v2.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from scipy import optimize, special

from dphypo.privacy.validation import check_int_at_least, check_probability, check_theta

__all__ = [
    "RUN_COUNT_FAMILIES",
    "Binomial",
    "Poisson",
    "RunCountDistribution",
    "TruncatedNegativeBinomial",
    "geometric",
    "logarithmic",
    "make_run_count",
]

# Inverse-CDF sampling walks the pmf in blocks of this many support points.
_SAMPLE_BLOCK = 256


class RunCountDistribution(ABC):
    """A distribution of the number of runs T (a non-negative integer)."""

    #: Smallest value in the support (1 for the TNB family, 0 for Poisson).
    support_min: ClassVar[int]
    #: E[T] (a field or a property in subclasses).
    mean: float

    @property
    @abstractmethod
    def name(self) -> str:
        """Short family name used in reports (``"geometric"``, ``"poisson"``, ...)."""

    @abstractmethod
    def log_pmf(self, k: np.ndarray | int) -> np.ndarray:
        """Log P[T = k], elementwise; ``-inf`` outside the support."""

    @abstractmethod
    def pgf(self, x: np.ndarray | float) -> np.ndarray:
        """Probability generating function f(x) = E[x^T] for x ∈ [0, 1]."""

    @abstractmethod
    def pgf_derivative(self, x: np.ndarray | float) -> np.ndarray:
        """f'(x) = E[T x^(T-1)] for x ∈ [0, 1]."""

    @abstractmethod
    def tail_bound(self, k: int) -> float:
        """A rigorous upper bound on P[T > k] (used to truncate exact computations soundly)."""

    def pmf(self, k: np.ndarray | int) -> np.ndarray:
        """P[T = k], elementwise."""
        return np.exp(self.log_pmf(k))

    def sample(self, rng: np.random.Generator) -> int:
        """Draw T once by inverse-CDF sampling (exact up to float rounding of the pmf).

        Args:
            rng: The generator to draw from; the search's only source of randomness for T.

        Returns:
            A sample of T.
        """
        if not isinstance(rng, np.random.Generator):
            raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
        u = rng.random()
        cumulative = 0.0
        start = self.support_min
        while True:
            ks = np.arange(start, start + _SAMPLE_BLOCK)
            block = np.cumsum(self.pmf(ks)) + cumulative
            hit = int(np.searchsorted(block, u, side="right"))
            if hit < ks.size:
                return int(ks[hit])
            cumulative = float(block[-1])
            start += _SAMPLE_BLOCK
            # Float rounding can leave the summed pmf a hair below u; the rigorous tail bound says when the
            # remaining mass is below double precision, and then the last support point reached is returned.
            if self.tail_bound(start - 1) < 1e-300 or cumulative >= 1.0:
                return int(start - 1)


@dataclass(frozen=True)
class TruncatedNegativeBinomial(RunCountDistribution):
    r"""Truncated negative binomial ``TNB(θ, γ)`` on {1, 2, ...}.

    Papernot & Steinke 2022, Definition 1 (their η is our θ); DP-HyPO §3.2:

    * θ ≠ 0: ``P[T=k] = (1−γ)^k / (γ^{−θ} − 1) · Π_{ℓ=0}^{k−1} (ℓ+θ)/(ℓ+1)``,
      ``E[T] = θ(1−γ) / (γ(1−γ^θ))``.
    * θ = 0 (logarithmic): ``P[T=k] = (1−γ)^k / (k log(1/γ))``, ``E[T] = (1/γ − 1)/log(1/γ)``.
    * θ = 1 is geometric: ``P[T=k] = γ(1−γ)^{k−1}``, ``E[T] = 1/γ``.

    Args:
        theta: Shape θ ∈ (−1, ∞).
        gamma: γ ∈ (0, 1); larger γ means fewer runs.
    """

    theta: float
    gamma: float
    support_min: ClassVar[int] = 1

    def __post_init__(self) -> None:
        check_theta(self.theta)
        check_probability("gamma", self.gamma)
        object.__setattr__(self, "theta", float(self.theta))
        object.__setattr__(self, "gamma", float(self.gamma))

    @classmethod
    def from_mean(cls, theta: float, mean: float) -> TruncatedNegativeBinomial:
        """The TNB(θ, γ) whose mean is ``mean``; γ is found by a bracketing root finder.

        E[T] is continuous and strictly decreasing in γ, from ∞ (γ → 0) to 1 (γ → 1), so every mean > 1 is
        realised by exactly one γ. The returned object's :attr:`mean` is recomputed from that γ.

        Args:
            theta: Shape θ ∈ (−1, ∞).
            mean: Target E[T] > 1.

        Returns:
            The distribution.
        """
        check_theta(theta)
        if not (isinstance(mean, (int, float)) and math.isfinite(mean) and mean > 1.0):
            raise ValueError(
                f"mean must be a finite number > 1 for a truncated negative binomial, got {mean!r}"
            )
        if theta == 1.0:
            return cls(theta, 1.0 / mean)

        def excess_log_mean(log_gamma: float) -> float:
            return math.log(_tnb_mean(theta, math.exp(log_gamma))) - math.log(mean)

        # Bracket in log γ: E[T] → ∞ as γ → 0 (slowly for θ ≤ 0, like 1/(γ log(1/γ))) and → 1 as γ → 1.
        lo = -1.0
        while excess_log_mean(lo) < 0.0:
            lo *= 2.0
            if lo < -700.0:
                raise ValueError(f"mean {mean!r} is too large to represent for theta={theta!r}")
        hi = math.log1p(-1e-12)
        log_gamma = optimize.brentq(excess_log_mean, lo, hi, xtol=1e-15, rtol=4 * np.finfo(float).eps)
        return cls(theta, math.exp(log_gamma))

    @property
    def name(self) -> str:
        """Short family name used in reports and on the command line."""
        if self.theta == 0.0:
            return "logarithmic"
        if self.theta == 1.0:
            return "geometric"
        return "negbin"

    @property
    def mean(self) -> float:  # type: ignore[override]
        """E[T], recomputed from (θ, γ)."""
        return _tnb_mean(self.theta, self.gamma)

    def log_pmf(self, k: np.ndarray | int) -> np.ndarray:
        """Log-probability log P(T = k), elementwise, shape of ``k`` (``-inf`` outside the support)."""
        k = np.asarray(k, dtype=np.float64)
        theta, gamma = self.theta, self.gamma
        with np.errstate(divide="ignore", invalid="ignore"):
            if theta == 0.0:
                out = k * math.log1p(-gamma) - np.log(k) - math.log(-math.log(gamma))
            else:
                # Π_{ℓ<k}(ℓ+θ)/(ℓ+1) = Γ(k+θ)/(Γ(θ)Γ(k+1)); for θ ∈ (−1, 0) it and γ^{−θ}−1 are both negative,
                # so work with absolute values (gammaln returns log|Γ|).
                log_norm = math.log(abs(math.expm1(-theta * math.log(gamma))))
                out = (
                    k * math.log1p(-gamma)
                    + special.gammaln(k + theta)
                    - special.gammaln(theta)
                    - special.gammaln(k + 1.0)
                    - log_norm
                )
        valid = (k >= 1) & (k == np.floor(k))
        return np.where(valid, out, -np.inf)

    def pgf(self, x: np.ndarray | float) -> np.ndarray:
        """Papernot & Steinke 2022 eq. (7): ``((1−(1−γ)x)^{−θ} − 1)/(γ^{−θ} − 1)``, or ``log(1−(1−γ)x)/log γ``."""
        x = _check_unit_interval(x)
        log_base = np.log1p(-(1.0 - self.gamma) * x)
        if self.theta == 0.0:
            return log_base / math.log(self.gamma)
        return np.expm1(-self.theta * log_base) / math.expm1(-self.theta * math.log(self.gamma))

    def pgf_derivative(self, x: np.ndarray | float) -> np.ndarray:
        """Papernot & Steinke 2022, proof of Theorem 2: ``f'(x) = (1−(1−γ)x)^{−θ−1} γ^{θ+1} E[T]``."""
        x = _check_unit_interval(x)
        base = 1.0 - (1.0 - self.gamma) * x
        return base ** (-self.theta - 1.0) * self.gamma ** (self.theta + 1.0) * self.mean

    def tail_bound(self, k: int) -> float:
        """Upper bound on P[T > k] from the pmf ratio ``P[j+1]/P[j] = (1−γ)(j+θ)/(j+1)``.

        For j ≥ k+1 the ratio is at most ``r = (1−γ)·max(1, (k+1+θ)/(k+2))`` (it decreases to 1−γ when θ > 1 and
        increases to it when θ < 1), so the tail is at most ``P[k+1]/(1−r)`` whenever r < 1; otherwise 1.
        """
        if k < 0:
            return 1.0
        ratio = (1.0 - self.gamma) * max(1.0, (k + 1.0 + self.theta) / (k + 2.0))
        if ratio >= 1.0:
            return 1.0
        return min(1.0, float(self.pmf(k + 1)) / (1.0 - ratio))


def _tnb_mean(theta: float, gamma: float) -> float:
    """E[T] of TNB(θ, γ), stable near θ = 0 and γ = 1 (written with expm1/log1p, as dp_accounting does)."""
    log_gamma = math.log(gamma)
    # (1/γ − 1) / log(1/γ) is the θ → 0 limit; the factor θ log(1/γ)/(1 − γ^θ) → 1 as θ → 0.
    base = (1.0 / gamma - 1.0) / -log_gamma if gamma < 1.0 else 1.0
    if theta == 0.0:
        return base
    x = theta * log_gamma
    return base * (x / math.expm1(x))


def _check_unit_interval(x: np.ndarray | float) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if np.any(~np.isfinite(x)) or np.any(x < 0.0) or np.any(x > 1.0):
        raise ValueError(f"pgf argument must lie in [0, 1], got {x!r}")
    return x


def geometric(gamma: float) -> TruncatedNegativeBinomial:
    """Geometric T on {1, 2, ...}: ``TNB(θ=1, γ)``, ``P[T=k] = γ(1−γ)^{k−1}``, E[T] = 1/γ."""
    return TruncatedNegativeBinomial(1.0, gamma)


def logarithmic(gamma: float) -> TruncatedNegativeBinomial:
    """Logarithmic T on {1, 2, ...}: ``TNB(θ=0, γ)``, ``P[T=k] = (1−γ)^k/(k log(1/γ))``."""
    return TruncatedNegativeBinomial(0.0, gamma)


@dataclass(frozen=True)
class Poisson(RunCountDistribution):
    """Poisson(μ) on {0, 1, ...} (Papernot & Steinke 2022, Theorem 6).

    T = 0 has probability e^{−μ}; the search then releases a fixed, data-independent output. It is not
    conditioned on T ≥ 1 (that would be a different distribution, not covered by Theorem 6).

    Scope: μ ≥ 1. Theorem 6's bound ε(α) + μδ̂ + log(μ)/(α−1) has a negative last term for μ < 1, which at
    small orders pushes the "bound" below zero (a divergence never is): the statement is only meaningful for
    μ ≥ 1 (P&S §3.3 use μ ≥ 1 throughout; dp_accounting's ``PoissonTuning`` requires it too). A smaller μ
    would also make a search with no run the likely outcome.

    Args:
        mean: μ ≥ 1.
    """

    mean: float
    support_min: ClassVar[int] = 0

    def __post_init__(self) -> None:
        if not (isinstance(self.mean, (int, float)) and math.isfinite(self.mean) and self.mean >= 1.0):
            raise ValueError(
                f"mean must be a finite number >= 1 for a Poisson run count (Papernot-Steinke Theorem 6's scope), "
                f"got {self.mean!r}"
            )
        object.__setattr__(self, "mean", float(self.mean))

    @property
    def name(self) -> str:
        """Short family name used in reports and on the command line."""
        return "poisson"

    def log_pmf(self, k: np.ndarray | int) -> np.ndarray:
        """Log-probability log P(T = k), elementwise, shape of ``k`` (``-inf`` outside the support)."""
        k = np.asarray(k, dtype=np.float64)
        with np.errstate(invalid="ignore"):
            out = k * math.log(self.mean) - self.mean - special.gammaln(k + 1.0)
        valid = (k >= 0) & (k == np.floor(k))
        return np.where(valid, out, -np.inf)

    def pgf(self, x: np.ndarray | float) -> np.ndarray:
        """``f(x) = exp(μ(x − 1))``."""
        return np.exp(self.mean * (_check_unit_interval(x) - 1.0))

    def pgf_derivative(self, x: np.ndarray | float) -> np.ndarray:
        """``f'(x) = μ exp(μ(x − 1))``."""
        return self.mean * self.pgf(x)

    def tail_bound(self, k: int) -> float:
        """``P[T > k] ≤ P[T=k+1] / (1 − μ/(k+2))`` for k + 2 > μ (pmf ratio ``μ/(j+1)`` ≤ μ/(k+2) for j > k)."""
        if k < 0:
            return 1.0
        ratio = self.mean / (k + 2.0)
        if ratio >= 1.0:
            return 1.0
        return min(1.0, float(self.pmf(k + 1)) / (1.0 - ratio))


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
        check_int_at_least("n", self.n, 1)
        check_probability("p", self.p)
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
        check_int_at_least("n", n, 1)
        if not (isinstance(mean, (int, float)) and math.isfinite(mean) and 0.0 < mean < n):
            raise ValueError(f"mean must be in (0, n={n}) for a binomial run count, got {mean!r}")
        return cls(int(n), float(mean) / int(n))

    @property
    def name(self) -> str:
        """Short family name used in reports and on the command line."""
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
        """Log-probability log P(T = k), elementwise, shape of ``k`` (``-inf`` outside the support)."""
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


#: Names accepted by :func:`make_run_count` (and the CLI's ``--runs``).
RUN_COUNT_FAMILIES = ("negbin", "geometric", "logarithmic", "poisson", "binomial")


def make_run_count(
    family: str,
    *,
    theta: float | None = None,
    gamma: float | None = None,
    mean: float | None = None,
    max_runs: int | None = None,
) -> RunCountDistribution:
    """Build a run-count distribution from user-facing options (the CLI's ``--runs/--theta/--gamma/--mean``).

    Args:
        family: One of :data:`RUN_COUNT_FAMILIES`. ``geometric`` fixes θ = 1, ``logarithmic`` fixes θ = 0.
        theta: Shape θ > −1 (``negbin`` only; must agree with the family otherwise).
        gamma: γ ∈ (0, 1) (TNB family; give ``gamma`` or ``mean``, not both).
        mean: E[T] (> 1 for the TNB family, ≥ 1 for Poisson and binomial).
        max_runs: n of ``binomial`` runs, T ~ Bin(n, mean/n) (uniform search only; Koskela-Redberg-Wang 2024).

    Returns:
        The distribution.
    """
    if family not in RUN_COUNT_FAMILIES:
        raise ValueError(f"runs must be one of {', '.join(RUN_COUNT_FAMILIES)}, got {family!r}")
    if (max_runs is not None) != (family == "binomial"):
        raise ValueError("max-runs is required for binomial runs, and only for them")
    if mean is not None and not (math.isfinite(mean) and mean >= 1.0):
        raise ValueError(f"mean must be a finite number >= 1, got {mean!r}")
    if family == "binomial":
        if gamma is not None or theta is not None or mean is None:
            raise ValueError("binomial runs take --max-runs and --mean only")
        return Binomial.from_mean(max_runs, mean)  # type: ignore[arg-type]
    if family == "poisson":
        if gamma is not None or theta is not None:
            raise ValueError("poisson runs take only --mean (gamma and theta belong to the negbin family)")
        if mean is None:
            raise ValueError("mean is required for poisson runs")
        return Poisson(mean)
    fixed = {"geometric": 1.0, "logarithmic": 0.0}.get(family)
    if fixed is not None and theta is not None and theta != fixed:
        raise ValueError(f"theta is fixed to {fixed:g} for {family} runs, got {theta!r}")
    if fixed is None and theta is None:
        raise ValueError("theta is required for negbin runs")
    shape = fixed if fixed is not None else theta
    if (gamma is None) == (mean is None):
        raise ValueError(f"give exactly one of gamma or mean for {family} runs")
    if gamma is not None:
        return TruncatedNegativeBinomial(shape, gamma)  # type: ignore[arg-type]
    return TruncatedNegativeBinomial.from_mean(shape, mean)  # type: ignore[arg-type]

r"""Privacy profiles δ(ε) of base mechanisms (one candidate run), for hockey-stick accounting of a search.

The privacy profile of a mechanism M is ``δ_M(ε) = max_{X≃X′} H_{e^ε}(M(X)‖M(X′))`` with the hockey-stick
divergence ``H_{e^ε}(P‖Q) = ∫ [P − e^ε Q]_+`` (Balle et al. 2018, Theorem 1; Koskela, Redberg & Wang 2024,
Lemma 2.2): M is (ε, δ)-DP iff δ_M(ε) ≤ δ. Every profile here is the **symmetric** profile, i.e. the max over
both orderings of every neighbouring pair. With add/remove neighbours and Poisson subsampling the two
directions differ ("remove" vs "add" dominating pairs, Zhu, Dong & Wang 2022, Theorem 11), and the selection
bounds of :mod:`dphypo.privacy.profile_tuning` use both (Theorem 5.2 of Koskela, Redberg & Wang bounds the
complement event in the reverse direction), so a one-sided profile would be unsound.

Every profile is an *upper* bound on the true one (the selection bounds are monotone in δ_Q, so upper bounds
are safe and optimistic estimates are not):

* :class:`PldProfile` — a dp_accounting privacy loss distribution, built **pessimistically**
  (connect-the-dots, Doroshenko et al. 2022) with ``NeighboringRelation.ADD_OR_REMOVE_ONE``; its profile is
  max(remove, add), as dp_accounting's ``get_delta_for_epsilon`` returns. :func:`dpsgd_profile` is one
  DP-SGD run (``steps`` compositions of the Poisson-subsampled Gaussian), the same construction as
  dp_accounting's ``PLDAccountant``, cached per (σ, q, steps, discretisation).
* :class:`GaussianProfile` — the Gaussian mechanism in closed form (Balle & Wang 2018, Theorem 8), exact.
* :class:`DiscreteProfile` — the exact profile of two explicit finite distributions (audits and tests).
* :class:`MaxProfile` — the pointwise max of several profiles: a dominating profile for candidates drawn
  from a *fixed* distribution with different privacy costs (joint convexity of H_{e^ε}; KRW 2024 Sec. 6.1
  asks that "each candidate mechanism has the same privacy profile", which a common upper bound provides).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
from scipy import optimize, special

from dphypo.privacy.rdp import Mechanism, compose_mechanisms, dpsgd_mechanism, mechanism_key

__all__ = [
    "DEFAULT_DISCRETIZATION",
    "DiscreteProfile",
    "GaussianProfile",
    "MaxProfile",
    "PldProfile",
    "PrivacyProfile",
    "dpsgd_profile",
    "hockey_stick",
]

#: PLD discretisation of the privacy-loss grid. The notes' regression numbers use 1e-4 (pitfall 9: the
#: discretisation error grows with the number of steps; 1e-3 costs ≈ +0.015 ε at 14k steps, < 1e-3 at 2.3k).
DEFAULT_DISCRETIZATION = 1e-4

# Largest ε at which epsilon() searches; beyond it a profile is treated as "no finite ε" (inf).
_EPS_SEARCH_MAX = 200.0


class PrivacyProfile(ABC):
    """An upper bound ``δ(ε)`` on the symmetric privacy profile of a mechanism, for every real ε."""

    @property
    @abstractmethod
    def label(self) -> str:
        """Human-readable description of the mechanism."""

    @property
    def mechanism(self) -> Mechanism | None:
        """Exact description of the mechanism (:data:`~dphypo.privacy.rdp.Mechanism`), ``None`` if unknown.

        The accountant uses a profile only next to an RDP curve of the same mechanism.
        """
        return None

    @abstractmethod
    def delta(self, epsilon: np.ndarray | float) -> np.ndarray:
        """δ(ε), elementwise, for any real ε (negative ε allowed), clipped to [0, 1].

        Args:
            epsilon: Shape ``(k,)`` or scalar, any order.

        Returns:
            Shape like ``epsilon``.
        """

    def epsilon(self, delta: float) -> float:
        """The smallest ε ≥ 0 with ``δ(ε) ≤ delta`` (``inf`` if none below :data:`_EPS_SEARCH_MAX`).

        δ is non-increasing in ε, so root finding on ``log δ`` is exact up to its tolerance; the returned ε is
        on the conservative (upper) side of the root and is verified.

        Args:
            delta: Target δ ∈ (0, 1].

        Returns:
            ε ≥ 0.
        """
        _check_delta(delta)
        if float(self.delta(0.0)) <= delta:
            return 0.0
        if float(self.delta(_EPS_SEARCH_MAX)) > delta:
            return math.inf

        def excess(eps: float) -> float:  # log δ(ε) − log δ, clipped so that δ(ε) = 0 stays finite
            d = float(self.delta(eps))
            return max(-1e3, math.log(d) - math.log(delta)) if d > 0.0 else -1e3

        root = optimize.brentq(excess, 0.0, _EPS_SEARCH_MAX, xtol=1e-12, rtol=1e-12)
        eps = root
        while float(self.delta(eps)) > delta:  # brentq may land a hair on the wrong side
            eps = eps + max(1e-12, 1e-12 * eps)
        return float(eps)

    def total_variation(self) -> float:
        """δ(0) = max TV distance between neighbouring outputs (a Poisson-K selection pays m·δ(0))."""
        return float(self.delta(0.0))


def _check_delta(delta: float) -> None:
    if not (isinstance(delta, (int, float, np.floating)) and 0.0 < delta <= 1.0):
        raise ValueError(f"delta must be in (0, 1], got {delta!r}")


def hockey_stick(p: np.ndarray, q: np.ndarray, epsilon: np.ndarray | float) -> np.ndarray:
    """``H_{e^ε}(P‖Q) = Σ_o [P(o) − e^ε Q(o)]_+`` for explicit finite distributions, one direction.

    Args:
        p: Shape ``(K,)``, probabilities (need not sum to one: sub-distributions are allowed).
        q: Shape ``(K,)``.
        epsilon: Shape ``(k,)`` or scalar.

    Returns:
        Shape like ``epsilon``.
    """
    p = np.asarray(p, dtype=np.float64).reshape(-1)
    q = np.asarray(q, dtype=np.float64).reshape(-1)
    if p.shape != q.shape:
        raise ValueError(f"p and q must have the same shape, got {p.shape} and {q.shape}")
    eps = np.asarray(epsilon, dtype=np.float64)
    out = np.maximum(p[None, :] - np.exp(eps.reshape(-1, 1)) * q[None, :], 0.0).sum(axis=1)
    return out.reshape(eps.shape)


@dataclass(frozen=True, eq=False)
class _LossTable:
    """One direction of a discretised PLD as suffix sums, so δ(ε) is a ``searchsorted`` away (vectorised).

    ``δ(ε) = m_∞ + Σ_{l_j > ε} p_j (1 − e^{ε − l_j}) = m_∞ + U_k − e^ε L_k`` with k the first index with
    l_k > ε, ``U_k = Σ_{j≥k} p_j`` and ``L_k = Σ_{j≥k} p_j e^{−l_j}`` (dp_accounting's formula, supplementary
    material of Doroshenko et al. 2022, eq. (2)); the suffix sums add small terms first.
    """

    losses: np.ndarray
    upper: np.ndarray
    lower: np.ndarray
    infinity_mass: float

    @classmethod
    def from_pmf(cls, pmf: Any) -> _LossTable:
        dense = pmf.to_dense_pmf()
        # dp_accounting 0.6 exposes the grid only through these attributes; PldProfile checks the table
        # against the public get_delta_for_epsilon when built, so an upstream change fails loudly.
        probs = np.asarray(dense._probs, dtype=np.float64)
        losses = (np.arange(probs.size) + dense._lower_loss) * dense._discretization
        upper = np.append(np.cumsum(probs[::-1])[::-1], 0.0)
        # Capping the exponent only shrinks `lower` for losses below -700, which can only raise δ: conservative,
        # and it keeps the suffix sums finite (no inf·0 = nan).
        lower = np.append(np.cumsum((probs * np.exp(np.minimum(-losses, 700.0)))[::-1])[::-1], 0.0)
        return cls(losses, upper, lower, float(dense._infinity_mass))

    def delta(self, eps: np.ndarray) -> np.ndarray:
        k = np.searchsorted(self.losses, eps, side="right")  # first loss strictly above ε
        with np.errstate(over="ignore", invalid="ignore"):
            tail = self.upper[k] - np.exp(eps) * self.lower[k]
        return self.infinity_mass + np.where(self.upper[k] > 0.0, np.maximum(tail, 0.0), 0.0)


@dataclass(frozen=True, eq=False)
class PldProfile(PrivacyProfile):
    """The profile of a dp_accounting ``PrivacyLossDistribution`` (max over its remove and add PLDs).

    dp_accounting's vectorised ``get_delta_for_epsilon`` is a Python loop over the whole grid (≈ 1 s per call
    for a 4·10⁵-point DP-SGD PLD); the same formula is evaluated here from suffix sums (µs per ε), and checked
    against dp_accounting's scalar path at construction.

    Args:
        pld: A ``dp_accounting.pld.privacy_loss_distribution.PrivacyLossDistribution``; it must have been
            built with ``pessimistic_estimate=True`` (the default) for the result to be an upper bound.
        name: Description of the mechanism.
        mechanism_key: Exact description of the mechanism (:data:`~dphypo.privacy.rdp.Mechanism`), if known.
    """

    pld: Any
    name: str = "PLD"
    mechanism_key: Mechanism | None = None
    _tables: tuple[_LossTable, ...] = field(init=False, repr=False, default=())

    def __post_init__(self) -> None:
        pmfs = [self.pld._pmf_remove] if self.pld._symmetric else [self.pld._pmf_remove, self.pld._pmf_add]
        object.__setattr__(self, "_tables", tuple(_LossTable.from_pmf(p) for p in pmfs))
        probe = np.array([-0.5, 0.0, 0.5, 2.0])
        ours = self.delta(probe)
        reference = np.array([float(self.pld.get_delta_for_epsilon(float(e))) for e in probe])
        if not np.allclose(ours, np.clip(reference, 0.0, 1.0), rtol=1e-9, atol=1e-15):
            raise RuntimeError(
                f"PLD table disagrees with dp_accounting's get_delta_for_epsilon: {ours!r} vs {reference!r}; "
                "the installed dp_accounting changed its PLD internals"
            )

    @property
    def label(self) -> str:
        return self.name

    @property
    def mechanism(self) -> Mechanism | None:
        return self.mechanism_key

    def delta(self, epsilon: np.ndarray | float) -> np.ndarray:
        eps = np.asarray(epsilon, dtype=np.float64)
        if np.any(np.isnan(eps)):
            raise ValueError("epsilon must not be NaN")
        out = np.max(np.stack([t.delta(eps) for t in self._tables]), axis=0)
        return np.clip(out, 0.0, 1.0)

    def epsilon(self, delta: float) -> float:
        """dp_accounting's exact inversion of the discretised (pessimistic) PLD, max over both directions."""
        _check_delta(delta)
        return float(max(0.0, self.pld.get_epsilon_for_delta(delta)))

    def compose(self, other: PldProfile) -> PldProfile:
        """Sequential composition (e.g. a run, then the noisy release of its score); same discretisation."""
        return PldProfile(self.pld.compose(other.pld), f"{self.name} + {other.name}",
                          compose_mechanisms(self.mechanism, other.mechanism))


@lru_cache(maxsize=16)
def _dpsgd_profile(sigma: float, sample_rate: float, steps: int, discretization: float) -> PldProfile:
    from dp_accounting import privacy_accountant
    from dp_accounting.pld import privacy_loss_distribution

    single = privacy_loss_distribution.from_gaussian_mechanism(
        standard_deviation=sigma,
        sensitivity=1.0,
        pessimistic_estimate=True,
        value_discretization_interval=discretization,
        sampling_prob=sample_rate,
        use_connect_dots=True,
        neighboring_relation=privacy_accountant.NeighboringRelation.ADD_OR_REMOVE_ONE,
    )
    pld = single if steps == 1 else single.self_compose(steps)
    label = f"DP-SGD(sigma={sigma:g}, q={sample_rate:g}, steps={steps}) [PLD {discretization:g}]"
    return PldProfile(pld, label, dpsgd_mechanism(sigma, sample_rate, steps))


def dpsgd_profile(
    sigma: float, sample_rate: float, steps: int, *, discretization: float = DEFAULT_DISCRETIZATION
) -> PldProfile:
    """Privacy profile of one DP-SGD run: ``steps`` compositions of the Poisson-subsampled Gaussian mechanism.

    Built exactly as dp_accounting's ``PLDAccountant`` builds ``SelfComposedDpEvent(PoissonSampledDpEvent(q,
    GaussianDpEvent(σ)), steps)`` with ``NeighboringRelation.ADD_OR_REMOVE_ONE`` (pessimistic connect-the-dots
    PLD for the remove *and* the add pair, FFT self-composition), the numerical method KRW 2024 Sec. 6.2 uses
    (Koskela et al. 2021's FFT accountant on the dominating pairs of Zhu et al. 2022, Theorem 11). Cached per
    (σ, q, steps, discretisation).

    Args:
        sigma: Noise multiplier σ > 0.
        sample_rate: Poisson sampling rate q ∈ (0, 1].
        steps: Number of steps ≥ 1.
        discretization: Privacy-loss grid interval (smaller is tighter and slower).

    Returns:
        The profile.
    """
    if not (isinstance(sigma, (int, float)) and math.isfinite(sigma) and sigma > 0.0):
        raise ValueError(f"sigma must be a finite number > 0, got {sigma!r}")
    if not (isinstance(sample_rate, (int, float)) and 0.0 < sample_rate <= 1.0):
        raise ValueError(f"sample_rate must be in (0, 1], got {sample_rate!r}")
    if not (isinstance(steps, (int, np.integer)) and steps >= 1):
        raise ValueError(f"steps must be an integer >= 1, got {steps!r}")
    if not (isinstance(discretization, float) and 0.0 < discretization <= 0.1):
        raise ValueError(f"discretization must be a float in (0, 0.1], got {discretization!r}")
    return _dpsgd_profile(float(sigma), float(sample_rate), int(steps), discretization)


@dataclass(frozen=True)
class GaussianProfile(PrivacyProfile):
    """Gaussian mechanism, exact (Balle & Wang 2018, Theorem 8; symmetric in the two directions):

        δ(ε) = Φ(Δ/(2s) − εs/Δ) − e^ε Φ(−Δ/(2s) − εs/Δ),

    evaluated in log space (``log_ndtr``) so that tiny δ do not cancel to zero.

    Args:
        sigma: Noise standard deviation s > 0.
        sensitivity: L2 sensitivity Δ > 0.
    """

    sigma: float
    sensitivity: float = 1.0

    def __post_init__(self) -> None:
        for name in ("sigma", "sensitivity"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0.0):
                raise ValueError(f"{name} must be a finite number > 0, got {v!r}")

    @property
    def label(self) -> str:
        return f"Gaussian(sigma={self.sigma:g}, sensitivity={self.sensitivity:g})"

    @property
    def mechanism(self) -> Mechanism | None:
        return mechanism_key("Gaussian", sigma=float(self.sigma), sensitivity=float(self.sensitivity))

    def delta(self, epsilon: np.ndarray | float) -> np.ndarray:
        eps = np.asarray(epsilon, dtype=np.float64)
        r = self.sensitivity / self.sigma
        a = r / 2.0 - eps / r
        log_a, log_b = special.log_ndtr(a), special.log_ndtr(a - r)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            log_ratio = eps + log_b - log_a  # < 0 in exact arithmetic
            out = np.where(log_ratio < 0.0, np.exp(log_a + np.log(-np.expm1(log_ratio))), 0.0)
        return np.clip(out, 0.0, 1.0)


@dataclass(frozen=True, eq=False)
class DiscreteProfile(PrivacyProfile):
    """Exact symmetric profile of two explicit finite distributions:
    ``δ(ε) = max(H_{e^ε}(P‖P′), H_{e^ε}(P′‖P))``.

    Args:
        p: Shape ``(K,)``, the output law on X.
        p_prime: Shape ``(K,)``, the output law on X′.
        name: Description.
    """

    p: np.ndarray
    p_prime: np.ndarray
    name: str = "discrete"

    def __post_init__(self) -> None:
        for attr in ("p", "p_prime"):
            v = np.array(getattr(self, attr), dtype=np.float64).reshape(-1)
            if not (np.all(np.isfinite(v)) and np.all(v >= 0.0) and abs(v.sum() - 1.0) < 1e-9):
                raise ValueError(f"{attr} must be a probability vector (finite, >= 0, sums to 1)")
            v.flags.writeable = False
            object.__setattr__(self, attr, v)
        if self.p.shape != self.p_prime.shape:
            raise ValueError(f"p_prime must have shape {self.p.shape}, got {self.p_prime.shape}")

    @property
    def label(self) -> str:
        return self.name

    def delta(self, epsilon: np.ndarray | float) -> np.ndarray:
        return np.clip(
            np.maximum(
                hockey_stick(self.p, self.p_prime, epsilon), hockey_stick(self.p_prime, self.p, epsilon)
            ),
            0.0,
            1.0,
        )


@dataclass(frozen=True, eq=False)
class MaxProfile(PrivacyProfile):
    """Pointwise maximum of several profiles (a common upper bound for candidates with different costs).

    For a candidate θ drawn from a *fixed* distribution w (θ part of the output), the mixture's profile is at
    most ``Σ_θ w_θ δ_θ(ε) ≤ max_θ δ_θ(ε)`` (joint convexity of the hockey-stick divergence, KRW Lemma 2.3).

    Args:
        profiles: The candidates' profiles (non-empty).
    """

    profiles: Sequence[PrivacyProfile]
    name: str = field(default="")

    def __post_init__(self) -> None:
        profiles = tuple(self.profiles)
        if not profiles or not all(isinstance(p, PrivacyProfile) for p in profiles):
            raise ValueError("profiles must be a non-empty sequence of PrivacyProfile")
        object.__setattr__(self, "profiles", profiles)

    @property
    def label(self) -> str:
        return self.name or "max(" + ", ".join(p.label for p in self.profiles) + ")"

    @property
    def mechanism(self) -> Mechanism | None:
        """The members' common mechanism, else ``None`` (a max over different mechanisms is none of them)."""
        keys = {p.mechanism for p in self.profiles}
        return keys.pop() if len(keys) == 1 else None

    def delta(self, epsilon: np.ndarray | float) -> np.ndarray:
        return np.max(np.stack([np.asarray(p.delta(epsilon)) for p in self.profiles]), axis=0)

    def epsilon(self, delta: float) -> float:
        """max_i ε_i(δ): the max profile is ≤ δ exactly where every member is."""
        _check_delta(delta)
        return max(p.epsilon(delta) for p in self.profiles)

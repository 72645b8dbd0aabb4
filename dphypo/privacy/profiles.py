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
  dp_accounting's ``PLDAccountant``, cached per (σ, q, steps, discretisation). Its size is bounded
  (:data:`MAX_PLD_POINTS` grid points per direction): past the cap the grid is coarsened, which stays
  pessimistic (:func:`dpsgd_discretization`), and past :data:`MAX_DISCRETIZATION` it is refused
  (:class:`ProfileTooLargeError`; :func:`profile_or_skipped` turns it into a :class:`ProfileSkipped` that the
  accountant reports as "RDP only, and why").
* :class:`GaussianProfile` — the Gaussian mechanism in closed form (Balle & Wang 2018, Theorem 8), exact.
* :class:`DiscreteProfile` — the exact profile of two explicit finite distributions (audits and tests).
* :class:`MaxProfile` — the pointwise max of several profiles: a dominating profile for candidates drawn
  from a *fixed* distribution with different privacy costs (joint convexity of H_{e^ε}; KRW 2024 Sec. 6.1
  asks that "each candidate mechanism has the same privacy profile", which a common upper bound provides).

Every profile carries ``event``, the ``dp_accounting`` ``DpEvent`` of the mechanism it bounds
(:mod:`dphypo.privacy.events`; ``None`` if unknown): the accountant uses a profile only next to an RDP curve with
an equal event.

References (docs/references.md): Balle, Barthe & Gaboardi 2018 arXiv:1807.01647; Balle & Wang 2018 arXiv:1805.06530;
Zhu, Dong & Wang 2022 arXiv:2106.08567; Doroshenko et al. 2022 arXiv:2207.04380; Koskela et al. 2021
arXiv:2006.07134; Koskela, Redberg & Wang 2024 arXiv:2402.06701 (versions unverified).
"""

from __future__ import annotations

import hashlib
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
from scipy import optimize, special

from dphypo.privacy.errors import DphypoError
from dphypo.privacy.rdp import check_dpsgd
from dphypo.privacy.validation import check_int_at_least, check_positive, check_probability

if TYPE_CHECKING:  # dp_accounting is imported on first use (dphypo.privacy.events)
    from dp_accounting.dp_event import DpEvent

__all__ = [
    "DEFAULT_DISCRETIZATION",
    "MAX_DISCRETIZATION",
    "MAX_PLD_POINTS",
    "DiscreteProfile",
    "GaussianProfile",
    "MaxProfile",
    "PldProfile",
    "PrivacyProfile",
    "ProfileSkipped",
    "ProfileTooLargeError",
    "dpsgd_discretization",
    "dpsgd_profile",
    "dpsgd_profile_or_skip",
    "gaussian_step_pld",
    "hockey_stick",
    "profile_or_skipped",
]

#: PLD discretisation of the privacy-loss grid. The notes' regression numbers use 1e-4 (pitfall 9: the
#: discretisation error grows with the number of steps; 1e-3 costs ≈ +0.015 ε at 14k steps, < 1e-3 at 2.3k).
DEFAULT_DISCRETIZATION = 1e-4

#: Size cap of a DP-SGD PLD: grid points of one direction of the composed PLD (= its FFT length, ≈ 32 MB per
#: complex buffer). Every ordinary input fits at :data:`DEFAULT_DISCRETIZATION` (the largest in the benchmarks,
#: σ = 0.64, q = 256/60000, 2344 steps, needs 4.2·10⁵), so their values do not change; beyond it
#: :func:`dpsgd_discretization` coarsens the grid, which stays pessimistic (an upper bound).
MAX_PLD_POINTS = 2**21
#: Coarsest discretisation :func:`dpsgd_discretization` uses; a PLD that needs a coarser grid is refused
#: (:class:`ProfileTooLargeError`) and the accountant reports the RDP bound instead.
MAX_DISCRETIZATION = 0.1
# Grid points of one *step* (≈ 0.5 µs per point on arrays, gaussian_pld; dp_accounting's own loop took ≈ 10 µs).
_MAX_STEP_POINTS = 2**18
# Above this many points per step, the composed size is first estimated on a coarse probe grid of this size.
_PROBE_STEP_POINTS = 2**14
# dp_accounting's default tail truncation in self_compose (the truncated mass is added to the infinite loss).
_TAIL_MASS_TRUNCATION = 1e-15

# Largest ε at which epsilon() searches; beyond it a profile is treated as "no finite ε" (inf).
_EPS_SEARCH_MAX = 200.0
# Where a profile without tables of its own is evaluated to fingerprint it (PrivacyProfile.describe).
_FINGERPRINT_EPSILONS = np.linspace(-2.0, 60.0, 249)


class PrivacyProfile(ABC):
    """An upper bound ``δ(ε)`` on the symmetric privacy profile of a mechanism, for every real ε."""

    @property
    @abstractmethod
    def label(self) -> str:
        """Human-readable description of the mechanism."""

    @property
    def event(self) -> DpEvent | None:
        """The ``dp_accounting`` ``DpEvent`` of the mechanism (``None`` if unknown).

        Exact, in canonical form (:mod:`dphypo.privacy.events`); the accountant uses a profile only next to an RDP
        curve with an equal event.
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

    def describe(self) -> dict[str, Any]:
        """An exact, JSON-ready identity of the profile: what a journal seals (never a repr with an address).

        Returns:
            ``{"label", "event", "sha256"}``: the event's exact description
            (:func:`~dphypo.privacy.events.event_description`, ``None`` if unknown); the digest is of
            :meth:`fingerprint_values`.
        """
        digest = hashlib.sha256(np.ascontiguousarray(self.fingerprint_values(), dtype=np.float64).tobytes())
        event = None
        if self.event is not None:
            from dphypo.privacy.events import event_description

            event = event_description(self.event)
        return {"label": self.label, "event": event, "sha256": digest.hexdigest()}

    def fingerprint_values(self) -> np.ndarray:
        """Values that determine the profile: by default δ(ε) on a fixed grid of ε (subclasses give their data).

        Returns:
            A float64 array, shape ``(k,)``.
        """
        return np.asarray(self.delta(_FINGERPRINT_EPSILONS), dtype=np.float64)


def _check_delta(delta: float) -> None:
    check_probability("delta", delta, allow_one=True)  # δ = 1 is a valid (trivial) point of a profile


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

    def epsilon(self, delta: float) -> float:
        """dp_accounting's ``_get_epsilon_for_delta`` (a Python loop from the largest loss down), vectorised.

        Before loss ``l_j`` is visited the loop holds ``M_up = m_∞ + U_{j+1}`` and ``M_low = L_{j+1}``; it stops
        at the first (largest) j with ``log((M_up − δ)/M_low) ≥ l_j`` (or returns ``max(0, l_j)`` when, after
        adding l_j, ``M_up ≥ δ`` with ``M_low = 0``), and returns ``log((M_up − δ)/M_low)`` (0 if
        ``M_up ≤ M_low + δ``). Same sums in the same order, so the results agree to rounding (tested).
        """
        if self.infinity_mass > delta:
            return math.inf
        up = self.infinity_mass + self.upper  # index j: state after visiting losses ≥ l_j
        low = self.lower
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            solution = np.log((up[1:] - delta) / low[1:])  # the stopping value before visiting l_j
        stop = (up[1:] > delta) & (low[1:] > 0.0) & (solution >= self.losses)
        early = (up[:-1] >= delta) & (low[:-1] == 0.0)
        hits = np.flatnonzero(stop | early)
        if hits.size:
            j = int(hits[-1])
            if not stop[j]:
                return max(0.0, float(self.losses[j]))
            mass_up, mass_low = float(up[j + 1]), float(low[j + 1])
        else:
            mass_up, mass_low = float(up[0]), float(low[0])
        if mass_up <= mass_low + delta:
            return 0.0
        return math.log((mass_up - delta) / mass_low)


@dataclass(frozen=True, eq=False)
class PldProfile(PrivacyProfile):
    """The profile of a dp_accounting ``PrivacyLossDistribution`` (max over its remove and add PLDs).

    dp_accounting's vectorised ``get_delta_for_epsilon`` is a Python loop over the whole grid (≈ 1 s per call
    for a 4·10⁵-point DP-SGD PLD); the same formula is evaluated here from suffix sums (µs per ε), built on first
    use and then checked against dp_accounting's scalar path.

    Args:
        pld: A ``dp_accounting.pld.privacy_loss_distribution.PrivacyLossDistribution``; it must have been
            built with ``pessimistic_estimate=True`` (the default) for the result to be an upper bound.
        name: Description of the mechanism.
        event: The ``dp_accounting`` ``DpEvent`` of the mechanism, if known (stored in canonical form,
            :func:`~dphypo.privacy.events.canonical_event`).
    """

    pld: Any
    name: str = "PLD"
    event: DpEvent | None = None  # a field here, a property on PrivacyProfile
    _table_cache: tuple[_LossTable, ...] | None = field(init=False, repr=False, default=None, compare=False)

    def __post_init__(self) -> None:
        _set_event(self)

    @property
    def _tables(self) -> tuple[_LossTable, ...]:
        """The suffix-sum tables of both directions, built (and checked) on first use.

        A profile that is only composed further (a run's training PLD before its score release) never pays for them.
        """
        if self._table_cache is not None:
            return self._table_cache
        pmfs = [self.pld._pmf_remove] if self.pld._symmetric else [self.pld._pmf_remove, self.pld._pmf_add]
        tables = tuple(_LossTable.from_pmf(p) for p in pmfs)
        object.__setattr__(self, "_table_cache", tables)
        probe = np.array([-0.5, 0.0, 0.5, 2.0])
        ours = self.delta(probe)
        reference = np.array([float(self.pld.get_delta_for_epsilon(float(e))) for e in probe])
        # atol 1e-14: where δ is at the level of the PLD's infinity mass (~1e-15) dp_accounting's scalar path cancels
        # to slightly negative values while the suffix sums keep that mass (ours is the larger, conservative); a
        # changed internal would differ far above that level.
        if not np.allclose(ours, np.clip(reference, 0.0, 1.0), rtol=1e-9, atol=1e-14):
            object.__setattr__(self, "_table_cache", None)
            raise RuntimeError(
                f"PLD table disagrees with dp_accounting's get_delta_for_epsilon: {ours!r} vs {reference!r}; "
                "the installed dp_accounting changed its PLD internals"
            )
        return tables

    @property
    def label(self) -> str:
        """Human-readable description of the mechanism this profile bounds."""
        return self.name

    def delta(self, epsilon: np.ndarray | float) -> np.ndarray:
        """δ(ε) of the symmetric profile (the larger of the two directions), shape of ``epsilon``."""
        eps = np.asarray(epsilon, dtype=np.float64)
        if np.any(np.isnan(eps)):
            raise ValueError("epsilon must not be NaN")
        out = np.max(np.stack([t.delta(eps) for t in self._tables]), axis=0)
        return np.clip(out, 0.0, 1.0)

    def fingerprint_values(self) -> np.ndarray:
        """The PLD's loss tables in both directions (exact: two PLDs agree iff these bytes do)."""
        return np.concatenate([np.concatenate([t.losses, t.upper, t.lower, [t.infinity_mass]]) for t in self._tables])

    @property
    def discretization(self) -> float:
        """The privacy-loss grid interval of the PLD."""
        return float(self.pld._pmf_remove._discretization)

    @property
    def points(self) -> int:
        """Grid points of the larger direction (the size :data:`MAX_PLD_POINTS` caps for DP-SGD runs)."""
        return max(t.losses.size for t in self._tables)

    def epsilon(self, delta: float) -> float:
        """dp_accounting's exact inversion of the discretised (pessimistic) PLD, max over both directions.

        Evaluated on the suffix-sum tables (dp_accounting's own loop takes seconds on a PLD near
        :data:`MAX_PLD_POINTS`); equal to ``pld.get_epsilon_for_delta`` up to rounding (tested).
        """
        _check_delta(delta)
        return float(max(0.0, *(t.epsilon(delta) for t in self._tables)))

    def compose(self, other: PldProfile) -> PldProfile:
        """Sequential composition (e.g. a run, then the noisy release of its score); same discretisation."""
        event = None
        if self.event is not None and other.event is not None:
            from dphypo.privacy.events import compose_events

            event = compose_events(self.event, other.event)  # ComposedDpEvent([...]), flattened, in order
        from dphypo.privacy.gaussian_pld import compose  # dp_accounting's compose, its tail truncation on arrays

        return PldProfile(compose(self.pld, other.pld), f"{self.name} + {other.name}", event)


class ProfileTooLargeError(DphypoError, ValueError):
    """A PLD would exceed :data:`MAX_PLD_POINTS` grid points even at :data:`MAX_DISCRETIZATION`.

    The accountant then reports the RDP bounds only and names the reason (:class:`ProfileSkipped`).
    """


@dataclass(frozen=True)
class ProfileSkipped:
    """Stands in for a privacy profile that was not built because it would be too large.

    Pass it wherever a profile is accepted (``account(..., profile=...)``, ``profile_for_sigma``): the
    accountant evaluates the RDP bounds only, and its report's ``profile_skipped`` carries ``reason`` (so the
    JSON's ``methods`` lacks the profile entries *and* says why).

    Args:
        reason: One line: which PLD, and how large it would have been (the :class:`ProfileTooLargeError`
            message).
    """

    reason: str


_Profile = TypeVar("_Profile", bound=PrivacyProfile)


def profile_or_skipped(build: Callable[[], _Profile]) -> _Profile | ProfileSkipped:
    """``build()``, or a :class:`ProfileSkipped` naming why when the profile would be too large.

    The one place a :class:`ProfileTooLargeError` becomes a :class:`ProfileSkipped` (the accountant then reports
    the RDP bounds only, and says why), for every caller: :func:`dpsgd_profile_or_skip`,
    :func:`~dphypo.privacy.dpsgd_run.dpsgd_run_profile_or_skip` (one candidate run, what ``dphypo tune``,
    ``account`` and ``calibrate`` use), and :func:`~dphypo.privacy.calibration.calibrate_sigma`'s
    ``profile_for_sigma``. Any other error (e.g. ``ValueError`` for invalid arguments) propagates.

    Args:
        build: Builds the profile, e.g. ``lambda: dpsgd_profile(sigma, q, steps)`` or ``plan.profile``.

    Returns:
        The profile, or the reason it was skipped.
    """
    try:
        return build()
    except ProfileTooLargeError as exc:
        return ProfileSkipped(str(exc))


def _set_event(profile: PrivacyProfile) -> None:
    """Validate a dataclass profile's ``event`` field and store its canonical form."""
    event = profile.__dict__.get("event")
    if event is not None:
        from dphypo.privacy.events import check_event

        object.__setattr__(profile, "event", check_event(event))


@lru_cache(maxsize=8)
def _step_pld(sigma: float, sample_rate: float, discretization: float) -> Any:
    """One step's PLD (Poisson-subsampled Gaussian, add/remove, pessimistic connect-the-dots), dense PMFs.

    dp_accounting's ``from_gaussian_mechanism(σ, sensitivity=1, pessimistic_estimate=True, sampling_prob=q,
    use_connect_dots=True, neighboring_relation=ADD_OR_REMOVE_ONE)``, built on arrays by
    :func:`~dphypo.privacy.gaussian_pld.subsampled_gaussian_pld` (same PMFs; tests/privacy/test_gaussian_pld.py).
    Dense PMFs self-compose by FFT: dp_accounting keeps a PMF of a few points sparse and then composes it pairwise,
    `steps` times, as long as size**steps stays small (a one-point PMF at huge σ with 10¹² steps would take 10¹²
    Python iterations).
    """
    from dphypo.privacy.gaussian_pld import subsampled_gaussian_pld

    return subsampled_gaussian_pld(sigma, sample_rate, discretization)


def gaussian_step_pld(sigma: float, sample_rate: float, discretization: float) -> Any:
    """The pessimistic add/remove PLD of the Poisson-subsampled Gaussian mechanism (q = 1: the Gaussian), dense.

    dp_accounting's ``from_gaussian_mechanism(standard_deviation=σ, sensitivity=1, pessimistic_estimate=True,
    value_discretization_interval=d, sampling_prob=q, use_connect_dots=True)`` with its PMFs in dense form (the
    same δ(ε), and the same result when composed with a dense PLD), built on arrays and cached (one DP-SGD step,
    or a run's Gaussian score release).

    Args:
        sigma: Noise standard deviation over sensitivity, > 0.
        sample_rate: Poisson sampling rate q ∈ (0, 1].
        discretization: Privacy-loss grid interval > 0.

    Returns:
        A ``dp_accounting`` ``PrivacyLossDistribution`` of ``DensePLDPmf`` (treat it as read-only: it is shared).
    """
    check_positive("sigma", sigma)
    check_probability("sample_rate", sample_rate, allow_one=True)
    check_positive("discretization", discretization)
    return _step_pld(float(sigma), float(sample_rate), float(discretization))


def _step_loss_width(sigma: float, sample_rate: float) -> float:
    """Width of one step's privacy-loss grid (max over the remove and add pairs), without building it.

    dp_accounting's connect-the-dots grid spans ``[epsilon_lower, epsilon_upper]`` of the mechanism's
    ``connect_dots_bounds`` (the losses at the e^{-50} mass-truncation points), so one step has about
    ``width / discretisation`` points.
    """
    from dp_accounting.pld import privacy_loss_mechanism

    width = 0.0
    for adjacency in (privacy_loss_mechanism.AdjacencyType.REMOVE, privacy_loss_mechanism.AdjacencyType.ADD):
        bounds = privacy_loss_mechanism.GaussianPrivacyLoss(
            sigma, sensitivity=1.0, pessimistic_estimate=True, sampling_prob=sample_rate, adjacency_type=adjacency
        ).connect_dots_bounds()
        width = max(width, float(bounds.epsilon_upper) - float(bounds.epsilon_lower))
    return width


def _composed_points(step: Any, steps: int) -> int:
    """Grid points of the larger direction of ``step`` self-composed ``steps`` times (= the FFT length).

    Uses dp_accounting's truncation bounds (``common.compute_self_convolve_bounds``, the Chernoff bound that
    ``DensePLDPmf.self_compose`` applies with tail mass 1e-15, evaluated by
    :func:`~dphypo.privacy.gaussian_pld.self_convolve_bounds`), so it is exactly the size the composition will
    allocate, computed in milliseconds before any FFT.
    """
    from dphypo.privacy.gaussian_pld import composed_size

    return composed_size(step, steps, _TAIL_MASS_TRUNCATION)


def dpsgd_discretization(
    sigma: float,
    sample_rate: float,
    steps: int,
    *,
    discretization: float = DEFAULT_DISCRETIZATION,
    max_points: int = MAX_PLD_POINTS,
) -> float:
    """The finest PLD grid interval ≥ ``discretization`` at which one DP-SGD run's PLD stays within the size cap.

    The composed PLD has ≈ (width of the composed privacy-loss range) / interval points per direction, and that
    width barely depends on the interval, so when the requested grid would exceed ``max_points`` (tiny σ: one
    step's loss range grows like 1/(2σ²); huge ``steps``: the composed range grows like ``steps``), the interval
    is scaled up until it fits. A coarser grid is still **pessimistic**: dp_accounting's connect-the-dots PLD is
    an upper bound on the profile at every interval (Doroshenko et al. 2022, Theorem 4.1), it is only looser.
    Sizes are checked exactly with dp_accounting's truncation bounds before any composition runs.

    Args:
        sigma: Noise multiplier σ > 0.
        sample_rate: Poisson sampling rate q ∈ (0, 1].
        steps: Number of steps ≥ 1.
        discretization: The finest interval wanted.
        max_points: Cap on the grid points of one direction of the composed PLD.

    Returns:
        The interval to build with (``discretization`` itself whenever the PLD fits, e.g. every ordinary input).

    Raises:
        ProfileTooLargeError: Even :data:`MAX_DISCRETIZATION` would exceed the cap.
    """
    _check_dpsgd(sigma, sample_rate, steps, discretization)
    check_int_at_least("max_points", max_points, 1024)
    return _mechanism_discretization(float(sigma), float(sample_rate), int(steps), discretization, int(max_points))


@lru_cache(maxsize=64)
def _mechanism_discretization(sigma: float, sample_rate: float, steps: int, discretization: float,
                              max_points: int) -> float:
    name = f"DP-SGD(sigma={sigma:g}, q={sample_rate:g}, steps={steps})"

    def refuse(points: float, what: str = "", cap: int = max_points) -> ProfileTooLargeError:
        return ProfileTooLargeError(
            f"the privacy-loss distribution of {name} would need ~{points:.2g} grid points{what} even at the "
            f"coarsest discretisation {MAX_DISCRETIZATION:g} (cap: {cap})"
        )

    width = _step_loss_width(sigma, sample_rate)
    interval = max(discretization, width / _MAX_STEP_POINTS)
    if interval > MAX_DISCRETIZATION:
        raise refuse(width / MAX_DISCRETIZATION, " for one step alone", _MAX_STEP_POINTS)
    if steps > 1 and width / interval > 4 * _PROBE_STEP_POINTS:
        # Building one step at `interval` costs seconds: estimate the composed loss width on a coarse grid first.
        probe = width / _PROBE_STEP_POINTS
        composed_width = _composed_points(_step_pld(sigma, sample_rate, probe), steps) * probe
        interval = max(interval, 1.05 * composed_width / max_points)
    for _ in range(4):
        if interval > MAX_DISCRETIZATION:
            raise refuse(max_points * interval / MAX_DISCRETIZATION)
        points = _composed_points(_step_pld(sigma, sample_rate, interval), steps)
        if points <= max_points:
            return interval
        interval = max(1.05 * interval * points / max_points, 1.1 * interval)
    raise refuse(points * interval / MAX_DISCRETIZATION)  # pragma: no cover - the estimate is within a few %


def _check_dpsgd(sigma: float, sample_rate: float, steps: int, discretization: float) -> None:
    check_dpsgd(sigma, sample_rate, steps)
    if not (isinstance(discretization, float) and 0.0 < discretization <= MAX_DISCRETIZATION):
        raise ValueError(f"discretization must be a float in (0, {MAX_DISCRETIZATION:g}], got {discretization!r}")


# A composed PLD at the cap holds ≈ 130 MB (two directions, PLD + suffix-sum tables): keep few.
@lru_cache(maxsize=4)
def _dpsgd_profile(sigma: float, sample_rate: float, steps: int, interval: float, requested: float) -> PldProfile:
    from dphypo.privacy.events import dpsgd_event
    from dphypo.privacy.gaussian_pld import self_compose

    step = _step_pld(sigma, sample_rate, interval)
    pld = step if steps == 1 else self_compose(step, steps, _TAIL_MASS_TRUNCATION)
    grid = f"PLD {interval:g}" if interval == requested else f"PLD {interval:.3g}, coarsened from {requested:g}"
    label = f"DP-SGD(sigma={sigma:g}, q={sample_rate:g}, steps={steps}) [{grid}]"
    return PldProfile(pld, label, dpsgd_event(sigma, sample_rate, steps))


def dpsgd_profile(
    sigma: float,
    sample_rate: float,
    steps: int,
    *,
    discretization: float = DEFAULT_DISCRETIZATION,
    max_points: int = MAX_PLD_POINTS,
) -> PldProfile:
    """Privacy profile of one DP-SGD run: ``steps`` compositions of the Poisson-subsampled Gaussian mechanism.

    Built exactly as dp_accounting's ``PLDAccountant`` builds ``SelfComposedDpEvent(PoissonSampledDpEvent(q,
    GaussianDpEvent(σ)), steps)`` with ``NeighboringRelation.ADD_OR_REMOVE_ONE`` (pessimistic connect-the-dots
    PLD for the remove *and* the add pair, FFT self-composition), the numerical method KRW 2024 Sec. 6.2 uses
    (Koskela et al. 2021's FFT accountant on the dominating pairs of Zhu et al. 2022, Theorem 11). Cached per
    (σ, q, steps, discretisation).

    Its size is bounded: the grid interval is ``discretization`` unless the PLD would then exceed
    ``max_points`` points per direction, in which case the finest interval that fits is used
    (:func:`dpsgd_discretization`; still an upper bound, see :attr:`PldProfile.discretization` and the label).

    Args:
        sigma: Noise multiplier σ > 0.
        sample_rate: Poisson sampling rate q ∈ (0, 1].
        steps: Number of steps ≥ 1.
        discretization: Privacy-loss grid interval (smaller is tighter and slower); the finest one used.
        max_points: Cap on the grid points of one direction of the composed PLD.

    Returns:
        The profile; its event is ``SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(σ)), steps)``,
        equal to :func:`~dphypo.privacy.rdp.dpsgd_rdp`'s (:func:`~dphypo.privacy.events.dpsgd_event`).

    Raises:
        ProfileTooLargeError: The PLD exceeds the cap even at :data:`MAX_DISCRETIZATION` (tiny σ or huge
            ``steps``); :func:`profile_or_skipped` turns this into a :class:`ProfileSkipped`.
    """
    interval = dpsgd_discretization(sigma, sample_rate, steps, discretization=discretization, max_points=max_points)
    return _dpsgd_profile(float(sigma), float(sample_rate), int(steps), interval, discretization)


def dpsgd_profile_or_skip(
    sigma: float,
    sample_rate: float,
    steps: int,
    *,
    discretization: float = DEFAULT_DISCRETIZATION,
    max_points: int = MAX_PLD_POINTS,
) -> PldProfile | ProfileSkipped:
    """:func:`dpsgd_profile` (training only), or a :class:`ProfileSkipped` naming why the PLD would be too large.

    :func:`profile_or_skipped` of :func:`dpsgd_profile`. Invalid arguments still raise ``ValueError``.
    """
    return profile_or_skipped(
        lambda: dpsgd_profile(sigma, sample_rate, steps, discretization=discretization, max_points=max_points)
    )


@dataclass(frozen=True)
class GaussianProfile(PrivacyProfile):
    """Gaussian mechanism, exact (Balle & Wang 2018, Theorem 8; symmetric in the two directions).

        δ(ε) = Φ(Δ/(2s) − εs/Δ) − e^ε Φ(−Δ/(2s) − εs/Δ),

    evaluated in log space (``log_ndtr``) so that tiny δ do not cancel to zero.

    Args:
        sigma: Noise standard deviation s > 0.
        sensitivity: L2 sensitivity Δ > 0.
    """

    sigma: float
    sensitivity: float = 1.0

    def __post_init__(self) -> None:
        check_positive("sigma", self.sigma)
        check_positive("sensitivity", self.sensitivity)

    @property
    def label(self) -> str:
        """Human-readable description of the mechanism this profile bounds."""
        return f"Gaussian(sigma={self.sigma:g}, sensitivity={self.sensitivity:g})"

    @property
    def event(self) -> DpEvent:
        """``GaussianDpEvent(σ/Δ)``, equal to :func:`~dphypo.privacy.rdp.gaussian_rdp`'s (``gaussian_event``)."""
        from dphypo.privacy.events import gaussian_event

        return gaussian_event(float(self.sigma), float(self.sensitivity))

    def delta(self, epsilon: np.ndarray | float) -> np.ndarray:
        """δ(ε) of the symmetric profile (the larger of the two directions), shape of ``epsilon``."""
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
    """Exact symmetric profile of two explicit finite distributions.

    ``δ(ε) = max(H_{e^ε}(P‖P′), H_{e^ε}(P′‖P))``.

    Args:
        p: Shape ``(K,)``, the output law on X.
        p_prime: Shape ``(K,)``, the output law on X′.
        name: Description.
        event: The ``dp_accounting`` ``DpEvent`` of the mechanism, if known.
    """

    p: np.ndarray
    p_prime: np.ndarray
    name: str = "discrete"
    event: DpEvent | None = None  # a field here, a property on PrivacyProfile

    def __post_init__(self) -> None:
        _set_event(self)
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
        """Human-readable description of the mechanism this profile bounds."""
        return self.name

    def delta(self, epsilon: np.ndarray | float) -> np.ndarray:
        """δ(ε) of the symmetric profile (the larger of the two directions), shape of ``epsilon``."""
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
        """Human-readable description of the mechanism this profile bounds."""
        return self.name or "max(" + ", ".join(p.label for p in self.profiles) + ")"

    @property
    def event(self) -> DpEvent | None:
        """The members' common event, else ``None`` (a max over different mechanisms is none of them)."""
        first = self.profiles[0].event
        return first if all(p.event == first for p in self.profiles[1:]) else None

    def delta(self, epsilon: np.ndarray | float) -> np.ndarray:
        """δ(ε) of the symmetric profile (the larger of the two directions), shape of ``epsilon``."""
        return np.max(np.stack([np.asarray(p.delta(epsilon)) for p in self.profiles]), axis=0)

    def epsilon(self, delta: float) -> float:
        """max_i ε_i(δ): the max profile is ≤ δ exactly where every member is."""
        _check_delta(delta)
        return max(p.epsilon(delta) for p in self.profiles)

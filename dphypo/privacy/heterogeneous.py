r"""Candidates whose hyperparameters change their privacy: one noise multiplier σ_i per candidate, one reference.

When a search tunes the batch size (→ Poisson rate q) or the number of epochs (→ steps), candidates differ in
privacy cost. Following Koskela, Redberg & Wang 2024 ("KRW", Sec. 6.2 and Corollary 6.2), every candidate is made
to satisfy **one common per-run guarantee**: a *reference* per-run mechanism R(σ_ref) (DP-SGD at (q_ref, steps_ref)
with noise σ_ref, then the Gaussian score release), and candidate i runs at the **smallest σ_i** whose own per-run
mechanism M_i(σ_i) (DP-SGD at (q_i, steps_i, σ_i) + the same score release, :mod:`dphypo.privacy.dpsgd_run`) is
dominated by R(σ_ref):

* **RDP** (every search): ε_i(α) ≤ ε_ref(α) at every order α the accountant uses;
* **privacy profile** (a uniform search, where the profile bounds of :mod:`dphypo.privacy.profile_tuning` apply):
  δ_i(ε) ≤ δ_ref(ε) at every ε ≥ 0, separately for each direction of the add/remove PLD (the remove pair (P, Q)
  and the add pair (Q, P); for exact profiles this is domination at every real ε), checked exactly on the
  discretised PLDs (:func:`profile_excess`) up to :data:`PROFILE_SLACK` = 1e-15, which the plan adds to the
  reference's profile (:class:`SlackedProfile`) so that the accounting stays an upper bound.

Why a dominated candidate is covered (``docs/proofs/heterogeneous.md``): the accountant's theorems ask that *every*
candidate satisfy the per-run bound (DP-HyPO Framework 1, Theorems A and B of ``docs/proofs/adaptive.md``: "for
every λ"), and for a candidate drawn from a fixed prior w with θ part of the output, the one-run mechanism's
hockey-stick divergence is the w-average of the candidates' (H_{e^ε} splits over θ), hence at most
max_θ δ_θ(ε) ≤ δ_ref(ε): the KRW theorems apply with δ_Q = δ_ref. So the search is accounted exactly as a
homogeneous search of the reference mechanism, and a homogeneous grid reduces to today's single-σ search.

**Events.** A max over candidates is not one mechanism. The curve and profile handed to the accountant
(:meth:`HeterogeneousPlan.base_rdp`, :meth:`HeterogeneousPlan.base_profile`) are the *reference's*, carrying the
reference's ``DpEvent`` (DP-SGD(σ_ref, q_ref, steps_ref) + Gaussian(score noise)): both describe the same mechanism,
so :func:`~dphypo.privacy.accountant.check_same_mechanism` accepts them, and the event reads "every candidate is
dominated by this mechanism". Each candidate's own curve (:meth:`HeterogeneousPlan.candidate_rdp`) carries its own
event, for the training layer's budget check of what a run actually spent.

**Cor. 6.2's threshold form.** KRW Cor. 6.2 needs each candidate to be (ε₁, δ₁)-DP and (ε̂, δ/m)-DP at two
points of the reference's profile, a weaker requirement than the whole profile, so a smaller σ_i; but the ε₁ and ε̂
it uses are those of the *final* selection at a given target δ and run-count law, and only TNB T is covered (there
is no Poisson/binomial or RDP counterpart), and the result is a single (ε, δ), not a curve the accountant can combine
with its RDP bounds. :func:`threshold_sigma` offers it as an opt-in comparison (the σ_i it gives, and
:func:`threshold_epsilon` the Cor. 6.2 ε); the default plan dominates the whole profile. Measured on digits
candidates (n = 1437, score noise 5, geometric E[T] = 10, total ε = 4): Cor. 6.2 asks σ_i = 1.21 where full
domination asks 2.18 (batch 64 × 5 epochs), but its ε is the TNB profile bound's, 4.39, while the RDP bound the
accountant reports (Theorem B at C = c = 1) is 4.00: there the threshold form is not tighter, and it would need a
larger σ_ref to meet the same total (``docs/proofs/heterogeneous.md`` §6).

The (q, steps) arithmetic reproduces Opacus's conventions as ``dphypo.train.DPSGDMechanism`` computes them
(:func:`opacus_sample_rate`, :func:`opacus_steps`), without importing the training layer.

References (docs/references.md): Koskela, Redberg & Wang 2024 arXiv:2402.06701 (version unverified); Papernot &
Steinke 2022 arXiv:2110.03620v2; Wang et al. 2023 arXiv:2306.05734v2; Mironov, Talwar & Zhang 2019 arXiv:1908.10530.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from dphypo.privacy.accounting import PrivacyAccounting
from dphypo.privacy.calibration import (
    CalibrationError,
    CalibrationResult,
    calibrate_dpsgd_sigma,
    coarse_orders,
    coarse_to_fine_sigma,
)
from dphypo.privacy.dpsgd_run import dpsgd_run_profile, dpsgd_run_rdp, score_release_profile
from dphypo.privacy.errors import DphypoError
from dphypo.privacy.profiles import PldProfile, PrivacyProfile, ProfileSkipped, _LossTable, profile_or_skipped
from dphypo.privacy.rdp import DEFAULT_ORDERS, RdpCurve
from dphypo.privacy.run_counts import TruncatedNegativeBinomial
from dphypo.privacy.spec import PrivacyReport, RepeatAndSelect
from dphypo.privacy.split import SplitRule
from dphypo.privacy.split_account import SplitParts, split_parts
from dphypo.privacy.validation import (
    check_delta,
    check_int_at_least,
    check_non_negative,
    check_positive,
    check_probability,
)

if TYPE_CHECKING:
    from dp_accounting.dp_event import DpEvent

__all__ = [
    "DEFAULT_SIGMA_CAP",
    "ORDER_CAPS",
    "PROFILE_SLACK",
    "CandidateRun",
    "DominanceError",
    "HeterogeneousCalibration",
    "HeterogeneousPlan",
    "ReferenceRun",
    "SlackedProfile",
    "calibrate_heterogeneous",
    "dominating_sigma",
    "opacus_sample_rate",
    "opacus_steps",
    "plan_heterogeneous",
    "profile_dominated",
    "profile_excess",
    "rdp_dominated",
    "reference_for",
    "threshold_epsilon",
    "threshold_sigma",
    "trimmed_orders",
]

#: Largest per-candidate σ_i a plan accepts by default: a candidate needing more noise is refused (it would train
#: on noise alone; e.g. σ = 100 with clipping norm 1 swamps any batch of a few thousand examples).
DEFAULT_SIGMA_CAP = 100.0

#: Relative precision of every σ_i: the returned σ_i dominates and σ_i / (1 + SIGMA_RTOL) does not (up to the
#: bisection's bracket), far below the 1e-3 a test of minimality uses.
SIGMA_RTOL = 1e-5


class DominanceError(DphypoError, ValueError):
    """A candidate cannot be dominated by the reference (σ above the cap, or a profile no σ dominates)."""


def opacus_sample_rate(n_train: int, batch_size: int) -> float:
    """The Poisson rate q Opacus books for a batch size: ``1 / int(1 / (1 / ceil(n_train / batch_size)))``.

    ``dphypo.train.DPSGDMechanism.sample_rate``'s arithmetic (``1 / len(DPDataLoader)``, never below the true
    ``1 / ceil(n / b)``; float rounding loses one batch for some lengths, e.g. 93 → 92), reproduced here so that the
    privacy layer computes each grid point's q without importing the training layer.

    Args:
        n_train: Training examples ≥ 1.
        batch_size: Expected batch size, 1 ≤ batch_size ≤ n_train.

    Returns:
        q ∈ (0, 1].

    Raises:
        ValueError: A non-integer or out-of-range argument, named.
    """
    return 1.0 / _steps_per_epoch(n_train, batch_size)


def opacus_steps(n_train: int, batch_size: int, epochs: int) -> int:
    """Noisy steps of a run: ``epochs × int(1 / (1 / ceil(n_train / batch_size)))`` (``DPSGDMechanism.steps``).

    Args:
        n_train: Training examples ≥ 1.
        batch_size: Expected batch size, 1 ≤ batch_size ≤ n_train.
        epochs: Epochs ≥ 1.

    Returns:
        Steps ≥ 1.
    """
    check_int_at_least("epochs", epochs, 1)
    return int(epochs) * _steps_per_epoch(n_train, batch_size)


def _steps_per_epoch(n_train: int, batch_size: int) -> int:
    check_int_at_least("n_train", n_train, 1)
    check_int_at_least("batch_size", batch_size, 1)
    if batch_size > n_train:
        raise ValueError(f"batch_size must be <= n_train ({n_train}), got {batch_size!r}")
    return int(1 / (1 / math.ceil(int(n_train) / int(batch_size))))


@dataclass(frozen=True)
class CandidateRun:
    """The public DP-SGD settings of one candidate that decide its privacy (everything but σ).

    Args:
        sample_rate: Poisson rate q ∈ (0, 1] (Opacus's, :func:`opacus_sample_rate`).
        steps: Noisy steps ≥ 1 (:func:`opacus_steps`).
        name: How refusals name the candidate (e.g. ``"batch_size=64, epochs=10"``).
    """

    sample_rate: float
    steps: int
    name: str = ""

    def __post_init__(self) -> None:
        check_probability("sample_rate", self.sample_rate, allow_one=True)
        check_int_at_least("steps", self.steps, 1)
        object.__setattr__(self, "sample_rate", float(self.sample_rate))
        object.__setattr__(self, "steps", int(self.steps))

    @classmethod
    def from_batch(cls, n_train: int, batch_size: int, epochs: int, name: str | None = None) -> CandidateRun:
        """The candidate of a (batch size, epochs) grid point on ``n_train`` examples, Opacus's arithmetic."""
        label = f"batch_size={batch_size}, epochs={epochs}" if name is None else name
        return cls(opacus_sample_rate(n_train, batch_size), opacus_steps(n_train, batch_size, epochs), label)

    @property
    def gaussian_cost(self) -> float:
        """``q·√steps``: at small q, DP-SGD with σ is close to the Gaussian mechanism with µ = q√steps / σ.

        The central-limit view of composed subsampled Gaussians (Dong, Roth & Su 2022, Gaussian differential
        privacy): what :func:`reference_for` ranks by.
        """
        return self.sample_rate * math.sqrt(self.steps)

    def describe(self) -> str:
        """``name (q=…, steps=…)``: the candidate as a refusal names it."""
        settings = f"q={self.sample_rate:.4g}, steps={self.steps}"
        return f"{self.name} ({settings})" if self.name else settings


@dataclass(frozen=True)
class ReferenceRun:
    """The common per-run mechanism every candidate is dominated by: DP-SGD at (q_ref, steps_ref), then the score.

    σ_ref is not part of it: it is the one number calibration solves for (:func:`calibrate_heterogeneous`).

    Args:
        sample_rate: q_ref ∈ (0, 1].
        steps: steps_ref ≥ 1.
        score_noise: Std of the Gaussian noise on every candidate's released score count (sensitivity 1), or
            ``None`` when no score is released privately; the same for every candidate.
    """

    sample_rate: float
    steps: int
    score_noise: float | None = None

    def __post_init__(self) -> None:
        check_probability("sample_rate", self.sample_rate, allow_one=True)
        check_int_at_least("steps", self.steps, 1)
        check_positive("score_noise", self.score_noise, optional=True)
        object.__setattr__(self, "sample_rate", float(self.sample_rate))
        object.__setattr__(self, "steps", int(self.steps))

    def rdp(self, sigma: float, orders: Iterable[float] | None = None) -> RdpCurve:
        """The reference's per-run RDP curve at σ_ref: what ``PrivacyAccounting(base=...)`` takes."""
        return dpsgd_run_rdp(sigma, self.sample_rate, self.steps, score_noise=self.score_noise, orders=orders)

    def profile(self, sigma: float) -> PldProfile:
        """The reference's per-run profile (PLD, both directions) at σ_ref: ``PrivacyAccounting(profile=...)``."""
        return dpsgd_run_profile(sigma, self.sample_rate, self.steps, score_noise=self.score_noise)

    def candidate_rdp(self, candidate: CandidateRun, sigma: float, orders: Iterable[float] | None = None) -> RdpCurve:
        """Candidate's per-run RDP at its σ_i, with this reference's score release (its own event)."""
        return dpsgd_run_rdp(sigma, candidate.sample_rate, candidate.steps, score_noise=self.score_noise,
                             orders=orders)

    def candidate_profile(self, candidate: CandidateRun, sigma: float) -> PldProfile:
        """Candidate's per-run privacy profile at its σ_i, with this reference's score release."""
        return dpsgd_run_profile(sigma, candidate.sample_rate, candidate.steps, score_noise=self.score_noise)

    def training_profile(self, sigma: float, candidate: CandidateRun | None = None) -> PldProfile:
        """The DP-SGD part alone of the reference's (or ``candidate``'s) run at σ: a per-record split's training side.

        docs/proofs/split.md, Corollary S4: under a per-record split domination is needed per side, and the profile
        route compares the training PLDs alone (the score parts are one common release).
        """
        run = self if candidate is None else candidate
        return dpsgd_run_profile(sigma, run.sample_rate, run.steps)

    def is_candidate(self, candidate: CandidateRun) -> bool:
        """Whether ``candidate`` has exactly the reference's (q, steps) (it then runs at σ_ref itself)."""
        return candidate.sample_rate == self.sample_rate and candidate.steps == self.steps


def reference_for(candidates: Sequence[CandidateRun], score_noise: float | None = None) -> ReferenceRun:
    """The default reference: the most expensive candidate's (q, steps), so that candidate runs at σ_ref itself.

    "Most expensive" is the largest ``q·√steps`` (:attr:`CandidateRun.gaussian_cost`, the Gaussian-limit cost at
    equal σ), ties broken by the larger q (fewer steps of a larger rate: heavier privacy-loss tails). Any reference
    is valid, and none makes every σ_i ≤ σ_ref in general: RDP domination at high orders can ask a candidate with
    a smaller rate and more steps for more noise than the reference (digits, n = 1437: batch 32 × 20 epochs needs
    1.91·σ_ref under the batch 128 × 20 reference; the batch 64 × 20 reference would bound every σ_i by
    1.39·σ_ref, at a different σ_ref). A caller may pass its own reference to :func:`calibrate_heterogeneous`.

    Args:
        candidates: The grid's candidates (non-empty).
        score_noise: The common score-release std (``None``: no private score).

    Returns:
        The reference.
    """
    if not candidates:
        raise ValueError("candidates must not be empty")
    top = max(candidates, key=lambda c: (c.gaussian_cost, c.sample_rate))
    return ReferenceRun(top.sample_rate, top.steps, score_noise)


def rdp_dominated(curve: RdpCurve, reference: RdpCurve) -> bool:
    """Whether ``curve``'s envelope ≤ ``reference``'s at every order (exactly, no tolerance; ∞ only under ∞).

    Both curves are first replaced by their running minimum from the right (:meth:`RdpCurve.monotone`): a bound at
    a higher order also holds at a lower one (D_α is non-decreasing in α), so a candidate whose own bound is ∞ or
    loose at some order is still dominated there when a higher order's bound is below the reference's
    (docs/proofs/heterogeneous.md §5). Every candidate dominated this way satisfies D_α ≤ ε̃_ref(α) ≤ ε_ref(α), so the
    accountant may use either reference curve.

    Raises:
        ValueError: The two curves are on different order grids.
    """
    if not np.array_equal(curve.orders, reference.orders):
        raise ValueError("curves must share the same orders to be compared; build them on one order grid")
    return bool(np.all(curve.monotone().epsilons <= reference.monotone().epsilons))


def profile_excess(profile: PldProfile, reference: PldProfile) -> float:
    r"""sup_{ε ≥ 0} (δ(ε) − δ_ref(ε))₊ over each PLD direction separately: exact for discretised PLDs.

    One direction of a discretised PLD with losses l_j and masses p_j has δ(ε) = m_∞ + Σ_{l_j > ε} p_j
    (1 − e^{ε − l_j}) (Doroshenko et al. 2022, eq. (2)), continuous in ε. Between two consecutive points of the
    *union* of both PLDs' loss grids the sums run over fixed index sets, so δ − δ_ref = a − b·e^ε is monotone
    there; its supremum over [0, ∞) is therefore attained at ε = 0, at a union loss point ≥ 0, or in the limit
    ε → ∞, where it is m_∞ − m_∞,ref: all of them are evaluated. The remove pair (P, Q) and the add pair (Q, P) are
    compared separately (a symmetric PLD is one table, compared with both of the reference's).

    Only ε ≥ 0 is compared: every profile bound evaluates δ_Q there (ε₁ ≥ 0 and ε̂ = ε_Q(δ/m) ≥ 0,
    :mod:`dphypo.privacy.profile_tuning`), and for exact profiles δ at ε < 0 in one direction is
    1 − e^ε + e^ε·δ(−ε) of the other (so dominance of both directions on ε ≥ 0 is dominance on ℝ); the pessimistic
    discretisations do not keep that identity at δ ≈ 1 (they differ there by ~1e-9 of rounding).

    Args:
        profile: The candidate's per-run profile (:func:`~dphypo.privacy.dpsgd_run.dpsgd_run_profile`).
        reference: The reference's.

    Returns:
        The excess ≥ 0 (0: dominated exactly).
    """
    mine, theirs = _direction_tables(profile), _direction_tables(reference)
    return max(_table_excess(a, b) for a, b in zip(mine, theirs, strict=True))


def profile_dominated(profile: PldProfile, reference: PldProfile, *, slack: float = 0.0) -> bool:
    """Whether δ(ε) ≤ δ_ref(ε) + ``slack`` for every ε ≥ 0, in both directions (:func:`profile_excess`)."""
    return profile_excess(profile, reference) <= slack


def _direction_tables(profile: PldProfile) -> tuple[_LossTable, _LossTable]:
    """The (remove, add) loss tables of a PLD (a symmetric PLD's one table twice)."""
    # PldProfile's own table type, built from the same dp_accounting internals (checked against dp_accounting's
    # public get_delta_for_epsilon whenever a PldProfile is built).
    pld = profile.pld
    remove = _LossTable.from_pmf(pld._pmf_remove)
    return (remove, remove) if pld._symmetric else (remove, _LossTable.from_pmf(pld._pmf_add))


def _table_excess(mine: _LossTable, theirs: _LossTable) -> float:
    """One direction of :func:`profile_excess` (its docstring has the argument)."""
    points = np.union1d(mine.losses, theirs.losses)
    points = np.concatenate([[0.0], points[points >= 0.0]])
    body = float(np.max(mine.delta(points) - theirs.delta(points)))
    return max(0.0, body, mine.infinity_mass - theirs.infinity_mass)


#: Excess of a candidate's profile over the reference's below which it counts as dominated (the plan then adds the
#: measured excess to the reference profile, :class:`SlackedProfile`, so the accounting stays an upper bound).
#: Pessimistic PLDs truncate their tails into an infinity mass (≈ 1.5e-15 for dp_accounting's defaults) that depends
#: on the grid and the number of compositions, not on σ: no σ_i makes it smaller than the reference's exactly.
PROFILE_SLACK = 1e-15


@dataclass(frozen=True, eq=False)
class SlackedProfile(PrivacyProfile):
    """A profile raised by a constant: δ(ε) = min(1, δ_ref(ε) + slack), for ε ≥ 0 (the domain bounds use).

    The per-run profile valid for every candidate of a plan whose candidates exceed the reference's pessimistic PLD
    by at most ``slack`` (:func:`profile_excess`); the event is the reference's (it bounds the reference too).

    Args:
        profile: The reference's profile.
        slack: The added constant, ≥ 0.
    """

    profile: PldProfile
    slack: float

    def __post_init__(self) -> None:
        check_non_negative("slack", self.slack)

    @property
    def label(self) -> str:
        """The reference's label, with the slack."""
        return f"{self.profile.label} (+{self.slack:.3g} slack over the candidates)"

    @property
    def event(self) -> DpEvent | None:
        """The reference's event."""
        return self.profile.event

    def delta(self, epsilon: np.ndarray | float) -> np.ndarray:
        """δ_ref(ε) + slack, clipped to 1."""
        return np.minimum(1.0, np.asarray(self.profile.delta(epsilon)) + self.slack)

    def epsilon(self, delta: float) -> float:
        """ε_ref(δ − slack) (δ_ref(ε) + slack ≤ δ exactly there); ∞ if δ ≤ slack."""
        check_delta(delta)
        if delta <= self.slack:
            return math.inf
        eps = self.profile.epsilon(delta - self.slack)
        while float(self.delta(eps)) > delta:  # (δ − slack) + slack may round a hair above δ
            eps += max(1e-12, 1e-12 * eps)
        return eps

    def fingerprint_values(self) -> np.ndarray:
        """The reference's values, then the slack."""
        return np.append(self.profile.fingerprint_values(), self.slack)


def dominating_sigma(
    candidate: CandidateRun,
    reference: ReferenceRun,
    sigma_ref: float,
    *,
    profiles: bool = False,
    orders: Iterable[float] | None = None,
    sigma_cap: float = DEFAULT_SIGMA_CAP,
    rtol: float = SIGMA_RTOL,
    split: bool = False,
) -> float:
    """The smallest σ_i (to ``rtol``, on the safe side) whose per-run mechanism is dominated by the reference at σ_ref.

    Dominance is monotone in σ_i (more noise: every RDP order and every hockey-stick value decrease; a
    post-processing of the noisier Gaussian), so the boundary is found by bisection in log σ. The RDP boundary is
    found first (cheap); the profile condition, when asked for, is then checked there and bisected above it only
    if it fails: σ_i = max(σ_RDP, σ_profile). A candidate with exactly the reference's (q, steps) gets σ_ref.

    Args:
        candidate: The candidate's (q, steps).
        reference: The reference mechanism.
        sigma_ref: The reference's noise multiplier.
        profiles: Also require profile dominance (:func:`profile_dominated`; a uniform search).
        orders: The accountant's RDP orders (default :data:`~dphypo.privacy.DEFAULT_ORDERS`).
        sigma_cap: Largest σ_i accepted.
        rtol: Relative precision of σ_i.
        split: The runs use a per-record split (docs/proofs/split.md, Corollary S4): the profile check compares the
            training PLDs alone (:meth:`ReferenceRun.training_profile`); the RDP check is unchanged (with one common
            score curve g, ε_i + g ≤ ε_ref + g iff ε_i ≤ ε_ref).

    Returns:
        σ_i.

    Raises:
        DominanceError: No σ_i ≤ ``sigma_cap`` dominates (one line naming the candidate).
    """
    check_positive("sigma_ref", sigma_ref)
    check_positive("sigma_cap", sigma_cap)
    if reference.is_candidate(candidate):
        return float(sigma_ref)
    grid = DEFAULT_ORDERS if orders is None else np.asarray(list(orders), dtype=np.float64)
    ref_curve = reference.rdp(sigma_ref, grid)

    def rdp_ok(sigma: float) -> bool:
        return rdp_dominated(reference.candidate_rdp(candidate, sigma, grid), ref_curve)

    # Coarse to fine: the root of the domination margin (≤ 0 exactly where rdp_ok holds) on every sixth order (cheap
    # curves), then secant steps on every order; the answer is checked by rdp_ok itself (a cached curve).
    coarse_grid = coarse_orders(grid)
    coarse_ref = reference.rdp(sigma_ref, coarse_grid)

    def margin(orders: np.ndarray, ref: RdpCurve) -> Callable[[float], float]:
        return lambda s: _rdp_margin(reference.candidate_rdp(candidate, s, orders), ref)

    try:
        sigma = coarse_to_fine_sigma(margin(grid, ref_curve), margin(coarse_grid, coarse_ref), 0.0, rtol=rtol,
                                     sigma_bounds=(_SMALLEST_SIGMA, sigma_cap))
    except CalibrationError:
        sigma = sigma_cap  # _smallest_near refuses it in one line
    if sigma >= sigma_cap or not rdp_ok(sigma):  # at the cap (refused there in one line), or a safety net
        sigma = _smallest_near(rdp_ok, sigma, sigma_cap, rtol, candidate, "RDP")
    if not profiles:
        return sigma
    if split:  # Corollary S4: the training PLDs alone (domination of training ⊗ score is not known to suffice)
        ref_training = reference.training_profile(sigma_ref)

        def profile_ok(s: float) -> bool:
            return profile_dominated(reference.training_profile(s, candidate), ref_training, slack=PROFILE_SLACK)
    else:
        ref_profile = reference.profile(sigma_ref)

        def profile_ok(s: float) -> bool:
            return profile_dominated(reference.candidate_profile(candidate, s), ref_profile, slack=PROFILE_SLACK)

    if profile_ok(sigma):
        return sigma
    return _smallest(profile_ok, sigma, sigma_cap, rtol, candidate, "privacy profile", floor=sigma)


def _smallest(ok: Callable[[float], bool], start: float, cap: float, rtol: float, candidate: CandidateRun,
              what: str, *, floor: float | None = None) -> float:
    """The smallest σ ≤ cap with ``ok(σ)`` for a monotone ``ok``, to ``rtol`` on the safe side.

    The bracket grows geometrically from ``start`` (``floor``: a σ known to fail, where the search starts).
    """
    lo, hi = _bracket(ok, min(start, cap), cap, candidate, what, floor)
    while hi / lo > 1.0 + rtol:
        mid = math.sqrt(lo * hi)
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


#: The smallest σ_i :func:`dominating_sigma` considers.
_SMALLEST_SIGMA = 1e-3


def _rdp_margin(curve: RdpCurve, reference: RdpCurve) -> float:
    """``max_α (ε̃(α) / ε̃_ref(α) − 1)`` of the envelopes: ≤ 0 exactly where :func:`rdp_dominated` holds.

    Relative, so that every order weighs alike (absolute gaps at order 1024 dwarf those where domination binds). ∞
    under ∞ and anything under ∞ count as dominated, ∞ over a finite bound and a positive bound over 0 as not;
    clipped to ±1e6 for the root finding. Non-increasing in the candidate's σ (every order's bound is).
    """
    mine, theirs = curve.monotone().epsilons, reference.monotone().epsilons
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(np.isinf(theirs), -1.0,
                         np.where(theirs > 0.0, mine / np.where(theirs > 0.0, theirs, 1.0) - 1.0,
                                  np.where(mine > 0.0, np.inf, 0.0)))
    return float(np.clip(np.max(ratio), -1e6, 1e6))


def _smallest_near(ok: Callable[[float], bool], guess: float, cap: float, rtol: float, candidate: CandidateRun,
                   what: str) -> float:
    """:func:`_smallest` from a close guess: steps of ``rtol`` (growing fourfold) away from it, then bisection.

    The same answer as :func:`_smallest` (the smallest σ ≤ cap with ``ok(σ)``, to ``rtol`` on the safe side: ``ok``
    holds at the returned σ and fails at σ / (1 + rtol), both evaluated), in two or three calls of ``ok`` when the
    guess is within ``rtol`` of the boundary.
    """
    factor = 1.0 + rtol
    sigma = min(guess, cap)
    if ok(sigma):
        hi, lo = sigma, sigma / factor
        while ok(lo):
            hi, lo = lo, lo / factor
            factor = factor**4
            if lo < 1e-6:  # pragma: no cover - a DP-SGD candidate at σ → 0 is never dominated by a DP-SGD reference
                raise ValueError(f"candidate {candidate.describe()} is dominated at every sigma")
    else:
        lo = sigma
        while True:
            hi = min(lo * factor, cap)
            if ok(hi):
                break
            if hi >= cap:
                raise DominanceError(
                    f"candidate {candidate.describe()} cannot be dominated by the reference ({what}) at any "
                    f"sigma <= {cap:g}: lower its epochs or batch size, raise the total epsilon, or the sigma cap"
                )
            lo, factor = hi, factor**4
    while hi / lo > 1.0 + rtol:
        mid = math.sqrt(lo * hi)
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


def _bracket(ok: Callable[[float], bool], sigma: float, cap: float, candidate: CandidateRun, what: str,
             floor: float | None) -> tuple[float, float]:
    """(lo, hi) with ``ok(hi)`` and not ``ok(lo)``, halving or doubling from σ; refuses a candidate past ``cap``."""
    if floor is None and ok(sigma):
        hi = sigma
        while ok(hi / 2.0):
            hi /= 2.0
            if hi < 1e-6:  # pragma: no cover - a DP-SGD candidate at σ → 0 is never dominated by a DP-SGD reference
                raise ValueError(f"candidate {candidate.describe()} is dominated at every sigma")
        return hi / 2.0, hi
    lo = sigma if floor is None else floor
    while True:
        hi = min(2.0 * lo, cap)
        if ok(hi):
            return lo, hi
        if hi >= cap:
            raise DominanceError(
                f"candidate {candidate.describe()} cannot be dominated by the reference ({what}) at any "
                f"sigma <= {cap:g}: lower its epochs or batch size, raise the total epsilon, or the sigma cap"
            )
        lo = hi


@dataclass(frozen=True)
class HeterogeneousPlan:
    """Every candidate's σ_i under one reference: what the accountant and the training layer each take.

    Args:
        reference: The reference mechanism.
        sigma_ref: Its noise multiplier.
        candidates: The candidates, in grid order.
        sigmas: σ_i per candidate, same order.
        profiles: Whether profile dominance was required too (a uniform search).
        profile_slack: The largest excess of a candidate's profile over the reference's (:func:`profile_excess`,
            at most :data:`PROFILE_SLACK`), added to the base profile; 0 without profiles.
        split_rule: The per-record split the runs use (:class:`~dphypo.privacy.split.SplitRule`), or ``None``: then
            profiles (and :attr:`profile_slack`) are of the training part alone (Corollary S4) and the accounting is
            Theorem S's, the reference's training and score parts side by side (docs/proofs/split.md).
    """

    reference: ReferenceRun
    sigma_ref: float
    candidates: tuple[CandidateRun, ...]
    sigmas: tuple[float, ...]
    profiles: bool
    profile_slack: float = 0.0
    split_rule: SplitRule | None = None

    def base_rdp(self, orders: Iterable[float] | None = None) -> RdpCurve:
        """The per-run curve valid for every candidate (the reference's, with its event): the accountant's ``base``."""
        return self.reference.rdp(self.sigma_ref, orders)

    def base_profile(self) -> PrivacyProfile | None:
        """The per-run profile valid for every candidate on ε ≥ 0, or ``None`` for a plan without profiles.

        The reference's PLD itself when every candidate is dominated exactly, else a :class:`SlackedProfile` raised
        by :attr:`profile_slack`; either way it carries the reference's event. ``None`` under a per-record split too:
        the plan dominated the training PLDs alone (Corollary S4), which :meth:`split_parts` carries.
        """
        if not self.profiles or self.split_rule is not None:
            return None
        profile = self.reference.profile(self.sigma_ref)
        return profile if self.profile_slack == 0.0 else SlackedProfile(profile, self.profile_slack)

    def candidate_rdp(self, index: int, orders: Iterable[float] | None = None) -> RdpCurve:
        """Candidate ``index``'s own per-run curve at its σ_i (its own event: what its training must stay under)."""
        return self.reference.candidate_rdp(self.candidates[index], self.sigmas[index], orders)

    def accounting(self, search: RepeatAndSelect, delta: float, *, max_lost: int = 0,
                   adaptive_theorem: str = "B", orders: Iterable[float] | None = None) -> PrivacyAccounting:
        """The accountant's plan of the whole search: the reference's curve, and its profile for a uniform search.

        The profile is passed only when the plan dominated the candidates' profiles *and* the search is uniform
        (no profile bound is proven for an adaptive one); otherwise the accounting uses the RDP bounds alone.
        """
        if self.split_rule is not None:  # Theorem S: the reference's two parts, each dominating the candidates'
            return PrivacyAccounting(search, self.base_rdp(orders), delta, max_lost=max_lost,
                                     adaptive_theorem=adaptive_theorem, split=self.split_parts(search, orders))
        profile = self.base_profile() if self.profiles and not search.adaptive else None
        return PrivacyAccounting(search, self.base_rdp(orders), delta, profile=profile, max_lost=max_lost,
                                 adaptive_theorem=adaptive_theorem)

    def split_parts(self, search: RepeatAndSelect, orders: Iterable[float] | None = None) -> SplitParts:
        """The reference's training and score parts under the plan's per-record split (Corollaries S1 and S4).

        The training profile (raised by :attr:`profile_slack`) only where the plan dominated the candidates' training
        PLDs and the search is uniform.

        Raises:
            ValueError: A plan without a split rule, or without a private score.
        """
        if self.split_rule is None:
            raise ValueError("split_parts needs a plan with a split_rule (a per-record split)")
        parts = split_parts(self.sigma_ref, self.reference.sample_rate, self.reference.steps,
                            score_noise=self.reference.score_noise, rule=self.split_rule, orders=orders)
        if not self.profiles or search.adaptive:
            return parts
        training = self.reference.training_profile(self.sigma_ref)
        slacked = training if self.profile_slack == 0.0 else SlackedProfile(training, self.profile_slack)
        score = score_release_profile(float(self.reference.score_noise or 0.0), discretization=training.discretization)
        return dataclasses.replace(parts, training_profile=slacked, score_profile=score)

    def describe(self) -> list[dict[str, Any]]:
        """One JSON-ready row per candidate: its name, σ_i, q, steps (what a dry run prints)."""
        return [{"name": c.name, "sigma": s, "sample_rate": c.sample_rate, "steps": c.steps}
                for c, s in zip(self.candidates, self.sigmas, strict=True)]


def plan_heterogeneous(
    candidates: Sequence[CandidateRun],
    reference: ReferenceRun,
    sigma_ref: float,
    *,
    profiles: bool,
    orders: Iterable[float] | None = None,
    sigma_cap: float = DEFAULT_SIGMA_CAP,
    rtol: float = SIGMA_RTOL,
    split_rule: SplitRule | None = None,
) -> HeterogeneousPlan:
    """σ_i for every candidate under the reference at σ_ref (:func:`dominating_sigma` per candidate).

    ``split_rule``: the runs' per-record split; profiles are then compared on the training part alone (Corollary S4).

    Raises:
        DominanceError: The first candidate that cannot be dominated, named, before any data is touched.
    """
    if not candidates:
        raise ValueError("candidates must not be empty")
    split = split_rule is not None
    grid = None if orders is None else tuple(orders)
    sigmas = tuple(dominating_sigma(c, reference, sigma_ref, profiles=profiles, orders=grid, sigma_cap=sigma_cap,
                                    rtol=rtol, split=split) for c in candidates)
    slack = 0.0
    if profiles:
        if split:
            ref_training = reference.training_profile(sigma_ref)
            slack = max(0.0 if reference.is_candidate(c) else
                        profile_excess(reference.training_profile(s, c), ref_training)
                        for c, s in zip(candidates, sigmas, strict=True))
        else:
            ref_profile = reference.profile(sigma_ref)
            slack = max(0.0 if reference.is_candidate(c) else
                        profile_excess(reference.candidate_profile(c, s), ref_profile)
                        for c, s in zip(candidates, sigmas, strict=True))
    return HeterogeneousPlan(reference, float(sigma_ref), tuple(candidates), sigmas, profiles, slack, split_rule)


@dataclass(frozen=True)
class HeterogeneousCalibration:
    """A calibrated heterogeneous search: σ_ref meets the total (ε, δ), every σ_i follows from it.

    Attributes:
        plan: The per-candidate σ_i.
        calibration: The calibration of σ_ref on the reference alone.
        report: The search's accounting under the plan (:meth:`HeterogeneousPlan.accounting`): the calibration's
            report itself unless a profile slack had to be added, which then raised σ_ref until the target was met.
    """

    plan: HeterogeneousPlan
    calibration: CalibrationResult
    report: PrivacyReport


def calibrate_heterogeneous(
    target_epsilon: float,
    delta: float,
    search: RepeatAndSelect,
    candidates: Sequence[CandidateRun],
    *,
    score_noise: float | None = None,
    reference: ReferenceRun | None = None,
    orders: Iterable[float] | None = None,
    sigma_cap: float = DEFAULT_SIGMA_CAP,
    max_lost: int = 0,
    adaptive_theorem: str = "B",
    rtol: float = 1e-4,
    split_rule: SplitRule | None = None,
) -> HeterogeneousCalibration:
    """Total ε → σ_ref → every σ_i: the calibration entry point of a search over privacy-affecting axes.

    σ_ref is :func:`~dphypo.privacy.calibration.calibrate_dpsgd_sigma` of the reference's (q, steps, score noise),
    so the total ε is exactly the one a reader recomputes from the reference (and a grid whose candidates all share
    one (q, steps) gets today's single σ). Profile dominance is required for a uniform search (where the profile
    bounds are used) unless the reference's PLD is too large to build (then, as in ``calibrate_dpsgd_sigma``, the
    accounting uses the RDP bounds alone), RDP dominance always.

    Args:
        target_epsilon: Total ε of the search.
        delta: δ ∈ (0, 1).
        search: Run-count distribution and density bounds.
        candidates: The grid's candidates.
        score_noise: The common score-release std (``None``: no private score).
        reference: The reference (default :func:`reference_for` the candidates; its ``score_noise`` must then be
            ``score_noise``).
        orders: RDP orders of the accounting and of the dominance check (default the accountant's 280 orders up
            to 1024). Dominance is required at every order the accountant may use, and a candidate with a smaller
            rate and more steps is often dominated at low orders but not at high ones, which the conversion rarely
            picks: on the digits grid batch {32, 64, 128} × epochs {5, 20} (n = 1437, score noise 5, geometric
            E[T] = 10, ε = 8) orders ≤ 32 leave σ_ref and the total ε unchanged (1.4329, 7.9995) and lower the
            largest σ_i from 2.71 to 1.73. :func:`trimmed_orders` finds such a grid (opt-in).
        sigma_cap: Largest σ_i accepted.
        max_lost: Lost attempts charged up front.
        adaptive_theorem: The bound for C > c.
        rtol: Relative tolerance on σ_ref.
        split_rule: The runs' per-record split (docs/proofs/split.md): σ_ref is calibrated under Theorem S and
            candidates are dominated per side (Corollary S4: the training PLDs alone); ``None``: the sum.

    Returns:
        The calibration.

    Raises:
        CalibrationError: The target is unreachable for the reference.
        DominanceError: A candidate needs σ_i above ``sigma_cap`` (named).
        ValueError: Bad arguments, or a reference whose score noise differs from ``score_noise``.
    """
    check_positive("epsilon", target_epsilon)
    check_delta(delta)
    check_positive("sigma_cap", sigma_cap)
    ref = reference_for(candidates, score_noise) if reference is None else reference
    if ref.score_noise != score_noise:
        raise ValueError(f"reference.score_noise must equal score_noise ({score_noise!r}), got {ref.score_noise!r}")
    grid = None if orders is None else tuple(orders)
    calibration = calibrate_dpsgd_sigma(target_epsilon, delta, ref.sample_rate, ref.steps, search,
                                        score_noise=score_noise, orders=grid, rtol=rtol, max_lost=max_lost,
                                        adaptive_theorem=adaptive_theorem, split_rule=split_rule)
    sigma_ref = calibration.sigma
    # Profile domination is needed only where profile bounds are used: a uniform search whose reference PLD fits.
    ref_pld = ref.profile if split_rule is None else ref.training_profile
    profiles = not search.adaptive and not isinstance(profile_or_skipped(lambda: ref_pld(sigma_ref)), ProfileSkipped)
    for _ in range(_MAX_SLACK_RETRIES):
        plan = plan_heterogeneous(candidates, ref, sigma_ref, profiles=profiles, orders=grid, sigma_cap=sigma_cap,
                                  split_rule=split_rule)
        report = plan.accounting(search, delta, max_lost=max_lost, adaptive_theorem=adaptive_theorem,
                                 orders=grid).account()
        if report.epsilon <= target_epsilon:
            return HeterogeneousCalibration(plan, calibration, report)
        sigma_ref *= 1.0 + rtol  # the profile slack (≤ 1e-15 in δ) cost a hair of ε: a little more noise
    raise CalibrationError(  # pragma: no cover - a slack of ≤ 1e-15 in δ moves ε by far less than rtol does
        f"the candidates' profile slack keeps the search above epsilon={target_epsilon:g}"
    )


#: How many times :func:`calibrate_heterogeneous` raises σ_ref by ``rtol`` when a profile slack costs ε.
_MAX_SLACK_RETRIES = 20


#: Order caps :func:`trimmed_orders` tries, smallest first (the default grid ends at 1024).
ORDER_CAPS = (8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0)


def trimmed_orders(
    target_epsilon: float, delta: float, search: RepeatAndSelect, reference: ReferenceRun, *,
    max_lost: int = 0, adaptive_theorem: str = "B", rtol: float = 1e-4,
) -> np.ndarray:
    """The default orders up to the smallest cap at which the reference needs no more noise (opt-in).

    Candidates need only be dominated at the orders the accountant may use, and domination at high orders, which the
    conversion rarely picks, is what asks a candidate with a smaller rate and more steps for the most noise. This
    tries the caps of :data:`ORDER_CAPS` and returns the first grid on which the calibrated σ_ref is within
    ``rtol`` of the full grid's (every bound on the trimmed grid is still a valid bound: it optimises over fewer
    orders), for :func:`calibrate_heterogeneous`'s ``orders``.

    Returns:
        The orders, shape ``(K,)`` (the full default grid when no cap keeps σ_ref).
    """
    def sigma_ref(orders: np.ndarray | None) -> float:
        grid = None if orders is None else tuple(orders)
        return calibrate_dpsgd_sigma(target_epsilon, delta, reference.sample_rate, reference.steps, search,
                                     score_noise=reference.score_noise, orders=grid, rtol=rtol, max_lost=max_lost,
                                     adaptive_theorem=adaptive_theorem).sigma

    full = sigma_ref(None)
    for cap in ORDER_CAPS:
        orders = DEFAULT_ORDERS[np.less_equal(DEFAULT_ORDERS, cap)]
        if sigma_ref(orders) <= full * (1.0 + rtol):
            return np.asarray(orders)
    return np.asarray(DEFAULT_ORDERS)


def threshold_sigma(
    candidate: CandidateRun, reference: ReferenceRun, sigma_ref: float, search: RepeatAndSelect, delta: float, *,
    sigma_cap: float = DEFAULT_SIGMA_CAP, rtol: float = SIGMA_RTOL,
) -> float:
    """KRW Corollary 6.2's σ_i: the smallest making the candidate (ε₁, δ₁)- and (ε̂, δ/m)-DP (opt-in comparison).

    TNB T and a uniform search only.

    The thresholds are the reference profile's: ε₁ = argmin_{ε ≥ 0} (η+1)·log(e^ε + ((1−γ)/γ)·δ_ref(ε)) (the TNB
    overhead of KRW Theorem 5.2), δ₁ = δ_ref(ε₁), ε̂ = ε_ref(δ/m). Only two points of the profile must be
    dominated, so σ_i is at most :func:`dominating_sigma`'s with ``profiles=True``; the search's ε is then
    :func:`threshold_epsilon` (Cor. 6.2), a single (ε, δ) that cannot be combined with the RDP bounds.

    Raises:
        ValueError: Non-TNB T or an adaptive search (Cor. 6.2 is proven for TNB T and i.i.d. runs).
        DominanceError: No σ_i ≤ ``sigma_cap`` meets the thresholds.
    """
    eps1, delta1, eps_hat, small_delta = _thresholds(reference.profile(sigma_ref), search, delta)

    def ok(sigma: float) -> bool:
        prof = reference.candidate_profile(candidate, sigma)
        return bool(prof.delta(eps1) <= delta1 and prof.delta(eps_hat) <= small_delta)

    if reference.is_candidate(candidate):
        return float(sigma_ref)
    return _smallest(ok, sigma_ref, sigma_cap, rtol, candidate, "Cor. 6.2 thresholds")


def threshold_epsilon(reference_profile: PldProfile, search: RepeatAndSelect, delta: float) -> float:
    """KRW Corollary 6.2: ε = ε̂ + (η+1)·log(e^{ε₁} + ((1−γ)/γ)·δ₁) at the thresholds of :func:`threshold_sigma`.

    Every candidate meeting the thresholds is (ε₁, δ₁)- and (ε̂, δ/m)-DP, so the TNB selection is (ε, δ)-DP.
    """
    eps1, delta1, eps_hat, _ = _thresholds(reference_profile, search, delta)
    rc = search.run_count
    assert isinstance(rc, TruncatedNegativeBinomial)  # _thresholds refused the rest
    return eps_hat + (rc.theta + 1.0) * math.log(math.exp(eps1) + (1.0 - rc.gamma) / rc.gamma * delta1)


def _thresholds(profile: PldProfile, search: RepeatAndSelect, delta: float) -> tuple[float, float, float, float]:
    """(ε₁, δ₁, ε̂, δ/m) of KRW Cor. 6.2 for the reference profile (ε₁ on a grid with ε₁ = 0, then refined)."""
    check_delta(delta)
    rc = search.run_count
    if search.adaptive or not isinstance(rc, TruncatedNegativeBinomial):
        raise ValueError("KRW Corollary 6.2 is proven for a uniform search with truncated negative binomial T only")
    ratio = (1.0 - rc.gamma) / rc.gamma
    grid = np.concatenate([[0.0], np.geomspace(1e-4, 20.0, 4000)])
    overhead = np.log(np.exp(grid) + ratio * profile.delta(grid))
    eps1 = float(grid[int(np.argmin(overhead))])
    small_delta = delta / rc.mean
    return eps1, float(profile.delta(eps1)), profile.epsilon(small_delta), small_delta

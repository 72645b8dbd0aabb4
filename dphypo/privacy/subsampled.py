r"""Tuning on a random subset (Koskela & Kulkarni 2023, "KK", DP hyperparameter tuning with subsampling).

The method (KK Sec. 3.1): draw the tuning set X₁ ⊂ X by Poisson subsampling with rate q (each record
independently), run a private search M_tune on X₁ only (output (θ₁, t₁)), transfer t₁ → t₂ with a
data-independent rule (KK Sec. 3.2, :func:`transfer_hyperparameters`), then train once more with M_base:

* **variant 1** (KK eq. 3.1): on X \ X₁ — accounted with KK **Theorem 1** (:func:`koskela_kulkarni_theorem1`);
* **variant 2** (KK eq. 3.2): on the full X — M_tune∘subsample_q accounted with Zhu & Wang 2019 (KK's
  "Theorem 4", :func:`zhu_wang_subsampled_rdp`), composed with M_base (:func:`variant2_rdp`).

Both bounds are RDP statements at **integer** orders and need ε(k) at *every* integer 2 ≤ k ≤ α (their proofs
are binomial expansions), so curves are taken on the contiguous grid 2..``max_order`` and converted with the
Canonne–Kamath–Steinke conversion (KK Lemma 3). ε(1) terms are e^{0·ε(1)} = 1 (never evaluated).

**Tuning curve ε_tune.** KK Thm 1 treats M_tune as a black box that is (k, ε_tune(k))-RDP on X₁ (add/remove).
We take it from :func:`~dphypo.privacy.search_rdp.tuning_rdp`:

* uniform search (C = c = 1): the order-wise minimum of Papernot & Steinke 2022 Theorem 2 and Theorem B of
  docs/proofs/adaptive.md at C = c = 1 (TNB T), or Papernot-Steinke Theorem 6 (Poisson T, KK's "Theorem 5");
* adaptive search (C > c): Theorem B of docs/proofs/adaptive.md (the proven replacement of DP-HyPO Theorem 1),
  **TNB T only**; Poisson and binomial T are refused (no
  theorem). This is inside KK Thm 1's scope only if (KK notes §5) (1) the whole adaptive loop (GP fit, UCB,
  softmax, projection, all runs, the final argmax) runs on X₁ only, using only X₁'s private outputs and public
  data; (2) the curve is the one of the T distribution actually sampled (guaranteed here); (3) the candidate
  curve is valid for every candidate the density can reach (the whole prior support); (4) ε_base is valid for
  every t₂ the transfer can produce. (1), (3), (4) are the caller's obligations and cannot be checked here.

Not covered (refused or out of scope): binomial T (no RDP theorem in dphypo); resampling X₁ per candidate;
non-Poisson (e.g. fixed-size) tuning subsets; privacy-profile (hockey-stick) versions of either variant.

References (docs/references.md): Koskela & Kulkarni 2023 arXiv:2301.11989 (version unverified); Zhu & Wang 2019
(ICML, no arXiv id); Papernot & Steinke 2022 arXiv:2110.03620v2.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import special

from dphypo.privacy.calibration import CalibrationError, smallest_sigma
from dphypo.privacy.conversion import epsilon_from_rdp
from dphypo.privacy.errors import DphypoError
from dphypo.privacy.rdp import DEFAULT_ORDERS, RdpCurve, compose, dpsgd_rdp, nonnegative_bound, zero_rdp
from dphypo.privacy.run_counts import Binomial
from dphypo.privacy.search_rdp import tuning_rdp
from dphypo.privacy.spec import RepeatAndSelect
from dphypo.privacy.transfer import (
    DpSgdHyperparameters,
    Variant,
    check_variant,
    nominal_set_sizes,
    transfer_hyperparameters,
    transfer_learning_rate,
)
from dphypo.privacy.validation import check_delta, check_positive

__all__ = [
    "DEFAULT_MAX_ORDER",
    "DpSgdHyperparameters",
    "SubsampledCalibration",
    "SubsampledScopeError",
    "SubsampledTuningReport",
    "accounting_orders",
    "calibrate_subsampled_sigma",
    "dpsgd_subsampled_tuning",
    "koskela_kulkarni_theorem1",
    "nominal_set_sizes",
    "subsampled_tuning",
    "transfer_hyperparameters",
    "transfer_learning_rate",
    "tuning_curve",
    "variant2_rdp",
    "zhu_wang_subsampled_rdp",
]

# : Largest integer order (KK notes §2.8: 64, 128 and 256 give identical results in the paper's Fig. 1
# setting).
DEFAULT_MAX_ORDER = 256



class SubsampledScopeError(DphypoError, ValueError):
    """The subsampled-tuning accounting was asked for a configuration no theorem covers."""


def accounting_orders(max_order: int = DEFAULT_MAX_ORDER) -> np.ndarray:
    """:data:`~dphypo.privacy.rdp.DEFAULT_ORDERS` plus every integer 2..``max_order``.

    The dense fractional orders keep the α̂ optimisation of the tuning theorems and the δ̂ conversion of P&S
    Theorem 6 as tight as in :func:`~dphypo.privacy.accountant.account`; KK's theorems use the integers.
    """
    _check_max_order(max_order)
    return np.unique(np.concatenate([DEFAULT_ORDERS, np.arange(2, max_order + 1, dtype=np.float64)]))


def _check_max_order(max_order: int) -> None:
    if not (isinstance(max_order, (int, np.integer)) and 2 <= max_order <= 4096):
        raise ValueError(f"max_order must be an integer in [2, 4096], got {max_order!r}")


def _check_rate(rate: float, name: str = "tuning_rate") -> None:
    if not (isinstance(rate, (int, float)) and 0.0 <= rate <= 1.0):
        raise ValueError(f"{name} must be in [0, 1], got {rate!r}")


def _integer_values(curve: RdpCurve, max_order: int) -> np.ndarray:
    """ε(k) for k = 2..max_order, shape ``(max_order − 1,)``; every integer must be on the curve's grid."""
    ks = np.arange(2, max_order + 1, dtype=np.float64)
    idx = np.searchsorted(curve.orders, ks)
    idx = np.minimum(idx, curve.orders.size - 1)
    missing = ks[curve.orders[idx] != ks]
    if missing.size:
        raise ValueError(
            f"curve {curve.label!r} lacks integer order(s) {missing[:5].astype(int).tolist()}: "
            "KK Theorem 1 and "
            "Zhu-Wang's bound need eps(k) at every integer 2 <= k <= alpha; build it on accounting_orders()"
        )
    return curve.epsilons[idx]


def _padded_log_moments(eps: np.ndarray) -> np.ndarray:
    """``(k−1)·ε(k)`` for k = 0..α (index = k) with the k = 0, 1 entries set to 0 (e^{0·ε(1)} := 1)."""
    ks = np.arange(2, eps.size + 2, dtype=np.float64)
    return np.concatenate([[0.0, 0.0], (ks - 1.0) * eps])


def _log_binom(n: int, j: np.ndarray) -> np.ndarray:
    return special.gammaln(n + 1.0) - special.gammaln(j + 1.0) - special.gammaln(n - j + 1.0)


def _theorem1_components(
    tune: RdpCurve, base: RdpCurve, tuning_rate: float, max_order: int
) -> tuple[np.ndarray, np.ndarray]:
    """ε₁(α) (eq. 3.6, "add") and ε₂(α) (eq. 3.7, "remove") for α = 2..max_order.

    Returns:
        ``(ε₁, ε₂)``, each shape ``(max_order − 1,)``.
    """
    _check_rate(tuning_rate)
    _check_max_order(max_order)
    t = _padded_log_moments(_integer_values(tune, max_order))
    b = _padded_log_moments(_integer_values(base, max_order))
    q = float(tuning_rate)
    add, remove = np.empty(max_order - 1), np.empty(max_order - 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        for i, alpha in enumerate(range(2, max_order + 1)):
            j = np.arange(alpha + 1, dtype=np.float64)
            ji = j.astype(int)
            add[i] = special.logsumexp(
                _log_binom(alpha, j)
                + special.xlogy(alpha - j, q)
                + special.xlogy(j, 1.0 - q)
                + t[alpha - ji]
                + b[ji]
            ) / (alpha - 1.0)
            j, ji = j[:-1], ji[:-1]
            remove[i] = special.logsumexp(
                _log_binom(alpha - 1, j)
                + special.xlogy(j, q)
                + special.xlogy(alpha - 1 - j, 1.0 - q)
                + t[ji + 1]
                + b[alpha - ji]
            ) / (alpha - 1.0)
    return add, remove


def koskela_kulkarni_theorem1(
    tune: RdpCurve, base: RdpCurve, tuning_rate: float, *, max_order: int
) -> RdpCurve:
    """KK 2023 **Theorem 1** (variant 1, eq. 3.1): ε(α) = max{ε₁(α), ε₂(α)} at integer α = 2..``max_order``.

    With T(k) = (k−1)ε_tune(k), B(k) = (k−1)ε_base(k) and T(0) = T(1) = B(0) = B(1) = 0 (the e^{0·ε(1)} = 1
    convention), eq. (3.6) and (3.7) read

        ε₁(α) = 1/(α−1)·log Σ_{j=0}^{α} C(α,j) q^{α−j} (1−q)^j e^{T(α−j) + B(j)}            ("add" direction),
        ε₂(α) = 1/(α−1)·log Σ_{j=0}^{α−1} C(α−1,j) q^j (1−q)^{α−1−j} e^{T(j+1) + B(α−j)}    ("remove").

    (The j = 0 and j = α terms of ε₁ are KK's separate q^α e^{(α−1)ε_tune(α)} and (1−q)^α e^{(α−1)ε_base(α)}.)
    Evaluated in log space. Remark 2: q → 1 gives ε_tune, q → 0 gives ε_base. ε_base must hold uniformly over
    the tuning output fed to M_base (KK App. C).

    Args:
        tune: RDP curve of M_tune on X₁ (add/remove), with every integer order 2..``max_order``.
        base: RDP curve of the final run M_base, same requirement.
        tuning_rate: Poisson rate q ∈ [0, 1] of the tuning set X₁.
        max_order: Largest integer order α.

    Returns:
        The curve on orders 2..``max_order``.
    """
    add, remove = _theorem1_components(tune, base, tuning_rate, max_order)
    out = nonnegative_bound(np.maximum(add, remove), "Koskela-Kulkarni Theorem 1")
    orders = np.arange(2, max_order + 1, dtype=np.float64)
    return RdpCurve(
        orders, out, None, f"KK Thm 1 [variant 1, q={tuning_rate:g}] of ({tune.label}; {base.label})"
    )


def zhu_wang_subsampled_rdp(curve: RdpCurve, rate: float, *, max_order: int) -> RdpCurve:
    """Zhu & Wang 2019 (KK 2023's "Theorem 4"): RDP of M∘subsample_Poisson(γ) at integer α ≥ 2 (add/remove).

        ε′(α) = 1/(α−1)·log( (1−γ)^{α−1}(αγ − γ + 1) + C(α,2) γ² (1−γ)^{α−2} e^{ε(2)}
                             + 3 Σ_{j=3}^{α} C(α,j) γ^j (1−γ)^{α−j} e^{(j−1)ε(j)} ).

    At α = 2 this is log(1 − γ² + γ² e^{ε(2)}).

    Args:
        curve: RDP curve of M (add/remove), with every integer order 2..``max_order``.
        rate: Poisson sampling rate γ ∈ [0, 1].
        max_order: Largest integer order α.

    Returns:
        The curve on orders 2..``max_order``.
    """
    _check_rate(rate, "rate")
    _check_max_order(max_order)
    e = _padded_log_moments(_integer_values(curve, max_order))  # e[j] = (j−1)ε(j)
    g = float(rate)
    out = np.empty(max_order - 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        for i, alpha in enumerate(range(2, max_order + 1)):
            first = special.xlogy(alpha - 1, 1.0 - g) + math.log(alpha * g - g + 1.0)
            second = (
                _log_binom(alpha, np.array(2.0))
                + special.xlogy(2, g)
                + special.xlogy(alpha - 2, 1.0 - g)
                + e[2]
            )
            j = np.arange(3, alpha + 1, dtype=np.float64)
            rest = (
                math.log(3.0) + _log_binom(alpha, j) + special.xlogy(j, g) + special.xlogy(alpha - j, 1.0 - g)
            )
            terms = np.concatenate([[first, float(second)], rest + e[j.astype(int)]])
            out[i] = special.logsumexp(terms) / (alpha - 1.0)
    out = nonnegative_bound(out, "Zhu-Wang subsampled RDP")
    orders = np.arange(2, max_order + 1, dtype=np.float64)
    return RdpCurve(orders, out, None, f"Zhu-Wang subsampled [rate={g:g}] of ({curve.label})")


def variant2_rdp(tune: RdpCurve, base: RdpCurve, tuning_rate: float, *, max_order: int) -> RdpCurve:
    """KK 2023 variant 2 (eq. 3.2, Sec. 3.3): Zhu–Wang(ε_tune, q) composed with ε_base (adaptive composition).

    Do not take a per-order minimum with :func:`koskela_kulkarni_theorem1`: the two bound different
    mechanisms.
    """
    sub = zhu_wang_subsampled_rdp(tune, tuning_rate, max_order=max_order)
    base_int = RdpCurve(sub.orders, _integer_values(base, max_order), None, base.label)
    out = compose(sub, base_int)
    return RdpCurve(out.orders, out.epsilons, None, f"KK variant 2 [q={tuning_rate:g}]: {out.label}")


def tuning_curve(candidate: RdpCurve, search: RepeatAndSelect, *, max_order: int) -> tuple[RdpCurve, str]:
    """ε_tune(k) at integer k = 2..``max_order`` for a search run on the tuning set (see the module docstring).

    Args:
        candidate: Per-candidate RDP curve on a grid containing every integer 2..``max_order``.
        search: T distribution and density bounds actually used by the tuner.
        max_order: Largest integer order.

    Returns:
        ``(curve, theorem)``.

    Raises:
        SubsampledScopeError: Binomial T (no RDP theorem) or an adaptive search whose T has no theorem.
    """
    if isinstance(search.run_count, Binomial):
        raise SubsampledScopeError(
            "binomial T has no RDP theorem in dphypo, and Koskela-Kulkarni Theorem 1 composes RDP curves, so "
            "subsampled tuning cannot be accounted with it; binomial T is covered only by the "
            "privacy-profile bound profile-binomial (Koskela-Redberg-Wang 2024 Thm 5.7) for a uniform "
            "search on the full data. "
            "Use TNB or Poisson T for subsampled tuning"
        )
    tuned = tuning_rdp(candidate, search.run_count, search.C, search.c)  # refuses adaptive Poisson
    values = _integer_values(tuned.curve, max_order)
    orders = np.arange(2, max_order + 1, dtype=np.float64)
    return RdpCurve(orders, values, None, tuned.curve.label), tuned.theorem


@dataclass(frozen=True)
class SubsampledTuningReport:
    r"""Privacy of subsampled tuning (tuning on X₁ plus one final run).

    Attributes:
        epsilon: Total ε of (θ₁, t₁, θ₂) at ``delta``.
        delta: δ of the guarantee.
        order: Integer order of the conversion.
        variant: 1 (final run on X \ X₁, KK Thm 1) or 2 (final run on X, Zhu–Wang + composition).
        tuning_rate: q.
        tuning_theorem: Theorem behind ε_tune.
        full_data_epsilon: ε of the same search run on all of X without a final run (the baseline), same
            orders.
        single_run_epsilon: ε of one candidate run alone, same orders.
        expected_runs: E[T].
        curve: The total RDP curve on orders 2..max_order.
    """

    epsilon: float
    delta: float
    order: float
    variant: int
    tuning_rate: float
    tuning_theorem: str
    full_data_epsilon: float
    single_run_epsilon: float
    expected_runs: float
    curve: RdpCurve


def subsampled_tuning(
    candidate: RdpCurve,
    search: RepeatAndSelect,
    tuning_rate: float,
    variant: Variant,
    delta: float,
    *,
    final: RdpCurve | None = None,
    max_order: int = DEFAULT_MAX_ORDER,
    charged_runs: int = 0,
) -> SubsampledTuningReport:
    """Total (ε, δ) of KK 2023 subsampled tuning (variant 1: Thm 1; variant 2: Zhu–Wang + composition).

    Args:
        candidate: Per-candidate RDP curve (valid for every candidate), on a grid with every integer
            2..``max_order`` (e.g. :func:`accounting_orders`).
        search: T distribution and density bounds of the search on X₁.
        tuning_rate: Poisson rate q ∈ [0, 1] of X₁.
        variant: 1 or 2.
        delta: Target δ ∈ (0, 1).
        final: RDP curve of the final run, valid for every reachable t₂ (default: ``candidate``, as KK's
            transfer keeps σ, γ, T and C).
        max_order: Largest integer order.
        charged_runs: Lost attempts of the search on X₁ (:mod:`dphypo.privacy.charged`), each charged as one more
            candidate run on X₁: ε_tune becomes the RDP composition of the search with ``charged_runs`` × the
            candidate curve (still a mechanism of X₁ alone, as KK Thm 1 needs).

    Returns:
        The report.
    """
    check_variant(variant)
    check_delta(delta)
    final = candidate if final is None else final
    tune, theorem = tuning_curve(candidate, search, max_order=max_order)
    if charged_runs:
        lost = RdpCurve(tune.orders, _integer_values(candidate, max_order), None, candidate.label)
        tune, theorem = compose(tune, lost.repeated(charged_runs)), f"{theorem} + {charged_runs} charged attempt(s)"
    if variant == 1:
        total = koskela_kulkarni_theorem1(tune, final, tuning_rate, max_order=max_order)
    else:
        total = variant2_rdp(tune, final, tuning_rate, max_order=max_order)
    eps, order = epsilon_from_rdp(total.orders, total.epsilons, delta)
    full, _ = epsilon_from_rdp(tune.orders, tune.epsilons, delta)
    single, _ = epsilon_from_rdp(tune.orders, _integer_values(candidate, max_order), delta)
    return SubsampledTuningReport(
        eps,
        delta,
        order,
        int(variant),
        float(tuning_rate),
        theorem,
        full,
        single,
        search.run_count.mean,
        total,
    )


def dpsgd_subsampled_tuning(
    sigma: float,
    sample_rate: float,
    steps: int,
    search: RepeatAndSelect,
    tuning_rate: float,
    variant: Variant,
    delta: float,
    *,
    max_order: int = DEFAULT_MAX_ORDER,
) -> SubsampledTuningReport:
    """:func:`subsampled_tuning` for DP-SGD candidates and a final run with the same (σ, γ, T) (KK 3.2)."""
    candidate = dpsgd_rdp(sigma, sample_rate, steps, orders=accounting_orders(max_order))
    return subsampled_tuning(candidate, search, tuning_rate, variant, delta, max_order=max_order)


@dataclass(frozen=True)
class SubsampledCalibration:
    """A noise multiplier σ whose subsampled tuning meets a total ε, with the report at σ."""

    sigma: float
    report: SubsampledTuningReport
    evaluations: int


def calibrate_subsampled_sigma(
    target_epsilon: float,
    delta: float,
    search: RepeatAndSelect,
    tuning_rate: float,
    variant: Variant,
    candidate_for_sigma: Callable[[float], RdpCurve],
    final_for_sigma: Callable[[float], RdpCurve],
    *,
    max_order: int = DEFAULT_MAX_ORDER,
    rtol: float = 1e-4,
    max_lost: int = 0,
) -> SubsampledCalibration:
    """The smallest σ (to ``rtol``) whose :func:`subsampled_tuning` total meets ``target_epsilon``.

    One σ for every tuning run and the final run. Every step (DP-SGD RDP, the tuning theorem, KK Thm 1 /
    Zhu–Wang, composition, the conversion) is non-increasing in σ, so the root finding of
    :func:`~dphypo.privacy.calibration.smallest_sigma` applies.

    Args:
        target_epsilon: Total ε of tuning plus the final run.
        delta: δ ∈ (0, 1).
        search: T distribution and density bounds of the search on X₁.
        tuning_rate: q ∈ (0, 1).
        variant: 1 or 2.
        candidate_for_sigma: Per-candidate RDP curve at σ, on :func:`accounting_orders` (``max_order``).
        final_for_sigma: RDP curve of the final run at σ, same grid.
        max_order: Largest integer order.
        rtol: Relative tolerance on σ.
        max_lost: Lost attempts of the search on X₁ charged up front (``charged_runs`` of
            :func:`subsampled_tuning`).

    Returns:
        The calibration.

    Raises:
        CalibrationError: Even infinite noise (zero curves) exceeds the target.
    """
    check_positive("epsilon", target_epsilon)
    zero = zero_rdp(accounting_orders(max_order))
    floor = subsampled_tuning(zero, search, tuning_rate, variant, delta, final=zero, max_order=max_order).epsilon
    if floor >= target_epsilon:
        raise CalibrationError(
            f"target epsilon={target_epsilon:g} is unreachable: subsampled tuning (q={tuning_rate:g}, variant "
            f"{variant}) costs at least epsilon={floor:.4g} even with infinite noise; raise epsilon or lower E[T]"
        )
    evaluations = 0

    def report_at(sigma: float) -> SubsampledTuningReport:
        return subsampled_tuning(candidate_for_sigma(sigma), search, tuning_rate, variant, delta,
                                 final=final_for_sigma(sigma), max_order=max_order, charged_runs=max_lost)

    def epsilon_at(sigma: float) -> float:
        nonlocal evaluations
        evaluations += 1
        return report_at(sigma).epsilon

    sigma = smallest_sigma(epsilon_at, target_epsilon, rtol=rtol)
    return SubsampledCalibration(sigma, report_at(sigma), evaluations)

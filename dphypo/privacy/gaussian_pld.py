r"""dp_accounting's PLD of the Poisson-subsampled Gaussian mechanism, built with arrays instead of Python loops.

``dp_accounting.pld.privacy_loss_distribution.from_gaussian_mechanism(σ, sensitivity=1, sampling_prob=q,
use_connect_dots=True, pessimistic_estimate=True)`` (add/remove neighbours) evaluates the mechanism's hockey-stick
divergence δ(ε) at every grid loss ``ε_i = i·d`` of ``[ε_lower, ε_upper]`` (its ``connect_dots_bounds``) and turns
the values into the pessimistic connect-the-dots PMF (Doroshenko, Ghazi, Kamath, Kumar & Manurangsi 2022,
"Connect the Dots", Algorithm 1; an upper bound on the profile at every discretisation, their Theorem 4.1). Its
inverse privacy loss is a Python call per grid point (≈ 10 µs; a DP-SGD step at d = 1e-4 has 10⁴–10⁵ points).
:func:`subsampled_gaussian_pld` performs the same arithmetic on arrays, operation for operation:

* the inverse loss ``x(ε)`` of ``AdditiveNoisePrivacyLoss._inverse_privacy_loss_{remove,add}``
  (``log(1 + (e^{±ε} − 1)/q)`` through ``common.log_a_times_exp_b_plus_c``, the ``math.isclose`` boundary case,
  the Gaussian's ``-Δ/2 − ε σ²/Δ``), then dp_accounting's own (already vectorised) ``mu_upper_cdf`` and
  ``mu_lower_log_cdf`` give ``δ(ε) = F_upper(x) − e^{ε + log F_lower(x)}``, clipped to [0, 1], with the closed
  forms ``1 − e^ε`` (remove, ε ≤ log(1−q)) and 0 (add, ε ≥ −log(1−q)) of ``get_delta_for_epsilon``;
* ``pld_pmf.create_pmf_pessimistic_connect_dots_fixed_gap`` (running minimum of δ, the fixed-gap masses, negative
  masses set to 0, infinity mass ``δ_n``), wrapped in dp_accounting's own ``DensePLDPmf`` and
  ``PrivacyLossDistribution``.

A few grid points of every PMF are re-evaluated by dp_accounting's scalar path when it is built, so an upstream
change fails loudly (``RuntimeError``); tests/privacy/test_gaussian_pld.py compares whole PMFs (lower loss index,
every mass, infinity mass) and composed ε with dp_accounting over a grid of (σ, q, d).

:func:`self_compose` is ``PrivacyLossDistribution.self_compose`` (``DensePLDPmf.self_compose`` →
``common.self_convolve``) with the Chernoff truncation bounds of ``common.compute_self_convolve_bounds`` evaluated
as 40 dot products with powers of ``e^{±i/n}`` instead of 40 calls of ``scipy.special.logsumexp``;
:func:`composed_size` is the grid size that composition allocates, without composing. The sums differ from
scipy's in the last bits, so a bound can land on the neighbouring integer only when the real-valued Chernoff bound
B is within ~1e-7 of an integer; the truncation stays valid then (every index above ``ceil(B − 1e-7)`` is ≥ B,
every index below ``floor(B + 1e-7)`` is ≤ B, and the Chernoff bound holds for every real threshold), and the
truncated mass is added to the infinity mass as before. :func:`compose` is ``PrivacyLossDistribution.compose``
with the tail truncation's running sums by ``cumsum`` instead of a Python loop (identical results).

References (docs/references.md): Doroshenko et al. 2022 arXiv:2207.04380; Koskela et al. 2021 arXiv:2006.07134.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any

import numpy as np
from scipy import fft

__all__ = ["compose", "composed_size", "self_compose", "self_convolve_bounds", "subsampled_gaussian_pld"]

# dp_accounting's defaults: the Gaussian's log mass truncation (from_gaussian_mechanism) and the tolerance on
# increasing deltas (pld_pmf._DELTA_DIFF_TOLERANCE).
_LOG_MASS_TRUNCATION = -50.0
_DELTA_DIFF_TOLERANCE = 1e-12
# Grid points of each PMF re-evaluated by dp_accounting's scalar path when it is built.
_SPOT_CHECKS = 7
# Orders of common.compute_self_convolve_bounds, in units of 1 / len(probs).
_CHERNOFF_ORDERS = np.concatenate((np.arange(-20, 0), np.arange(1, 21))).astype(np.float64)


def _isclose(values: np.ndarray, target: float) -> np.ndarray:
    """``math.isclose(v, target)`` elementwise (rel_tol 1e-9, abs_tol 0; numpy's ``isclose`` differs)."""
    return np.abs(values - target) <= 1e-9 * np.maximum(np.abs(values), abs(target))


def _log_a_exp_b_plus_c(a: float, b: np.ndarray, c: float) -> np.ndarray:
    """``common.log_a_times_exp_b_plus_c(a, b, c) = log(a e^b + c)`` for a > 0, c < 0, elementwise.

    Raises:
        ValueError: ``a e^b + c ≤ 0`` somewhere (dp_accounting's ``_log_sub`` raises there too).
    """
    d = b + np.log(a)
    log_minus_c = np.log(-c)
    if np.any((log_minus_c >= d) & (b != 0.0)):
        raise ValueError(f"a must be greater than b in log(exp(a) - exp(b)): log(-c)={log_minus_c} >= some of {d}")
    with np.errstate(invalid="ignore", divide="ignore"):
        out = d + np.log1p(-np.exp(log_minus_c - d))
    return np.where(b == 0.0, np.log(a + c), out)


def _inverse_loss(loss: Any, eps: np.ndarray) -> np.ndarray:
    """``loss.inverse_privacy_loss(ε)`` elementwise for a ``GaussianPrivacyLoss`` (add or remove, 0 < q ≤ 1)."""
    from dp_accounting.pld.privacy_loss_mechanism import AdjacencyType

    sens, var, q = float(loss.sensitivity), float(loss._standard_deviation) ** 2, float(loss.sampling_prob)

    def remove_without_subsampling(pl: np.ndarray) -> np.ndarray:  # _inverse_privacy_loss_without_..._remove
        return -0.5 * sens - pl * var / sens

    if q == 1.0:
        plain = remove_without_subsampling(eps)
        return plain if loss.adjacency_type == AdjacencyType.REMOVE else sens + plain
    if loss.adjacency_type == AdjacencyType.REMOVE:
        boundary = math.log(1 - q)
        close = _isclose(eps, boundary)
        if np.any((eps <= boundary) & ~close):
            raise ValueError(f"privacy losses must exceed log(1 - sampling_prob) = {boundary}")
        unsampled = _log_a_exp_b_plus_c(1 / q, np.where(close, 1.0, eps), 1 - 1 / q)
        return np.where(close, math.inf, remove_without_subsampling(unsampled))
    if loss.adjacency_type != AdjacencyType.ADD:
        raise ValueError(f"adjacency type must be ADD or REMOVE, got {loss.adjacency_type}")
    boundary = -math.log(1 - q)
    close = _isclose(eps, boundary)
    if np.any((eps > boundary) & ~close):
        raise ValueError(f"privacy losses must not exceed -log(1 - sampling_prob) = {boundary}")
    unsampled = -_log_a_exp_b_plus_c(1 / q, np.where(close, -1.0, -eps), 1 - 1 / q)
    return np.where(close, -math.inf, sens + remove_without_subsampling(unsampled))


def _hockey_stick(loss: Any, eps: np.ndarray) -> np.ndarray:
    """``loss.get_delta_for_epsilon(eps)`` (``AdditiveNoisePrivacyLoss``), with the inverse loss on arrays."""
    from dp_accounting.pld.privacy_loss_mechanism import AdjacencyType

    q = float(loss.sampling_prob)
    deltas = np.zeros_like(eps, dtype=float)
    if q == 1.0:
        inverse = np.full(eps.shape, True)
    elif loss.adjacency_type == AdjacencyType.ADD:
        inverse = eps < -math.log1p(-q)  # the divergence is 0 above
    else:
        inverse = eps > math.log1p(-q)
        deltas[~inverse] = -np.expm1(eps[~inverse])
    x = _inverse_loss(loss, eps[inverse])
    with np.errstate(over="ignore"):
        deltas[inverse] = loss.mu_upper_cdf(x) - np.exp(eps[inverse] + loss.mu_lower_log_cdf(x))
    return np.clip(deltas, 0, 1)


def _connect_dots_pmf(loss: Any, discretization: float) -> Any:
    """dp_accounting's pessimistic connect-the-dots ``DensePLDPmf`` of one continuous monotone privacy loss.

    ``_create_pld_pmf_from_monotone_privacy_loss(..., use_connect_dots=True)`` followed by
    ``create_pmf_pessimistic_connect_dots_fixed_gap`` and ``to_dense_pmf``, on arrays.
    """
    from dp_accounting.pld import pld_pmf

    bounds = loss.connect_dots_bounds()
    lower = math.floor(bounds.epsilon_lower / discretization)
    upper = math.ceil(bounds.epsilon_upper / discretization)
    grid = np.arange(lower, upper + 1)
    deltas = _hockey_stick(loss, grid * discretization)
    _spot_check(loss, grid * discretization, deltas)
    if lower == upper:
        return pld_pmf.DensePLDPmf(discretization, lower, np.array([1 - deltas[0]]), deltas[0], True)
    if np.any(np.diff(deltas) > _DELTA_DIFF_TOLERANCE):
        raise ValueError(f"deltas are not in non-increasing order: deltas={deltas}.")
    deltas = np.minimum.accumulate(deltas)
    diffs = np.diff(deltas)
    probs = np.zeros_like(deltas)
    probs[0] = 1 - deltas[0] + diffs[0] / math.expm1(discretization)
    probs[1:-1] = (diffs[1:] - diffs[:-1] * math.exp(discretization)) / math.expm1(discretization)
    probs[-1] = diffs[-1] / math.expm1(-discretization)
    probs = np.maximum(0.0, probs)  # dp_accounting's rounding guard (masses of a few ulp below 0)
    probs.flags.writeable = False  # a step's PLD is shared (cached); read-only, so its bounds can be remembered
    return pld_pmf.DensePLDPmf(discretization, lower, probs, deltas[-1], True)


def _spot_check(loss: Any, eps: np.ndarray, deltas: np.ndarray) -> None:
    """A few of ``deltas`` against dp_accounting's own ``get_delta_for_epsilon`` (a Python loop over these only)."""
    index = np.unique(np.linspace(0, eps.size - 1, _SPOT_CHECKS).round().astype(int))
    reference = np.asarray(loss.get_delta_for_epsilon(eps[index]), dtype=np.float64)
    if not np.allclose(deltas[index], reference, rtol=1e-9, atol=1e-15):
        raise RuntimeError(
            f"the vectorised Gaussian PLD disagrees with dp_accounting's get_delta_for_epsilon at losses "
            f"{eps[index]!r}: {deltas[index]!r} vs {reference!r}; the installed dp_accounting changed its internals"
        )


def subsampled_gaussian_pld(sigma: float, sample_rate: float, discretization: float) -> Any:
    """One step of DP-SGD as dp_accounting builds it, in dense form: ``PrivacyLossDistribution(remove, add)``.

    Equal to ``from_gaussian_mechanism(standard_deviation=σ, sensitivity=1, pessimistic_estimate=True,
    value_discretization_interval=d, sampling_prob=q, use_connect_dots=True,
    neighboring_relation=ADD_OR_REMOVE_ONE)`` with both PMFs ``to_dense_pmf()`` (symmetric, remove only, at
    q = 1), to rounding.

    Args:
        sigma: Noise multiplier σ > 0.
        sample_rate: Poisson sampling rate q ∈ (0, 1].
        discretization: Privacy-loss grid interval d > 0.

    Returns:
        A ``dp_accounting.pld.privacy_loss_distribution.PrivacyLossDistribution`` of ``DensePLDPmf``.
    """
    from dp_accounting.pld import privacy_loss_distribution
    from dp_accounting.pld.privacy_loss_mechanism import AdjacencyType, GaussianPrivacyLoss

    if not (math.isfinite(sigma) and sigma > 0.0):
        raise ValueError(f"sigma must be a finite number > 0, got {sigma!r}")
    if not 0.0 < sample_rate <= 1.0:
        raise ValueError(f"sample_rate must be in (0, 1], got {sample_rate!r}")
    if not (math.isfinite(discretization) and discretization > 0.0):
        raise ValueError(f"discretization must be a finite number > 0, got {discretization!r}")

    def pmf(adjacency: Any) -> Any:
        loss = GaussianPrivacyLoss(float(sigma), sensitivity=1.0, pessimistic_estimate=True,
                                   log_mass_truncation_bound=_LOG_MASS_TRUNCATION,
                                   sampling_prob=float(sample_rate), adjacency_type=adjacency)
        return _connect_dots_pmf(loss, float(discretization))

    remove = pmf(AdjacencyType.REMOVE)
    if sample_rate == 1.0:
        return privacy_loss_distribution.PrivacyLossDistribution(remove)
    return privacy_loss_distribution.PrivacyLossDistribution(remove, pmf(AdjacencyType.ADD))


#: :func:`self_convolve_bounds` of read-only PMFs (a cached step PLD is sized, then composed: the same bounds twice),
#: by the array's identity; each entry holds the array, so the identity cannot be reused while it is remembered.
_BOUNDS_SEEN: OrderedDict[tuple[int, int, float], tuple[np.ndarray, tuple[int, int]]] = OrderedDict()
_BOUNDS_KEPT = 16


def self_convolve_bounds(probs: np.ndarray, num_times: int, tail_mass_truncation: float) -> tuple[int, int]:
    """``common.compute_self_convolve_bounds(probs, num_times, tail_mass_truncation)`` with its default orders.

    The Chernoff bound ``(num_times · log E[e^{tX}] + log(2/τ)) / t`` at ``t = ±1..20 / len(probs)`` (dp_accounting's
    supplementary material, eq. (5)); the log moment generating functions are one ``logsumexp`` over an
    (orders × grid) array, in chunks.

    Args:
        probs: Shape ``(n,)``, the PMF on grid indices ``0..n-1``.
        num_times: Number of self-convolutions ≥ 1.
        tail_mass_truncation: Mass the truncation may drop, ≥ 0.

    Returns:
        ``(lower, upper)``: grid indices of the ``num_times``-fold convolution outside which its mass is at most
        ``tail_mass_truncation``.
    """
    probs = np.asarray(probs, dtype=np.float64)
    if probs.flags.writeable:
        return _self_convolve_bounds(probs, num_times, tail_mass_truncation)
    key = (id(probs), int(num_times), float(tail_mass_truncation))
    seen = _BOUNDS_SEEN.get(key)
    if seen is not None and seen[0] is probs:
        _BOUNDS_SEEN.move_to_end(key)
        return seen[1]
    bounds = _self_convolve_bounds(probs, num_times, tail_mass_truncation)
    _BOUNDS_SEEN[key] = (probs, bounds)
    while len(_BOUNDS_SEEN) > _BOUNDS_KEPT:
        _BOUNDS_SEEN.popitem(last=False)
    return bounds


def _self_convolve_bounds(probs: np.ndarray, num_times: int, tail_mass_truncation: float) -> tuple[int, int]:
    """:func:`self_convolve_bounds`, evaluated."""
    n = probs.size
    upper, lower = (n - 1) * num_times, 0
    if tail_mass_truncation == 0:
        return lower, upper
    orders = _CHERNOFF_ORDERS / n
    # E[e^{tX}] at t = k/n is Σ_i p_i (e^{±i/n})^k: powers by repeated multiplication (|t·i| ≤ 20, so no overflow
    # and no max-shift), ≈ 8× faster than 40 exponentials per grid point; the sums agree with scipy's logsumexp to
    # a few ulp (a bound that then rounds to the neighbouring integer still holds: see the module docstring).
    index = np.arange(n, dtype=np.float64)
    log_mgfs = np.empty(orders.size)
    for sign in (1.0, -1.0):
        base = np.exp(sign * index / n)
        power = base.copy()
        for k in range(1, 21):  # _CHERNOFF_ORDERS is -20..-1, 1..20
            log_mgfs[19 + k if sign > 0 else 20 - k] = math.log(float(power @ probs))
            power *= base
    for order, log_mgf in zip(orders.tolist(), log_mgfs.tolist(), strict=True):
        bound = (num_times * log_mgf + math.log(2 / tail_mass_truncation)) / order
        if not math.isfinite(bound):
            continue
        if order > 0:
            upper = min(upper, math.ceil(bound))
        if order < 0:
            lower = max(lower, math.floor(bound))
    return lower, upper


def _pmfs(pld: Any) -> list[Any]:
    return [pld._pmf_remove] if pld._symmetric else [pld._pmf_remove, pld._pmf_add]


def composed_size(pld: Any, num_times: int, tail_mass_truncation: float) -> int:
    """Grid points of the larger direction of :func:`self_compose` ``(pld, num_times, ...)``, without composing."""
    size = 0
    for pmf in _pmfs(pld):
        probs = pmf.to_dense_pmf()._probs
        points = probs.size
        if num_times > 1:
            lo, hi = self_convolve_bounds(probs, num_times, tail_mass_truncation)
            points = max(hi - lo + 1, points)
        size = max(size, int(points))
    return size


def _self_compose_pmf(pmf: Any, num_times: int, tail_mass_truncation: float) -> Any:
    """``DensePLDPmf.self_compose`` (``common.self_convolve`` by FFT), with :func:`self_convolve_bounds`."""
    from dp_accounting.pld import pld_pmf

    dense = pmf.to_dense_pmf()
    probs = dense._probs
    lo, hi = self_convolve_bounds(probs, num_times, tail_mass_truncation)
    output_len = hi - lo + 1
    fast_len = fft.next_fast_len(max(output_len, len(probs)))
    convolved = np.real(fft.ifft(fft.fft(probs, fast_len) ** num_times))
    out = np.roll(convolved, -lo)[:output_len]
    infinity = tail_mass_truncation - math.expm1(num_times * math.log1p(-dense._infinity_mass))
    return pld_pmf.DensePLDPmf(dense._discretization, dense._lower_loss * num_times + lo, np.array(out), infinity,
                               dense._pessimistic_estimate)


def self_compose(pld: Any, num_times: int, tail_mass_truncation: float = 1e-15) -> Any:
    """``pld.self_compose(num_times, tail_mass_truncation)``: same arithmetic, faster bounds (for dense PMFs).

    Args:
        pld: A ``PrivacyLossDistribution`` (e.g. :func:`subsampled_gaussian_pld`); one with a sparse PMF is left to
            dp_accounting's ``self_compose``, which composes those differently.
        num_times: Number of compositions ≥ 1.
        tail_mass_truncation: dp_accounting's tail truncation (added to the infinity mass).

    Returns:
        The composed ``PrivacyLossDistribution``.
    """
    from dp_accounting.pld import pld_pmf, privacy_loss_distribution

    if not (isinstance(num_times, int) and num_times >= 1):
        raise ValueError(f"num_times must be an int >= 1, got {num_times!r}")
    if not all(isinstance(p, pld_pmf.DensePLDPmf) for p in _pmfs(pld)):  # sparse PMFs compose differently upstream
        return pld.self_compose(num_times, tail_mass_truncation=tail_mass_truncation)
    pmfs = [_self_compose_pmf(p, num_times, tail_mass_truncation) for p in _pmfs(pld)]
    return privacy_loss_distribution.PrivacyLossDistribution(*pmfs)


def _truncate_tails(probs: np.ndarray, tail_mass_truncation: float) -> tuple[int, np.ndarray, float]:
    """``pld_pmf._truncate_tails(probs, τ, pessimistic_estimate=True)``: its prefix sums by ``cumsum`` (same order).

    Drops the longest prefix and suffix of mass ≤ τ/2 each; the prefix's mass moves onto the first kept point (a
    larger loss: pessimistic), the suffix's is returned for the infinity mass.
    """
    if tail_mass_truncation == 0:
        return 0, probs, 0.0

    def prefix(values: np.ndarray) -> int:  # the longest prefix with a running sum ≤ τ/2
        over = np.flatnonzero(np.cumsum(values) > tail_mass_truncation / 2)
        return int(over[0]) if over.size else len(values)

    left = prefix(probs)
    right = max(len(probs) - prefix(probs[::-1]), left + 1)
    left_mass, right_mass = np.sum(probs[:left]), np.sum(probs[right:])
    kept = probs[left:right]
    kept[0] += left_mass
    return left, kept, float(right_mass)


def _compose_pmfs(first: Any, second: Any, tail_mass_truncation: float) -> Any:
    """``pld_pmf.compose_pmfs`` of two PMFs taking its dense path (``DensePLDPmf.compose``), tails by ``cumsum``."""
    from dp_accounting.pld import pld_pmf
    from scipy import signal

    first, second = first.to_dense_pmf(), second.to_dense_pmf()
    first.validate_composable(second)
    if not first._pessimistic_estimate:
        raise ValueError("only pessimistic PLDs are composed here")
    probs = signal.fftconvolve(first._probs, second._probs)
    infinity = first._infinity_mass + second._infinity_mass - first._infinity_mass * second._infinity_mass
    offset, probs, right_tail = _truncate_tails(probs, tail_mass_truncation)
    return pld_pmf.DensePLDPmf(first._discretization, first._lower_loss + second._lower_loss + offset, probs,
                               infinity + right_tail, True)


def compose(first: Any, second: Any, tail_mass_truncation: float = 1e-15) -> Any:
    """``first.compose(second, tail_mass_truncation)`` (``PrivacyLossDistribution``), its tail truncation on arrays.

    dp_accounting finds the truncated prefix and suffix of the composed PMF by a Python loop over the grid; here by
    ``cumsum`` (the same sequential sums). PLDs whose PMFs are all sparse and small (which dp_accounting composes
    exactly, point by point) and optimistic PLDs are left to dp_accounting.

    Args:
        first: A ``PrivacyLossDistribution``.
        second: Another, with the same discretisation.
        tail_mass_truncation: dp_accounting's tail truncation.

    Returns:
        The composed ``PrivacyLossDistribution``.
    """
    from dp_accounting.pld import pld_pmf, privacy_loss_distribution

    def upstream(a: Any, b: Any) -> bool:  # compose_pmfs's sparse path, or not pessimistic
        sparse = isinstance(a, pld_pmf.SparsePLDPmf) and isinstance(b, pld_pmf.SparsePLDPmf)
        return (sparse and a.size * b.size <= pld_pmf._MAX_PMF_SPARSE_SIZE) or not a._pessimistic_estimate

    if upstream(first._pmf_remove, second._pmf_remove) or upstream(first._pmf_add, second._pmf_add):
        return first.compose(second, tail_mass_truncation=tail_mass_truncation)
    remove = _compose_pmfs(first._pmf_remove, second._pmf_remove, tail_mass_truncation)
    if first._symmetric and second._symmetric:
        return privacy_loss_distribution.PrivacyLossDistribution(remove)
    add = _compose_pmfs(first._pmf_add, second._pmf_add, tail_mass_truncation)
    return privacy_loss_distribution.PrivacyLossDistribution(remove, add)

r"""Conversions between Rényi DP and (ε, δ)-DP.

We use the tight conversion of Canonne, Kamath & Steinke 2020 (Proposition 12 of arXiv:2004.00010v4; also
Asoodeh et al. 2020, eq. 20), the one Papernot & Steinke 2022 state as Lemma 14 and dp_accounting implements:
a (α, ε_R)-RDP mechanism is (ε, δ)-DP with

    δ = exp((α−1)(ε_R − ε)) / α · (1 − 1/α)^{α−1}
    ⇔  ε = ε_R + log(1 − 1/α) − (log δ + log α)/(α − 1).

Beware the sign typo in Papernot & Steinke's main text (see the notes): the exponent is (ε_R − ε).
For tiny ε_R we also use the KL bound δ ≤ sqrt(1 − e^{−KL}) (Pinsker-type; as dp_accounting does), with
KL ≤ ε_R(α) for any α > 1 because D_α is non-decreasing in α. For the same reason both conversions first replace
the curve by its running minimum from the right (:func:`~dphypo.privacy.rdp.monotone_envelope`): a bound at a
higher order holds at every lower one, so an ∞ or loose order never makes the result worse than a higher order's.

References (docs/references.md): Canonne, Kamath & Steinke 2020 arXiv:2004.00010v4; Asoodeh et al. 2020
arXiv:2008.06529 (version unverified); Papernot & Steinke 2022 arXiv:2110.03620v2.
"""

from __future__ import annotations

import math

import numpy as np

from dphypo.privacy.rdp import monotone_envelope
from dphypo.privacy.validation import check_delta, check_non_negative

__all__ = ["delta_from_rdp", "deltas_from_rdp", "epsilon_from_rdp"]

# The closed form is numerically unstable as α → 1 and never optimal there for δ ≪ 1 (dp_accounting uses the
# same cut-off).
_MIN_CONVERSION_ORDER = 1.01


def epsilon_from_rdp(
    orders: np.ndarray, epsilons: np.ndarray, delta: float, *, pure_epsilon: float | None = None
) -> tuple[float, float]:
    """The smallest ε such that the RDP curve implies (ε, δ)-DP, and the order that achieves it.

    Args:
        orders: Shape ``(m,)``, orders α > 1.
        epsilons: Shape ``(m,)``, RDP bounds ε_R(α) (``inf`` allowed).
        delta: Target δ ∈ (0, 1).
        pure_epsilon: A pure-DP bound (order ∞) if known; it is (ε, δ)-DP for every δ.

    Returns:
        ``(epsilon, order)``; order is ``inf`` when the pure bound wins. The curve is first replaced by its running
        minimum from the right (:func:`_envelope`), so the order returned may carry a higher order's bound.
    """
    check_delta(delta)
    a, r = _envelope(orders, epsilons)
    with np.errstate(invalid="ignore", over="ignore"):
        eps = r + np.log1p(-1.0 / a) - (math.log(delta) + np.log(a)) / (a - 1.0)
    eps = np.where((a > _MIN_CONVERSION_ORDER) & np.isfinite(r), eps, np.inf)
    # KL route: if sqrt(1 − e^{−KL}) ≤ δ the mechanism is (0, δ)-DP.
    eps = np.where(delta**2 + np.expm1(-r) > 0.0, 0.0, eps)
    i = int(np.argmin(eps))
    best, order = max(0.0, float(eps[i])), float(a[i])
    if pure_epsilon is not None and pure_epsilon < best:
        return float(pure_epsilon), math.inf
    return best, order


def delta_from_rdp(
    orders: np.ndarray, epsilons: np.ndarray, epsilon: float, *, pure_epsilon: float | None = None
) -> tuple[float, float]:
    """The smallest δ such that the RDP curve implies (ε, δ)-DP, and the order that achieves it.

    Args:
        orders: Shape ``(m,)``, orders α > 1.
        epsilons: Shape ``(m,)``, RDP bounds.
        epsilon: Target ε ≥ 0.
        pure_epsilon: A pure-DP bound if known: δ = 0 whenever ε ≥ pure_epsilon.

    Returns:
        ``(delta, order)``; the curve is first replaced by its running minimum from the right (:func:`_envelope`).
    """
    check_non_negative("epsilon", epsilon)
    if pure_epsilon is not None and epsilon >= pure_epsilon:
        return 0.0, math.inf
    a, r = _envelope(orders, epsilons)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        log_kl = 0.5 * np.log(-np.expm1(-r))  # δ ≤ sqrt(1 − e^{−KL})
        log_rdp = (a - 1.0) * (r - epsilon + np.log1p(-1.0 / a)) - np.log(a)
    log_delta = np.where(a > _MIN_CONVERSION_ORDER, np.minimum(log_kl, log_rdp), log_kl)
    log_delta = np.where(np.isnan(log_delta), np.inf, log_delta)
    i = int(np.argmin(log_delta))
    return float(min(1.0, math.exp(min(0.0, float(log_delta[i]))))), float(a[i])


def deltas_from_rdp(
    orders: np.ndarray, epsilons: np.ndarray, targets: np.ndarray, *, pure_epsilon: float | None = None
) -> np.ndarray:
    """:func:`delta_from_rdp`'s δ at each of several ε, bit for bit, as one array operation.

    Every step of :func:`delta_from_rdp` is elementwise in the orders for a given ε (the envelope does not depend on
    ε), so evaluating all ε at once as rows of an ``(k, m)`` array and taking each row's first minimum gives the
    same numbers (issue #30.6: Papernot-Steinke Theorem 6 with a PLD δ̂ asks one ε per order, a Python loop of 280
    conversions per accounting; tests/privacy/test_calibration_fast.py compares it with the loop).

    Args:
        orders: Shape ``(m,)``, orders α > 1.
        epsilons: Shape ``(m,)``, RDP bounds.
        targets: Shape ``(k,)``, ε ≥ 0.
        pure_epsilon: A pure-DP bound if known: δ = 0 wherever ε ≥ pure_epsilon.

    Returns:
        Shape ``(k,)``, ``delta_from_rdp(orders, epsilons, ε)[0]`` for each ε.
    """
    t = np.asarray(targets, dtype=np.float64).reshape(-1)
    if t.size and not np.all(t >= 0.0):
        raise ValueError(f"epsilon must be non-negative, got min {np.nanmin(t) if t.size else t!r}")
    a, r = _envelope(orders, epsilons)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        log_kl = 0.5 * np.log(-np.expm1(-r))
        log_rdp = (a - 1.0) * ((r - t[:, None]) + np.log1p(-1.0 / a)) - np.log(a)
    log_delta = np.where(a > _MIN_CONVERSION_ORDER, np.minimum(log_kl, log_rdp), log_kl)
    log_delta = np.where(np.isnan(log_delta), np.inf, log_delta)
    best = log_delta[np.arange(t.size), np.argmin(log_delta, axis=1)] if a.size else np.full(t.size, np.inf)
    out = np.array([min(1.0, math.exp(min(0.0, float(v)))) for v in best], dtype=np.float64)
    if pure_epsilon is not None:
        out[t >= pure_epsilon] = 0.0
    return out


def _envelope(orders: np.ndarray, epsilons: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(orders, ε̃)`` as float64 arrays, ε̃ the running minimum from the right over increasing orders.

    Args:
        orders: Shape ``(m,)``, orders α > 1 in any order.
        epsilons: Shape ``(m,)``, RDP bounds at those orders (NaN read as ∞).

    Returns:
        The orders as given and the enveloped bounds, both shape ``(m,)``.
    """
    a = np.asarray(orders, dtype=np.float64).reshape(-1)
    r = np.asarray(epsilons, dtype=np.float64).reshape(-1)
    if a.shape != r.shape:
        raise ValueError(f"orders and epsilons must have the same length, got {a.size} and {r.size}")
    rank = np.argsort(a, kind="stable")
    out = np.empty_like(r)
    out[rank] = monotone_envelope(r[rank])
    return a, out

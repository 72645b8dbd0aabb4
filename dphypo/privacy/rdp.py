r"""Rényi-DP curves of base mechanisms (one candidate run) on a dense grid of orders.

An :class:`RdpCurve` holds upper bounds ε(α) on the Rényi divergence of order α between a mechanism's outputs on
neighbouring datasets (both directions: the tuning theorems use D_α(Q‖Q') and D_α̂(Q'‖Q), Papernot & Steinke
2022, proof of Theorem 2), optionally with a pure ε-DP bound (order ∞), and the ``dp_accounting`` ``DpEvent`` of
the mechanism it bounds (:mod:`dphypo.privacy.events`), kept through composition so that a privacy profile is only
ever used next to a curve of the same mechanism.

The DP-SGD curve is *not* re-derived here: it is Google's ``dp_accounting`` RDP accountant (Mironov, Talwar &
Zhang 2019, Poisson-subsampled Gaussian), which is pure numpy/scipy (Opacus's copy of the same analysis imports
torch), its per-order Python loops transcribed onto arrays (:func:`poisson_gaussian_rdp`, the same sums in the same
order, and spot-checked against dp_accounting on every curve). At integer orders it and Opacus agree to 1e-12. At
fractional orders dp_accounting 0.6 sums the *absolute values* of the binomial series (Opacus keeps the signs), so
its bound is valid but up to ~20 % larger at α ≈ 1 (far more at large σ) and can fail to converge (→ ∞, "no bound at
this order") for large sampling rates (q = 0.2 at orders 1.002–1.7 for σ ≲ 2.3; q = 0.5 at orders 1.001–2.6 for
every σ ≤ 100). A Rényi divergence is non-decreasing in the order, so a bound at a higher order also bounds every
lower one: :func:`dpsgd_rdp` returns the running minimum from the right of dp_accounting's per-step values
(:func:`monotone_envelope`), which replaces every ∞ and every loose fractional value by the best bound at a higher
order. The effect on a search's total ε is ~1e-4 in the paper's MNIST setting (tests/privacy/test_rdp.py); it is
what lets a candidate at q = 0.5 be dominated at all (docs/proofs/heterogeneous.md §5).

References (docs/references.md): Mironov 2017 arXiv:1702.07476; Mironov, Talwar & Zhang 2019 arXiv:1908.10530;
Bun & Steinke 2016 arXiv:1605.02065; van Erven & Harremoës 2014 arXiv:1206.2459 (versions unverified); Papernot &
Steinke 2022 arXiv:2110.03620v2.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from dphypo.privacy.validation import (
    check_int_at_least,
    check_non_negative,
    check_positive,
    check_positive_int,
    check_probability,
)

if TYPE_CHECKING:  # dp_accounting is imported on first use (it costs ~0.3 s): see dphypo.privacy.events
    from dp_accounting.dp_event import DpEvent

__all__ = [
    "DEFAULT_ORDERS",
    "MIN_DPSGD_SIGMA",
    "RdpCurve",
    "check_dpsgd",
    "compose",
    "custom_rdp",
    "dpsgd_rdp",
    "gaussian_rdp",
    "monotone_envelope",
    "nonnegative_bound",
    "pure_dp_rdp",
    "zero_rdp",
]


def _default_orders() -> np.ndarray:
    """Dense orders in (1, 1024]: fractional near 1 (where α̂ and small-ε conversions live), then integers.

    Near 1 the tuning constant's α̂-minimiser and the ``log E[T]/(α−1)`` term vary fastest; above 64 a ~25 %
    geometric step is enough because ε(α) is smooth and the conversion term is flat there.
    """
    near_one = [1.001, 1.002, 1.005, *np.round(np.arange(1.01, 1.1, 0.01), 2)]
    fractional = np.round(np.arange(1.1, 11.0, 0.05), 2)
    integers = np.arange(11, 64)
    large = [64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512, 640, 768, 896, 1024]
    orders = np.unique(np.concatenate([near_one, fractional, integers, large]).astype(np.float64))
    orders.flags.writeable = False
    return orders


#: The default order grid: 280 orders from 1.001 to 1024.
DEFAULT_ORDERS: np.ndarray = _default_orders()


def monotone_envelope(epsilons: np.ndarray) -> np.ndarray:
    r"""Running minimum from the right: ``ε̃_j = min_{k ≥ j} ε_k`` (NaN read as ∞, "no bound at this order").

    For RDP bounds on strictly increasing orders, ε̃ is again a valid bound at every order, never above ε: the
    Rényi divergence D_α is non-decreasing in α (van Erven & Harremoës 2014, Theorem 3), so
    D_{α_j} ≤ D_{α_k} ≤ ε_k for every k ≥ j (docs/proofs/heterogeneous.md §5). It is non-decreasing, finite
    wherever some higher order is, and equal to ε wherever ε is already non-decreasing.

    Args:
        epsilons: Shape ``(m,)``, bounds at strictly increasing orders (``inf``/NaN allowed).

    Returns:
        Shape ``(m,)``, a new float64 array.
    """
    eps = np.asarray(epsilons, dtype=np.float64).reshape(-1)
    eps = np.where(np.isnan(eps), np.inf, eps)
    if eps.size == 0:
        return eps
    return np.minimum.accumulate(eps[::-1])[::-1].copy()


@dataclass(frozen=True, eq=False)
class RdpCurve:
    """Upper bounds ε(α) on the Rényi divergence of one mechanism, per order α > 1.

    Args:
        orders: Shape ``(m,)``, strictly increasing orders α > 1.
        epsilons: Shape ``(m,)``, non-negative bounds (``inf`` allowed: "no bound at this order").
        pure_epsilon: ε if the mechanism is also ε-DP (the order-∞ bound), else ``None``.
        label: Human-readable description, kept through composition.
        event: The ``dp_accounting`` ``DpEvent`` of the mechanism this curve bounds, exactly
            (:mod:`dphypo.privacy.events`; stored in canonical form), kept through composition and repetition;
            ``None`` when unknown. :func:`~dphypo.privacy.accountant.account` uses it to refuse a privacy profile
            of another mechanism.
    """

    orders: np.ndarray
    epsilons: np.ndarray
    pure_epsilon: float | None = None
    label: str = field(default="custom")
    event: DpEvent | None = None

    def __post_init__(self) -> None:
        orders = np.array(self.orders, dtype=np.float64).reshape(-1)
        eps = np.array(self.epsilons, dtype=np.float64).reshape(-1)
        if orders.size == 0:
            raise ValueError("orders must not be empty")
        if orders.shape != eps.shape:
            raise ValueError(
                f"orders and epsilons must have the same length, got {orders.size} and {eps.size}"
            )
        if not np.all(np.isfinite(orders)) or np.any(orders <= 1.0):
            raise ValueError(f"orders must be finite and > 1, got min {orders.min()!r}")
        if np.any(np.diff(orders) <= 0):
            raise ValueError("orders must be strictly increasing")
        if np.any(np.isnan(eps)) or np.any(eps < 0):
            raise ValueError("epsilons must be non-negative (inf allowed), got a negative or NaN value")
        check_non_negative("pure_epsilon", self.pure_epsilon, optional=True)
        orders.flags.writeable = False
        eps.flags.writeable = False
        object.__setattr__(self, "orders", orders)
        object.__setattr__(self, "epsilons", eps)
        if self.event is not None:
            from dphypo.privacy.events import check_event

            object.__setattr__(self, "event", check_event(self.event))

    def __add__(self, other: RdpCurve) -> RdpCurve:
        """Sequential composition: RDP adds at equal orders (Mironov 2017, Proposition 1)."""
        return compose(self, other)

    def repeated(self, count: int) -> RdpCurve:
        """``count``-fold adaptive composition of this mechanism with itself."""
        check_positive_int("count", count)
        pure = None if self.pure_epsilon is None else count * self.pure_epsilon
        event = None
        if self.event is not None:
            from dphypo.privacy.events import repeat_event

            event = repeat_event(self.event, int(count))  # SelfComposedDpEvent(event, count)
        return RdpCurve(self.orders, count * self.epsilons, pure, f"{count} x ({self.label})", event)

    def monotone(self) -> RdpCurve:
        """The envelope ``ε̃(α) = min_{α' ≥ α} ε(α')`` (:func:`monotone_envelope`), also capped by the pure ε.

        Also a valid bound because D_α is non-decreasing in α (van Erven & Harremoës 2014, Theorem 3; Papernot &
        Steinke 2022, Remark 5). Idempotent; never above this curve at any order.
        """
        env = monotone_envelope(self.epsilons)
        if self.pure_epsilon is not None:
            env = np.minimum(env, self.pure_epsilon)
        return RdpCurve(self.orders, env, self.pure_epsilon, self.label, self.event)

    def describe(self) -> dict[str, Any]:
        """An exact, JSON-ready identity of the curve: what a journal seals (never a repr with an address).

        Returns:
            ``{"label", "event", "sha256"}``: the event's exact description
            (:func:`~dphypo.privacy.events.event_description`, ``None`` if unknown) and the SHA-256 of the orders,
            the bounds and the pure ε (float64 bytes, each preceded by its length; no pure ε hashes as NaN).
        """
        digest = hashlib.sha256()
        pure = np.array([np.nan if self.pure_epsilon is None else self.pure_epsilon])
        for values in (self.orders, self.epsilons, pure):
            digest.update(str(values.size).encode())
            digest.update(np.ascontiguousarray(values, dtype=np.float64).tobytes())
        event = None
        if self.event is not None:
            from dphypo.privacy.events import event_description

            event = event_description(self.event)
        return {"label": self.label, "event": event, "sha256": digest.hexdigest()}

    def __repr__(self) -> str:
        return (
            f"RdpCurve({self.label!r}, {self.orders.size} orders in [{self.orders[0]:g}, {self.orders[-1]:g}]"
            + ("" if self.pure_epsilon is None else f", pure_epsilon={self.pure_epsilon:g}")
            + ")"
        )


def _as_orders(orders: Iterable[float] | None) -> np.ndarray:
    return DEFAULT_ORDERS if orders is None else np.asarray(list(orders), dtype=np.float64)


def compose(*curves: RdpCurve) -> RdpCurve:
    """Sequential composition of mechanisms on the same order grid (RDP adds; pure ε adds when all are pure).

    The event is the canonical ``ComposedDpEvent`` of the parts' events, in order (unknown if any part's is), so
    composing in another grouping gives an equal event (:func:`~dphypo.privacy.events.compose_events`).
    """
    if not curves:
        raise ValueError("compose needs at least one curve")
    first = curves[0]
    for curve in curves[1:]:
        if curve.orders.shape != first.orders.shape or not np.array_equal(curve.orders, first.orders):
            raise ValueError("curves must share the same orders to be composed; build them on one order grid")
    eps = np.sum([c.epsilons for c in curves], axis=0)
    pures = [c.pure_epsilon for c in curves]
    pure = None if any(p is None for p in pures) else float(sum(pures))  # type: ignore[arg-type]
    event = None
    if all(c.event is not None for c in curves):
        from dphypo.privacy.events import compose_events

        event = compose_events(*(c.event for c in curves))  # ComposedDpEvent([...]), flattened, in order
    return RdpCurve(first.orders, eps, pure, " + ".join(c.label for c in curves), event)


def zero_rdp(orders: Iterable[float] | None = None) -> RdpCurve:
    """The curve of a mechanism that does not look at the data (ε(α) = 0); the σ → ∞ limit of any mechanism.

    Its event is ``NoOpDpEvent()``, which composition drops (composing with it leaves an event unchanged).
    """
    from dp_accounting import dp_event

    o = _as_orders(orders)
    return RdpCurve(o, np.zeros_like(o), 0.0, "data-independent", dp_event.NoOpDpEvent())


def gaussian_rdp(
    sigma: float, *, sensitivity: float = 1.0, count: int = 1, orders: Iterable[float] | None = None
) -> RdpCurve:
    """Gaussian mechanism: ``ε(α) = count · α Δ² / (2σ²)`` (Mironov 2017, Proposition 7).

    Args:
        sigma: Standard deviation of the added noise, > 0.
        sensitivity: L2 sensitivity Δ > 0 of the released statistic.
        count: Number of adaptive releases composed.
        orders: Order grid (default :data:`DEFAULT_ORDERS`).

    Returns:
        The curve; its event is ``GaussianDpEvent(σ/Δ)`` (dp_accounting's noise multiplier is the std relative to
        the sensitivity, :func:`~dphypo.privacy.events.gaussian_event`), self-composed ``count`` times.
    """
    from dphypo.privacy.events import gaussian_event, repeat_event

    check_positive("sigma", sigma)
    check_positive("sensitivity", sensitivity)
    check_positive_int("count", count)
    o = _as_orders(orders)
    eps = count * o * sensitivity**2 / (2.0 * sigma**2)
    event = repeat_event(gaussian_event(float(sigma), float(sensitivity)), int(count))
    return RdpCurve(o, eps, None, f"Gaussian(sigma={sigma:g}, sensitivity={sensitivity:g}, count={count})", event)


def pure_dp_rdp(epsilon: float, *, orders: Iterable[float] | None = None) -> RdpCurve:
    """An ε-DP mechanism: ``ε(α) = min(ε, α ε²/2)`` and ``pure_epsilon = ε``.

    D_α ≤ D_∞ ≤ ε for every α, and ε-DP implies (ε²/2)-zCDP, i.e. D_α ≤ α ε²/2 (Bun & Steinke 2016,
    Proposition 3.3). Its event is :class:`~dphypo.privacy.events.PureDpEvent` (dp_accounting has no event for an
    unspecified ε-DP mechanism).
    """
    from dphypo.privacy.events import PureDpEvent

    check_non_negative("epsilon", epsilon)
    o = _as_orders(orders)
    return RdpCurve(o, np.minimum(epsilon, o * epsilon**2 / 2.0), float(epsilon), f"pure {epsilon:g}-DP",
                    PureDpEvent(float(epsilon)))


def custom_rdp(
    orders: Iterable[float], epsilons: Iterable[float], *, pure_epsilon: float | None = None,
    event: DpEvent | None = None,
) -> RdpCurve:
    """A user-supplied curve: any valid RDP upper bounds on any order grid (validated, not trusted blindly).

    Args:
        orders: Orders α > 1, strictly increasing.
        epsilons: RDP bounds ≥ 0 at those orders.
        pure_epsilon: A pure-DP bound, if known.
        event: The ``dp_accounting`` ``DpEvent`` of the mechanism, if known (e.g. ``GaussianDpEvent(2.0)``); a
            privacy profile is only used next to a curve with an equal event.
    """
    return RdpCurve(np.asarray(list(orders)), np.asarray(list(epsilons)), pure_epsilon, "user-supplied", event)


#: Smallest noise multiplier :func:`dpsgd_rdp` accepts. At σ = 1e-100 the RDP of one step is ≈ α·5·10¹⁹⁹ (every ε is
#: astronomically large but finite); much below it dp_accounting's RDP series overflows to inf/NaN and, once σ²
#: underflows to 0, raises ZeroDivisionError.
MIN_DPSGD_SIGMA = 1e-100


def check_dpsgd(sigma: float, sample_rate: float, steps: int) -> None:
    """Refuse DP-SGD arguments no accountant can take (the checks of :func:`dpsgd_rdp` and the DP-SGD profiles).

    Args:
        sigma: Noise multiplier, a finite number ≥ :data:`MIN_DPSGD_SIGMA`.
        sample_rate: Poisson sampling rate in (0, 1].
        steps: Number of noisy gradient steps, an integer ≥ 1.

    Raises:
        ValueError: The first argument out of range, named, with its value.
    """
    check_positive("sigma", sigma)
    if sigma < MIN_DPSGD_SIGMA:
        raise ValueError(
            f"sigma must be >= {MIN_DPSGD_SIGMA:g}: below it every bound exceeds epsilon = 1e200 per step and "
            f"dp_accounting's RDP overflows (sigma**2 underflows near 1e-162), got {sigma!r}"
        )
    check_probability("sample_rate", sample_rate, allow_one=True)
    check_int_at_least("steps", steps, 1)


def dpsgd_rdp(
    sigma: float, sample_rate: float, steps: int, *, orders: Iterable[float] | None = None
) -> RdpCurve:
    """DP-SGD: ``steps`` compositions of the Poisson-subsampled Gaussian mechanism.

    Computed as ``dp_accounting``'s RDP accountant computes it (:func:`poisson_gaussian_rdp`; Mironov, Talwar &
    Zhang 2019, "Rényi Differential Privacy of the Sampled Gaussian Mechanism", add/remove-one neighbours), then
    replaced by its running minimum from the right over the grid (:func:`monotone_envelope`: dp_accounting's
    fractional orders can be ∞ or loose, and any higher
    order's bound holds at a lower one); the per-step curve is cached per (σ, q, orders) because RDP composes
    linearly in the number of steps.

    Args:
        sigma: Noise multiplier σ ≥ :data:`MIN_DPSGD_SIGMA` (noise std / clipping norm).
        sample_rate: Poisson sampling rate q ∈ (0, 1].
        steps: Number of noisy gradient steps ≥ 1.
        orders: Order grid (default :data:`DEFAULT_ORDERS`).

    Returns:
        The curve of one DP-SGD training run; its event is ``SelfComposedDpEvent(PoissonSampledDpEvent(q,
        GaussianDpEvent(σ)), steps)`` (:func:`~dphypo.privacy.events.dpsgd_event`).
    """
    from dphypo.privacy.events import dpsgd_event

    check_dpsgd(sigma, sample_rate, steps)
    o = _as_orders(orders)
    per_step = _poisson_gaussian_per_step(float(sigma), float(sample_rate), tuple(o.tolist()))
    return RdpCurve(
        o, steps * per_step, None, f"DP-SGD(sigma={sigma:g}, q={sample_rate:g}, steps={int(steps)})",
        dpsgd_event(float(sigma), float(sample_rate), int(steps))
    )


@lru_cache(maxsize=512)
def _poisson_gaussian_per_step(sigma: float, sample_rate: float, orders: tuple[float, ...]) -> np.ndarray:
    eps = poisson_gaussian_rdp(sample_rate, sigma, np.asarray(orders, dtype=np.float64))
    _spot_check_rdp(sample_rate, sigma, orders, eps)
    eps = np.where(np.isnan(eps), np.inf, np.maximum(eps, 0.0))  # overflow at huge orders means "no bound"
    eps = monotone_envelope(eps)  # orders are strictly increasing (RdpCurve refuses any other grid)
    eps.flags.writeable = False
    return eps


# --- dp_accounting's RDP of the Poisson-subsampled Gaussian, on arrays ------------------------------------------------
# dp_accounting 0.6 (rdp_privacy_accountant._compute_rdp_poisson_subsampled_gaussian) evaluates log A_α order by order
# in Python loops (≈ 1 ms per order, a 280-order curve ≈ 0.3 s). The functions below are the same sums, term for term
# and in the same order (np.logaddexp is dp_accounting's _log_add formula), on arrays: bitwise equal to dp_accounting on
# every (σ, q) tried, and tested to 1e-12 (tests/privacy/test_rdp_vectorized.py), including the ∞ of a fractional
# series that does not converge in _MAX_STEPS_LOG_A_FRAC terms. Two orders of every curve are re-evaluated by
# dp_accounting itself.

#: dp_accounting's _MAX_STEPS_LOG_A_FRAC: a fractional series not converged after this many terms is ∞.
_MAX_FRAC_TERMS = 1000
#: Terms of the fractional series evaluated first (every order converges within it at ordinary (σ, q)).
_FIRST_FRAC_TERMS = 128


def _log_comb(n: np.ndarray, k: np.ndarray) -> np.ndarray:
    """dp_accounting's ``_log_comb``: log |binomial(n, k)| through ``gammaln`` (real n, integer k)."""
    from scipy import special

    return special.gammaln(n + 1) - special.gammaln(k + 1) - special.gammaln(n - k + 1)


def _log_a_int(q: float, sigma: float, alphas: np.ndarray) -> np.ndarray:
    """``_compute_log_a_int(q, σ, α)``, integer α, 0 < q < 1: ``log Σ_{i≤α} C(α,i) qⁱ(1−q)^{α−i} e^{(i²−i)/2σ²}``.

    Mironov, Talwar & Zhang 2019, Sec. 3.3. All (α, i) terms in one array, summed in log space per order.

    Args:
        q: Sampling rate in (0, 1).
        sigma: Noise multiplier.
        alphas: Shape ``(k,)``, integer-valued orders ≥ 1.

    Returns:
        Shape ``(k,)``.
    """
    order = np.asarray(alphas, dtype=np.float64).astype(np.int64)
    counts = order + 1
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    alpha = np.repeat(order, counts).astype(np.float64)
    i = (np.arange(alpha.size) - np.repeat(starts, counts)).astype(np.float64)
    terms = _log_comb(alpha, i) + i * math.log(q) + (alpha - i) * math.log1p(-q) + (i * i - i) / (2 * (sigma**2))
    # dp_accounting's running _log_add, term by term in the same order (logaddexp is the same formula), per order.
    return np.logaddexp.reduceat(terms, starts)


def _log_a_frac_terms(q: float, sigma: float, alphas: np.ndarray, terms: int) -> tuple[np.ndarray, np.ndarray]:
    """``_compute_log_a_frac`` with at most ``terms`` terms: ``(log A_α, converged)``, shape ``(k,)`` each.

    The two series over i (the integrals over (−∞, z₀] and [z₀, ∞)) as (orders × terms) arrays, their running
    log-sums by ``logaddexp.accumulate``, and dp_accounting's stopping rule: the first i where both terms decrease
    and the larger is below the running total − 30 (a row that never stops is ∞).
    """
    from scipy import special

    alpha = alphas[:, None]
    i = np.arange(terms, dtype=np.float64)[None, :]
    log_coef = _log_comb(alpha, i)
    j = alpha - i
    z0 = sigma**2 * math.log(1 / q - 1) + 0.5
    log_q, log_1mq = math.log(q), math.log1p(-q)
    scale = math.sqrt(2) * sigma

    def log_half_erfc(x: np.ndarray) -> np.ndarray:  # log(0.5) + _log_erfc(x), _log_erfc = log 2 + log Φ(−x√2)
        return math.log(0.5) + (math.log(2) + special.log_ndtr(-x * 2**0.5))

    s0 = log_coef + i * log_q + j * log_1mq + (i * i - i) / (2 * (sigma**2)) + log_half_erfc((i - z0) / scale)
    s1 = log_coef + j * log_q + i * log_1mq + (j * j - j) / (2 * (sigma**2)) + log_half_erfc((z0 - j) / scale)
    total = np.logaddexp(np.logaddexp.accumulate(s0, axis=1), np.logaddexp.accumulate(s1, axis=1))
    start = np.full((alphas.size, 1), -np.inf)
    last0, last1 = np.concatenate([start, s0[:, :-1]], axis=1), np.concatenate([start, s1[:, :-1]], axis=1)
    stop = (s0 < last0) & (s1 < last1) & (np.maximum(s0, s1) < total - 30)
    first = np.argmax(stop, axis=1)
    rows = np.arange(alphas.size)
    converged = stop[rows, first]
    return np.where(converged, total[rows, first], np.inf), converged


def poisson_gaussian_rdp(sample_rate: float, sigma: float, orders: np.ndarray) -> np.ndarray:
    """dp_accounting's ``_compute_rdp_poisson_subsampled_gaussian(q, σ, orders)`` (one step, add/remove), on arrays.

    ``log A_α / (α − 1)`` (Mironov, Talwar & Zhang 2019): integer orders by the finite binomial sum, fractional
    ones by the two-sided series of their Sec. 3.3 (∞ where it does not converge), ``α / (2σ²)`` at q = 1.

    Args:
        sample_rate: Poisson sampling rate q ∈ (0, 1].
        sigma: Noise multiplier σ > 0.
        orders: Shape ``(K,)``, orders > 1.

    Returns:
        Shape ``(K,)``, per-step RDP (∞ or NaN where dp_accounting's is: no bound at that order).
    """
    orders = np.asarray(orders, dtype=np.float64)
    if sample_rate == 1.0:
        return orders / (2 * sigma**2)
    integer = orders == np.floor(orders)
    out = np.empty_like(orders)
    with np.errstate(all="ignore"):  # overflow at tiny σ / huge orders: inf or NaN, read as "no bound" by the caller
        if np.any(integer):
            out[integer] = _log_a_int(sample_rate, sigma, orders[integer]) / (orders[integer] - 1)
        frac = orders[~integer]
        if frac.size:
            log_a, converged = _log_a_frac_terms(sample_rate, sigma, frac, min(_FIRST_FRAC_TERMS, _MAX_FRAC_TERMS))
            if not np.all(converged):
                log_a[~converged], _ = _log_a_frac_terms(sample_rate, sigma, frac[~converged], _MAX_FRAC_TERMS)
            out[~integer] = log_a / (frac - 1)
    return out


def _spot_check_rdp(sample_rate: float, sigma: float, orders: tuple[float, ...], eps: np.ndarray) -> None:
    """The curve at its first order and its largest order ≤ 64 against dp_accounting's own scalar evaluation."""
    from dp_accounting.rdp import rdp_privacy_accountant

    grid = np.asarray(orders)
    picks = sorted({0, int(np.flatnonzero(grid <= 64)[-1]) if np.any(grid <= 64) else 0})
    absl_logger = logging.getLogger("absl")
    level = absl_logger.level
    # A non-converging fractional order is returned as inf ("no bound there") with a warning per order; the
    # envelope replaces it by a higher order's bound, so the warnings are noise for our users.
    absl_logger.setLevel(logging.ERROR)
    try:
        with np.errstate(all="ignore"):
            reference = rdp_privacy_accountant._compute_rdp_poisson_subsampled_gaussian(
                sample_rate, sigma, [orders[k] for k in picks])
    finally:
        absl_logger.setLevel(level)
    ours = eps[picks]
    both_finite = np.isfinite(ours) & np.isfinite(reference)
    same = np.where(both_finite, np.abs(ours - reference) <= 1e-9 * np.abs(reference) + 1e-15,
                    ~np.isfinite(ours) & ~np.isfinite(reference))
    if not np.all(same):
        checked = [orders[k] for k in picks]
        raise RuntimeError(
            f"the vectorised subsampled-Gaussian RDP disagrees with dp_accounting at orders {checked}"
            f" (sigma={sigma!r}, q={sample_rate!r}): {ours!r} vs {reference!r}; dp_accounting changed its internals"
        )


#: Rounding slack below zero that :func:`nonnegative_bound` still reads as 0 (float noise of a log-sum-exp).
NEGATIVE_ROUNDING = 1e-9


def nonnegative_bound(epsilons: np.ndarray, source: str) -> np.ndarray:
    """A theorem's RDP values, checked to be ≥ 0 (a Rényi divergence is never negative).

    Values in ``[-NEGATIVE_ROUNDING, 0)`` are float rounding and become 0. Anything more negative means the
    theorem was applied outside its scope (e.g. Papernot-Steinke Theorem 6 with E[T] < 1): clamping it to 0 would
    print ε = 0 for a mechanism that leaks, so it raises instead. NaN ("no bound at this order") becomes ∞.

    Args:
        epsilons: Shape ``(n,)`` RDP values from a theorem.
        source: The theorem's name, for the error message.

    Returns:
        Shape ``(n,)`` values, all ≥ 0 or ∞.

    Raises:
        ValueError: A value below ``-NEGATIVE_ROUNDING``.
    """
    eps = np.asarray(epsilons, dtype=np.float64)
    worst = np.nanmin(eps) if np.any(~np.isnan(eps)) else 0.0
    if worst < -NEGATIVE_ROUNDING:
        raise ValueError(
            f"{source} gave a negative RDP bound ({worst:.6g}): the theorem is applied outside its scope, "
            "refusing to report it as 0"
        )
    return np.where(np.isnan(eps), np.inf, np.maximum(eps, 0.0))

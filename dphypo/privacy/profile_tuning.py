r"""Privacy-profile (hockey-stick) bounds for a *uniform* search (Koskela, Redberg & Wang 2024, "KRW").

**Scope (enforced).** KRW Theorem 4.1 and its corollaries assume the K runs are i.i.d. draws of one fixed base
mechanism Q (random search from a fixed prior; Papernot & Steinke 2022's setting), K independent of the data,
only the best run released: in dphypo, C = c = 1. With C > c the sampling density depends on earlier private
outputs, the runs are not i.i.d., the PGF identity behind Thm 4.1 fails, and KRW's conclusions name Bayesian
optimisation (DP-HyPO) as outside their results. Every bound here raises :class:`ProfileScopeError` for C > c.

All bounds are KRW Thm 4.1 with f(z) = [z − e^ε]_+ and φ' ≤ φ'(1) = m = E[K]:

    H_{e^ε}(A‖A′) ≤ m · δ_Q(ε − ε₂(ε₁))    for every admissible ε₁ ≥ 0,

so for a target δ, ``ε_A(δ) = ε_Q(δ/m) + min_{ε₁} ε₂(ε₁)``: the selection overhead ε₂* does not depend on ε
(KRW Corollary 6.2 with optimal thresholds). Methods (the keys of :func:`profile_epsilons`):

* ``"profile-tnb"``: K ~ TNB(η, γ) (η = our θ), KRW **Theorem 5.2**,
  ε₂ = (η+1)·log(e^{ε₁} + ((1−γ)/γ)·δ_Q(ε₁)).
* ``"profile-poisson"``: K ~ Poisson(m), KRW **Corollary 5.8**, ε₂ = m(e^{ε₁} − 1) + m·δ_Q(ε₁).
* ``"profile-binomial"``: K ~ Bin(n, p), KRW **Theorem 5.7**,
  ε₂ = (n−1)·log(1 + p(e^{ε₁} − 1) + p·δ_Q(ε₁)) for ε₁ ≥ log(1 + p·δ_Q(ε₁)/(1−p)).
* ``"rdp-poisson-pld"``: Papernot & Steinke 2022 **Theorem 6** (RDP, Poisson K) with δ̂ from the profile
  (the theorem only needs Q to be (ε̂, δ̂)-DP; KRW notes §5.4: it can beat ``profile-poisson``).

All (ε, δ) statements at the same δ hold simultaneously, so reporting the **minimum** over the applicable
methods and the RDP accountant is sound. δ_Q must upper-bound the symmetric profile of one *whole* candidate
run (every DP-SGD step plus any private score release) for every candidate the prior can draw.

References (docs/references.md): Koskela, Redberg & Wang 2024 arXiv:2402.06701 (version unverified); Papernot &
Steinke 2022 arXiv:2110.03620v2.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import optimize

from dphypo.privacy.conversion import deltas_from_rdp, epsilon_from_rdp
from dphypo.privacy.errors import DphypoError
from dphypo.privacy.profiles import DEFAULT_DISCRETIZATION, PrivacyProfile, dpsgd_profile
from dphypo.privacy.rdp import RdpCurve, dpsgd_rdp, nonnegative_bound
from dphypo.privacy.run_counts import Binomial, Poisson, TruncatedNegativeBinomial
from dphypo.privacy.spec import RepeatAndSelect
from dphypo.privacy.validation import check_delta, check_non_negative

__all__ = [
    "METHOD_BINOMIAL",
    "METHOD_POISSON",
    "METHOD_POISSON_RDP_PLD",
    "METHOD_TNB",
    "PROFILE_METHODS",
    "ProfileBound",
    "ProfileScopeError",
    "applicable_methods",
    "binomial_profile_bound",
    "is_applicable",
    "poisson_profile_bound",
    "poisson_rdp_with_profile_bound",
    "profile_bound",
    "profile_bounds",
    "profile_epsilons",
    "scope_error",
    "selection_delta",
    "tnb_profile_bound",
]

METHOD_TNB = "profile-tnb"
METHOD_POISSON = "profile-poisson"
METHOD_BINOMIAL = "profile-binomial"
METHOD_POISSON_RDP_PLD = "rdp-poisson-pld"
#: Every method of this module, in report order.
PROFILE_METHODS = (METHOD_TNB, METHOD_POISSON, METHOD_BINOMIAL, METHOD_POISSON_RDP_PLD)

_THEOREMS = {
    METHOD_TNB: "Koskela-Redberg-Wang 2024 Theorem 5.2 (privacy profile, TNB T)",
    METHOD_POISSON: "Koskela-Redberg-Wang 2024 Corollary 5.8 (privacy profile, Poisson T)",
    METHOD_BINOMIAL: "Koskela-Redberg-Wang 2024 Theorem 5.7 (privacy profile, binomial T)",
    METHOD_POISSON_RDP_PLD: "Papernot-Steinke 2022 Theorem 6 with delta-hat from the privacy profile",
}
_FAMILY = {
    METHOD_TNB: TruncatedNegativeBinomial,
    METHOD_POISSON: Poisson,
    METHOD_BINOMIAL: Binomial,
    METHOD_POISSON_RDP_PLD: Poisson,
}
_GRID = 512  # ε₁ grid points before the local refinement


class ProfileScopeError(DphypoError, ValueError):
    """A privacy-profile bound was requested outside its proven scope (adaptive search or wrong run count)."""


@dataclass(frozen=True)
class ProfileBound:
    """One (ε, δ) guarantee of a uniform search from a privacy-profile method.

    Attributes:
        epsilon: ε of the search at ``delta`` (``inf`` if no finite bound).
        delta: δ of the guarantee.
        method: Method key (see :data:`PROFILE_METHODS`).
        theorem: The theorem that produced it.
        base_epsilon: ε_Q(δ/m) of one run (``nan`` for ``rdp-poisson-pld``).
        overhead: Selection overhead ε₂* = ε − ε_Q(δ/m) (``nan`` for ``rdp-poisson-pld``).
        epsilon1: The optimal free parameter ε₁* (``nan`` for ``rdp-poisson-pld``).
        delta1: δ_Q(ε₁*) (``nan`` for ``rdp-poisson-pld``).
        expected_runs: m = E[T].
        order: Rényi order of the conversion (``rdp-poisson-pld`` only, else ``nan``).
    """

    epsilon: float
    delta: float
    method: str
    theorem: str
    base_epsilon: float
    overhead: float
    epsilon1: float
    delta1: float
    expected_runs: float
    order: float = math.nan


# -- scope -------------------------------------------------------------------------------------------------
def scope_error(method: str, search: RepeatAndSelect) -> str | None:
    """Why ``method`` does not apply to ``search`` (``None`` if it applies).

    Args:
        method: One of :data:`PROFILE_METHODS`.
        search: The search configuration.

    Returns:
        A human-readable reason, or ``None``.
    """
    if method not in PROFILE_METHODS:
        raise ValueError(f"method must be one of {', '.join(PROFILE_METHODS)}, got {method!r}")
    if not isinstance(search, RepeatAndSelect):
        raise TypeError(f"search must be a RepeatAndSelect, got {type(search).__name__}")
    rc = search.run_count
    if search.adaptive:
        reason = (
            f"{method} ({_THEOREMS[method]}) is proven only for a uniform search (C = c = 1): "
            "KRW 2024 Thm 4.1 needs the runs to be i.i.d. draws of one fixed mechanism, but with "
            f"C={search.C:g} > c={search.c:g} the sampling density depends on earlier private outputs"
        )
        if isinstance(rc, Binomial):
            return reason + (
                "; binomial T has no RDP theorem either, so no method covers this search: use TNB T "
                "(DP-HyPO Theorem 1) or a uniform search (C = c = 1)"
            )
        return reason + "; use the RDP accountant (DP-HyPO Theorem 1)"
    family = _FAMILY[method]
    if not isinstance(rc, family):
        others = ", ".join(applicable_methods(search)) or "none"
        return f"{method} needs {family.__name__} T, got {rc.name}; methods for this search: {others}"
    return None


def is_applicable(method: str, search: RepeatAndSelect) -> bool:
    """Whether ``method`` is proven for ``search`` (uniform search with the method's run-count family)."""
    return scope_error(method, search) is None


def applicable_methods(search: RepeatAndSelect) -> tuple[str, ...]:
    """The profile-based methods proven for ``search`` (empty for an adaptive search)."""
    if search.adaptive:
        return ()
    return tuple(m for m in PROFILE_METHODS if isinstance(search.run_count, _FAMILY[m]))


def _require(method: str, search: RepeatAndSelect) -> None:
    reason = scope_error(method, search)
    if reason is not None:
        raise ProfileScopeError(reason)


# -- one-dimensional minimisation over ε₁ --------------------------------------------------------------------
def _minimise(objective: Callable[[np.ndarray], np.ndarray], lo: float, hi: float) -> tuple[float, float]:
    """Min of ``objective`` on [lo, hi]: dense grid (vectorised profile calls), then bounded Brent locally.

    Any ε₁ in the admissible range gives a valid bound, so a sub-optimal minimiser is loose, never unsafe.

    Returns:
        ``(argmin, min)``.
    """
    if hi <= lo:
        return lo, float(objective(np.array([lo]))[0])
    grid = np.linspace(lo, hi, _GRID)
    values = objective(grid)
    i = int(np.argmin(values))
    best_x, best_v = float(grid[i]), float(values[i])
    a, b = float(grid[max(i - 1, 0)]), float(grid[min(i + 1, _GRID - 1)])
    res = optimize.minimize_scalar(
        lambda x: float(objective(np.array([x]))[0]), bounds=(a, b), method="bounded", options={"xatol": 1e-9}
    )
    if res.success and float(res.fun) < best_v:
        best_x, best_v = float(res.x), float(res.fun)
    return best_x, best_v


def _tnb_overhead(profile: PrivacyProfile, rc: TruncatedNegativeBinomial) -> tuple[float, float]:
    """KRW 2024 Theorem 5.2: ε₂(ε₁) = (η+1)·log(e^{ε₁} + ((1−γ)/γ)·δ_Q(ε₁)), minimised over ε₁ ≥ 0.

    **Reconstructed**: the extraction lost Theorem 5.2's display; this is the notes' reconstruction (from the
    surviving App. C.3 chain "(η+1) log(e^{ε1} + (1−γ)/γ δ(ε1))" and Sec. 6.2's minimisation), which we
    re-derived from Thm 4.1 with the complement event (1 − q′ ≤ e^{ε₁}(1 − q) + δ, reverse direction, and
    γ ≤ γe^{ε₁}, hence ε₁ ≥ 0). Checked against exact selection divergences on small discrete instances.

    ε₂(ε₁) ≥ (η+1)ε₁, so the minimiser lies in [0, log(1 + ((1−γ)/γ)·δ_Q(0))].

    Returns:
        ``(ε₁*, ε₂*)``.
    """
    coef = (1.0 - rc.gamma) / rc.gamma
    scale = rc.theta + 1.0

    def overhead(e1: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore"):
            return scale * np.logaddexp(e1, math.log(coef) + np.log(profile.delta(e1)))

    return _minimise(overhead, 0.0, math.log1p(coef * profile.total_variation()))


def _poisson_overhead(profile: PrivacyProfile, rc: Poisson) -> tuple[float, float]:
    """KRW 2024 Corollary 5.8: ε₂(ε₁) = m(e^{ε₁} − 1) + m·δ_Q(ε₁), minimised over ε₁ ≥ 0.

    [ours] As a function of u = e^{ε₁}, δ_Q is convex (a supremum of affine functions of u) with slope ≥ −1 at
    u = 1, so the minimum is at ε₁ = 0: ε₂* = m·δ_Q(0) = m·TV(Q, Q′). The search does not rely on this (any
    ε₁ is valid); tests check it. Remark C.8's variant (garbled in the extraction) coincides at ε₁ = 0.

    Returns:
        ``(ε₁*, ε₂*)``.
    """
    m = rc.mean

    def overhead(e1: np.ndarray) -> np.ndarray:
        return m * np.expm1(e1) + m * profile.delta(e1)

    return _minimise(overhead, 0.0, math.log1p(profile.total_variation()))


def _binomial_overhead(profile: PrivacyProfile, rc: Binomial) -> tuple[float, float]:
    """KRW 2024 Theorem 5.7: the selection overhead of binomial T, minimised over admissible ε₁.

    ε₂(ε₁) = (n−1)·log(1 + p(e^{ε₁} − 1) + p·δ_Q(ε₁)), for ε₁ ≥ 0 with ε₁ ≥ log(1 + p·δ_Q(ε₁)/(1−p)).

    The condition's inequality sign is lost in the extraction; it is reconstructed from the proof (App. C.4,
    Lemma C.5: (ax+b)/(cx+d) is non-decreasing iff ad ≥ bc, so the ratio bound is attained at q′ = 1).

    [ours] g(ε₁) = e^{ε₁} − 1 − p·δ_Q(ε₁)/(1−p) is increasing, so the admissible set is [ε₁⁰, ∞) with ε₁⁰ its
    root in [0, −log(1−p)]; the objective is convex in e^{ε₁} with non-negative slope there, so ε₁* = ε₁⁰. The
    search still scans admissible points above the root (any admissible ε₁ is valid).

    Returns:
        ``(ε₁*, ε₂*)``.
    """
    n, p = rc.n, rc.p
    ratio = p / (1.0 - p)

    def slack(e1: float) -> float:
        return math.expm1(e1) - ratio * float(profile.delta(e1))

    root = 0.0
    if slack(0.0) < 0.0:
        hi = -math.log1p(-p)  # slack(hi) = p/(1−p)·(1 − δ) ≥ 0
        root = optimize.brentq(slack, 0.0, hi, xtol=1e-13, rtol=4 * np.finfo(float).eps)
        while slack(root) < 0.0:  # land on the admissible side
            root += max(1e-13, 1e-12 * root)
    if n == 1:
        return root, 0.0

    def overhead(e1: np.ndarray) -> np.ndarray:
        return (n - 1) * np.log1p(p * np.expm1(e1) + p * profile.delta(e1))

    at_root = float(overhead(np.array([root]))[0])
    # overhead(ε₁) ≥ (n−1)·log(1 + p(e^{ε₁}−1)), so no admissible ε₁ beyond this bound can do better.
    hi = math.log1p(math.expm1(at_root / (n - 1)) / p)
    e1, value = _minimise(overhead, root, max(hi, root))
    return (root, at_root) if at_root <= value else (e1, value)


_OVERHEADS = {
    METHOD_TNB: _tnb_overhead,
    METHOD_POISSON: _poisson_overhead,
    METHOD_BINOMIAL: _binomial_overhead,
}


# -- public bounds -------------------------------------------------------------------------------------------
def _selection_bound(
    method: str, profile: PrivacyProfile, search: RepeatAndSelect, delta: float
) -> ProfileBound:
    _require(method, search)
    check_delta(delta)
    if not isinstance(profile, PrivacyProfile):
        raise TypeError(f"profile must be a PrivacyProfile, got {type(profile).__name__}")
    rc = search.run_count
    e1, overhead = _OVERHEADS[method](profile, rc)  # type: ignore[operator]
    m = rc.mean
    base = profile.epsilon(min(1.0, delta / m))
    return ProfileBound(
        epsilon=base + overhead,
        delta=delta,
        method=method,
        theorem=_THEOREMS[method],
        base_epsilon=base,
        overhead=overhead,
        epsilon1=e1,
        delta1=float(profile.delta(e1)),
        expected_runs=m,
    )


def tnb_profile_bound(profile: PrivacyProfile, search: RepeatAndSelect, delta: float) -> ProfileBound:
    """ε of a uniform search with T ~ TNB(θ, γ) from KRW 2024 **Theorem 5.2** (η = θ), optimised over ε₁.

        ε = ε_Q(δ/m) + min_{ε₁ ≥ 0} (θ+1)·log(e^{ε₁} + ((1−γ)/γ)·δ_Q(ε₁)),   m = E[T].

    The theorem's display is *reconstructed* (see :func:`_tnb_overhead`) and tested against exact selection
    divergences; Cor 5.4's printed simplification is garbled and not used.

    Args:
        profile: Symmetric profile of one candidate run (an upper bound).
        search: A uniform search (C = c = 1) with TNB T.
        delta: Target δ ∈ (0, 1).

    Returns:
        The bound.

    Raises:
        ProfileScopeError: Adaptive search (C > c) or a run count that is not TNB.
    """
    return _selection_bound(METHOD_TNB, profile, search, delta)


def poisson_profile_bound(profile: PrivacyProfile, search: RepeatAndSelect, delta: float) -> ProfileBound:
    """ε of a uniform search with T ~ Poisson(m) from KRW 2024 **Corollary 5.8**, optimised over ε₁ ≥ 0.

    ε = ε_Q(δ/m) + min [m(e^{ε₁} − 1) + m·δ_Q(ε₁)] = ε_Q(δ/m) + m·δ_Q(0). Linear in m (≈ m·TV): for m ≳ 10 on
    DP-SGD bases, TNB T or ``rdp-poisson-pld`` usually win. Args, returns and raises as
    :func:`tnb_profile_bound` (Poisson T).
    """
    return _selection_bound(METHOD_POISSON, profile, search, delta)


def binomial_profile_bound(profile: PrivacyProfile, search: RepeatAndSelect, delta: float) -> ProfileBound:
    """ε of a uniform search with T ~ Bin(n, p) from KRW 2024 **Theorem 5.7**, optimised over admissible ε₁.

    ε = ε_Q(δ/m) + min (n−1)·log(1 + p(e^{ε₁} − 1) + p·δ_Q(ε₁)) s.t. ε₁ ≥ log(1 + p·δ_Q(ε₁)/(1−p)), m = np.
    T = 0 releases a fixed default (:mod:`dphypo.privacy.run_counts`); the bound holds for ε ≥ 0. Args, returns
    and raises as :func:`tnb_profile_bound` (binomial T).
    """
    return _selection_bound(METHOD_BINOMIAL, profile, search, delta)


def poisson_rdp_with_profile_bound(
    base: RdpCurve, profile: PrivacyProfile, search: RepeatAndSelect, delta: float
) -> ProfileBound:
    """Papernot & Steinke 2022 **Theorem 6** with δ̂ from the privacy profile (uniform search, Poisson T).

        ε′(α) = ε(α) + m·δ̂_α + log(m)/(α−1),   ε̂_α = log(1 + 1/(α−1)),   δ̂_α = min(δ_Q(ε̂_α), δ_RDP(ε̂_α)),

    then the monotone envelope in α and the Canonne–Kamath–Steinke conversion (as
    :func:`~dphypo.privacy.tuning.papernot_steinke_theorem6`, whose δ̂ comes from the RDP curve only).
    Theorem 6 needs Q to be (ε̂, δ̂)-DP, which the profile certifies directly.

    Args:
        base: Per-candidate RDP curve (the same mechanism as ``profile``).
        profile: Symmetric profile of one candidate run.
        search: A uniform search with Poisson T.
        delta: Target δ ∈ (0, 1).

    Returns:
        The bound (``order`` = Rényi order of the conversion).

    Raises:
        ProfileScopeError: Adaptive search or a run count that is not Poisson.
    """
    _require(METHOD_POISSON_RDP_PLD, search)
    check_delta(delta)
    mu = search.run_count.mean
    a = base.orders
    eps_hat = np.log1p(1.0 / (a - 1.0))
    from_profile = np.asarray(profile.delta(eps_hat), dtype=np.float64)
    from_rdp = deltas_from_rdp(a, base.epsilons, eps_hat, pure_epsilon=base.pure_epsilon)  # delta_from_rdp per ε̂
    eps = np.empty_like(a)
    for i, alpha in enumerate(a):
        eps[i] = base.epsilons[i] + mu * min(float(from_rdp[i]), float(from_profile[i])) + math.log(mu) / (alpha - 1.0)
    curve = RdpCurve(a, nonnegative_bound(eps, "Papernot-Steinke Theorem 6 (PLD delta-hat)"), None,
                     f"P&S Thm 6 (profile delta-hat) of ({base.label})")
    value, order = epsilon_from_rdp(curve.orders, curve.monotone().epsilons, delta)
    method, nan = METHOD_POISSON_RDP_PLD, math.nan
    return ProfileBound(value, delta, method, _THEOREMS[method], nan, nan, nan, nan, mu, order)


def selection_delta(profile: PrivacyProfile, search: RepeatAndSelect, epsilon: float) -> float:
    """δ of a uniform search at a given ε ≥ 0: ``min(1, m·δ_Q(ε − ε₂*))`` (KRW 2024 Thm 5.2 / 5.7 / Cor 5.8).

    m·δ_Q(ε − ε₂) is non-decreasing in ε₂, so the best ε₁ for every ε is the one minimising ε₂. ε − ε₂* may be
    negative; the profile is evaluated there as well.

    Args:
        profile: Symmetric profile of one candidate run.
        search: A uniform search with TNB, Poisson or binomial T.
        epsilon: ε ≥ 0.

    Returns:
        δ ∈ [0, 1].
    """
    check_non_negative("epsilon", epsilon)
    method = next((m for m in _OVERHEADS if isinstance(search.run_count, _FAMILY[m])), METHOD_TNB)
    _require(method, search)
    _, overhead = _OVERHEADS[method](profile, search.run_count)  # type: ignore[operator]
    return float(min(1.0, search.run_count.mean * float(profile.delta(epsilon - overhead))))


# -- dispatch ------------------------------------------------------------------------------------------------
def profile_bound(
    method: str,
    profile: PrivacyProfile,
    search: RepeatAndSelect,
    delta: float,
    *,
    base_rdp: RdpCurve | None = None,
) -> ProfileBound:
    """The bound of one method (``base_rdp`` is required by ``rdp-poisson-pld`` only).

    Raises:
        ProfileScopeError: ``method`` is not proven for ``search``.
    """
    if method == METHOD_POISSON_RDP_PLD:
        if base_rdp is None:
            raise ValueError(f"{method} needs base_rdp (the per-candidate RDP curve)")
        return poisson_rdp_with_profile_bound(base_rdp, profile, search, delta)
    _require(method, search)
    return _selection_bound(method, profile, search, delta)


def profile_bounds(
    profile: PrivacyProfile, search: RepeatAndSelect, delta: float, *, base_rdp: RdpCurve | None = None
) -> dict[str, ProfileBound]:
    """Every applicable profile-based bound for ``search`` (``rdp-poisson-pld`` only with ``base_rdp``).

    Args:
        profile: Symmetric profile of one candidate run.
        search: Search configuration; an adaptive search yields ``{}`` (no profile bound is proven for it).
        delta: Target δ ∈ (0, 1).
        base_rdp: Per-candidate RDP curve of the same mechanism, if available.

    Returns:
        ``{method: bound}``.

    Raises:
        ProfileScopeError: An adaptive search with binomial T, which *no* method covers (neither these bounds
            nor the RDP accountant), so the caller must not silently report anything.
    """
    if search.adaptive and isinstance(search.run_count, Binomial):
        raise ProfileScopeError(scope_error(METHOD_BINOMIAL, search))
    out: dict[str, ProfileBound] = {}
    for method in applicable_methods(search):
        if method == METHOD_POISSON_RDP_PLD and base_rdp is None:
            continue
        out[method] = profile_bound(method, profile, search, delta, base_rdp=base_rdp)
    return out


def profile_epsilons(
    base_sigma: float,
    sample_rate: float,
    steps: int,
    search: RepeatAndSelect,
    delta: float,
    *,
    discretization: float = DEFAULT_DISCRETIZATION,
) -> dict[str, float]:
    """ε of every applicable profile-based method for DP-SGD candidates (one run = ``steps`` noisy steps).

    The candidate must be exactly one DP-SGD run (no extra private score release; if scores are released with
    noise, compose its PLD into the profile and call :func:`profile_bounds`). Adaptive searches get ``{}``.

    Args:
        base_sigma: DP-SGD noise multiplier σ > 0.
        sample_rate: Poisson sampling rate q ∈ (0, 1].
        steps: DP-SGD steps per run.
        search: Search configuration.
        delta: Target δ ∈ (0, 1).
        discretization: PLD discretisation interval.

    Returns:
        ``{method: epsilon}``; merge with the RDP accountant's ε and report the minimum.

    Raises:
        ProfileTooLargeError: The run's PLD exceeds its size cap even at the coarsest discretisation
            (:func:`~dphypo.privacy.profiles.dpsgd_profile`); only the RDP bound is available then.
    """
    if search.adaptive:
        if isinstance(search.run_count, Binomial):
            raise ProfileScopeError(scope_error(METHOD_BINOMIAL, search))
        return {}
    profile = dpsgd_profile(base_sigma, sample_rate, steps, discretization=discretization)
    base_rdp = (
        dpsgd_rdp(base_sigma, sample_rate, steps) if is_applicable(METHOD_POISSON_RDP_PLD, search) else None
    )
    return {k: b.epsilon for k, b in profile_bounds(profile, search, delta, base_rdp=base_rdp).items()}

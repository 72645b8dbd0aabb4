"""Profile bounds for uniform searches (KRW 2024 Thm 5.2, 5.7, Cor 5.8), the binomial run count, scope.

Three kinds of checks: the digest's regression numbers (notes/koskela-redberg-wang.md §3, §5.3-5.5), an exact
audit (the hockey-stick divergence of the uniform tuner's exact output law on small discrete instances never
exceeds the bound; a deliberately weakened bound is caught), and comparisons with the RDP accountant.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from dphypo.privacy import (
    AdaptivePoissonError,
    Poisson,
    RepeatAndSelect,
    TruncatedNegativeBinomial,
    account,
    dpsgd_rdp,
    gaussian_rdp,
    geometric,
)
from dphypo.privacy.profile_tuning import (
    METHOD_BINOMIAL,
    METHOD_POISSON,
    METHOD_POISSON_RDP_PLD,
    METHOD_TNB,
    ProfileScopeError,
    applicable_methods,
    binomial_profile_bound,
    is_applicable,
    poisson_profile_bound,
    poisson_rdp_with_profile_bound,
    profile_bounds,
    profile_epsilons,
    selection_delta,
    tnb_profile_bound,
)
from dphypo.privacy.profiles import DiscreteProfile, GaussianProfile, dpsgd_profile, hockey_stick
from dphypo.privacy.run_counts import Binomial
from dphypo.testing.audit import output_distribution, uniform_rule

MNIST_Q = 256 / 60000
GAUSS4 = GaussianProfile(4.0)


# -- regression numbers from the digest
# ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("m", "eps", "base", "overhead", "eps1"),
    [  # notes §5.3: geometric K, Gaussian σ = 4, δ = 1e-6
        (10, 1.983, 1.182, 0.801, 0.274),
        (100, 2.567, 1.293, 1.275, 0.549),
        (1000, 3.021, 1.396, 1.625, 0.741),
        (1e5, 3.763, 1.583, 2.180, 1.035),
    ],
)
def test_tnb_bound_reproduces_fig3_numbers(
    m: float, eps: float, base: float, overhead: float, eps1: float
) -> None:
    b = tnb_profile_bound(GAUSS4, RepeatAndSelect(geometric(1.0 / m)), 1e-6)
    assert b.epsilon == pytest.approx(eps, abs=1.5e-3)
    assert b.base_epsilon == pytest.approx(base, abs=1e-3)
    assert b.overhead == pytest.approx(overhead, abs=1e-3)
    assert b.epsilon1 == pytest.approx(eps1, abs=2e-3)


@pytest.mark.parametrize(
    ("n", "delta", "eps"),
    [  # notes §5.4 and §3 (m = 10, Gaussian σ = 4); the digest's ε₁ grid (step 5e-3) lands ≤ 2e-3 higher
        (15, 1e-5, 2.585),
        (20, 1e-5, 2.370),
        (1000, 1e-5, 2.060),
        (15, 1e-6, 2.706),
        (20, 1e-6, 2.491),
        (1000, 1e-6, 2.181),
        (11, 1e-6, 3.521),
        (12, 1e-6, 3.122),
        (50, 1e-6, 2.271),
        (100, 1e-6, 2.219),
        (15, 1e-8, 2.920),
        (20, 1e-8, 2.704),
    ],
)
def test_binomial_bound_reproduces_fig4_numbers(n: int, delta: float, eps: float) -> None:
    b = binomial_profile_bound(GAUSS4, RepeatAndSelect(Binomial.from_mean(n, 10.0)), delta)
    assert eps - 3e-3 <= b.epsilon <= eps + 5e-4


@pytest.mark.parametrize(
    ("delta", "hs", "rdp_exact"), [(1e-5, 2.056, 1.900), (1e-6, 2.177, 2.039), (1e-8, 2.390, 2.278)]
)
def test_poisson_bounds_reproduce_fig4_numbers(delta: float, hs: float, rdp_exact: float) -> None:
    search = RepeatAndSelect(Poisson(10.0))
    assert poisson_profile_bound(GAUSS4, search, delta).epsilon == pytest.approx(hs, abs=1.5e-3)
    # P&S Theorem 6 with the exact Gaussian δ̂ beats the HS Poisson bound here (notes' caveat, §5.4).
    got = poisson_rdp_with_profile_bound(gaussian_rdp(4.0), GAUSS4, search, delta).epsilon
    assert got == pytest.approx(rdp_exact, abs=2e-3)


@pytest.mark.parametrize(
    ("delta", "m", "geom_hs", "poisson_hs"),
    [  # notes §5.5, Fig. 6: q = 256/60000, σ = 1.1, T = 14063, PLD interval 1e-4
        (1e-5, 2, 2.885, 2.929),
        (1e-5, 5, 3.821, 3.728),
        (1e-5, 10, 4.388, 4.942),
        (1e-5, 30, 5.102, 9.571),
        (1e-6, 10, 4.676, 5.229),
    ],
)
def test_dpsgd_fig6_numbers(delta: float, m: int, geom_hs: float, poisson_hs: float) -> None:
    profile = dpsgd_profile(1.1, MNIST_Q, 14063)
    assert tnb_profile_bound(profile, RepeatAndSelect(geometric(1.0 / m)), delta).epsilon == pytest.approx(
        geom_hs, abs=2e-3
    )
    assert poisson_profile_bound(profile, RepeatAndSelect(Poisson(float(m))), delta).epsilon == pytest.approx(
        poisson_hs, abs=2e-3
    )


@pytest.mark.parametrize(("m", "eps"), [(2, 1.140), (10, 1.834), (100, 2.421), (1e4, 3.272)])
def test_dpsgd_fig7_numbers(m: float, eps: float) -> None:
    profile = dpsgd_profile(21.1, 16384 / 50000, 250)  # De et al. 2022 setting, δ = 1e-5 (notes §5.5)
    assert tnb_profile_bound(profile, RepeatAndSelect(geometric(1.0 / m)), 1e-5).epsilon == pytest.approx(
        eps, abs=2e-3
    )


# -- properties of the optimisation
# ------------------------------------------------------------------------------
def test_poisson_optimum_is_at_zero_and_equals_m_times_tv() -> None:
    for profile in (GAUSS4, dpsgd_profile(1.1, MNIST_Q, 14063)):
        b = poisson_profile_bound(profile, RepeatAndSelect(Poisson(7.0)), 1e-5)
        assert b.epsilon1 == 0.0
        assert b.overhead == pytest.approx(7.0 * profile.total_variation(), rel=1e-12)


def test_binomial_optimum_is_the_admissibility_threshold() -> None:
    rc = Binomial(20, 0.5)
    b = binomial_profile_bound(GAUSS4, RepeatAndSelect(rc), 1e-6)
    slack = math.expm1(b.epsilon1) - rc.p / (1 - rc.p) * float(GAUSS4.delta(b.epsilon1))
    assert 0.0 <= slack < 1e-9  # admissible, and just so


def test_binomial_approaches_poisson_and_tightens_with_n() -> None:
    poisson = poisson_profile_bound(GAUSS4, RepeatAndSelect(Poisson(10.0)), 1e-6).epsilon
    eps = [
        binomial_profile_bound(GAUSS4, RepeatAndSelect(Binomial.from_mean(n, 10.0)), 1e-6).epsilon
        for n in (11, 20, 100, 10_000)
    ]
    assert all(a > b for a, b in itertools.pairwise(eps))
    assert eps[-1] == pytest.approx(poisson, abs=1e-3)
    # n = 1: T ∈ {0, 1}, no selection overhead.
    one = binomial_profile_bound(GAUSS4, RepeatAndSelect(Binomial(1, 0.5)), 1e-6)
    assert one.overhead == 0.0 and one.epsilon == pytest.approx(GAUSS4.epsilon(2e-6))


def test_selection_delta_inverts_the_epsilon_bound() -> None:
    for rc in (
        geometric(0.05),
        TruncatedNegativeBinomial.from_mean(-0.5, 8.0),
        Poisson(4.0),
        Binomial(12, 0.4),
    ):
        search = RepeatAndSelect(rc)
        bound = {
            TruncatedNegativeBinomial: tnb_profile_bound,
            Poisson: poisson_profile_bound,
            Binomial: binomial_profile_bound,
        }[type(rc)](GAUSS4, search, 1e-6)
        assert selection_delta(GAUSS4, search, bound.epsilon) == pytest.approx(1e-6, rel=1e-6)
        assert selection_delta(GAUSS4, search, bound.epsilon - 0.05) > 1e-6


def test_tnb_bound_grows_with_mean_and_shape() -> None:
    eps_m = [tnb_profile_bound(GAUSS4, RepeatAndSelect(geometric(1.0 / m)), 1e-6).epsilon for m in (2, 10, 100)]
    assert eps_m[0] < eps_m[1] < eps_m[2]
    eps_theta = [
        tnb_profile_bound(GAUSS4, RepeatAndSelect(TruncatedNegativeBinomial.from_mean(t, 10.0)), 1e-6).epsilon
        for t in (-0.5, 0.0, 1.0, 2.0)
    ]
    assert all(a < b for a, b in itertools.pairwise(eps_theta))


# -- exact audit on small discrete instances
# ---------------------------------------------------------------------
def _uniform_selection_law(q: np.ndarray, rc) -> np.ndarray:
    """Exact law of the best of T i.i.d. draws from q (outputs ordered by index) + a fixed output ⊥ for T = 0.

    P[best = o] = φ(Q(≤o)) − φ(Q(<o)) (Papernot & Steinke 2022, Lemma 7 / KRW eq. B.1) with the closed-form
    PGF, so T's infinite support needs no truncation.
    """
    cdf = np.minimum(np.cumsum(q), 1.0)
    below = np.minimum(np.concatenate([[0.0], cdf[:-1]]), cdf)
    return np.append(rc.pgf(cdf) - rc.pgf(below), float(rc.pmf(0)))


def _truncated_law_interval(q: np.ndarray, rc, tail_target: float = 1e-13) -> tuple[np.ndarray, np.ndarray]:
    """The same law by summing P[T=k](Q(≤o)^k − Q(<o)^k) up to t_max, P[T > t_max] ≤ tail_bound(t_max):
    returns the interval [lo, lo + tail]."""
    t_max = 1
    while rc.tail_bound(t_max) > tail_target:
        t_max *= 2
    cdf = np.minimum(np.cumsum(q), 1.0)
    below = np.minimum(np.concatenate([[0.0], cdf[:-1]]), cdf)
    ks = np.arange(1, t_max + 1)[:, None]
    lo = (rc.pmf(ks[:, 0])[:, None] * (cdf[None, :] ** ks - below[None, :] ** ks)).sum(axis=0)
    lo = np.append(lo, float(rc.pmf(0)))
    return lo * (1 - 1e-12), lo * (1 + 1e-12) + rc.tail_bound(t_max)


def _random_instance(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Q, Q′ over outputs (candidate, score), score-major order, from a fixed prior and per-candidate laws."""
    kind = str(rng.choice(["rr", "prop17", "random", "gauss"]))
    n_cand = int(rng.integers(1, 4))
    n_scores = 2 if kind == "prop17" else int(rng.integers(2, 6))
    eps = np.exp(rng.uniform(np.log(0.05), np.log(2.0), size=n_cand))
    if kind == "rr":  # k-ary randomized response: the pure-DP worst case
        fav = rng.integers(0, n_scores, n_cand)
        other = (fav + rng.integers(1, n_scores, n_cand)) % n_scores
        p, pp = np.ones((n_cand, n_scores)), np.ones((n_cand, n_scores))
        p[np.arange(n_cand), fav] = np.exp(eps)
        pp[np.arange(n_cand), other] = np.exp(eps)
    elif kind == "prop17":  # Papernot & Steinke 2022, Proposition 17
        p = np.stack([np.exp(eps), np.ones(n_cand)], axis=1)
        pp = p[:, ::-1].copy()
    elif kind == "random":
        p = rng.dirichlet(np.ones(n_scores), size=n_cand) + 1e-3
        pp = p * np.exp(eps[:, None] * rng.uniform(-1, 1, size=p.shape))
    else:  # a discretised Gaussian mechanism shifted by one score
        s, mu, y = rng.uniform(0.5, 3.0), rng.uniform(0, n_scores - 1), np.arange(n_scores)
        p = np.repeat(np.exp(-((y - mu) ** 2) / (2 * s**2))[None, :], n_cand, axis=0)
        pp = np.repeat(np.exp(-((y - mu - 1) ** 2) / (2 * s**2))[None, :], n_cand, axis=0)
    p, pp = p / p.sum(1, keepdims=True), pp / pp.sum(1, keepdims=True)
    if rng.random() < 0.5:
        p, pp = pp, p
    prior = rng.dirichlet(np.full(n_cand, 3.0))
    return (p * prior[:, None]).T.ravel(), (pp * prior[:, None]).T.ravel()


def _random_search(rng: np.random.Generator, family: str) -> RepeatAndSelect:
    if family == "tnb":
        theta = float(rng.choice([-0.5, 0.0, 1.0, 2.0]))
        return RepeatAndSelect(TruncatedNegativeBinomial.from_mean(theta, float(np.exp(rng.uniform(0.4, 4.0)))))
    if family == "poisson":
        return RepeatAndSelect(Poisson(float(np.exp(rng.uniform(0.0, 3.4)))))
    return RepeatAndSelect(Binomial(int(rng.integers(1, 40)), float(rng.uniform(0.02, 0.98))))


_BOUND = {"tnb": tnb_profile_bound, "poisson": poisson_profile_bound, "binomial": binomial_profile_bound}
_EPS_GRID = np.linspace(0.0, 8.0, 161)


def _audit(rng: np.random.Generator, family: str, weaken: float = 1.0) -> tuple[bool, float]:
    """One instance: (bound holds on the whole ε grid, worst ratio exact/bound). ``weaken`` scales ε₂*."""
    q, qp = _random_instance(rng)
    search = _random_search(rng, family)
    profile = DiscreteProfile(q, qp)
    bound = _BOUND[family](profile, search, 0.5)  # δ only fixes ε_Q(δ/m); ε₂* and ε₁* do not depend on it
    rc = search.run_count
    law, law_p = _uniform_selection_law(q, rc), _uniform_selection_law(qp, rc)
    exact = np.maximum(hockey_stick(law, law_p, _EPS_GRID), hockey_stick(law_p, law, _EPS_GRID))
    claimed = np.minimum(1.0, rc.mean * profile.delta(_EPS_GRID - weaken * bound.overhead))
    holds = bool(np.all(exact <= claimed * (1 + 1e-9) + 1e-12))
    ratio = float(np.max(np.where(claimed > 1e-12, exact / np.maximum(claimed, 1e-300), 0.0)))
    return holds, ratio


@pytest.mark.parametrize("family", ["tnb", "poisson", "binomial"])
def test_exact_selection_divergence_never_exceeds_profile_bound(family: str) -> None:
    rng = np.random.default_rng({"tnb": 11, "poisson": 12, "binomial": 13}[family])
    results = [_audit(rng, family) for _ in range(150)]
    assert all(ok for ok, _ in results)
    worst = max(r for _, r in results)
    assert worst > 0.5  # the audit reaches the bound's scale (not a vacuous comparison)


@pytest.mark.parametrize(("family", "weaken"), [("tnb", 0.5), ("poisson", 0.8), ("binomial", 0.8)])
def test_exact_audit_catches_a_weakened_bound(family: str, weaken: float) -> None:
    rng = np.random.default_rng(5)
    assert not all(_audit(rng, family, weaken)[0] for _ in range(200))


@pytest.mark.parametrize("rc", [TruncatedNegativeBinomial(0.5, 0.3), Poisson(3.0), Binomial(7, 0.3)])
def test_closed_form_selection_law_agrees_with_truncated_sum_and_audit_engine(rc) -> None:
    rng = np.random.default_rng(3)
    q, _ = _random_instance(rng)
    law = _uniform_selection_law(q, rc)
    lo, hi = _truncated_law_interval(q, rc)
    assert np.all(lo - 1e-13 <= law) and np.all(law <= hi + 1e-13)
    assert law.sum() == pytest.approx(1.0, abs=1e-12)
    if isinstance(rc, TruncatedNegativeBinomial):  # the audit package's rigorous-truncation engine
        n_out = q.size
        n_cand = 1
        interval = output_distribution(uniform_rule(np.ones(n_cand), n_out), q.reshape(1, -1), rc)
        assert np.all(interval.lower - 1e-13 <= law[:-1]) and np.all(law[:-1] <= interval.upper + 1e-13)


# -- scope
# ------------------------------------------------------------------------------------------------------
ADAPTIVE = RepeatAndSelect(geometric(0.1), 2.0, 0.5)


@pytest.mark.parametrize("fn", [tnb_profile_bound, poisson_profile_bound, binomial_profile_bound])
def test_adaptive_search_is_refused(fn) -> None:
    with pytest.raises(ProfileScopeError, match=r"uniform search \(C = c = 1\)"):
        fn(GAUSS4, ADAPTIVE, 1e-5)
    assert issubclass(ProfileScopeError, ValueError)
    with pytest.raises(ProfileScopeError, match="DP-HyPO Theorem 1"):
        selection_delta(GAUSS4, ADAPTIVE, 1.0)


def test_adaptive_binomial_says_no_method_applies() -> None:
    try:
        search = RepeatAndSelect(Binomial(20, 0.5), 2.0, 0.5)
    except ValueError as err:  # the accountant may (should) refuse this configuration up front instead
        assert "binomial" in str(err).lower()
        return
    with pytest.raises(ProfileScopeError, match="no method covers this search"):
        binomial_profile_bound(GAUSS4, search, 1e-5)
    with pytest.raises(ProfileScopeError, match="binomial T has no RDP theorem"):
        profile_epsilons(1.0, MNIST_Q, 100, search, 1e-5)


def test_wrong_family_is_refused_with_the_applicable_methods() -> None:
    with pytest.raises(ProfileScopeError, match="methods for this search: profile-binomial"):
        tnb_profile_bound(GAUSS4, RepeatAndSelect(Binomial(20, 0.5)), 1e-5)
    with pytest.raises(ProfileScopeError, match="needs Poisson T"):
        poisson_rdp_with_profile_bound(gaussian_rdp(4.0), GAUSS4, RepeatAndSelect(geometric(0.1)), 1e-5)


def test_applicability_table() -> None:
    assert applicable_methods(RepeatAndSelect(geometric(0.1))) == (METHOD_TNB,)
    assert applicable_methods(RepeatAndSelect(Poisson(3.0))) == (METHOD_POISSON, METHOD_POISSON_RDP_PLD)
    assert applicable_methods(RepeatAndSelect(Binomial(5, 0.5))) == (METHOD_BINOMIAL,)
    assert applicable_methods(ADAPTIVE) == ()
    assert not is_applicable(METHOD_TNB, ADAPTIVE)
    assert is_applicable(METHOD_BINOMIAL, RepeatAndSelect(Binomial(5, 0.5)))
    with pytest.raises(AdaptivePoissonError):  # the existing accountant already refuses this configuration
        RepeatAndSelect(Poisson(3.0), 2.0, 0.5)


def test_profile_epsilons_keys_and_adaptive_is_empty() -> None:
    assert set(profile_epsilons(1.0, MNIST_Q, 300, RepeatAndSelect(Poisson(5.0)), 1e-5)) == {
        METHOD_POISSON,
        METHOD_POISSON_RDP_PLD,
    }
    assert set(profile_epsilons(1.0, MNIST_Q, 300, RepeatAndSelect(Binomial(10, 0.5)), 1e-5)) == {
        METHOD_BINOMIAL
    }
    assert profile_epsilons(1.0, MNIST_Q, 300, ADAPTIVE, 1e-5) == {}
    assert profile_bounds(GAUSS4, RepeatAndSelect(Poisson(5.0)), 1e-5).keys() == {
        METHOD_POISSON
    }  # no RDP curve given


# -- comparison with the RDP accountant
# --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("sigma", "q", "steps"),
    [(0.64, MNIST_Q, 2344), (1.0, MNIST_Q, 2344), (21.1, 16384 / 50000, 250), (2.0, 0.01, 5000)],
)
def test_profile_methods_against_rdp(sigma: float, q: float, steps: int) -> None:
    """Where each valid bound wins (the accountant reports the minimum, so losing is allowed, not hidden):

    TNB: the profile bound beats P&S Thm 2 in every DP-SGD setting the notes and we computed; Theorem B at
    C = c = 1 (docs/proofs/adaptive.md §5b) is below the profile bound in most of these (computed: all but σ = 1,
    θ = 0, where 1.885 < 1.957), so both are kept and the accountant reports the minimum. Poisson: the
    PLD-δ̂ version of P&S Thm 6 is never worse than the RDP-δ̂ one (δ̂ = min of both), and the HS bound beats
    RDP but loses to the PLD-δ̂ RDP bound at m = 10 (notes §5.4-5.5).
    """
    base = dpsgd_rdp(sigma, q, steps)
    for theta in (0.0, 1.0):
        search = RepeatAndSelect(TruncatedNegativeBinomial.from_mean(theta, 10.0))
        eps = profile_epsilons(sigma, q, steps, search, 1e-5)
        rdp = account(base, search, 1e-5)
        assert eps[METHOD_TNB] < rdp.methods["rdp"]
        assert rdp.methods["rdp-theorem-b"] < rdp.methods["rdp"]
    search = RepeatAndSelect(Poisson(10.0))
    eps = profile_epsilons(sigma, q, steps, search, 1e-5)
    rdp = account(base, search, 1e-5).epsilon
    assert eps[METHOD_POISSON_RDP_PLD] <= rdp + 1e-12
    assert eps[METHOD_POISSON] < rdp
    assert eps[METHOD_POISSON_RDP_PLD] < eps[METHOD_POISSON]


# -- the binomial run count
# ---------------------------------------------------------------------------------------
def test_binomial_distribution_basics() -> None:
    rc = Binomial(12, 0.3)
    ks = np.arange(0, 13)
    pmf = rc.pmf(ks)
    assert pmf.sum() == pytest.approx(1.0, abs=1e-14)
    assert rc.pmf(-1) == 0.0 and rc.pmf(13) == 0.0 and rc.pmf(2.5) == 0.0
    assert (ks * pmf).sum() == pytest.approx(rc.mean) and rc.mean == pytest.approx(3.6)
    assert rc.variance == pytest.approx(((ks - 3.6) ** 2 * pmf).sum())
    x = np.array([0.0, 0.3, 0.9, 1.0])
    np.testing.assert_allclose(rc.pgf(x), (pmf[None, :] * x[:, None] ** ks[None, :]).sum(1), rtol=1e-12)
    np.testing.assert_allclose(
        rc.pgf_derivative(x[:-1]),
        (rc.pgf(x[:-1] + 1e-6) - rc.pgf(x[:-1] - 1e-6 * (x[:-1] > 0))) / (1e-6 + 1e-6 * (x[:-1] > 0)),
        rtol=1e-5,
    )
    assert float(rc.pgf_derivative(1.0)) == pytest.approx(rc.mean)
    for k in (-1, 0, 3, 11, 12, 20):
        exact = pmf[ks > k].sum()
        assert exact <= rc.tail_bound(k) <= exact * (1 + 1e-9) + 1e-300
    assert rc.name == "binomial" and rc.support_min == 0
    assert rc.pmf(0) == pytest.approx(0.7**12)


def test_binomial_sampling_is_seeded_in_support_and_matches_pmf() -> None:
    rc = Binomial(8, 0.35)
    draws = np.array([rc.sample(np.random.default_rng(i)) for i in range(4000)])
    assert draws.min() >= 0 and draws.max() <= 8
    assert rc.sample(np.random.default_rng(7)) == rc.sample(np.random.default_rng(7))
    freq = np.bincount(draws, minlength=9) / draws.size
    assert np.abs(freq - rc.pmf(np.arange(9))).max() < 0.03
    with pytest.raises(TypeError, match="Generator"):
        rc.sample(np.random.RandomState(0))  # type: ignore[arg-type]


def test_binomial_validation_and_from_mean() -> None:
    assert Binomial.from_mean(20, 10.0) == Binomial(20, 0.5)
    for bad in ({"n": 0, "p": 0.5}, {"n": 3, "p": 1.0}, {"n": 3, "p": 0.0}, {"n": 2.5, "p": 0.5}):
        with pytest.raises(ValueError, match=r"n must|p must"):
            Binomial(**bad)
    with pytest.raises(ValueError, match="mean must be in"):
        Binomial.from_mean(10, 10.0)

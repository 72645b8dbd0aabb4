from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from dphypo.privacy import Poisson, TruncatedNegativeBinomial, geometric, logarithmic, make_run_count

K = np.arange(0, 200_000)
THETAS = [-0.5, 0.0, 0.5, 1.0, 2.0]


@pytest.mark.parametrize("theta", THETAS)
@pytest.mark.parametrize("gamma", [0.01, 0.1, 0.5])
def test_tnb_pmf_normalised_and_mean_matches_closed_form(theta: float, gamma: float) -> None:
    d = TruncatedNegativeBinomial(theta, gamma)
    p = d.pmf(K)
    assert p[0] == 0.0  # support starts at 1 (Papernot & Steinke 2022, Definition 1)
    assert p.sum() == pytest.approx(1.0, abs=1e-9)
    # Closed form E[T] = θ(1−γ)/(γ(1−γ^θ)), or (1/γ − 1)/log(1/γ) for θ = 0.
    expected = (
        (1 / gamma - 1) / math.log(1 / gamma)
        if theta == 0
        else theta * (1 - gamma) / (gamma * (1 - gamma**theta))
    )
    assert d.mean == pytest.approx(expected, rel=1e-12)
    assert (K * p).sum() == pytest.approx(expected, rel=1e-7)


def test_tnb_matches_scipy_families() -> None:
    k = np.arange(1, 400)
    np.testing.assert_allclose(geometric(0.07).pmf(k), stats.geom(0.07).pmf(k), rtol=1e-12)
    np.testing.assert_allclose(logarithmic(0.07).pmf(k), stats.logser(1 - 0.07).pmf(k), rtol=1e-10)
    nb = stats.nbinom(2.5, 0.2)
    np.testing.assert_allclose(
        TruncatedNegativeBinomial(2.5, 0.2).pmf(k), nb.pmf(k) / (1 - nb.pmf(0)), rtol=1e-10
    )


@pytest.mark.parametrize(
    ("theta", "gamma", "p1", "p2", "f_half"),
    [  # Papernot & Steinke digest §6.3(a), E[T] = 10; hand-checkable rows: θ=1 (γ=0.1) and θ=0.5 (γ=1/16).
        (1.0, 0.1, 0.1, 0.09, 1 / 11),
        (0.5, 1 / 16, 0.15625, 0.10986328125, 0.123996),
    ],
)
def test_pmf_and_pgf_reference_rows(theta: float, gamma: float, p1: float, p2: float, f_half: float) -> None:
    d = TruncatedNegativeBinomial(theta, gamma)
    assert d.mean == pytest.approx(10.0, rel=1e-12)
    assert d.pmf(1) == pytest.approx(p1, rel=1e-9)
    assert d.pmf(2) == pytest.approx(p2, rel=1e-9)
    assert d.pgf(0.5) == pytest.approx(f_half, rel=1e-5)


@pytest.mark.parametrize("dist", [*(TruncatedNegativeBinomial(t, 0.2) for t in THETAS), Poisson(3.5)])
def test_pgf_and_derivative_agree_with_pmf_sums(dist) -> None:
    k = np.arange(0, 2_000)
    p = dist.pmf(k)
    for x in (0.0, 0.3, 0.9, 1.0):
        assert dist.pgf(x) == pytest.approx(np.sum(p * x**k), abs=1e-12)
        deriv = np.sum(p[1:] * k[1:] * x ** (k[1:] - 1))
        assert dist.pgf_derivative(x) == pytest.approx(deriv, rel=1e-9, abs=1e-12)
    assert dist.pgf_derivative(1.0) == pytest.approx(dist.mean, rel=1e-12)


@pytest.mark.parametrize("dist", [*(TruncatedNegativeBinomial(t, 0.05) for t in THETAS), Poisson(10.0)])
def test_tail_bound_is_an_upper_bound(dist) -> None:
    p = dist.pmf(K)
    tails = p[::-1].cumsum()[::-1]  # tails[k] = P[T >= k]
    for k in (0, 1, 5, 20, 60, 200, 1000):
        exact = tails[k + 1]
        assert dist.tail_bound(k) >= exact * (1 - 1e-9)
    # and it is not vacuous far out
    assert dist.tail_bound(2000) < 1e-20


@pytest.mark.parametrize("theta", THETAS)
@pytest.mark.parametrize("mean", [1.5, 10.0, 250.0])
def test_from_mean_round_trip(theta: float, mean: float) -> None:
    d = TruncatedNegativeBinomial.from_mean(theta, mean)
    assert d.mean == pytest.approx(mean, rel=1e-10)
    assert 0 < d.gamma < 1


@pytest.mark.parametrize(
    "dist", [TruncatedNegativeBinomial(-0.5, 0.05), logarithmic(0.03), geometric(0.1), Poisson(7.0)]
)
def test_sample_mean_and_support(dist) -> None:
    rng = np.random.default_rng(12345)
    draws = np.array([dist.sample(rng) for _ in range(20_000)])
    assert draws.min() >= dist.support_min
    sd = math.sqrt(float(np.sum(dist.pmf(K) * (K - dist.mean) ** 2)))
    # 5 standard errors: fails with probability < 1e-6 for a correct sampler
    assert abs(draws.mean() - dist.mean) < 5 * sd / math.sqrt(draws.size)
    # the empirical pmf at small k matches
    for k in range(dist.support_min, dist.support_min + 3):
        p = float(dist.pmf(k))
        assert abs(np.mean(draws == k) - p) < 5 * math.sqrt(p * (1 - p) / draws.size)


def test_sample_is_reproducible_and_needs_a_generator() -> None:
    d = geometric(0.1)
    a = [d.sample(np.random.default_rng(3)) for _ in range(3)]
    b = [d.sample(np.random.default_rng(3)) for _ in range(3)]
    assert a == b
    with pytest.raises(TypeError, match="Generator"):
        d.sample(3)  # type: ignore[arg-type]


def test_poisson_includes_zero() -> None:
    d = Poisson(2.0)
    assert d.pmf(0) == pytest.approx(math.exp(-2.0))
    assert d.pgf(0.0) == pytest.approx(math.exp(-2.0))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(theta=-1.0, gamma=0.1), "theta"),
        (dict(theta=0.5, gamma=0.0), "gamma"),
        (dict(theta=0.5, gamma=1.0), "gamma"),
        (dict(theta=float("nan"), gamma=0.5), "theta"),
    ],
)
def test_tnb_validation(kwargs, message) -> None:
    with pytest.raises(ValueError, match=message):
        TruncatedNegativeBinomial(**kwargs)


def test_validation_of_means_and_pgf_domain() -> None:
    with pytest.raises(ValueError, match="mean"):
        TruncatedNegativeBinomial.from_mean(0.5, 1.0)
    with pytest.raises(ValueError, match="mean"):
        Poisson(0.0)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        geometric(0.1).pgf(1.5)


@pytest.mark.parametrize(
    ("family", "kwargs", "message"),
    [
        ("uniform", {}, "runs must be one of"),
        ("poisson", {"gamma": 0.1}, "only --mean"),
        ("poisson", {}, "mean is required"),
        ("poisson", {"mean": 0.5}, "mean must be"),
        ("geometric", {"theta": 0.5, "gamma": 0.1}, "fixed to 1"),
        ("negbin", {"gamma": 0.1}, "theta is required"),
        ("negbin", {"theta": 0.5}, "exactly one of gamma or mean"),
        ("negbin", {"theta": 0.5, "gamma": 0.1, "mean": 3.0}, "exactly one of gamma or mean"),
    ],
)
def test_make_run_count_errors(family, kwargs, message) -> None:
    with pytest.raises(ValueError, match=message):
        make_run_count(family, **kwargs)


def test_make_run_count_builds_the_families() -> None:
    assert make_run_count("geometric", gamma=0.1) == geometric(0.1)
    assert make_run_count("logarithmic", theta=0.0, gamma=0.2) == logarithmic(0.2)
    assert make_run_count("negbin", theta=0.5, mean=10).gamma == pytest.approx(1 / 16)
    assert make_run_count("poisson", mean=4).mean == 4.0

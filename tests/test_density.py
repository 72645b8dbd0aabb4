"""Tests for dphypo.density: softmax, projection onto S_{C,c}(π0) (DP-HyPO eq. 3.1) and the App. C.1 variant."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from scipy.optimize import linprog

from dphypo.density import (
    draw,
    in_bounded_set,
    lower_bound_for_top_mass,
    project,
    softmax,
    top_mass_density,
    validate_prior,
)

SETTINGS = settings(max_examples=150, deadline=None)


# -- helpers -------------------------------------------------------------------------------------------------
def _kkt_gap(f: np.ndarray, p: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> float:
    """How far f is from clip(p − τ, lo, hi) for one τ (0 if exactly of that form), independent of solvers.

    Coordinates at lo need τ ≥ p − lo, at hi need τ ≤ p − hi, free ones need τ = p − f. Returns the width by
    which the largest lower requirement exceeds the smallest upper requirement.
    """
    # Within a few ulps of a bound counts as at the bound: the final drift correction may move an entry by
    # an ulp, and τ inferred from such an entry would be meaningless.
    at_lo, at_hi = f <= lo * (1 + 1e-13), f >= hi * (1 - 1e-13)
    free = ~(at_lo | at_hi)
    tau_free = p[free] - f[free]
    lower = np.concatenate(((p - lo)[at_lo & ~at_hi], tau_free))
    upper = np.concatenate(((p - hi)[at_hi & ~at_lo], tau_free))
    if lower.size == 0 or upper.size == 0:
        return 0.0
    return max(0.0, float(lower.max() - upper.min()))


def _assert_in_set(f: np.ndarray, prior: np.ndarray, C: float, c: float) -> None:
    pi0 = validate_prior(prior)
    assert np.all(np.isfinite(f))
    assert np.all(f >= c * pi0), "below the lower bound"
    assert np.all(f <= C * pi0), "above the upper bound"
    assert abs(f.sum() - 1.0) <= 1e-14


@st.composite
def problems(draw: st.DrawFn, max_n: int = 40) -> tuple[np.ndarray, np.ndarray, float, float]:
    """(density, prior, C, c): arbitrary real densities (with ties), uniform or non-uniform priors."""
    n = draw(st.integers(1, max_n))
    kind = draw(st.sampled_from(["reals", "ties", "softmax"]))
    if kind == "reals":
        p = draw(arrays(np.float64, n, elements=st.floats(-50, 50, allow_nan=False)))
    elif kind == "ties":
        p = draw(arrays(np.float64, n, elements=st.sampled_from([-1.0, 0.0, 0.25, 1.0, 3.0])))
    else:
        z = draw(arrays(np.float64, n, elements=st.floats(-3, 3)))
        p = softmax(z, draw(st.sampled_from([0.0, 1.0, 10.0, 100.0])))
    if draw(st.booleans()):
        prior = np.full(n, 1.0 / n)
    else:
        w = draw(arrays(np.float64, n, elements=st.floats(0.05, 20.0)))
        prior = w / w.sum()
    C = draw(st.sampled_from([1.0, 1.25, 2.0, 10.0]) | st.floats(1.0, 50.0))
    c = draw(st.sampled_from([1.0, 0.75, 0.1]) | st.floats(0.01, 1.0))
    return p, prior, C, c


# -- softmax -------------------------------------------------------------------------------------------------
def test_softmax_two_points_closed_form() -> None:
    f = softmax([0.3, 0.8], 4.0)
    assert f[1] == pytest.approx(1.0 / (1.0 + math.exp(-4.0 * 0.5)), rel=1e-15)
    assert f.sum() == pytest.approx(1.0, abs=4e-16)


def test_softmax_matches_definition_and_is_shift_invariant() -> None:
    rng = np.random.default_rng(0)
    s = rng.normal(size=50)
    expected = np.exp(2.5 * s) / np.exp(2.5 * s).sum()
    np.testing.assert_allclose(softmax(s, 2.5), expected, rtol=1e-13)
    np.testing.assert_allclose(softmax(s + 1e3, 2.5), expected, rtol=1e-10)


def test_softmax_huge_scores_do_not_overflow() -> None:
    np.testing.assert_array_equal(softmax([1e308, -1e308, 1e308], 1.0), [0.5, 0.0, 0.5])
    f = softmax([1000.0, 999.0], 1.0)
    assert f[0] == pytest.approx(1.0 / (1.0 + math.exp(-1.0)), rel=1e-15)


def test_softmax_is_batch_native_over_leading_dimensions() -> None:
    """A (2, 3) input is two densities over 3 points; β = 0 gives the uniform 1/3 in each row."""
    f = softmax(np.arange(6.0).reshape(2, 3), 0.0)
    assert f.shape == (2, 3)
    np.testing.assert_array_equal(f, np.full((2, 3), 1.0 / 3))
    z = np.random.default_rng(0).normal(size=(4, 5, 7))
    batch = softmax(z, 2.5)
    for index in np.ndindex(4, 5):
        np.testing.assert_array_equal(batch[index], softmax(z[index], 2.5))


@pytest.mark.parametrize(
    ("scores", "beta", "match"),
    [([1.0, np.nan], 1.0, "scores must be finite"), ([1.0], -1.0, "beta must be >= 0"),
     ([1.0], math.inf, "beta must be finite"), ([], 1.0, "non-empty")],
)
def test_softmax_rejects_bad_input(scores: list[float], beta: float, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        softmax(scores, beta)


# -- project: properties -------------------------------------------------------------------------------------
@SETTINGS
@given(problems())
def test_project_lands_in_set_and_has_kkt_form(problem: tuple) -> None:
    p, prior, C, c = problem
    f = project(p, prior, C, c)
    _assert_in_set(f, prior, C, c)
    assert in_bounded_set(f, prior, C, c, atol=1e-14)
    if c < C:
        pi0 = validate_prior(prior)  # the bounds project used: the prior renormalised to float round-off
        scale = max(1.0, float(np.abs(p).max()))
        assert _kkt_gap(f, p, c * pi0, C * pi0) <= 1e-12 * scale


@SETTINGS
@given(problems())
def test_project_exact_agrees_with_bisection(problem: tuple) -> None:
    p, prior, C, c = problem
    exact = project(p, prior, C, c)
    bisected = project(p, prior, C, c, solver="bisection")
    _assert_in_set(bisected, prior, C, c)
    np.testing.assert_allclose(exact, bisected, rtol=0, atol=1e-12 * max(1.0, float(np.abs(p).max())))


@SETTINGS
@given(problems())
def test_project_is_idempotent(problem: tuple) -> None:
    p, prior, C, c = problem
    f = project(p, prior, C, c)
    np.testing.assert_allclose(project(f, prior, C, c), f, rtol=1e-12, atol=1e-16)


@SETTINGS
@given(problems(), st.integers(0, 2**32 - 1))
def test_project_is_closest_among_feasible_points(problem: tuple, seed: int) -> None:
    p, prior, C, c = problem
    f = project(p, prior, C, c)
    other = project(np.random.default_rng(seed).normal(size=p.size), prior, C, c)
    assert np.sum((f - p) ** 2) <= np.sum((other - p) ** 2) + 1e-12 * max(1.0, float(np.sum(p**2)))


@SETTINGS
@given(problems(), st.integers(0, 2**32 - 1))
def test_feasible_input_is_returned_unchanged(problem: tuple, seed: int) -> None:
    _, prior, C, c = problem
    # A random convex combination of the prior and the extreme point that is as close to C·π0 as allowed.
    rng = np.random.default_rng(seed)
    corner = project(rng.normal(size=prior.size) * 100, prior, C, c)
    t = rng.uniform()
    feasible = t * prior + (1 - t) * corner
    assume(np.all(feasible >= c * prior) and np.all(feasible <= C * prior))
    np.testing.assert_allclose(project(feasible, prior, C, c), feasible, rtol=1e-12, atol=1e-17)
    np.testing.assert_allclose(project(prior, prior, C, c), prior, rtol=1e-12)


# -- project: closed forms and extremes ----------------------------------------------------------------------
def test_one_hot_upper_bound_binds() -> None:
    # n=10, C=2, c=0.75: the hot coordinate sits at C/n = 0.2, the others share the rest equally.
    f = project(np.eye(10)[3], np.full(10, 0.1), 2.0, 0.75)
    expected = np.full(10, 0.8 / 9)
    expected[3] = 0.2
    np.testing.assert_allclose(f, expected, rtol=1e-14)


def test_one_hot_lower_bound_binds() -> None:
    # n=10, C=10, c=0.5: the others sit at c/n = 0.05 and the hot coordinate takes 1 − 9·0.05 = 0.55.
    f = project(np.eye(10)[0], np.full(10, 0.1), 10.0, 0.5)
    np.testing.assert_allclose(f, [0.55] + [0.05] * 9, rtol=1e-14)


def test_constant_density_maps_to_uniform_and_keeps_shape() -> None:
    f = project(np.full((4, 5), -7.0), np.full((4, 5), 0.05), 2.0, 0.5)
    assert f.shape == (4, 5)
    np.testing.assert_allclose(f, 0.05, rtol=1e-15)


def test_single_point_grid_returns_one() -> None:
    np.testing.assert_array_equal(project([123.0], [1.0], 5.0, 0.2), [1.0])


def test_c_equal_to_C_returns_the_prior_exactly() -> None:
    prior = np.random.default_rng(1).uniform(0.1, 1.0, size=37)
    prior /= prior.sum()
    for solver in ("exact", "bisection"):
        np.testing.assert_array_equal(project(np.arange(37.0), prior, 1.0, 1.0, solver=solver), validate_prior(prior))


@pytest.mark.parametrize(
    "p",
    [np.array([1e150, -1e150, 0.0, 3.0]), np.array([1e12 + 1.0, 1e12, 1e12 - 1.0]), -np.arange(1.0, 30.0),
     np.array([1e-300, 0.0, -1e-300]), np.full(9, 1e200)],
)
@pytest.mark.parametrize("C_c", [(2.0, 0.75), (10.0, 0.1), (1.0, 0.5), (3.0, 1.0)])
def test_extreme_inputs_stay_in_set(p: np.ndarray, C_c: tuple[float, float]) -> None:
    prior = np.linspace(1.0, 2.0, p.size)
    prior /= prior.sum()
    for solver in ("exact", "bisection"):
        _assert_in_set(project(p, prior, *C_c, solver=solver), prior, *C_c)


def test_large_offset_is_removed_before_projecting() -> None:
    # Adding a constant does not change the projection (Σf is fixed); the offset must not cost precision.
    p = np.array([0.5, 0.2, 0.2, 0.1])
    prior = np.full(4, 0.25)
    np.testing.assert_allclose(project(p + 1e9, prior, 2.0, 0.5), project(p, prior, 2.0, 0.5), atol=1e-7)
    # Bounds [0.125, 0.5]: 0.1 is lifted to 0.125 and the other three give up 0.025 / 3 each.
    expected = np.array([0.5, 0.2, 0.2, 0.125]) - np.array([1, 1, 1, 0]) * 0.025 / 3
    np.testing.assert_allclose(project(p, prior, 2.0, 0.5), expected, rtol=1e-14)


def test_many_ties_large_n() -> None:
    rng = np.random.default_rng(3)
    p = rng.integers(0, 4, size=5000).astype(float) / 5000
    prior = rng.integers(1, 3, size=5000).astype(float)
    prior /= prior.sum()
    f = project(p, prior, 2.0, 0.75)
    _assert_in_set(f, prior, 2.0, 0.75)
    pi0 = validate_prior(prior)
    assert _kkt_gap(f, p, 0.75 * pi0, 2.0 * pi0) <= 1e-15


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"C": 2.0, "c": 0.0}, "c must satisfy"), ({"C": 2.0, "c": 1.5}, "c must satisfy"),
     ({"C": 0.9, "c": 0.5}, "C must satisfy"), ({"C": math.nan, "c": 0.5}, "C must be finite"),
     ({"C": 2.0, "c": 0.5, "solver": "magic"}, "solver must be")],
)
def test_project_rejects_bad_parameters(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        project([0.5, 0.5], [0.5, 0.5], **kwargs)


@pytest.mark.parametrize(
    ("density", "prior", "match"),
    [([0.5, np.inf], [0.5, 0.5], "density must be finite"), ([0.5, 0.5], [1.0, 0.0], "strictly positive"),
     ([0.5, 0.5], [0.5, 0.4], "prior must sum to 1"), ([0.5, 0.5], [1 / 3] * 3, "shape"),
     ([1e300, -1e300], [0.5, 0.5], "spread"), ([], [], "non-empty")],
)
def test_project_rejects_bad_arrays(density: list, prior: list, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        project(density, prior, 2.0, 0.5)


def test_prior_drift_is_renormalised_and_round_off_left_alone() -> None:
    prior = np.full(4, 0.25 * (1 + 1e-12))
    np.testing.assert_array_equal(validate_prior(prior), np.full(4, 0.25))
    f = project([1.0, 0.0, 0.0, 0.0], prior, 2.0, 0.5)
    _assert_in_set(f, prior, 2.0, 0.5)
    w = np.random.default_rng(7).uniform(size=1000)
    normalised = w / w.sum()
    assert normalised.sum() != 1.0  # round-off: this prior must be used as is (idempotence)
    np.testing.assert_array_equal(validate_prior(normalised), normalised)


def test_in_bounded_set() -> None:
    prior = np.full(4, 0.25)
    assert in_bounded_set([0.4, 0.2, 0.2, 0.2], prior, 2.0, 0.5)
    assert not in_bounded_set([0.6, 0.2, 0.1, 0.1], prior, 2.0, 0.5)  # 0.6 > C·π0 = 0.5
    assert not in_bounded_set([0.4, 0.3, 0.2, 0.2], prior, 2.0, 0.5)  # sums to 1.1
    assert not in_bounded_set([0.5, 0.5], prior, 2.0, 0.5)  # wrong shape


# -- cvxpy reference -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [40, 320])
@pytest.mark.parametrize(("C", "c", "beta"), [(2.0, 0.75, 1.0), (2.0, 0.75, 100.0), (10.0, 0.1, 300.0)])
def test_exact_matches_cvxpy_on_rescaled_problem(n: int, C: float, c: float, beta: float) -> None:
    pytest.importorskip("cvxpy")
    rng = np.random.default_rng(n)
    p = softmax(rng.normal(size=n), beta)
    w = rng.uniform(0.5, 2.0, size=n)
    for prior in (np.full(n, 1.0 / n), w / w.sum()):
        exact = project(p, prior, C, c)
        reference = project(p, prior, C, c, solver="cvxpy")
        np.testing.assert_allclose(exact, reference, rtol=1e-8, atol=0)


# -- batch-native ---------------------------------------------------------------------------------------------
def _peaked(rng: np.random.Generator, n: int, beta: float) -> np.ndarray:
    z = rng.normal(size=n)
    weights = np.exp(beta * (z - z.max()))
    return weights / weights.sum()


@pytest.mark.parametrize("n", [2, 7, 320, 2500])
@pytest.mark.parametrize("bounds", [(2.0, 0.75), (10.0, 0.1), (1.0, 0.5), (3.0, 1.0), (1.0, 1.0), (1e6, 1e-6)])
def test_project_is_batch_native(n: int, bounds: tuple[float, float]) -> None:
    """Flat to very peaked softmaxes, a non-probability vector with a large offset, constants, the prior.

    A batch is projected density by density: every row equals the batch of one bit for bit.
    """
    rng = np.random.default_rng(n)
    weights = rng.uniform(0.2, 2.0, n)
    for prior in (np.full(n, 1.0 / n), weights / weights.sum()):
        rows = [_peaked(rng, n, beta) for beta in (0.0, 0.1, 1.0, 10.0, 50.0)]
        rows += [rng.normal(size=n) * 1e3 + 1e6, np.zeros(n), prior]
        densities = np.array(rows)
        batched = project(densities.reshape(2, 4, n), prior, *bounds)
        assert batched.shape == (2, 4, n)
        for row, density in zip(batched.reshape(8, n), densities, strict=True):
            np.testing.assert_array_equal(row, project(density, prior, *bounds))
        assert np.all(in_bounded_set(batched, prior, *bounds))
        assert in_bounded_set(batched, prior, *bounds).shape == (2, 4)


def test_project_batch_with_a_row_needing_bisection_leaves_the_others_alone(monkeypatch) -> None:
    import dphypo.density as density_module

    rng = np.random.default_rng(0)
    prior, rows = np.full(50, 0.02), np.array([_peaked(rng, 50, beta) for beta in (1.0, 5.0, 20.0)])
    exact = project(rows, prior, 2.0, 0.5)
    monkeypatch.setattr(density_module, "_BRACKET_TOL", -1.0)  # distrust every bracket: all rows bisected
    bisected = project(rows, prior, 2.0, 0.5)
    np.testing.assert_allclose(bisected, exact, rtol=1e-12, atol=1e-15)


def test_batch_shapes_are_checked() -> None:
    prior = np.full(4, 0.25)
    with pytest.raises(ValueError, match="shape"):
        project(np.ones((3, 5)), prior, 2.0, 0.5)
    with pytest.raises(ValueError, match="C must"):
        project(np.ones((1, 4)), prior, 0.5, 0.5)
    assert in_bounded_set(np.ones((3, 5)) / 5, prior, 2.0, 0.5).tolist() == [False, False, False]
    f = np.array([[0.4, 0.2, 0.2, 0.2], [0.6, 0.2, 0.1, 0.1], [0.25, 0.25, 0.25, np.nan]])
    assert in_bounded_set(f, prior, 2.0, 0.5).tolist() == [True, False, False]


def test_draw_is_the_inverse_cdf_over_a_batch() -> None:
    rng = np.random.default_rng(3)
    densities = rng.dirichlet(np.ones(50), size=30)
    uniforms = rng.random(30)
    batch = draw(densities, uniforms)
    for density, u, index in zip(densities, uniforms, batch, strict=True):
        cdf = np.cumsum(density)
        assert index == min(int(np.searchsorted(cdf, u * cdf[-1], side="right")), 49)
        assert draw(density, u) == index  # the batch of one
    # One density, many uniforms: one draw per uniform.
    assert draw(densities[0], uniforms).tolist() == [int(draw(densities[0], u)) for u in uniforms]
    assert draw(np.array([0.5, 0.5, 0.0]), np.nextafter(1.0, 0.0)) == 1  # never a zero-mass tail point
    assert draw(np.array([0.0, 0.0, 1.0]), 0.0) == 2


# -- top_mass_density / lower_bound_for_top_mass (issue #15: update rules that use the bounded set well) --------
def test_top_mass_density_closed_forms() -> None:
    # Uniform prior on 10 points, C = 2, c = 0.75: the top set has mass (1 − c)/(C − c) = 0.2, i.e. 2 points.
    f = top_mass_density(np.arange(10.0), np.full(10, 0.1), 2.0, 0.75)
    np.testing.assert_allclose(f, [0.075] * 8 + [0.2, 0.2], rtol=0, atol=1e-15)
    # C = 2, c = 0.5 on 4 points: the extra mass 0.5 fills point 3 to 0.5 and point 2 to 0.25 (fractional).
    f = top_mass_density([0.0, 1.0, 3.0, 9.0], np.full(4, 0.25), 2.0, 0.5)
    np.testing.assert_allclose(f, [0.125, 0.125, 0.25, 0.5], rtol=0, atol=1e-15)
    # C = c = 1: the prior whatever the priorities; ties go to the lower index.
    np.testing.assert_allclose(top_mass_density([5.0, 1.0, 7.0], [0.2, 0.3, 0.5], 1.0, 1.0), [0.2, 0.3, 0.5])
    np.testing.assert_allclose(top_mass_density(np.zeros(4), np.full(4, 0.25), 2.0, 0.5), [0.5, 0.25, 0.125, 0.125])
    tied = top_mass_density(np.ones(4), np.full(4, 0.25), 2.0, 0.5, tiebreak=[0.0, 3.0, 1.0, 2.0])
    np.testing.assert_allclose(tied, [0.125, 0.5, 0.125, 0.25])  # equal priorities: the higher tiebreak first


@pytest.mark.parametrize("seed", range(20))
def test_top_mass_density_is_the_linear_programme_optimum_in_the_set(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 40))
    prior = rng.dirichlet(np.ones(n))
    C, c = 1.0 + 3.0 * rng.random(), 0.05 + 0.95 * rng.random()
    w = rng.normal(size=n)
    f = top_mass_density(w, prior, C, c)
    assert in_bounded_set(f, prior, C, c)
    best = linprog(-w, A_eq=np.ones((1, n)), b_eq=[1.0], bounds=list(zip(c * prior, C * prior, strict=True)))
    assert best.status == 0
    assert w @ f >= -best.fun - 1e-9  # no density in S_{C,c} does better (fractional knapsack, Dantzig 1957)
    batch = top_mass_density(np.stack([w, -w]), prior, C, c)
    np.testing.assert_allclose(batch[0], f, rtol=0, atol=1e-15)
    np.testing.assert_allclose(batch[1], top_mass_density(-w, prior, C, c), rtol=0, atol=1e-15)


def test_lower_bound_for_top_mass_is_the_ratio_the_rest_must_keep() -> None:
    assert lower_bound_for_top_mass(2.0, 0.05) == pytest.approx(0.9 / 0.95, rel=1e-15)  # ≈ 0.947, not 0.75
    c = lower_bound_for_top_mass(2.0, 0.1)
    f = top_mass_density(np.arange(20.0), np.full(20, 0.05), 2.0, c)
    np.testing.assert_allclose(f[-2:], 0.1, rtol=1e-12)  # C·π⁰ on exactly mass 0.1 ...
    np.testing.assert_allclose(f[:-2], c * 0.05, rtol=1e-12)  # ... and the rest at exactly c·π⁰
    for bad in ((1.0, 0.1), (2.0, 0.5), (2.0, 0.0), (float("nan"), 0.1)):
        with pytest.raises(ValueError, match="must be"):
            lower_bound_for_top_mass(*bad)
    with pytest.raises(ValueError, match="priority must have shape"):
        top_mass_density(np.ones(3), np.full(4, 0.25), 2.0, 0.5)

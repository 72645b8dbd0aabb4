"""Base privacy profiles: PLD profiles vs dp_accounting's accountant, closed forms and exact discrete laws."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting import dp_event, privacy_accountant
from dp_accounting.pld import pld_privacy_accountant, privacy_loss_distribution

from dphypo.privacy.profiles import (
    DiscreteProfile,
    GaussianProfile,
    MaxProfile,
    PldProfile,
    dpsgd_profile,
    hockey_stick,
)

MNIST_Q = 256 / 60000


def test_gaussian_profile_matches_the_notes_base_values() -> None:
    # KRW notes §5.3: Gaussian σ = 4, Δ = 1: δ(0.5) = 2.71e-3, δ(1.0) = 2.92e-6, δ(1.5) = 8.2e-11.
    got = GaussianProfile(4.0).delta(np.array([0.5, 1.0, 1.5]))
    np.testing.assert_allclose(got, [2.71e-3, 2.92e-6, 8.2e-11], rtol=5e-3)


def test_gaussian_profile_equals_pessimistic_pld_of_the_gaussian_mechanism() -> None:
    pld = privacy_loss_distribution.from_gaussian_mechanism(2.0, value_discretization_interval=1e-4)
    eps = np.linspace(-1.0, 3.0, 41)
    exact = GaussianProfile(2.0).delta(eps)
    pessimistic = PldProfile(pld).delta(eps)
    assert np.all(pessimistic >= exact * (1 - 1e-12))  # an upper bound ...
    np.testing.assert_allclose(pessimistic, exact, rtol=2e-3, atol=1e-12)  # ... and a tight one


def test_gaussian_profile_is_stable_in_the_far_tail_and_inverts() -> None:
    g = GaussianProfile(1.0)
    d = g.delta(np.array([5.0, 10.0, 20.0]))
    assert np.all(d > 0.0) and np.all(np.diff(d) < 0.0)
    # Chernoff: δ(ε) ≤ P(ω ≥ ε) with ω ~ N(1/2, 1) (the privacy-loss variable, Balle & Wang 2018).
    assert d[1] <= math.exp(-((10.0 - 0.5) ** 2) / 2.0)
    for delta in (1e-3, 1e-6, 1e-12):
        eps = g.epsilon(delta)
        assert float(g.delta(eps)) <= delta < float(g.delta(eps - 1e-6))


def test_dpsgd_profile_matches_dp_accounting_pld_accountant_with_add_or_remove() -> None:
    sigma, steps = 1.0, 300
    profile = dpsgd_profile(sigma, MNIST_Q, steps)
    accountant = pld_privacy_accountant.PLDAccountant(
        privacy_accountant.NeighboringRelation.ADD_OR_REMOVE_ONE, value_discretization_interval=1e-4
    )
    accountant.compose(
        dp_event.SelfComposedDpEvent(
            dp_event.PoissonSampledDpEvent(MNIST_Q, dp_event.GaussianDpEvent(sigma)), steps
        )
    )
    for delta in (1e-3, 1e-5, 1e-8):
        assert profile.epsilon(delta) == pytest.approx(accountant.get_epsilon(delta), rel=1e-6, abs=1e-9)
    for eps in (0.0, 0.3, 1.0):
        assert float(profile.delta(eps)) == pytest.approx(accountant.get_delta(eps), rel=1e-6, abs=1e-15)


def test_dpsgd_profile_covers_both_directions_which_differ() -> None:
    profile = dpsgd_profile(0.8, 0.05, 50)
    pld = profile.pld
    eps = np.linspace(-0.5, 3.0, 36)
    remove = np.array([pld._pmf_remove.get_delta_for_epsilon(float(e)) for e in eps])
    add = np.array([pld._pmf_add.get_delta_for_epsilon(float(e)) for e in eps])
    got = profile.delta(eps)
    np.testing.assert_allclose(got, np.maximum(remove, add), rtol=1e-9, atol=1e-15)
    # Subsampled add/remove is asymmetric: each direction is the larger one somewhere, so a one-sided profile
    # would be too small at some ε.
    assert np.any(remove > add * (1 + 1e-6)) and np.any(add > remove * (1 + 1e-6))


def test_dpsgd_profile_vectorised_delta_equals_dp_accounting_scalar_path_any_order() -> None:
    profile = dpsgd_profile(0.64, MNIST_Q, 2344)
    rng = np.random.default_rng(0)
    eps = rng.uniform(-2.0, 8.0, size=40)  # unsorted, negative ε included
    reference = np.array([profile.pld.get_delta_for_epsilon(float(e)) for e in eps])
    np.testing.assert_allclose(profile.delta(eps), reference, rtol=1e-9, atol=1e-15)


def test_dpsgd_profile_is_cached_and_regression_fig6_base_epsilon() -> None:
    a = dpsgd_profile(1.1, MNIST_Q, 14063)
    assert dpsgd_profile(1.1, MNIST_Q, 14063) is a
    # KRW notes §5.5 (Fig. 6, PLD interval 1e-4): base ε = 2.382 (δ=1e-5), 2.697 (δ=1e-6).
    assert a.epsilon(1e-5) == pytest.approx(2.382, abs=2e-3)
    assert a.epsilon(1e-6) == pytest.approx(2.697, abs=2e-3)


def test_dpsgd_profile_without_subsampling_is_the_composed_gaussian() -> None:
    # 4 full-batch steps at σ = 2 are one Gaussian mechanism with σ/√4 = 1.
    profile = dpsgd_profile(2.0, 1.0, 4)
    eps = np.array([0.0, 0.5, 1.0, 2.0, 3.0])
    np.testing.assert_allclose(profile.delta(eps), GaussianProfile(1.0).delta(eps), rtol=3e-3, atol=1e-12)


def test_pld_compose_matches_composed_gaussian() -> None:
    one = PldProfile(
        privacy_loss_distribution.from_gaussian_mechanism(1.0, value_discretization_interval=1e-4)
    )
    both = one.compose(one)
    eps = np.array([0.0, 1.0, 2.0])
    np.testing.assert_allclose(both.delta(eps), GaussianProfile(1.0 / math.sqrt(2.0)).delta(eps), rtol=3e-3)


def test_discrete_profile_is_symmetric_exact_and_tv_at_zero() -> None:
    p = np.array([0.5, 0.3, 0.2])
    q = np.array([0.2, 0.3, 0.5])
    prof = DiscreteProfile(p, q)
    assert prof.total_variation() == pytest.approx(0.3)
    # H_{e^ε}(p‖q) by hand at ε = log 2: [0.5 − 0.4]_+ + [0.3 − 0.6]_+ + [0.2 − 1.0]_+ = 0.1.
    assert float(hockey_stick(p, q, math.log(2.0))) == pytest.approx(0.1)
    assert float(prof.delta(math.log(2.0))) == pytest.approx(0.1)
    swapped = DiscreteProfile(q, p)
    eps = np.linspace(-1, 2, 13)
    np.testing.assert_allclose(prof.delta(eps), swapped.delta(eps))
    # pure ε = log(5/2): δ vanishes exactly there.
    assert float(prof.delta(math.log(2.5))) == pytest.approx(0.0, abs=1e-15)
    assert prof.epsilon(1e-9) == pytest.approx(math.log(2.5), abs=1e-6)


def test_max_profile_dominates_members_and_inverts_as_the_max() -> None:
    a, b = GaussianProfile(1.0), GaussianProfile(2.0, sensitivity=1.5)
    m = MaxProfile([a, b])
    eps = np.linspace(0, 3, 7)
    np.testing.assert_allclose(m.delta(eps), np.maximum(a.delta(eps), b.delta(eps)))
    assert m.epsilon(1e-5) == pytest.approx(max(a.epsilon(1e-5), b.epsilon(1e-5)))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"sigma": 0.0, "sample_rate": 0.1, "steps": 1}, "sigma"),
        ({"sigma": 1.0, "sample_rate": 0.0, "steps": 1}, "sample_rate"),
        ({"sigma": 1.0, "sample_rate": 0.1, "steps": 0}, "steps"),
        ({"sigma": 1.0, "sample_rate": 0.1, "steps": 1, "discretization": 1.0}, "discretization"),
    ],
)
def test_dpsgd_profile_validates_eagerly(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        dpsgd_profile(**kwargs)


def test_profiles_validate_inputs() -> None:
    with pytest.raises(ValueError, match="delta"):
        GaussianProfile(1.0).epsilon(0.0)
    with pytest.raises(ValueError, match="p_prime"):
        DiscreteProfile(np.array([0.5, 0.5]), np.array([1.0]))
    with pytest.raises(ValueError, match="probability vector"):
        DiscreteProfile(np.array([0.5, 0.6]), np.array([0.5, 0.5]))
    with pytest.raises(ValueError, match="profiles"):
        MaxProfile([])


def test_a_profile_whose_tail_delta_is_float_noise_builds_and_stays_conservative() -> None:
    # Met calibrating σ_ref for the 4-D digits family (batch 32 × 5 epochs): at the self-check's probe ε = 2 one of the
    # composed PLDs has δ = 1.0e-15 (its infinity mass) where dp_accounting's scalar path returns -9.6e-16; the
    # self-check refused this valid profile.
    from dphypo.privacy.dpsgd_run import dpsgd_run_profile

    profile = dpsgd_run_profile(1.8864215492466567, 1 / 34, 170, score_noise=0.02 * 359)
    reference = float(profile.pld.get_delta_for_epsilon(2.0))
    # The max over both directions is the remove direction's δ ≈ 1.8e-13, where the suffix sums and dp_accounting's
    # loop add the same terms in a different order: they agree to rounding (a few ulps), on either side.
    assert abs(float(profile.delta(2.0)) - max(reference, 0.0)) <= 1e-12 * max(reference, 0.0) + 1e-14
    # The float-noise direction (add): δ at its infinity-mass level is kept, never cancelled below it.
    for table in profile._tables:
        assert float(table.delta(2.0)) >= table.infinity_mass > 0.0

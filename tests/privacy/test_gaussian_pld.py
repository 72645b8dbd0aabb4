"""The array construction of dp_accounting's subsampled-Gaussian PLD and its composition, against dp_accounting."""

from __future__ import annotations

import numpy as np
import pytest
from dp_accounting import privacy_accountant
from dp_accounting.pld import privacy_loss_distribution, privacy_loss_mechanism

from dphypo.privacy import gaussian_pld
from dphypo.privacy.profiles import GaussianProfile, PldProfile, dpsgd_profile, gaussian_step_pld


def _reference(sigma: float, q: float, d: float):
    return privacy_loss_distribution.from_gaussian_mechanism(
        standard_deviation=sigma, sensitivity=1.0, pessimistic_estimate=True, value_discretization_interval=d,
        sampling_prob=q, use_connect_dots=True,
        neighboring_relation=privacy_accountant.NeighboringRelation.ADD_OR_REMOVE_ONE,
    )


def _pairs(ours, reference):
    assert ours._symmetric == reference._symmetric
    return [(ours._pmf_remove, reference._pmf_remove.to_dense_pmf()),
            (ours._pmf_add, reference._pmf_add.to_dense_pmf())]


def _assert_same_pld(ours, reference) -> None:
    for mine, theirs in _pairs(ours, reference):
        assert mine._discretization == theirs._discretization
        assert mine._lower_loss == theirs._lower_loss
        assert mine._probs.shape == theirs._probs.shape
        np.testing.assert_allclose(mine._probs, theirs._probs, rtol=1e-12, atol=0.0)
        np.testing.assert_allclose(mine._infinity_mass, theirs._infinity_mass, rtol=1e-12, atol=0.0)


# (σ, q, d): q = 1 (symmetric), DP-SGD-like rates, q near 1, a tiny σ (wide grid), huge σ (one or a few points).
GRID = [
    (1.0, 1.0, 1e-3), (0.9, 0.0593, 1e-3), (2.5, 0.0593, 1e-4), (0.7, 0.5, 1e-3), (1.3, 0.999, 1e-3),
    (3.0, 1e-4, 1e-3), (0.05, 0.01, 0.05), (0.05, 1.0, 0.05), (300.0, 0.2, 1e-3), (1e4, 0.01, 1e-4),
    (1e4, 1.0, 1e-3), (0.6, 0.0043, 3e-3),
]


@pytest.mark.parametrize(("sigma", "q", "d"), GRID)
def test_step_pld_equals_dp_accounting(sigma: float, q: float, d: float) -> None:
    """Same lower loss index, same masses to 1e-12 relative, same infinity mass, both directions."""
    _assert_same_pld(gaussian_pld.subsampled_gaussian_pld(sigma, q, d), _reference(sigma, q, d))


@pytest.mark.parametrize(("sigma", "q", "d", "steps"), [(0.9, 0.0593, 1e-3, 170), (1.0, 1.0, 1e-3, 5),
                                                         (0.05, 0.01, 0.05, 4), (1e4, 0.01, 1e-4, 10**4)])
def test_composed_epsilon_equals_dp_accounting(sigma: float, q: float, d: float, steps: int) -> None:
    """Self-composition (bounds on arrays) equals dp_accounting's on dp_accounting's own step, and so does ε."""
    reference = _reference(sigma, q, d).self_compose(steps)
    ours = gaussian_pld.self_compose(gaussian_pld.subsampled_gaussian_pld(sigma, q, d), steps)
    _assert_same_pld(ours, reference)
    assert gaussian_pld.composed_size(gaussian_pld.subsampled_gaussian_pld(sigma, q, d), steps, 1e-15) == max(
        reference._pmf_remove.size, reference._pmf_add.size)
    for delta in (1e-5, 1e-8):
        assert ours.get_epsilon_for_delta(delta) == pytest.approx(reference.get_epsilon_for_delta(delta), rel=1e-12)


def test_self_convolve_bounds_equal_dp_accounting() -> None:
    from dp_accounting.pld import common

    probs = gaussian_pld.subsampled_gaussian_pld(0.8, 0.02, 1e-3)._pmf_add._probs
    for steps in (1, 2, 37, 1000, 10**7):
        assert gaussian_pld.self_convolve_bounds(probs, steps, 1e-15) == common.compute_self_convolve_bounds(
            probs, steps, 1e-15)
    assert gaussian_pld.self_convolve_bounds(probs, 5, 0.0) == (0, (probs.size - 1) * 5)


def test_compose_equals_dp_accounting() -> None:
    """Composition with a Gaussian release (tail truncation by cumsum) equals PrivacyLossDistribution.compose."""
    run = gaussian_pld.self_compose(gaussian_pld.subsampled_gaussian_pld(1.1, 0.05, 1e-3), 40)
    score = _reference(7.18, 1.0, 1e-3)
    for first, second in ((run, score), (score, run), (score, score)):
        ours = gaussian_pld.compose(first, second)
        reference = first.compose(second)
        for mine, theirs in _pairs(ours, reference):
            assert (mine._lower_loss, mine._probs.size) == (theirs._lower_loss, theirs._probs.size)
            np.testing.assert_array_equal(mine._probs, theirs._probs)
            assert mine._infinity_mass == theirs._infinity_mass


@pytest.mark.parametrize(("sigma", "q"), [(0.9, 0.0593), (0.7, 0.5), (1.0, 1.0), (0.05, 0.3)])
def test_step_pld_is_pessimistic(sigma: float, q: float) -> None:
    """No mass is dropped, and δ(ε) of the PLD bounds the mechanism's exact hockey-stick divergence from above."""
    d = 0.05 if sigma < 0.1 else 1e-3
    pld = gaussian_pld.subsampled_gaussian_pld(sigma, q, d)
    for pmf in (pld._pmf_remove, pld._pmf_add):
        assert np.all(pmf._probs >= 0.0)
        assert pmf._probs.sum() + pmf._infinity_mass >= 1.0 - 1e-12
    eps = np.linspace(-1.0, 4.0, 41)
    profile = PldProfile(pld)
    exact = np.zeros_like(eps)
    for adjacency in (privacy_loss_mechanism.AdjacencyType.REMOVE, privacy_loss_mechanism.AdjacencyType.ADD):
        loss = privacy_loss_mechanism.GaussianPrivacyLoss(sigma, sampling_prob=q, adjacency_type=adjacency)
        exact = np.maximum(exact, loss.get_delta_for_epsilon(eps))
    assert np.all(profile.delta(eps) >= exact - 1e-15)
    if q == 1.0:
        assert np.all(profile.delta(eps) >= GaussianProfile(sigma).delta(eps) - 1e-15)


def test_step_pld_calls_no_per_point_python_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """dp_accounting's inverse loss is called for the spot checks only, not once per grid point (≈ 10 µs each)."""
    calls = []
    original = privacy_loss_mechanism.AdditiveNoisePrivacyLoss.inverse_privacy_loss

    def counted(self, privacy_loss):
        calls.append(privacy_loss)
        return original(self, privacy_loss)

    monkeypatch.setattr(privacy_loss_mechanism.AdditiveNoisePrivacyLoss, "inverse_privacy_loss", counted)
    pld = gaussian_pld.subsampled_gaussian_pld(0.9, 0.0593, 1e-3)
    assert pld._pmf_remove.size > 5000
    assert len(calls) <= 2 * gaussian_pld._SPOT_CHECKS


def test_spot_check_catches_a_changed_upstream(monkeypatch: pytest.MonkeyPatch) -> None:
    """A construction that drifts from dp_accounting's own δ(ε) fails loudly instead of returning a wrong PLD."""
    original = gaussian_pld._hockey_stick
    monkeypatch.setattr(gaussian_pld, "_hockey_stick", lambda loss, eps: original(loss, eps) * 0.999)
    with pytest.raises(RuntimeError, match="disagrees with dp_accounting"):
        gaussian_pld.subsampled_gaussian_pld(1.0, 0.1, 1e-3)


def test_profiles_use_the_array_construction() -> None:
    """dpsgd_profile and gaussian_step_pld give dp_accounting's numbers (composed ε, step PMFs)."""
    reference = _reference(1.2, 0.03, 1e-3).self_compose(60)
    profile = dpsgd_profile(1.2, 0.03, 60, discretization=1e-3)
    assert profile.epsilon(1e-5) == pytest.approx(reference.get_epsilon_for_delta(1e-5), rel=1e-12)
    _assert_same_pld(gaussian_step_pld(7.18, 1.0, 1e-3), _reference(7.18, 1.0, 1e-3))
    with pytest.raises(ValueError, match="sigma"):
        gaussian_step_pld(0.0, 1.0, 1e-3)


def test_invalid_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="sigma"):
        gaussian_pld.subsampled_gaussian_pld(-1.0, 0.1, 1e-3)
    with pytest.raises(ValueError, match="sample_rate"):
        gaussian_pld.subsampled_gaussian_pld(1.0, 0.0, 1e-3)
    with pytest.raises(ValueError, match="discretization"):
        gaussian_pld.subsampled_gaussian_pld(1.0, 0.1, 0.0)
    with pytest.raises(ValueError, match="num_times"):
        gaussian_pld.self_compose(gaussian_pld.subsampled_gaussian_pld(1.0, 0.1, 1e-2), 0)


def test_pld_profile_builds_its_tables_on_first_use_and_checks_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """A PLD that is only composed further never pays for its suffix-sum tables; a used one is still checked."""
    profile = PldProfile(gaussian_pld.subsampled_gaussian_pld(1.0, 0.1, 1e-3))
    assert profile._table_cache is None
    assert profile.delta(0.5) > 0.0
    assert profile._table_cache is not None
    broken = PldProfile(gaussian_pld.subsampled_gaussian_pld(1.0, 0.1, 1e-3))
    monkeypatch.setattr(type(broken.pld), "get_delta_for_epsilon", lambda self, eps: 0.5)
    with pytest.raises(RuntimeError, match="disagrees with dp_accounting"):
        broken.epsilon(1e-5)

"""Per-candidate σ under one reference: dominance (RDP and profiles, checked by dp_accounting), minimality, refusals."""

from __future__ import annotations

import numpy as np
import pytest
from dp_accounting import pld, rdp

from dphypo.privacy import (
    DEFAULT_ORDERS,
    CandidateRun,
    DominanceError,
    PrivacyAccounting,
    ReferenceRun,
    RepeatAndSelect,
    calibrate_dpsgd_sigma,
    calibrate_heterogeneous,
    geometric,
    plan_heterogeneous,
)
from dphypo.privacy.accountant import check_same_mechanism
from dphypo.privacy.events import compose_events, dpsgd_event, gaussian_event
from dphypo.privacy.heterogeneous import (
    PROFILE_SLACK,
    HeterogeneousPlan,
    SlackedProfile,
    dominating_sigma,
    opacus_sample_rate,
    opacus_steps,
    profile_excess,
    reference_for,
    threshold_epsilon,
    threshold_sigma,
    trimmed_orders,
)
from dphypo.privacy.run_counts import Poisson
from dphypo.train import DPSGDMechanism

SCORE_NOISE = 5.0
#: Dense ε grid of the profile checks (the accountant evaluates profiles at ε ≥ 0 only).
EPSILONS = np.concatenate([np.linspace(0.0, 2.0, 401), np.linspace(2.0, 30.0, 561)])

# Several grids: digits-sized (n = 1437) with batch × epochs, a larger set with 3 batch sizes, and a grid whose
# candidates differ in epochs only. The first candidate of each grid is the default reference or not, by design.
GRIDS = {
    "digits-2x2": (1437, [(64, 5), (64, 20), (128, 5), (128, 20)]),
    "n5000-3x1": (5000, [(50, 2), (250, 2), (1000, 2)]),
    "epochs-only": (1437, [(100, 2), (100, 4), (100, 8)]),
}


def _candidates(name: str) -> list[CandidateRun]:
    n_train, points = GRIDS[name]
    return [CandidateRun.from_batch(n_train, b, e) for b, e in points]


def _event(candidate: CandidateRun | ReferenceRun, sigma: float):
    return compose_events(dpsgd_event(sigma, candidate.sample_rate, candidate.steps), gaussian_event(SCORE_NOISE))


def _oracle_rdp(candidate: CandidateRun | ReferenceRun, sigma: float) -> np.ndarray:
    """dp_accounting's RDP accountant on the run's DP-SGD event, at every default order, as a running minimum from
    the right (D_α is non-decreasing in α: a higher order's bound holds at every lower one), plus the score
    release's Gaussian closed form α / (2 s²) (Mironov 2017, Prop. 7)."""
    accountant = rdp.RdpAccountant(list(DEFAULT_ORDERS))
    accountant.compose(dpsgd_event(sigma, candidate.sample_rate, candidate.steps))
    raw = np.asarray(accountant._rdp, dtype=np.float64)
    envelope = np.array([np.min(raw[j:]) for j in range(raw.size)])
    return envelope + DEFAULT_ORDERS / (2.0 * SCORE_NOISE**2)


def _oracle_directions(candidate: CandidateRun | ReferenceRun, sigma: float) -> list[np.ndarray]:
    """dp_accounting's PLD accountant on the run's DpEvent: δ(ε) of the remove and the add PLD, on EPSILONS."""
    accountant = pld.PLDAccountant(value_discretization_interval=1e-4)
    accountant.compose(_event(candidate, sigma))
    loss = accountant._pld
    pmfs = [loss._pmf_remove] if loss._symmetric else [loss._pmf_remove, loss._pmf_add]
    return [np.asarray(p.get_delta_for_epsilon(EPSILONS), dtype=np.float64) for p in pmfs]


@pytest.fixture(scope="module", params=sorted(GRIDS))
def plan(request: pytest.FixtureRequest) -> HeterogeneousPlan:
    candidates = _candidates(request.param)
    reference = reference_for(candidates, SCORE_NOISE)
    return plan_heterogeneous(candidates, reference, 1.3, profiles=True)


def test_every_candidate_is_rdp_dominated_at_every_order(plan: HeterogeneousPlan) -> None:
    reference = _oracle_rdp(plan.reference, plan.sigma_ref)
    # the accountant's base is dp_accounting's curve, enveloped (the score's Gaussian part is already monotone)
    np.testing.assert_allclose(plan.base_rdp().epsilons, reference, rtol=1e-12)
    for candidate, sigma in zip(plan.candidates, plan.sigmas, strict=True):
        assert np.all(_oracle_rdp(candidate, sigma) <= reference), candidate.describe()


def test_every_candidate_profile_is_dominated_in_both_directions(plan: HeterogeneousPlan) -> None:
    reference = _oracle_directions(plan.reference, plan.sigma_ref)
    assert 0.0 <= plan.profile_slack <= PROFILE_SLACK
    for candidate, sigma in zip(plan.candidates, plan.sigmas, strict=True):
        # dp_accounting's own PLDs truncate their tails into an infinity mass of ≈ 2e-15 that differs between two
        # mechanisms by ~1e-18 whatever σ is: the same allowance the plan adds (PROFILE_SLACK), nothing more
        for mine, theirs in zip(_oracle_directions(candidate, sigma), reference, strict=True):
            assert np.all(mine <= theirs + PROFILE_SLACK), candidate.describe()
            assert np.all(mine[theirs > 1e-13] <= theirs[theirs > 1e-13]), candidate.describe()
    # the base profile the accountant takes bounds every candidate's symmetric profile at every ε ≥ 0
    base = plan.base_profile()
    assert base is not None
    for index, candidate in enumerate(plan.candidates):
        own = plan.reference.candidate_profile(candidate, plan.sigmas[index])
        assert np.all(own.delta(EPSILONS) <= base.delta(EPSILONS)), candidate.describe()


def test_sigma_is_minimal(plan: HeterogeneousPlan) -> None:
    reference_rdp = plan.base_rdp()
    reference_profile = plan.reference.profile(plan.sigma_ref)
    for candidate, sigma in zip(plan.candidates, plan.sigmas, strict=True):
        below = sigma * (1.0 - 1e-3)
        rdp_holds = bool(np.all(plan.reference.candidate_rdp(candidate, below).epsilons <= reference_rdp.epsilons))
        excess = profile_excess(plan.reference.candidate_profile(candidate, below), reference_profile)
        assert not (rdp_holds and excess <= PROFILE_SLACK), candidate.describe()


def test_the_reference_candidate_gets_sigma_ref(plan: HeterogeneousPlan) -> None:
    matches = [s for c, s in zip(plan.candidates, plan.sigmas, strict=True) if plan.reference.is_candidate(c)]
    assert matches == [plan.sigma_ref]
    # ... and another reference value gives that candidate the new value exactly
    candidate = next(c for c in plan.candidates if plan.reference.is_candidate(c))
    assert dominating_sigma(candidate, plan.reference, 0.77, profiles=True) == 0.77


def test_the_profile_excess_is_the_supremum_on_a_dense_grid() -> None:
    """profile_excess is exact: no dense-grid point exceeds it, and it is attained (up to rounding)."""
    small = CandidateRun.from_batch(1437, 32, 20)
    reference = ReferenceRun(small.sample_rate, small.steps, SCORE_NOISE)
    candidate = CandidateRun.from_batch(1437, 128, 20)
    mine, theirs = reference.candidate_profile(candidate, 1.0), reference.profile(1.0)
    excess = profile_excess(mine, theirs)
    grid = np.linspace(0.0, 15.0, 30001)
    dense = float(np.max(mine.delta(grid) - theirs.delta(grid)))
    assert excess > 1e-3  # not dominated at the reference's σ: a larger rate (and a larger q·√steps)
    assert dense <= excess + 1e-15
    assert dense >= 0.99 * excess  # the grid's spacing matches the PLD's interval closely enough to attain it


def test_opacus_arithmetic_matches_the_training_layer() -> None:
    for n_train, batch, epochs in [(1437, 64, 5), (1437, 1437, 1), (60000, 256, 3), (9300, 100, 2), (9900, 100, 1)]:
        mechanism = DPSGDMechanism(sigma=1.0, batch_size=batch, epochs=epochs, n_train=n_train)
        assert opacus_sample_rate(n_train, batch) == mechanism.sample_rate
        assert opacus_steps(n_train, batch, epochs) == mechanism.steps
    assert opacus_steps(9300, 100, 1) == 92  # Opacus's float rounding loses one batch of 93 (module docstring)


def test_a_homogeneous_grid_is_todays_single_sigma_search() -> None:
    search = RepeatAndSelect(geometric(0.1))
    candidates = [CandidateRun.from_batch(1437, 128, 5, name=f"lr={lr}") for lr in (0.1, 0.3)]
    result = calibrate_heterogeneous(4.0, 1e-5, search, candidates, score_noise=SCORE_NOISE)
    single = calibrate_dpsgd_sigma(4.0, 1e-5, candidates[0].sample_rate, candidates[0].steps, search,
                                   score_noise=SCORE_NOISE)
    assert result.plan.sigma_ref == single.sigma
    assert result.plan.sigmas == (single.sigma, single.sigma)
    assert result.report.epsilon == single.report.epsilon
    assert result.plan.profile_slack == 0.0


@pytest.mark.parametrize("search", [RepeatAndSelect(geometric(0.1)), RepeatAndSelect(geometric(0.1), 1.5, 0.75)])
def test_the_total_epsilon_is_recomputed_from_the_reference(search: RepeatAndSelect) -> None:
    candidates = _candidates("digits-2x2")
    result = calibrate_heterogeneous(8.0, 1e-5, search, candidates, score_noise=SCORE_NOISE)
    plan, reference = result.plan, result.plan.reference
    assert result.report.epsilon <= 8.0
    # a reader recomputes ε from the reference alone: its curve, and (uniform search) its profile
    profile = None if search.adaptive else reference.profile(plan.sigma_ref)
    recomputed = PrivacyAccounting(search, reference.rdp(plan.sigma_ref), 1e-5, profile=profile).account()
    assert recomputed.epsilon == pytest.approx(result.report.epsilon, abs=1e-9)
    assert recomputed.epsilon <= result.report.epsilon  # the slack only ever adds
    # the accountant accepts the base curve and profile as one mechanism: the reference's event
    accounting = plan.accounting(search, 1e-5)
    assert accounting.base.event == _event(reference, plan.sigma_ref)
    if not search.adaptive:
        check_same_mechanism(accounting.base, accounting.profile)
    # each candidate's own curve carries its own event, and stays under the base at every order
    for index, candidate in enumerate(candidates):
        own = plan.candidate_rdp(index)
        assert own.event == _event(candidate, plan.sigmas[index])
        assert np.all(own.epsilons <= accounting.base.epsilons)


def test_profiles_reach_the_accountant_only_where_dominated_and_uniform() -> None:
    candidates = _candidates("epochs-only")
    reference = reference_for(candidates, SCORE_NOISE)
    rdp_only = plan_heterogeneous(candidates, reference, 1.0, profiles=False)
    assert rdp_only.base_profile() is None
    # a uniform search on a plan without profile domination: RDP bounds only, never a profile bound
    report = rdp_only.accounting(RepeatAndSelect(geometric(0.1)), 1e-5).account()
    assert not any(name.startswith("profile") for name in report.methods)
    # an adaptive search never gets a profile, even from a plan that dominated them
    with_profiles = plan_heterogeneous(candidates[:1], reference, 1.0, profiles=True)
    assert with_profiles.accounting(RepeatAndSelect(geometric(0.1), 2.0, 0.5), 1e-5).profile is None


def test_slacked_profile_is_an_upper_bound_with_the_reference_event() -> None:
    reference = ReferenceRun(1 / 12, 60, SCORE_NOISE).profile(1.0)
    slacked = SlackedProfile(reference, 1e-9)
    assert slacked.event == reference.event
    assert np.all(slacked.delta(EPSILONS) >= reference.delta(EPSILONS))
    eps = slacked.epsilon(1e-5)
    assert float(slacked.delta(eps)) <= 1e-5 < float(slacked.delta(eps - 1e-3))


def test_a_candidate_above_the_cap_is_refused_in_one_line_naming_it() -> None:
    candidates = [CandidateRun.from_batch(1437, 64, 5), CandidateRun.from_batch(1437, 32, 50)]
    reference = ReferenceRun(candidates[0].sample_rate, candidates[0].steps, SCORE_NOISE)
    with pytest.raises(DominanceError, match=r"batch_size=32, epochs=50 .*sigma <= 3") as info:
        plan_heterogeneous(candidates, reference, 1.0, profiles=False, sigma_cap=3.0)
    assert "\n" not in str(info.value)


def test_a_profile_that_needs_noise_above_the_cap_is_refused() -> None:
    """RDP-dominated below the cap (at the one order given), but its profile needs more: refused, naming it."""
    small = CandidateRun.from_batch(1437, 32, 20)
    reference = ReferenceRun(small.sample_rate, small.steps, SCORE_NOISE)
    candidate = CandidateRun.from_batch(1437, 128, 20)
    rdp_sigma = dominating_sigma(candidate, reference, 1.0, orders=(2.0,))
    profile_sigma = dominating_sigma(candidate, reference, 1.0, orders=(2.0,), profiles=True)
    assert profile_sigma > rdp_sigma * 1.01  # the profile, not the order-2 RDP, decides this candidate's σ
    # Just above the RDP σ the profile excess is ~1e-4 (far above PROFILE_SLACK); nearer profile_sigma it is float
    # noise of the PLDs' infinity masses (~1e-15, not monotone in σ), so a cap there would test the noise.
    cap = rdp_sigma * 1.01
    with pytest.raises(DominanceError, match=r"batch_size=128, epochs=20 .*\(privacy profile\)"):
        dominating_sigma(candidate, reference, 1.0, orders=(2.0,), profiles=True, sigma_cap=cap)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((1437, 0, 5), "batch_size must be an integer >= 1, got 0"),
        ((1437, -4, 5), "batch_size must be an integer >= 1, got -4"),
        ((1437, 64.5, 5), "batch_size must be an integer >= 1, got 64.5"),
        ((1437, 64, 0), "epochs must be an integer >= 1, got 0"),
        ((1437, 2000, 5), r"batch_size must be <= n_train \(1437\), got 2000"),
    ],
)
def test_bad_settings_are_refused_naming_the_value(args: tuple, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CandidateRun.from_batch(*args)


def test_reference_score_noise_must_match() -> None:
    candidates = _candidates("epochs-only")
    with pytest.raises(ValueError, match=r"reference\.score_noise must equal score_noise"):
        calibrate_heterogeneous(4.0, 1e-5, RepeatAndSelect(geometric(0.1)), candidates, score_noise=SCORE_NOISE,
                                reference=ReferenceRun(0.1, 10, None))


def test_corollary_6_2_thresholds_need_less_noise_and_give_the_profile_bound() -> None:
    """KRW Cor. 6.2: two threshold points instead of the whole profile (opt-in), same ε as the TNB profile bound."""
    search = RepeatAndSelect(geometric(0.1))
    candidates = _candidates("digits-2x2")
    reference = reference_for(candidates, SCORE_NOISE)
    profile = reference.profile(2.0)
    accounted = PrivacyAccounting(search, reference.rdp(2.0), 1e-5, profile=profile).account()
    assert threshold_epsilon(profile, search, 1e-5) == pytest.approx(accounted.methods["profile-tnb"], abs=1e-3)
    candidate = candidates[0]
    full = dominating_sigma(candidate, reference, 2.0, profiles=True)
    assert threshold_sigma(candidate, reference, 2.0, search, 1e-5) <= full
    with pytest.raises(ValueError, match="truncated negative binomial"):
        threshold_epsilon(profile, RepeatAndSelect(Poisson(10.0)), 1e-5)


def test_a_space_with_privacy_axes_gives_every_grid_point_its_sigma() -> None:
    """SearchSpace roles → distinct settings → candidates → plan → σ of each grid point (what part B wires)."""
    from dphypo.space import IntGrid, LogFloat, SearchSpace, candidate_runs

    space = SearchSpace({"lr": LogFloat(1e-3, 1e-1, 3), "batch": IntGrid((64, 128), scale="log")},
                        privacy_roles={"batch": "batch_size"})
    settings, point_setting = space.privacy_settings()
    candidates = candidate_runs(settings, 1437, epochs=5)
    plan = plan_heterogeneous(candidates, reference_for(candidates, SCORE_NOISE), 1.3, profiles=False)
    sigmas = np.asarray(plan.sigmas)[point_setting]
    assert sigmas.shape == (space.size,)
    for index in range(space.size):
        batch = space.params(index)["batch"]
        own = next(s for c, s in zip(plan.candidates, plan.sigmas, strict=True) if c.name == f"batch_size={batch}")
        assert sigmas[index] == own
    assert sigmas[space.index({"lr": 1e-2, "batch": 128})] == plan.sigma_ref  # the larger batch is the reference


def test_trimmed_orders_keep_the_budget_and_lower_the_noise() -> None:
    """Orders the accountant does not need: same σ_ref (to rtol), same total ε, less noise for some candidates."""
    search = RepeatAndSelect(geometric(0.1))
    candidates = _candidates("digits-2x2")
    reference = reference_for(candidates, SCORE_NOISE)
    orders = trimmed_orders(8.0, 1e-5, search, reference)
    assert orders[-1] < DEFAULT_ORDERS[-1]
    full = calibrate_heterogeneous(8.0, 1e-5, search, candidates, score_noise=SCORE_NOISE)
    trimmed = calibrate_heterogeneous(8.0, 1e-5, search, candidates, score_noise=SCORE_NOISE, orders=orders)
    assert trimmed.report.epsilon <= 8.0
    assert trimmed.plan.sigma_ref == pytest.approx(full.plan.sigma_ref, rel=2e-4)
    assert all(t <= f * (1 + 2e-4) for t, f in zip(trimmed.plan.sigmas, full.plan.sigmas, strict=True))
    assert min(t / f for t, f in zip(trimmed.plan.sigmas, full.plan.sigmas, strict=True)) < 0.95
    for index in range(len(candidates)):  # dominated at every order the trimmed accounting uses
        own = trimmed.plan.candidate_rdp(index, orders)
        assert np.all(own.epsilons <= trimmed.plan.base_rdp(orders).epsilons)

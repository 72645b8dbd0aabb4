"""Simulated two-stage searches (dphypo.simulation.two_stage) on landscapes with known answers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from dphypo.privacy import RepeatAndSelect, geometric
from dphypo.privacy.two_stage import (
    FinalRun,
    FinalSelection,
    ProbeRelease,
    ProbeSelection,
    TwoStage,
    TwoStageDesignError,
)
from dphypo.simulation.family import load_family
from dphypo.simulation.landscapes import Landscape
from dphypo.simulation.two_stage import calibrate_design, simulate_two_stage, two_stage_values

ROOT = Path(__file__).resolve().parents[2] / "landscapes"
DIGITS_FAMILY = sorted(ROOT.glob("digits_mlp_sigma*.npz"))


def grid(mean: np.ndarray, std: float) -> Landscape:
    mean = np.asarray(mean, dtype=float).reshape(4, 5)
    return Landscape.from_axes(mean, np.full(mean.shape, std),
                               {"lr": np.geomspace(1e-3, 1.0, 4), "clip": np.linspace(0.5, 3.0, 5)},
                               {"lr": "log", "clip": "linear"})


MEANS = np.linspace(0.1, 0.9, 20)


def test_noise_free_probes_over_the_whole_grid_always_commit_to_the_best_point() -> None:
    probes = grid(MEANS, 0.0)
    final = grid(MEANS[::-1], 0.0)  # the final fidelity ranks points differently: the probes' winner is committed
    values = two_stage_values(TwoStage(ProbeRelease(400)), probes, final, 50, np.random.default_rng(0))
    assert np.all(values == final.true_value(probes.best_index))


def test_one_probe_releases_a_point_drawn_from_the_prior() -> None:
    landscape = grid(MEANS, 0.3)
    values = two_stage_values(TwoStage(ProbeRelease(1)), landscape, landscape, 4000, np.random.default_rng(1))
    # every grid point equally likely (uniform prior): a chi-square test on the released values' counts
    counts = np.array([np.sum(np.isclose(values, m)) for m in MEANS])
    assert counts.sum() == 4000
    assert stats.chisquare(counts).pvalue > 1e-3
    # and a wrong law (always the better half) is rejected by the same test
    biased = np.concatenate([counts[10:] * 2, np.zeros(10)])
    assert stats.chisquare(biased).pvalue < 1e-6


def test_a_final_selection_releases_the_better_of_the_top_k_by_its_own_noisy_scores() -> None:
    probes = grid(MEANS, 0.0)
    final = grid(MEANS, 0.0)
    design = TwoStage(ProbeRelease(400, top_k=3), FinalSelection(RepeatAndSelect(geometric(0.01))))
    values = two_stage_values(design, probes, final, 3000, np.random.default_rng(2))
    # T' ~ geometric(0.01) noise-free looks, each uniform on the 3 distinct top points, miss the best with
    # probability E[(2/3)^T'] = γx / (1 − (1 − γ)x) at x = 2/3 (the pgf of the geometric law)
    gamma, x = 0.01, 2 / 3
    found = 1 - gamma * x / (1 - (1 - gamma) * x)
    assert np.all(np.isin(np.round(values, 9), np.round(MEANS[-3:], 9)))
    assert abs(np.mean(values == MEANS[-1]) - found) < 4 * np.sqrt(found * (1 - found) / 3000)
    one_look = TwoStage(ProbeRelease(400, top_k=3), FinalSelection(RepeatAndSelect(geometric(0.999))))
    values = two_stage_values(one_look, probes, final, 3000, np.random.default_rng(3))
    # T' = 1 almost surely: a uniform pick among the top 3
    assert set(np.round(values, 9)) == set(np.round(MEANS[-3:], 9))
    assert abs(values.mean() - MEANS[-3:].mean()) < 0.01


def test_more_probes_release_better_points_on_a_noisy_landscape() -> None:
    landscape = grid(MEANS, 0.05)
    rng = np.random.default_rng(4)
    few = two_stage_values(TwoStage(ProbeRelease(2)), landscape, landscape, 2000, rng)
    many = two_stage_values(TwoStage(ProbeRelease(30)), landscape, landscape, 2000, rng)
    assert many.mean() > few.mean() + 0.1


def test_adaptive_probe_selection_and_out_of_family_sigmas_are_refused() -> None:
    family = load_family(DIGITS_FAMILY)
    adaptive = TwoStage(ProbeSelection(RepeatAndSelect(geometric(0.1), 2.0, 0.75)))  # accounted, tunable
    member = family.at(family.sigmas[0])
    with pytest.raises(TwoStageDesignError, match="not simulated"):
        two_stage_values(adaptive, member, member, 10, np.random.default_rng(5))
    # a generous budget needs probe noise below the family's smallest member
    with pytest.raises(TwoStageDesignError, match="outside the family's range"):
        simulate_two_stage(TwoStage(ProbeRelease(2)), family, 40.0, 1e-5, 10, np.random.default_rng(5))


def test_a_calibrated_design_costs_the_total_epsilon_on_the_familys_mechanism() -> None:
    family = load_family(DIGITS_FAMILY)
    design = TwoStage(ProbeRelease(10), FinalRun(), split=0.7)
    calibration = calibrate_design(design, 8.0, 1e-5, family.mechanism_metadata)
    assert 8.0 * (1 - 1e-3) < calibration.report.epsilon <= 8.0
    assert calibration.probe_sigma > calibration.final_sigma  # ten probes at 70 % cost more noise than one run
    result = simulate_two_stage(design, family, 8.0, 1e-5, 200, np.random.default_rng(6))
    assert result.values.shape == (200,) and result.expected_runs == 11.0
    assert family.at(calibration.final_sigma).mean.min() <= result.mean <= family.at(calibration.final_sigma).best_value


def test_probes_at_a_lower_fidelity_are_cheaper_and_a_higher_one_is_refused() -> None:
    family = load_family(DIGITS_FAMILY)
    design = TwoStage(ProbeSelection(RepeatAndSelect(geometric(1 / 20))), FinalRun(), split=0.5)
    full = calibrate_design(design, 8.0, 1e-5, family.mechanism_metadata)
    short = calibrate_design(design, 8.0, 1e-5, family.mechanism_metadata, {**family.mechanism_metadata, "epochs": 2})
    # a 2-epoch probe leaks less per σ, so its share of ε buys less noise
    assert short.probe_sigma < full.probe_sigma
    assert short.report.epsilon <= 8.0
    with pytest.raises(TwoStageDesignError, match="a probe fidelity above the final one"):
        calibrate_design(design, 8.0, 1e-5, family.mechanism_metadata, {**family.mechanism_metadata, "epochs": 20})


def test_a_probe_selection_that_ran_no_probe_releases_nothing() -> None:
    from dphypo.privacy import Poisson

    landscape = grid(MEANS, 0.0)
    design = TwoStage(ProbeSelection(RepeatAndSelect(Poisson(1.0))))  # T = 0 with probability e^-1
    values = two_stage_values(design, landscape, landscape, 4000, np.random.default_rng(7))
    # the worst mean is released when T = 0, or when every probe hit the worst of the 20 points: with Poisson(1) T,
    # E[(1/20)^T] = exp(-1 + 1/20)
    # (releasing a random point when no probe ran would move e^-1 · 19/20 of that mass: far outside the tolerance)
    worst = np.mean(values == landscape.worst_value)
    assert abs(worst - np.exp(-0.95)) < 4 * np.sqrt(0.39 * 0.61 / 4000)


def _bump(std: float, *, flip: bool = False) -> Landscape:
    """An 8×8 grid: a smooth bump (0.9 at its peak, 0.1 far away), noise ``std``."""
    lr, clip = np.meshgrid(np.linspace(0, 1, 8), np.linspace(0, 1, 8), indexing="ij")
    mean = 0.1 + 0.8 * np.exp(-((lr - 0.7) ** 2 + (clip - 0.3) ** 2) / 0.08)
    return Landscape.from_axes(mean[::-1] if flip else mean, np.full(mean.shape, std),
                               {"lr": np.geomspace(1e-3, 1.0, 8), "clip": np.linspace(0.5, 3.0, 8)},
                               {"lr": "log", "clip": "linear"})


def test_arms_share_their_streams_and_the_baseline_is_todays_design() -> None:
    from dphypo.simulation.two_stage import BASELINE_ARM, ProbeArm, two_stage_arm_values
    from dphypo.strategies.recommend import Recommendation

    probes, final = _bump(0.1), _bump(0.0, flip=True)
    design = TwoStage(ProbeRelease(6))
    base = two_stage_arm_values(design, probes, final, 300, 1, BASELINE_ARM)
    np.testing.assert_array_equal(base, two_stage_arm_values(design, probes, final, 300, 1))  # same seed: same
    assert not np.array_equal(base, two_stage_arm_values(design, probes, final, 300, 2))
    # the baseline commits the best of 6 uniform noisy probes, as two_stage_values does (same law, other streams)
    old = two_stage_values(design, probes, final, 3000, np.random.default_rng(0))
    new = two_stage_arm_values(design, probes, final, 3000, 0)
    assert abs(old.mean() - new.mean()) < 4 * np.hypot(old.std(), new.std()) / np.sqrt(3000)
    # a recommendation arm sees the same probes and scores: where the rules agree, the values are equal
    gp_mean = two_stage_arm_values(design, probes, final, 300, 1, ProbeArm(recommendation=Recommendation("gp-mean")))
    assert 0.3 < np.mean(gp_mean == base) < 1.0
    with pytest.raises(TwoStageDesignError, match="need released probes"):
        two_stage_arm_values(TwoStage(ProbeSelection(RepeatAndSelect(geometric(0.1)))), probes, final, 10, 0,
                             ProbeArm(recommendation=Recommendation("gp-mean")))


def test_gp_placement_and_the_posterior_mean_beat_uniform_placement_and_the_best_probe_paired() -> None:
    from dphypo.simulation.two_stage import BASELINE_ARM, ProbeArm, two_stage_arm_values
    from dphypo.strategies.gp.placement import ProbePlacement
    from dphypo.strategies.recommend import Recommendation

    landscape = _bump(0.08)
    design = TwoStage(ProbeRelease(15))
    base = two_stage_arm_values(design, landscape, landscape, 40, 3, BASELINE_ARM)
    arm = ProbeArm(ProbePlacement(), Recommendation("gp-mean"))
    gp = two_stage_arm_values(design, landscape, landscape, 40, 3, arm)
    difference = gp - base
    half = stats.t.ppf(0.975, 39) * difference.std(ddof=1) / np.sqrt(40)
    assert difference.mean() - half > 0  # paired 95 % CI above 0


PROBE_FAMILY = sorted((ROOT / "multifidelity").glob("digits_mlp_epochs2_sigma*.npz"))


@pytest.mark.parametrize(("epsilon", "probes", "factor"), [(8.0, 20, 1.0), (4.0, 20, 2.0)])
def test_simulated_sigmas_are_the_ones_tune_runs(epsilon, probes, factor) -> None:
    # one calibration (dphypo.api.two_stage.calibrate_mechanisms, composed PLDs): the simulation calibrated by RDP
    # alone before, 0.974 where tune's dry run runs the default's final run at 0.917 on digits at ε = 8
    from dphypo.api.design import TwoStageSearch
    from dphypo.api.two_stage import two_stage_mechanisms
    from dphypo.train import DPSGD
    from dphypo.train.data import split_sizes

    family = load_family(DIGITS_FAMILY)
    metadata = family.mechanism_metadata
    design = TwoStage(ProbeRelease(probes), FinalRun(), 0.5)
    simulated = calibrate_design(design, epsilon, 1e-5, metadata, {**metadata, "epochs": 2},
                                 probe_score_noise_factor=factor)
    n_train, n_val = split_sizes("digits")  # what `dphypo tune --dry-run` trains: its defaults
    training = DPSGD(batch_size=64, epochs=10, n_train=n_train, n_val=n_val, score_noise=0.02 * n_val)
    search = TwoStageSearch(design, probe_score_noise_factor=factor)
    probe, final, report = two_stage_mechanisms(training, design, probe_epochs=search.epochs_of_probes(training),
                                                epsilon=epsilon, delta=1e-5, probe_score_noise_factor=factor)
    assert (simulated.probe_sigma, simulated.final_sigma) == (probe.sigma, final.sigma)
    assert simulated.report.epsilon == report.epsilon and report.method == "pld"
    assert probe.score_noise == pytest.approx(factor * 0.02 * n_val)


def test_probes_with_noisier_scores_are_simulated_at_that_noise() -> None:
    landscape = grid(MEANS, 0.05)
    from dphypo.simulation.two_stage import probe_noise_landscape

    assert probe_noise_landscape(landscape, 0.02, 0.02) is landscape
    noisier = probe_noise_landscape(landscape, 0.02, 0.04)  # seed spread sqrt(0.05² − 0.02²), then 0.04 on top
    np.testing.assert_allclose(noisier.std, np.sqrt(0.05**2 - 0.02**2 + 0.04**2))
    np.testing.assert_array_equal(noisier.mean, landscape.mean)
    family, probes = load_family(DIGITS_FAMILY), load_family(PROBE_FAMILY)
    design = TwoStage(ProbeRelease(20), FinalRun(), 0.5)
    from dphypo.simulation.two_stage import BASELINE_ARM, simulate_two_stage_arms

    result = simulate_two_stage_arms(design, family, 4.0, 1e-5, 50, 0, (BASELINE_ARM,), probe_family=probes,
                                     probe_score_noise_factor=2.0)
    assert result.calibration.report.epsilon <= 4.0 and result.values[0].shape == (50,)
    from dphypo.privacy.calibration import CalibrationError

    with pytest.raises(CalibrationError, match=r"alone costs at least epsilon=2\.766"):  # today's noise cannot
        simulate_two_stage_arms(design, family, 4.0, 1e-5, 50, 0, (BASELINE_ARM,), probe_family=probes)

"""Heterogeneous landscape families (issue #25): members built with privacy grids, one per reference σ_ref.

Real tiny 4-D builds (2 lr × 2 clip × batch {64, 128} × epochs {1, 2}, one seed) at σ_ref 0.9 and 1.8 under the
batch 64 × 1 epoch reference; the equal-ε calibration of an arm on such a family is checked against the accountant
run directly on the reference.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dphypo.privacy import PrivacyAccounting, RepeatAndSelect
from dphypo.privacy.calibration import calibrate_dpsgd_sigma
from dphypo.privacy.dpsgd_run import dpsgd_run_profile, dpsgd_run_rdp
from dphypo.privacy.heterogeneous import DominanceError
from dphypo.privacy.run_counts import geometric
from dphypo.simulation.builder import BuildSpec, build_landscape
from dphypo.simulation.equal_epsilon import arm_calibration, cell_landscapes, run_equal_epsilon_study
from dphypo.simulation.family import LandscapeFamily, is_heterogeneous, load_family
from dphypo.simulation.landscapes import Landscape, load_landscape
from dphypo.simulation.studies import ArmSpec, Setting, StudyConfig
from dphypo.strategies import GPUCB, Uniform

SPEC = BuildSpec(dataset="digits", model="digits-mlp", lr_grid=(0.5, 2.0), clip_grid=(0.5, 2.0), sigma=0.9, epochs=1,
                 batch_size=64, seeds=1, score_noise=0.02, batch_size_grid=(64, 128), epochs_grid=(1, 2))
SIGMAS = (0.9, 1.8)
DELTA = 1e-5


@pytest.fixture(scope="module")
def members(tmp_path_factory) -> tuple[str, ...]:
    folder = tmp_path_factory.mktemp("fourd")
    paths = []
    for sigma in SIGMAS:
        path = folder / f"m{sigma}.npz"
        build_landscape(dataclasses.replace(SPEC, sigma=sigma), path, workers=1)
        paths.append(str(path))
    return tuple(paths)


def _reference(meta: dict) -> tuple[float, int, float]:
    return meta["reference"]["sample_rate"], meta["reference"]["steps"], meta["score_noise"] * meta["n_val"]


def test_members_built_with_privacy_grids_form_a_family(members) -> None:
    family = load_family(members)
    assert family.sigmas == SIGMAS
    shared = family.mechanism_metadata
    assert is_heterogeneous(shared) and "plan" not in shared and "sigma" not in shared
    assert [(s["batch_size"], s["epochs"]) for s in shared["settings"]] == [(64, 1), (64, 2), (128, 1), (128, 2)]
    plans = [load_landscape(p).metadata["plan"] for p in members]
    for setting in range(4):  # every setting's σ_i grows with σ_ref (the family's monotonicity argument)
        assert plans[1][setting]["sigma"] > plans[0][setting]["sigma"]
    between = family.at(1.3)
    assert between.axis_names == ("lr", "clip", "batch_size", "epochs") and "plan" not in between.metadata
    assert np.all(between.mean <= family.at(0.9).mean + 1e-12) and np.all(between.mean >= family.at(1.8).mean - 1e-12)


def test_a_member_with_other_settings_is_refused(members) -> None:
    first, second = (load_landscape(p) for p in members)
    settings = [dict(s) for s in second.metadata["settings"]]
    settings[1]["epochs"] = 3
    other = Landscape(second.mean, second.std, second.axis_names, second.axis_values, second.axis_scales,
                      second.direction, {**second.metadata, "settings": settings})
    with pytest.raises(ValueError, match="metadata\\['settings'\\]"):
        LandscapeFamily((first, other))


def test_is_heterogeneous_needs_the_reference_and_settings() -> None:
    assert not is_heterogeneous({"sigma": 1.0})
    with pytest.raises(ValueError, match="must state \\['settings'\\]"):
        is_heterogeneous({"privacy_axes": {"epochs": "epochs"}, "reference": {}})


@pytest.mark.parametrize(("C", "c"), [(1.0, 1.0), (2.0, 0.75)])
def test_an_arm_on_a_heterogeneous_family_calibrates_the_reference_sigma(members, C: float, c: float) -> None:
    family = load_family(members)
    meta = family.mechanism_metadata
    search = RepeatAndSelect(geometric(0.1), C, c)
    result = arm_calibration(4.0, DELTA, geometric(0.1), C, c, meta)
    q, steps, score = _reference(meta)
    assert SIGMAS[0] <= result.sigma <= SIGMAS[1]
    # Directly: the accountant on the reference's curve (and its profile for a uniform search) meets ε = 4 at
    # σ_ref and not at 0.1 % less noise: a heterogeneous search is accounted as its reference.
    def epsilon(sigma: float) -> float:
        profile = None if search.adaptive else dpsgd_run_profile(sigma, q, steps, score_noise=score)
        curve = dpsgd_run_rdp(sigma, q, steps, score_noise=score)
        return PrivacyAccounting(search, curve, DELTA, profile=profile).account().epsilon

    assert epsilon(result.sigma) <= 4.0 + 1e-9 < epsilon(result.sigma * 0.999)
    assert result.report.epsilon == pytest.approx(epsilon(result.sigma), abs=1e-6)
    reference_only = calibrate_dpsgd_sigma(4.0, DELTA, q, steps, search, score_noise=score).sigma
    if search.adaptive:  # no profile, no slack: exactly the reference's own calibration
        assert result.sigma == reference_only
    else:  # at most a few rtol steps above it (the candidates' profile slack, ≤ 1e-15 in δ)
        assert reference_only <= result.sigma <= reference_only * (1 + 1e-4) ** 20


def _study(members: tuple[str, ...], epsilon: float) -> StudyConfig:
    arms = (ArmSpec("uniform", Uniform(), members), ArmSpec("gp", GPUCB(C=2.0, c=0.75), members))
    return StudyConfig("4d", (Setting("E[T]=10", run_count=geometric(0.1)),), arms, repeats=4, seed=1, workers=1,
                       epsilon=epsilon)


def test_an_equal_epsilon_study_runs_on_a_4d_family(members) -> None:
    result = run_equal_epsilon_study(_study(members, 4.0), executor="sequential")
    family = load_family(members)
    for cell in result.cells:
        assert cell.epsilon is not None and cell.epsilon <= 4.0
        assert cell.sigma == arm_calibration(4.0, DELTA, geometric(0.1), cell.C, cell.c,
                                             family.mechanism_metadata).sigma
        assert cell.result is not None and cell.result.repeats == 4
        assert np.all(cell.result.values <= family.at(cell.sigma).best_value + 1e-12)
    uniform, gp = result.cells
    assert gp.sigma > uniform.sigma  # the adaptive arm pays for adaptivity with more reference noise


def test_a_reference_sigma_no_setting_can_follow_is_refused_naming_the_arm(members) -> None:
    # ε = 0.865 sits just above the search's floor (ε ≈ 0.8646 with infinite noise: the score release and the run
    # count): the uniform arm needs σ_ref between 50 (ε = 0.86512) and 60 (ε = 0.86495), and batch 128 × 2 epochs
    # needs σ_i ≈ 2.3·σ_ref > 100 to be dominated by the batch-64 × 1-epoch reference (RDP envelopes,
    # docs/proofs/heterogeneous.md §5): refused in one line before any family member is looked up.
    study = _study(members, 0.865)
    with pytest.raises(DominanceError, match=r"arm 'uniform' in setting 'E\[T\]=10'.*cannot be dominated"):
        cell_landscapes(dataclasses.replace(study, arms=study.arms[:1]))

"""Tests for dphypo.simulation.family (landscape families) and dphypo.simulation.equal_epsilon (equal-ε arm σ)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dphypo.privacy import CalibrationError, RepeatAndSelect, calibrate_sigma, geometric
from dphypo.simulation.equal_epsilon import arm_calibration, arm_sigma, metadata_mechanism
from dphypo.simulation.family import LandscapeFamily, load_family, nonincreasing_fit
from dphypo.simulation.landscapes import Landscape, load_landscape, save_landscape
from dphypo.simulation.studies import Setting, arm_epsilon

ROOT = Path(__file__).resolve().parents[2] / "landscapes"
DIGITS = [ROOT / "digits_mlp_sigma1.2226.npz", ROOT / "digits_mlp_sigma1.7673.npz"]

PLAN = {"dataset": "digits", "model": "digits-mlp", "epochs": 10, "batch_size": 64, "seeds": 5, "data_seed": 0,
        "score_noise": 0.02, "n_train": 1079, "n_val": 359}
LR = np.array([1e-3, 1e-2, 1e-1])
CLIP = np.array([0.5, 1.0])


def member(sigma: float, mean: Any, /, std: Any = 0.05, direction: str = "maximize", **changes: Any) -> Landscape:
    """A 3 × 2 (lr × clip) member at ``sigma`` with the shared PLAN metadata plus per-member build keys."""
    mean = np.broadcast_to(np.asarray(mean, dtype=float), (3, 2))
    std = np.broadcast_to(np.asarray(std, dtype=float), (3, 2))
    metadata = {**PLAN, "sigma": sigma, "seconds_per_run_mean": sigma / 7, "spec_digest": f"d{sigma}"}
    fields: dict[str, Any] = {"axis_names": ("lr", "clip"), "axis_values": (LR, CLIP),
                              "axis_scales": ("log", "linear"), "direction": direction}
    for key, value in changes.items():
        if key in fields:
            fields[key] = value
        elif value is None:
            metadata.pop(key)
        else:
            metadata[key] = value
    return Landscape(mean, std, fields["axis_names"], fields["axis_values"], fields["axis_scales"],
                     fields["direction"], metadata)


def random_members(seed: int, sigmas: tuple[float, ...], direction: str = "maximize") -> list[Landscape]:
    rng = np.random.default_rng(seed)
    return [member(s, rng.uniform(0.1, 0.95, (3, 2)), rng.uniform(0.005, 0.1, (3, 2)), direction)
            for s in sigmas]


# ------------------------------------------------------------------------------------------------ refusals
@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"axis_names": ("lr", "clipping")}, "axis_names"),
        ({"axis_values": (LR, np.array([0.5, 2.0]))}, "axis_clip"),
        ({"axis_values": (LR * 2, CLIP)}, "axis_lr"),
        ({"axis_scales": ("log", "log")}, "axis_scales"),
        ({"direction": "minimize"}, "direction"),
        ({"dataset": "mnist"}, "'dataset'"),
        ({"model": "cnn"}, "'model'"),
        ({"epochs": 20}, "'epochs'"),
        ({"batch_size": 128}, "'batch_size'"),
        ({"score_noise": 0.01}, "'score_noise'"),
        ({"n_train": 1000}, "'n_train'"),
        ({"n_val": 300}, "'n_val'"),
        ({"seeds": 3}, "'seeds'"),
        ({"data_seed": 1}, "'data_seed'"),
        ({"epochs": None}, "lacks mechanism metadata key 'epochs'"),
        ({"optimizer": "adam"}, "extra mechanism metadata key 'optimizer'"),
    ],
)
def test_family_refuses_members_that_differ_in_anything_but_sigma(changes: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match) as info:
        LandscapeFamily((member(1.0, 0.8), member(2.0, 0.7, **changes)))
    assert "\n" not in str(info.value) and "member 1 (sigma=2)" in str(info.value)


def test_family_allows_members_to_differ_in_build_provenance() -> None:
    a = member(1.0, 0.8, built_by="old.module", failed_runs=0, seed_std_mean=0.03)
    b = member(2.0, 0.7, built_by="new.module", failed_runs=2, seed_std_mean=0.05)
    family = LandscapeFamily((b, a))
    assert family.sigmas == (1.0, 2.0) and family.sigma_range == (1.0, 2.0)
    assert family.members == (a, b)
    assert family.mechanism_metadata == PLAN  # no sigma, no provenance


@pytest.mark.parametrize(
    ("members", "match"),
    [
        ((), "at least 2 members, got 0"),
        ((member(1.0, 0.8),), "at least 2 members, got 1"),
        ((member(1.0, 0.8), "x"), "member 1 must be a Landscape"),
        ((member(1.0, 0.8), member(2.0, 0.7, sigma=None)), r"member 1 needs metadata\['sigma'\]"),
        ((member(1.0, 0.8), member(2.0, 0.7, sigma=-1.0)), r"member 1 needs metadata\['sigma'\].*-1.0"),
        ((member(1.0, 0.8), member(2.0, 0.7, sigma="2")), r"needs metadata\['sigma'\]"),
        ((member(1.0, 0.8), member(2.0, 0.7), member(1.0, 0.6)), "members 0 and 2 both have sigma=1"),
    ],
)
def test_family_refuses_bad_member_lists(members: tuple[Any, ...], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        LandscapeFamily(members)


def test_at_refuses_sigma_outside_the_range_and_non_numbers() -> None:
    family = LandscapeFamily((member(1.0, 0.8), member(2.0, 0.7)))
    for sigma in (0.999, 2.001, 100.0):
        with pytest.raises(ValueError, match=rf"sigma={sigma!r} is outside the family's range \[1, 2\]; build a "
                                             "member there"):
            family.at(sigma)
    for bad in (math.nan, math.inf, -1.0, 0.0, True, "1.5"):
        with pytest.raises(ValueError, match="sigma must be"):
            family.at(bad)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------- isotonic + interpolation
def test_isotonic_projection_and_interpolation_exact_on_a_hand_made_family() -> None:
    # Grid point (0, 0): 0.9, 0.6, 0.7 with equal weights: the last two pool to 0.65.
    # Grid point (0, 1): 0.5 (std 0.1, weight 100), 0.7 (std 0.2, weight 25), 0.3: the first two pool to
    # (100·0.5 + 25·0.7) / 125 = 0.54.
    # Grid point (1, 0): already non-increasing: kept.
    # Other points: 0.5, 0.6, 0.4 with equal weights: the first two pool to 0.55.
    m1, m2, m3 = (np.full((3, 2), v) for v in (0.5, 0.6, 0.4))
    s1, s2, s3 = (np.full((3, 2), 0.05) for _ in range(3))
    m1[0, 0], m2[0, 0], m3[0, 0] = 0.9, 0.6, 0.7
    m1[0, 1], m2[0, 1], m3[0, 1] = 0.5, 0.7, 0.3
    s1[0, 1], s2[0, 1], s3[0, 1] = 0.1, 0.2, 0.3
    m1[1, 0], m2[1, 0], m3[1, 0] = 0.8, 0.75, 0.1
    family = LandscapeFamily((member(4.0, m3, s3), member(1.0, m1, s1), member(2.0, m2, s2)))
    expected = np.stack([np.full((3, 2), v) for v in (0.55, 0.55, 0.4)])
    expected[:, 0, 0] = (0.9, 0.65, 0.65)
    expected[:, 0, 1] = (0.54, 0.54, 0.3)
    expected[:, 1, 0] = (0.8, 0.75, 0.1)
    np.testing.assert_allclose(family.projected_means, expected, rtol=0, atol=1e-12)
    assert family.isotonic_adjusted_points == 6 - 1

    # Linear in log σ: sqrt(1 · 2) is halfway from σ = 1 to σ = 2; 2^(5/4) is a quarter of the way from 2 to 4.
    halfway = family.at(math.sqrt(2.0))
    np.testing.assert_allclose(halfway.mean, (expected[0] + expected[1]) / 2, atol=1e-12)
    np.testing.assert_allclose(halfway.std, (s1 + s2) / 2, atol=1e-12)
    quarter = family.at(2.0 ** 1.25)
    np.testing.assert_allclose(quarter.mean, 0.75 * expected[1] + 0.25 * expected[2], atol=1e-12)
    np.testing.assert_allclose(quarter.std, 0.75 * s2 + 0.25 * s3, atol=1e-12)
    assert quarter.mean[0, 1] == pytest.approx(0.75 * 0.54 + 0.25 * 0.3, abs=1e-12)
    assert quarter.metadata == {**PLAN, "sigma": 2.0 ** 1.25, "interpolated": True, "member_sigmas": [2.0, 4.0],
                                "family_sigmas": [1.0, 2.0, 4.0], "isotonic_adjusted_points": 5}
    at_member = family.at(2.0)
    np.testing.assert_allclose(at_member.mean, expected[1], atol=1e-12)
    assert at_member.metadata["interpolated"] is False and at_member.metadata["member_sigmas"] == [2.0]


def test_minimize_landscapes_are_made_non_decreasing_in_sigma() -> None:
    family = LandscapeFamily((member(1.0, 0.5, direction="minimize"), member(2.0, 0.3, direction="minimize")))
    np.testing.assert_allclose(family.projected_means, np.full((2, 3, 2), 0.4), atol=1e-12)


def test_nonincreasing_fit_is_pool_adjacent_violators() -> None:
    isotonic_regression = pytest.importorskip("scipy.optimize").isotonic_regression
    rng = np.random.default_rng(1)
    values, weights = rng.normal(size=(7, 40)), rng.uniform(0.1, 10.0, size=(7, 40))
    fit = nonincreasing_fit(values, weights)
    reference = np.stack([isotonic_regression(values[:, j], weights=weights[:, j], increasing=False).x
                          for j in range(40)], axis=1)
    np.testing.assert_allclose(fit, reference, atol=1e-12)
    sorted_values = -np.sort(-values, axis=0)
    assert np.array_equal(nonincreasing_fit(sorted_values, weights), sorted_values)  # bit for bit
    with pytest.raises(ValueError, match="weights finite and > 0"):
        nonincreasing_fit(values, np.zeros_like(weights))


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_at_is_monotone_in_sigma_at_every_grid_point(direction: str, seed: int) -> None:
    family = LandscapeFamily(tuple(random_members(seed, (0.8, 1.1, 1.5, 2.3, 3.0), direction)))
    low, high = family.sigma_range
    grid = np.geomspace(low, high, 41)
    means = np.stack([family.at(float(s)).mean for s in grid])
    steps = np.diff(means, axis=0)
    sign = 1.0 if direction == "maximize" else -1.0
    assert np.all(sign * steps <= 1e-12)
    assert family.isotonic_adjusted_points > 0  # random members do violate monotonicity


def test_at_a_member_sigma_returns_that_member_when_it_is_monotone() -> None:
    members = [member(s, 0.9 - 0.1 * k, 0.01 + 0.01 * k) for k, s in enumerate((1.0, 1.5, 2.5))]
    family = LandscapeFamily(tuple(members))
    assert family.isotonic_adjusted_points == 0
    for m in members:
        got = family.at(m.metadata["sigma"])
        assert np.array_equal(got.mean, m.mean) and np.array_equal(got.std, m.std)
        assert got.metadata["interpolated"] is False and got.metadata["sigma"] == m.metadata["sigma"]
    # A calibrated σ that went through text is still that member
    assert family.at(1.5 * (1 + 1e-14)).metadata["interpolated"] is False


def test_round_trip_through_save_and_load(tmp_path: Path) -> None:
    members = random_members(3, (1.0, 1.7, 2.0))
    paths = []
    for m in members[::-1]:
        paths.append(tmp_path / f"m{m.metadata['sigma']}.npz")
        save_landscape(m, paths[-1])
    loaded = load_family(paths)
    family = LandscapeFamily(tuple(members))
    assert loaded.sigmas == family.sigmas and loaded.mechanism_metadata == family.mechanism_metadata
    for sigma in (1.0, 1.3, 2.0):
        original = family.at(sigma)
        save_landscape(original, tmp_path / "at.npz")
        back = load_landscape(tmp_path / "at.npz")
        assert np.array_equal(back.mean, original.mean) and np.array_equal(back.std, original.std)
        assert back.metadata == original.metadata
        assert np.array_equal(loaded.at(sigma).mean, original.mean)
    # a landscape taken from a family can join another family (its family keys are build keys)
    LandscapeFamily((family.at(1.3), members[0]))
    save_landscape(member(3.0, 0.5, epochs=3), tmp_path / "bad.npz")
    with pytest.raises(ValueError, match=r"'epochs'.*\(members 0: .*m2.0.npz, 1: .*bad.npz\)"):
        load_family([paths[0], tmp_path / "bad.npz"])
    with pytest.raises(ValueError, match="single path"):
        load_family(str(paths[0]))


def test_shipped_digits_pair_forms_a_family() -> None:
    family = load_family(DIGITS)
    assert family.sigmas == (1.2226, 1.7673)
    assert {k: family.mechanism_metadata[k] for k in ("dataset", "epochs", "batch_size", "score_noise")} == {
        "dataset": "digits", "epochs": 10, "batch_size": 64, "score_noise": 0.02}
    middle = family.at(1.5)
    assert middle.metadata["interpolated"] is True and middle.shape == (16, 20)


# ------------------------------------------------------------------------------------------------ equal-ε σ
def test_metadata_plan_is_the_landscape_plan_and_refuses_bad_metadata() -> None:
    mechanism = metadata_mechanism(PLAN)
    m = mechanism
    assert (m.sigma, m.n_train, m.n_val, m.batch_size, m.epochs) == (1.0, 1079, 359, 64, 10)
    assert mechanism.score_noise == pytest.approx(0.02 * 359)
    with pytest.raises(ValueError, match=r"lacks the DP-SGD mechanism keys \['epochs'\]"):
        metadata_mechanism({k: v for k, v in PLAN.items() if k != "epochs"})
    with pytest.raises(ValueError, match="no private score release"):
        metadata_mechanism({**PLAN, "score_noise": 0.0})
    with pytest.raises(ValueError, match=r"mechanism_metadata\['n_val'\]=300 but dataset 'digits'.*splits 359"):
        metadata_mechanism({**PLAN, "n_val": 300})


def test_arm_sigma_monotone_in_epsilon_and_larger_for_adaptive_search() -> None:
    run_count = geometric(0.05)
    uniform = [arm_sigma(eps, 1e-5, run_count, 1.0, 1.0, PLAN) for eps in (6.0, 8.0)]
    adaptive = [arm_sigma(eps, 1e-5, run_count, 2.0, 0.75, PLAN) for eps in (6.0, 8.0)]
    assert uniform[0] > uniform[1] and adaptive[0] > adaptive[1]
    assert adaptive[0] > uniform[0] and adaptive[1] > uniform[1]
    # cached: the same calibration object comes back
    first = arm_calibration(8.0, 1e-5, run_count, 2.0, 0.75, PLAN)
    assert arm_calibration(8.0, 1e-5, geometric(0.05), 2, 0.75, dict(PLAN)) is first


def test_arm_sigma_at_the_shipped_digits_pair() -> None:
    """ε = 8, E[T] = 20: the uniform arm counts profile bounds, the GP arm the accountant's default theorem."""
    meta = load_family(DIGITS).mechanism_metadata
    run_count = geometric(0.05)
    older = arm_calibration(8.0, 1e-5, run_count, 1.0, 1.0, meta, adaptive_theorem="A")
    # The shipped 1.2226 was calibrated with Papernot-Steinke's RDP bound alone; with Theorem A named (the accounting
    # of the shipped equal-ε studies) the Koskela-Redberg-Wang profile bound is tighter here ...
    assert older.report.method.startswith("profile") and older.report.epsilon <= 8.0
    assert older.sigma == pytest.approx(1.1143, abs=2e-4) and older.sigma < 1.2226
    # ... and by default Theorem B at C = c = 1 is tighter still (computed: 1.0888)
    uniform = arm_calibration(8.0, 1e-5, run_count, 1.0, 1.0, meta)
    assert uniform.report.method == "rdp-theorem-b" and uniform.report.epsilon <= 8.0
    assert uniform.sigma == pytest.approx(1.0888, abs=2e-4) and uniform.sigma < older.sigma
    # The GP arm: the accountant's default theorem without naming it; the shipped 1.7673 used the published one.
    gp = arm_sigma(8.0, 1e-5, run_count, 2.0, 0.75, meta)
    mechanism = metadata_mechanism(meta)
    default = calibrate_sigma(8.0, 1e-5, RepeatAndSelect(run_count, 2.0, 0.75),
                              lambda s: dataclasses.replace(mechanism, sigma=s).rdp()).sigma
    assert gp == pytest.approx(default, rel=2e-4)  # coarse to fine (#30): the same root, each within rtol 1e-4
    assert arm_sigma(8.0, 1e-5, run_count, 2.0, 0.75, meta, adaptive_theorem="published") == pytest.approx(
        1.7673, abs=1e-4)
    # studies.arm_epsilon (RDP, the default theorem) agrees that the GP arm's landscape costs ε = 8
    landscape = load_family(DIGITS).at(gp)
    epsilon, note = arm_epsilon(landscape, Setting("gp", run_count=run_count), 2.0, 0.75, 1e-5)
    assert note == "" and epsilon is not None
    assert epsilon == pytest.approx(8.0, abs=1e-3) and epsilon <= 8.0


def test_arm_sigma_refuses_unreachable_epsilon_and_bad_arguments() -> None:
    with pytest.raises(CalibrationError, match="unreachable"):
        arm_sigma(0.5, 1e-5, geometric(0.001), 2.0, 0.75, PLAN)
    with pytest.raises(ValueError, match="epsilon must be a finite number > 0"):
        arm_sigma(-1.0, 1e-5, geometric(0.05), 1.0, 1.0, PLAN)
    with pytest.raises(ValueError, match="run_count must be a RunCountDistribution"):
        arm_sigma(8.0, 1e-5, 20, 1.0, 1.0, PLAN)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        arm_sigma(8.0, 1e-5, geometric(0.05), 0.5, 1.0, PLAN)

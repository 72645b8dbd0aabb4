"""Searches over batch size and epochs: each candidate trains at its own σ_i (dphypo.train.heterogeneous)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dphypo import tune
from dphypo.api.search import accounted_search, plan_privacy_axes
from dphypo.privacy import RepeatAndSelect, account, geometric
from dphypo.search.records import Run, RunMisuse
from dphypo.space import Grid, IntGrid, SearchSpace
from dphypo.strategies import Uniform
from dphypo.train import DPSGD, DPSGDObjective, load_dataset
from dphypo.train.heterogeneous import HeterogeneousDPSGD
from dphypo.train.mechanism import DPSGDMechanism, DPSGDRun

SPLITS = load_dataset("digits")
N_TRAIN, N_VAL = len(SPLITS.y_train), len(SPLITS.y_val)
TRAINING = DPSGD(batch_size=64, epochs=1, n_train=N_TRAIN, n_val=N_VAL, score_noise=0.02 * N_VAL)


def space(batches: tuple[int, ...] = (32, 128), epochs: tuple[int, ...] = (1, 2)) -> SearchSpace:
    return SearchSpace({"lr": Grid((0.1, 0.5), scale="log"), "clip": Grid((1.0, 3.0)),
                        "batch": IntGrid(batches, scale="log"), "epochs": IntGrid(epochs)},
                       privacy_roles={"batch": "batch_size", "epochs": "epochs"})


@pytest.fixture(scope="module")
def planned() -> tuple[HeterogeneousDPSGD, object]:
    search = accounted_search(Uniform(), geometric(1 / 10))
    return plan_privacy_axes(space(), TRAINING, search, epsilon=8.0, delta=1e-5)


def test_every_grid_point_trains_under_its_settings_sigma_and_is_dominated(planned) -> None:
    mechanism, privacy = planned
    grid = space()
    base = privacy.base
    assert np.array_equal(mechanism.rdp(base.orders).epsilons, base.epsilons)  # accounted as the reference
    for index in range(grid.size):
        params = grid.params(index)
        own = mechanism.for_point(index)
        assert (own.batch_size, own.epochs) == (params["batch"], params["epochs"])
        assert own is mechanism.for_params(params)
        assert own.sigma == mechanism.plan.sigmas[mechanism.point_setting[index]]
        # the training layer's own curve (DPSGDMechanism's arithmetic) is under the reference at every order
        assert np.all(own.rdp(base.orders).epsilons <= base.epsilons * (1 + 1e-12) + 1e-15)
    # a candidate with fewer steps at the same rate needs less noise than the reference (the costliest setting)
    sigmas = {(m.batch_size, m.epochs): m.sigma for m in mechanism.mechanisms}
    assert sigmas[(128, 1)] < sigmas[(128, 2)] == pytest.approx(mechanism.plan.sigma_ref)


def test_a_candidate_mechanism_costlier_than_the_reference_is_refused(planned) -> None:
    mechanism, _ = planned
    cheaper = [dataclasses.replace(m, sigma=m.sigma * 0.9) for m in mechanism.mechanisms]
    with pytest.raises(ValueError, match="spends more per run than the reference"):
        dataclasses.replace(mechanism, mechanisms=tuple(cheaper))


def test_a_run_opens_under_its_own_mechanism_and_the_objective_sees_lr_and_clip_only(planned) -> None:
    mechanism, privacy = planned
    grid = space()
    index = next(i for i in range(grid.size) if grid.params(i)["batch"] == 32)
    context = Run(0, 123, privacy, index, mechanism).open()
    assert isinstance(context, DPSGDRun) and context.dpsgd is mechanism.for_point(index)
    params = grid.params(index)
    assert context.training_params(params) == {"lr": params["lr"], "clip": params["clip"]}
    with pytest.raises(RunMisuse, match="but the run's mechanism trains with batch_size=32"):
        context.training_params({**params, "batch": 128})


def test_a_4d_search_releases_within_epsilon_recomputable_from_the_reference() -> None:
    grid = space()
    result = tune(DPSGDObjective("digits", "digits-mlp"), grid, TRAINING, epsilon=8.0, runs=geometric(1 / 6),
                  seed=3)
    release = result.release
    assert release.epsilon <= 8.0 and release.params is not None
    mechanism = release.mechanism
    assert isinstance(mechanism, HeterogeneousDPSGD)
    # a reader recomputes the total from the reference run alone (q, steps, score noise, σ_ref)
    reference = mechanism.plan.reference
    assert reference.steps == mechanism.for_params({"batch": 128, "epochs": 2}).steps  # the costliest setting
    ref_run = DPSGDMechanism(sigma=mechanism.plan.sigma_ref, batch_size=128, epochs=2, n_train=N_TRAIN, n_val=N_VAL,
                             score_noise=0.02 * N_VAL)
    again = account(ref_run.rdp(), RepeatAndSelect(geometric(1 / 6)), 1e-5, profile=ref_run.profile())
    assert again.epsilon == pytest.approx(release.epsilon, rel=1e-6)  # the plan adds a profile slack ≤ 1e-15 in δ
    shown = mechanism.describe_point(release.params)
    assert (shown["batch_size"], shown["epochs"]) == (release.params["batch"], release.params["epochs"])
    # every run trained under its own setting (the budget check of each run compared it with that mechanism)
    assert all(t.error is None for t in result.history.trials)


def test_privacy_axes_need_epsilon_and_refuse_a_noise_axis() -> None:
    search = accounted_search(Uniform(), geometric(0.1))
    with pytest.raises(ValueError, match="needs epsilon"):
        plan_privacy_axes(space(), TRAINING, search, epsilon=None, delta=1e-5)
    noisy = SearchSpace({"lr": Grid((0.1, 0.5)), "clip": Grid((1.0, 2.0)), "sigma": Grid((1.0, 2.0))},
                        privacy_roles={"sigma": "noise_multiplier"})
    with pytest.raises(ValueError, match="'noise_multiplier' is not trained"):
        plan_privacy_axes(noisy, TRAINING, search, epsilon=8.0, delta=1e-5)
    with pytest.raises(ValueError, match="batch"):
        plan_privacy_axes(space(batches=(32, 5000)), TRAINING, search, epsilon=8.0, delta=1e-5)


def test_subsampled_tuning_refuses_privacy_axes() -> None:
    from dphypo import tune_subsampled

    with pytest.raises(ValueError, match=r"needs dphypo\.tune"):
        tune_subsampled(DPSGDObjective("digits", "digits-mlp"), space(), TRAINING, epsilon=8.0, fraction=0.5)

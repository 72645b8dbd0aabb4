"""The DP-SGD objective: real (tiny) trainings on digits, divergence as DataFailure, reproducibility, the Tuner."""

from __future__ import annotations

import json
import math
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from dphypo.privacy import PrivacyAccounting, RepeatAndSelect, geometric
from dphypo.search.records import DataFailure, Run
from dphypo.search.tuner import Tuner
from dphypo.space import Grid, SearchSpace
from dphypo.train.data import load_dataset
from dphypo.train.mechanism import DPSGDMechanism
from dphypo.train.objective import DPSGDObjective, TrainedModel, _train, evaluate_accuracy

SPLITS = load_dataset("digits")
MECHANISM = DPSGDMechanism.from_splits(SPLITS, sigma=1.0, batch_size=64, epochs=2, score_noise=2.0)
OBJECTIVE = DPSGDObjective("digits", "digits-mlp", MECHANISM, device="cpu")
GOOD = {"lr": 1.0, "clip": 1.0}


def _run(seed: int, mechanism: DPSGDMechanism = MECHANISM) -> Run:
    return Run(0, seed, None, 0, mechanism).open()


@pytest.fixture(scope="module")
def trained() -> tuple[float, TrainedModel, Run]:
    run = _run(7)
    score, model = OBJECTIVE(GOOD, run)
    return score, model, run


def test_one_dp_sgd_run_scores_and_returns_a_model(trained, tmp_path: Path) -> None:
    score, model, run = trained
    # 2 epochs of DP-SGD on digits reach ~0.8-0.9; the score noise (std 2 examples / 359) is tiny
    assert math.isfinite(score) and 0.6 < score < 1.0
    run.check()  # the engine's history is within the mechanism
    assert run.engines[0].accountant.history == [(1.0, MECHANISM.sample_rate, MECHANISM.steps)]
    assert isinstance(model, TrainedModel) and model.params == GOOD
    assert not any(k.startswith("_module") for k in model.state_dict)  # unwrapped from Opacus
    assert all(t.device.type == "cpu" for t in model.state_dict.values())
    test_acc = model.test_accuracy()
    assert 0.6 < test_acc <= 1.0
    weights, sidecar = model.save(tmp_path / "best.pt")
    assert weights.is_file() and sidecar == tmp_path / "best.json"
    meta = json.loads(sidecar.read_text())
    assert meta["model_name"] == "digits-mlp" and meta["params"] == GOOD and meta["dataset"] == "digits"
    assert TrainedModel.load(weights).test_accuracy(SPLITS) == test_acc


def test_score_is_the_noisy_validation_accuracy(trained) -> None:
    score, model, _ = trained
    exact = evaluate_accuracy(model.module(), SPLITS.x_val, SPLITS.y_val, "cpu") / len(SPLITS.y_val)
    assert score != exact  # noise was added ...
    assert abs(score - exact) < 6 * MECHANISM.score_noise / MECHANISM.n_val  # ... of the planned size


def test_same_run_seed_gives_identical_score_and_weights(trained) -> None:
    score, model, _ = trained
    again, model_again = OBJECTIVE(GOOD, _run(7))
    assert again == score
    assert all(torch.equal(model.state_dict[k], model_again.state_dict[k]) for k in model.state_dict)
    other, _ = OBJECTIVE(GOOD, _run(8))
    assert other != score


def test_unprivatised_score_is_the_exact_validation_accuracy() -> None:
    mechanism = DPSGDMechanism(sigma=1.0, batch_size=64, epochs=1,
                               n_train=len(SPLITS.y_train))  # no score noise, no n_val
    score, model = DPSGDObjective("digits", None, mechanism)(GOOD, _run(2, mechanism))
    assert score == evaluate_accuracy(model.module(), SPLITS.x_val, SPLITS.y_val, "cpu") / len(SPLITS.y_val)


def test_a_noisy_update_that_overflows_is_a_data_failure() -> None:
    with pytest.raises(DataFailure, match="non-finite model parameters after the noisy update of step 0 "):
        OBJECTIVE({"lr": 1e12, "clip": 1e30}, _run(0))  # noise σ·C = 1e30 times lr 1e12: the first update overflows


def test_a_record_with_a_non_finite_gradient_is_dropped_not_a_data_failure() -> None:
    """Privacy rule 5: a NaN record contributes zero before clipping; the run equals one where it has no gradient."""
    mechanism = DPSGDMechanism(sigma=1.0, batch_size=4, epochs=3, n_train=16, n_val=1)

    def train(x: torch.Tensor) -> list[torch.Tensor]:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10, bias=False))
        loader = DataLoader(TensorDataset(x, torch.arange(16) % 10), batch_size=4)
        wrapped, optimizer, dp_loader = _run(0, mechanism).make_private(
            model, torch.optim.SGD(model.parameters(), lr=0.1), loader, max_grad_norm=1.0
        )
        _train(wrapped, optimizer, dp_loader, mechanism.epochs, torch.device("cpu"))
        return [p.detach().clone() for p in model.parameters()]

    x = torch.rand(16, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    x[3] = 0.0  # a bias-free linear model: a zero input has a zero gradient, exactly what a dropped record adds
    clean = train(x)
    for value in (math.nan, math.inf):
        x[3, 0, 2, 2] = value
        poisoned = train(x)
        assert all(torch.equal(a, b) for a, b in zip(clean, poisoned, strict=True))
    x[3] = 3e38  # its loss overflows to inf: the loss is not inspected, so this is no failure either
    assert all(torch.isfinite(p).all() for p in train(x))


def test_empty_poisson_batches_are_not_failures() -> None:
    """q = 1/5 on 5 examples: about a third of the batches are empty; they take a noise-only step."""
    mechanism = DPSGDMechanism(sigma=1.0, batch_size=1, epochs=4, n_train=5, n_val=1)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10))
    g = torch.Generator().manual_seed(0)
    loader = DataLoader(TensorDataset(torch.rand(5, 1, 8, 8, generator=g), torch.arange(5)), batch_size=1)
    run = _run(3, mechanism)
    wrapped, optimizer, dp_loader = run.make_private(
        model, torch.optim.SGD(model.parameters(), lr=0.1), loader, max_grad_norm=1.0
    )
    sizes = [len(y) for _ in range(mechanism.epochs) for _, y in dp_loader]
    assert 0 in sizes  # the setting does produce empty batches (seeded, so this is deterministic)
    _train(wrapped, optimizer, dp_loader, mechanism.epochs, torch.device("cpu"))
    assert all(torch.isfinite(p).all() for p in wrapped.parameters())
    assert run.engines[0].accountant.history == [(1.0, mechanism.sample_rate, mechanism.steps)]


@pytest.mark.parametrize(
    ("params", "match"),
    [({"lr": 1.0}, "missing clip"), ({"lr": 1.0, "clip": 1.0, "batch_size": 32}, "batch_size"),
     ({"lr": -1.0, "clip": 1.0}, r"params\['lr'\]"), ({"lr": 1.0, "clip": math.nan}, r"params\['clip'\]")],
)
def test_hyperparameters_are_validated(params: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        OBJECTIVE(params, _run(0))


def test_configuration_errors() -> None:
    wrong_sizes = DPSGDMechanism(sigma=1.0, batch_size=64, epochs=1, n_train=1000, n_val=359)
    with pytest.raises(ValueError, match="from_splits"):
        DPSGDObjective("digits", None, wrong_sizes)(GOOD, _run(0, wrong_sizes))
    with pytest.raises(ValueError, match="same DPSGDMechanism"):
        OBJECTIVE(GOOD, _run(0, wrong_sizes))
    with pytest.raises(ValueError, match="takes inputs"):
        DPSGDObjective("digits", "mnist-cnn", MECHANISM)
    with pytest.raises(ValueError, match="optimizer"):
        DPSGDObjective("digits", None, MECHANISM, optimizer="lbfgs")
    with pytest.raises(TypeError, match="mechanism"):
        DPSGDObjective("digits", None, "mechanism")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no DPSGDMechanism"):
        DPSGDObjective("digits")(GOOD, _run(0, None))
    assert DPSGDObjective("mnist-subset", None, MECHANISM).model == "mnist-cnn"


def test_objective_without_a_mechanism_trains_under_the_runs_mechanism() -> None:
    score, model = DPSGDObjective("digits")(GOOD, _run(0, MECHANISM))
    assert 0.0 <= score <= 1.0 and model.params == GOOD


def test_objective_pickles_for_process_pools() -> None:
    clone = pickle.loads(pickle.dumps(OBJECTIVE))
    assert clone == OBJECTIVE


def test_adam_variant_trains() -> None:
    objective = DPSGDObjective("digits", None, MECHANISM, optimizer="adam", device="cpu")
    score, _ = objective({"lr": 0.01, "clip": 1.0}, _run(1))
    assert 0.5 < score < 1.0


def test_end_to_end_private_search_on_digits() -> None:
    space = SearchSpace({"lr": Grid((0.5, 2.0), scale="log"), "clip": Grid((0.5, 1.0))})
    privacy = PrivacyAccounting(RepeatAndSelect(geometric(0.5)), MECHANISM.rdp(),
                                1e-5)  # (C, c) = (1, 1): the uniform default's
    result = Tuner(OBJECTIVE, space, privacy, mechanism=MECHANISM, seed=0).run()
    release, history = result.release, result.history
    assert history.run_count == len(history.trials) >= 2  # seed 0 draws T = 5: "best" means something
    assert isinstance(release.artifact, TrainedModel)
    best = history.trials[history.best_number]
    assert release.score == best.score == max(t.score for t in history.trials)
    assert release.params == best.params == release.artifact.params
    assert math.isfinite(release.epsilon) and release.epsilon > 0
    assert release.epsilon > privacy.account().base_epsilon  # the random number of runs costs something
    assert 0.5 < release.artifact.test_accuracy() <= 1.0
    assert np.isfinite([t.score for t in history.trials]).all()

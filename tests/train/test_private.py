"""DP-SGD plan arithmetic against real Opacus objects, the budget check on real runs, and the noisy score."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from opacus import PrivacyEngine
from opacus.data_loader import DPDataLoader
from torch.utils.data import DataLoader, TensorDataset

from dphypo.privacy import DEFAULT_ORDERS, dpsgd_rdp, gaussian_rdp
from dphypo.search.records import Run
from dphypo.train.opacus import quiet_opacus
from dphypo.train.plan import BudgetExceeded, DPSGDPlan, check_budget, private_accuracy


def _plan(**overrides) -> DPSGDPlan:
    fields = {"sigma": 1.0, "batch_size": 8, "epochs": 2, "n_train": 64, "n_val": 100, "score_noise": None}
    return DPSGDPlan(**{**fields, **overrides})


def _loader(n: int, batch_size: int, seed: int = 0) -> DataLoader:
    g = torch.Generator().manual_seed(seed)
    dataset = TensorDataset(torch.randn(n, 4, generator=g), torch.randint(0, 3, (n,), generator=g))
    return DataLoader(dataset, batch_size=batch_size)


def _train(run: Run, *, epochs: int, n: int | None = None, batch_size: int | None = None) -> list[torch.Tensor]:
    """A real (tiny) DP-SGD training through ``Run.make_private``; returns the final parameters."""
    plan = run.plan
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    loader = _loader(n or plan.n_train, batch_size or plan.batch_size)
    model, optimizer, loader = run.make_private(model, optimizer, loader, max_grad_norm=1.0)
    criterion = torch.nn.CrossEntropyLoss()
    with quiet_opacus():
        for _ in range(epochs):
            for x, y in loader:
                optimizer.zero_grad()
                criterion(model(x), y).backward()
                optimizer.step()
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize(("n_train", "batch_size"), [(64, 8), (1079, 64), (1000, 3), (93 * 4, 4), (60000, 256)])
def test_plan_matches_opacus_data_loader(n_train: int, batch_size: int) -> None:
    """sample_rate / steps are what Opacus uses: DPDataLoader rate 1/len(loader), int(1/rate) batches per epoch."""
    plan = _plan(n_train=n_train, batch_size=batch_size)
    plain = DataLoader(TensorDataset(torch.zeros(n_train, 1)), batch_size=batch_size)
    dp = DPDataLoader.from_data_loader(plain)
    assert plan.batches_per_epoch == len(plain) == math.ceil(n_train / batch_size)
    assert dp.sample_rate == 1 / len(plain)
    assert plan.steps_per_epoch == len(dp)
    assert plan.sample_rate == 1 / len(dp)  # the rate PrivacyEngine.make_private books in the accountant
    assert plan.sample_rate >= dp.sample_rate  # never below the true Poisson rate
    assert plan.steps == plan.epochs * len(dp)


def test_opacus_rounding_quirk_is_accounted() -> None:
    """93 batches: Opacus yields 92 per epoch and books q = 1/92; a real run's history equals the plan's numbers."""
    plan = _plan(n_train=93 * 2, batch_size=2, epochs=1)
    assert (plan.batches_per_epoch, plan.steps_per_epoch) == (93, 92)
    run = Run(0, 1, None, 0, plan)
    _train(run, epochs=1)
    assert run.engines[0].accountant.history == [(plan.sigma, plan.sample_rate, plan.steps)]
    run.check_budget()


def test_rdp_is_dpsgd_plus_gaussian_score() -> None:
    plan = _plan(score_noise=4.0)
    training = dpsgd_rdp(1.0, 1 / 8, 16)
    np.testing.assert_array_equal(plan.training_rdp().epsilons, training.epsilons)
    np.testing.assert_allclose(plan.rdp().epsilons, training.epsilons + DEFAULT_ORDERS / (2 * 4.0**2), rtol=1e-12)
    np.testing.assert_allclose(plan.rdp().epsilons, training.epsilons + gaussian_rdp(4.0).epsilons, rtol=1e-12)
    assert np.array_equal(_plan().rdp().epsilons, _plan().training_rdp().epsilons)
    orders = [2.0, 8.0]
    assert plan.rdp(orders).orders.tolist() == orders


def test_real_run_within_budget_passes_and_history_matches_plan() -> None:
    plan = _plan()
    run = Run(0, 5, None, 0, plan)
    _train(run, epochs=plan.epochs)
    assert len(run.engines) == 1
    assert run.engines[0].accountant.history == [(1.0, plan.sample_rate, plan.steps)]
    run.check_budget()
    check_budget(run.engines[0], plan)


def test_run_training_an_extra_epoch_exceeds_the_budget() -> None:
    plan = _plan()
    run = Run(0, 5, None, 0, plan)
    _train(run, epochs=plan.epochs + 1)
    with pytest.raises(BudgetExceeded, match=r"planned sigma=1, q=0.125, steps=16.*total steps 24"):
        run.check_budget()


def test_run_with_smaller_sigma_than_planned_exceeds_the_budget() -> None:
    run = Run(0, 5, None, 0, _plan(sigma=0.8))  # trains with sigma 0.8 ...
    _train(run, epochs=2)
    checked_against = dataclasses.replace(run, plan=_plan(sigma=1.0))  # ... but the search accounted sigma 1
    with pytest.raises(BudgetExceeded, match=r"sigma=0\.8"):
        checked_against.check_budget()
    run.check_budget()  # against its own plan it is fine


def test_larger_loader_sample_rate_exceeds_budget() -> None:
    """A history booked at a larger q than planned (same steps) is caught: RDP grows with q."""
    with quiet_opacus():
        engine = PrivacyEngine(accountant="rdp")
    plan = _plan()
    engine.accountant.history = [(plan.sigma, 2 * plan.sample_rate, plan.steps)]
    with pytest.raises(BudgetExceeded):
        check_budget(engine, plan)
    engine.accountant.history = []
    check_budget(engine, plan)  # nothing spent
    engine.accountant.history = [(plan.sigma, plan.sample_rate, plan.steps - 1), (plan.sigma, plan.sample_rate, 1)]
    check_budget(engine, plan)  # split history composes to exactly the plan


def test_same_run_seed_same_training_and_global_rng_untouched() -> None:
    state = torch.random.get_rng_state()
    a = _train(Run(0, 11, None, 0, _plan()), epochs=2)
    assert torch.equal(state, torch.random.get_rng_state())  # noise and Poisson sampling use the run's generators
    b = _train(Run(0, 11, None, 0, _plan()), epochs=2)
    c = _train(Run(0, 12, None, 0, _plan()), epochs=2)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(torch.equal(x, y) for x, y in zip(a, c, strict=True))


def test_make_private_rejects_mismatched_loader_missing_plan_and_second_engine() -> None:
    run = Run(0, 0, None, 0, _plan())
    with pytest.raises(ValueError, match="data_loader has 4 batches"):
        _train(run, epochs=1, batch_size=16)
    with pytest.raises(ValueError, match=r"run\.plan must be a DPSGDPlan"):
        _train(Run(0, 0, None, 0, None), epochs=1, n=64, batch_size=8)
    _train(run, epochs=1)
    with pytest.raises(ValueError, match="already called"):
        _train(run, epochs=1)
    with pytest.raises(ValueError, match="max_grad_norm"):
        Run(0, 0, None, 0, _plan()).make_private(torch.nn.Linear(1, 1), None, _loader(64, 8), max_grad_norm=0.0)


@pytest.mark.parametrize(
    ("field", "value"),
    [("sigma", 0.0), ("sigma", math.inf), ("batch_size", 0), ("epochs", 1.5), ("n_train", -1), ("n_val", 0),
     ("score_noise", 0.0), ("batch_size", 65), ("epochs", True)],
)
def test_plan_validation_names_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        _plan(**{field: value})


def test_n_val_is_needed_only_with_score_noise() -> None:
    with pytest.raises(ValueError, match="n_val must be given when score_noise"):
        _plan(n_val=None, score_noise=1.0)
    plan = _plan(n_val=None)
    with pytest.raises(ValueError, match="n_val"):
        private_accuracy(3, plan, np.random.default_rng(0))


def test_private_accuracy_statistics() -> None:
    plan = _plan(n_val=200, score_noise=5.0)
    rng = np.random.default_rng(0)
    draws = np.array([private_accuracy(150, plan, rng) for _ in range(20000)])
    se = 5.0 / 200 / math.sqrt(draws.size)
    assert abs(draws.mean() - 0.75) < 5 * se  # unbiased
    assert abs(draws.std() / (5.0 / 200) - 1) < 0.03
    assert private_accuracy(150, _plan(n_val=200), rng) == 0.75  # no score noise: exact
    clipped = [private_accuracy(200, plan, rng, clip=True) for _ in range(200)]
    assert max(clipped) == 1.0 and min(clipped) <= 1.0
    with pytest.raises(ValueError, match="correct"):
        private_accuracy(-1, plan, rng)


def test_dpsgd_plan_curve_and_profile_describe_the_same_mechanism() -> None:
    plan = DPSGDPlan(sigma=1.5, batch_size=64, epochs=2, n_train=1000, n_val=300, score_noise=6.0)
    assert plan.rdp().mechanism == plan.profile(1e-2).mechanism is not None
    assert plan.training_rdp().mechanism != plan.rdp().mechanism


# -- Opacus's secure mode ----------------------------------------------------------------------------------------
def test_secure_mode_without_torchcsprng_fails_in_one_line_before_training(monkeypatch) -> None:
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "torchcsprng" else real_find_spec(name, *a))
    run = Run(0, 5, None, 0, _plan(secure_mode=True))
    with pytest.raises(ValueError, match="secure_mode needs Opacus's CSPRNG package torchcsprng") as caught:
        _train(run, epochs=1)
    assert "\n" not in str(caught.value) and not run.engines


def test_secure_mode_uses_opacus_csprng_for_noise_and_batches(monkeypatch) -> None:
    import importlib.machinery
    import os
    import sys
    import types

    made: list[torch.Generator] = []

    def create_random_device_generator(path: str) -> torch.Generator:  # stands in for torchcsprng's /dev/urandom
        generator = torch.Generator().manual_seed(int.from_bytes(os.urandom(8), "little"))
        made.append(generator)
        return generator

    fake = types.ModuleType("torchcsprng")
    fake.__spec__ = importlib.machinery.ModuleSpec("torchcsprng", None)
    fake.create_random_device_generator = create_random_device_generator
    monkeypatch.setitem(sys.modules, "torchcsprng", fake)
    run = Run(0, 5, None, 0, _plan(secure_mode=True))
    first = _train(run, epochs=1)
    engine = run.engines[0]
    assert engine.secure_mode and made and engine.secure_rng is made[0]
    again = _train(Run(0, 5, None, 0, _plan(secure_mode=True)), epochs=1)
    assert any(not torch.equal(a, b) for a, b in zip(first, again, strict=True))  # nothing seeded from run.seed

"""DP-SGD mechanism arithmetic against real Opacus objects, the budget check on real runs, and the noisy score."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from opacus import PrivacyEngine
from opacus.data_loader import DPDataLoader
from torch.utils.data import DataLoader, TensorDataset

from dphypo.privacy import DEFAULT_ORDERS, dpsgd_rdp, gaussian_rdp
from dphypo.search.records import Run, RunMisuse
from dphypo.train.mechanism import BudgetExceeded, DPSGDMechanism, check_budget, private_accuracy
from dphypo.train.opacus import quiet_opacus
from tests.train._helpers import _loader, _mechanism, _train


@pytest.mark.parametrize(("n_train", "batch_size"), [(64, 8), (1079, 64), (1000, 3), (93 * 4, 4), (60000, 256)])
def test_mechanism_matches_opacus_data_loader(n_train: int, batch_size: int) -> None:
    """sample_rate / steps are what Opacus uses: DPDataLoader rate 1/len(loader), int(1/rate) batches per epoch."""
    mechanism = _mechanism(n_train=n_train, batch_size=batch_size)
    plain = DataLoader(TensorDataset(torch.zeros(n_train, 1)), batch_size=batch_size)
    dp = DPDataLoader.from_data_loader(plain)
    assert mechanism.batches_per_epoch == len(plain) == math.ceil(n_train / batch_size)
    assert dp.sample_rate == 1 / len(plain)
    assert mechanism.steps_per_epoch == len(dp)
    assert mechanism.sample_rate == 1 / len(dp)  # the rate PrivacyEngine.make_private books in the accountant
    assert mechanism.sample_rate >= dp.sample_rate  # never below the true Poisson rate
    assert mechanism.steps == mechanism.epochs * len(dp)


def test_opacus_rounding_quirk_is_accounted() -> None:
    """93 batches: Opacus yields 92 per epoch and books q = 1/92; a real run's history equals the mechanism."""
    mechanism = _mechanism(n_train=93 * 2, batch_size=2, epochs=1)
    assert (mechanism.batches_per_epoch, mechanism.steps_per_epoch) == (93, 92)
    run = Run(0, 1, None, 0, mechanism).open()
    _train(run, epochs=1)
    assert run.engines[0].accountant.history == [(mechanism.sigma, mechanism.sample_rate, mechanism.steps)]
    run.check()


def test_rdp_is_dpsgd_plus_gaussian_score() -> None:
    mechanism = _mechanism(score_noise=4.0)
    training = dpsgd_rdp(1.0, 1 / 8, 16)
    np.testing.assert_array_equal(mechanism.training_rdp().epsilons, training.epsilons)
    np.testing.assert_allclose(mechanism.rdp().epsilons, training.epsilons + DEFAULT_ORDERS / (2 * 4.0**2), rtol=1e-12)
    np.testing.assert_allclose(mechanism.rdp().epsilons, training.epsilons + gaussian_rdp(4.0).epsilons, rtol=1e-12)
    assert np.array_equal(_mechanism().rdp().epsilons, _mechanism().training_rdp().epsilons)
    orders = [2.0, 8.0]
    assert mechanism.rdp(orders).orders.tolist() == orders


def test_real_run_within_budget_passes_and_history_matches_mechanism() -> None:
    mechanism = _mechanism()
    run = Run(0, 5, None, 0, mechanism).open()
    _train(run, epochs=mechanism.epochs)
    assert len(run.engines) == 1
    assert run.engines[0].accountant.history == [(1.0, mechanism.sample_rate, mechanism.steps)]
    run.check()
    check_budget(run.engines[0], mechanism)


def test_run_training_an_extra_epoch_exceeds_the_budget() -> None:
    mechanism = _mechanism()
    run = Run(0, 5, None, 0, mechanism).open()
    _train(run, epochs=mechanism.epochs + 1)
    with pytest.raises(BudgetExceeded, match=r"planned sigma=1, q=0.125, steps=16.*total steps 24"):
        run.check()


def test_run_with_smaller_sigma_than_planned_exceeds_the_budget() -> None:
    run = Run(0, 5, None, 0, _mechanism(sigma=0.8)).open()  # trains with sigma 0.8 ...
    _train(run, epochs=2)
    with pytest.raises(BudgetExceeded, match=r"sigma=0\.8"):  # ... but the search accounted sigma 1
        check_budget(run.engines[0], _mechanism(sigma=1.0))
    run.check()  # against its own mechanism it is fine


def test_larger_loader_sample_rate_exceeds_budget() -> None:
    """A history booked at a larger q than planned (same steps) is caught: RDP grows with q."""
    with quiet_opacus():
        engine = PrivacyEngine(accountant="rdp")
    mechanism = _mechanism()
    engine.accountant.history = [(mechanism.sigma, 2 * mechanism.sample_rate, mechanism.steps)]
    with pytest.raises(BudgetExceeded):
        check_budget(engine, mechanism)
    engine.accountant.history = []
    check_budget(engine, mechanism)  # nothing spent
    sigma, q = mechanism.sigma, mechanism.sample_rate
    engine.accountant.history = [(sigma, q, mechanism.steps - 1), (sigma, q, 1)]
    check_budget(engine, mechanism)  # split history composes to exactly the mechanism


def test_make_private_rejects_mismatched_loader_missing_mechanism_and_second_engine() -> None:
    run = Run(0, 0, None, 0, _mechanism()).open()
    with pytest.raises(ValueError, match="data_loader has 4 batches"):
        _train(run, epochs=1, batch_size=16)
    with pytest.raises(ValueError, match=r"run\.mechanism must be a DPSGDMechanism"):
        _train(Run(0, 0, None, 0, None).open(), epochs=1, n=64, batch_size=8)
    _train(run, epochs=1)
    with pytest.raises(ValueError, match="already called"):
        _train(run, epochs=1)
    with pytest.raises(ValueError, match="max_grad_norm"):
        Run(0, 0, None, 0, _mechanism()).open().make_private(torch.nn.Linear(1, 1), None, _loader(64, 8),
                                                             max_grad_norm=0.0)


@pytest.mark.parametrize(
    ("field", "value"),
    [("sigma", 0.0), ("sigma", math.inf), ("batch_size", 0), ("epochs", 1.5), ("n_train", -1), ("n_val", 0),
     ("score_noise", 0.0), ("batch_size", 65), ("epochs", True)],
)
def test_mechanism_validation_names_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        _mechanism(**{field: value})


def test_n_val_is_needed_only_with_score_noise() -> None:
    with pytest.raises(ValueError, match="n_val must be given when score_noise"):
        _mechanism(n_val=None, score_noise=1.0)
    mechanism = _mechanism(n_val=None)
    with pytest.raises(ValueError, match="n_val"):
        private_accuracy(3, mechanism, np.random.default_rng(0))


def test_private_accuracy_statistics() -> None:
    mechanism = _mechanism(n_val=200, score_noise=5.0)
    rng = np.random.default_rng(0)
    draws = np.array([private_accuracy(150, mechanism, rng) for _ in range(20000)])
    se = 5.0 / 200 / math.sqrt(draws.size)
    assert abs(draws.mean() - 0.75) < 5 * se  # unbiased
    assert abs(draws.std() / (5.0 / 200) - 1) < 0.03
    assert private_accuracy(150, _mechanism(n_val=200), rng) == 0.75  # no score noise: exact
    clipped = [private_accuracy(200, mechanism, rng, clip=True) for _ in range(200)]
    assert max(clipped) == 1.0 and min(clipped) <= 1.0
    with pytest.raises(ValueError, match="correct"):
        private_accuracy(-1, mechanism, rng)


def test_dpsgd_mechanism_curve_and_profile_describe_the_same_mechanism() -> None:
    mechanism = DPSGDMechanism(sigma=1.5, batch_size=64, epochs=2, n_train=1000, n_val=300, score_noise=6.0)
    assert mechanism.rdp().event == mechanism.profile(1e-2).event is not None
    assert mechanism.training_rdp().event != mechanism.rdp().event




# -- Opacus options the run context exposes: per-sample gradient modes, BatchMemoryManager -----------------------
def _model() -> torch.nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(4, 3))


def test_ghost_clipping_and_unknown_modes_are_refused_and_recorded() -> None:
    """Ghost clipping's second backward pass cannot drop a record with a non-finite gradient (privacy rule 5)."""
    for mode, match in (("ghost", "ghost clipping's second backward pass"), ("fast", "grad_sample_mode must be")):
        run = Run(0, 5, None, 0, _mechanism()).open()
        model = _model()
        with pytest.raises(RunMisuse, match=match):
            run.make_private(model, torch.optim.SGD(model.parameters(), lr=0.1), _loader(64, 8), max_grad_norm=1.0,
                             grad_sample_mode=mode)
        with pytest.raises(RunMisuse):
            run.check(finished=True)  # the misuse was recorded on the run: the search stops


@pytest.mark.parametrize("mode", ["hooks", "functorch", "ew"])
def test_every_mode_drops_a_record_with_a_non_finite_gradient(mode: str) -> None:
    mechanism = _mechanism(n_train=64, batch_size=32, epochs=1)
    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(0))
    x[5] = math.nan
    run = Run(0, 5, None, 0, mechanism).open()
    model = _model()
    wrapped, optimizer, loader = run.make_private(
        model, torch.optim.SGD(model.parameters(), lr=0.5),
        torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, torch.arange(64) % 3), batch_size=32),
        max_grad_norm=1.0, grad_sample_mode=mode)
    with quiet_opacus():
        for xb, yb in loader:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(wrapped(xb), yb).backward()
            optimizer.step()
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_a_physical_batch_cap_steps_once_per_logical_batch_within_the_budget() -> None:
    """BatchMemoryManager splits each Poisson batch; the optimizer still takes exactly the planned steps."""
    mechanism = _mechanism(n_train=64, batch_size=32, epochs=2)
    run = Run(0, 5, None, 0, mechanism).open()
    model = _model()
    wrapped, optimizer, loader = run.make_private(model, torch.optim.SGD(model.parameters(), lr=0.5),
                                                  _loader(64, 32), max_grad_norm=1.0, max_physical_batch_size=4)
    physical = []
    with quiet_opacus():
        for _ in range(mechanism.epochs):
            for x, y in loader:
                physical.append(len(x))
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(wrapped(x), y).backward()
                optimizer.step()
    assert max(physical) <= 4 and len(physical) > mechanism.steps  # chunks of at most 4 examples
    assert run.engines[0].accountant.history == [(1.0, mechanism.sample_rate, mechanism.steps)]
    run.check()
    with pytest.raises(RunMisuse, match="max_physical_batch_size must be a positive integer"):
        Run(0, 5, None, 0, mechanism).open().make_private(_model(), torch.optim.SGD(_model().parameters(), lr=0.1),
                                                          _loader(64, 32), max_grad_norm=1.0,
                                                          max_physical_batch_size=0)
